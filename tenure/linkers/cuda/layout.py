"""The launch of an elementwise kernel (see :mod:`.elemwise`): from the
operands' shapes and byte strides to the kernel's arguments.  Pure Python
over shapes and strides, so a device array and a NumPy array (host
emulation) launch the same way.

:func:`launch_layout` broadcasts every input to the output's shape (stride 0
on a broadcast axis), drops the axes of length 1, and merges neighbouring
axes that every operand steps through as one (``s[k-1] == s[k] * len[k]``),
so a contiguous array of any ndim launches as one axis.  A kernel is then
picked by the number of axes left.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Layout", "THREADS_PER_BLOCK", "byte_extent", "grid_size", "launch_layout"]

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
    axes = [k for k in range(ndim) if out_shape[k] != 1]
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in operands]
    for k in axes:
        length = out_shape[k]
        if dims and all(m[-1] == s[k] * length for m, s in zip(merged, strides)):
            dims[-1] *= length
            for m, s in zip(merged, strides):
                m[-1] = s[k]
            continue
        dims.append(length)
        for m, s in zip(merged, strides):
            m.append(s[k])
    if not dims:   # 0-d, or every axis of length 1: one element
        dims = [1]
        merged = [[0] for _ in operands]
    return Layout(n, tuple(dims), tuple(tuple(m) for m in merged))


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


def byte_extent(start: int, shape, strides, itemsize: int) -> tuple[int, int]:
    """The bytes an array touches: ``[first, one past the last)``."""
    if any(d == 0 for d in shape):
        return start, start
    low = start + sum((d - 1) * s for d, s in zip(shape, strides) if s < 0)
    high = start + sum((d - 1) * s for d, s in zip(shape, strides) if s > 0) + itemsize
    return low, high
