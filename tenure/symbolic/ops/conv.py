"""Convolution and pooling over images: ``conv2d`` (NCHW, stride, padding,
dilation, groups) and ``pool_2d`` (max, sum and the two averages).

``conv2d`` checks its arguments and builds one
:class:`~tenure.symbolic.ops.corr2d.Corr2d` node: the correlation computed
image by image, whose gradients are the family's two other ops (see
:mod:`.corr2d`; the cuda and dask linkers run its expansion into slices
and products).  ``pool_2d`` builds one
:class:`~tenure.symbolic.ops.maxpool.MaxPool2d` node for ``mode="max"``
(its gradient reads the input again; a window's gradient goes to its
maxima, shared evenly among equal ones as ``tn.max``'s is and JAX's;
Theano's gave each of them the whole).  Its other modes are written with
other ops, as :mod:`.composed` is: the *patches* of the (padded) input --
one strided slice of it per position of the window, stacked -- summed over
the window axis, so every linker runs them with the code those ops have
there, their gradients are those ops' gradients, and the patches are an
ordinary buffer of the memory plan.

The window's size decides the graph (the op's geometry, one slice per
position for a pool), so it must be known when the graph is built: from
the filters' static shape, from ``filter_shape``, or from a shared
variable's current value -- then checked at every call
(``specify_shape``), as are the input's channels.  Where the shapes are
static, a mismatch (channels, a window larger than the padded input) is
refused when the graph is built, naming the argument.

``conv2d`` computes PyTorch's ``conv2d`` (cross-correlation, no bias);
``filter_flip=True`` flips the filters first, the convolution of
Theano/PyTensor's ``conv2d`` (whose default it is).
"""

from __future__ import annotations

import numbers

import numpy as np

# (as pad_array: pool_2d's argument pad is PyTensor's name)
from tenure.symbolic.ops.composed import pad as pad_array
from tenure.symbolic.ops.corr2d import Corr2d, window_patches
from tenure.symbolic.ops.creation import ones
from tenure.symbolic.ops.elemwise import true_divide
from tenure.symbolic.ops.maxpool import MaxPool2d
from tenure.symbolic.ops.reduce import sum as reduce_sum
from tenure.symbolic.ops.shape import shape_tuple, specify_shape
from tenure.symbolic.shared import SharedVariable
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["conv2d", "pool_2d"]

#: pool_2d's modes, PyTensor's names
POOL_MODES = ("max", "sum", "average_inc_pad", "average_exc_pad")


def _pair(value, fn: str, name: str, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each ``>= minimum``."""
    values = (value, value) if isinstance(value, numbers.Integral) else value
    try:
        pair = tuple(values)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                 for v in pair):
        raise TypeError(f"{fn}: {name} must be an int or a pair of ints (height, width), got "
                        f"{value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value!r}")
    return int(pair[0]), int(pair[1])


def _window(fn: str, filters, filter_shape):
    """The filters' (height, width), and the filters with them checked at
    every call where they were not static."""
    static = filters.type.shape[2:]
    if filter_shape is not None:
        if len(filter_shape) != 4:
            raise ValueError(f"{fn}: filter_shape must have 4 entries (out channels, in "
                             f"channels per group, height, width), got {filter_shape!r}")
        window = tuple(filter_shape[2:])
    elif None not in static:
        return static, filters
    elif isinstance(filters, SharedVariable):
        window = np.shape(filters.get_value(borrow=True))[2:]
    else:
        raise ValueError(f"{fn}: the filters' height and width must be known when the graph "
                         f"is built (they decide its shape), got filters of type "
                         f"{filters.type}: give them a static shape (tn.tensor(..., shape=(None, "
                         f"None, 3, 3))) or pass filter_shape=")
    window = _pair(tuple(window), fn, "the filters' (height, width)", 1)
    for got, want in zip(static, window):
        if got is not None and got != want:
            raise ValueError(f"{fn}: filter_shape says a {window} window, the filters are "
                             f"{filters.type}")
    return window, specify_shape(filters, (None, None, *window))


def _padding(fn: str, padding, window, dilation, stride) -> tuple:
    """``((top, bottom), (left, right))`` from ``conv2d``'s forms."""
    extents = [d * (k - 1) for k, d in zip(window, dilation)]
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding == "full":
            return tuple((e, e) for e in extents)
        if padding == "half":
            return tuple((d * (k // 2),) * 2 for k, d in zip(window, dilation))
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"{fn}: padding='same' needs stride 1 (the output keeps the "
                                 f"input's size), got stride {stride}")
            return tuple((e // 2, e - e // 2) for e in extents)
        raise ValueError(f"{fn}: padding must be 'valid', 'same', 'full', 'half', an int, a "
                         f"pair or a pair of (before, after) pairs, got {padding!r}")
    if isinstance(padding, numbers.Integral) or (
            len(padding) == 2 and all(isinstance(p, numbers.Integral) for p in padding)):
        return tuple((p, p) for p in _pair(padding, fn, "padding", 0))
    try:
        pairs = tuple(_pair(tuple(p), fn, "padding", 0) for p in padding)
    except TypeError:
        pairs = ()
    if len(pairs) != 2:
        raise TypeError(f"{fn}: padding must be 'valid', 'same', 'full', 'half', an int, a pair "
                        f"or a pair of (before, after) pairs, got {padding!r}")
    return pairs


def _check_fits(fn: str, x, pads, window, dilation) -> None:
    """A window larger than the padded input, refused where the lengths are static."""
    for axis, (length, (before, after), k, d) in enumerate(
            zip(x.type.shape[-2:], pads, window, dilation)):
        if length is not None and length + before + after < d * (k - 1) + 1:
            name = ("height", "width")[axis]
            raise ValueError(f"{fn}: the window spans {d * (k - 1) + 1} along the {name} "
                             f"(size {k}, dilation {d}), more than the padded input's "
                             f"{length + before + after} ({x.type})")


def conv2d(input, filters, stride=1, padding="valid", dilation=1, groups: int = 1,
           filter_flip: bool = False, filter_shape=None):
    """The 2-d cross-correlation of ``input`` (N, C, H, W) with ``filters``
    (F, C / groups, kh, kw): (N, F, OH, OW), PyTorch's ``conv2d`` without a
    bias.

    ``stride``, ``dilation``: an int or a (height, width) pair.  ``padding``:
    ``"valid"`` (none), ``"same"`` (the output keeps the input's size, stride
    1; an odd total puts the extra row/column after), ``"full"`` (every
    overlap), ``"half"`` (``kernel // 2`` each side, PyTensor's), an int, a
    pair, or ``((top, bottom), (left, right))``; zeros.  ``groups``: the
    channels split into that many groups, each convolved with its share of
    the filters.  ``filter_flip=True`` convolves (the filters flipped in
    both spatial axes).  ``filter_shape``: the filters' shape where their type
    does not give the window's size (see the module doc)."""
    fn = "conv2d"
    x, w = as_tensor_variable(input), as_tensor_variable(filters)
    for name, v in (("input", x), ("filters", w)):
        if v.ndim != 4:
            raise ValueError(f"{fn}: {name} must be 4-d (N, C, H, W for the input; F, C / "
                             f"groups, kh, kw for the filters), got {v} ({v.type})")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{fn}: groups must be a positive int, got {groups!r}")
    stride = _pair(stride, fn, "stride", 1)
    dilation = _pair(dilation, fn, "dilation", 1)
    window, w = _window(fn, w, filter_shape)
    pads = _padding(fn, padding, window, dilation, stride)
    x = _check_channels(fn, x, w, groups)
    _check_fits(fn, x, pads, window, dilation)
    if filter_flip:
        w = w[:, :, ::-1, ::-1]
    return Corr2d(window, stride, dilation, pads, groups)(x, w)


def _check_channels(fn: str, x, w, groups: int):
    """The input's channels against the filters' (checked at every call
    where either is not static); the filters' count against ``groups``."""
    c, (f, c_group) = x.type.shape[1], w.type.shape[:2]
    if f is not None and f % groups:
        raise ValueError(f"{fn}: the filters' count ({f}) must be a multiple of groups "
                         f"({groups})")
    if c_group is None:
        return x
    if c is not None and c != groups * c_group:
        raise ValueError(f"{fn}: input has {c} channels, but the filters take {c_group} per "
                         f"group x {groups} group(s) = {groups * c_group} (input {x.type}, "
                         f"filters {w.type})")
    return specify_shape(x, (None, groups * c_group, None, None))


def pool_2d(input, ws, ignore_border: bool = True, stride=None, pad=(0, 0), mode: str = "max"):
    """Pooling over the last two axes of ``input`` (PyTensor's ``pool_2d``):
    each ``ws`` window's ``max``, ``sum``, or average -- ``average_inc_pad``
    dividing by the window's size, ``average_exc_pad`` by the number of its
    elements that are not padding.  ``stride`` defaults to ``ws``; ``pad``
    (an int or a pair) pads both sides with what the mode ignores (the
    dtype's lowest value for ``max``, zeros otherwise).  ``ignore_border=False``
    keeps the partial windows at the bottom and right edges (the input's
    height and width must then be static, and ``pad`` zero)."""
    fn = "pool_2d"
    x = as_tensor_variable(input)
    if x.ndim < 2:
        raise ValueError(f"{fn}: input must have at least 2 axes (it pools the last two), got "
                         f"{x} ({x.type})")
    if mode not in POOL_MODES:
        raise ValueError(f"{fn}: mode must be one of {', '.join(POOL_MODES)}, got {mode!r}")
    window = _pair(ws, fn, "ws", 1)
    stride = window if stride is None else _pair(stride, fn, "stride", 1)
    pads = [(p, p) for p in _pair(pad, fn, "pad", 0)]
    if any(p >= k for (p, _), k in zip(pads, window)):
        raise ValueError(f"{fn}: pad must be smaller than ws along each axis (a window of "
                         f"padding only), got pad {pad!r} for ws {ws!r}")
    if not ignore_border:
        pads = _border_pads(fn, x, window, stride, pads)
    _check_fits(fn, x, pads, window, (1, 1))
    if mode == "max":
        return MaxPool2d(window, stride, pads)(x)
    lead = [(0, 0)] * (x.ndim - 2)
    padded = x if not any(p for pair in pads for p in pair) else pad_array(x, (*lead, *pads))
    patches = window_patches(padded, window, stride, (1, 1), axis=0)
    total = reduce_sum(patches, axis=0)
    if mode == "sum":
        return total
    if mode == "average_inc_pad" and ignore_border:
        return true_divide(total, window[0] * window[1])
    # average_exc_pad; and average_inc_pad's partial windows at the border,
    # whose divisor is their part inside the input (PyTensor's, pad being 0)
    return true_divide(total, _counts(x, window, stride, pads))


def _border_pads(fn: str, x, window, stride, pads):
    """``ignore_border=False``: padding after the input that makes room for
    the partial windows at its bottom and right edges."""
    if any(before for before, _ in pads):
        raise ValueError(f"{fn}: ignore_border=False takes no pad (PyTensor's rule), got pad "
                         f"{[before for before, _ in pads]}")
    lengths = x.type.shape[-2:]
    if None in lengths:
        raise ValueError(f"{fn}: ignore_border=False needs the input's height and width known "
                         f"when the graph is built, got {x} ({x.type})")
    result = []
    for length, k, s in zip(lengths, window, stride):
        # PyTensor's count of windows: every one that starts inside the input
        out = (length - 1) // s + 1 if s >= k else max(0, (length - 1 - k + s) // s) + 1
        result.append((0, max(0, (out - 1) * s + k - length)))
    return result


def _counts(x, window, stride, pads):
    """Each window's divisor for the averages: how many of its elements are
    the input's (ones padded like the input, pooled by sum)."""
    lengths = shape_tuple(x)[-2:]
    inside = ones(lengths, dtype=x.dtype if np.dtype(x.dtype).kind == "f" else "float64")
    return reduce_sum(window_patches(pad_array(inside, pads), window, stride, (1, 1), axis=0),
                      axis=0)
