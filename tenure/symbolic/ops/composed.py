"""Array functions written with other ops: ``tril``, ``triu``, ``tile``,
``repeat``, ``pad`` (its constant mode; the copying ones -- edge, wrap,
reflect, symmetric -- as a ``take`` of index maps; the statistic ones --
maximum, minimum, mean, median -- as reductions joined to each side;
linear_ramp as NumPy's ``linspace`` arithmetic) and ``linspace``, NumPy's
semantics.

None of them is an op of its own.  Each builds its result from the op
families (elementwise ``where`` and arithmetic, ``arange``, broadcasting,
``reshape``, ``set_subtensor``, ``take``), so every linker runs it with the
code those ops have there (C, CUDA, Dask), their gradients give its
gradient, and the rewrites see through it.  Their static arguments (``k``,
``reps``, ``pad_width``, ``num``, and ``repeats`` when it is one count)
must be Python integers: they decide the graph's shape.  A ``repeat`` with
a count per element takes ``x`` at indices that
:class:`~tenure.symbolic.ops.repeat_counts.RepeatIndices` computes from a
tensor of counts (or that are a constant, for counts and a length known
when the graph is built).
"""

from __future__ import annotations

import numbers

import numpy as np

from tenure.symbolic.ops.creation import arange, broadcast_to, full
from tenure.symbolic.ops.elemwise import (add, cast, clip, eq, floor, floor_divide, less,
                                          less_equal, maximum, mod, mul, sub, true_divide, where)
from tenure.symbolic.ops.elemwise import round as round_half_even
from tenure.symbolic.ops.indexing import take
from tenure.symbolic.ops.join import concatenate
from tenure.symbolic.ops.reduce import any as tn_any
from tenure.symbolic.ops.reduce import max as reduce_max
from tenure.symbolic.ops.reduce import mean
from tenure.symbolic.ops.reduce import min as reduce_min
from tenure.symbolic.ops.repeat_counts import RepeatIndices, check_counts
from tenure.symbolic.ops.shape import (dim_add, dim_mul, dimshuffle, expand_dims, reshape,
                                       shape_tuple)
from tenure.symbolic.ops.sorting import sort
from tenure.symbolic.ops.subtensor_update import set_subtensor
from tenure.symbolic.types import normalize_dtype
from tenure.symbolic.variable import TensorConstant, as_tensor_variable

__all__ = ["linspace", "pad", "repeat", "tile", "tril", "triu"]


def _static_int(value, fn: str, name: str, minimum: int | None = None) -> int:
    """``value`` as a Python int, else a TypeError naming ``fn``'s argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be a Python integer (it decides the result's "
                        f"shape), got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}")
    return int(value)


def _matrix_mask(x, k: int, fn: str, shift: int = 0):
    """``(x, keep)``: ``keep[i, j]`` is ``j <= i + k + shift`` over ``x``'s
    last two axes."""
    x = as_tensor_variable(x)
    if x.ndim < 2:
        raise ValueError(f"{fn}: x must have at least 2 dimensions, got {x.ndim}-d {x.type}")
    k = _static_int(k, fn, "k") + shift
    rows, cols = shape_tuple(x)[-2:]
    i = expand_dims(arange(rows), 1)
    j = expand_dims(arange(cols), 0)
    return x, less_equal(j, add(i, k))


def _zero_of(x):
    return as_tensor_variable(np.zeros((), dtype=x.dtype))


def tril(x, k: int = 0):
    """``x`` with the elements above the ``k``-th diagonal of its last two axes
    zeroed (NumPy's ``tril``; ``k > 0`` keeps diagonals above the main one)."""
    x, keep = _matrix_mask(x, k, "tril")
    return where(keep, x, _zero_of(x))


def triu(x, k: int = 0):
    """``x`` with the elements below the ``k``-th diagonal of its last two axes
    zeroed (NumPy's ``triu``)."""
    x, below = _matrix_mask(x, k, "triu", shift=-1)
    return where(below, _zero_of(x), x)


def tile(x, reps):
    """``x`` repeated ``reps[d]`` times along each axis ``d`` (NumPy's ``tile``):
    ``reps`` shorter than ``x.ndim`` is padded with ones in front, longer
    gives ``x`` new leading axes."""
    x = as_tensor_variable(x)
    reps = (reps,) if isinstance(reps, numbers.Integral) else tuple(reps)
    reps = tuple(_static_int(r, "tile", f"reps[{i}]", minimum=0) for i, r in enumerate(reps))
    ndim = max(x.ndim, len(reps))
    reps = (1,) * (ndim - len(reps)) + reps
    if ndim > x.ndim:
        x = expand_dims(x, tuple(range(ndim - x.ndim)))
    if all(r == 1 for r in reps):
        return x
    dims = shape_tuple(x)
    # (r0, n0, r1, n1, ...): a new axis before each, broadcast, then merged
    spread = dimshuffle(x, [a for axis in range(ndim) for a in ("x", axis)])
    spread = broadcast_to(spread, [d for r, n in zip(reps, dims) for d in (r, n)])
    return reshape(spread, [dim_mul(r, n) for r, n in zip(reps, dims)])


def repeat(x, repeats, axis: int | None = None):
    """Each element of ``x`` repeated along ``axis`` (NumPy's ``repeat``;
    ``axis=None`` repeats the flattened ``x``).  ``repeats``: one count for
    every element (a Python int: a broadcast and a reshape), or a count per
    element along the axis (a list or array of ints, or an integer vector
    tensor: a ``take`` of :class:`~.repeat_counts.RepeatIndices`' indices,
    the result's length their sum).  Counts must be >= 0; a wrong number of
    them is an error naming ``repeats``."""
    x = as_tensor_variable(x)
    if isinstance(repeats, bool):
        raise TypeError(f"repeat: repeats must be an int or ints, got {repeats!r}")
    if axis is None:
        x, axis = reshape(x, [-1]), 0
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) \
            or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"repeat: axis must be an int in [{-x.ndim}, {x.ndim}) for "
                         f"{x.ndim}-d {x.type}, got {axis!r}")
    axis %= x.ndim
    if not isinstance(repeats, numbers.Integral):
        return _repeat_each(x, repeats, axis)
    repeats = _static_int(repeats, "repeat", "repeats", minimum=0)
    dims = list(shape_tuple(x))
    spread = expand_dims(x, axis + 1)
    spread = broadcast_to(spread, dims[:axis + 1] + [repeats] + dims[axis + 1:])
    return reshape(spread, dims[:axis] + [dim_mul(dims[axis], repeats)] + dims[axis + 1:])


def _repeat_each(x, repeats, axis: int):
    """``repeat`` with a count per element: ``x`` taken at the indices each
    element repeats to -- a constant when the counts and the axis's length
    are known now, else :class:`RepeatIndices`' (which checks them when it
    runs)."""
    if isinstance(repeats, (list, tuple, np.ndarray, TensorConstant)):
        counts = np.asarray(repeats.data if isinstance(repeats, TensorConstant) else repeats)
        if counts.dtype.kind not in "iu" and counts.size:
            raise TypeError(f"repeat: repeats must be ints, got {counts.dtype} {counts!r}")
        counts = counts.astype(np.int64)
        if counts.size == 1 and counts.ndim <= 1:
            return repeat(x, int(counts.reshape(())), axis)
        length = x.type.shape[axis]
        if length is not None:
            check_counts(counts, length)
            return take(x, np.repeat(np.arange(length, dtype=np.int64), counts), axis=axis)
        repeats = counts
    return take(x, RepeatIndices()(repeats, shape_tuple(x)[axis]), axis=axis)


#: pad's modes other than "constant": each maps an index ``i`` of the padded
#: axis, counted from the first element of ``x`` (negative before it), to the
#: element of ``x`` it copies, for an axis of length ``n`` (NumPy's results,
#: however wide the padding)
PAD_MODES = ("edge", "wrap", "reflect", "symmetric")
#: pad's statistic modes: each side padded with a reduction of its nearest elements
PAD_STATISTICS = ("maximum", "minimum", "mean", "median")


def pad(x, pad_width, mode: str = "constant", constant_values=0, stat_length=None,
        end_values=0):
    """``x`` with ``pad_width`` elements before and after each axis (NumPy's
    ``pad``).  ``pad_width`` is NumPy's: an int for every side, ``(before,
    after)`` for every axis, or one ``(before, after)`` per axis.  ``mode``:
    ``"constant"`` (``constant_values``, a scalar converted to ``x``'s dtype),
    ``"edge"`` (the edge element repeated), ``"wrap"`` (the axis repeated),
    ``"reflect"`` (mirrored about the edge element), ``"symmetric"``
    (mirrored, the edge included), a statistic of the ``stat_length``
    elements nearest the side (all of the axis when None; NumPy's forms,
    as ``pad_width``'s): ``"maximum"``, ``"minimum"``, ``"mean"`` or
    ``"median"`` (rounded to even for an integer ``x``), or
    ``"linear_ramp"`` (from ``end_values``, numbers in ``pad_width``'s
    forms, towards the edge element, as NumPy's ``linspace`` without its
    end: floored for an integer ``x``).  The axes are padded in order, as
    NumPy does.  The gradient of the result is the gradient of ``x``'s
    region, plus, for the other modes, of the elements each padded value
    came from."""
    x = as_tensor_variable(x)
    if mode != "constant" and mode not in PAD_MODES + PAD_STATISTICS + ("linear_ramp",):
        raise ValueError(f"pad: mode must be 'constant' or one of "
                         f"{', '.join(PAD_MODES + PAD_STATISTICS)}, linear_ramp, got {mode!r}")
    widths = _pad_widths(pad_width, x.ndim)
    if stat_length is not None and mode not in PAD_STATISTICS:
        raise ValueError(f"pad: stat_length is for the modes {', '.join(PAD_STATISTICS)}, "
                         f"not {mode!r}")
    if mode in PAD_STATISTICS:
        lengths = [(None, None)] * x.ndim if stat_length is None else \
            _pad_widths(stat_length, x.ndim, "stat_length", minimum=1)
        return _pad_by_statistics(x, widths, mode, lengths)
    if mode == "linear_ramp":
        return _pad_by_ramps(x, widths, _end_values(end_values, x.ndim))
    if mode != "constant":
        return _pad_by_copies(x, widths, mode)
    value = as_tensor_variable(constant_values)
    if value.ndim != 0:
        raise ValueError(f"pad: constant_values must be a scalar, got {value.ndim}-d "
                         f"{value.type}")
    dims = shape_tuple(x)
    padded = full([dim_add(dim_add(before, n), after) for (before, after), n in zip(widths, dims)],
                  cast(value, x.dtype))
    region = tuple(slice(before, dim_add(before, n)) for (before, _), n in zip(widths, dims))
    return set_subtensor(padded[region], x)


def _axes_to_pad(x, widths, mode: str):
    """``(axis, before, after)`` for each axis ``widths`` pads, in order; an
    axis known to be empty is refused (only the constant mode extends one)."""
    for axis, (before, after) in enumerate(widths):
        if not before and not after:
            continue
        if x.type.shape[axis] == 0:
            raise ValueError(f"pad: cannot extend the empty axis {axis} of {x} ({x.type}) in "
                             f"mode {mode!r}")
        yield axis, before, after


def _pad_by_copies(x, widths, mode: str):
    """The copying modes: along each padded axis, ``take`` of ``x`` at the
    source index of every position of the padded axis."""
    for axis, before, after in _axes_to_pad(x, widths, mode):
        n = shape_tuple(x)[axis]
        positions = sub(arange(dim_add(dim_add(before, n), after), dtype="int64"), before)
        x = take(x, _source_index(positions, as_tensor_variable(n), mode), axis=axis)
    return x


def _pad_by_statistics(x, widths, mode: str, lengths):
    """The statistic modes: along each padded axis in turn, the statistic of
    each side's nearest elements, broadcast over its padding, joined to
    ``x``."""
    for axis, before, after in _axes_to_pad(x, widths, mode):
        len_before, len_after = lengths[axis]
        parts = [x]
        if before:
            parts.insert(0, _side_statistic(x, axis, mode, slice(0, len_before), before))
        if after:
            nearest = slice(None) if len_after is None else slice(-len_after, None)
            parts.append(_side_statistic(x, axis, mode, nearest, after))
        x = concatenate(parts, axis=axis)
    return x


def _side_statistic(x, axis: int, mode: str, nearest: slice, width: int):
    """``mode``'s statistic of ``x``'s elements ``nearest`` along ``axis``,
    ``width`` times along it."""
    region = x[(slice(None),) * axis + (nearest,)]
    if mode == "maximum":
        value = reduce_max(region, axis=axis, keepdims=True)
    elif mode == "minimum":
        value = reduce_min(region, axis=axis, keepdims=True)
    else:
        value = mean(region, axis=axis, keepdims=True) if mode == "mean" else \
            _median(region, axis)
        if x.type.numpy_dtype.kind in "iub":       # NumPy rounds an integer mean or median
            value = round_half_even(value)
    value = cast(value, x.dtype)
    dims = list(shape_tuple(x))
    dims[axis] = width
    return broadcast_to(value, dims)


def _median(region, axis: int):
    """The median along ``axis``, kept as an axis of one: the middle of the
    sorted elements, or the mean of the two middle ones (NumPy's)."""
    ordered = sort(region, axis=axis)
    m = shape_tuple(region)[axis]
    low, high = floor_divide(sub(m, 1), 2), floor_divide(m, 2)
    at = (slice(None),) * axis
    pair = add(ordered[at + (slice(low, add(low, 1)),)], ordered[at + (slice(high, add(high, 1)),)])
    return true_divide(pair, 2) if region.type.numpy_dtype.kind == "f" else \
        true_divide(cast(pair, "float64"), 2.0)


def _end_values(end_values, ndim: int) -> list[tuple]:
    """``linear_ramp``'s ``end_values`` (numbers, in ``pad_width``'s forms)
    as one ``(before, after)`` per axis."""
    values = _per_axis_pairs(end_values, ndim, "end_values", "biuf", "numbers", "a number")
    return [tuple(row) for row in values.tolist()]


def _pad_by_ramps(x, widths, ends):
    """``linear_ramp``: along each padded axis in turn, each side a ramp from
    its end value towards the edge element, joined to ``x``."""
    for axis, before, after in _axes_to_pad(x, widths, "linear_ramp"):
        end_before, end_after = ends[axis]
        at = (slice(None),) * axis
        parts = [x]
        if before:
            parts.insert(0, _ramp(x, axis, x[at + (slice(0, 1),)], end_before, before, False))
        if after:
            parts.append(_ramp(x, axis, x[at + (slice(-1, None),)], end_after, after, True))
        x = concatenate(parts, axis=axis)
    return x


def _ramp(x, axis: int, edge, end, width: int, reverse: bool):
    """NumPy's ``linspace(end, edge, width, endpoint=False)`` along ``axis``
    (reversed after the edge), in ``x``'s dtype: computed in float64 (NumPy
    makes the start a float64 array), ``k * step + end``, or ``k / width *
    delta + end`` when any step is zero, as NumPy's; floored for integers."""
    dtype = "float64"
    end = cast(as_tensor_variable(np.asarray(end)), dtype)
    delta = sub(cast(edge, dtype), end)
    step = true_divide(delta, cast(width, dtype))
    shape = [1] * x.ndim
    shape[axis] = width
    k = reshape(arange(width, dtype=dtype), shape)
    if reverse:
        k = k[(slice(None),) * axis + (slice(None, None, -1),)]
    any_zero = tn_any(eq(step, 0))
    ramp = add(where(any_zero, mul(true_divide(k, cast(width, dtype)), delta), mul(k, step)), end)
    if x.type.numpy_dtype.kind != "f":
        ramp = floor(ramp)
    return cast(ramp, x.dtype)


def _source_index(i, n, mode: str):
    """The element of an axis of length ``n`` that position ``i`` copies."""
    n = cast(n, "int64")
    if mode == "edge":
        return clip(i, 0, sub(n, 1))
    if mode == "wrap":
        return mod(i, n)
    if mode == "symmetric":             # period 2n: 0 .. n-1, then n-1 .. 0
        j = mod(i, mul(n, 2))
        return where(less(j, n), j, sub(sub(mul(n, 2), 1), j))
    # reflect: period 2(n - 1), the edges not repeated; a single element repeats
    period = maximum(mul(sub(n, 1), 2), 1)
    j = mod(i, period)
    return where(less(j, n), j, sub(period, j))


def _pad_widths(pad_width, ndim: int, name: str = "pad_width",
                minimum: int = 0) -> list[tuple[int, int]]:
    """NumPy's forms of ``pad_width`` (or ``stat_length``: ``name``) as one
    ``(before, after)`` per axis: it broadcasts to ``(ndim, 2)``, as in
    NumPy."""
    widths = _per_axis_pairs(pad_width, ndim, name, "iu",
                             "Python integers (they decide the result's shape)", "an int")
    return [tuple(_static_int(int(w), "pad", f"{name}[{axis}]", minimum=minimum) for w in row)
            for axis, row in enumerate(widths)]


def _per_axis_pairs(value, ndim: int, name: str, kinds: str, plural: str, single: str):
    """``value`` (one of pad's per-side arguments, NumPy's forms) broadcast
    to ``(ndim, 2)``: its elements of the dtype ``kinds``, else a TypeError
    saying they must be ``plural``; a shape that does not broadcast is a
    ValueError."""
    values = np.asarray(value, dtype=object if _has_variables(value) else None)
    if values.dtype.kind not in kinds:
        raise TypeError(f"pad: {name} must hold {plural}, got {value!r}")
    try:
        return np.broadcast_to(values, (ndim, 2))
    except ValueError:
        raise ValueError(f"pad: {name} must be {single}, (before, after), or one "
                         f"(before, after) per axis of the {ndim}-d x, got {value!r}") from None


def _has_variables(value) -> bool:
    """Whether ``value`` holds anything but numbers (NumPy would make an
    array of the objects, or fail, before tenure could name the argument)."""
    if isinstance(value, (tuple, list)):
        return any(_has_variables(v) for v in value)
    return not isinstance(value, (numbers.Number, np.ndarray))


def linspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (NumPy's
    ``linspace`` for scalar bounds: ``start + i * step``, and ``stop`` itself
    last when ``endpoint``).  ``start`` and ``stop`` may be 0-d variables;
    ``num`` is a Python integer."""
    num = _static_int(num, "linspace", "num", minimum=0)
    start, stop = as_tensor_variable(start), as_tensor_variable(stop)
    for name, bound in (("start", start), ("stop", stop)):
        if bound.ndim != 0:
            raise ValueError(f"linspace: {name} must be a scalar (0-d), got {bound.ndim}-d "
                             f"{bound.type}")
    dt = _inexact_result_dtype(start, stop)
    div = num - 1 if endpoint else num
    delta = sub(cast(stop, dt), cast(start, dt))
    # NumPy's order: i * step (i * delta for a single value: its step is NaN), + start
    values = add(mul(arange(num, dtype=dt), true_divide(delta, div) if div > 0 else delta),
                 start)
    if endpoint and num > 1:
        values = set_subtensor(values[-1], stop)
    if dtype is None:
        return values
    dtype = normalize_dtype(dtype, what="linspace")
    if np.dtype(dtype).kind in "iu":
        values = floor(values)      # NumPy floors before converting to integers
    return cast(values, dtype)


def _inexact_result_dtype(*bounds) -> str:
    """NumPy's dtype for ``bounds`` (a Python number weakly typed), made a float."""
    probes = [type(b.weak_value)(0) if isinstance(b, TensorConstant) and b.weak
              else np.empty(0, b.dtype) for b in bounds]
    return np.result_type(*probes, 1.0).name
