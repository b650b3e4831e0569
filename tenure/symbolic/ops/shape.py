"""Shape ops: reading a shape, building small vectors, reshaping and moving axes.

* :class:`Shape` gives a tensor's shape as an int64 vector; :func:`shape_tuple`
  gives it as a tuple of *dims* (a Python int where the length is static, a
  0-d int64 variable otherwise), worked out from the ops' ``infer_shape`` so
  that knowing a shape never requires computing the tensor itself.
* :class:`MakeVector` stacks 0-d tensors into a vector (``[n, 3]`` as a shape).
* :class:`Reshape` and :class:`DimShuffle` (transpose, expand_dims, squeeze)
  return views of their input where NumPy can, and declare it in ``view_map``.

The ``dim_*`` helpers do integer arithmetic on dims, folding to Python ints
when every operand is one, so shapes that are static stay static and symbolic
ones produce small graphs.  Other ops use them in their ``infer_shape``.
"""

from __future__ import annotations

import numbers
import operator
import weakref

import numpy as np

from tenure.symbolic.ops.axes import normalize_axis
from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.types import TensorType, _shape_str, python_scalar_dtype
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant

# --------------------------------------------------------------------------
# Dim arithmetic: a dim is a Python int or a 0-d int64 variable


def as_dim(value, what: str = "dim"):
    """``value`` as a dim: an int for Python/NumPy ints and integer constants,
    else a 0-d int64 variable (other integer dtypes are cast)."""
    is_bool = isinstance(value, (bool, np.bool_))  # ints to Python, but never lengths
    if isinstance(value, (numbers.Integral, np.integer)) and not is_bool:
        return int(value)
    if isinstance(value, Variable):
        var = as_tensor_variable(value)
        if var.ndim != 0 or var.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{what}: expected an int or a 0-d integer tensor, got {var} "
                            f"({var.type})")
        if isinstance(var, TensorConstant):
            return int(var.data)
        return ew.cast(var, "int64")
    raise TypeError(f"{what}: expected an int or a 0-d integer tensor, got "
                    f"{type(value).__name__} {value!r}")


def _both_ints(a, b) -> bool:
    return isinstance(a, int) and isinstance(b, int)


def dim_add(a, b):
    return a + b if _both_ints(a, b) else ew.add(a, b)


def dim_sub(a, b):
    return a - b if _both_ints(a, b) else ew.sub(a, b)


def dim_mul(a, b):
    if _both_ints(a, b):
        return a * b
    # Multiplying by 1 is common in products of shapes; skip the node.
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    return ew.mul(a, b)


def dim_floordiv(a, b):
    return a // b if _both_ints(a, b) else ew.floor_divide(a, b)


def dim_max(a, b):
    return max(a, b) if _both_ints(a, b) else ew.maximum(a, b)


def dim_min(a, b):
    return min(a, b) if _both_ints(a, b) else ew.minimum(a, b)


def dim_lt(a, b):
    """``a < b``: a Python bool when both are ints, else a 0-d bool variable."""
    return a < b if _both_ints(a, b) else ew.less(a, b)


def dim_eq(a, b):
    return a == b if _both_ints(a, b) else ew.equal(a, b)


def dim_where(cond, a, b):
    """``a if cond else b``; decided now when ``cond`` is a Python bool."""
    if isinstance(cond, bool):
        return a if cond else b
    if isinstance(a, int) and isinstance(b, int) and a == b:
        return a
    return ew.where(cond, a, b)


def dim_prod(dims):
    """The product of ``dims`` (1 for none)."""
    result = 1
    for d in dims:
        result = dim_mul(result, d)
    return result


# --------------------------------------------------------------------------
# Shape


class Shape(Op):
    """The shape of a tensor as an int64 vector of length ``ndim``."""

    __props__ = ()

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [TensorType("int64", (x.ndim,))()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        return True   # reading a shape cannot fail

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.array(inputs[0].shape, dtype=np.int64)

    def infer_shape(self, node, input_shapes):
        return [(node.inputs[0].ndim,)]

    def flops(self, node, shapes) -> float:
        """None: shape bookkeeping, the input's elements are not read."""
        return 0.0

    def bytes_moved(self, node, shapes) -> float:
        """None: shape bookkeeping, the input's elements are not read."""
        return 0.0

    def grad(self, inputs, output_grads):
        return [None]  # a shape is an integer: it does not vary with the values


_shape = Shape()


def shape(x):
    """The shape of ``x`` as a symbolic int64 vector (``x.shape``)."""
    return _shape(x)


def get_vector_length(v) -> int:
    """The length of the vector ``v`` where it is known before anything runs
    (PyTensor's ``get_vector_length``): its static length (a shape vector's
    is its array's ndim; a stack of scalars', their count) or a constant's.
    ``TypeError`` for a variable that is not a vector; ``ValueError``, naming
    ``v``, where only running would tell."""
    v = as_tensor_variable(v)
    if v.ndim != 1:
        raise TypeError(f"get_vector_length: expected a vector, got {v} ({v.type})")
    if v.type.shape[0] is not None:      # (a constant's type has its data's shape)
        return int(v.type.shape[0])
    raise ValueError(f"get_vector_length: the length of {v} ({v.type}) is known only when "
                     "the function runs")


def _has_infer_shape(op) -> bool:
    return type(op).infer_shape is not Op.infer_shape


def _fallback_dims(var) -> tuple:
    """Dims read from the shape vector of ``var`` itself (needs ``var`` computed)."""
    from tenure.symbolic.ops.indexing import getitem
    static = var.type.shape
    if None not in static:
        return static
    vec = shape(var)
    return tuple(d if d is not None else getitem(vec, i) for i, d in enumerate(static))


def _checked_dims(var, dims, op) -> tuple:
    """``dims`` (an ``infer_shape`` result for ``var``) as a tuple of dims, with
    static lengths taking precedence over inferred ones."""
    static = var.type.shape
    dims = tuple(dims)
    if len(dims) != len(static):
        raise ValueError(f"{op}.infer_shape returned {len(dims)} dims for output {var} of "
                         f"type {var.type}")
    return tuple(s if s is not None else as_dim(d, what=f"{op}.infer_shape")
                 for s, d in zip(static, dims))


_SHAPE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def shape_tuple(x) -> tuple:
    """The shape of ``x`` as a tuple with one dim per axis.

    A dim is a Python int where the static length is known, else a 0-d int64
    variable.  Where ``x`` is computed by an op with ``infer_shape`` the dims
    are built from the shapes of its inputs (recursively), so evaluating them
    does not compute ``x``; roots, and ops without ``infer_shape``, fall back
    to indexing ``shape(x)``.
    """
    # Remembered across calls (graph variables do not change what they compute):
    # gradients ask for the shape of every intermediate of a chain, and a
    # per-call memo would make building them quadratic in the chain's length.
    # Rewrites, which do change what nodes read, use infer_dims with their own memo.
    return infer_dims(as_tensor_variable(x), _SHAPE_CACHE)


def infer_dims(x, memo) -> tuple:
    """:func:`shape_tuple` of ``x`` with the dims it computes on the way kept in
    ``memo`` (a dict, or a mapping that outlives the call)."""
    # Iterative depth-first walk: graphs can be deeper than the recursion limit.
    # Each variable's dims are computed once, which keeps the walk linear.
    stack = [x]
    while stack:
        var = stack[-1]
        if var in memo:
            stack.pop()
            continue
        node = var.owner
        if not isinstance(var.type, TensorType):
            memo[var] = None  # e.g. a random state: not an array, no shape
        elif None not in var.type.shape:
            memo[var] = var.type.shape
        elif node is None or not _has_infer_shape(node.op):
            memo[var] = _fallback_dims(var)
        else:
            missing = [i for i in node.inputs if i not in memo]
            if missing:
                stack.extend(missing)
                continue
            try:
                out_dims = node.op.infer_shape(node, [memo[i] for i in node.inputs])
            except NotImplementedError:
                memo[var] = _fallback_dims(var)
            else:
                for out, dims in zip(node.outputs, out_dims):
                    memo[out] = _checked_dims(out, dims, node.op)
        stack.pop()
    return memo[x]


# --------------------------------------------------------------------------
# MakeVector


class MakeVector(Op):
    """A 1-d tensor of ``dtype`` from 0-d inputs (one element each)."""

    __props__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype).name

    def make_node(self, *items):
        items = [as_tensor_variable(v) for v in items]
        for i, v in enumerate(items):
            if v.ndim != 0:
                raise TypeError(f"{self}: item {i} must be 0-d, got {v} ({v.type})")
            if not np.can_cast(v.type.numpy_dtype, self.dtype, "same_kind"):
                raise TypeError(f"{self}: item {i} ({v.type}) cannot be cast to {self.dtype}")
        return Apply(self, items, [TensorType(self.dtype, (len(items),))()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.array(inputs, dtype=self.dtype).reshape(len(inputs))

    def infer_shape(self, node, input_shapes):
        return [(len(node.inputs),)]

    def flops(self, node, shapes) -> float:
        """None: shape bookkeeping on a few scalars."""
        return 0.0

    def bytes_moved(self, node, shapes) -> float:
        """None: shape bookkeeping on a few scalars."""
        return 0.0

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.indexing import getitem
        (gz,) = output_grads
        # Element i of the vector is item i: its gradient is gz[i].
        return [getitem(gz, i) if gz is not None and is_differentiable(item) else None
                for i, item in enumerate(inputs)]


def stack_scalars(items, dtype=None):
    """A 1-d tensor from a flat list of 0-d tensors and Python numbers.

    The dtype is what NumPy would give the items, with Python numbers weakly
    typed (``[x_int32, 2]`` is int32); ``dtype`` overrides it.
    """
    if isinstance(items, Variable) or not isinstance(items, (list, tuple)):
        raise TypeError(f"stack_scalars: expected a list of 0-d tensors and numbers, got "
                        f"{type(items).__name__}")
    vars_ = []
    for i, item in enumerate(items):
        if isinstance(item, (list, tuple)):
            raise TypeError(f"stack_scalars: item {i} is a nested {type(item).__name__}; only "
                            "flat lists of 0-d tensors and numbers can be stacked (stack the "
                            "rows separately)")
        var = as_tensor_variable(item)
        if var.ndim != 0:
            raise TypeError(f"stack_scalars: item {i} must be 0-d, got {var} ({var.type})")
        vars_.append(var)
    if dtype is None:
        dtype = _stacked_dtype(vars_)
    return MakeVector(dtype)(*vars_)


def _stacked_dtype(items) -> str:
    strong = [v.dtype for v in items if not (isinstance(v, TensorConstant) and v.weak)]
    weak = [v.weak_value for v in items if isinstance(v, TensorConstant) and v.weak]
    if not strong:
        # Only Python numbers: each gets the dtype it has on its own (floatX for
        # floats).  An empty list is a float vector, as in NumPy.
        return np.result_type(*(python_scalar_dtype(w) for w in weak)).name if weak \
            else python_scalar_dtype(0.0)
    return np.result_type(*strong, *weak).name


# --------------------------------------------------------------------------
# Reshape


def _static_vector_entries(vec) -> list:
    """What is known of a 1-d int vector's entries when the graph is built: an
    int per entry whose value is known, else None."""
    n = vec.type.shape[0]
    if isinstance(vec, TensorConstant):
        return [int(v) for v in vec.data]
    node = vec.owner
    if node is not None and isinstance(node.op, MakeVector):
        return [int(v.data) if isinstance(v, TensorConstant) else None for v in node.inputs]
    if node is not None and isinstance(node.op, Shape):
        # The shape of another tensor: its static lengths are the entries.
        return list(node.inputs[0].type.shape)
    return [None] * n


def _vector_entry_dims(vec, static) -> list:
    """Each entry of a 1-d int vector as a dim (for ``infer_shape``)."""
    from tenure.symbolic.ops.indexing import getitem
    node = vec.owner
    dims = []
    for i, s in enumerate(static):
        if s is not None:
            dims.append(s)
        elif node is not None and isinstance(node.op, MakeVector):
            dims.append(as_dim(node.inputs[i]))
        else:
            dims.append(as_dim(getitem(vec, i)))
    return dims


def _reshape_static_shape(in_shape, entries) -> tuple:
    """The output's static shape; raises ValueError for what cannot work."""
    if sum(1 for e in entries if e == -1) > 1:
        raise ValueError(f"reshape: can only specify one unknown dimension (-1), got shape "
                         f"{_shape_str(entries)}")
    for e in entries:
        if e is not None and e < -1:
            raise ValueError(f"reshape: negative length {e} in shape {_shape_str(entries)} "
                             "(only -1, for 'infer this length', is allowed)")
    out = [None if e == -1 else e for e in entries]
    if None in in_shape or None in entries:
        return tuple(out)
    size = int(np.prod(in_shape, dtype=np.int64))
    if -1 in entries:
        others = int(np.prod([e for e in entries if e != -1], dtype=np.int64))
        if others == 0 or size % others:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {tuple(in_shape)} "
                             f"into shape {tuple(entries)}")
        out[entries.index(-1)] = size // others
    elif int(np.prod(entries, dtype=np.int64)) != size:
        raise ValueError(f"reshape: cannot reshape a tensor of shape {tuple(in_shape)} into "
                         f"shape {tuple(entries)} (sizes {size} and "
                         f"{int(np.prod(entries, dtype=np.int64))} differ)")
    return tuple(out)


def reshape_static_shape(in_shape, shp) -> tuple:
    """The static shape of ``reshape(x, shp)`` for an ``x`` of static shape
    ``in_shape`` (an int where a length is known, else None); a ValueError
    where the shapes already show that the reshape cannot work."""
    return _reshape_static_shape(tuple(in_shape), _static_vector_entries(shp))


def reshape_always_fits(x, shp) -> bool:
    """Whether ``reshape(x, shp)`` cannot raise, whatever ``x`` holds at run
    time: ``shp`` is ``shape(x)`` itself, or a flattening (one -1 and every
    other entry 1), or the static shapes of ``x`` and of the result are fully
    known (``make_node`` then checked the sizes when the graph was built)."""
    if shp.owner is not None and isinstance(shp.owner.op, Shape) and shp.owner.inputs[0] is x:
        return True
    entries = _static_vector_entries(shp)
    if entries.count(-1) == 1 and all(e in (-1, 1) for e in entries):
        return True
    if None in x.type.shape:
        return False
    try:
        return None not in reshape_static_shape(x.type.shape, shp)
    except ValueError:  # the sizes cannot fit: the reshape always raises
        return False


class Reshape(Op):
    """``x`` reshaped to the ``ndim`` lengths held in an int64 vector input.

    One length may be -1: it is inferred from ``x``'s size, as in NumPy.  The
    result is a view of ``x`` whenever NumPy can make one.
    """

    __props__ = ("ndim",)
    view_map = {0: [0]}
    view_may_copy = True  # NumPy copies when it cannot make a view

    def __init__(self, ndim: int):
        self.ndim = int(ndim)

    def make_node(self, x, shp):
        x = as_tensor_variable(x)
        shp = as_tensor_variable(shp)
        if shp.ndim != 1 or shp.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{self}: the shape must be a 1-d integer tensor, got {shp} "
                            f"({shp.type})")
        if shp.type.shape[0] != self.ndim:
            raise TypeError(f"{self}: the shape must have static length {self.ndim}, got "
                            f"{shp} ({shp.type})")
        out_shape = reshape_static_shape(x.type.shape, shp)
        return Apply(self, [x, shp], [TensorType(x.dtype, out_shape)()])

    def perform(self, node, inputs, output_storage):
        x, shp = inputs
        new_shape = tuple(int(v) for v in shp)
        if any(v < -1 for v in new_shape) or sum(v == -1 for v in new_shape) > 1:
            raise ValueError(f"reshape: invalid shape {new_shape} (lengths must be >= 0, with "
                             "at most one -1)")
        try:
            output_storage[0][0] = np.reshape(x, new_shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape an array of shape {x.shape} (size "
                             f"{x.size}) into shape {new_shape}") from None

    def infer_shape(self, node, input_shapes):
        x, shp = node.inputs
        static_out = node.outputs[0].type.shape
        if None not in static_out:
            return [static_out]
        entries = _vector_entry_dims(shp, _static_vector_entries(shp))
        # A -1 entry (known now or only at run time) stands for size // (the
        # product of the other entries).  `known` is that product: every entry
        # with -1 replaced by 1.
        inferred = None
        dims = []
        for s, e in zip(static_out, entries):
            if s is not None:
                dims.append(s)
                continue
            if inferred is None:
                known = dim_prod(dim_where(dim_eq(f, -1), 1, f) for f in entries)
                # max(.., 1): a zero product has no valid -1 (perform raises), and
                # this avoids a division by zero when the shape alone is evaluated.
                inferred = dim_floordiv(dim_prod(input_shapes[0]), dim_max(known, 1))
            dims.append(dim_where(dim_eq(e, -1), inferred, e))
        return [tuple(dims)]

    def grad(self, inputs, output_grads):
        x, _ = inputs
        (gz,) = output_grads
        if gz is None:
            return [None, None]
        # Reshaping moves no value: the gradient is gz with x's shape back.
        return [reshape(gz, shape_tuple(x)), None]


def _shape_entries_vector(shp, fn: str):
    """``shp`` (ints and 0-d int tensors, or a 1-d int tensor) as an int64 vector."""
    if isinstance(shp, (numbers.Integral, np.integer)) or (
            isinstance(shp, Variable) and shp.ndim == 0):
        shp = (shp,)
    if isinstance(shp, (tuple, list)) and len(shp) == 1 and isinstance(shp[0], Variable) \
            and shp[0].ndim == 1:
        shp = shp[0]  # x.reshape(vec) arrives here as (vec,)
    if isinstance(shp, TensorConstant) and shp.ndim == 1 and shp.dtype != "int64" \
            and shp.type.numpy_dtype.kind in "iu":
        shp = shp.data.tolist()  # a new int64 constant keeps the entries visible
    if isinstance(shp, Variable):
        vec = as_tensor_variable(shp)
        if vec.ndim != 1 or vec.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{fn}: the shape must be a 1-d integer tensor, got {vec} "
                            f"({vec.type})")
        if vec.type.shape[0] is None:
            raise TypeError(f"{fn}: the number of dimensions must be known when the graph is "
                            f"built, but the shape vector {vec} has unknown length")
        return ew.cast(vec, "int64")
    if isinstance(shp, np.ndarray):
        shp = shp.tolist()
    try:
        items = list(shp)
    except TypeError:
        raise TypeError(f"{fn}: expected a tuple of ints and 0-d integer tensors, or a 1-d "
                        f"integer tensor, got {type(shp).__name__} {shp!r}") from None
    dims = [as_dim(item, what=f"{fn}: shape entry {i}") for i, item in enumerate(items)]
    if all(isinstance(d, int) for d in dims):
        return constant(np.array(dims, dtype=np.int64).reshape(len(dims)))
    return stack_scalars(dims, dtype="int64")


def reshape(x, shape):
    """``x`` with a new shape (NumPy's ``reshape``; a view where NumPy can make one).

    ``shape`` holds ints and 0-d integer tensors, at most one of them -1 (that
    length is inferred from the size), or is a 1-d integer tensor of known
    length.  Static lengths are kept where they can be derived, and a size
    mismatch between fully known shapes is reported when the graph is built.
    """
    x = as_tensor_variable(x)
    vec = _shape_entries_vector(shape, "reshape")
    return Reshape(vec.type.shape[0])(x, vec)


def flatten(x, ndim: int = 1):
    """``x`` with its first ``ndim - 1`` axes kept and the rest collapsed into one."""
    x = as_tensor_variable(x)
    ndim = operator.index(ndim)
    if ndim < 1 or (ndim > 1 and ndim > x.ndim):
        raise ValueError(f"flatten: ndim must be between 1 and {max(x.ndim, 1)} for {x} "
                         f"({x.type}), got {ndim}")
    dims = shape_tuple(x)
    # The collapsed length is computed rather than left as -1: NumPy cannot
    # infer a -1 next to a zero length, and a product keeps static lengths.
    return reshape(x, dims[:ndim - 1] + (dim_prod(dims[ndim - 1:]),))


# --------------------------------------------------------------------------
# DimShuffle


class DimShuffle(Op):
    """Reorder, add and drop axes of an ``input_ndim``-d tensor (a view).

    Output axis ``k`` is input axis ``new_order[k]``, or a new length-1 axis
    where ``new_order[k] == 'x'``.  Input axes missing from ``new_order`` are
    dropped; they must have length 1 (checked when the graph is built if the
    length is static, else at run time).
    """

    __props__ = ("input_ndim", "new_order")
    view_map = {0: [0]}

    def __init__(self, input_ndim: int, new_order):
        self.input_ndim = operator.index(input_ndim)
        self.new_order = tuple(e if e == "x" else operator.index(e) for e in new_order)
        kept = [e for e in self.new_order if e != "x"]
        for e in kept:
            if not 0 <= e < self.input_ndim:
                raise ValueError(f"DimShuffle: axis {e} in {self.new_order} is out of range "
                                 f"for {self.input_ndim} input dimension(s)")
        if len(set(kept)) != len(kept):
            raise ValueError(f"DimShuffle: {self.new_order} repeats an input axis")
        #: input axes that are removed
        self.drop = tuple(a for a in range(self.input_ndim) if a not in kept)
        # After dropping, input axes are renumbered; this permutes the rest.
        remaining = sorted(kept)
        self._perm = tuple(remaining.index(e) for e in kept)

    def __str__(self) -> str:
        return f"DimShuffle{{{','.join(str(e) for e in self.new_order)}}}"

    def make_node(self, x):
        x = as_tensor_variable(x)
        if x.ndim != self.input_ndim:
            raise TypeError(f"{self}: expected a {self.input_ndim}-d input, got {x} ({x.type})")
        for axis in self.drop:
            length = x.type.shape[axis]
            if length is not None and length != 1:
                raise ValueError(f"{self}: cannot drop axis {axis} of {x} ({x.type}): it has "
                                 f"length {length}, and only length-1 axes can be dropped")
        out_shape = tuple(1 if e == "x" else x.type.shape[e] for e in self.new_order)
        return Apply(self, [x], [TensorType(x.dtype, out_shape)()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        shape = input_shapes[0]
        for axis in self.drop:
            if shape[axis] != 1:
                raise ValueError(f"{self}: cannot drop axis {axis} of an array of shape "
                                 f"{shape}: it has length {shape[axis]}, not 1")
        return True

    def perform(self, node, inputs, output_storage):
        x = inputs[0]
        for axis in self.drop:
            if x.shape[axis] != 1:
                raise ValueError(f"{self}: cannot drop axis {axis} of an array of shape "
                                 f"{x.shape}: it has length {x.shape[axis]}, not 1")
        # Every step is basic indexing or a transpose, so the result is a view.
        # The trailing Ellipsis keeps 0-d results arrays (views) rather than scalars.
        view = x[tuple(0 if a in self.drop else slice(None) for a in range(x.ndim)) + (...,)]
        view = view.transpose(self._perm)
        view = view[tuple(None if e == "x" else slice(None) for e in self.new_order) + (...,)]
        output_storage[0][0] = view

    def infer_shape(self, node, input_shapes):
        dims = input_shapes[0]
        return [tuple(1 if e == "x" else dims[e] for e in self.new_order)]

    def grad(self, inputs, output_grads):
        (gz,) = output_grads
        if gz is None:
            return [None]
        # The inverse shuffle: input axis a comes from output axis
        # new_order.index(a); a dropped (length-1) axis comes back as a new
        # axis; the axes the forward pass added (length 1) are dropped.
        order = tuple("x" if a in self.drop else self.new_order.index(a)
                      for a in range(self.input_ndim))
        return [DimShuffle(len(self.new_order), order)(gz)]


def dimshuffle(x, pattern):
    """``x.dimshuffle(*pattern)``, PyTensor's idiom: output axis ``k`` is input
    axis ``pattern[k]``, or a new length-1 axis where ``pattern[k] == 'x'``.

    Input axes left out of ``pattern`` are dropped; as in PyTensor they must be
    known to have length 1 (static length 1: ``tn.specify_shape`` or
    ``shape=`` gives it), else a ValueError.  The result is a view of ``x``.
    """
    x = as_tensor_variable(x)
    pattern = tuple(pattern)
    order = []
    for k, e in enumerate(pattern):
        if isinstance(e, str) and e == "x":
            order.append("x")
        elif isinstance(e, (numbers.Integral, np.integer)) and not isinstance(e, (bool, np.bool_)):
            if not 0 <= e < x.ndim:
                raise ValueError(f"dimshuffle{pattern}: entry {k} ({e}) is not an axis of {x} "
                                 f"({x.type}, axes 0 to {x.ndim - 1})")
            order.append(int(e))
        else:
            raise TypeError(f"dimshuffle{pattern}: entry {k} must be an axis (an int) or 'x', "
                            f"got {e!r}")
    if len(set(a for a in order if a != "x")) != len([a for a in order if a != "x"]):
        raise ValueError(f"dimshuffle{pattern}: an axis of {x} appears more than once")
    for axis in range(x.ndim):
        length = x.type.shape[axis]
        if axis not in order and length != 1:
            has = "unknown length" if length is None else f"length {length}"
            raise ValueError(
                f"dimshuffle{pattern}: cannot drop a non-broadcastable dimension: axis {axis} "
                f"of {x} ({x.type}) has {has}; only axes of static length 1 can be dropped "
                "(tn.specify_shape can declare it)")
    return DimShuffle(x.ndim, order)(x)


def _axis_tuple(axis, ndim: int, fn: str) -> tuple:
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    normalized = tuple(normalize_axis(a, ndim, fn) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{fn}: repeated axis in {axes}")
    return normalized


def transpose(x, axes=None):
    """``x`` with its axes permuted (reversed by default), as a view."""
    x = as_tensor_variable(x)
    if axes is None:
        order = tuple(range(x.ndim - 1, -1, -1))
    else:
        axes = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
        if len(axes) != x.ndim:
            raise ValueError(f"transpose: axes {axes} do not match {x} ({x.type}): expected "
                             f"a permutation of {x.ndim} axes")
        order = _axis_tuple(axes, x.ndim, "transpose")
    return DimShuffle(x.ndim, order)(x)


def expand_dims(x, axis):
    """``x`` with new length-1 axes at positions ``axis`` of the result (NumPy's
    ``expand_dims``; negative axes count from the end of the result)."""
    x = as_tensor_variable(x)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out_ndim = x.ndim + len(axes)
    new_axes = set(_axis_tuple(axes, out_ndim, "expand_dims"))
    old = iter(range(x.ndim))
    order = tuple("x" if k in new_axes else next(old) for k in range(out_ndim))
    return DimShuffle(x.ndim, order)(x)


def squeeze(x, axis=None):
    """``x`` without length-1 axes (NumPy's ``squeeze``).

    With ``axis=None`` the axes whose static length is 1 are removed.  Named
    axes must have length 1: an error now when the static length says
    otherwise, at run time when it is unknown.
    """
    x = as_tensor_variable(x)
    if axis is None:
        drop = {a for a, length in enumerate(x.type.shape) if length == 1}
    else:
        drop = set(_axis_tuple(axis, x.ndim, "squeeze"))
        for a in sorted(drop):
            length = x.type.shape[a]
            if length is not None and length != 1:
                raise ValueError(f"squeeze: cannot squeeze axis {a} of {x} ({x.type}): its "
                                 f"length is {length}, not 1")
    return DimShuffle(x.ndim, tuple(a for a in range(x.ndim) if a not in drop))(x)


# --------------------------------------------------------------------------
# SpecifyShape


class SpecifyShape(Op):
    """``x`` itself (a view), with a shape the user asserts: the output's static
    shape has the lengths given as ints, and ``perform`` checks the runtime
    shape against every given length (ints and symbolic ones).

    ``spec`` has one entry per axis: ``None`` (not specified), an int (a
    static length) or ``"?"`` (a symbolic length: the next 0-d int64 input
    after ``x``).
    """

    __props__ = ("spec",)
    view_map = {0: [0]}

    def __init__(self, spec):
        self.spec = tuple(e if e is None or e == "?" else operator.index(e) for e in spec)

    def __str__(self) -> str:
        return "SpecifyShape{" + ", ".join("?" if e is None else "sym" if e == "?" else str(e)
                                           for e in self.spec) + "}"

    def make_node(self, x, *dims):
        x = as_tensor_variable(x)
        if x.ndim != len(self.spec):
            raise ValueError(f"specify_shape: {x} ({x.type}) has {x.ndim} dimension(s) and can "
                             f"never have a shape of length {len(self.spec)}")
        if len(dims) != sum(e == "?" for e in self.spec):
            raise TypeError(f"{self}: expected {sum(e == '?' for e in self.spec)} symbolic "
                            f"length(s), got {len(dims)}")
        dims = [as_tensor_variable(d) for d in dims]
        for d in dims:
            if d.type != TensorType("int64", ()):
                raise TypeError(f"{self}: symbolic lengths must be 0-d int64, got {d} ({d.type})")
        out_shape = []
        for axis, (have, want) in enumerate(zip(x.type.shape, self.spec)):
            if isinstance(want, int) and have is not None and have != want:
                raise ValueError(f"specify_shape: {x} has static shape {_shape_str(x.type.shape)}, "
                                 f"which contradicts the specified length {want} of axis {axis}")
            out_shape.append(have if have is not None else want if isinstance(want, int) else None)
        return Apply(self, [x, *dims], [TensorType(x.dtype, out_shape)()])

    def _expected(self, dims) -> tuple:
        values = iter(dims)
        return tuple(int(next(values)) if e == "?" else e for e in self.spec)

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        # The planned output shape holds the specified lengths, symbolic ones too.
        got, expected = tuple(input_shapes[0]), tuple(output_shapes[0])
        if [e for e, g, w in zip(self.spec, got, expected) if e is not None and g != w]:
            raise ValueError(f"specify_shape: expected shape {_shape_str(expected)}, got an "
                             f"array of shape {got}")
        return True

    def perform(self, node, inputs, output_storage):
        x, *dims = inputs
        expected = self._expected(dims)
        if x.ndim != len(expected) or any(e is not None and e != got
                                          for e, got in zip(expected, x.shape)):
            raise ValueError(f"specify_shape: expected shape {_shape_str(expected)}, got an "
                             f"array of shape {x.shape}")
        output_storage[0][0] = x.view()

    def infer_shape(self, node, input_shapes):
        values = iter(node.inputs[1:])
        return [tuple(d if e is None else next(values) if e == "?" else e
                      for d, e in zip(input_shapes[0], self.spec))]

    def grad(self, inputs, output_grads):
        (gz,) = output_grads
        # The values pass through unchanged, and so does the gradient; the
        # lengths are integers, with no gradient.
        return [gz] + [None] * (len(inputs) - 1)


def specify_shape(x, shape):
    """``x`` with a shape the user asserts (PyTensor's ``specify_shape``).

    ``shape`` has one entry per axis of ``x``: ``None`` (unspecified), an int,
    or a 0-d integer tensor; a single entry may be given bare, and a 1-d
    integer tensor of static length gives one entry per element.  The result
    has the int entries as static lengths (so later ops, ``dimshuffle`` or a
    C kernel can rely on them), and running the function checks every
    specified length, raising a ValueError that names the expected and the
    actual shape.  When the static shape of ``x`` already says it all, ``x``
    itself is returned.
    """
    from tenure.symbolic.ops.indexing import getitem
    x = as_tensor_variable(x)
    if isinstance(shape, Variable) and shape.ndim == 1:
        vec = as_tensor_variable(shape)
        if vec.type.shape[0] is None:
            raise ValueError(f"specify_shape: the shape vector {vec} ({vec.type}) must have a "
                             "static length")
        shape = [getitem(vec, i) for i in range(vec.type.shape[0])]
    elif not isinstance(shape, (tuple, list)):
        shape = (shape,)
    if len(shape) != x.ndim:
        raise ValueError(f"specify_shape: {x} ({x.type}) has {x.ndim} dimension(s) and can "
                         f"never have a shape of length {len(shape)} ({shape!r})")
    spec, dims = [], []
    for i, entry in enumerate(shape):
        if entry is None:
            spec.append(None)
            continue
        dim = as_dim(entry, what=f"specify_shape: shape entry {i}")
        if isinstance(dim, int):
            if dim < 0:
                raise ValueError(f"specify_shape: shape entry {i} must be >= 0, got {dim}")
            spec.append(dim)
        else:
            spec.append("?")
            dims.append(dim)
    if not dims and all(e is None or e == s for e, s in zip(spec, x.type.shape)):
        return x  # nothing the type does not already say
    return SpecifyShape(spec)(x, *dims)
