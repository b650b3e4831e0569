"""Specialization: replace general op combinations by faster special ops.

=============  ============================  ==================================================
name           phase, tags                   what
=============  ============================  ==================================================
gemm           specialize; gemm              ``z + alpha * dot(x, y)`` -> ``Gemm(z, alpha, x, y)``
gemm_inplace   inplace; inplace,             ``Gemm`` accumulates into ``z``'s own buffer where
               gemm_inplace                  the DestroyHandler allows it
pow_by_mul     specialize; algebra           ``x ** n`` (float, ``n`` a whole number 3 to 8) ->
                                             squarings and products (``x ** 3`` ->
                                             ``square(x) * x``)
=============  ============================  ==================================================

``pow_by_mul`` trades ``pow``'s single rounding for a few: ``x ** 3`` as
``square(x) * x`` is within 2 ulps of the exact cube where ``pow`` is within
one, and ``x ** 8`` (three squarings) within about 7.  Overflow, underflow,
infinities, NaN and signed zeros come out as ``pow``'s.  In return it costs a
few multiplications an element instead of a call of ``pow`` (25 times slower
in a vectorized float32 loop: the GELU's ``h ** 3``).  PyTensor (nested
squaring) and JAX (``integer_pow``) do the same.  It is not a
canonicalization, whose rewrites are exact (see :mod:`.canonicalize`), and
it leaves integers alone: their ``pow`` is exact already, wrap-around included.

``gemm`` recognises, on 2-d float32/float64 operands (``p`` a matrix product
``dot(x, y)`` / ``x @ y`` / a one-axis ``tensordot`` of matrices, or the
transpose of one; ``a`` a 0-d scale, a Python number or a symbolic scalar):

- ``z + p``, ``p + z``, ``z + a * p``, ``z + p * a``, ``z + -p``  (``alpha = a``, 1, -1)
- ``z - p``, ``z - a * p``                                   (``alpha = -1``, ``-a``)
- ``p - z``, ``a * p - z``                                   (``beta = -1``)
- any of these with ``z`` itself ``b * w`` or ``-w``            (``beta = b``, -1; ``z = w``)

It fires only when nothing changes but the rounding: the product and every
intermediate it removes (``a * p``, ``b * w``) have no other reader, all
dtypes are the result's, and neither ``z`` nor the product is broadcast by
what the graph knows statically (``z`` a vector or a ``(1, n)`` matrix is left
alone: gemm would gain nothing).  Lengths unknown when the graph is built that
turn out to be 1 at run time are broadcast by ``Gemm`` itself, as ``add``
would.  It runs in the ``specialize`` phase, before fusion would swallow the
addition into an elementwise loop.

``gemm_inplace`` makes each ``Gemm`` write into ``z``'s buffer through the same
local check and single validation as the other in-place rewrites, so ``z`` is
overwritten only where it is not protected (a constant, an input the caller
keeps, a shared variable that is not updated, a result returned) and every
other reader of it runs first; an update ``(W, W - lr * (X.T @ G))`` thus
accumulates into ``W``'s own storage.
"""

from __future__ import annotations

import numpy as np

from tenure.rewrites.destroy import version_of
from tenure.rewrites.engine import register_graph_rewrite, register_node_rewrite
from tenure.rewrites.inplace import inplace_pass
from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.blas import Dot, MatMul, TensorDot
from tenure.symbolic.ops.gemm import GEMM_DTYPES, Gemm
from tenure.symbolic.ops.shape import DimShuffle, transpose
from tenure.symbolic.patterns import is_elemwise, keeps_shape
from tenure.symbolic.variable import TensorConstant, constant

_GEMM = Gemm(inplace=False)
_GEMM_INPLACE = Gemm(inplace=True)


# --------------------------------------------------------------------------
# Matching


def _sole_reader(fgraph, var: Variable, reader) -> bool:
    """Whether ``reader`` reads ``var`` once and nothing else reads it (nor is
    it returned)."""
    clients = fgraph.clients.get(var, ())
    return len(clients) == 1 and clients[0][0] is reader


def _is_transpose(node) -> bool:
    return (node is not None and isinstance(node.op, DimShuffle)
            and node.op.input_ndim == 2 and node.op.new_order == (1, 0))


def _t(var: Variable) -> Variable:
    """``var.T``, undoing a transpose rather than stacking a second one."""
    return var.owner.inputs[0] if _is_transpose(var.owner) else transpose(var)


def _as_operand(var: Variable, dtype: str) -> Variable | None:
    """A float matrix operand of a ``dtype`` product, cast to ``dtype`` exactly
    as the product would (``float32 @ float64`` computes in float64)."""
    if var.ndim != 2 or var.type.numpy_dtype.kind != "f":
        return None
    if var.dtype == dtype:
        return var
    if not np.can_cast(var.type.numpy_dtype, dtype, "safe"):
        return None
    return ew.cast(var, dtype)


def _product(fgraph, var: Variable, reader) -> tuple[Variable, Variable] | None:
    """``(x, y)`` when ``var`` is the matrix product ``x @ y`` of two float
    matrices, computed for ``reader`` alone; ``x``/``y`` of ``var``'s dtype."""
    node = var.owner
    if (node is None or var.ndim != 2 or var.dtype not in GEMM_DTYPES
            or not _sole_reader(fgraph, var, reader)):
        return None
    op = node.op
    if isinstance(op, (Dot, MatMul)):
        a, b = node.inputs
    elif isinstance(op, TensorDot) and len(op.a_axes) == 1:
        a, b = node.inputs
        if a.ndim != 2 or b.ndim != 2:
            return None
        # Summing a's axis 0 against b's axis 1 is a.T @ b.T, and so on.
        a = _t(a) if op.a_axes == (0,) else a
        b = _t(b) if op.b_axes == (1,) else b
    elif _is_transpose(node):
        inner = _product(fgraph, node.inputs[0], node)
        if inner is None:
            return None
        x, y = inner
        return _t(y), _t(x)                     # (x @ y).T == y.T @ x.T
    else:
        return None
    if a.ndim != 2 or b.ndim != 2:
        return None
    x, y = _as_operand(a, var.dtype), _as_operand(b, var.dtype)
    if x is None or y is None:
        return None
    return x, y


class _Scale:
    """A 0-d factor: ``sign * factor``, ``factor`` None (1), a number or a 0-d
    variable."""

    def __init__(self, sign: int = 1, factor=None):
        self.sign, self.factor = sign, factor

    def negated(self) -> _Scale:
        return _Scale(-self.sign, self.factor)

    def build(self, dtype: str) -> Variable:
        if self.factor is None:
            return constant(np.asarray(self.sign, dtype=dtype))
        if isinstance(self.factor, Variable):
            var = ew.cast(self.factor, dtype)
            return var if self.sign > 0 else ew.neg(var)
        return constant(np.asarray(self.sign * self.factor, dtype=dtype))


def _scale_of(s: Variable, dtype: str) -> _Scale | None:
    """The factor that a 0-d ``s`` contributes to a product of ``dtype`` (the
    caller has checked that the product keeps ``dtype``): NumPy converts it
    to ``dtype`` before multiplying, and so does the Gemm built here."""
    if s.ndim != 0:
        return None
    if isinstance(s, TensorConstant):
        value = s.weak_value if s.weak else s.data
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(value).astype(dtype)
        except (TypeError, ValueError, OverflowError):
            return None
        return _Scale(1, value)
    if s.type.numpy_dtype.kind not in "iuf":
        return None
    return _Scale(1, s)


def _scaled(fgraph, var: Variable, reader, inner) -> tuple[_Scale, tuple] | None:
    """``(scale, inner(var))`` for ``var`` one of ``inner``'s matches, ``a *
    that`` or ``that * a`` (``a`` 0-d), or ``-that``; an intermediate ``mul``
    or ``neg`` must be read by ``reader`` alone and keep the dtype."""
    found = inner(var, reader)
    if found is not None:
        return _Scale(), found
    node = var.owner
    if node is None or not _sole_reader(fgraph, var, reader):
        return None
    if is_elemwise(node, ps.neg):
        found = inner(node.inputs[0], node)
        if found is not None and node.inputs[0].dtype == var.dtype:
            return _Scale(-1), found
        return None
    if not is_elemwise(node, ps.mul) or len(node.inputs) != 2:
        return None
    for s_pos in (0, 1):
        s, other = node.inputs[s_pos], node.inputs[1 - s_pos]
        if s.ndim != 0 or other.dtype != var.dtype or other.ndim != var.ndim:
            continue
        found = inner(other, node)
        scale = _scale_of(s, var.dtype) if found is not None else None
        if scale is not None:
            return scale, found
    return None


def _fits(var: Variable, out: Variable) -> bool:
    """Whether ``var`` has ``out``'s dtype and number of dimensions and, as far
    as the static shapes tell, is not broadcast to ``out``'s shape."""
    return (var.ndim == out.ndim and var.dtype == out.dtype
            and all(v is None or v == o for v, o in zip(var.type.shape, out.type.shape)))


def _match(fgraph, node, z: Variable, p: Variable, p_sign: int, z_sign: int):
    """``Gemm`` for ``z_sign * z + p_sign * p`` at ``node``, or None."""
    out = node.outputs[0]
    found = _scaled(fgraph, p, node, lambda v, r: _product(fgraph, v, r))
    if found is None or not _fits(p, out):
        return None
    alpha, (x, y) = found
    # z itself may be b * w or -w (then w is what the Gemm starts from).
    # (The operand must be strictly inside z: z itself is no "b * w".)
    beta, (w,) = (_scaled(fgraph, z, node, lambda v, r: None if v is z else (v,))
                  or (_Scale(), (z,)))
    if not (_fits(z, out) and _fits(w, out)):
        return None
    if p_sign < 0:
        alpha = alpha.negated()
    if z_sign < 0:
        beta = beta.negated()
    dtype = out.dtype
    new = _GEMM(w, alpha.build(dtype), x, y, beta.build(dtype))
    return new if out.type.is_compatible_replacement(new.type) else None


@register_node_rewrite("specialize", name="gemm", tags=("gemm",))
def gemm(fgraph, node):
    """``z + alpha * dot(x, y)`` and its variants (see the module docstring)
    become one ``Gemm``: the product is accumulated into (a copy of) ``z``
    instead of being materialised and then added."""
    out = node.outputs[0]
    if out.ndim != 2 or out.dtype not in GEMM_DTYPES or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if is_elemwise(node, ps.add):
        candidates = ((a, b, 1, 1), (b, a, 1, 1))
    elif is_elemwise(node, ps.sub):
        candidates = ((a, b, -1, 1), (b, a, 1, -1))
    else:
        return None
    for z, p, p_sign, z_sign in candidates:
        new = _match(fgraph, node, z, p, p_sign, z_sign)
        if new is not None:
            return new
    return None


# --------------------------------------------------------------------------
# Whole powers

#: the whole exponents ``pow_by_mul`` expands (2 is ``pow_to_square``'s, exact)
POW_BY_MUL_EXPONENTS = range(3, 9)


def _whole_exponent(node) -> tuple[Variable, int] | None:
    """``(x, n)`` when ``node`` is the float ``x ** n`` of a constant whole
    ``n`` in :data:`POW_BY_MUL_EXPONENTS`, ``x`` of the result's dtype and
    shape (the exponent broadcasts nothing)."""
    if not is_elemwise(node, ps.power):
        return None
    x, n = node.inputs
    out = node.outputs[0]
    if (out.type.numpy_dtype.kind != "f" or x.dtype != out.dtype or not isinstance(n, Constant)
            or n.data.size == 0 or not keeps_shape(x, n)):
        return None
    first = n.data.flat[0]
    if not np.all(n.data == first) or first not in POW_BY_MUL_EXPONENTS:
        return None
    return x, int(first)


@register_node_rewrite("specialize", name="pow_by_mul", tags=("algebra",))
def pow_by_mul(fgraph, node):
    """``x ** n`` for a whole ``n`` from 3 to 8 becomes binary exponentiation:
    squarings of ``x`` multiplied together (see the module docstring)."""
    match = _whole_exponent(node)
    if match is None:
        return None
    x, n = match
    result, power = None, x
    while n:
        if n & 1:
            result = power if result is None else ew.mul(result, power)
        n >>= 1
        if n:
            power = ew.square(power)
    return result


# --------------------------------------------------------------------------
# In place


@register_graph_rewrite("inplace", name="gemm_inplace", tags=("inplace", "gemm_inplace"))
def gemm_inplace(fgraph) -> bool:
    """``Gemm`` accumulates into ``z``'s own buffer instead of a copy of it."""
    def wanted(node):
        return isinstance(node.op, Gemm) and not node.op.inplace

    def proposals(node):
        if not wanted(node):
            return
        z = node.inputs[0]
        if isinstance(z, Constant):
            return
        # Overwriting z while reading it through another input (x = z.T, alpha
        # = z[0, 0], ...) would read clobbered data.
        version = version_of(z)
        if any(version_of(other) is version for other in node.inputs[1:]):
            return
        yield 0, _GEMM_INPLACE.make_node(*node.inputs)

    return inplace_pass(fgraph, proposals, "gemm_inplace", wanted)
