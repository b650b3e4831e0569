"""Ops that own inner graphs: the base class and its rules.

An op such as a loop (``scan``) or a graph applied as a single op holds whole
graphs of its own, as :class:`~tenure.symbolic.fgraph.FunctionGraph`\\ s.
Comparing, hashing, copying and pickling such an op must look at those
graphs' structure, not at the Python objects holding them; these are the rules
:class:`OpWithInnerGraphs` implements once for every such op:

- **defined by**: its ``inner_graphs`` (a tuple of FunctionGraphs, given at
  construction) and, as for every op, the attributes its ``__props__`` name
  (which must not include the inner graphs).
- **equality and hash**: two ops are equal when they are of the same type,
  their props are equal and their inner graphs are structurally equal
  (:func:`graph_signature`: the same input types, the same ops applied to the
  same inputs in the same pattern, equal constants; names and object
  identities do not matter).  Equal nodes then merge as they do for any op.
- **immutability**: an op's inner graphs do not change once it is applied
  (its hash is computed from them): to rewrite them, :meth:`clone` first.
- **cloning**: :meth:`OpWithInnerGraphs.clone` returns an equal op whose
  inner graphs are fresh copies (new variables and nodes), so a change to one
  is never seen by the other.
- **pickling**: an inner graph is stored as its inputs and outputs and built
  again on loading, without features (they belong to a compilation).
- **caches**: what a subclass computes from its inner graphs (a compiled
  thunk) goes in attributes named in ``_cache_attrs``: never compared,
  copied by :meth:`clone` or pickled, and reset by :meth:`_reset_caches`.

How an inner graph runs is the linker's business, as it is for the outer
graph: this layer knows only its structure.  An op's ``perform`` runs an inner
graph through :func:`compile_inner_graph`, which the function layer provides
(:func:`register_inner_compiler`: this layer sits below it and never imports
it), with the mode the compiling linker chose for inner graphs.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Constant, Op


#: ``compile(fgraph, mode) -> step``, registered by the function layer
_inner_compiler = None


def register_inner_compiler(compile) -> None:
    """Make ``compile(fgraph, mode)`` what :func:`compile_inner_graph` uses:
    it returns ``step(*values) -> list of output values`` computing
    ``fgraph``'s outputs from its inputs (``mode`` None: the default mode).

    The step also has ``step.run_steps(args, reads, writes, cond, first,
    stop)``: a loop's steps ``first..stop-1`` run in compiled code with no
    Python between them (the C runtime's ``src/loop.c`` says what the
    arguments mean), returning ``(t, fired, bad_write, bad_value)``, or
    None when they cannot be run that way (the loop then calls the step
    once per step)."""
    global _inner_compiler
    _inner_compiler = compile


def compile_inner_graph(fgraph: FunctionGraph, mode=None):
    """``fgraph`` compiled into ``step(*values) -> [outputs]`` (see
    :func:`register_inner_compiler`).  The step may return buffers it reuses
    on its next call: a caller keeps what it needs by copying."""
    if _inner_compiler is None:
        raise RuntimeError("no inner-graph compiler is registered: import tenure (its "
                           "function layer registers one)")
    return _inner_compiler(fgraph, mode)


#: ``peak(fgraph, input_shapes) -> bytes``, registered by the linkers layer
_inner_planner = None


def register_inner_planner(peak) -> None:
    """Make ``peak(fgraph, input_shapes)`` what :func:`inner_graph_peak` uses:
    the planned peak bytes of one run of ``fgraph`` for inputs of these shapes
    (the memory plan's, :mod:`tenure.linkers.plan`)."""
    global _inner_planner
    _inner_planner = peak


def inner_graph_peak(fgraph: FunctionGraph, input_shapes) -> int:
    """The bytes one run of ``fgraph`` allocates at its peak, for inputs of
    ``input_shapes`` (0 when no planner is registered or a shape is unknown):
    what an op running the graph per step adds to its workspace."""
    if _inner_planner is None or any(shape is None for shape in input_shapes):
        return 0
    return int(_inner_planner(fgraph, list(input_shapes)))


def graph_signature(fgraph: FunctionGraph) -> tuple:
    """A hashable description of ``fgraph``'s structure: equal for two graphs
    exactly when they compute the same thing the same way.

    The input types; every node (in the graph's deterministic toposort) as its
    op and where each of its inputs comes from (an input position, an earlier
    node's output, or a constant's value); and where each output comes from.
    """
    origin = {var: ("input", i) for i, var in enumerate(fgraph.inputs)}
    nodes = []
    for j, node in enumerate(fgraph.toposort()):
        nodes.append((node.op, tuple(_origin(var, origin) for var in node.inputs)))
        for k, out in enumerate(node.outputs):
            origin[out] = ("node", j, k)
    outputs = tuple(_origin(var, origin) for var in fgraph.outputs)
    return tuple(var.type for var in fgraph.inputs), tuple(nodes), outputs


def _origin(var, origin: dict) -> tuple:
    found = origin.get(var)
    if found is not None:
        return found
    if isinstance(var, Constant):
        return ("constant", var.signature())
    # A FunctionGraph has no other roots; should one appear, it is itself
    # (identity), so two graphs over different roots never compare equal.
    return ("root", var)


#: guards the making of each op's ``running`` lock
_LOCKS_MADE = threading.Lock()


class OpWithInnerGraphs(Op):
    """An op that owns inner graphs (see the module notes for its rules).

    Subclasses call ``super().__init__(inner_graphs)`` and implement
    ``make_node`` and ``perform`` as any op does.
    """

    #: attributes holding what is computed from the inner graphs (compiled
    #: thunks): left out of equality, cloning and pickling
    _cache_attrs: tuple[str, ...] = ()
    #: the mode the inner graphs compile with (None: the default mode); the
    #: function compiling the outer graph sets it (:meth:`with_inner_mode`).
    #: Not part of equality
    inner_mode = None
    #: whether ``perform`` runs on the device arrays of a linker that
    #: computes on a device, its inner graphs compiled for that device
    #: (``LinkerEntry.device_loop_linker``); else it runs on host values
    state_on_device = False

    def __init__(self, inner_graphs: Sequence[FunctionGraph]):
        graphs = tuple(inner_graphs)
        for i, graph in enumerate(graphs):
            if not isinstance(graph, FunctionGraph):
                raise TypeError(f"{type(self).__name__}: inner graph {i} must be a "
                                f"FunctionGraph, got {type(graph).__name__}")
        self.inner_graphs = graphs
        self._reset_caches()

    def _reset_caches(self) -> None:
        """Forget what was computed from the inner graphs (after cloning or
        loading: it belonged to other graph objects)."""
        for name in self._cache_attrs:
            setattr(self, name, None)
        self.__dict__.pop("_running", None)

    def running(self) -> threading.Lock:
        """The lock a ``perform`` holds while it runs the inner graphs: their
        compiled functions lend results in buffers they reuse on their next
        call, so two threads running this op at once (Dask's workers, which
        may compute one loop twice) must not interleave their calls."""
        lock = self.__dict__.get("_running")
        if lock is None:
            with _LOCKS_MADE:
                lock = self.__dict__.setdefault("_running", threading.Lock())
        return lock

    def inner_signatures(self) -> tuple:
        """The :func:`graph_signature` of every inner graph."""
        return tuple(graph_signature(graph) for graph in self.inner_graphs)

    def __eq__(self, other) -> bool:
        return (super().__eq__(other)
                and len(self.inner_graphs) == len(other.inner_graphs)
                and self.inner_signatures() == other.inner_signatures())

    def __hash__(self) -> int:
        return hash((super().__hash__(), self.inner_signatures()))

    def with_inner_mode(self, mode) -> OpWithInnerGraphs:
        """This op, its inner graphs compiled with ``mode`` (a fresh clone)."""
        new = self.clone()
        new.inner_mode = mode
        return new

    def clone(self) -> OpWithInnerGraphs:
        """An equal op with its own copies of the inner graphs."""
        # Not copy.copy: that goes through __getstate__, rebuilding graphs only to drop them.
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.inner_graphs = tuple(graph.clone() for graph in self.inner_graphs)
        new._reset_caches()
        return new

    def __getstate__(self) -> dict:
        state = {name: value for name, value in self.__dict__.items()
                 if name not in self._cache_attrs and name != "_running"}
        # A FunctionGraph carries features and client lists: its inputs and
        # outputs are all that defines it.
        state["inner_graphs"] = tuple((list(g.inputs), list(g.outputs))
                                      for g in self.inner_graphs)
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        graphs = state.pop("inner_graphs")
        self.__dict__.update(state)
        self.inner_graphs = tuple(FunctionGraph(inputs, outputs) for inputs, outputs in graphs)
        self._reset_caches()
