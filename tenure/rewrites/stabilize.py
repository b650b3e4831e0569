"""Stabilization: formulas that overflow or lose precision, replaced by ones that don't.

Each rewrite here swaps an expression that is mathematically equal to a
better-behaved function for that function:

=================  =====================================  ==========================
name               from                                   to
=================  =====================================  ==========================
log_softmax        ``log(softmax(x, axis))``              ``log_softmax(x, axis)``
softmax_by_hand    ``exp(x) / sum(exp(x))``,              ``softmax(x)``
                   ``exp(log_softmax(x))``
                   ``x - log(sum(exp(x)))``,              ``log_softmax(x)``
                   ``x - logsumexp(x)`` (keepdims; the
                   maximum taken out first or not)
log1p              ``log(1 + x)``, ``log(x + 1)``         ``log1p(x)``
expm1              ``exp(x) - 1``, ``exp(x) + -1``        ``expm1(x)``
logsumexp          ``log(sum(exp(x), axis))``             ``logsumexp(x, axis)``
log_sigmoid        ``log(sigmoid(x))``                    ``-softplus(-x)``
                   ``log(1 - sigmoid(x))``,               ``-softplus(x)``
                   ``log1p(-sigmoid(x))``
                   ``log(1 + exp(x))``,                   ``softplus(x)``
                   ``log1p(exp(x))``
=================  =====================================  ==========================

All carry the tag ``"stable"`` and run in the ``"stabilize"`` phase, after
canonicalization; ``tn.Mode(exclude=["stabilize"])`` compiles the formulas
as written.  The results are not bit-identical to the unstable forms (that is
the point): they are the correctly computed values where the unstable forms
overflow to ``inf``, underflow to ``0``/``-inf`` or round ``1 + x`` to 1.

Each fires only on real floating-point inputs with the dtype unchanged:
integer inputs could wrap around (``1 + int8(127)``), and the stable ops may
type integers differently (``logsumexp`` of ints is float64, ``exp`` of int8
float16).
"""

from __future__ import annotations

from tenure.rewrites.engine import register_node_rewrite
from tenure.symbolic.graph import Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.ops.reduce import Reduce
from tenure.symbolic.patterns import (
    elemwise_node, is_elemwise, is_filled_with, keeps_shape, operand_beside, softmax_form,
    softplus_form, stable_value)


def _float(var: Variable) -> bool:
    return var.type.numpy_dtype.kind == "f"


def _if_same_dtype(old: Variable, new: Variable) -> Variable | None:
    """``new`` when it can stand in for ``old`` (same dtype), else None."""
    return new if new.type.dtype == old.type.dtype else None


@register_node_rewrite("stabilize", tags=("stable",))
def log_softmax(fgraph, node):
    """``log(softmax(x))`` becomes ``log_softmax(x)`` (``x - logsumexp(x)``).

    Where a softmax entry underflows to 0 (``x = [0, -1000]``), its log is
    ``-inf``; log_softmax gives the finite ``-1000``.
    """
    if not is_elemwise(node, ps.log):
        return None
    inner = node.inputs[0].owner
    if inner is None or not isinstance(inner.op, Softmax):
        return None
    x = inner.inputs[0]
    if not _float(x):
        return None
    return _if_same_dtype(node.outputs[0], LogSoftmax(inner.op.axis)(x))


def _zero_unsigned(var: Variable) -> Variable:
    """``var + 0.0``: ``-0.0`` becomes ``+0.0`` and every other value stays as it
    is.  ``log1p(-0.0)`` and ``expm1(-0.0)`` are ``-0.0`` where the formulas they
    replace give ``+0.0``; a sign that a later division would turn into an
    infinity of the other sign."""
    return var + 0.0


@register_node_rewrite("stabilize", tags=("stable",))
def log1p(fgraph, node):
    """``log(1 + x)`` (either order; the 1 a Python number or a constant array
    of ones that does not broadcast ``x``) becomes ``log1p(x)``.

    For ``|x|`` below the float's epsilon, ``1 + x`` rounds to 1 and the log
    to 0; ``log1p(x)`` is ``x`` to full precision.
    """
    if not is_elemwise(node, ps.log):
        return None
    add = elemwise_node(node.inputs[0], ps.add)
    if add is None or not _float(add.outputs[0]):
        return None
    x = operand_beside(add, 1)
    if x is None:
        return None
    return _if_same_dtype(node.outputs[0], _zero_unsigned(ew.log1p(x)))


@register_node_rewrite("stabilize", tags=("stable",))
def expm1(fgraph, node):
    """``exp(x) - 1`` (also ``exp(x) + -1`` and ``-1 + exp(x)``) becomes ``expm1(x)``.

    For small ``|x|``, ``exp(x)`` rounds to 1 and the difference to 0;
    ``expm1(x)`` is ``x`` to full precision.
    """
    out = node.outputs[0]
    if not _float(out):
        return None
    if is_elemwise(node, ps.sub):
        e, c = node.inputs
        if not is_filled_with(c, 1):
            return None
    elif is_elemwise(node, ps.add):
        e = operand_beside(node, -1)
        if e is None:
            return None
        c = node.inputs[0] if node.inputs[1] is e else node.inputs[1]
    else:
        return None
    exp = elemwise_node(e, ps.exp)
    if exp is None or not keeps_shape(e, c) or e.type.dtype != out.type.dtype:
        return None
    x = exp.inputs[0]
    if not _float(x):
        return None
    return _if_same_dtype(out, _zero_unsigned(ew.expm1(x)))


@register_node_rewrite("stabilize", tags=("stable",))
def logsumexp(fgraph, node):
    """``log(sum(exp(x), axis, keepdims))`` becomes ``logsumexp(x, axis, keepdims)``.

    ``exp`` overflows to ``inf`` for ``x`` above ~709 (float64) and the sum
    underflows to 0 when every ``x`` is below ~-745; logsumexp subtracts the
    maximum first and stays finite.
    """
    if not is_elemwise(node, ps.log):
        return None
    total = node.inputs[0].owner
    if total is None or type(total.op) is not Reduce or total.op.fn_name != "sum":
        return None
    exp = elemwise_node(total.inputs[0], ps.exp)
    if exp is None:
        return None
    x = exp.inputs[0]
    if not _float(x):
        return None
    return _if_same_dtype(node.outputs[0], LogSumExp(total.op.axis, total.op.keepdims)(x))


@register_node_rewrite("stabilize", tags=("stable",))
def softmax_by_hand(fgraph, node):
    """A softmax or log-softmax written out by hand becomes the op
    (:func:`tenure.symbolic.patterns.softmax_form`): ``exp(x) / sum(exp(x),
    axis, keepdims=True)`` -> ``softmax(x, axis)``; ``x - log(sum(exp(x),
    axis, keepdims=True))`` (or ``x - logsumexp(...)``) -> ``log_softmax(x,
    axis)``; ``exp(log_softmax(x))`` -> ``softmax(x)`` -- the maximum taken
    out first or not.

    ``exp(x)`` overflows for ``x`` above ~88 in float32, and the hand-written
    forms make a full-size array per step; the ops subtract the maximum and
    compute a row in one fused pass.
    """
    form = softmax_form(node)
    if form is None:
        return None
    return _if_same_dtype(node.outputs[0], form.op(form.x))


@register_node_rewrite("stabilize", tags=("stable",))
def log_sigmoid(fgraph, node):
    """A log of a sigmoid becomes its softplus form (:mod:`tenure.symbolic.patterns`):
    ``log(sigmoid(x))`` -> ``-softplus(-x)``; ``log(1 - sigmoid(x))`` and
    ``log1p(-sigmoid(x))`` -> ``-softplus(x)``; ``log(1 + exp(x))`` and
    ``log1p(exp(x))`` -> ``softplus(x)``, a sigmoid also written out as
    ``1 / (1 + exp(-x))``.

    ``log(1 / (1 + exp(-x))) = -log(1 + exp(-x))``.  For ``x`` below ~-745
    (float64; ~-88 in float32) the sigmoid underflows to 0 and its log is
    ``-inf``, and for ``x`` above ~37 (float64; ~17 in float32) ``1 -
    sigmoid(x)`` rounds to 0: the textbook binary cross-entropy is then
    ``nan``.  The softplus forms are exact there (``-softplus(-x)`` is ``x``).
    """
    form = softplus_form(node)
    if form is None:
        return None
    return _if_same_dtype(node.outputs[0], stable_value(form))
