"""Max pooling as ops of its own: ``MaxPool2d`` (what
:func:`tenure.symbolic.ops.conv.pool_2d` builds for ``mode="max"``) and its
gradient ``MaxPool2dGrad``.

``MaxPool2d`` takes each window's maximum over the last two axes of ``x``
(any leading axes), the windows ``window`` (kh, kw) apart by ``stride``,
over ``x`` padded by ``pads`` ((top, bottom), (left, right)) with the
dtype's lowest value (every window holds at least one element of ``x``:
:func:`~tenure.symbolic.ops.conv.pool_2d` refuses the rest).
``MaxPool2dGrad(x, gy)`` is its gradient for ``x``: each window's gradient
goes to the window's maxima, shared evenly among equal ones (``tn.max``'s
rule), and to every element of a window whose maximum is NaN as NaN; the
shares of overlapping windows add up.

Why ops and not the graph of slices ``pool_2d`` writes for the other modes:
that graph stacks every tap's slice (a buffer ``kh * kw`` times the output)
and its gradient keeps a mask as large.  These read ``x`` where it is: the C
linker's kernels (``src/pool.c.src``) allocate nothing but their output,
and ``perform`` (NumPy) goes image by image.  The gradient reads ``x``
again instead of keeping the positions of the maxima.

Linkers without a kernel for them (cuda, dask) run :meth:`expand`'s graph:
that graph of slices, and its gradient (:mod:`tenure.rewrites.expand`).
"""

from __future__ import annotations

import numpy as np

from tenure.symbolic.grad import grad
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.composed import pad as pad_array
from tenure.symbolic.ops.corr2d import output_buffer, output_length, window_patches
from tenure.symbolic.ops.elemwise import UFUNC_BUFSIZE, eq, true_divide
from tenure.symbolic.ops.reduce import max as reduce_max
from tenure.symbolic.ops.reduce import sum as reduce_sum
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["MaxPool2d", "MaxPool2dGrad", "lowest"]


def lowest(dtype):
    """The dtype's lowest value: what max pooling pads with."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


class _MaxPoolFamily(Op):
    """The geometry both ops share (``window``, ``stride``: pairs;
    ``pads``: ((top, bottom), (left, right))) and its NumPy image loop."""

    __props__ = ("window", "stride", "pads")
    label = "pool_2d"

    def __init__(self, window, stride, pads):
        self.window = tuple(int(k) for k in window)
        self.stride = tuple(int(s) for s in stride)
        self.pads = tuple((int(a), int(b)) for a, b in pads)

    def __str__(self):
        return (f"{type(self).__name__}{{window={self.window}, stride={self.stride}, "
                f"pads={self.pads}}}")

    def out_lengths(self, height, width) -> tuple:
        """(OH, OW) for an input of this height and width (ints or 0-d variables)."""
        return tuple(output_length(length, before, after, k, s, 1)
                     for length, (before, after), k, s
                     in zip((height, width), self.pads, self.window, self.stride))

    def _check(self, x_shape) -> tuple:
        """(OH, OW) of an input of this shape, or the ValueError of a window
        larger than the padded input."""
        if len(x_shape) < 2:
            raise ValueError(f"{self.label}: input must have at least 2 axes, got shape "
                             f"{tuple(x_shape)}")
        for axis, (length, (before, after), k) in enumerate(
                zip(x_shape[-2:], self.pads, self.window)):
            if length + before + after < k:
                raise ValueError(f"{self.label}: the window spans {k} along the "
                                 f"{('height', 'width')[axis]}, more than the padded input's "
                                 f"{length + before + after} (input of shape {tuple(x_shape)})")
        return tuple(int(v) for v in self.out_lengths(*x_shape[-2:]))

    def _planes(self, x: np.ndarray) -> np.ndarray:
        """``x`` as (planes, H, W): its leading axes as one."""
        return x.reshape(-1, *x.shape[-2:])

    def _padded_planes(self, n_planes: int, x_shape, dtype, fill):
        """perform's padded copy of one group of planes, or None without padding."""
        (top, bottom), (left, right) = self.pads
        if not (top or bottom or left or right):
            return None
        return np.full((n_planes, x_shape[-2] + top + bottom, x_shape[-1] + left + right),
                       fill, dtype)

    def _taps(self, planes: np.ndarray, padded, out_hw) -> list:
        """Each tap's strided view (planes, OH, OW) of ``planes``, padded into
        ``padded`` first when there is padding."""
        if padded is not None:
            (top, _), (left, _) = self.pads
            padded[:, top:top + planes.shape[1], left:left + planes.shape[2]] = planes
            planes = padded
        (kh, kw), (sh, sw) = self.window, self.stride
        return [planes[:, i:i + sh * (out_hw[0] - 1) + 1:sh, j:j + sw * (out_hw[1] - 1) + 1:sw]
                for i in range(kh) for j in range(kw)]

    def _maximum_into(self, taps, out) -> None:
        """Each window's maximum into ``out`` (NaN where the window has one)."""
        np.copyto(out, taps[0])
        for tap in taps[1:]:
            np.maximum(out, tap, out=out)

    def _plane_block(self, x_shape) -> int:
        """How many planes perform takes at a time: an image's (the axis
        before the last two), or all of them for a 2-d input."""
        return x_shape[-3] if len(x_shape) > 2 else 1

    def _block_bytes(self, x_shape, out_hw, itemsize: int, arrays: int, buffered: int) -> int:
        """perform's temporaries for one block of planes: its padded copy,
        ``arrays`` arrays of the block's output shape, and NumPy's buffers
        for ``buffered`` strided operands (up to its bufsize elements each,
        measured with tracemalloc)."""
        block = self._plane_block(x_shape)
        (top, bottom), (left, right) = self.pads
        padded = block * (x_shape[-2] + top + bottom) * (x_shape[-1] + left + right) \
            if top or bottom or left or right else 0
        outputs = block * out_hw[0] * out_hw[1]
        return (padded + arrays * outputs + buffered * min(outputs, UFUNC_BUFSIZE)) * itemsize


class MaxPool2d(_MaxPoolFamily):
    """``y = MaxPool2d(x)``: see the module doc."""

    def make_node(self, x) -> Apply:
        x = as_tensor_variable(x)
        if x.ndim < 2:
            raise ValueError(f"{self.label}: input must have at least 2 axes (it pools the last "
                             f"two), got {x} ({x.type})")
        height, width = x.type.shape[-2:]
        out_hw = tuple(None if length is None else int(out) for length, out in
                       zip((height, width), self.out_lengths(height or 0, width or 0)))
        return Apply(self, [x], [TensorType(x.dtype, (*x.type.shape[:-2], *out_hw))()])

    def infer_shape(self, node, input_shapes):
        (x_shape,) = input_shapes
        return [(*x_shape[:-2], *self.out_lengths(*x_shape[-2:]))]

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        self._check(tuple(input_shapes[0]))
        return True

    def perform(self, node, inputs, output_storage):
        x = np.asarray(inputs[0])
        out_hw = self._check(x.shape)
        shape = (*x.shape[:-2], *out_hw)
        cell = output_storage[0]
        out = output_buffer(cell, shape, x.dtype)
        planes, results = self._planes(x), self._planes(out)
        block = self._plane_block(x.shape)
        padded = self._padded_planes(block, x.shape, x.dtype, lowest(x.dtype))
        for first in range(0, len(planes), block):
            part = slice(first, first + block)
            self._maximum_into(self._taps(planes[part], padded, out_hw), results[part])
        cell[0] = out

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        x_shape, y_shape = input_shapes[0], output_shapes[0]
        if x_shape is None or y_shape is None or len(x_shape) < 2:
            return 0
        itemsize = node.outputs[0].type.numpy_dtype.itemsize
        return self._block_bytes(x_shape, y_shape[-2:], itemsize, arrays=0, buffered=1)

    def grad(self, inputs, output_grads):
        (x,) = inputs
        if x.type.numpy_dtype.kind != "f":
            return [None]
        return [MaxPool2dGrad(self.window, self.stride, self.pads)(x, output_grads[0])]

    def expand(self, node) -> list:
        return [composed_max_pool(node.inputs[0], self)]


class MaxPool2dGrad(_MaxPoolFamily):
    """``MaxPool2dGrad(x, gy)``: the gradient of ``MaxPool2d(x)`` for ``x``
    when ``y``'s is ``gy``.  See the module doc."""

    label = "pool_2d (gradient)"

    def make_node(self, x, gy) -> Apply:
        x, gy = as_tensor_variable(x), as_tensor_variable(gy)
        if x.ndim < 2 or gy.ndim != x.ndim:
            raise ValueError(f"{self.label}: expected an input of at least 2 axes and a "
                             f"gradient of as many, got {x} ({x.type}) and {gy} ({gy.type})")
        if x.type.numpy_dtype.kind != "f":
            raise TypeError(f"{self.label}: the input must be floats, got {x} ({x.type})")
        return Apply(self, [x, gy], [x.type()])

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        self._check_gradient(tuple(input_shapes[0]), tuple(input_shapes[1]))
        return True

    def _check_gradient(self, x_shape, gy_shape) -> tuple:
        out_hw = self._check(x_shape)
        want = (*x_shape[:-2], *out_hw)
        if tuple(gy_shape) != want:
            raise ValueError(f"{self.label}: the output's gradient has shape {tuple(gy_shape)}, "
                             f"the output's shape is {want}")
        return out_hw

    def perform(self, node, inputs, output_storage):
        dtype = node.outputs[0].type.numpy_dtype
        x = np.asarray(inputs[0])
        gy = np.ascontiguousarray(inputs[1], dtype=dtype)
        out_hw = self._check_gradient(x.shape, gy.shape)
        cell = output_storage[0]
        out = output_buffer(cell, x.shape, dtype)
        planes, grads, results = self._planes(x), self._planes(gy), self._planes(out)
        block = self._plane_block(x.shape)
        padded = self._padded_planes(block, x.shape, dtype, lowest(dtype))
        sums = self._padded_planes(block, x.shape, dtype, 0)
        window_shape = (block, *out_hw)
        maxima, counts, shares = (np.empty(window_shape, dtype) for _ in range(3))
        equal = np.empty(window_shape, bool)
        for first in range(0, len(planes), block):
            part = slice(first, first + block)
            target = results[part] if sums is None else sums
            target.fill(0)
            taps = self._taps(planes[part], padded, out_hw)
            self._maximum_into(taps, maxima)
            counts.fill(0)
            for tap in taps:
                counts += np.equal(tap, maxima, out=equal)
            # a window whose maximum is NaN has no equal element: its share
            # is x / 0, and each of its elements receives 0 * that, NaN
            with np.errstate(divide="ignore", invalid="ignore"):
                np.divide(grads[part], counts, out=shares)
                for tap, into in zip(taps, self._taps(target, None, out_hw)):
                    np.equal(tap, maxima, out=equal)
                    np.multiply(equal, shares, out=counts)
                    np.add(into, counts, out=into)
            if sums is not None:
                (top, _), (left, _) = self.pads
                results[part] = sums[:, top:top + x.shape[-2], left:left + x.shape[-1]]
        cell[0] = out

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        x_shape, gy_shape = input_shapes
        if x_shape is None or gy_shape is None or len(x_shape) < 2:
            return 0
        itemsize = node.outputs[0].type.numpy_dtype.itemsize
        # the padded copies of the input and of the sums; maxima, counts,
        # shares (and the bool mask, counted as one more); NumPy buffers a
        # strided tap, and both operands of the add into a strided region
        padded = self._block_bytes(x_shape, gy_shape[-2:], itemsize, arrays=0, buffered=0)
        return padded + self._block_bytes(x_shape, gy_shape[-2:], itemsize, arrays=4,
                                          buffered=3)

    def grad(self, inputs, output_grads):
        x, gy = inputs
        (gz,) = output_grads
        # piecewise constant in x; linear in gy: the windows' shares of gz
        return [None, routed_to_maxima(x, gz, self)]

    def expand(self, node) -> list:
        """The gradient of the graph of slices, taken at ``x``."""
        x, gy = node.inputs
        return [grad(reduce_sum(composed_max_pool(x, self) * gy), x)]


def _padded_for_max(x, pool: _MaxPoolFamily):
    lead = [(0, 0)] * (x.ndim - 2)
    if not any(p for pair in pool.pads for p in pair):
        return x
    return pad_array(x, (*lead, *pool.pads), constant_values=lowest(x.dtype))


def composed_max_pool(x, pool: _MaxPoolFamily):
    """``MaxPool2d(x)`` as a graph: the taps' slices of the padded input,
    stacked, and their maximum."""
    patches = window_patches(_padded_for_max(x, pool), pool.window, pool.stride, (1, 1), axis=0)
    return reduce_max(patches, axis=0)


def routed_to_maxima(x, gz, pool: _MaxPoolFamily):
    """``<gz, MaxPool2dGrad(x, gy)>``'s gradient for ``gy``: each window's
    share of ``gz`` over its maxima (a graph; second-order gradients only)."""
    patches = window_patches(_padded_for_max(x, pool), pool.window, pool.stride, (1, 1), axis=0)
    maxima = eq(patches, reduce_max(patches, axis=0, keepdims=True))
    weights = true_divide(maxima, reduce_sum(maxima, axis=0, keepdims=True))
    lead = [(0, 0)] * (x.ndim - 2)
    padded_gz = gz if not any(p for pair in pool.pads for p in pair) else \
        pad_array(gz, (*lead, *pool.pads))
    gz_patches = window_patches(padded_gz, pool.window, pool.stride, (1, 1), axis=0)
    return reduce_sum(weights * gz_patches, axis=0)
