"""Sorting: ``sort`` and ``argsort`` along one axis (NumPy semantics).

``axis`` is an int, or None to sort the flattened tensor (a 1-d result).
``argsort`` is stable (equal elements keep their order) and returns int64.
NaNs sort to the end, as in NumPy.

The gradient of ``sort`` sends each output gradient back to the position
its element came from: :class:`PermuteAlongAxis` applies the permutation
that ``argsort`` gives, or its inverse, along an axis; each direction is the
other's gradient.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.ops.axes import axis_index, normalize_axis
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.shape import dim_prod, shape_tuple
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable


def _fits(buffer, shape: tuple, dtype) -> bool:
    """Whether a buffer left from an earlier call can take this output as it is."""
    return (isinstance(buffer, np.ndarray) and buffer.shape == shape
            and buffer.dtype == dtype and buffer.flags.writeable)


def _normalize_axis(x, axis, fn: str):
    """``axis`` as an int in ``[0, x.ndim)``, or None (sort the flattened array)."""
    axis = axis_index(axis, fn, allow_none=True)
    if axis is None:
        return None
    if x.ndim == 0:
        raise ValueError(f"{fn}: axis {axis} is out of range for the 0-d {x} ({x.type}); "
                         "use axis=None to sort it as a 1-element vector")
    return normalize_axis(axis, x.ndim, fn)


class _SortBase(Op):
    """What sort and argsort share: one axis (an int in ``[0, ndim)``) or None."""

    __props__ = ("axis",)
    fn_name = ""

    def __init__(self, axis: int | None):
        self.axis = None if axis is None else operator.index(axis)

    def __str__(self) -> str:
        return f"{self.fn_name}{{axis={self.axis}}}"

    def _out_shape(self, shape: tuple) -> tuple:
        if self.axis is not None:
            return tuple(shape)
        return (None,) if None in shape else (int(np.prod(shape, dtype=np.int64)),)

    def _check(self, x):
        x = as_tensor_variable(x)
        if self.axis is not None and not 0 <= self.axis < x.ndim:
            raise ValueError(f"{self.fn_name}: axis {self.axis} is out of range for {x} "
                             f"({x.type})")
        return x

    def infer_shape(self, node, input_shapes):
        (dims,) = input_shapes
        return [tuple(dims) if self.axis is not None else (dim_prod(dims),)]

    def flops(self, node, shapes) -> float:
        """``log2 n`` per input element, ``n`` the length sorted along."""
        in_size = cost_facts.inputs_size(node, shapes)
        n = in_size if self.axis is None else cost_facts.dim(node.inputs[0], shapes, self.axis)
        return float(in_size * max(1.0, math.log2(max(n, 1))))


class Sort(_SortBase):
    """``np.sort(x, axis)``: a sorted copy."""

    fn_name = "sort"

    def make_node(self, x):
        x = self._check(x)
        return Apply(self, [x], [TensorType(x.dtype, self._out_shape(x.type.shape))()])

    def perform(self, node, inputs, output_storage):
        (x,) = inputs
        cell = output_storage[0]
        shape = x.shape if self.axis is not None else (x.size,)
        if _fits(cell[0], shape, x.dtype):
            # Sort a copy in the old buffer: no allocation.
            np.copyto(cell[0], x.reshape(shape))
            cell[0].sort(axis=-1 if self.axis is None else self.axis)
        else:
            cell[0] = np.sort(x, axis=self.axis)

    def grad(self, inputs, output_grads):
        (x,), (gz,) = inputs, output_grads
        if gz is None or x.type.numpy_dtype.kind not in "fc":
            return [None]
        perm = argsort(x, axis=self.axis)
        gx = PermuteAlongAxis(0 if self.axis is None else self.axis, inverse=True)(gz, perm)
        if self.axis is None:
            from tenure.symbolic.ops.shape import reshape
            gx = reshape(gx, shape_tuple(x))
        return [gx]


class ArgSort(_SortBase):
    """``np.argsort(x, axis, kind="stable")``: int64 indices that sort ``x``."""

    fn_name = "argsort"

    def make_node(self, x):
        x = self._check(x)
        return Apply(self, [x], [TensorType("int64", self._out_shape(x.type.shape))()])

    def perform(self, node, inputs, output_storage):
        result = np.argsort(inputs[0], axis=self.axis, kind="stable")
        output_storage[0][0] = result.astype(np.int64, copy=False)

    def grad(self, inputs, output_grads):
        return [None]


class PermuteAlongAxis(Op):
    """Reorder ``g`` along ``axis`` by the int permutation ``perm`` (same shape).

    ``inverse=False``: ``out = take_along_axis(g, perm, axis)`` (``out[i] =
    g[perm[i]]``); ``inverse=True``: the inverse, ``out[perm[i]] = g[i]``.
    ``perm`` must hold a permutation of ``range(length)`` along the axis (as
    ``argsort`` gives); the two directions are each other's gradient.
    """

    __props__ = ("axis", "inverse")

    def __init__(self, axis: int, inverse: bool):
        self.axis = operator.index(axis)
        self.inverse = bool(inverse)

    def make_node(self, g, perm):
        g = as_tensor_variable(g)
        perm = as_tensor_variable(perm)
        if perm.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{self}: perm must be an integer tensor, got {perm} ({perm.type})")
        if g.ndim != perm.ndim or not 0 <= self.axis < g.ndim:
            raise TypeError(f"{self}: g ({g.type}) and perm ({perm.type}) must have the same "
                            f"number of dimensions, more than axis {self.axis}")
        shape = tuple(a if a is not None else b for a, b in zip(g.type.shape, perm.type.shape))
        return Apply(self, [g, perm], [TensorType(g.dtype, shape)()])

    def perform(self, node, inputs, output_storage):
        g, perm = inputs
        if g.shape != perm.shape:
            raise ValueError(f"{self}: g has shape {g.shape} but perm has shape {perm.shape}")
        cell = output_storage[0]
        if self.inverse:
            if not _fits(cell[0], g.shape, g.dtype):
                cell[0] = np.empty(g.shape, dtype=g.dtype)
            np.put_along_axis(cell[0], perm, g, axis=self.axis)
        else:
            cell[0] = np.take_along_axis(g, perm, axis=self.axis)

    def infer_shape(self, node, input_shapes):
        return [tuple(b if isinstance(b, int) else a for a, b in zip(*input_shapes))]

    def grad(self, inputs, output_grads):
        (_, perm), (gout,) = inputs, output_grads
        if gout is None:
            return [None, None]
        return [PermuteAlongAxis(self.axis, not self.inverse)(gout, perm), None]


def sort(x, axis=-1):
    """A sorted copy of ``x`` along ``axis`` (NumPy's ``sort``); ``axis=None``
    sorts the flattened ``x`` into a vector."""
    x = as_tensor_variable(x)
    return Sort(_normalize_axis(x, axis, "sort"))(x)


def argsort(x, axis=-1):
    """The int64 indices that sort ``x`` along ``axis`` (NumPy's ``argsort``,
    stable: equal elements keep their order); ``axis=None`` indexes the
    flattened ``x``."""
    x = as_tensor_variable(x)
    return ArgSort(_normalize_axis(x, axis, "argsort"))(x)
