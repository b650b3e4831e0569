"""A random draw writes its new generator state into the state's own buffer
where the DestroyHandler allows it: the state is a shared variable the
function updates (its default update) and every other reader of the old
state runs first.  A draw then allocates nothing but its output (and, with
a borrowed output, not that either after the first call)."""

from __future__ import annotations

from tenure.rewrites.engine import register_graph_rewrite
from tenure.rewrites.inplace import inplace_pass
from tenure.symbolic.ops.random import RandomVariable


@register_graph_rewrite("inplace", tags=("inplace", "random_state_inplace"))
def random_state_inplace(fgraph) -> bool:
    """``RandomVariable`` advances its state in place (output 0 destroys input 0)."""
    def wanted(node):
        return isinstance(node.op, RandomVariable) and not node.op.inplace

    def proposals(node):
        if wanted(node):
            yield 0, node.op.clone(inplace=True).make_node(*node.inputs)

    return inplace_pass(fgraph, proposals, "random_state_inplace", wanted)
