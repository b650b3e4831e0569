"""How each op without a generated kernel runs on device arrays: the CUDA
linker's allow-list, registered as the ``device`` parts of the dispatch
table (:mod:`.dispatch`), with the placements (the ops that run on the host
whatever their inputs, the ops that create arrays on the device whatever
theirs) and the softmax family's kernel over a cast (:func:`cast_kernel_step`).

A node runs on the device by its kernel (:mod:`.linker`), or by the entry of
its op's class (or of its nearest base) in :data:`DEVICE_OPS`: either the
op's own ``perform`` -- listed only where it is written with NumPy functions
that CuPy arrays take over (``__array_function__``, ``__array_ufunc__``) and
array methods, and never converts to NumPy -- or a device implementation
here, written the same way (so that CuPy's functions, hence cuBLAS for the
products, do the work).
An op in neither place cannot run on the device: compiling names it
(:class:`~.device_linker.UnsupportedOnDevice`), rather than moving its data
through host memory.  :func:`register_device_op` adds an op of a user's.

``host_inputs``: the input positions an entry reads as host values -- shapes,
lengths, indices, fill values -- so that a host value there (a constant, a
``Shape`` of an array) is passed as it is, not uploaded; a device value
there is read by ``int()`` (one synchronisation, as ``x.sum().item()``).

Every entry is checked on the emulated device (tests/linkers/cuda), whose
arrays refuse conversion to NumPy as CuPy's do, against the NumPy executor.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np

from tenure.linkers.cuda.dispatch import (DEVICE, HOST, OwnParts, Placed, kernel_step, lookup,
                                          register_cuda_op)
from tenure.linkers.cuda.index_checks import check_advanced_index, check_basic_index
from tenure.linkers.cuda.random import compile_draw, draw_host_inputs
from tenure.symbolic.grad import StopGradient
from tenure.symbolic.ops.blas import Dot, MatMul, Outer, TensorDot
from tenure.symbolic.ops.composite import Composite, FusedReduce
from tenure.symbolic.ops.creation import Alloc, Arange, ExpandTo, Eye
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.gemm import Gemm
from tenure.symbolic.ops.ifelse import IfElse, LazyIfElse
from tenure.symbolic.ops.indexing import (AdvancedSubtensor, Subtensor, advanced_region_shape,
                                          index_tuple)
from tenure.symbolic.ops.join import Join, Split, SplitGrad, Stack
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, OneHot, Softmax
from tenure.symbolic.ops.nonzero import Nonzero
from tenure.symbolic.ops.random import RandomVariable, perform_on_device
from tenure.symbolic.ops.scan import Scan
from tenure.symbolic.ops.scan_grad import CheckpointedScanGrad, LoopGradient
from tenure.symbolic.ops.reduce import ArgReduce, CumProd, CumSum, Reduce, SumTo, Var
from tenure.symbolic.ops.repeat_counts import RepeatIndices
from tenure.symbolic.ops.shape import DimShuffle, MakeVector, Reshape, Shape, SpecifyShape
from tenure.symbolic.ops.sorting import ArgSort, PermuteAlongAxis, Sort
from tenure.symbolic.ops.subtensor_update import AdvancedIncSubtensor, IncSubtensor
from tenure.symbolic.ops.trace import Trace
from tenure.symbolic.types import TensorType

__all__ = ["DEVICE_OPS", "DeviceOp", "HOST_OPS", "cast_kernel_step", "device_op",
           "register_device_op"]


class DeviceOp(NamedTuple):
    """``run(node, inputs, cells, runtime)`` computes a node on device arrays;
    ``host_inputs(node)`` is the set of input positions read on the host;
    ``compile(node, context)``, when given, is called once per node when the
    graph is compiled, with the dispatch table's
    :class:`~.dispatch.CudaContext`, and returns the ``run`` for that node
    (an op holding an inner graph compiles it there, with
    ``context.linker``)."""

    run: Callable
    host_inputs: Callable = lambda node: frozenset()
    compile: Callable | None = None

    def runner(self, node, context) -> Callable:
        """The ``run`` of ``node``'s steps (see the class doc)."""
        return self.run if self.compile is None else self.compile(node, context)


def _perform(node, inputs, cells, runtime):
    node.op.perform(node, inputs, cells)


def _subtensor(node, inputs, cells, runtime):
    """Basic indexing: a view, once the index is checked on the host (CuPy
    raises in its own words for a zero step or an integer out of range)."""
    x, *scalars = inputs
    check_basic_index(node.op, x.shape, x.dtype, scalars)
    node.op.perform(node, inputs, cells)


def _advanced_subtensor(node, inputs, cells, runtime):
    """Advanced indexing by CuPy, once the index is checked (CuPy wraps
    index arrays out of range around instead of raising: see
    :mod:`.index_checks`)."""
    check_advanced_index(node, inputs, runtime, first=1)
    node.op.perform(node, inputs, cells)


def _all_but_first(node):
    return frozenset(range(1, len(node.inputs)))


def _every_input(node):
    return frozenset(range(len(node.inputs)))


def _index_scalars(node):
    """Basic indexing's inputs after ``x`` and ``v``: all read on the host."""
    return frozenset(range(2, len(node.inputs)))


def _scalar_indices(node, first: int = 1):
    """The index inputs from ``first`` on that are 0-d (slice bounds, integer
    indices: read on the host); index arrays stay on the device."""
    return frozenset(i for i in range(first, len(node.inputs)) if node.inputs[i].ndim == 0)


def _on_the_host(node, inputs, cells, runtime):
    """The op's reference ``perform`` on host copies of the inputs, its
    results copied to the device: for empty inputs (nothing to move) and to
    raise the reference's exact error once a device check has found one."""
    host = [runtime.to_host(v) if runtime.is_device_array(v) else v for v in inputs]
    host_cells = [[None] for _ in node.outputs]
    node.op.perform(node, host, host_cells)
    for cell, (result,) in zip(cells, host_cells):
        cell[0] = runtime.from_host(np.asarray(result))


def _loop_on_device(node, inputs, cells, runtime):
    """A loop or a loop's gradient on the device: ``perform`` over the device
    arrays (its buffers made on their device), its steps compiled by the
    CUDA linker (``state_on_device``); only the loop's length (and where a
    gradient starts) is read on the host."""
    node.op.perform(node, inputs, cells)


def _as_device(result, dtype, runtime):
    """``result`` of a NumPy-style call on device arrays as a device array of
    ``dtype`` (None: its own; some calls give a 0-d result back as a NumPy
    scalar)."""
    if not runtime.is_device_array(result):
        return runtime.from_host(np.asarray(result, dtype=dtype))
    return result if dtype is None or result.dtype == dtype else result.astype(dtype)


def _fits(buffer, shape, dtype, runtime) -> bool:
    return (runtime.is_device_array(buffer) and tuple(buffer.shape) == tuple(shape)
            and buffer.dtype == dtype and buffer.flags.c_contiguous)


def _product(node, inputs, cells, runtime):
    """Dot, MatMul, Outer, TensorDot: CuPy's (cuBLAS) product, into last
    call's buffer when it fits (a borrowed output allocates nothing)."""
    a, b = inputs
    op, dtype, cell = node.op, node.outputs[0].type.numpy_dtype, cells[0]
    if isinstance(op, TensorDot):
        op.check_aligned(tuple(a.shape), tuple(b.shape))
        # Tuples: CuPy takes a 0-d operand only with axes ((), ()), and
        # compares -- the op's lists of nothing would be refused.
        result = np.tensordot(a, b, axes=tuple(map(tuple, op.numpy_axes())))
    elif isinstance(op, Outer):
        result = np.multiply(a.reshape(-1, 1), b.reshape(1, -1))
    else:
        # Matrix by matrix (Dot and MatMul agree there): into the buffer.
        buffer = cell[0]
        if (a.ndim == b.ndim == 2 and np.result_type(a.dtype, b.dtype) == dtype
                and _fits(buffer, (a.shape[0], b.shape[1]), dtype, runtime)
                and not any(runtime.may_share_memory(buffer, x) for x in (a, b))):
            np.matmul(a, b, out=buffer)
            return
        result = np.matmul(a, b) if isinstance(op, MatMul) else np.dot(a, b)
    cell[0] = _as_device(result, dtype, runtime)


def _gemm(node, inputs, cells, runtime):
    """``beta * z + alpha * (x @ y)``, in place into ``z`` when the node may
    destroy it, else into last call's buffer or a new one; by cuBLAS's gemm
    (no temporary) where it applies."""
    z, alpha, x, y, beta = inputs
    dtype = node.outputs[0].type.numpy_dtype
    if x.shape[1] != y.shape[0]:
        raise ValueError(f"{node.op}: x of shape {x.shape} and y of shape {y.shape} are not "
                         f"aligned: x has {x.shape[1]} column(s), y has {y.shape[0]} row(s)")
    shape = np.broadcast_shapes(tuple(z.shape), (x.shape[0], y.shape[1]))
    if node.op.inplace and _fits(z, shape, dtype, runtime):
        target = z
        # x and y are read while z is written: they must not show its memory.
        x = x.copy() if runtime.may_share_memory(x, target) else x
        y = y.copy() if runtime.may_share_memory(y, target) else y
    else:
        target = cells[0][0]
        if not _fits(target, shape, dtype, runtime) or any(
                runtime.may_share_memory(target, v) for v in (z, x, y)):
            target = runtime.empty(shape, dtype)
        target[...] = z
    if not runtime.gemm(x, y, target, alpha, beta):
        product = np.matmul(x, y)
        product *= alpha
        target *= beta
        target += product
    cells[0][0] = target


def _alloc(node, inputs, cells, runtime):
    """The value (a device array: a constant's copy is made once) written
    over an array of the shape the host-read lengths give."""
    value, dims = inputs[0], tuple(int(d) for d in inputs[1:])
    dtype = node.outputs[0].type.numpy_dtype
    cell = cells[0]
    if not _fits(cell[0], dims, dtype, runtime):
        cell[0] = runtime.empty(dims, dtype)
    try:
        cell[0][...] = value
    except ValueError:
        raise ValueError(f"alloc: value of shape {tuple(value.shape)} cannot be broadcast "
                         f"to {dims}") from None


def _arange(node, inputs, cells, runtime):
    start, stop, step = (v.item() for v in inputs)   # NumPy scalars, or device 0-d arrays
    if step == 0:
        _on_the_host(node, inputs, cells, runtime)     # raises the reference's error
    cells[0][0] = runtime.arange(start, stop, step, node.op.dtype)


def _eye(node, inputs, cells, runtime):
    n, m, k = (int(v) for v in inputs)
    out = runtime.empty((n, m), node.op.dtype)
    out[...] = 0
    flat = out.reshape(-1)
    # The k-th diagonal: every (m + 1)-th element from column k (row -k).
    start = k if k >= 0 else -k * m
    count = max(0, min(n, m - k) if k >= 0 else min(n + k, m))
    if count:
        flat[start:start + count * (m + 1):m + 1] = 1
    cells[0][0] = out


def _make_vector(node, inputs, cells, runtime):
    """A vector of device scalars (host ones arrive uploaded, constants once)."""
    dtype = node.outputs[0].type.numpy_dtype
    cells[0][0] = _as_device(np.stack([v.reshape(1) for v in inputs]).reshape(-1), dtype, runtime)


def _running(node, inputs, cells, runtime):
    """CumSum and CumProd (its subclass): the op's NumPy function on device arrays."""
    (x,) = inputs
    op, dtype = node.op, node.outputs[0].type.numpy_dtype
    axis = op.axis
    if axis is None:
        x, axis = x.reshape(-1), 0
    if op.reverse:
        result = np.flip(op.running(np.flip(x, axis), axis=axis, dtype=dtype), axis)
    else:
        result = op.running(x, axis=axis, dtype=dtype)
    cells[0][0] = _as_device(result, dtype, runtime)


def _sum_to(node, inputs, cells, runtime):
    g = node.op.summed_to(inputs[0], tuple(int(d) for d in inputs[1:]))
    cells[0][0] = _as_device(g, node.outputs[0].type.numpy_dtype, runtime)


def _one_hot(node, inputs, cells, runtime):
    indices, n = inputs[0], int(inputs[1])
    if n < 0 or (indices.size and bool(((indices < 0) | (indices >= n)).any())):
        _on_the_host(node, inputs, cells, runtime)     # raises the reference's error
    classes = runtime.arange(0, n, 1, indices.dtype)
    cells[0][0] = (indices[..., None] == classes).astype(node.op.dtype)


def _axis_reduction(node, inputs, cells, runtime):
    """A reduction without a kernel (argmax, argmin, var, a dtype the kernels
    lack): the op's NumPy function on the device array."""
    _reduce_on_device(node, node.op, inputs[0], inputs, cells, runtime)


def _var(node, inputs, cells, runtime):
    """``var`` on the device: CuPy's, except where ``n - ddof <= 0``.  There
    CuPy answers NaN, and NumPy divides the sum of squared deviations by zero:
    inf, or NaN where every value equals the mean (0/0).  The H100 gave NaN
    for ``var([False, True], ddof=2)``, where NumPy gives inf."""
    op, x = node.op, inputs[0]
    axes = op.numpy_axis(x.ndim)
    counted = x.shape if axes is None else [x.shape[a] for a in axes]
    if x.size == 0 or int(np.prod(counted)) - op.ddof > 0:
        _axis_reduction(node, inputs, cells, runtime)
        return
    dtype = node.outputs[0].type.numpy_dtype
    values = x.astype(dtype) if x.dtype.kind in "biu" else x
    deviations = values - values.mean(axis=axes, keepdims=True)
    squares = (deviations * deviations.conj()).real if x.dtype.kind == "c" else deviations ** 2
    total = squares.sum(axis=axes, keepdims=op.keepdims)
    with np.errstate(divide="ignore", invalid="ignore"):   # NumPy warns; the result is the same
        cells[0][0] = _as_device(total / 0, dtype, runtime)


def _reduce_on_device(node, reduce, values, inputs, cells, runtime):
    """``reduce``'s NumPy function over the device array ``values`` into
    ``node``'s output; empty ``values`` (NumPy refuses some reductions of
    nothing, warns for others) run the node on the host: nothing to move."""
    if values.size == 0:
        _on_the_host(node, inputs, cells, runtime)
        return
    dtype = node.outputs[0].type.numpy_dtype
    result = reduce.fn(values, axis=reduce.numpy_axis(values.ndim), keepdims=reduce.keepdims,
                       **reduce.numpy_kwargs(dtype))
    cells[0][0] = _as_device(result, dtype, runtime)


def _elemwise(node, inputs, cells, runtime):
    """An elementwise node without a kernel (a dtype the kernels lack): its
    scalar op's NumPy implementation, whose ufuncs device arrays take over
    (a fused one step by step)."""
    dtype = node.outputs[0].type.numpy_dtype
    cells[0][0] = _scalar_op_on_device(node.op.scalar_op, node.op.impl_inputs(inputs), dtype,
                                       runtime)


def _scalar_op_on_device(scalar_op, inputs: list, dtype, runtime):
    """``scalar_op`` over device arrays (and Python numbers) as a device
    array of ``dtype`` (None: of the dtype it computes): a ``Composite``
    step by step, each step in the dtype the unfused chain has (its NumPy
    implementation works on host arrays only), any other scalar op by its
    ufunc."""
    if not isinstance(scalar_op, Composite):
        return _as_device(scalar_op.impl(*inputs), dtype, runtime)
    probes = [v if isinstance(v, (bool, int, float, complex)) else np.empty((0,), v.dtype)
              for v in inputs]
    dtypes = scalar_op.step_dtypes(probes)
    values = []
    for step_dtype, (op, refs) in zip(dtypes, scalar_op.steps):
        args = [inputs[v] if k == "i" else v if k == "c" else values[v] for k, v in refs]
        values.append(_as_device(op.impl(*args), step_dtype, runtime))
    return _as_device(values[-1], dtype or dtypes[-1], runtime)


def _split_grad(node, inputs, cells, runtime):
    """The gradient of split: the pieces' gradients added into zeros."""
    op = node.op
    n_points = len(op.connected) - 1
    grads = iter(inputs[:op.n_grads])
    points = [int(p) for p in inputs[op.n_grads:op.n_grads + n_points]]
    shape = tuple(int(d) for d in inputs[op.n_grads + n_points:])
    out = runtime.empty(shape, node.outputs[0].type.numpy_dtype)
    out[...] = 0
    bounds = [None] + points + [None]
    lead = (slice(None),) * op.axis
    for k, connected in enumerate(op.connected):
        if connected:
            out[lead + (slice(bounds[k], bounds[k + 1]),)] += next(grads)
    cells[0][0] = out


def _split_grad_host_inputs(node):
    return frozenset(range(node.op.n_grads, len(node.inputs)))


def _permute(node, inputs, cells, runtime):
    g, perm = inputs
    op = node.op
    if tuple(g.shape) != tuple(perm.shape):
        raise ValueError(f"{op}: g has shape {tuple(g.shape)} but perm has shape "
                         f"{tuple(perm.shape)}")
    if op.inverse:
        out = runtime.empty(g.shape, g.dtype)
        np.put_along_axis(out, perm, g, axis=op.axis)
        cells[0][0] = out
    else:
        cells[0][0] = np.take_along_axis(g, perm, axis=op.axis)


def _basic_update(node, inputs, cells, runtime):
    """inc_subtensor / set_subtensor with basic indexing where no region
    kernel does it (a dtype the kernels lack): through a view of the region."""
    op = node.op
    x, v, *values = inputs
    check_basic_index(op.index_op, x.shape, x.dtype, values)
    out = x if op.inplace else x.copy()
    region = out[op.index_op.index(values)]
    op.check_value_shape(tuple(v.shape), tuple(region.shape))
    if runtime.may_share_memory(v, out):
        v = v.copy()      # reading v while writing out must not see the writes
    if op.set_instead_of_inc:
        region[...] = v
    else:
        np.add(region, v, out=region, casting="unsafe")
    cells[0][0] = out


def _fused_reduce(node, inputs, cells, runtime):
    """A fused reduction where no kernel does it (a dtype the kernels lack):
    its elementwise part, then its reduction, by NumPy's functions on the
    device arrays."""
    values = _scalar_op_on_device(node.op.composite, list(inputs), None, runtime)
    _reduce_on_device(node, node.op.reduce_op, values, inputs, cells, runtime)


def _advanced_update(node, inputs, cells, runtime):
    """inc_subtensor / set_subtensor with index arrays, as the reference
    (NumPy's ``add.at``: repeats accumulate; a set keeps the last write),
    through the flat positions of the region: a scatter-add, or, for a set,
    a write of each position's last value (the GPU writes repeats in no
    order)."""
    op = node.op
    check_advanced_index(node, inputs, runtime, first=2)   # before any write
    x, v, *values = inputs
    out = x if op.inplace else x.copy()
    if op.inplace:
        values = [a.copy() if runtime.is_device_array(a) and runtime.may_share_memory(a, out)
                  else a for a in values]
    index = index_tuple(op.pattern, values)
    region_shape = advanced_region_shape(op.pattern, tuple(out.shape), values)
    op.check_value_shape(tuple(v.shape), region_shape)
    if runtime.may_share_memory(v, out):
        v = v.copy()      # reading v while writing out must not see the writes
    v = np.broadcast_to(v.astype(out.dtype, copy=False), region_shape).reshape(-1)
    positions = runtime.arange(0, out.size, 1, np.int64).reshape(out.shape)[index].reshape(-1)
    flat = out.reshape(-1) if out.flags.c_contiguous else out.copy().reshape(-1)
    if op.set_instead_of_inc:
        # Each position's last write: the first one in reversed order.
        last_first, first = np.unique(positions[::-1], return_index=True)
        flat[last_first] = v[::-1][first]
    else:
        runtime.scatter_add(flat, positions, v)
    if not runtime.may_share_memory(flat, out):
        out[...] = flat.reshape(out.shape)
    cells[0][0] = out


def cast_kernel_step(node, backend, context=None):
    """The softmax family's ``device_kernel`` (:mod:`.dispatch`), for
    dtypes without a kernel of their own (integer inputs; float16): the
    input cast on the device to the output's float dtype, or float32 where
    that has no kernel either, the kernel of the same op over the cast, and
    the result cast back when it was computed in float32.  None when no
    kernel computes the node that way."""
    dtype = node.outputs[0].type.numpy_dtype
    for compute in (dtype, np.dtype("float32")):
        float_node = node.op.make_node(TensorType(compute, node.inputs[0].type.shape)())
        if float_node.outputs[0].type.numpy_dtype != compute:
            continue
        step = kernel_step(float_node, backend, context)
        if step is not None and (compute != dtype or node.inputs[0].type.numpy_dtype != dtype):
            return functools.partial(_cast_then_kernel, step, float_node, compute, dtype)
    return None


def _cast_then_kernel(step, float_node, compute, dtype, node, inputs, cells):
    if compute == dtype:
        step(float_node, [inputs[0].astype(compute)], cells)
        return
    computed = [[None]]
    step(float_node, [inputs[0].astype(compute)], computed)
    cells[0][0] = computed[0][0].astype(dtype)


# How each op runs on the device path (.dispatch: one line per op class).
# Views and shape checks: the perform is array-generic.
register_cuda_op(Subtensor, device=DeviceOp(_subtensor, _all_but_first))
register_cuda_op(AdvancedSubtensor, device=DeviceOp(_advanced_subtensor, _scalar_indices))
register_cuda_op(DimShuffle, device=DeviceOp(_perform))
register_cuda_op(Reshape, device=DeviceOp(_perform, _all_but_first))
register_cuda_op(ExpandTo, device=DeviceOp(_perform, _all_but_first))
register_cuda_op(SpecifyShape, device=DeviceOp(_perform, _all_but_first))
register_cuda_op(StopGradient, device=DeviceOp(_perform))
register_cuda_op(Split, device=DeviceOp(_perform, _all_but_first))
register_cuda_op(Join, device=DeviceOp(_perform))
register_cuda_op(Stack, device=DeviceOp(_perform))
register_cuda_op(Sort, device=DeviceOp(_perform))
register_cuda_op(ArgSort, device=DeviceOp(_perform))
register_cuda_op(Trace, device=DeviceOp(_perform))
register_cuda_op(Nonzero, device=DeviceOp(_perform, _all_but_first))   # lengths on the host
# repeat's indices from counts read on the host (the counts decide its length)
register_cuda_op(RepeatIndices, device=DeviceOp(_on_the_host, _every_input))
# Device implementations.
register_cuda_op(Dot, device=DeviceOp(_product))
register_cuda_op(MatMul, device=DeviceOp(_product))
register_cuda_op(TensorDot, device=DeviceOp(_product))
register_cuda_op(Outer, device=DeviceOp(_product))
register_cuda_op(Gemm, device=DeviceOp(_gemm, lambda node: frozenset((1, 4))))
register_cuda_op(MakeVector, device=DeviceOp(_make_vector))
register_cuda_op(Var, device=DeviceOp(_var))
register_cuda_op(Reduce, device=DeviceOp(_axis_reduction))
register_cuda_op(Elemwise, device=DeviceOp(_elemwise))
register_cuda_op(CumSum, device=DeviceOp(_running))
register_cuda_op(CumProd, device=DeviceOp(_running))
register_cuda_op(SumTo, device=DeviceOp(_sum_to, _all_but_first))
register_cuda_op(OneHot, device=DeviceOp(_one_hot, lambda node: frozenset((1,))))
register_cuda_op(ArgReduce, device=DeviceOp(_axis_reduction))
register_cuda_op(SplitGrad, device=DeviceOp(_split_grad, _split_grad_host_inputs))
register_cuda_op(PermuteAlongAxis, device=DeviceOp(_permute))
register_cuda_op(AdvancedIncSubtensor,
                 device=DeviceOp(_advanced_update, lambda node: _scalar_indices(node, 2)))
register_cuda_op(IncSubtensor, device=DeviceOp(_basic_update, _index_scalars))
register_cuda_op(FusedReduce, device=DeviceOp(_fused_reduce))
# a Philox kernel (.random) where the draw has one, else drawn on the host
register_cuda_op(RandomVariable,
                 device=DeviceOp(perform_on_device, draw_host_inputs, compile=compile_draw))
# A loop runs on the device arrays, its step compiled by the cuda linker
# (state_on_device); only its length (and a gradient's start) is read on the host.
register_cuda_op(Scan, device=DeviceOp(_loop_on_device, lambda node: frozenset({0})))
register_cuda_op(CheckpointedScanGrad, device=DeviceOp(_loop_on_device,
                                                       lambda node: frozenset({0, 1})))
register_cuda_op(LoopGradient, device=DeviceOp(_loop_on_device, lambda node: frozenset({0, 1})))
# A lazy ifelse runs its taken branch on the device arrays, compiled by the
# cuda linker (state_on_device); only the condition is read on the host.
register_cuda_op(LazyIfElse, device=DeviceOp(_loop_on_device, lambda node: frozenset({0})))
# ifelse's graph form (compiled without the lazy_ifelse rewrite): a copy of
# the chosen values, on the device; the condition on the host
register_cuda_op(IfElse, device=DeviceOp(_perform, lambda node: frozenset({0})))
# Ops that create arrays: on the device even from host inputs (a shape).
register_cuda_op(Alloc, device=DeviceOp(_alloc, _all_but_first), placement=DEVICE)
register_cuda_op(Arange, device=DeviceOp(_arange, _every_input), placement=DEVICE)
register_cuda_op(Eye, device=DeviceOp(_eye, _every_input), placement=DEVICE)
# Ops that only read their inputs' shapes: on the host whatever their inputs
# (their results are host values).
register_cuda_op(Shape, placement=HOST)
# The softmax family has kernels for float32 and float64 (.launch); other
# dtypes run the kernel over a cast.
register_cuda_op(Softmax, device_kernel=cast_kernel_step)
register_cuda_op(LogSoftmax, device_kernel=cast_kernel_step)
register_cuda_op(LogSumExp, device_kernel=cast_kernel_step)

#: op class -> how its nodes run on device arrays (see the module doc): a
#: live view of the ``device`` parts of the dispatch table (:mod:`.dispatch`)
DEVICE_OPS = OwnParts("device")
#: the ops that run on the host whatever their inputs are (placement HOST):
#: a live view of the dispatch table
HOST_OPS = Placed(HOST)


def register_device_op(op_class: type, run: Callable | None = None,
                       host_inputs: Callable | None = None) -> None:
    """Let the cuda linker run the nodes of ``op_class`` (an op of your own,
    and its subclasses that register nothing of their own) on the device:
    by ``run(node, inputs, cells, runtime)``, or, when None, by the op's
    ``perform`` -- which must then be written with NumPy functions and array
    methods that device arrays take over (CuPy's refuse conversion to NumPy:
    a perform that converts fails on the device, never silently).
    ``host_inputs(node)``: the input positions read as host values (shapes,
    indices).  The ``device`` part of the op's entry in the dispatch table
    (:func:`.dispatch.register_cuda_op`)."""
    entry = DeviceOp(run or _perform)
    if host_inputs is not None:
        entry = entry._replace(host_inputs=host_inputs)
    register_cuda_op(op_class, device=entry)


def device_op(node) -> DeviceOp | None:
    """The entry that runs ``node`` on the device (its op class's, or its
    nearest base's), or None."""
    return lookup(type(node.op)).device
