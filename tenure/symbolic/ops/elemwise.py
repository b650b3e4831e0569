"""Elementwise ops: one :class:`Elemwise` op applies a scalar op over broadcast arrays.

Broadcasting follows NumPy (shapes aligned on the right, length-1 dimensions
stretch); dtypes follow NumPy 2, with bare Python numbers weakly typed (``x *
2`` keeps ``x``'s dtype).  ``inplace_pattern`` ``{output: input}`` makes the op
write its output into that input's buffer (declared in ``destroy_map``); the
in-place rewrites are the ones that create such ops.
"""

from __future__ import annotations

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.types import TensorType, normalize_dtype
from tenure.symbolic.variable import TensorConstant, as_tensor_variable


def broadcast_static_shapes(shapes: list[tuple], what: str = "broadcast") -> tuple:
    """NumPy broadcasting over static shapes (``None`` = unknown length).

    Raises ``ValueError`` when two known lengths are incompatible.
    """
    ndim = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    result = []
    for axis in range(ndim):
        dims = [s[axis] for s in padded]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise ValueError(f"{what}: shapes {' and '.join(str(tuple(s)) for s in shapes)} "
                             f"cannot be broadcast (axis {axis}: lengths {sorted(known)})")
        if known:
            result.append(known.pop())
        elif all(d == 1 for d in dims):
            result.append(1)
        else:
            result.append(None)
    return tuple(result)


def broadcast_symbolic_shapes(static_out: tuple, input_shapes: list[tuple],
                              input_static: list[tuple]) -> tuple:
    """Symbolic output shape of a broadcast, for ``infer_shape``.

    ``input_shapes`` are symbolic (ints or 0-d variables), ``input_static``
    the inputs' static shapes; both right-aligned like NumPy.
    """
    ndim = len(static_out)
    result = []
    for axis in range(ndim):
        if static_out[axis] is not None:
            result.append(static_out[axis])
            continue
        candidates = []
        for shape, static in zip(input_shapes, input_static):
            offset = ndim - len(static)
            if axis < offset or static[axis - offset] == 1:
                continue  # this input is broadcast along the axis
            candidates.append(shape[axis - offset])
        dim = candidates[0]
        for other in candidates[1:]:
            # Compatible lengths are equal or 1; "the other if this is 1" is right
            # even for 0 against 1 (which broadcasts to 0, unlike a max).
            dim = where(equal(dim, 1), other, dim)
        result.append(dim)
    return tuple(result)


#: the elements a NumPy ufunc loop buffers at a time (its ``bufsize``)
UFUNC_BUFSIZE = 8192

#: bytes of the iterator NumPy allocates beside the buffers of a buffered
#: ufunc call (NumPy 2.x: 1,104, measured with tracemalloc for two and
#: three operands of one or two dimensions)
UFUNC_ITERATOR_BYTES = 1104


def broadcast_buffer_bytes(out_shape: tuple, input_shapes, itemsize: int) -> int:
    """Bytes a NumPy ufunc call allocates for the inputs it broadcasts.

    When an input is stretched along some axis (a row vector added to every
    row) and the operands share no contiguous inner run of at least the
    ufunc buffer size, NumPy copies that input through a buffer of up to
    ``bufsize`` elements, beside the iterator that holds the buffers
    (measured with tracemalloc).  Single elements (0-d inputs, Python
    numbers, arrays of size 1) need none.
    """
    ndim = len(out_shape)
    size = 1
    for d in out_shape:
        size *= d
    if ndim < 2 or size == 0:
        return 0
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in input_shapes
              if s and any(d != 1 for d in s)]
    stretched = [s for s in padded if s != tuple(out_shape)]
    if not stretched:
        return 0
    inner = 1
    for axis in range(ndim - 1, -1, -1):
        if any(s[axis] != out_shape[axis] for s in padded):
            break
        inner *= out_shape[axis]
    if inner >= UFUNC_BUFSIZE:
        return 0
    return len(stretched) * min(size, UFUNC_BUFSIZE) * itemsize + UFUNC_ITERATOR_BYTES


def _probe(var):
    """What NumPy sees of an input when working out the output dtype."""
    if isinstance(var, TensorConstant) and var.weak:
        return var.weak_value
    # Always an empty 1-d array: only the dtype matters, and an empty array has
    # no values that could make NumPy raise (a 0-d probe would hold one).
    return np.empty((0,), dtype=var.dtype)


def _describe(inputs) -> str:
    return ", ".join(
        f"Python {type(v.weak_value).__name__} {v.weak_value!r}"
        if isinstance(v, TensorConstant) and v.weak else f"{v} ({v.type})" for v in inputs)


def _weak_values(inputs) -> tuple:
    """``(position, type name, value)`` of each weakly typed Python-number input."""
    return tuple((i, type(v.weak_value).__name__, v.weak_value) for i, v in enumerate(inputs)
                 if isinstance(v, TensorConstant) and v.weak)


class Elemwise(Op):
    """Apply ``scalar_op`` elementwise, with NumPy broadcasting.

    Inputs that are bare Python numbers stay weakly typed: the op records their
    exact values (``weak_inputs``) and hands NumPy the Python numbers
    themselves, so every dtype and value rule of NumPy 2 holds as is (``int8 <
    1000`` is True, ``float32 * 0.1`` is float32).
    """

    # `weak_inputs` is deliberately not a prop: two nodes can only merge when
    # their inputs are the same variables, and then their weak values agree.
    __props__ = ("scalar_op", "inplace_pattern")

    def __init__(self, scalar_op: ps.ScalarOp, inplace_pattern: dict[int, int] | None = None,
                 weak_inputs: tuple = ()):
        self.scalar_op = scalar_op
        # Stored as sorted pairs so the op stays hashable.
        self.inplace_pattern = tuple(sorted((inplace_pattern or {}).items()))
        self.destroy_map = {o: [i] for o, i in self.inplace_pattern}
        self.weak_inputs = tuple(weak_inputs)
        self.weak_positions = tuple((i, value) for i, _, value in self.weak_inputs)

    def __str__(self) -> str:
        name = self.scalar_op.name
        if self.inplace_pattern:
            name += "_inplace" + "".join(f"[{o}<-{i}]" for o, i in self.inplace_pattern)
        return name

    def make_node(self, *inputs) -> Apply:
        sop = self.scalar_op
        if len(inputs) != sop.nin:
            raise TypeError(f"{sop.name} takes {sop.nin} input(s), got {len(inputs)}")
        inputs = [as_tensor_variable(v) for v in inputs]
        try:
            out_dtype = sop.output_dtype([_probe(v) for v in inputs])
        except (TypeError, OverflowError) as exc:
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"{sop.name}: unsupported inputs {_describe(inputs)}: {exc}") from None
        shape = broadcast_static_shapes([v.type.shape for v in inputs], what=sop.name)
        out_type = TensorType(out_dtype, shape)
        for _, in_i in self.inplace_pattern:
            if inputs[in_i].type != out_type:
                raise TypeError(f"{self}: input {in_i} ({inputs[in_i].type}) cannot hold the "
                                f"output ({out_type})")
        weak = _weak_values(inputs)
        op = self if weak == self.weak_inputs else Elemwise(sop, dict(self.inplace_pattern), weak)
        return Apply(op, inputs, [out_type()])

    def impl_inputs(self, inputs) -> list:
        """The arguments of ``scalar_op.impl`` for these input values: the
        weakly typed Python numbers in their positions."""
        if self.weak_positions:
            inputs = list(inputs)
            for i, value in self.weak_positions:
                inputs[i] = value
        return inputs

    def perform(self, node, inputs, output_storage):
        inputs = self.impl_inputs(inputs)
        cell = output_storage[0]
        out_type = node.outputs[0].type
        # In place: the destroyed input; otherwise last call's output buffer.
        # Either is used only when it can hold the result exactly: lengths
        # unknown when the graph was built may still broadcast at run time,
        # and then the result needs a fresh array (which is always safe).
        target = (inputs[self.inplace_pattern[0][1]] if self.inplace_pattern else cell[0])
        if target is not None:
            shape = np.broadcast_shapes(*(np.shape(x) for x in inputs))
            if (not isinstance(target, np.ndarray) or target.shape != shape
                    or target.dtype != out_type.numpy_dtype or not target.flags.writeable):
                target = None
        if target is None:
            result = self.scalar_op.impl(*inputs)
            result = np.asarray(result, dtype=out_type.numpy_dtype)
        else:
            result = self.scalar_op.impl(*inputs, out=target)
        cell[0] = result

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        try:
            np.broadcast_shapes(*input_shapes)
        except ValueError:
            raise ValueError(f"{self}: operands of shapes "
                             f"{', '.join(map(str, input_shapes))} cannot be broadcast "
                             "together") from None
        kinds = "".join(v.type.numpy_dtype.kind for v in node.inputs)
        return not self.scalar_op.may_raise(kinds)

    def grad(self, inputs, output_grads):
        # A scalar op may carry its own rule (a Composite differentiates its
        # steps); the table holds the rules of the primitive scalar ops.
        rule = getattr(self.scalar_op, "grad_rule", None) or _GRAD_RULES.get(self.scalar_op.name)
        if isinstance(self.scalar_op, ps.Cast):
            rule = _cast_grad
        if rule is None:
            raise NotImplementedError(f"{self.scalar_op.name} has no gradient")
        (gz,) = output_grads
        out = self.make_node(*inputs).outputs[0]  # the forward value, as a graph
        grads = rule(inputs, out, gz)
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.reduce import sum_to
        # A broadcast input receives the sum of the gradients it was stretched to.
        return [sum_to(g, x) if g is not None and is_differentiable(x) else None
                for g, x in zip(grads, inputs)]

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """A ufunc writes its result directly; it only buffers the inputs it
        broadcasts (:func:`broadcast_buffer_bytes`).  A fused expression
        (``Composite``) makes temporaries for its steps (see
        :meth:`~tenure.symbolic.ops.composite.Composite.temporary_bytes`)."""
        if None in input_shapes:
            return 0
        weak = dict(self.weak_positions)
        shapes = [() if i in weak else tuple(s) for i, s in enumerate(input_shapes)]
        out_shape = tuple(output_shapes[0])
        model = getattr(self.scalar_op, "temporary_bytes", None)
        if model is None:
            itemsize = node.outputs[0].type.numpy_dtype.itemsize
            return broadcast_buffer_bytes(out_shape, shapes, itemsize)
        probes = [weak[i] if i in weak else np.empty((0,), v.type.numpy_dtype)
                  for i, v in enumerate(node.inputs)]
        return model(self.scalar_op.step_dtypes(probes), shapes, out_shape,
                     into_inputs={i for _, i in self.inplace_pattern})

    def broadcast_partners(self, node, shapes) -> list:
        """Every input is broadcast against every other."""
        partners = [(v, shapes.get(v)) for v in node.inputs]
        return [(v, partners) for v in node.inputs]

    def flops(self, node, shapes) -> float:
        """The output size times the number of primitive scalar ops (a fused
        ``Composite`` counts each of its steps)."""
        return float(cost_facts.outputs_size(node, shapes)
                     * cost_facts.scalar_steps(self.scalar_op))

    def infer_shape(self, node, input_shapes):
        static = node.outputs[0].type.shape
        return [broadcast_symbolic_shapes(static, input_shapes,
                                          [v.type.shape for v in node.inputs])]


_ELEMWISE_CACHE: dict[ps.ScalarOp, Elemwise] = {}


def elemwise_op(scalar_op: ps.ScalarOp) -> Elemwise:
    """The (shared) non-inplace Elemwise op for ``scalar_op``."""
    op = _ELEMWISE_CACHE.get(scalar_op)
    if op is None:
        op = _ELEMWISE_CACHE[scalar_op] = Elemwise(scalar_op)
    return op


def _make(scalar_op: ps.ScalarOp, doc: str):
    op = elemwise_op(scalar_op)

    def apply(*inputs):
        return op(*inputs)

    apply.__name__ = scalar_op.name
    apply.__qualname__ = scalar_op.name
    apply.__doc__ = doc
    return apply


add = _make(ps.add, "``x + y``, elementwise with broadcasting.")
sub = _make(ps.sub, "``x - y``, elementwise with broadcasting.")
mul = _make(ps.mul, "``x * y``, elementwise with broadcasting.")
true_divide = _make(ps.true_divide, "``x / y`` (true division; ints give floats).")
floor_divide = _make(ps.floor_divide, "``x // y``, rounding towards minus infinity.")
mod = _make(ps.mod, "``x % y``, with the sign of ``y`` like Python and NumPy.")
power = _make(ps.power, "``x ** y``.")
neg = _make(ps.neg, "``-x``.")
abs = _make(ps.abs_, "``|x|``.")
sign = _make(ps.sign, "-1, 0 or 1 by the sign of ``x``.")
square = _make(ps.square, "``x * x``.")
reciprocal = _make(ps.reciprocal, "``1 / x`` (NumPy semantics: integer inputs stay integer).")
exp = _make(ps.exp, "Elementwise exponential.")
log = _make(ps.log, "Elementwise natural logarithm.")
log1p = _make(ps.log1p, "``log(1 + x)``, accurate for small ``x``.")
expm1 = _make(ps.expm1, "``exp(x) - 1``, accurate for small ``x``.")
sqrt = _make(ps.sqrt, "Elementwise square root.")
sin = _make(ps.sin, "Elementwise sine.")
cos = _make(ps.cos, "Elementwise cosine.")
tanh = _make(ps.tanh, "Elementwise hyperbolic tangent.")
sigmoid = _make(ps.sigmoid, "The logistic function ``1 / (1 + exp(-x))``.")
softplus = _make(ps.softplus, "``log(1 + exp(x))``, computed without overflow.")
erf = _make(ps.erf, "The error function.")
maximum = _make(ps.maximum, "Elementwise maximum (NaN propagates).")
minimum = _make(ps.minimum, "Elementwise minimum (NaN propagates).")
less = _make(ps.less, "``x < y`` (bool).")
less_equal = _make(ps.less_equal, "``x <= y`` (bool).")
greater = _make(ps.greater, "``x > y`` (bool).")
greater_equal = _make(ps.greater_equal, "``x >= y`` (bool).")
equal = _make(ps.equal, "``x == y`` elementwise (bool).  (``==`` on variables is identity.)")
not_equal = _make(ps.not_equal, "``x != y`` elementwise (bool).")
logical_and = _make(ps.logical_and, "Elementwise logical and (bool).")
logical_or = _make(ps.logical_or, "Elementwise logical or (bool).")
logical_xor = _make(ps.logical_xor, "Elementwise logical xor (bool).")
logical_not = _make(ps.logical_not, "Elementwise logical not (bool).")
bitwise_and = _make(ps.bitwise_and, "``x & y`` (logical and for bools).")
bitwise_or = _make(ps.bitwise_or, "``x | y`` (logical or for bools).")
bitwise_xor = _make(ps.bitwise_xor, "``x ^ y`` (logical xor for bools).")
invert = _make(ps.invert, "``~x`` (logical not for bools).")
isnan = _make(ps.isnan, "Elementwise test for NaN.")
isinf = _make(ps.isinf, "Elementwise test for positive or negative infinity.")
where = _make(ps.where, "``a`` where ``cond`` holds, else ``b`` (broadcast together).")
floor = _make(ps.floor, "The largest integer ``<= x`` (integers and bools unchanged, as NumPy).")
ceil = _make(ps.ceil, "The smallest integer ``>= x`` (integers and bools unchanged).")
trunc = _make(ps.trunc, "``x`` rounded towards zero (integers and bools unchanged).")
rint = _make(ps.rint, "The nearest integer, halves to even; integers give floats, as NumPy.")
round = _make(ps.round_, "The nearest integer, halves to even, as ``np.round`` with no "
              "decimals (integers unchanged).  The gradient is zero.")
tan = _make(ps.tan, "Elementwise tangent.")
arcsin = _make(ps.arcsin, "Elementwise inverse sine (NaN outside ``[-1, 1]``).")
arccos = _make(ps.arccos, "Elementwise inverse cosine (NaN outside ``[-1, 1]``).")
arctan = _make(ps.arctan, "Elementwise inverse tangent.")
arctan2 = _make(ps.arctan2, "The angle of the point ``(x2, x1)``: ``arctan(x1 / x2)`` in its "
                "quadrant, in ``[-pi, pi]``.")
sinh = _make(ps.sinh, "Elementwise hyperbolic sine.")
cosh = _make(ps.cosh, "Elementwise hyperbolic cosine.")
arcsinh = _make(ps.arcsinh, "Elementwise inverse hyperbolic sine.")
arccosh = _make(ps.arccosh, "Elementwise inverse hyperbolic cosine (NaN below 1).")
arctanh = _make(ps.arctanh, "Elementwise inverse hyperbolic tangent (NaN outside "
                "``[-1, 1]``).")
log2 = _make(ps.log2, "Elementwise base-2 logarithm.")
log10 = _make(ps.log10, "Elementwise base-10 logarithm.")
exp2 = _make(ps.exp2, "``2 ** x``, elementwise.")

# NumPy-style aliases
subtract, multiply, divide, negative, absolute = sub, mul, true_divide, neg, abs
eq, neq, lt, le, gt, ge = equal, not_equal, less, less_equal, greater, greater_equal
#: Theano's and PyTensor's name for ``where``
switch = where


def clip(x, min, max):
    """``x`` limited to ``[min, max]`` elementwise (NumPy's ``clip``)."""
    return elemwise_op(ps.clip)(x, min, max)


_CAST_OPS: dict[str, Elemwise] = {}


def cast(x, dtype):
    """``x`` converted to ``dtype`` (like ``ndarray.astype``; no-op when it already is)."""
    x = as_tensor_variable(x)
    dtype = normalize_dtype(dtype, what="cast")
    if x.dtype == dtype:
        return x
    op = _CAST_OPS.get(dtype)
    if op is None:
        op = _CAST_OPS[dtype] = Elemwise(ps.Cast(dtype))
    return op(x)


astype = cast


# --------------------------------------------------------------------------
# Gradients: rule(inputs, output, output_gradient) -> one gradient per input,
# before summing over broadcast axes (Elemwise.grad does that).


def _zero(x):
    from tenure.symbolic.ops.creation import zeros_like
    return zeros_like(x, dtype=None if x.type.numpy_dtype.kind in "fc" else "float64")


def _tie_share(x, out, other):
    """1 where ``x`` produced ``out``, 1/2 where ``x`` and ``other`` tie (the
    gradient is split evenly between them, as autograd-style references do)."""
    won = cast(equal(x, out), out.dtype)
    tie = cast(equal(x, other), out.dtype)
    return true_divide(won, add(1, tie))


def _cast_grad(inputs, out, gz):
    (x,) = inputs
    return [cast(gz, x.dtype) if x.type.numpy_dtype.kind in "fc" else None]


def _power_grad(inputs, out, gz):
    x, y = inputs
    # A Python-number exponent stays one (y - 1 as a Python number), so a
    # float32 x keeps the gradient in float32 as NumPy would.
    y_minus_1 = (y.weak_value - 1 if isinstance(y, TensorConstant) and y.weak
                 else sub(y, 1))
    gx = mul(gz, mul(y, power(x, y_minus_1)))
    # d(x**y)/dy = x**y log x; at x == 0 the limit is 0 (for y > 0), not nan.
    safe_log = log(where(equal(x, 0), 1, x))
    gy = mul(gz, mul(out, safe_log))
    return [gx, gy]


def _clip_grad(inputs, out, gz):
    x, lo, hi = inputs
    inside = logical_and(greater_equal(x, lo), less_equal(x, hi))
    return [where(inside, gz, 0), where(less(x, lo), gz, 0), where(greater(x, hi), gz, 0)]


_SQRT_PI = 1.7724538509055159
_LN2 = 0.6931471805599453
_LN10 = 2.302585092994046


def _arctan2_grad(i, o, gz):
    # d/dy atan2(y, x) = x / (x² + y²), d/dx = -y / (x² + y²)
    y, x = i
    norm = add(square(x), square(y))
    return [true_divide(mul(gz, x), norm), neg(true_divide(mul(gz, y), norm))]


_GRAD_RULES = {
    "add": lambda i, o, gz: [gz, gz],
    "sub": lambda i, o, gz: [gz, neg(gz)],
    "mul": lambda i, o, gz: [mul(gz, i[1]), mul(gz, i[0])],
    "true_divide": lambda i, o, gz: [true_divide(gz, i[1]),
                                     neg(true_divide(mul(gz, i[0]), square(i[1])))],
    "floor_divide": lambda i, o, gz: [_zero(i[0]), _zero(i[1])],   # piecewise constant
    "mod": lambda i, o, gz: [gz, neg(mul(gz, floor_divide(i[0], i[1])))],
    "power": _power_grad,
    "neg": lambda i, o, gz: [neg(gz)],
    "abs": lambda i, o, gz: [mul(gz, sign(i[0]))],
    "sign": lambda i, o, gz: [_zero(i[0])],
    "square": lambda i, o, gz: [mul(gz, mul(2, i[0]))],
    "reciprocal": lambda i, o, gz: [neg(mul(gz, square(o)))],
    "maximum": lambda i, o, gz: [mul(gz, _tie_share(i[0], o, i[1])),
                                 mul(gz, _tie_share(i[1], o, i[0]))],
    "minimum": lambda i, o, gz: [mul(gz, _tie_share(i[0], o, i[1])),
                                 mul(gz, _tie_share(i[1], o, i[0]))],
    "clip": _clip_grad,
    "exp": lambda i, o, gz: [mul(gz, o)],
    "log": lambda i, o, gz: [true_divide(gz, i[0])],
    "log1p": lambda i, o, gz: [true_divide(gz, add(1, i[0]))],
    "expm1": lambda i, o, gz: [mul(gz, add(o, 1))],
    "sqrt": lambda i, o, gz: [true_divide(gz, mul(2, o))],
    "sin": lambda i, o, gz: [mul(gz, cos(i[0]))],
    "cos": lambda i, o, gz: [neg(mul(gz, sin(i[0])))],
    "tanh": lambda i, o, gz: [mul(gz, sub(1, square(o)))],
    "sigmoid": lambda i, o, gz: [mul(gz, mul(o, sub(1, o)))],
    "softplus": lambda i, o, gz: [mul(gz, sigmoid(i[0]))],
    # 1 where x > 0, and 0 at the kink x == 0 (the usual convention).  Read
    # from the output (relu(x) > 0 exactly where x > 0) so the input need not
    # be kept for the backward pass and the relu can overwrite it.
    "relu": lambda i, o, gz: [where(greater(o, 0), gz, 0)],
    "erf": lambda i, o, gz: [mul(gz, mul(2 / _SQRT_PI, exp(neg(square(i[0])))))],
    "where": lambda i, o, gz: [None, where(i[0], gz, 0), where(i[0], 0, gz)],
    **{name: lambda i, o, gz: [_zero(i[0])]     # piecewise constant
       for name in ("floor", "ceil", "trunc", "rint", "round")},
    "tan": lambda i, o, gz: [mul(gz, add(1, square(o)))],
    "arcsin": lambda i, o, gz: [true_divide(gz, sqrt(sub(1, square(i[0]))))],
    "arccos": lambda i, o, gz: [neg(true_divide(gz, sqrt(sub(1, square(i[0])))))],
    "arctan": lambda i, o, gz: [true_divide(gz, add(1, square(i[0])))],
    "arctan2": _arctan2_grad,
    "sinh": lambda i, o, gz: [mul(gz, cosh(i[0]))],
    "cosh": lambda i, o, gz: [mul(gz, sinh(i[0]))],
    "arcsinh": lambda i, o, gz: [true_divide(gz, sqrt(add(square(i[0]), 1)))],
    "arccosh": lambda i, o, gz: [true_divide(gz, sqrt(sub(square(i[0]), 1)))],
    "arctanh": lambda i, o, gz: [true_divide(gz, sub(1, square(i[0])))],
    "log2": lambda i, o, gz: [true_divide(gz, mul(i[0], _LN2))],
    "log10": lambda i, o, gz: [true_divide(gz, mul(i[0], _LN10))],
    "exp2": lambda i, o, gz: [mul(gz, mul(o, _LN2))],
}
