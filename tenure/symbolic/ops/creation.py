"""Creating arrays: ``alloc`` (a value broadcast to a shape) and everything
built on it (``zeros``, ``ones``, ``full``, ``*_like``, ``broadcast_to``), plus
``arange`` and ``eye``.

Every op here returns a fresh, writable array (never a read-only broadcast
view), so later in-place ops may overwrite it; the one exception is
``expand_to``, which rewrites make from ``ones * x`` and which is ``x``
itself when broadcasting changes nothing (a declared view, never one whose
elements overlap).  Shapes are tuples of dims: ints or 0-d integer variables
(``x.shape[0]``).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.shape import as_dim, shape_tuple
from tenure.symbolic.types import TensorType, _shape_str, normalize_dtype
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant


def _dims_of(shape, fn: str) -> tuple:
    """A user-given shape (int, tuple of ints/0-d int variables, or a 1-d int
    variable of static length) as a tuple of dims."""
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, Variable):
        if shape.ndim == 0:
            shape = (shape,)
        elif shape.ndim == 1 and shape.type.shape[0] is not None:
            shape = tuple(shape[i] for i in range(shape.type.shape[0]))
        else:
            raise TypeError(f"{fn}: a symbolic shape must be a vector of known length, got "
                            f"{shape} ({shape.type})")
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError(f"{fn}: shape must be an int or a tuple of ints/0-d int tensors, got "
                        f"{type(shape).__name__}") from None
    dims = tuple(as_dim(d, what=f"{fn} shape[{i}]") for i, d in enumerate(items))
    for i, d in enumerate(dims):
        if isinstance(d, int) and d < 0:
            raise ValueError(f"{fn}: negative length {d} at shape[{i}]")
    return dims


class Alloc(Op):
    """``value`` broadcast to ``shape`` into a new array (``np.full``-like).

    Inputs: the value (any ndim that broadcasts to the shape) and one 0-d
    int64 input per output dimension.
    """

    #: the name errors give (:class:`ExpandTo` shares these methods)
    what = "alloc"

    def make_node(self, value, *dims):
        value = as_tensor_variable(value)
        dims = [as_tensor_variable(d) for d in dims]
        for i, d in enumerate(dims):
            if d.ndim != 0 or d.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"{self.what}: shape[{i}] must be a 0-d integer, got {d} "
                                f"({d.type})")
        if value.ndim > len(dims):
            raise ValueError(f"{self.what}: value of {value.ndim} dimensions ({value.type}) "
                             f"cannot be broadcast to {len(dims)} dimensions")
        static = tuple(int(d.data) if isinstance(d, TensorConstant) else None for d in dims)
        offset = len(dims) - value.ndim
        for axis, vdim in enumerate(value.type.shape):
            out_dim = static[offset + axis]
            if vdim not in (None, 1) and out_dim is not None and vdim != out_dim:
                raise ValueError(f"{self.what}: value of shape {_shape_str(value.type.shape)} "
                                 f"cannot be broadcast to {_shape_str(static)}")
        return Apply(self, [value, *dims], [TensorType(value.dtype, static)()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        dims = tuple(output_shapes[0])
        if any(d < 0 for d in dims):
            raise ValueError(f"{self.what}: negative dimensions are not allowed, got shape "
                             f"{dims}")
        try:
            fits = np.broadcast_shapes(tuple(input_shapes[0]), dims) == dims
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{self.what}: value of shape {tuple(input_shapes[0])} cannot be "
                             f"broadcast to {dims}")
        return True

    def perform(self, node, inputs, output_storage):
        value, dims = inputs[0], tuple(int(d) for d in inputs[1:])
        if any(d < 0 for d in dims):   # (check_shapes' message, not np.empty's)
            raise ValueError(f"alloc: negative dimensions are not allowed, got shape {dims}")
        out_dtype = node.outputs[0].type.numpy_dtype
        cell = output_storage[0]
        if not (isinstance(cell[0], np.ndarray) and cell[0].shape == dims
                and cell[0].dtype == out_dtype):
            cell[0] = np.empty(dims, dtype=out_dtype)
        try:
            cell[0][...] = value
        except ValueError:
            raise ValueError(f"alloc: value of shape {np.shape(value)} cannot be broadcast to "
                             f"{dims}") from None

    def infer_shape(self, node, input_shapes):
        return [tuple(as_dim(d) for d in node.inputs[1:])]

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.reduce import sum_to
        return [sum_to(output_grads[0], inputs[0])] + [None] * (len(inputs) - 1)


_alloc = Alloc()


def alloc(value, *shape):
    """A new array of ``shape`` filled with ``value`` (broadcast).  ``shape``
    may be given as separate dims or one tuple."""
    if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, np.integer)) and not (
            isinstance(shape[0], Variable) and shape[0].ndim == 0):
        shape = shape[0]
    return _alloc(value, *_dims_of(shape, "alloc"))


def full(shape, fill_value, dtype=None):
    """A new array of ``shape`` filled with ``fill_value`` (NumPy's ``full``)."""
    value = as_tensor_variable(fill_value)
    if dtype is not None:
        value = ew.cast(value, normalize_dtype(dtype, what="full"))
    elif isinstance(value, TensorConstant) and value.weak:
        value = constant(value.weak_value)  # a lone Python number: its default dtype
    return _alloc(value, *_dims_of(shape, "full"))


def zeros(shape, dtype=None):
    """A new array of zeros (``dtype`` defaults to ``config.floatX``)."""
    return _alloc(constant(0, dtype=normalize_dtype(dtype, what="zeros")),
                  *_dims_of(shape, "zeros"))


def ones(shape, dtype=None):
    """A new array of ones (``dtype`` defaults to ``config.floatX``)."""
    return _alloc(constant(1, dtype=normalize_dtype(dtype, what="ones")),
                  *_dims_of(shape, "ones"))


def full_like(x, fill_value, dtype=None):
    """An array shaped like ``x`` filled with ``fill_value`` (dtype of ``x`` by default).

    Only ``x``'s shape is used; where it can be inferred, ``x`` is not computed.
    """
    x = as_tensor_variable(x)
    dtype = x.dtype if dtype is None else normalize_dtype(dtype, what="full_like")
    return _alloc(constant(fill_value, dtype=dtype), *shape_tuple(x))


def zeros_like(x, dtype=None):
    """Zeros shaped like ``x`` (dtype of ``x`` by default)."""
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    """Ones shaped like ``x`` (dtype of ``x`` by default)."""
    return full_like(x, 1, dtype)


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape``, as a new writable array (NumPy returns a
    read-only view; tenure copies so the result can be overwritten in place)."""
    x = as_tensor_variable(x)
    dims = _dims_of(shape, "broadcast_to")
    if x.ndim > len(dims):
        raise ValueError(f"broadcast_to: cannot broadcast {x.ndim}-d {x} to {len(dims)} "
                         "dimensions")
    return _alloc(x, *dims)


class ExpandTo(Op):
    """``value`` broadcast to ``dims``: ``value`` itself when it already has
    that shape (a possible view, like :class:`~tenure.symbolic.ops.reduce.SumTo`,
    whose adjoint it is), else a new array holding the broadcast value.

    Rewrites make it from ``ones(dims) * w`` (the gradient of ``sum(x * w)``
    with respect to ``x``): it costs no buffer when ``w`` has the product's
    shape, where the product copies ``w``.  It never returns a view whose
    elements overlap, so an in-place op overwriting it overwrites either
    ``value`` (which the DestroyHandler then guards) or a fresh array.
    Inputs: the value and one 0-d int input per output dimension.
    """

    view_map = {0: [0]}
    view_may_copy = True  # a view only when there is nothing to broadcast

    what = "expand_to"
    make_node = Alloc.make_node
    check_shapes = Alloc.check_shapes
    infer_shape = Alloc.infer_shape
    grad = Alloc.grad

    @staticmethod
    def expanded(value, dims: tuple):
        """``value`` broadcast to ``dims`` (which :meth:`check_shapes` has
        accepted) with NumPy functions only, so a device array stays on its
        device: itself, a view adding leading length-1 axes, or a new array."""
        if tuple(dims) == tuple(value.shape):
            return value
        if tuple(dims) == (1,) * (len(dims) - value.ndim) + tuple(value.shape):
            return value.reshape(dims)
        return np.broadcast_to(value, dims).copy()

    def perform(self, node, inputs, output_storage):
        value, dims = inputs[0], tuple(int(d) for d in inputs[1:])
        if dims != tuple(value.shape):    # the value's own shape needs no check
            self.check_shapes(node, [tuple(value.shape)], [dims])
        output_storage[0][0] = self.expanded(value, dims)

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """Declared a view, but a new array when it broadcasts: count it."""
        value_shape, dims = input_shapes[0], output_shapes[0]
        if value_shape is None or dims is None or math.prod(value_shape) == math.prod(dims):
            return 0
        return math.prod(dims) * node.outputs[0].type.numpy_dtype.itemsize


_expand_to = ExpandTo()


def expand_to(value, *shape):
    """``value`` broadcast to ``shape``: ``value`` itself, not a copy, when it
    already has that shape (so, unlike :func:`broadcast_to`, the result may be
    the input's memory).  ``shape`` as for :func:`alloc`."""
    if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, np.integer)) and not (
            isinstance(shape[0], Variable) and shape[0].ndim == 0):
        shape = shape[0]
    return _expand_to(value, *_dims_of(shape, "expand_to"))


class Arange(Op):
    """``np.arange(start, stop, step)`` with 0-d inputs."""

    __props__ = ("dtype",)

    def __init__(self, dtype: str):
        self.dtype = dtype

    def make_node(self, start, stop, step):
        inputs = [as_tensor_variable(v) for v in (start, stop, step)]
        for name, v in zip(("start", "stop", "step"), inputs):
            if v.ndim != 0:
                raise TypeError(f"arange: {name} must be a scalar, got {v} ({v.type})")
        length = None
        if all(isinstance(v, TensorConstant) for v in inputs):
            values = [v.data.item() for v in inputs]
            if values[2] == 0:
                raise ValueError("arange: step must not be 0")
            length = len(np.arange(*values))
        return Apply(self, inputs, [TensorType(self.dtype, (length,))()])

    def perform(self, node, inputs, output_storage):
        start, stop, step = (v.item() for v in inputs)
        if step == 0:
            raise ValueError("arange: step must not be 0")
        output_storage[0][0] = np.arange(start, stop, step, dtype=self.dtype)

    def infer_shape(self, node, input_shapes):
        static = node.outputs[0].type.shape[0]
        if static is not None:
            return [(static,)]
        start, stop, step = node.inputs
        # ceil((stop - start) / step) as -((start - stop) // step), at least 0
        length = ew.cast(ew.neg(ew.floor_divide(ew.sub(start, stop), step)), "int64")
        return [(ew.maximum(length, 0),)]

    def grad(self, inputs, output_grads):
        return [None, None, None]


def arange(start, stop=None, step=1, dtype=None):
    """Evenly spaced values in ``[start, stop)`` (NumPy's ``arange``).  Bounds may
    be 0-d variables (``tn.arange(x.shape[0])``)."""
    if stop is None:
        start, stop = 0, start
    args = [as_tensor_variable(v) for v in (start, stop, step)]
    if dtype is None:
        # NumPy's own choice for these argument types (it treats them like
        # Python numbers: integers give int64, floats float64).
        probes = [type(a.weak_value)(v) if isinstance(a, TensorConstant) and a.weak
                  else np.dtype(a.dtype).type(v) for a, v in zip(args, (0, 1, 1))]
        dtype = np.arange(*probes).dtype.name
        if np.dtype(dtype).kind == "f" and all(isinstance(a, TensorConstant) and a.weak
                                               for a in args):
            dtype = normalize_dtype(None)
    return Arange(normalize_dtype(dtype, what="arange"))(*args)


class Eye(Op):
    """``np.eye(n, m, k)``: ones on the k-th diagonal."""

    __props__ = ("dtype",)

    def __init__(self, dtype: str):
        self.dtype = dtype

    def make_node(self, n, m, k):
        inputs = [as_tensor_variable(v) for v in (n, m, k)]
        for name, v in zip(("n", "m", "k"), inputs):
            if v.ndim != 0 or v.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"eye: {name} must be a 0-d integer, got {v} ({v.type})")
        static = tuple(int(v.data) if isinstance(v, TensorConstant) else None
                       for v in inputs[:2])
        return Apply(self, inputs, [TensorType(self.dtype, static)()])

    def perform(self, node, inputs, output_storage):
        n, m, k = (int(v) for v in inputs)
        output_storage[0][0] = np.eye(n, m, k, dtype=self.dtype)

    def infer_shape(self, node, input_shapes):
        return [(as_dim(node.inputs[0]), as_dim(node.inputs[1]))]

    def grad(self, inputs, output_grads):
        return [None, None, None]


def eye(n, m=None, k=0, dtype=None):
    """A 2-d array with ones on the ``k``-th diagonal (``dtype``: ``config.floatX``)."""
    return Eye(normalize_dtype(dtype, what="eye"))(n, n if m is None else m, k)
