"""One node at a time through the C runtime: the harness of the kernel tests.

:func:`build` compiles each node exactly as the C linker compiles a graph (a
one-step schedule for the runtime's interpreter, see
``tenure/linkers/c/module.py``) and returns its runners by entry name::

    built = build({"exp_f64": node, ...})
    built["exp_f64"](*inputs, out=None)      # or built.exp_f64(...)

``inputs`` are all of the node's inputs, by position (at a constant's
position anything goes: the node holds the value).  Without ``out`` the step
runs as in a schedule: its output is a new array, or the destroyed input of
an in-place op when that fits.  With ``out`` the kernel alone writes into it
(``Schedule.kernel``), checking it as it checks any output, and returns it.

The loops of all the nodes are requested before any node is compiled, in
chunks, so that they build in a few loop libraries at once (the C linker's
background pool) instead of one per node.
"""

from __future__ import annotations

from collections.abc import Mapping

from tenure.linkers.c import elemwise, kernels
from tenure.linkers.c import reduce as creduce
from tenure.linkers.c.linker import CLinker, CThunk
from tenure.linkers.c.module import step_kind
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Constant

#: loops per library: small enough that the pool's two threads share the work
CHUNK = 120


class NodeRunner:
    """One node compiled on its own: ``runner(*inputs, out=None)``."""

    def __init__(self, name: str, node: Apply, thunk: CThunk):
        if not isinstance(thunk, CThunk) or thunk.graph.kinds != [step_kind(node)]:
            raise AssertionError(f"{name}: {node} did not compile to one C step "
                                 f"({getattr(thunk.graph, 'kinds', None)})")
        self.name = name
        self.node = node
        self.thunk = thunk

    def __call__(self, *inputs, out=None):
        if len(inputs) != len(self.node.inputs):
            raise TypeError(f"{self.name}: expected {len(self.node.inputs)} input(s), "
                            f"got {len(inputs)}")
        if out is not None:   # (a step compiled into a graph module has no kernel() to call)
            return self.thunk._run.kernel(0, tuple(inputs), out)
        values = [v for v, var in zip(inputs, self.node.inputs) if not isinstance(var, Constant)]
        return self.thunk(values)[0]


class Built(dict):
    """Runners by entry name, also as attributes."""

    def __init__(self, *args):
        super().__init__(*args)
        self.__dict__ = self


def _loop_kernels(node: Apply) -> list:
    kind = step_kind(node)
    family = {"elemwise": elemwise, "reduce": creduce}.get(kind)
    return [] if family is None else [family.loop_kernel(node)]


def compile_node(name: str, node: Apply) -> NodeRunner:
    """``node`` as a one-step graph through the C linker."""
    fgraph = FunctionGraph([v for v in node.inputs if not isinstance(v, Constant)],
                           list(node.outputs))
    return NodeRunner(name, node, CLinker().make_thunk(fgraph, keep_outputs=set()))


def build(nodes: Apply | Mapping[str, Apply]) -> Built:
    """A runner per node (``{"run": node}`` for a single node)."""
    nodes = dict(nodes) if isinstance(nodes, Mapping) else {"run": nodes}
    loops = list({loop.key: loop for node in nodes.values()
                  for loop in _loop_kernels(node)}.values())
    for start in range(0, len(loops), CHUNK):
        kernels.request(loops[start:start + CHUNK])
    return Built((name, compile_node(name, node)) for name, node in nodes.items())
