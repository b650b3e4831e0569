"""The host side of a launch, for any place kernels run: the device (CuPy
arrays) or the host (NumPy arrays, in CI).  What differs between the
two places is a :class:`Backend`.

:func:`run_elemwise` does what the elementwise contract (:mod:`.elemwise`)
leaves to the caller: it picks the output (the given one, the destroyed
input of an in-place node when that has the output's shape, or a new
array), copies an input that overlaps the output other than exactly (a
shifted or reversed view of it) or is not aligned, works out the
:class:`~.layout.Layout`, launches, and turns the kernel's error bits into
the exception NumPy raises.

:func:`run_reduce` does the same for a reduction (:mod:`.reduce`): it
refuses ``max``/``min`` of nothing as NumPy does, warns for ``mean`` of
nothing, copies inputs that overlap the output or are unaligned, and picks
a strategy: a block per output for long reductions or few outputs, a thread
per output otherwise.  :func:`run_nnet`: softmax, log_softmax, logsumexp
(:mod:`.nnet`), a block per row.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import numpy as np

from tenure.linkers.c.cgen import input_label
from tenure.linkers.cuda import elemwise as cuda_elemwise
from tenure.linkers.cuda import nnet as cuda_nnet
from tenure.linkers.cuda import reduce as cuda_reduce
from tenure.linkers.cuda.dispatch import KernelFamily, register_cuda_op
from tenure.linkers.cuda.elemwise import ElemwiseKernel
from tenure.linkers.cuda.layout import grid_size, launch_layout, reduction_layout, row_layout
from tenure.linkers.cuda.nnet import NnetKernel
from tenure.linkers.cuda.reduce import ReduceKernel
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.ops.reduce import Reduce, reduced_shape

__all__ = ["Backend", "ERROR_MESSAGES", "pick_strategy", "run_elemwise", "run_nnet",
           "run_reduce"]

#: the error bits of scalar_errors.h, and what each means (NumPy's words)
ERROR_MESSAGES = {1: "integers to negative integer powers are not allowed"}


class Backend(Protocol):
    """Where kernels run: arrays of its own kind, and launches over them.
    ``elementwise_threads``: threads per block of elementwise launches;
    ``reduction_threads``: of ``block`` reductions (a power of two, at most
    :data:`.reduce.MAX_THREADS`); ``max_blocks``: blocks per launch at most."""

    elementwise_threads: int
    reduction_threads: int
    max_blocks: int

    def is_array(self, value) -> bool:
        """Whether ``value`` is an array of this backend's kind."""

    def empty(self, shape: tuple, dtype: np.dtype): ...

    def copy(self, array): ...

    def may_share_memory(self, a, b) -> bool:
        """Whether the bytes ``a`` and ``b`` span meet (NumPy's bounds test)."""

    def pointer(self, array) -> int: ...

    def writeable(self, array) -> bool:
        """Whether tenure may write ``array`` (a read-only NumPy view may not)."""

    def from_host(self, array: np.ndarray):
        """``array`` as an array of this backend (a copy on a device)."""

    def to_host(self, array) -> np.ndarray:
        """A NumPy array holding ``array``'s values."""

    def launch(self, kernel, variant: str, grid: int, block: int, arrays: list,
               integers: list[int]) -> int:
        """Run ``kernel``'s function ``variant`` on ``grid`` blocks of
        ``block`` threads over ``arrays`` (output first), then the error
        pointer and ``integers``; the error bits it set (0, without reading
        them back, when ``kernel.uses_status`` is false)."""


def run_elemwise(backend: Backend, kernel: ElemwiseKernel, node, inputs: list, out=None,
                 spare=None):
    """``node`` computed by ``kernel`` over ``inputs`` (all the node's inputs
    by position; anything at a Python-number position), into ``out`` or the
    output :func:`run_elemwise` picks (see the module doc); returns it.
    ``spare``: a buffer to write into instead of allocating when it has the
    output's shape and dtype (an executor's kept or handed-on buffer)."""
    arrays = [inputs[i] for i in kernel.read]
    _check_inputs(node, kernel.read, arrays)
    shape = _broadcast_shape(node, kernel.read, arrays)
    if out is None:
        out = _output(backend, kernel, node, inputs, shape, spare)
    elif out.dtype != kernel.dtypes[0]:
        raise TypeError(f"output 0: expected dtype {kernel.dtypes[0]}, got {out.dtype}")
    arrays = [_separate(backend, a, out) for a in arrays]
    try:
        layout = launch_layout(out.shape, [(a.shape, a.strides) for a in [out, *arrays]])
    except ValueError as exc:
        raise ValueError(f"{node.op}: {exc}") from None
    if layout.n == 0:
        return out
    if layout.ndim > kernel.max_ndim:     # (an executor's mistake, not the caller's)
        raise ValueError(f"{node.op}: a launch over {layout.ndim} axes; its kernels take at "
                         f"most {kernel.max_ndim}")
    threads = backend.elementwise_threads
    grid = grid_size(layout.n, threads, backend.max_blocks)
    status = backend.launch(kernel, cuda_elemwise.variant_name(kernel.name, layout.ndim), grid,
                            threads, [out, *arrays], layout.arguments())
    _raise_for(status, node)
    return out


def run_reduce(backend: Backend, kernel: ReduceKernel, node, inputs: list, out=None,
               spare=None, strategy: str | None = None):
    """The reduction ``node`` computed by ``kernel`` over ``inputs`` into
    ``out`` (``spare`` or a new array when None, as for :func:`run_elemwise`);
    ``strategy``: ``"block"`` or ``"thread"`` (None: :func:`pick_strategy`'s)."""
    _check_inputs(node, range(len(inputs)), inputs)
    op = node.op
    full = _broadcast_shape(node, range(len(inputs)), inputs)
    axes, keepdims = tuple(op.axis), op.keepdims
    # max/min of nothing: the op's own refusal (NumPy's words)
    (op if isinstance(op, Reduce) else op.reduce_op).check_shapes(node, [full], None)
    if kernel.fn == "mean" and 0 in [full[a] for a in axes]:
        warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=2)
    shape = reduced_shape(full, axes, keepdims)
    if out is None:
        out = _spare_or_new(backend, spare, shape, kernel.dtypes[0])
    elif out.dtype != kernel.dtypes[0]:
        raise TypeError(f"output 0: expected dtype {kernel.dtypes[0]}, got {out.dtype}")
    inputs = [_separate(backend, a, out) for a in inputs]
    layout = reduction_layout(full, axes, keepdims, (out.shape, out.strides),
                              [(a.shape, a.strides) for a in inputs])
    if layout.n_out == 0:
        return out
    strategy = strategy or pick_strategy(layout.n_out, layout.n_red, backend.reduction_threads)
    if strategy == "block":
        threads = backend.reduction_threads
        grid = grid_size(layout.n_out, 1, backend.max_blocks)
    else:
        threads = backend.elementwise_threads
        grid = grid_size(layout.n_out, threads, backend.max_blocks)
    variant = cuda_reduce.variant_name(kernel.name, strategy, len(layout.kept),
                                       len(layout.reduced))
    status = backend.launch(kernel, variant, grid, threads, [out, *inputs], layout.arguments())
    _raise_for(status, node)
    return out


def run_nnet(backend: Backend, kernel: NnetKernel, node, inputs: list, out=None,
             spare=None):
    """Softmax, log_softmax or logsumexp (``node``) of ``inputs[0]`` by
    ``kernel`` into ``out`` (``spare`` or a new array when None, as for
    :func:`run_elemwise`; for softmax ``out`` may be the input itself); a
    block per row."""
    _check_inputs(node, [0], inputs)
    (x,) = inputs
    axes = tuple(node.op.axis)
    keep_shape = reduced_shape(x.shape, axes, True)
    if kernel.kind == "logsumexp":
        shape = reduced_shape(x.shape, axes, node.op.keepdims)
    else:
        shape = tuple(x.shape)
    if out is None:
        out = _spare_or_new(backend, spare, shape, kernel.dtypes[0])
    elif out.dtype != kernel.dtypes[0]:
        raise TypeError(f"output 0: expected dtype {kernel.dtypes[0]}, got {out.dtype}")
    elif tuple(out.shape) != shape:
        raise ValueError(f"output 0: expected shape {shape}, got {tuple(out.shape)}")
    x = _separate(backend, x, out)
    out_view = (out.shape, out.strides)
    if kernel.kind == "logsumexp" and not node.op.keepdims:   # the reduced axes, of length 1
        strides = iter(out.strides)
        out_view = (keep_shape, tuple(0 if k in axes else next(strides)
                                      for k in range(x.ndim)))
    layout = row_layout(x.shape, axes, [out_view, (x.shape, x.strides)])
    if layout.n_out == 0 or (layout.n_red == 0 and kernel.kind != "logsumexp"):
        return out
    variant = cuda_nnet.variant_name(kernel.name, len(layout.kept), len(layout.reduced))
    grid = grid_size(layout.n_out, 1, backend.max_blocks)
    backend.launch(kernel, variant, grid, backend.reduction_threads, [out, x],
                   layout.arguments())
    return out


def pick_strategy(n_out: int, n_red: int, threads: int) -> str:
    """``"block"`` (a block per output) for reductions at least a block long,
    or for longer than one element when there are too few outputs to keep a
    device busy with a thread each; else ``"thread"``."""
    if n_red >= threads or (n_red > 1 and n_out < 4096):
        return "block"
    return "thread"


def _raise_for(status: int, node) -> None:
    """The exception for a kernel's error bits (none for 0)."""
    if status:
        messages = [m for bit, m in ERROR_MESSAGES.items() if status & bit]
        raise ValueError(f"{node.op}: {'; '.join(messages) or f'error bits {status}'}")


def _check_inputs(node, positions, arrays) -> None:
    """``TypeError`` naming the first of the node's inputs at ``positions``
    (``arrays``) whose ndim or dtype is not its variable's."""
    for i, a in zip(positions, arrays):
        want = node.inputs[i].type
        if a.dtype != want.dtype or a.ndim != want.ndim:
            raise TypeError(f"{input_label(node, i)}: expected a {want.ndim}-d array of dtype "
                            f"{want.dtype}, got {a.ndim}-d {a.dtype}")


def _broadcast_shape(node, positions, arrays) -> tuple:
    """The shape the node's inputs at ``positions`` (``arrays``) broadcast
    to; ``ValueError`` naming each input and its shape when they do not."""
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
    except ValueError:
        shapes = ", ".join(f"{input_label(node, i)} of shape {tuple(a.shape)}"
                           for i, a in zip(positions, arrays))
        raise ValueError(f"{node.op}: {shapes} do not broadcast together") from None


def _output(backend: Backend, kernel: ElemwiseKernel, node, inputs: list, shape: tuple,
            spare):
    """The destroyed input when the node is in place and it holds the
    output's shape and dtype, else ``spare`` when it does, else a new array."""
    destroyed = next(iter(getattr(node.op, "destroy_map", {}).get(0, [])), None)
    if destroyed is not None:
        target = inputs[destroyed]
        if tuple(target.shape) == tuple(shape) and target.dtype == kernel.dtypes[0]:
            return target
    return _spare_or_new(backend, spare, shape, kernel.dtypes[0])


def _spare_or_new(backend: Backend, spare, shape: tuple, dtype):
    """``spare`` when it has ``shape`` and ``dtype``, else a new array."""
    if spare is not None and tuple(spare.shape) == tuple(shape) and spare.dtype == dtype:
        return spare
    return backend.empty(shape, dtype)


def _separate(backend: Backend, array, out):
    """``array``, or a copy of it when the kernel cannot read it as it is:
    it overlaps ``out`` but is not ``out`` itself (same start and strides),
    or it is not aligned to its itemsize."""
    aligned = (backend.pointer(array) % array.dtype.itemsize == 0
               and all(s % array.dtype.itemsize == 0 for s in array.strides))
    if not aligned:
        return backend.copy(array)
    if backend.may_share_memory(array, out):
        exact = (backend.pointer(array) == backend.pointer(out)
                 and array.shape == out.shape and array.strides == out.strides)
        if not exact:
            return backend.copy(array)
    return array


# How the CUDA linker runs these ops (.dispatch): each kernel family's builder
# with its launcher -- here, where both are seen (see .dispatch's doc).
_ELEMWISE = KernelFamily(cuda_elemwise.elemwise_kernel, run_elemwise, cuda_elemwise.has_cuda_code)
_REDUCE = KernelFamily(cuda_reduce.reduce_kernel, run_reduce, cuda_reduce.has_cuda_code)
_NNET = KernelFamily(cuda_nnet.nnet_kernel, run_nnet, cuda_nnet.has_cuda_code)
register_cuda_op(Elemwise, kernel=_ELEMWISE)
register_cuda_op(Reduce, kernel=_REDUCE)
register_cuda_op(FusedReduce, kernel=_REDUCE)
register_cuda_op(Softmax, kernel=_NNET)
register_cuda_op(LogSoftmax, kernel=_NNET)
register_cuda_op(LogSumExp, kernel=_NNET)
