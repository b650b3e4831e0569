"""Matching small patterns in graphs, and the stable forms of log-sigmoid formulas.

Two users need to recognise the same shapes of graph: the rewrites (which
replace a formula by a better one) and :func:`tenure.symbolic.grad.grad`
(which differentiates a formula through its better form).  Both import the
matchers from here, so they agree on what a pattern is.

The stable forms.  A log of a sigmoid overflows where the sigmoid rounds to
0 or 1, while the same function written with ``softplus(z) = log(1 + exp(z))``
(computed without overflow) is exact everywhere:

===============================================  =====================
formula                                          stable form
===============================================  =====================
``log(sigmoid(x))``                              ``-softplus(-x)``
``log(1 - sigmoid(x))``, ``log1p(-sigmoid(x))``  ``-softplus(x)``
``log(1 + exp(x))``, ``log1p(exp(x))``           ``softplus(x)``
===============================================  =====================

``sigmoid(x)`` may also be written out as ``1 / (1 + exp(-x))``.  The
gradient of every stable form is a sigmoid times the incoming gradient,
finite for every ``x``: ``d softplus(s*x)/dx = s * sigmoid(s*x)``.  Through
the formulas as written, the chain rule divides by the rounded sigmoid (or
``1 - sigmoid``), which is 0 at ``|x|`` of a few tens in float32: ``inf * 0``.

The softmax family written out by hand (:func:`softmax_form`):
``exp(x) / sum(exp(x))`` and ``x - log(sum(exp(x)))`` (sums with keepdims,
the maximum taken out first or not) are ``softmax`` and ``log_softmax``,
which subtract the maximum, and whose gradients are one fused expression
each, where the chain rule through the formula makes an array per step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tenure.symbolic.graph import Apply, Constant, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import nnet
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import Reduce

__all__ = ["SoftmaxForm", "SoftplusForm", "elemwise_node", "is_elemwise", "is_filled_with",
           "keeps_shape", "one_minus", "operand_beside", "sigmoid_argument", "softmax_form",
           "softplus_form", "stable_gradient", "stable_value", "variables_between"]


# --------------------------------------------------------------------------
# matchers


def elemwise_node(var: Variable, scalar_op: ps.ScalarOp | None = None) -> Apply | None:
    """``var``'s owner when it is a non-inplace Elemwise (of ``scalar_op``, if given)."""
    node = var.owner
    if node is None or not isinstance(node.op, Elemwise) or node.op.inplace_pattern:
        return None
    if scalar_op is not None and node.op.scalar_op != scalar_op:
        return None
    return node


def is_elemwise(node: Apply, scalar_op: ps.ScalarOp) -> bool:
    """Whether ``node`` is a non-inplace Elemwise applying ``scalar_op``."""
    return (isinstance(node.op, Elemwise) and node.op.scalar_op == scalar_op
            and not node.op.inplace_pattern)


def is_filled_with(var: Variable, value, signbit: bool | None = None) -> bool:
    """Whether ``var`` is a non-empty constant whose every element equals ``value``.

    ``signbit`` (for zeros): also require every element's sign bit to be set
    (``True``, i.e. ``-0.0``) or clear (``False``, ``+0.0``).
    """
    if not isinstance(var, Constant):
        return False
    data = var.data
    if data.size == 0 or data.dtype.kind not in "biuf":
        return False
    with np.errstate(all="ignore"):
        if not np.all(data == value):
            return False
    if signbit is not None:
        # Integer and boolean zeros convert to +0.0.
        signs = np.signbit(data) if data.dtype.kind == "f" else np.zeros(data.shape, bool)
        return bool(np.all(signs == signbit))
    return True


def keeps_shape(x: Variable, other: Variable) -> bool:
    """Whether broadcasting ``other`` against ``x`` leaves ``x``'s shape as it is,
    whatever the run-time lengths: ``other`` has no more axes than ``x``, and
    each of its lengths is 1 or a static length that ``x`` has too."""
    xs, os = x.type.shape, other.type.shape
    if len(os) > len(xs):
        return False
    for o, d in zip(reversed(os), reversed(xs)):
        if o != 1 and (o is None or o != d):
            return False
    return True


def _float(var: Variable) -> bool:
    return var.type.numpy_dtype.kind == "f"


def operand_beside(node: Apply, value) -> Variable | None:
    """For a binary node (an add): the operand ``x`` beside a constant filled
    with ``value``, when that constant neither broadcasts ``x`` nor changes
    its dtype."""
    out = node.outputs[0]
    for c_pos, x_pos in ((0, 1), (1, 0)):
        c, x = node.inputs[c_pos], node.inputs[x_pos]
        if is_filled_with(c, value) and keeps_shape(x, c) and x.type.dtype == out.type.dtype:
            return x
    return None


def one_minus(var: Variable) -> Variable | None:
    """``v`` when ``var`` is ``1 - v`` (the 1 a constant that neither broadcasts
    ``v`` nor changes its dtype), else None."""
    node = elemwise_node(var, ps.sub)
    if node is None:
        return None
    one, v = node.inputs
    if is_filled_with(one, 1) and keeps_shape(v, one) and v.type.dtype == var.type.dtype:
        return v
    return None


def _one_plus(var: Variable) -> Variable | None:
    """``v`` when ``var`` is ``1 + v`` or ``v + 1`` (as :func:`one_minus`)."""
    node = elemwise_node(var, ps.add)
    return None if node is None else operand_beside(node, 1)


def _exp_argument(var: Variable) -> Variable | None:
    node = elemwise_node(var, ps.exp)
    return None if node is None else node.inputs[0]


def sigmoid_argument(var: Variable) -> Variable | None:
    """``x`` when ``var`` is ``sigmoid(x)`` or ``1 / (1 + exp(-x))`` of the same
    float dtype, else None."""
    node = elemwise_node(var, ps.sigmoid)
    if node is not None:
        x = node.inputs[0]
        return x if _float(x) and x.type.dtype == var.type.dtype else None
    div = elemwise_node(var, ps.true_divide)
    if div is None or not is_filled_with(div.inputs[0], 1):
        return None
    denominator = div.inputs[1]
    if not keeps_shape(denominator, div.inputs[0]):
        return None
    e = _one_plus(denominator)
    minus_x = None if e is None else _exp_argument(e)
    neg = None if minus_x is None else elemwise_node(minus_x, ps.neg)
    if neg is None:
        return None
    x = neg.inputs[0]
    return x if _float(x) and x.type.dtype == var.type.dtype else None


# --------------------------------------------------------------------------
# stable forms


class SoftplusForm(NamedTuple):
    """A formula equal to ``outer * softplus(inner * x)`` (``outer``, ``inner``: ±1)."""

    x: Variable
    outer: int
    inner: int


def softplus_form(node: Apply) -> SoftplusForm | None:
    """The stable form of ``node``'s output (see the module doc), or None.

    Only float formulas whose dtype every step keeps: an integer ``x`` could
    wrap around, and a dtype change would make the stable form another type.
    """
    if len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if not _float(out):
        return None
    if is_elemwise(node, ps.log):
        form = _log_form(node.inputs[0])
    elif is_elemwise(node, ps.log1p):
        form = _log1p_form(node.inputs[0])
    else:
        return None
    if form is None or form.x.type.dtype != out.type.dtype:
        return None
    return form


def _log_form(argument: Variable) -> SoftplusForm | None:
    x = sigmoid_argument(argument)
    if x is not None:                       # log(sigmoid(x)) = -softplus(-x)
        return SoftplusForm(x, -1, -1)
    s = one_minus(argument)
    x = None if s is None else sigmoid_argument(s)
    if x is not None:                       # log(1 - sigmoid(x)) = -softplus(x)
        return SoftplusForm(x, -1, 1)
    e = _one_plus(argument)
    x = None if e is None else _exp_argument(e)
    if x is not None and _float(x):         # log(1 + exp(x)) = softplus(x)
        return SoftplusForm(x, 1, 1)
    return None


def _log1p_form(argument: Variable) -> SoftplusForm | None:
    neg = elemwise_node(argument, ps.neg)
    x = None if neg is None else sigmoid_argument(neg.inputs[0])
    if x is not None:                       # log1p(-sigmoid(x)) = -softplus(x)
        return SoftplusForm(x, -1, 1)
    x = _exp_argument(argument)
    if x is not None and _float(x):         # log1p(exp(x)) = softplus(x)
        return SoftplusForm(x, 1, 1)
    return None


def stable_value(form: SoftplusForm) -> Variable:
    """``outer * softplus(inner * x)``, the value of ``form``."""
    x = form.x if form.inner > 0 else ew.neg(form.x)
    value = ew.softplus(x)
    return value if form.outer > 0 else ew.neg(value)


def stable_gradient(form: SoftplusForm, gz: Variable) -> Variable:
    """The gradient with respect to ``form.x`` of ``form``'s value, given ``gz``
    for the value: ``gz * outer * inner * sigmoid(inner * x)``."""
    x = form.x if form.inner > 0 else ew.neg(form.x)
    g = ew.mul(gz, ew.sigmoid(x))
    return g if form.outer * form.inner > 0 else ew.neg(g)


# --------------------------------------------------------------------------
# the softmax family written out by hand


class SoftmaxForm(NamedTuple):
    """A formula equal to ``op(x)``: ``op`` a ``Softmax`` or ``LogSoftmax``
    over its axes."""

    x: Variable
    op: object


def softmax_form(node: Apply) -> SoftmaxForm | None:
    """The softmax or log-softmax that ``node``'s output is, written out by
    hand, or None:

    - ``exp(u) / sum(exp(u), axis, keepdims=True)``: ``softmax(u, axis)``;
    - ``u - log(sum(exp(u), axis, keepdims=True))`` (or ``u -
      logsumexp(u, axis, keepdims=True)``): ``log_softmax(u, axis)``;
    - ``exp`` of a log-softmax (written out or not): ``softmax``.

    Where ``u`` is ``x - c`` with ``c`` of length 1 along those axes (the
    maximum taken out first, as careful code does), the form is of ``x``:
    the shift changes neither function.  Only float formulas whose every
    step keeps the dtype.
    """
    if len(node.outputs) != 1 or not _float(node.outputs[0]):
        return None
    out = node.outputs[0]
    if is_elemwise(node, ps.true_divide):
        form = _divided_form(*node.inputs)
    elif is_elemwise(node, ps.sub):
        form = _log_softmax_form(*node.inputs)
    elif is_elemwise(node, ps.exp):
        inner = node.inputs[0]
        form = _log_softmax_of(inner)
        form = None if form is None else SoftmaxForm(form.x, nnet.Softmax(form.op.axis))
    else:
        return None
    if form is None or form.x.type.dtype != out.type.dtype or form.x.ndim != out.ndim:
        return None
    return form


def _kept_reduction(var: Variable, fn_name: str) -> tuple | None:
    """``(input, axis)`` when ``var`` is ``fn_name``'s reduction with keepdims."""
    node = var.owner
    if node is None or type(node.op) is not Reduce or node.op.fn_name != fn_name \
            or not node.op.keepdims:
        return None
    return node.inputs[0], tuple(sorted(node.op.axis))


def _unshifted(u: Variable, axis: tuple) -> Variable:
    """``x`` when ``u`` is ``x - c`` with ``c`` of static length 1 along
    ``axis`` (constant along it), else ``u``."""
    sub = elemwise_node(u, ps.sub)
    if sub is None:
        return u
    x, c = sub.inputs
    if c.ndim != x.ndim or x.type.dtype != u.type.dtype or x.ndim != u.ndim:
        return u
    if all(c.type.shape[a] == 1 for a in axis):
        return x
    return u


def _same_value(a: Variable, b: Variable, depth: int = 4) -> bool:
    """Whether ``a`` and ``b`` are one variable, or the same op's same output
    of the same values (``depth`` nodes deep): an expression written twice,
    as in ``exp(x - m) / exp(x - m).sum(...)``, before rewrites merge it."""
    if a is b:
        return True
    if isinstance(a, Constant) and isinstance(b, Constant):
        return a.type == b.type and np.array_equal(a.data, b.data)
    na, nb = a.owner, b.owner
    if depth == 0 or na is None or nb is None or na.op != nb.op \
            or na.outputs.index(a) != nb.outputs.index(b) or len(na.inputs) != len(nb.inputs):
        return False
    return all(_same_value(i, j, depth - 1) for i, j in zip(na.inputs, nb.inputs))


def _same_exp(a: Variable, b: Variable) -> Variable | None:
    """``u`` when ``a`` and ``b`` are both ``exp(u)`` (one node, or the same
    expression written twice)."""
    ua, ub = _exp_argument(a), _exp_argument(b)
    return ua if ua is not None and ub is not None and _same_value(ua, ub) else None


def _divided_form(numerator: Variable, denominator: Variable) -> SoftmaxForm | None:
    kept = _kept_reduction(denominator, "sum")
    if kept is None:
        return None
    summed, axis = kept
    u = _same_exp(numerator, summed)
    if u is None or not axis:
        return None
    return SoftmaxForm(_unshifted(u, axis), nnet.Softmax(axis))


def _log_softmax_form(u: Variable, total: Variable) -> SoftmaxForm | None:
    """``u - log(sum(exp(u)))`` (or ``u - logsumexp(u)``), both with keepdims."""
    node = total.owner
    if node is None:
        return None
    if isinstance(node.op, nnet.LogSumExp):
        if not node.op.keepdims or node.inputs[0] is not u:
            return None
        axis = tuple(sorted(node.op.axis))
    elif is_elemwise(node, ps.log):
        kept = _kept_reduction(node.inputs[0], "sum")
        if kept is None or _exp_argument(kept[0]) is not u:
            return None
        axis = kept[1]
    else:
        return None
    if not axis:
        return None
    return SoftmaxForm(_unshifted(u, axis), nnet.LogSoftmax(axis))


def _log_softmax_of(var: Variable) -> SoftmaxForm | None:
    """The log-softmax ``var`` is: the op itself, or written out."""
    node = var.owner
    if node is None:
        return None
    if isinstance(node.op, nnet.LogSoftmax):
        return SoftmaxForm(node.inputs[0], node.op)
    if is_elemwise(node, ps.sub):
        return _log_softmax_form(*node.inputs)
    return None


def variables_between(start: Variable, end: Variable) -> list[Variable]:
    """The computed variables that ``end`` is made from without going through
    ``start`` (for a pattern matched at ``end`` with operand ``start``: the
    pattern's intermediate values), nearest to ``end`` first."""
    between, frontier = [], [end]
    seen = {end}
    while frontier:
        var = frontier.pop()
        if var.owner is None:
            continue
        for inp in var.owner.inputs:
            if inp is start or inp in seen or inp.owner is None:
                continue
            seen.add(inp)
            between.append(inp)
            frontier.append(inp)
    return between
