"""Joining and splitting: ``concatenate``, ``stack`` and ``split`` (NumPy semantics).

* :class:`Join` concatenates tensors along an existing axis (or, with
  ``axis=None``, their flattened values), :class:`Stack` along a new one.
  Their dtype is NumPy's ``result_type`` of the inputs' dtypes.  Lengths that
  are known when the graph is built are checked then (a ``ValueError`` naming
  both shapes); the others when the function runs.
* :class:`Split` cuts a tensor into equal sections or at split points; its
  outputs are views of its input (declared in ``view_map``), as in NumPy.
  :class:`SplitGrad` is its gradient where the pieces may overlap.

The gradients mirror each other: a concatenation's gradient is the split of
the output gradient, a split's is the concatenation of its outputs' gradients
(zeros for outputs the cost does not depend on).
"""

from __future__ import annotations

import operator

import numpy as np

from tenure.symbolic.ops.axes import normalize_axis
from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.shape import as_dim, dim_add, dim_floordiv, dim_prod, shape_tuple
from tenure.symbolic.types import TensorType, _shape_str
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant

# --------------------------------------------------------------------------
# Helpers


def _fits(buffer, shape: tuple, dtype) -> bool:
    """Whether a buffer left from an earlier call can take this output as it is."""
    return (isinstance(buffer, np.ndarray) and buffer.shape == shape
            and buffer.dtype == dtype and buffer.flags.writeable)


def _tensor_list(tensors, fn: str) -> list:
    if isinstance(tensors, (Variable, np.ndarray)) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{fn}: expected a list or tuple of tensors, got "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{fn}: need at least one tensor, got an empty {type(tensors).__name__}")
    return [as_tensor_variable(t) for t in tensors]


def _check_same_ndim(tensors, fn: str) -> None:
    for i, t in enumerate(tensors[1:], start=1):
        if t.ndim != tensors[0].ndim:
            raise TypeError(f"{fn}: all tensors must have the same number of dimensions, but "
                            f"tensor 0 ({tensors[0]}) has {tensors[0].ndim} ({tensors[0].type}) "
                            f"and tensor {i} ({t}) has {t.ndim} ({t.type})")


def _merged_static(tensors, axis: int, fn: str, skip: int | None):
    """The static length shared by every tensor along ``axis`` (None if unknown);
    a ValueError naming both shapes when two known lengths differ.  ``skip``
    is the concatenation axis, named in the message."""
    known = None
    for i, t in enumerate(tensors):
        length = t.type.shape[axis]
        if length is None:
            continue
        if known is None:
            known = (i, length)
        elif known[1] != length:
            j = known[0]
            except_ = f" except the concatenation axis {skip}" if skip is not None else ""
            raise ValueError(
                f"{fn}: tensor {j} has shape {_shape_str(tensors[j].type.shape)} and tensor {i} "
                f"has shape {_shape_str(t.type.shape)}; they must match on every axis{except_} "
                f"(axis {axis}: {known[1]} != {length})")
    return None if known is None else known[1]


def _merged_dim(input_shapes, axis: int):
    """A dim along ``axis`` for inputs that all have the same length there:
    an int when any of them knows it statically."""
    for dims in input_shapes:
        if isinstance(dims[axis], int):
            return dims[axis]
    return input_shapes[0][axis]


def _dims_sum(dims):
    total = 0
    for d in dims:
        total = dim_add(total, d)
    return total


def _output_dtype(tensors) -> np.dtype:
    return np.result_type(*(t.type.numpy_dtype for t in tensors))


def _differentiable(var) -> bool:
    return var.type.numpy_dtype.kind in "fc"


# --------------------------------------------------------------------------
# Join (concatenate)


class Join(Op):
    """Concatenation of the inputs along ``axis`` (an int in ``[0, ndim)``), or of
    their flattened values when ``axis`` is None (``np.concatenate``)."""

    __props__ = ("axis",)

    def __init__(self, axis: int | None):
        self.axis = None if axis is None else operator.index(axis)
        if self.axis is not None and self.axis < 0:
            raise ValueError(f"Join: axis must be non-negative (normalize it first), got {axis}")

    def __str__(self) -> str:
        return f"Join{{axis={self.axis}}}"

    def make_node(self, *tensors):
        tensors = _tensor_list(list(tensors), "concatenate")
        dtype = _output_dtype(tensors)
        if self.axis is None:
            sizes = [None if None in t.type.shape else int(np.prod(t.type.shape, dtype=np.int64))
                     for t in tensors]
            shape = (None if None in sizes else sum(sizes),)
            return Apply(self, tensors, [TensorType(dtype, shape)()])
        _check_same_ndim(tensors, "concatenate")
        ndim = tensors[0].ndim
        if ndim == 0:
            raise TypeError(f"concatenate: 0-d tensors cannot be concatenated along an axis (got "
                            f"{tensors[0]} of type {tensors[0].type}); use stack, or axis=None")
        if self.axis >= ndim:
            raise ValueError(f"concatenate: axis {self.axis} is out of range for {ndim}-d tensors")
        shape = []
        for d in range(ndim):
            if d == self.axis:
                lengths = [t.type.shape[d] for t in tensors]
                shape.append(None if None in lengths else sum(lengths))
            else:
                shape.append(_merged_static(tensors, d, "concatenate", self.axis))
        return Apply(self, tensors, [TensorType(dtype, tuple(shape))()])

    def perform(self, node, inputs, output_storage):
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        if self.axis is None:
            shape = (sum(int(np.size(x)) for x in inputs),)
        else:
            first = inputs[0].shape
            for i, x in enumerate(inputs[1:], start=1):
                bad = [d for d in range(len(first)) if d != self.axis and x.shape[d] != first[d]]
                if bad:
                    raise ValueError(
                        f"concatenate: input 0 has shape {first} and input {i} has shape "
                        f"{x.shape}; they must match on every axis except the concatenation "
                        f"axis {self.axis} (axis {bad[0]}: {first[bad[0]]} != {x.shape[bad[0]]})")
            shape = tuple(sum(x.shape[d] for x in inputs) if d == self.axis else first[d]
                          for d in range(len(first)))
        if _fits(cell[0], shape, dtype):
            np.concatenate(inputs, axis=self.axis, out=cell[0])
        else:
            cell[0] = np.concatenate(inputs, axis=self.axis, dtype=dtype)

    def infer_shape(self, node, input_shapes):
        if self.axis is None:
            return [(_dims_sum(dim_prod(dims) for dims in input_shapes),)]
        ndim = len(input_shapes[0])
        return [tuple(_dims_sum(dims[d] for dims in input_shapes) if d == self.axis
                      else _merged_dim(input_shapes, d) for d in range(ndim))]

    def grad(self, inputs, output_grads):
        (gz,) = output_grads
        if gz is None:
            return [None] * len(inputs)
        if len(inputs) == 1:
            pieces = [gz]
        else:
            if self.axis is None:
                lengths = [dim_prod(shape_tuple(x)) for x in inputs]
            else:
                lengths = [shape_tuple(x)[self.axis] for x in inputs]
            points, total = [], 0
            for length in lengths[:-1]:
                total = dim_add(total, length)
                points.append(total)
            pieces = split(gz, points, axis=0 if self.axis is None else self.axis)
        if self.axis is None:
            from tenure.symbolic.ops.shape import reshape
            pieces = [reshape(p, shape_tuple(x)) for p, x in zip(pieces, inputs)]
        return [p if _differentiable(x) else None for p, x in zip(pieces, inputs)]


def concatenate(tensors, axis=0):
    """The tensors joined along an existing ``axis`` (NumPy's ``concatenate``).

    All tensors have the same number of dimensions and the same lengths on
    every other axis; ``axis=None`` joins their flattened values instead.  The
    dtype is NumPy's ``result_type`` of theirs.
    """
    tensors = _tensor_list(tensors, "concatenate")
    if axis is None:
        return Join(None)(*tensors)
    _check_same_ndim(tensors, "concatenate")
    if tensors[0].ndim == 0:
        raise TypeError(f"concatenate: 0-d tensors cannot be concatenated along an axis (got "
                        f"{tensors[0]} of type {tensors[0].type}); use stack, or axis=None")
    return Join(normalize_axis(axis, tensors[0].ndim, "concatenate"))(*tensors)


# --------------------------------------------------------------------------
# Stack


class Stack(Op):
    """The inputs (all of one shape) stacked along a new output axis ``axis``
    (an int in ``[0, ndim]``; NumPy's ``stack``)."""

    __props__ = ("axis",)

    def __init__(self, axis: int):
        self.axis = operator.index(axis)
        if self.axis < 0:
            raise ValueError(f"Stack: axis must be non-negative (normalize it first), got {axis}")

    def __str__(self) -> str:
        return f"Stack{{axis={self.axis}}}"

    def make_node(self, *tensors):
        tensors = _tensor_list(list(tensors), "stack")
        _check_same_ndim(tensors, "stack")
        ndim = tensors[0].ndim
        if self.axis > ndim:
            raise ValueError(f"stack: axis {self.axis} is out of range for stacking {ndim}-d "
                             "tensors")
        shape = [_merged_static(tensors, d, "stack", None) for d in range(ndim)]
        shape.insert(self.axis, len(tensors))
        return Apply(self, tensors, [TensorType(_output_dtype(tensors), tuple(shape))()])

    def perform(self, node, inputs, output_storage):
        first = inputs[0].shape
        for i, x in enumerate(inputs[1:], start=1):
            if x.shape != first:
                raise ValueError(f"stack: all inputs must have the same shape, but input 0 has "
                                 f"shape {first} and input {i} has shape {x.shape}")
        shape = first[:self.axis] + (len(inputs),) + first[self.axis:]
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        if not _fits(cell[0], shape, dtype):
            # C order whatever the inputs' layout: np.stack alone follows
            # theirs (transposed views give a transposed result), and a
            # reshape of it, as im2col does (conv.py), would copy it.
            cell[0] = np.empty_like(inputs[0], dtype=dtype, order="C", shape=shape)
        np.stack(inputs, axis=self.axis, out=cell[0])

    def infer_shape(self, node, input_shapes):
        ndim = len(input_shapes[0])
        dims = [_merged_dim(input_shapes, d) for d in range(ndim)]
        dims.insert(self.axis, len(input_shapes))
        return [tuple(dims)]

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.indexing import getitem
        (gz,) = output_grads
        if gz is None:
            return [None] * len(inputs)
        lead = (slice(None),) * self.axis
        return [getitem(gz, lead + (i,)) if _differentiable(x) else None
                for i, x in enumerate(inputs)]


def stack(tensors, axis=0):
    """The tensors (all of one shape) joined along a new ``axis`` of the result
    (NumPy's ``stack``; negative axes count from the end of the result)."""
    tensors = _tensor_list(tensors, "stack")
    _check_same_ndim(tensors, "stack")
    return Stack(normalize_axis(axis, tensors[0].ndim + 1, "stack"))(*tensors)


# --------------------------------------------------------------------------
# Split


def _points_partition(points) -> bool:
    """Whether split points known now are sure to cut an axis of any length into
    consecutive, non-overlapping pieces (so the pieces' gradients concatenate)."""
    if not all(isinstance(p, TensorConstant) for p in points):
        return False
    values = [int(p.data) for p in points]
    # Non-negative increasing points stay increasing when clamped to the
    # length; so do negative ones when counted from the end.  A mix may not.
    same_sign = all(v >= 0 for v in values) or all(v < 0 for v in values)
    return same_sign and values == sorted(values)


def _check_points(points, fn: str) -> list:
    points = [as_tensor_variable(p) for p in points]
    for i, p in enumerate(points):
        if p.ndim != 0 or p.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{fn}: split point {i} must be a 0-d integer, got {p} ({p.type})")
    return points


class Split(Op):
    """``x`` cut along ``axis`` into ``n_outputs`` pieces (NumPy's ``split``).

    With ``equal`` the pieces are equal sections (the axis length must be a
    multiple of ``n_outputs``) and ``x`` is the only input; otherwise inputs
    ``1 .. n_outputs - 1`` are 0-d integer split points, and the pieces are
    ``x[:p1], x[p1:p2], ..., x[pk:]`` along ``axis`` (Python slicing: points
    may be negative, out of range or decreasing).  Each piece is a view of ``x``.
    """

    __props__ = ("axis", "n_outputs", "equal")

    def __init__(self, axis: int, n_outputs: int, equal: bool):
        self.axis = operator.index(axis)
        self.n_outputs = operator.index(n_outputs)
        self.equal = bool(equal)
        if self.axis < 0 or self.n_outputs < 1:
            raise ValueError(f"Split: axis must be non-negative and n_outputs positive, got "
                             f"axis={axis}, n_outputs={n_outputs}")
        self.view_map = {i: [0] for i in range(self.n_outputs)}

    def __str__(self) -> str:
        kind = "equal" if self.equal else "points"
        return f"Split{{axis={self.axis}, {self.n_outputs} {kind}}}"

    def make_node(self, x, *points):
        x = as_tensor_variable(x)
        if x.ndim == 0:
            raise TypeError(f"split: expected a tensor with at least one dimension, got {x} "
                            f"({x.type})")
        if self.axis >= x.ndim:
            raise ValueError(f"split: axis {self.axis} is out of range for {x} ({x.type})")
        n_points = 0 if self.equal else self.n_outputs - 1
        if len(points) != n_points:
            raise TypeError(f"{self}: expected {n_points} split point(s), got {len(points)}")
        points = _check_points(points, "split")
        length = x.type.shape[self.axis]
        if self.equal:
            if length is not None and length % self.n_outputs:
                raise ValueError(f"split: an axis of length {length} ({x}, {x.type}, axis "
                                 f"{self.axis}) cannot be split into {self.n_outputs} equal "
                                 "sections")
            lengths = [None if length is None else length // self.n_outputs] * self.n_outputs
        elif length is not None and all(isinstance(p, TensorConstant) for p in points):
            bounds = [None] + [int(p.data) for p in points] + [None]
            lengths = [len(range(length)[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        else:
            lengths = [None] * self.n_outputs
        outputs = []
        for n in lengths:
            shape = list(x.type.shape)
            shape[self.axis] = n
            outputs.append(TensorType(x.dtype, tuple(shape))())
        return Apply(self, [x, *points], outputs)

    def perform(self, node, inputs, output_storage):
        # The pieces are cut by slicing, never by ``np.split``: on a device
        # array that dispatches to CuPy's ``split``, which wraps a negative
        # point only once and never clamps it, so a point below ``-length``
        # gives a view that starts before the array (a wrong shape, then an
        # illegal memory access on the GPU).  Slicing is the same on both.
        x = inputs[0]
        length = x.shape[self.axis]
        if self.equal:
            if length % self.n_outputs:
                raise ValueError(f"split: an axis of length {length} (axis {self.axis} of an "
                                 f"array of shape {x.shape}) cannot be split into "
                                 f"{self.n_outputs} equal sections")
            step = length // self.n_outputs
            points = [i * step for i in range(1, self.n_outputs)]
        else:
            points = [int(p) for p in inputs[1:]]
        bounds = [None] + points + [None]
        lead = (slice(None),) * self.axis
        for cell, start, stop in zip(output_storage, bounds[:-1], bounds[1:]):
            cell[0] = x[lead + (slice(start, stop),)]

    def infer_shape(self, node, input_shapes):
        from tenure.symbolic.ops.indexing import slice_length
        x_dims = input_shapes[0]
        length = x_dims[self.axis]
        if self.equal:
            lengths = [dim_floordiv(length, self.n_outputs)] * self.n_outputs
        else:
            bounds = [None] + [as_dim(p) for p in node.inputs[1:]] + [None]
            lengths = [slice_length(length, a, b, None) for a, b in zip(bounds[:-1], bounds[1:])]
        shapes = []
        for n in lengths:
            dims = list(x_dims)
            dims[self.axis] = n
            shapes.append(tuple(dims))
        return shapes

    def grad(self, inputs, output_grads):
        x, points = inputs[0], inputs[1:]
        no_points = [None] * len(points)
        if not _differentiable(x) or all(g is None for g in output_grads):
            return [None] + no_points
        outputs = self.make_node(*inputs).outputs
        if self.equal or _points_partition(points):
            from tenure.symbolic.ops.creation import zeros_like
            grads = [zeros_like(out) if g is None else g
                     for g, out in zip(output_grads, outputs)]
            return [concatenate(grads, axis=self.axis)] + no_points
        # The pieces may overlap or leave gaps: add each gradient into its piece.
        connected = tuple(g is not None for g in output_grads)
        grads = [ew.cast(g, x.dtype) for g in output_grads if g is not None]
        gx = SplitGrad(self.axis, connected)(*grads, *points, *shape_tuple(x))
        return [gx] + no_points


def split(x, indices_or_sections, axis=0):
    """``x`` cut into pieces along ``axis`` (NumPy's ``split``); returns a list.

    ``indices_or_sections`` is an int ``n`` (``n`` equal sections: the axis
    length must be a multiple of ``n``, checked when the graph is built if it
    is known then and when the function runs otherwise) or a list of split
    points (ints or 0-d integer tensors), which cut like Python slices:
    ``x[:p0], x[p0:p1], ..., x[pk:]``.  The pieces are views of ``x``.
    """
    x = as_tensor_variable(x)
    if x.ndim == 0:
        raise TypeError(f"split: expected a tensor with at least one dimension, got {x} "
                        f"({x.type})")
    axis = normalize_axis(axis, x.ndim, "split")
    if isinstance(indices_or_sections, (bool, np.bool_)):
        raise TypeError(f"split: indices_or_sections must be an int or a list of split "
                        f"points, got {indices_or_sections!r}")
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections < 1:
            raise ValueError(f"split: the number of sections must be at least 1, got {sections}")
        return Split(axis, sections, True).make_node(x).outputs
    if isinstance(indices_or_sections, Variable):
        var = as_tensor_variable(indices_or_sections)
        if isinstance(var, TensorConstant) and var.ndim == 1:
            indices_or_sections = var.data  # known points keep lengths static
        elif var.ndim == 1 and var.type.shape[0] is not None:
            from tenure.symbolic.ops.indexing import getitem
            indices_or_sections = [getitem(var, i) for i in range(var.type.shape[0])]
        else:
            raise TypeError(f"split: indices_or_sections must be an int (the number of "
                            f"sections, known when the graph is built), a list of split points "
                            f"or a 1-d integer tensor of known length, got {var} ({var.type})")
    if isinstance(indices_or_sections, np.ndarray):
        indices_or_sections = indices_or_sections.tolist()
    if not isinstance(indices_or_sections, (list, tuple)):
        raise TypeError(f"split: indices_or_sections must be an int or a list of split points, "
                        f"got {type(indices_or_sections).__name__}")
    points = []
    for i, p in enumerate(indices_or_sections):
        d = as_dim(p, what=f"split: split point {i}")
        points.append(constant(d, dtype="int64") if isinstance(d, int) else d)
    return Split(axis, len(points) + 1, False).make_node(x, *points).outputs


class SplitGrad(Op):
    """The gradient of a :class:`Split` at split points: zeros of ``x``'s shape
    with each piece's gradient added where that piece was cut from.

    ``connected[k]`` says whether piece ``k`` has a gradient.  Inputs: the
    connected gradients (in order), the ``len(connected) - 1`` split points,
    then one 0-d int per dimension of ``x``.
    """

    __props__ = ("axis", "connected")

    def __init__(self, axis: int, connected):
        self.axis = operator.index(axis)
        self.connected = tuple(bool(c) for c in connected)
        self.n_grads = sum(self.connected)

    def make_node(self, *inputs):
        inputs = [as_tensor_variable(v) for v in inputs]
        n_points = len(self.connected) - 1
        grads = inputs[:self.n_grads]
        points = _check_points(inputs[self.n_grads:self.n_grads + n_points], "SplitGrad")
        dims = inputs[self.n_grads + n_points:]
        if not grads or len(dims) != grads[0].ndim:
            raise TypeError(f"{self}: expected {self.n_grads} gradient(s), {n_points} split "
                            f"point(s) and one dim per gradient axis, got {len(inputs)} inputs")
        _check_same_ndim(grads, "SplitGrad")
        static = tuple(int(d.data) if isinstance(d, TensorConstant) else None for d in dims)
        return Apply(self, [*grads, *points, *dims],
                     [TensorType(_output_dtype(grads), static)()])

    def perform(self, node, inputs, output_storage):
        n_points = len(self.connected) - 1
        grads = iter(inputs[:self.n_grads])
        points = [int(p) for p in inputs[self.n_grads:self.n_grads + n_points]]
        shape = tuple(int(d) for d in inputs[self.n_grads + n_points:])
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        if _fits(cell[0], shape, dtype):
            cell[0].fill(0)
        else:
            cell[0] = np.zeros(shape, dtype=dtype)
        out = cell[0]
        bounds = [None] + points + [None]
        lead = (slice(None),) * self.axis
        for k, connected in enumerate(self.connected):
            if connected:
                out[lead + (slice(bounds[k], bounds[k + 1]),)] += next(grads)

    def infer_shape(self, node, input_shapes):
        n_points = len(self.connected) - 1
        return [tuple(as_dim(d) for d in node.inputs[self.n_grads + n_points:])]

    def grad(self, inputs, output_grads):
        (g,) = output_grads
        n_points = len(self.connected) - 1
        points = inputs[self.n_grads:self.n_grads + n_points]
        rest = [None] * (len(inputs) - self.n_grads)
        if g is None:
            return [None] * self.n_grads + rest
        pieces = Split(self.axis, len(self.connected), False).make_node(g, *points).outputs
        return [p for p, c in zip(pieces, self.connected) if c] + rest
