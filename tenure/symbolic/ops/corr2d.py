"""The 2-d cross-correlation as ops of their own: ``Corr2d`` (what
:func:`tenure.symbolic.ops.conv.conv2d` builds) and its two gradients,
``Corr2dGradInputs`` and ``Corr2dGradFilters``.

One correlation, in three roles.  With ``x`` (N, C, H, W), filters ``w``
(F, C / groups, kh, kw) and ``y`` (N, F, OH, OW), a window position ``o``
and a filter tap ``k`` meet the input at ``i = stride * o + dilation * k -
pad_before``::

    Corr2d(x, w)[n, f, o]          = sum over c, k of  w[f, c, k] x[n, c, i]
    Corr2dGradInputs(w, g)[n, c, i] = sum over f, o, k of w[f, c, k] g[n, f, o]
    Corr2dGradFilters(x, g)[f, c, k] = sum over n, o of  x[n, c, i] g[n, f, o]

(``c`` runs over the channels of ``f``'s group; positions ``i`` in the
padding read zero and receive nothing).  Each is linear in each of its two
arrays, and the gradient of each is the other two: the gradients of every
order stay in this family.

Why ops and not a graph of slices: a graph gathers every window position of
every image at once (im2col), a buffer ``kh * kw`` times the input's size,
and its gradient scatters back through as many slices.  The ops compute
image by image -- one image's columns, one matrix product per group -- so
their temporaries are one image's: ``perform`` (NumPy) and the C linker's
kernels (``src/conv.c.src``, BLAS ``gemm``) alike.  :meth:`workspace_bytes`
tells the memory plan what they are.

Linkers that run only the ops they have a kernel for (cuda, dask) replace
each node by :meth:`expand`'s graph of slices, products and, for the two
gradients, that graph's own gradient (see
:func:`tenure.rewrites.expand.expand_ops`), before their rewrites run.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tenure.symbolic.grad import grad
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.blas import dot, matmul
from tenure.symbolic.ops.composed import pad as pad_array
from tenure.symbolic.ops.creation import alloc
from tenure.symbolic.ops.elemwise import UFUNC_BUFSIZE
from tenure.symbolic.ops.join import stack
from tenure.symbolic.ops.reduce import sum as reduce_sum
from tenure.symbolic.ops.shape import (as_dim, dim_add, dim_floordiv, dim_mul, dim_sub,
                                       dimshuffle, reshape, shape_tuple, specify_shape)
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import TensorConstant, as_tensor_variable

__all__ = ["Corr2d", "Corr2dGradFilters", "Corr2dGradInputs", "output_buffer",
           "output_length", "window_patches"]


def output_length(length, before: int, after: int, k: int, stride: int, dilation: int):
    """The number of window positions along an axis of ``length`` (an int or
    a 0-d variable) padded by ``before`` and ``after``."""
    extent = dilation * (k - 1) + 1
    return dim_add(dim_floordiv(dim_sub(dim_add(length, before + after), extent), stride), 1)


def window_patches(x, window, stride, dilation, axis: int):
    """The window's slices of ``x``'s last two axes, stacked on ``axis``:
    slice ``(i, j)`` is ``x[..., i*dh :: sh, j*dw :: sw]`` cut to the output's
    length (``i``, ``j`` in row-major order, the filters' order): im2col as a
    graph."""
    (kh, kw), (sh, sw), (dh, dw) = window, stride, dilation

    def cut(i, k, d, s):
        tail = d * (k - 1 - i)
        return slice(i * d, -tail if tail else None, s)

    slices = [x[..., cut(i, kh, dh, sh), cut(j, kw, dw, sw)]
              for i in range(kh) for j in range(kw)]
    return stack(slices, axis=axis)


class _Corr2dFamily(Op):
    """What the three ops share: the correlation's geometry (``window``
    (kh, kw), ``stride``, ``dilation``: pairs; ``pads``: ((top, bottom),
    (left, right)); ``groups``), its checks and its NumPy image loop."""

    __props__ = ("window", "stride", "dilation", "pads", "groups")
    #: what the op is called in messages
    label = "conv2d"

    def __init__(self, window, stride, dilation, pads, groups: int):
        self.window = tuple(int(k) for k in window)
        self.stride = tuple(int(s) for s in stride)
        self.dilation = tuple(int(d) for d in dilation)
        self.pads = tuple((int(a), int(b)) for a, b in pads)
        self.groups = int(groups)

    def __str__(self):
        return (f"{type(self).__name__}{{window={self.window}, stride={self.stride}, "
                f"dilation={self.dilation}, pads={self.pads}, groups={self.groups}}}")

    # -- geometry ---------------------------------------------------------------
    def out_lengths(self, height, width) -> tuple:
        """(OH, OW) for an input of this height and width (ints or 0-d variables)."""
        return tuple(output_length(length, before, after, k, s, d)
                     for length, (before, after), k, s, d
                     in zip((height, width), self.pads, self.window, self.stride,
                            self.dilation))

    def _check_image(self, x_shape, w_shape) -> None:
        """The channels, filters and window of a call, against each other and
        the geometry: the ValueError perform would raise."""
        n_filters, per_group, kh, kw = w_shape
        if (kh, kw) != self.window:
            raise ValueError(f"{self.label}: the filters' window is {(kh, kw)}, the graph was "
                             f"built for {self.window} (filters of shape {tuple(w_shape)})")
        if n_filters % self.groups:
            raise ValueError(f"{self.label}: the filters' count ({n_filters}) must be a "
                             f"multiple of groups ({self.groups})")
        if x_shape[1] != per_group * self.groups:
            raise ValueError(f"{self.label}: input has {x_shape[1]} channels, but the filters "
                             f"take {per_group} per group x {self.groups} group(s) = "
                             f"{per_group * self.groups} (input of shape {tuple(x_shape)}, "
                             f"filters of shape {tuple(w_shape)})")
        for axis, (length, (before, after), k, d) in enumerate(
                zip(x_shape[2:], self.pads, self.window, self.dilation)):
            if length + before + after < d * (k - 1) + 1:
                raise ValueError(f"{self.label}: the window spans {d * (k - 1) + 1} along the "
                                 f"{('height', 'width')[axis]} (size {k}, dilation {d}), more "
                                 f"than the padded input's {length + before + after} (input "
                                 f"of shape {tuple(x_shape)})")

    def _check_gradient(self, x_shape, w_shape, g_shape) -> None:
        """The shapes of a gradient's call: the image's checks, and the
        output's gradient against the output's shape."""
        self._check_image(x_shape, w_shape)
        want = (x_shape[0], w_shape[0], *(int(v) for v in self.out_lengths(*x_shape[2:])))
        if tuple(g_shape) != want:
            raise ValueError(f"{self.label}: the output's gradient has shape {tuple(g_shape)}, "
                             f"the output's shape is {want}")

    def _padded_buffer(self, x_shape, dtype):
        """perform's one padded image (C, Hp, Wp) of zeros, or None without
        padding."""
        (top, bottom), (left, right) = self.pads
        if not (top or bottom or left or right):
            return None
        return np.zeros((x_shape[1], x_shape[2] + top + bottom, x_shape[3] + left + right),
                        dtype)

    def _windows(self, image: np.ndarray, padded, out_hw) -> np.ndarray:
        """The windows of one image (C, H, W) as a read-only view (C, kh, kw,
        OH, OW): of the image itself, or of ``padded`` (from
        :meth:`_padded_buffer`) with the image copied into its interior."""
        if padded is not None:
            (top, _), (left, _) = self.pads
            padded[:, top:top + image.shape[1], left:left + image.shape[2]] = image
            image = padded
        (kh, kw), (sh, sw), (dh, dw) = self.window, self.stride, self.dilation
        s_c, s_h, s_w = image.strides
        return as_strided(image, (image.shape[0], kh, kw, *out_hw),
                          (s_c, dh * s_h, dw * s_w, sh * s_h, sw * s_w), writeable=False)

    def _columns_buffer(self, channels: int, out_hw, dtype) -> np.ndarray:
        """One group's columns: (C / groups * kh * kw, OH * OW)."""
        taps = channels // self.groups * self.window[0] * self.window[1]
        return np.empty((taps, out_hw[0] * out_hw[1]), dtype)

    def _grouped_filters(self, w: np.ndarray) -> np.ndarray:
        """The filters as (groups, F / groups, C / groups * kh * kw)."""
        return w.reshape(self.groups, w.shape[0] // self.groups, -1)

    def columns_bytes(self, x_shape, y_shape, itemsize: int) -> int:
        """One image's columns of one group (the C kernels' one temporary):
        a row per channel and tap, a column per window position."""
        taps = x_shape[1] // self.groups * self.window[0] * self.window[1]
        return taps * y_shape[2] * y_shape[3] * itemsize

    def _padded_bytes(self, x_shape, itemsize: int) -> int:
        """One image with its padding (perform pads each image; none without
        padding)."""
        (top, bottom), (left, right) = self.pads
        if not (top or bottom or left or right):
            return 0
        return x_shape[1] * (x_shape[2] + top + bottom) * (x_shape[3] + left + right) * itemsize

    def geometry_shapes(self, node, shapes) -> tuple:
        """``(x's shape, y's shape)`` of a node -- the correlation's input and
        output, whichever of the node's variables they are -- from
        ``shapes`` (variable -> shape or None)."""
        return shapes.get(self.image_of(node)), shapes.get(self.correlation_of(node))

    def image_of(self, node):
        """The node's variable of ``x``'s shape (N, C, H, W)."""
        raise NotImplementedError

    def correlation_of(self, node):
        """The node's variable of ``y``'s shape (N, F, OH, OW)."""
        raise NotImplementedError

    def flops(self, node, shapes) -> float:
        """Two per multiply-add: every element of ``y`` takes C / groups *
        kh * kw of them, and each gradient does the same work."""
        x_shape, y_shape = self.geometry_shapes(node, shapes or {})
        if x_shape is None or y_shape is None:
            return 0.0
        taps = x_shape[1] // self.groups * self.window[0] * self.window[1]
        return 2.0 * float(np.prod(y_shape)) * taps

    def _node_workspace(self, node, input_shapes, output_shapes, extra: int = 0) -> int:
        """perform's temporaries: one padded image and one group's columns
        (and ``extra`` elements)."""
        shapes = dict(zip(node.inputs, input_shapes)) | dict(zip(node.outputs, output_shapes))
        x_shape, y_shape = self.geometry_shapes(node, shapes)
        if x_shape is None or y_shape is None:
            return 0
        itemsize = node.outputs[0].type.numpy_dtype.itemsize
        return (self._padded_bytes(x_shape, itemsize) + extra * itemsize
                + self.columns_bytes(x_shape, y_shape, itemsize))


def output_buffer(cell: list, shape, dtype) -> np.ndarray:
    """The buffer a perform writes its output into: ``cell``'s, left from an
    earlier call, when it fits -- C-contiguous too, since the image loops
    reshape it into views -- else a new one."""
    buffer = cell[0]
    if (isinstance(buffer, np.ndarray) and buffer.shape == tuple(shape)
            and buffer.dtype == dtype and buffer.flags.c_contiguous and buffer.flags.writeable):
        return buffer
    return np.empty(shape, dtype)


def _operands(values, dtype) -> list:
    """The two arrays, C-contiguous in the output's dtype (copies only where
    they are not): the products then take one BLAS path whatever the
    arguments' strides, so the numbers do not depend on them (a reversed
    filter's rows would otherwise go through NumPy's own loop, rounding
    differently)."""
    return [np.ascontiguousarray(v, dtype=dtype) for v in values]


def _result_dtype(fn: str, *variables) -> str:
    dtype = np.result_type(*(v.type.numpy_dtype for v in variables))
    if dtype.kind not in "iuf":
        raise TypeError(f"{fn}: expected real numbers (ints or floats), got "
                        f"{', '.join(f'{v} ({v.type})' for v in variables)}")
    return dtype.name


def _check_4d(fn: str, **variables) -> None:
    for name, v in variables.items():
        if v.ndim != 4:
            raise ValueError(f"{fn}: {name} must be 4-d, got {v} ({v.type})")


class Corr2d(_Corr2dFamily):
    """``y = Corr2d(x, w)``: see the module doc."""

    def make_node(self, x, w) -> Apply:
        x, w = as_tensor_variable(x), as_tensor_variable(w)
        _check_4d(self.label, input=x, filters=w)
        if None not in w.type.shape[2:] and tuple(w.type.shape[2:]) != self.window:
            raise ValueError(f"{self.label}: the filters' window is {w.type.shape[2:]}, the op "
                             f"is built for {self.window} ({w.type})")
        n, _, height, width = x.type.shape
        out_hw = tuple(None if length is None else int(out) for length, out in
                       zip((height, width), self.out_lengths(height or 0, width or 0)))
        out = TensorType(_result_dtype(self.label, x, w), (n, w.type.shape[0], *out_hw))()
        return Apply(self, [x, w], [out])

    def infer_shape(self, node, input_shapes):
        x_shape, w_shape = input_shapes
        return [(x_shape[0], w_shape[0], *self.out_lengths(*x_shape[2:]))]

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        self._check_image(tuple(input_shapes[0]), tuple(input_shapes[1]))
        return True

    def perform(self, node, inputs, output_storage):
        dtype = node.outputs[0].type.numpy_dtype
        x, w = _operands(inputs, dtype)
        self._check_image(x.shape, w.shape)
        out_hw = tuple(int(v) for v in self.out_lengths(*x.shape[2:]))
        shape = (x.shape[0], w.shape[0], *out_hw)
        cell = output_storage[0]
        out = output_buffer(cell, shape, dtype)
        filters = self._grouped_filters(w)
        groups, per_group = self.groups, x.shape[1] // self.groups
        padded = self._padded_buffer(x.shape, dtype)
        columns = self._columns_buffer(x.shape[1], out_hw, dtype)
        as_windows = columns.reshape(per_group, *self.window, *out_hw)
        for n in range(x.shape[0]):
            windows = self._windows(x[n], padded, out_hw)
            rows = out[n].reshape(groups, -1, out_hw[0] * out_hw[1])
            for g in range(groups):
                np.copyto(as_windows, windows[g * per_group:(g + 1) * per_group])
                np.matmul(filters[g], columns, out=rows[g])
        cell[0] = out

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        return self._node_workspace(node, input_shapes, output_shapes)

    def grad(self, inputs, output_grads):
        x, w = inputs
        (gy,) = output_grads
        height, width = shape_tuple(x)[2:]
        return [self.grad_inputs(w, gy, height, width), self.grad_filters(x, gy)]

    def grad_inputs(self, w, g, height, width):
        return Corr2dGradInputs(self.window, self.stride, self.dilation, self.pads,
                                self.groups)(w, g, height, width)

    def grad_filters(self, x, g):
        return Corr2dGradFilters(self.window, self.stride, self.dilation, self.pads,
                                 self.groups)(x, g)

    def correlate(self, x, w):
        return Corr2d(self.window, self.stride, self.dilation, self.pads, self.groups)(x, w)

    def expand(self, node) -> list:
        return [composed_corr2d(*node.inputs, self)]

    def image_of(self, node):
        return node.inputs[0]

    def correlation_of(self, node):
        return node.outputs[0]


class Corr2dGradInputs(_Corr2dFamily):
    """``Corr2dGradInputs(w, g, height, width)``: the gradient of
    ``Corr2d(x, w)`` for ``x`` (of this height and width) when ``y``'s is
    ``g``.  See the module doc."""

    label = "conv2d (gradient for the input)"

    def make_node(self, w, g, height, width) -> Apply:
        w, g = as_tensor_variable(w), as_tensor_variable(g)
        _check_4d(self.label, filters=w, output_gradient=g)
        lengths = []
        for name, length in (("height", height), ("width", width)):
            var = as_tensor_variable(length)
            if var.ndim != 0 or var.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"{self.label}: {name} must be a 0-d integer, got {var} "
                                f"({var.type})")
            lengths.append(var)
        static = tuple(int(v.data) if isinstance(v, TensorConstant) else None for v in lengths)
        per_group = w.type.shape[1]
        channels = None if per_group is None else per_group * self.groups
        out = TensorType(_result_dtype(self.label, w, g), (g.type.shape[0], channels, *static))()
        return Apply(self, [w, g, *lengths], [out])

    def _x_shape(self, w_shape, g_shape, height, width) -> tuple:
        return (g_shape[0], dim_mul(w_shape[1], self.groups), height, width)

    def infer_shape(self, node, input_shapes):
        w_shape, g_shape = input_shapes[:2]
        return [self._x_shape(w_shape, g_shape, as_dim(node.inputs[2]), as_dim(node.inputs[3]))]

    def perform(self, node, inputs, output_storage):
        dtype = node.outputs[0].type.numpy_dtype
        w, g = _operands(inputs[:2], dtype)
        x_shape = (g.shape[0], w.shape[1] * self.groups, int(inputs[2]), int(inputs[3]))
        self._check_gradient(x_shape, w.shape, g.shape)
        cell = output_storage[0]
        out = output_buffer(cell, x_shape, dtype)
        filters = self._grouped_filters(w)
        groups, per_group = self.groups, w.shape[1]
        out_hw = g.shape[2:]
        (top, _), (left, _) = self.pads
        (kh, kw), (sh, sw), (dh, dw) = self.window, self.stride, self.dilation
        padded = np.zeros(self._padded_shape(x_shape), dtype)
        columns = self._columns_buffer(x_shape[1], out_hw, dtype)
        taps = columns.reshape(per_group, kh, kw, *out_hw)
        for n in range(x_shape[0]):
            padded.fill(0)
            rows = g[n].reshape(groups, -1, out_hw[0] * out_hw[1])
            for grp in range(groups):
                np.matmul(filters[grp].T, rows[grp], out=columns)
                target = padded[grp * per_group:(grp + 1) * per_group]
                for i in range(kh):
                    for j in range(kw):
                        target[:, i * dh:i * dh + sh * (out_hw[0] - 1) + 1:sh,
                               j * dw:j * dw + sw * (out_hw[1] - 1) + 1:sw] += taps[:, i, j]
            out[n] = padded[:, top:top + x_shape[2], left:left + x_shape[3]]
        cell[0] = out

    def _padded_shape(self, x_shape) -> tuple:
        (top, bottom), (left, right) = self.pads
        return (x_shape[1], x_shape[2] + top + bottom, x_shape[3] + left + right)

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        """A padded image (zeros, padding or not: the columns are added into
        it) and one group's columns."""
        x_shape, g_shape = output_shapes[0], input_shapes[1]
        if x_shape is None or g_shape is None:
            return 0
        (top, bottom), (left, right) = self.pads
        padded = x_shape[1] * (x_shape[2] + top + bottom) * (x_shape[3] + left + right)
        unpadded = 0 if top or bottom or left or right else padded
        # NumPy buffers the operands of an add between strided 3-d views (a
        # tap's share into the padded image): up to three buffers of its
        # bufsize elements (measured with tracemalloc)
        tap = x_shape[1] // self.groups * g_shape[2] * g_shape[3]
        buffers = 3 * min(tap, UFUNC_BUFSIZE)
        return self._node_workspace(node, input_shapes, output_shapes, extra=unpadded + buffers)

    def grad(self, inputs, output_grads):
        w, g = inputs[:2]
        (gz,) = output_grads
        forward = Corr2d(self.window, self.stride, self.dilation, self.pads, self.groups)
        return [forward.grad_filters(gz, g), forward.correlate(gz, w), None, None]

    def expand(self, node) -> list:
        """The gradient of the graph of slices for its input, taken at zeros
        of the input's shape (it reads only that shape)."""
        w, g, height, width = node.inputs
        dtype = node.outputs[0].dtype
        x = alloc(np.zeros((), dtype), *self._x_shape(shape_tuple(w), shape_tuple(g),
                                                      as_dim(height), as_dim(width)))
        y = composed_corr2d(x, w, self)
        return [grad(reduce_sum(y * g), x)]

    def image_of(self, node):
        return node.outputs[0]

    def correlation_of(self, node):
        return node.inputs[1]


class Corr2dGradFilters(_Corr2dFamily):
    """``Corr2dGradFilters(x, g)``: the gradient of ``Corr2d(x, w)`` for the
    filters ``w`` when ``y``'s is ``g``.  See the module doc."""

    label = "conv2d (gradient for the filters)"

    def make_node(self, x, g) -> Apply:
        x, g = as_tensor_variable(x), as_tensor_variable(g)
        _check_4d(self.label, input=x, output_gradient=g)
        channels = x.type.shape[1]
        per_group = None if channels is None else channels // self.groups
        out = TensorType(_result_dtype(self.label, x, g),
                         (g.type.shape[1], per_group, *self.window))()
        return Apply(self, [x, g], [out])

    def infer_shape(self, node, input_shapes):
        x_shape, g_shape = input_shapes
        return [(g_shape[1], dim_floordiv(x_shape[1], self.groups), *self.window)]

    def perform(self, node, inputs, output_storage):
        dtype = node.outputs[0].type.numpy_dtype
        x, g = _operands(inputs, dtype)
        w_shape = (g.shape[1], x.shape[1] // self.groups, *self.window)
        if x.shape[1] % self.groups:
            raise ValueError(f"{self.label}: input has {x.shape[1]} channels, not a multiple "
                             f"of groups ({self.groups})")
        self._check_gradient(x.shape, w_shape, g.shape)
        cell = output_storage[0]
        out = output_buffer(cell, w_shape, dtype)
        out.fill(0)
        sums = self._grouped_filters(out)
        groups, per_group = self.groups, w_shape[1]
        out_hw = g.shape[2:]
        padded = self._padded_buffer(x.shape, dtype)
        columns = self._columns_buffer(x.shape[1], out_hw, dtype)
        as_windows = columns.reshape(per_group, *self.window, *out_hw)
        product = np.empty(sums.shape[1:], dtype)
        for n in range(x.shape[0]):
            windows = self._windows(x[n], padded, out_hw)
            rows = g[n].reshape(groups, -1, out_hw[0] * out_hw[1])
            for grp in range(groups):
                np.copyto(as_windows, windows[grp * per_group:(grp + 1) * per_group])
                np.matmul(rows[grp], columns.T, out=product)
                sums[grp] += product
        cell[0] = out

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        """A padded image, one group's columns, and one group's product
        before it is added to the sums."""
        w_shape = output_shapes[0]
        if w_shape is None:
            return 0
        product = w_shape[0] // self.groups * int(np.prod(w_shape[1:]))
        return self._node_workspace(node, input_shapes, output_shapes, extra=product)

    def grad(self, inputs, output_grads):
        x, g = inputs
        (gz,) = output_grads
        forward = Corr2d(self.window, self.stride, self.dilation, self.pads, self.groups)
        height, width = shape_tuple(x)[2:]
        return [forward.grad_inputs(gz, g, height, width), forward.correlate(x, gz)]

    def expand(self, node) -> list:
        """The gradient of the graph of slices for its filters, taken at
        zeros of the filters' shape (it reads only that shape)."""
        x, g = node.inputs
        dtype = node.outputs[0].dtype
        per_group = dim_floordiv(shape_tuple(x)[1], self.groups)
        w = alloc(np.zeros((), dtype), shape_tuple(g)[1], per_group, *self.window)
        y = composed_corr2d(x, w, self)
        return [grad(reduce_sum(y * g), w)]

    def image_of(self, node):
        return node.inputs[0]

    def correlation_of(self, node):
        return node.inputs[1]


def composed_corr2d(x, w, geometry: _Corr2dFamily):
    """``Corr2d(x, w)`` as a graph of slices (im2col) and one product per
    group, for the linkers without the op (see the module doc).  ``w``'s
    window must be static."""
    # the op's own checks, which the graph would otherwise not make: the
    # channels against the filters' (the window is static)
    per_group = shape_tuple(w)[1]
    x = specify_shape(x, (None, dim_mul(per_group, geometry.groups), None, None))
    if any(p for pair in geometry.pads for p in pair):
        x = pad_array(x, ((0, 0), (0, 0), *geometry.pads))
    groups = geometry.groups
    # (C, K, N, OH, OW): a reshape to (C * K, N * OH * OW) is free, and one
    # product with the filters as (F, C * K) is the whole convolution.
    patches = window_patches(dimshuffle(x, (1, 0, 2, 3)), geometry.window, geometry.stride,
                             geometry.dilation, axis=1)
    c, k, n, oh, ow = shape_tuple(patches)
    f, c_group = shape_tuple(w)[:2]
    positions = dim_mul(dim_mul(n, oh), ow)
    if groups == 1:
        columns = reshape(patches, (dim_mul(c, k), positions))
        out = dot(reshape(w, (f, dim_mul(c_group, k))), columns)
    else:
        columns = reshape(patches, (groups, dim_mul(c_group, k), positions))
        out = matmul(reshape(w, (groups, -1, dim_mul(c_group, k))), columns)
    return dimshuffle(reshape(out, (f, n, oh, ow)), (1, 0, 2, 3))
