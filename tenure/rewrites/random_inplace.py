"""A random draw writes its new generator state into the state's own buffer
where the DestroyHandler allows it: the state is a shared variable the
function updates (its default update) and every other reader of the old
state runs first.  A draw then allocates nothing but its output (and, with
a borrowed output, not that either after the first call)."""

from __future__ import annotations

from tenure.rewrites.engine import register_graph_rewrite
from tenure.rewrites.inplace import _inplace_pass
from tenure.symbolic.ops.random import RandomVariable


@register_graph_rewrite("inplace", tags=("inplace", "random_state_inplace"))
def random_state_inplace(fgraph) -> bool:
    """``RandomVariable`` advances its state in place (output 0 destroys input 0)."""
    def proposals(node):
        op = node.op
        if isinstance(op, RandomVariable) and not op.inplace:
            yield 0, op.clone(inplace=True).make_node(*node.inputs)

    return _inplace_pass(fgraph, proposals, "random_state_inplace")
