"""``lazy_ifelse``: each ``ifelse`` computes only the branch it takes.

==============  ===============  ==================================================
name            phase            what
==============  ===============  ==================================================
lazy_ifelse     specialize       ``IfElse(c, then..., else...)`` ->
                                 ``LazyIfElse{then graph, else graph}(c, ...)``
==============  ===============  ==================================================

An :class:`~tenure.symbolic.ops.ifelse.IfElse` node reads both branches'
values, so as built both are computed.  This rewrite moves each branch's
*own part* -- the nodes whose results nothing reads but that branch of that
node, directly or through other such nodes -- into an inner graph of a
:class:`~tenure.symbolic.ops.ifelse.LazyIfElse`, which runs the chosen
branch alone.  A branch's inner graph takes as inputs what its own part
reads from outside it: the function's inputs and shared variables, and
results the rest of the function reads too, which are computed once,
outside, whichever branch runs.  A branch with no part of its own (its
values computed anyway) still becomes an inner graph that returns its
inputs.

A node with an output the function returns or updates with (a random
draw's new state, say) is never a branch's own: it runs whichever branch is
taken.  The rewrite runs before the in-place phase, so no own node
destroys a value.
"""

from __future__ import annotations

from tenure.rewrites.engine import register_graph_rewrite
from tenure.symbolic.fgraph import OUTPUT, FunctionGraph
from tenure.symbolic.graph import Apply, Constant, clone_get_equiv, io_toposort
from tenure.symbolic.ops.ifelse import IfElse, LazyIfElse

__all__ = ["lazy_ifelse"]


def _own_part(fgraph: FunctionGraph, node: Apply, positions: range) -> set[Apply]:
    """The nodes only the inputs ``positions`` of ``node`` (one branch) read."""
    values = [node.inputs[i] for i in positions]
    own: set[Apply] = set()
    for candidate in reversed(io_toposort(fgraph.inputs, values)):
        if all(_read_only_by(fgraph, out, node, positions, own) for out in candidate.outputs):
            own.add(candidate)
    return own


def _read_only_by(fgraph, var, node, positions, own) -> bool:
    for client, i in fgraph.clients.get(var, ()):
        if client == OUTPUT:
            return False
        if client is node and i not in positions:
            return False
        if client is not node and client not in own:
            return False
    return True


def _branch_graph(own: list[Apply], values: list) -> tuple[FunctionGraph, list]:
    """A branch's inner graph (a copy) and the outer values it takes (in a
    fixed order: ``own`` is in topological order)."""
    produced = {out for n in own for out in n.outputs}
    inputs: list = []
    for n in own:
        inputs += [v for v in n.inputs if v not in produced and not isinstance(v, Constant)]
    inputs += [v for v in values if v not in produced and not isinstance(v, Constant)]
    inputs = list(dict.fromkeys(inputs))          # once each, in a fixed order
    equiv = clone_get_equiv(inputs, values)
    graph = FunctionGraph([equiv[v] for v in inputs], [equiv.get(v, v) for v in values])
    return graph, inputs


@register_graph_rewrite("specialize", name="lazy_ifelse", tags=("ifelse",))
def lazy_ifelse(fgraph: FunctionGraph) -> bool:
    """Every ``IfElse`` node as a ``LazyIfElse`` (module doc), ancestors first:
    an ``ifelse`` in another's branch is lazy before it moves there."""
    # every compilation runs this: look before sorting
    if not any(isinstance(node.op, IfElse) for node in fgraph.apply_nodes):
        return False
    changed = False
    for node in [n for n in fgraph.toposort() if isinstance(n.op, IfElse)]:
        n = node.op.n_outputs
        branches = []
        for positions in (range(1, 1 + n), range(1 + n, 1 + 2 * n)):
            own = _own_part(fgraph, node, positions)
            order = [v for v in io_toposort(fgraph.inputs, [node.inputs[i] for i in positions])
                     if v in own]
            branches.append(_branch_graph(order, [node.inputs[i] for i in positions]))
        (then_graph, then_inputs), (else_graph, else_inputs) = branches
        lazy = LazyIfElse(then_graph, else_graph)(node.inputs[0], *then_inputs, *else_inputs)
        lazy = list(lazy) if isinstance(lazy, (list, tuple)) else [lazy]
        fgraph.replace_all(zip(node.outputs, lazy), reason="lazy_ifelse")
        changed = True
    return changed
