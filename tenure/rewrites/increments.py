"""Gradient sums of increments into zeros, chained into one buffer.

==================  ==============  ===============================================
name                phase, tags     what
==================  ==============  ===============================================
add_of_increments   specialize;     ``a + inc_subtensor(zeros, v, idx)`` ->
                    memory          ``inc_subtensor(a, v, idx)``
==================  ==============  ===============================================

The gradient of ``x[idx]`` is ``v`` added into zeros shaped like ``x``
(:class:`~tenure.symbolic.ops.indexing.Subtensor`'s ``grad``), so a graph
that reads ``K`` slices of ``x`` -- im2col for ``conv2d`` and ``pool_2d``
reads one per position of the window -- gets ``K`` arrays the size of ``x``
summed.  Rewritten, each increment adds into the sum so far: a chain of
``inc_subtensor`` that the in-place pass then runs in one buffer (``K``
temporaries the size of ``x`` become one).

It fires where ``a`` provably has the zeros' shape (the same static shape, or
the same dims by shape inference: the other increments of a gradient are
into the same ``zeros_like(x)``), every dtype is the sum's, and nothing but
the sum reads the increment.  Per element the sum adds the same terms in the
same order, less the zeros: only the sign of a zero can change (``0.0 +
-0.0`` is ``0.0``), which is why it is not a canonicalization.
"""

from __future__ import annotations

from tenure.rewrites.engine import register_node_rewrite
from tenure.symbolic.graph import Variable
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.shape import infer_dims
from tenure.symbolic.ops.subtensor_update import IncSubtensor
from tenure.symbolic.patterns import is_elemwise, is_filled_with

__all__ = ["add_of_increments"]


def _increment_into_zeros(var: Variable):
    """``var``'s node when ``var`` is ``inc_subtensor(zeros, v, idx)`` (not in
    place), else None."""
    node = var.owner
    if node is None or not isinstance(node.op, IncSubtensor) or node.op.set_instead_of_inc \
            or node.op.inplace:
        return None
    base = node.inputs[0]
    zeros = base.owner is not None and isinstance(base.owner.op, Alloc) and \
        is_filled_with(base.owner.inputs[0], 0)
    return node if zeros or is_filled_with(base, 0) else None


def _same_shape(a: Variable, b: Variable) -> bool:
    """Whether ``a`` and ``b`` have the same shape whatever the inputs: equal
    static shapes, or dims that shape inference builds from the same
    variables."""
    if a.ndim != b.ndim:
        return False
    if None not in a.type.shape and a.type.shape == b.type.shape:
        return True
    memo: dict = {}
    return all(x is y or (isinstance(x, int) and x == y)
               for x, y in zip(infer_dims(a, memo), infer_dims(b, memo)))


@register_node_rewrite("specialize", tags=("memory",))
def add_of_increments(fgraph, node):
    if not is_elemwise(node, ps.add) or len(node.inputs) != 2:
        return None
    out = node.outputs[0]
    for k in (0, 1):
        increment, other = node.inputs[k], node.inputs[1 - k]
        inc = _increment_into_zeros(increment)
        if inc is None or {increment.type.dtype, other.type.dtype} != {out.type.dtype}:
            continue
        clients = fgraph.clients.get(increment, ())
        if len(clients) != 1 or clients[0][0] is not node:
            continue
        if not _same_shape(other, inc.inputs[0]):
            continue
        return [inc.op.make_node(other, *inc.inputs[1:]).outputs[0]]
    return None
