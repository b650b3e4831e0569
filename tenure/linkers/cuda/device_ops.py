"""How each op without a generated kernel runs on device arrays: the CUDA
linker's allow-list.

A node runs on the device by its kernel (:mod:`.linker`), or by the entry of
its op's class in :data:`DEVICE_OPS`: either the op's own ``perform`` --
listed only where it is written with NumPy functions that CuPy arrays take
over (``__array_function__``, ``__array_ufunc__``) and array methods, and
never converts to NumPy -- or a device implementation here, written the same
way (so that CuPy's functions, hence cuBLAS for the products, do the work).
An op in neither place cannot run on the device: compiling names it
(:func:`unsupported_nodes`), rather than moving its data through host memory.

``host_inputs``: the input positions an entry reads as host values -- shapes,
lengths, indices, fill values -- so that a host value there (a constant, a
``Shape`` of an array) is passed as it is, not uploaded; a device value
there is read by ``int()`` (one synchronisation, as ``x.sum().item()``).

Every entry is checked on the emulated device (tests/linkers/cuda), whose
arrays refuse conversion to NumPy as CuPy's do, against the NumPy executor.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from tenure.symbolic.grad import StopGradient
from tenure.symbolic.ops.blas import Dot, MatMul, Outer, TensorDot
from tenure.symbolic.ops.creation import Alloc, Arange, Eye
from tenure.symbolic.ops.gemm import Gemm
from tenure.symbolic.ops.indexing import AdvancedSubtensor, Subtensor
from tenure.symbolic.ops.join import Join, Split, Stack
from tenure.symbolic.ops.nnet import OneHot
from tenure.symbolic.ops.reduce import CumSum, SumTo, Var
from tenure.symbolic.ops.shape import DimShuffle, MakeVector, Reshape, Shape, SpecifyShape
from tenure.symbolic.ops.sorting import ArgSort, Sort

__all__ = ["DEVICE_OPS", "DeviceOp", "HOST_OPS", "device_op", "unsupported_nodes"]


class DeviceOp(NamedTuple):
    """``run(node, inputs, cells, runtime)`` computes a node on device arrays;
    ``host_inputs(node)`` is the set of input positions read on the host."""

    run: Callable
    host_inputs: Callable = lambda node: frozenset()


def _perform(node, inputs, cells, runtime):
    node.op.perform(node, inputs, cells)


def _all_but_first(node):
    return frozenset(range(1, len(node.inputs)))


def _every_input(node):
    return frozenset(range(len(node.inputs)))


def _as_device(result, dtype, runtime):
    """``result`` of a NumPy-style call on device arrays as a device array of
    ``dtype`` (some calls give a 0-d result back as a NumPy scalar)."""
    if not runtime.is_device_array(result):
        return runtime.from_host(np.asarray(result, dtype=dtype))
    return result if result.dtype == dtype else result.astype(dtype)


def _fits(buffer, shape, dtype, runtime) -> bool:
    return (runtime.is_device_array(buffer) and tuple(buffer.shape) == tuple(shape)
            and buffer.dtype == dtype and buffer.flags.c_contiguous)


def _product(node, inputs, cells, runtime):
    """Dot, MatMul, Outer, TensorDot: CuPy's (cuBLAS) product, into last
    call's buffer when it fits (a borrowed output allocates nothing)."""
    a, b = inputs
    op, dtype, cell = node.op, node.outputs[0].type.numpy_dtype, cells[0]
    if isinstance(op, TensorDot):
        result = np.tensordot(a, b, axes=op._numpy_axes())
    elif isinstance(op, Outer):
        result = np.multiply(a.reshape(-1, 1), b.reshape(1, -1))
    elif a.ndim >= 1 and b.ndim >= 1 and a.ndim + b.ndim > 2:
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + a.shape[-2:-1] + b.shape[-1:] \
            if isinstance(op, MatMul) or (a.ndim <= 2 and b.ndim <= 2) else None
        if a.ndim == 1:
            shape = None
        buffer = cell[0]
        if (shape is not None and b.ndim >= 2 and np.result_type(a.dtype, b.dtype) == dtype
                and _fits(buffer, shape, dtype, runtime)
                and not any(runtime.may_share_memory(buffer, x) for x in (a, b))):
            np.matmul(a, b, out=buffer)
            return
        result = np.matmul(a, b) if isinstance(op, MatMul) else np.dot(a, b)
    else:
        result = np.dot(a, b)
    cell[0] = _as_device(result, dtype, runtime)


def _gemm(node, inputs, cells, runtime):
    """``beta * z + alpha * (x @ y)``, in place into ``z`` when the node may
    destroy it, else into last call's buffer or a new one."""
    z, alpha, x, y, beta = inputs
    dtype = node.outputs[0].type.numpy_dtype
    if x.shape[1] != y.shape[0]:
        raise ValueError(f"{node.op}: x of shape {x.shape} and y of shape {y.shape} are not "
                         f"aligned: x has {x.shape[1]} column(s), y has {y.shape[0]} row(s)")
    shape = np.broadcast_shapes(tuple(z.shape), (x.shape[0], y.shape[1]))
    product = np.matmul(x, y)           # before z is written: x or y may show z's memory
    if node.op.inplace and _fits(z, shape, dtype, runtime):
        target = z
    else:
        target = cells[0][0]
        if not _fits(target, shape, dtype, runtime) or any(
                runtime.may_share_memory(target, v) for v in (z, x, y)):
            target = runtime.empty(shape, dtype)
        target[...] = z
    target *= beta
    product *= alpha
    target += product
    cells[0][0] = target


def _alloc(node, inputs, cells, runtime):
    value, dims = inputs[0], tuple(int(d) for d in inputs[1:])
    dtype = node.outputs[0].type.numpy_dtype
    cell = cells[0]
    if not _fits(cell[0], dims, dtype, runtime):
        cell[0] = runtime.empty(dims, dtype)
    if isinstance(value, np.ndarray):
        if value.ndim:
            value = runtime.from_host(value)
        else:
            value = value[()]           # a host scalar: written without a transfer
    try:
        cell[0][...] = value
    except ValueError:
        raise ValueError(f"alloc: value of shape {tuple(np.shape(value))} cannot be broadcast "
                         f"to {dims}") from None


def _arange(node, inputs, cells, runtime):
    start, stop, step = (v[()] if isinstance(v, np.ndarray) else v.item() for v in inputs)
    if step == 0:
        raise ValueError("arange: step must not be zero")
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
    dtype = node.outputs[0].type.numpy_dtype
    items = [v if runtime.is_device_array(v) else runtime.from_host(np.asarray(v))
             for v in inputs]
    cells[0][0] = _as_device(np.stack([v.reshape(1) for v in items]).reshape(-1), dtype, runtime)


def _var(node, inputs, cells, runtime):
    (x,) = inputs
    op, dtype = node.op, node.outputs[0].type.numpy_dtype
    result = np.var(x, axis=op._numpy_axis(x.ndim), keepdims=op.keepdims, ddof=op.ddof)
    cells[0][0] = _as_device(result, dtype, runtime)


def _cumsum(node, inputs, cells, runtime):
    (x,) = inputs
    op, dtype = node.op, node.outputs[0].type.numpy_dtype
    axis = op.axis
    if axis is None:
        x, axis = x.reshape(-1), 0
    if op.reverse:
        result = np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=dtype), axis)
    else:
        result = np.cumsum(x, axis=axis, dtype=dtype)
    cells[0][0] = _as_device(result, dtype, runtime)


def _sum_to(node, inputs, cells, runtime):
    g, target = inputs[0], tuple(int(d) for d in inputs[1:])
    lead = g.ndim - len(target)
    if lead:
        g = np.sum(g, axis=tuple(range(lead)))
    axes = tuple(i for i, (have, want) in enumerate(zip(g.shape, target))
                 if want == 1 and have != 1)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    if tuple(g.shape) != target:
        raise ValueError(f"sum_to: an array of shape {tuple(inputs[0].shape)} does not "
                         f"broadcast from {target}")
    cells[0][0] = _as_device(g, node.outputs[0].type.numpy_dtype, runtime)


def _one_hot(node, inputs, cells, runtime):
    indices, n = inputs[0], int(inputs[1])
    if n < 0:
        raise ValueError(f"one_hot: num_classes must be non-negative, got {n}")
    if indices.size and bool(((indices < 0) | (indices >= n)).any()):
        raise ValueError(f"one_hot: an index is out of range for num_classes={n}: expected "
                         f"0 <= index < {n}")
    classes = runtime.arange(0, n, 1, indices.dtype)
    cells[0][0] = (indices[..., None] == classes).astype(node.op.dtype)


#: op class -> how its nodes run on device arrays (see the module doc)
DEVICE_OPS: dict[type, DeviceOp] = {
    # views and shape checks: the perform is array-generic
    Subtensor: DeviceOp(_perform, _all_but_first),
    AdvancedSubtensor: DeviceOp(_perform),
    DimShuffle: DeviceOp(_perform),
    Reshape: DeviceOp(_perform, _all_but_first),
    SpecifyShape: DeviceOp(_perform, _all_but_first),
    StopGradient: DeviceOp(_perform),
    Split: DeviceOp(_perform, _all_but_first),
    Join: DeviceOp(_perform),
    Stack: DeviceOp(_perform),
    Sort: DeviceOp(_perform),
    ArgSort: DeviceOp(_perform),
    # device implementations
    Dot: DeviceOp(_product),
    MatMul: DeviceOp(_product),
    TensorDot: DeviceOp(_product),
    Outer: DeviceOp(_product),
    Gemm: DeviceOp(_gemm, lambda node: frozenset((1, 4))),
    Alloc: DeviceOp(_alloc, _every_input),
    Arange: DeviceOp(_arange, _every_input),
    Eye: DeviceOp(_eye, _every_input),
    MakeVector: DeviceOp(_make_vector, _every_input),
    Var: DeviceOp(_var),
    CumSum: DeviceOp(_cumsum),
    SumTo: DeviceOp(_sum_to, _all_but_first),
    OneHot: DeviceOp(_one_hot, lambda node: frozenset((1,))),
}

#: ops that only read their inputs' shapes: they run on the host whatever
#: their inputs are (their results are host values)
HOST_OPS = (Shape,)


def device_op(node) -> DeviceOp | None:
    """The entry that runs ``node`` on the device, or None."""
    return DEVICE_OPS.get(type(node.op))


def unsupported_nodes(nodes, has_kernel) -> list:
    """The nodes among ``nodes`` that can run neither by a kernel
    (``has_kernel(node)``) nor by an entry of :data:`DEVICE_OPS`."""
    return [n for n in nodes if not has_kernel(n) and device_op(n) is None]
