"""Reductions: ``sum``, ``prod``, ``mean``, ``max``, ``min``, ``all``, ``any``,
``var``, ``std``, ``argmax`` and ``argmin`` along some axes, and the running
sum ``cumsum``.

Each is one NumPy function applied with a fixed ``axis`` and ``keepdims``.
Axes are normalized when the graph is built (negative axes counted from the
end, sorted, ``None`` meaning every axis), so two reductions over the same
axes are equal ops however the axes were spelled.  Output dtypes are never
written by hand: they are whatever NumPy gives (``sum`` of ``int8`` is
``int64``, ``mean`` of ints is ``float64``, ``all`` is ``bool``), found by
asking NumPy itself on a tiny array.

Runtime errors are NumPy's: ``max`` of an empty axis raises ``ValueError``
when the function runs, ``mean`` of one is NaN with a warning.

Gradients: ``sum`` and ``mean`` spread the output gradient over the reduced
axes; ``prod`` gives each element the product of the others (exact with
zeros: computed from the product of the non-zero elements and the number of
zeros, never by dividing by zero); ``max``/``min`` split the gradient evenly
between tied extrema; ``var``/``std`` are differentiable; ``cumsum``'s
gradient is the reversed running sum.  Booleans (``all``, ``any``) and
indices (``argmax``, ``argmin``) carry no gradient.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.ops.axes import axis_index, normalize_axis
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

#: the NumPy implementation of each reduction, by name
_REDUCE_FUNCTIONS = {
    "sum": np.sum,
    "prod": np.prod,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "all": np.all,
    "any": np.any,
}

_ARG_FUNCTIONS = {
    "argmax": np.argmax,
    "argmin": np.argmin,
}


# --------------------------------------------------------------------------
# Axes and shapes


def normalize_axes(axis, ndim: int, fn_name: str = "reduce") -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as a sorted tuple of axes in ``[0, ndim)``.

    ``None`` means every axis.  Raises ``ValueError`` for an axis out of range
    or given twice and ``TypeError`` for anything that is not an axis.
    """
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, tuple):
        items = [axis_index(a, fn_name) for a in axis]
    elif isinstance(axis, list):
        # NumPy rejects lists here too; say what to write instead.
        raise TypeError(f"{fn_name}: axis must be None, an int or a tuple of ints, got a "
                        f"list {axis!r} (use a tuple)")
    else:
        items = [axis_index(axis, fn_name)]
    normalized = [normalize_axis(a, ndim, fn_name) for a in items]
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{fn_name}: axis {axis!r} names the same axis twice (input ndim={ndim})")
    return tuple(sorted(normalized))


def _check_keepdims(keepdims, fn_name: str) -> bool:
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"{fn_name}: keepdims must be a bool, got {keepdims!r}")
    return bool(keepdims)


def reduced_shape(shape: tuple, axes: tuple[int, ...], keepdims: bool) -> tuple:
    """``shape`` with ``axes`` dropped (or set to 1 with ``keepdims``).

    Works on static shapes (ints and ``None``), concrete shapes and symbolic
    shape tuples alike.
    """
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _fits(buffer, shape: tuple, dtype: np.dtype) -> bool:
    """Whether a buffer left from an earlier call can take this output as it is."""
    return (isinstance(buffer, np.ndarray) and buffer.shape == shape
            and buffer.dtype == dtype and buffer.flags.writeable)


#: how many elements NumPy casts at a time when a ufunc or reduction needs its
#: input in another dtype (its ufunc buffer size)
NUMPY_BUFSIZE = 8192


def cast_buffer_bytes(fn_name: str, in_dtype, out_dtype, size: int) -> int:
    """Bytes NumPy allocates to run reduction ``fn_name`` over ``size``
    elements of ``in_dtype`` into ``out_dtype``: a chunk buffer when it
    accumulates in another dtype (``sum`` of int8 as int64, ``mean`` of ints,
    ``all`` of floats), nothing otherwise."""
    if fn_name in ("max", "min", "argmax", "argmin"):
        return 0
    acc = np.dtype(bool) if fn_name in ("all", "any") else np.dtype(out_dtype)
    if np.dtype(in_dtype) == acc:
        return 0
    # (this module's `min` is the symbolic one)
    return (size if size < NUMPY_BUFSIZE else NUMPY_BUFSIZE) * acc.itemsize


# --------------------------------------------------------------------------
# Ops


class _AxisReduction(Op):
    """What every reduction shares: a NumPy function, its axes and ``keepdims``.

    Subclasses say which axes collapse (:meth:`reduced_axes`), what ``axis``
    NumPy is called with and which extra keywords it needs.
    """

    __props__ = ("fn_name", "axis", "keepdims")
    _functions: dict = {}

    def __init__(self, fn_name: str, axis, keepdims: bool = False):
        if fn_name not in self._functions:
            raise ValueError(f"{type(self).__name__}: unknown reduction {fn_name!r}; expected "
                             f"one of {', '.join(self._functions)}")
        self.fn_name = fn_name
        self.axis = axis
        self.keepdims = bool(keepdims)

    @property
    def fn(self):
        return self._functions[self.fn_name]

    def __str__(self) -> str:
        keep = ", keepdims" if self.keepdims else ""
        return f"{self.fn_name}{{axis={self.axis}{keep}}}"

    # -- subclass hooks -------------------------------------------------------
    def reduced_axes(self, ndim: int) -> tuple[int, ...]:
        raise NotImplementedError

    def _check_axes(self, ndim: int) -> None:
        raise NotImplementedError

    def numpy_axis(self, ndim: int):
        """The ``axis`` argument of :attr:`fn` for an input of ``ndim`` axes."""
        raise NotImplementedError

    def numpy_kwargs(self, out_dtype: np.dtype | None) -> dict:
        """:attr:`fn`'s other arguments, for an output of ``out_dtype``."""
        return {}

    # -- Op interface ---------------------------------------------------------
    def make_node(self, x) -> Apply:
        x = as_tensor_variable(x)
        self._check_axes(x.ndim)
        # NumPy decides the dtype; a size-1 array never hits an empty-reduction error.
        probe = np.ones((1,) * x.ndim, dtype=x.dtype)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                result = self.fn(probe, axis=self.numpy_axis(x.ndim), keepdims=self.keepdims,
                                 **self.numpy_kwargs(None))
        except TypeError as exc:
            raise TypeError(f"{self.fn_name}: unsupported input {x} ({x.type}): {exc}") from None
        shape = reduced_shape(x.type.shape, self.reduced_axes(x.ndim), self.keepdims)
        out = TensorType(np.asarray(result).dtype, shape)()
        return Apply(self, [x], [out])

    def perform(self, node, inputs, output_storage):
        (x,) = inputs
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        kwargs = dict(axis=self.numpy_axis(x.ndim), keepdims=self.keepdims,
                      **self.numpy_kwargs(dtype))
        buffer = cell[0]
        if _fits(buffer, reduced_shape(x.shape, self.reduced_axes(x.ndim), self.keepdims),
                 dtype):
            self.fn(x, out=buffer, **kwargs)
            # Some NumPy functions return a scalar even when given out=; the
            # buffer holds the result either way.
            cell[0] = buffer
        else:
            # Full reductions come back as NumPy scalars; outputs are always arrays.
            cell[0] = np.asarray(self.fn(x, **kwargs), dtype=dtype)

    def infer_shape(self, node, input_shapes):
        (in_shape,) = input_shapes
        symbolic = reduced_shape(tuple(in_shape), self.reduced_axes(len(in_shape)),
                                 self.keepdims)
        static = node.outputs[0].type.shape
        # A length known when the graph is built is given as an int.
        return [tuple(s if s is not None else d for s, d in zip(static, symbolic))]

    def flops(self, node, shapes) -> float:
        """One per input element."""
        return float(cost_facts.inputs_size(node, shapes))

    def workspace_bytes(self, node, input_shapes, output_shapes):
        (shape,) = input_shapes
        if shape is None:
            return 0
        import math
        return cast_buffer_bytes(self.fn_name, node.inputs[0].type.numpy_dtype,
                                 node.outputs[0].type.numpy_dtype, math.prod(shape))


class Reduce(_AxisReduction):
    """``fn_name`` (``"sum"``, ``"prod"``, ``"mean"``, ``"max"``, ``"min"``, ``"all"``
    or ``"any"``) over the axes ``axis``: a sorted tuple of distinct
    non-negative ints (see :func:`normalize_axes`)."""

    _functions = _REDUCE_FUNCTIONS

    def __init__(self, fn_name: str, axis: tuple[int, ...], keepdims: bool = False):
        if not isinstance(axis, tuple):
            raise TypeError(f"Reduce: axis must be a tuple of ints (normalize it with "
                            f"normalize_axes), got {axis!r}")
        axis = tuple(axis_index(a, fn_name) for a in axis)
        if list(axis) != sorted(set(axis)) or (axis and axis[0] < 0):
            raise ValueError(f"Reduce: axis must be sorted, distinct and non-negative, "
                             f"got {axis!r}")
        super().__init__(fn_name, axis, keepdims)

    def reduced_axes(self, ndim: int) -> tuple[int, ...]:
        return self.axis

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        shape = input_shapes[0]
        # (``any`` is this module's reduction: the loop is spelled out.)
        if self.fn_name in ("max", "min") and 0 in [shape[a] for a in self.axis]:
            raise ValueError(f"{self}: zero-size array to reduction operation "
                             f"{self.fn_name}imum which has no identity (shape {shape})")
        return True

    def _check_axes(self, ndim: int) -> None:
        for a in self.axis:
            normalize_axis(a, ndim, self.fn_name)

    def numpy_axis(self, ndim: int):
        # Every axis is spelled None so NumPy takes its whole-array path.
        return None if len(self.axis) == ndim else self.axis

    def numpy_kwargs(self, out_dtype):
        # Without this, NumPy may accumulate in the dtype of a given out=
        # buffer; naming the dtype keeps results identical with or without one.
        if out_dtype is not None and self.fn_name in ("sum", "prod"):
            return {"dtype": out_dtype}
        return {}


    # -- gradients -----------------------------------------------------------
    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        (x,) = inputs
        rule = _REDUCE_GRADS.get(self.fn_name)
        if rule is None or not is_differentiable(x):
            return [None]  # all/any: boolean results carry no gradient
        return [rule(self, x, self.make_node(x).outputs[0], output_grads[0])]

    def expand_to_input(self, value, x):
        """A reduced ``value`` (this op's output shape) broadcast back to ``x``'s shape."""
        from tenure.symbolic.ops.creation import broadcast_to
        from tenure.symbolic.ops.shape import shape_tuple
        return broadcast_to(self.keep_reduced_axes(value), shape_tuple(x))

    def keep_reduced_axes(self, value):
        """A reduced ``value`` with the reduced axes back as length-1 axes (what
        ``keepdims=True`` would have given), so it broadcasts against the input."""
        from tenure.symbolic.ops.shape import expand_dims
        if not self.keepdims and self.axis:
            value = expand_dims(value, self.axis)
        return value


def _reduced_count(op: Reduce, x):
    """How many elements each output of ``op`` reduces (a dim)."""
    from tenure.symbolic.ops.shape import dim_prod, shape_tuple
    dims = shape_tuple(x)
    return dim_prod([dims[a] for a in op.axis])


def _sum_grad(op, x, out, gz):
    return op.expand_to_input(gz, x)


def _mean_grad(op, x, out, gz):
    count = _reduced_count(op, x)
    return ew.true_divide(op.expand_to_input(gz, x), ew.cast(count, gz.dtype)
                          if not isinstance(count, int) else count)


def _prod_grad(op, x, out, gz):
    """d prod / d x_i is the product of the other elements of x_i's group.

    Computed without dividing by zero: with ``p`` the product of the non-zero
    elements and ``k`` the number of zeros in the group, it is ``p / x_i``
    when ``k == 0``; ``p`` for the zero and 0 elsewhere when ``k == 1``; and
    0 everywhere when ``k >= 2``.
    """
    if not op.axis:
        return gz  # a product over no axes is the identity
    is_zero = ew.equal(x, 0)
    nonzero = ew.where(is_zero, 1, x)
    p = Reduce("prod", op.axis, keepdims=True)(nonzero)
    k = Reduce("sum", op.axis, keepdims=True)(is_zero)
    one_zero = ew.where(is_zero, p, 0)
    share = ew.where(ew.equal(k, 0), ew.true_divide(p, nonzero),
                     ew.where(ew.equal(k, 1), one_zero, 0))
    return ew.mul(op.keep_reduced_axes(gz), share)


def _extremum_grad(op, x, out, gz):
    """The gradient goes to the elements equal to the max (min), split evenly
    between them when several tie."""
    if not op.axis:
        return gz
    winners = ew.cast(ew.equal(x, op.keep_reduced_axes(out)), gz.dtype)
    count = Reduce("sum", op.axis, keepdims=True)(winners)
    return ew.mul(op.keep_reduced_axes(gz), ew.true_divide(winners, count))


_REDUCE_GRADS = {
    "sum": _sum_grad,
    "mean": _mean_grad,
    "prod": _prod_grad,
    "max": _extremum_grad,
    "min": _extremum_grad,
}


class Var(Reduce):
    """``np.var(x, axis, ddof=ddof, keepdims)``: the mean squared deviation from
    the mean over ``axis``, divided by ``n - ddof`` instead of ``n``.

    The dtype is NumPy's: float64 for ints and bools, the real dtype for
    complex inputs, else ``x``'s.  ``n - ddof <= 0`` gives inf or NaN (with a
    NumPy warning), as in NumPy.
    """

    __props__ = ("fn_name", "axis", "keepdims", "ddof")
    _functions = {"var": np.var}

    def __init__(self, axis: tuple[int, ...], ddof=0, keepdims: bool = False):
        self.ddof = _check_ddof(ddof, "var")
        super().__init__("var", axis, keepdims)

    def __str__(self) -> str:
        keep = ", keepdims" if self.keepdims else ""
        ddof = f", ddof={self.ddof}" if self.ddof else ""
        return f"var{{axis={self.axis}{ddof}{keep}}}"

    def numpy_kwargs(self, out_dtype):
        return {"ddof": self.ddof}

    def perform(self, node, inputs, output_storage):
        # No out= buffer: NumPy's var accumulates in the buffer's dtype when given
        # one, which changes float16 results.
        (x,) = inputs
        dtype = node.outputs[0].type.numpy_dtype
        result = np.var(x, axis=self.numpy_axis(x.ndim), keepdims=self.keepdims,
                        ddof=self.ddof)
        output_storage[0][0] = np.asarray(result, dtype=dtype)

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """``np.var`` holds ``x - mean`` (in the computation dtype) as a full
        temporary, and the mean (broadcast against ``x``: NumPy may buffer it)."""
        (shape,) = input_shapes
        if shape is None:
            return 0
        import math
        x_dtype = node.inputs[0].type.numpy_dtype
        dtype = x_dtype if x_dtype.kind in "fc" else np.dtype("float64")
        reduced = reduced_shape(tuple(shape), self.axis, True)
        return ((math.prod(shape) + math.prod(reduced)) * dtype.itemsize
                + ew.broadcast_buffer_bytes(tuple(shape), [tuple(shape), reduced],
                                            dtype.itemsize))

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        (x,) = inputs
        (gz,) = output_grads
        if not is_differentiable(x):
            return [None]
        count = _reduced_count(self, x)
        centered = ew.sub(x, Reduce("mean", self.axis, keepdims=True)(x))
        if isinstance(count, int):
            with np.errstate(all="ignore"):
                scale = float(np.divide(2.0, np.float64(count - self.ddof)))
        else:
            scale = ew.true_divide(2, ew.sub(ew.cast(count, gz.dtype), self.ddof))
        return [ew.mul(self.keep_reduced_axes(gz), ew.mul(centered, scale))]


def _check_ddof(ddof, fn_name: str):
    if isinstance(ddof, (bool, np.bool_)) or not isinstance(ddof, numbers.Real):
        raise TypeError(f"{fn_name}: ddof must be a number (delta degrees of freedom), got "
                        f"{type(ddof).__name__} {ddof!r}")
    if isinstance(ddof, numbers.Integral):
        return int(ddof)
    return float(ddof)


class ArgReduce(_AxisReduction):
    """``argmax`` or ``argmin`` along one axis (an int in ``[0, ndim)``), or over the
    flattened input when ``axis`` is None."""

    _functions = _ARG_FUNCTIONS

    def __init__(self, fn_name: str, axis: int | None, keepdims: bool = False):
        if axis is not None:
            axis = axis_index(axis, fn_name)
            if axis < 0:
                raise ValueError(f"ArgReduce: axis must be non-negative, got {axis}")
        super().__init__(fn_name, axis, keepdims)

    def reduced_axes(self, ndim: int) -> tuple[int, ...]:
        # Over the flattened array every axis collapses (to 1 with keepdims).
        return tuple(range(ndim)) if self.axis is None else (self.axis,)

    def _check_axes(self, ndim: int) -> None:
        if self.axis is not None:
            normalize_axis(self.axis, ndim, self.fn_name)

    def numpy_axis(self, ndim: int):
        return self.axis

    def grad(self, inputs, output_grads):
        return [None]  # an index is piecewise constant: no gradient flows


# --------------------------------------------------------------------------
# User-facing functions


def _reduce(fn_name: str, x, axis, keepdims):
    x = as_tensor_variable(x)
    axes = normalize_axes(axis, x.ndim, fn_name)
    return Reduce(fn_name, axes, _check_keepdims(keepdims, fn_name))(x)


def _arg_reduce(fn_name: str, x, axis, keepdims):
    x = as_tensor_variable(x)
    if axis is not None:
        if isinstance(axis, (tuple, list)):
            # NumPy's argmax/argmin take one axis only.
            raise TypeError(f"{fn_name}: axis must be None or an int, got "
                            f"{type(axis).__name__} {axis!r}")
        axis = normalize_axis(axis_index(axis, fn_name), x.ndim, fn_name)
    return ArgReduce(fn_name, axis, _check_keepdims(keepdims, fn_name))(x)


def sum(x, axis=None, keepdims=False):
    """The sum of ``x`` over ``axis`` (None: every axis).

    Small ints and bools are summed as int64 (uint64 for unsigned), as in NumPy.
    """
    return _reduce("sum", x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    """The product of ``x`` over ``axis``; small ints widen like :func:`sum`."""
    return _reduce("prod", x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """The mean of ``x`` over ``axis``: float64 for ints and bools, else ``x``'s dtype."""
    return _reduce("mean", x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """The largest element of ``x`` over ``axis`` (NaN propagates; an empty axis raises
    ``ValueError`` when the function runs)."""
    return _reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """The smallest element of ``x`` over ``axis`` (see :func:`max`)."""
    return _reduce("min", x, axis, keepdims)


def all(x, axis=None, keepdims=False):
    """Whether every element of ``x`` over ``axis`` is true (bool)."""
    return _reduce("all", x, axis, keepdims)


def any(x, axis=None, keepdims=False):
    """Whether some element of ``x`` over ``axis`` is true (bool)."""
    return _reduce("any", x, axis, keepdims)


def argmax(x, axis=None, keepdims=False):
    """The index (int64) of the largest element along ``axis``, the first on ties.

    ``axis`` is one int, or None for an index into the flattened ``x``.
    """
    return _arg_reduce("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """The index (int64) of the smallest element along ``axis`` (see :func:`argmax`)."""
    return _arg_reduce("argmin", x, axis, keepdims)


def var(x, axis=None, ddof=0, keepdims=False):
    """The variance of ``x`` over ``axis`` (NumPy's ``var``): the mean of
    ``|x - mean(x)|**2``, with ``n - ddof`` as the divisor.  float64 for ints
    and bools, the real dtype for complex inputs, else ``x``'s dtype."""
    x = as_tensor_variable(x)
    axes = normalize_axes(axis, x.ndim, "var")
    return Var(axes, _check_ddof(ddof, "var"), _check_keepdims(keepdims, "var"))(x)


def std(x, axis=None, ddof=0, keepdims=False):
    """The standard deviation of ``x`` over ``axis`` (NumPy's ``std``):
    ``sqrt(var(x, axis, ddof, keepdims))``, with the same dtypes."""
    x = as_tensor_variable(x)
    axes = normalize_axes(axis, x.ndim, "std")
    v = Var(axes, _check_ddof(ddof, "std"), _check_keepdims(keepdims, "std"))(x)
    return ew.sqrt(v)


# --------------------------------------------------------------------------
# Running sums


class CumSum(Op):
    """``np.cumsum(x, axis)``: running sums along ``axis`` (an int in ``[0, ndim)``),
    or along the flattened ``x`` when ``axis`` is None (the result is then 1-d).

    ``reverse=True`` sums from the end instead (``flip(cumsum(flip(x)))``):
    the gradient of a running sum is the reversed running sum of its output
    gradient, and vice versa.  Small ints and bools widen like :func:`sum`.
    """

    __props__ = ("axis", "reverse")

    #: the NumPy function (private: autodoc would show NumPy's docstring)
    _function = staticmethod(np.cumsum)
    #: the name errors and printing give
    name = "cumsum"

    def __init__(self, axis: int | None, reverse: bool = False):
        if axis is not None:
            axis = axis_index(axis, self.name)
            if axis < 0:
                raise ValueError(f"{type(self).__name__}: axis must be non-negative, got {axis}")
        self.axis = axis
        self.reverse = bool(reverse)

    def __str__(self) -> str:
        name = f"{self.name}_reverse" if self.reverse else self.name
        return f"{name}{{axis={self.axis}}}"

    def running(self, x, **kwargs):
        """The op's NumPy function (``np.cumsum``; ``np.cumprod`` for
        :class:`CumProd`) of ``x`` with NumPy's keywords: device arrays take
        it over."""
        return self._function(x, **kwargs)

    def make_node(self, x) -> Apply:
        x = as_tensor_variable(x)
        if self.axis is not None:
            normalize_axis(self.axis, x.ndim, self.name)
        try:
            dtype = self.running(np.ones((1,) * x.ndim, dtype=x.dtype), axis=self.axis).dtype
        except TypeError as exc:
            raise TypeError(f"{self.name}: unsupported input {x} ({x.type}): {exc}") from None
        if self.axis is None:
            static = x.type.shape
            shape = (int(np.prod(static, dtype=np.int64)) if None not in static else None,)
        else:
            shape = x.type.shape
        return Apply(self, [x], [TensorType(dtype, shape)()])

    def perform(self, node, inputs, output_storage):
        (x,) = inputs
        dtype = node.outputs[0].type.numpy_dtype
        axis = self.axis
        if axis is None:
            x, axis = np.ravel(x), 0
        if not self.reverse:
            output_storage[0][0] = self.running(x, axis=axis, dtype=dtype)
            return
        out = np.empty(x.shape, dtype=dtype)
        # Running over the flipped input into a flipped view keeps the result C-ordered.
        self.running(np.flip(x, axis), axis=axis, dtype=dtype, out=np.flip(out, axis))
        output_storage[0][0] = out

    def infer_shape(self, node, input_shapes):
        from tenure.symbolic.ops.shape import dim_prod
        if self.axis is None:
            static = node.outputs[0].type.shape[0]
            return [(static if static is not None else dim_prod(input_shapes[0]),)]
        return [tuple(input_shapes[0])]

    def flops(self, node, shapes) -> float:
        """One per input element."""
        return float(cost_facts.inputs_size(node, shapes))

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.shape import reshape, shape_tuple
        (x,) = inputs
        (gz,) = output_grads
        if not is_differentiable(x):
            return [None]
        if self.axis is not None:
            return [CumSum(self.axis, not self.reverse)(gz)]
        g = CumSum(0, not self.reverse)(gz)
        return [g if x.ndim == 1 else reshape(g, shape_tuple(x))]


class CumProd(CumSum):
    """``np.cumprod(x, axis)``: running products, as :class:`CumSum` runs sums
    (``reverse=True`` from the end).  Small ints and bools widen as
    :func:`prod` widens them.

    The gradient is PyTensor's: the reversed running sum of ``gz *
    cumprod(x)``, divided by ``x`` -- not defined (inf or NaN) where ``x``
    holds a zero."""

    _function = staticmethod(np.cumprod)
    name = "cumprod"

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.elemwise import mul, true_divide
        from tenure.symbolic.ops.shape import reshape, shape_tuple
        (x,) = inputs
        (gz,) = output_grads
        if not is_differentiable(x):
            return [None]
        products = self(x)
        axis = 0 if self.axis is None else self.axis
        g = CumSum(axis, not self.reverse)(mul(gz, products))
        if self.axis is None and x.ndim != 1:
            g = reshape(g, shape_tuple(x))
        return [true_divide(g, x)]


def cumprod(x, axis=None):
    """The running product of ``x`` along ``axis`` (NumPy's ``cumprod``);
    with ``axis=None``, of the flattened ``x`` (a 1-d result).  Small ints
    and bools are multiplied as int64 (uint64 for unsigned), as in NumPy."""
    x = as_tensor_variable(x)
    if axis is not None:
        axis = normalize_axis(axis_index(axis, "cumprod"), x.ndim, "cumprod")
    if axis is None and x.ndim == 1:
        axis = 0
    return CumProd(axis)(x)


def cumsum(x, axis=None):
    """The running sum of ``x`` along ``axis`` (NumPy's ``cumsum``); with
    ``axis=None``, of the flattened ``x`` (a 1-d result).  Small ints and bools
    are summed as int64 (uint64 for unsigned), as in NumPy."""
    x = as_tensor_variable(x)
    if axis is not None:
        # Strict like the reductions: a 0-d input has no axis 0 (NumPy lets it pass).
        axis = normalize_axis(axis_index(axis, "cumsum"), x.ndim, "cumsum")
    if axis is None and x.ndim == 1:
        axis = 0  # the same result, without flattening
    return CumSum(axis)(x)


# --------------------------------------------------------------------------
# Undoing a broadcast (for gradients)


class SumTo(Op):
    """Sum ``g`` down to a target shape: over its extra leading axes and over
    every axis where the target has length 1 and ``g`` does not.

    This is the adjoint of NumPy broadcasting, decided at run time so it is
    right even where a length 1 was not known when the graph was built.
    Inputs: ``g`` and one 0-d int input per target dimension.  The result is
    ``g`` itself when nothing needs summing (declared as a possible view).
    """

    view_map = {0: [0]}
    view_may_copy = True  # a view only when there is nothing to sum

    def make_node(self, g, *dims):
        g = as_tensor_variable(g)
        dims = [as_tensor_variable(d) for d in dims]
        if len(dims) > g.ndim:
            raise ValueError(f"sum_to: cannot sum a {g.ndim}-d {g} to {len(dims)} dimensions")
        from tenure.symbolic.variable import TensorConstant
        static = tuple(int(d.data) if isinstance(d, TensorConstant) else None for d in dims)
        return Apply(self, [g, *dims], [TensorType(g.dtype, static)()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        g, target = tuple(input_shapes[0]), tuple(output_shapes[0])
        tail = g[len(g) - len(target):]
        if len(target) > len(g) or [t for h, t in zip(tail, target) if t not in (1, h)]:
            raise ValueError(f"sum_to: an array of shape {g} does not broadcast from {target}")
        return True

    @staticmethod
    def summed_to(g, target: tuple):
        """``g`` summed over the axes that broadcasting ``target`` added or
        stretched (NumPy functions only: any array library's array does)."""
        shape = tuple(g.shape)
        lead = g.ndim - len(target)
        if lead:
            g = np.sum(g, axis=tuple(range(lead)))
        axes = tuple(i for i, (have, want) in enumerate(zip(g.shape, target))
                     if want == 1 and have != 1)
        if axes:
            g = np.sum(g, axis=axes, keepdims=True)
        if tuple(g.shape) != target:
            raise ValueError(f"sum_to: an array of shape {shape} does not broadcast "
                             f"from {target}")
        return g

    def perform(self, node, inputs, output_storage):
        g = self.summed_to(inputs[0], tuple(int(d) for d in inputs[1:]))
        output_storage[0][0] = np.asarray(g, dtype=node.outputs[0].type.numpy_dtype)

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """Declared a view, but a new array when it sums: count that array
        (and the partial sum over leading axes) while it is made."""
        import math
        g_shape, target = input_shapes[0], output_shapes[0]
        if g_shape is None or tuple(g_shape) == tuple(target):
            return 0
        itemsize = node.outputs[0].type.numpy_dtype.itemsize
        total = math.prod(target) * itemsize
        lead = len(g_shape) - len(target)
        if lead and tuple(g_shape[lead:]) != tuple(target):
            total += math.prod(g_shape[lead:]) * itemsize
        return total

    def infer_shape(self, node, input_shapes):
        from tenure.symbolic.ops.shape import as_dim
        return [tuple(as_dim(d) for d in node.inputs[1:])]

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.creation import broadcast_to
        from tenure.symbolic.ops.shape import shape_tuple
        return [broadcast_to(output_grads[0], shape_tuple(inputs[0]))] + [None] * (
            len(inputs) - 1)


_sum_to = SumTo()


def sum_to(g, like):
    """``g`` summed down to the shape of ``like`` (the adjoint of broadcasting
    ``like`` to ``g``'s shape).  Only ``like``'s shape is used."""
    from tenure.symbolic.ops.shape import shape_tuple
    g = as_tensor_variable(g)
    like = as_tensor_variable(like)
    if g.type.shape == like.type.shape and None not in g.type.shape:
        return g  # statically the same shape: nothing to sum
    return _sum_to(g, *shape_tuple(like))
