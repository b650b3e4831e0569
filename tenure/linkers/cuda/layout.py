"""The launch of a kernel (:mod:`.elemwise`, :mod:`.reduce`): from the
operands' shapes and byte strides to the kernel's arguments.  Pure Python
over shapes and strides, so a device array and a NumPy array (kernels
run on the host) launch the same way.

:func:`launch_layout` broadcasts every input to the output's shape (stride 0
on a broadcast axis), drops the axes of length 1, and merges neighbouring
axes that every operand steps through as one (``s[k-1] == s[k] * len[k]``),
so a contiguous array of any ndim launches as one axis.  A kernel is then
picked by the number of axes left.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenure.symbolic.ops.reduce import reduced_shape

__all__ = ["Layout", "ReductionLayout", "THREADS_PER_BLOCK", "grid_size",
           "launch_layout", "reduction_layout", "row_layout"]

#: threads per block of an elementwise launch
THREADS_PER_BLOCK = 256
#: blocks at most: a grid-stride loop covers the rest (enough to fill any
#: device, few enough that each thread amortises its setup)
MAX_BLOCKS = 65536


@dataclass(frozen=True)
class Layout:
    """``n`` elements over ``dims`` (outermost first; at least one axis),
    and per operand (the output first) its byte strides over them."""

    n: int
    dims: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def arguments(self) -> list[int]:
        """The integer arguments of the kernel: ``n``, the lengths, then the
        strides operand by operand."""
        return [self.n, *self.dims, *(s for strides in self.strides for s in strides)]


def launch_layout(out_shape: tuple[int, ...], operands: list[tuple[tuple, tuple]]) -> Layout:
    """The layout of a launch writing ``out_shape``; ``operands``: ``(shape,
    byte strides)`` of the output, then of each input read (an input of
    fewer axes is aligned on the right, as NumPy broadcasts).  ``ValueError``
    naming the operand when one does not broadcast to the output's shape."""
    out_shape = tuple(int(d) for d in out_shape)
    ndim = len(out_shape)
    strides = [_broadcast_strides(j, tuple(shape), tuple(st), out_shape)
               for j, (shape, st) in enumerate(operands)]
    n = 1
    for d in out_shape:
        n *= d
    dims, merged = _merged(list(range(ndim)), out_shape, strides)
    return Layout(n, dims, merged)


def _broadcast_strides(position: int, shape: tuple, strides: tuple,
                       out_shape: tuple) -> list[int]:
    if len(shape) != len(strides):
        raise ValueError(f"operand {position}: shape {shape} and strides {strides} differ in "
                         f"length")
    if len(shape) > len(out_shape):
        raise ValueError(f"operand {position}: {len(shape)} axes, the output has "
                         f"{len(out_shape)}")
    pad = len(out_shape) - len(shape)
    result = [0] * pad
    for k, (length, stride) in enumerate(zip(shape, strides)):
        if length == out_shape[pad + k]:
            result.append(int(stride) if length != 1 else 0)
        elif length == 1:
            result.append(0)
        else:
            raise ValueError(f"operand {position}: shape {shape} does not broadcast to the "
                             f"output's shape {out_shape}")
    return result


def grid_size(n: int, threads: int = THREADS_PER_BLOCK, max_blocks: int = MAX_BLOCKS) -> int:
    """Blocks for ``n`` elements (at least one)."""
    return max(1, min(max_blocks, -(-n // threads)))


@dataclass(frozen=True)
class ReductionLayout:
    """A reduction's launch: ``n_out`` outputs of ``n_red`` elements each;
    the kept and the reduced axes (each at least one, outermost first); per
    operand (the output first) its byte strides over the kept axes, and per
    operand that moves along them (the inputs of a reduction; the output too
    for softmax) over the reduced axes."""

    n_out: int
    n_red: int
    kept: tuple[int, ...]
    reduced: tuple[int, ...]
    kept_strides: tuple[tuple[int, ...], ...]
    reduced_strides: tuple[tuple[int, ...], ...]

    def arguments(self) -> list[int]:
        """The integer arguments of a reduction kernel (see :mod:`.reduce`)."""
        return [self.n_out, self.n_red, *self.kept, *self.reduced,
                *(s for strides in self.kept_strides for s in strides),
                *(s for strides in self.reduced_strides for s in strides)]


def reduction_layout(full_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool,
                     out: tuple[tuple, tuple], inputs: list[tuple[tuple, tuple]]
                     ) -> ReductionLayout:
    """The launch of a reduction over ``axes`` of ``full_shape`` (the inputs'
    broadcast shape) into ``out`` (``(shape, byte strides)``, with or without
    the reduced axes as ``keepdims`` says), reading ``inputs``.  Axes of
    length 1 go; neighbouring kept axes (and neighbouring reduced ones) that
    every operand steps through as one merge.  ``ValueError`` when ``out``
    does not have the reduced shape or an input does not broadcast."""
    full_shape = tuple(int(d) for d in full_shape)
    nd = len(full_shape)
    expected = reduced_shape(full_shape, axes, keepdims)
    out_shape, out_strides = tuple(out[0]), tuple(out[1])
    if out_shape != expected:
        raise ValueError(f"output 0: expected shape {expected}, got {out_shape}")
    if not keepdims:   # the reduced axes back, as length 1 (stride 0)
        shape_iter, stride_iter = iter(out_shape), iter(out_strides)
        out_shape = tuple(1 if k in axes else next(shape_iter) for k in range(nd))
        out_strides = tuple(0 if k in axes else next(stride_iter) for k in range(nd))
    rows = row_layout(full_shape, axes, [(out_shape, out_strides), *inputs])
    # The output does not move along the reduced axes: only the inputs' strides.
    return ReductionLayout(rows.n_out, rows.n_red, rows.kept, rows.reduced, rows.kept_strides,
                           rows.reduced_strides[1:])


def row_layout(full_shape: tuple[int, ...], axes: tuple[int, ...],
               operands: list[tuple[tuple, tuple]]) -> ReductionLayout:
    """The launch over rows (the values along ``axes``) of ``full_shape``:
    every operand (``(shape, byte strides)``, broadcast to ``full_shape``)
    has strides over the kept and the reduced axes (for softmax, whose output
    has the input's shape; a reduction's output has 0 on the reduced axes)."""
    full_shape = tuple(int(d) for d in full_shape)
    nd = len(full_shape)
    strides = [_broadcast_strides(j, tuple(shape), tuple(st), full_shape)
               for j, (shape, st) in enumerate(operands)]
    kept, kept_strides = _merged([k for k in range(nd) if k not in axes], full_shape, strides)
    reduced, reduced_strides = _merged(sorted(axes), full_shape, strides)
    n_red = 1
    for k in axes:
        n_red *= full_shape[k]
    n_out = 1
    for k in range(nd):
        if k not in axes:
            n_out *= full_shape[k]
    return ReductionLayout(n_out, n_red, kept, reduced, kept_strides, reduced_strides)


def _merged(axes: list[int], shape: tuple, strides: list[list[int]]
            ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """The lengths of ``axes`` (length-1 ones dropped, neighbours merged
    where every operand allows) and each operand's strides over them; one
    axis of length 1 when none is left."""
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for k in axes:
        length = shape[k]
        if length == 1:
            continue
        if dims and all(m[-1] == s[k] * length for m, s in zip(merged, strides)):
            dims[-1] *= length
            for m, s in zip(merged, strides):
                m[-1] = s[k]
            continue
        dims.append(length)
        for m, s in zip(merged, strides):
            m.append(s[k])
    if not dims:
        return (1,), tuple((0,) for _ in strides)
    return tuple(dims), tuple(tuple(m) for m in merged)
