"""The host side of an elementwise launch, for any place kernels run: the
device (CuPy arrays) or host emulation (NumPy arrays, in CI).

:func:`run_elemwise` does what the kernel contract (:mod:`.elemwise`) leaves
to the caller: it picks the output (the given one, the destroyed input of an
in-place node when that has the output's shape, or a new array), copies an
input that overlaps the output other than exactly (a shifted or reversed
view of it) or is not aligned, works out the :class:`~.layout.Layout`,
launches, and turns the kernel's error bits into the exception NumPy
raises.  What differs between the two places is a :class:`Backend`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tenure.linkers.cuda.elemwise import ElemwiseKernel
from tenure.linkers.cuda.layout import Layout, launch_layout

__all__ = ["Backend", "ERROR_MESSAGES", "run_elemwise"]

#: the error bits of scalar_errors.h, and what each means (NumPy's words)
ERROR_MESSAGES = {1: "integers to negative integer powers are not allowed"}


class Backend(Protocol):
    """Where kernels run: arrays of its own kind, and launches over them."""

    def empty(self, shape: tuple, dtype: np.dtype): ...

    def copy(self, array): ...

    def extent(self, array) -> tuple[int, int]:
        """The first and one-past-the-last byte address ``array`` touches."""

    def pointer(self, array) -> int: ...

    def from_host(self, array: np.ndarray):
        """``array`` as an array of this backend (a copy on a device)."""

    def to_host(self, array) -> np.ndarray:
        """A NumPy array holding ``array``'s values."""

    def launch(self, kernel: ElemwiseKernel, layout: Layout, arrays: list) -> int:
        """Run ``kernel`` over ``arrays`` (output first); the error bits it
        set (0 without reading them back when it sets none)."""


def run_elemwise(backend: Backend, kernel: ElemwiseKernel, node, inputs: list, out=None,
                 destroyed: int | None = None):
    """``node`` computed by ``kernel`` over ``inputs`` (all the node's inputs
    by position; anything at a Python-number position), into ``out`` or the
    output :func:`run_elemwise` picks (see the module doc); returns it."""
    arrays = [inputs[i] for i in kernel.read]
    for i, a in zip(kernel.read, arrays):
        want = node.inputs[i].type.dtype
        if a.dtype != want or a.ndim != node.inputs[i].type.ndim:
            raise TypeError(f"{_label(node, i)}: expected a {node.inputs[i].type.ndim}-d array "
                            f"of dtype {want}, got {a.ndim}-d {a.dtype}")
    shape = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
    if out is None:
        out = _output(backend, kernel, node, inputs, shape, destroyed)
    elif out.dtype != kernel.dtypes[0]:
        raise TypeError(f"output 0: expected dtype {kernel.dtypes[0]}, got {out.dtype}")
    arrays = [_separate(backend, a, out) for a in arrays]
    try:
        layout = launch_layout(out.shape, [(a.shape, a.strides) for a in [out, *arrays]])
    except ValueError as exc:
        raise ValueError(f"{node.op}: {exc}") from None
    if layout.n == 0:
        return out
    status = backend.launch(kernel, layout, [out, *arrays])
    if status:
        messages = [m for bit, m in ERROR_MESSAGES.items() if status & bit]
        raise ValueError(f"{node.op}: {'; '.join(messages) or f'error bits {status}'}")
    return out


def _label(node, i: int) -> str:
    name = node.inputs[i].name
    return f"input {i} ({name})" if name else f"input {i}"


def _output(backend: Backend, kernel: ElemwiseKernel, node, inputs: list, shape: tuple,
            destroyed: int | None):
    """The destroyed input when the node is in place and it holds the
    output's shape and dtype, else a new array."""
    if destroyed is None:
        destroyed = next(iter(getattr(node.op, "destroy_map", {}).get(0, [])), None)
    if destroyed is not None:
        target = inputs[destroyed]
        if tuple(target.shape) == tuple(shape) and target.dtype == kernel.dtypes[0]:
            return target
    return backend.empty(shape, kernel.dtypes[0])


def _separate(backend: Backend, array, out):
    """``array``, or a copy of it when the kernel cannot read it as it is:
    it overlaps ``out`` but is not ``out`` itself (same start and strides),
    or it is not aligned to its itemsize."""
    aligned = (backend.pointer(array) % array.dtype.itemsize == 0
               and all(s % array.dtype.itemsize == 0 for s in array.strides))
    if not aligned:
        return backend.copy(array)
    a0, a1 = backend.extent(array)
    o0, o1 = backend.extent(out)
    if a0 < o1 and o0 < a1:     # the byte ranges meet
        exact = (backend.pointer(array) == backend.pointer(out)
                 and array.shape == out.shape and array.strides == out.strides)
        if not exact:
            return backend.copy(array)
    return array
