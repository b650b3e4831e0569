"""CUDA kernels for random draws: Philox on the device, the same numbers as
the reference (:meth:`RandomVariable.perform`) and the C runtime.

The draws whose element ``i`` depends on the state and ``i`` alone --
``uniform`` and ``normal`` of float32 or float64, ``bernoulli`` (and
``binomial`` of one trial) and ``integers``
(:func:`tenure.linkers.c.random.has_c_code` says which) -- are
computed by a kernel from ``include/tenure_philox.h``, the C runtime's own
text: one thread per element of a grid-stride loop, the generator state read
on the device (no copy to the host), the draw written into last call's
buffer when it fits.  A second launch of one thread (:data:`ADVANCE`) then
writes the state after the draw, into the state's own buffer when the node
is in place: ordered after the draw on the stream, so no thread of the draw
reads a state already advanced.

Kernel arguments: the draw's data pointer, the state's, the unused error
pointer of the launch convention, the number of elements, ``standard``, and
the two parameters as 64-bit integers -- a float parameter's bits (the
kernel reads them back as a double), or ``low`` and ``high - low`` for
``integers``.  Parameters that are arrays of more than one element, and the
other draws, are drawn on the host by the reference and copied
(:func:`~tenure.symbolic.ops.random.perform_on_device`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tenure.linkers.c import random as c_random
from tenure.linkers.c import scalar_code as sc
from tenure.linkers.c.runtime import INCLUDE_DIR
from tenure.linkers.cuda.kernel_source import at, host_launcher
from tenure.linkers.cuda.layout import grid_size
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.random import STATE_LENGTH, check_state, perform_on_device

__all__ = ["ADVANCE", "RandomKernel", "compile_draw", "has_cuda_code", "random_kernel"]


@dataclass(frozen=True)
class RandomKernel:
    """A module's worth of CUDA C: the kernel ``name`` (``source`` without
    the prelude)."""

    name: str
    source: str
    uses_status: bool = False


def has_cuda_code(node: Apply) -> bool:
    """Whether a kernel draws ``node`` (with parameters of one element)."""
    return c_random.has_c_code(node)


@lru_cache(maxsize=None)
def _philox() -> str:
    return (INCLUDE_DIR / "tenure_philox.h").read_text()


_PARAMETERS = ["char *tn_p0", "const char *tn_p1", "int *tn_error", "long long tn_n",
               "long long tn_standard", "long long tn_bits0", "long long tn_bits1"]


def _value(dist: str, dtype: np.dtype) -> str:
    """The C expression of element ``tn_i`` of the draw."""
    if dist in ("uniform", "normal"):
        bits = "f32" if dtype == np.float32 else "f64"
        return (f"tn_rng_{dist}_{bits}(tn_key, &tn_cursor, (tn_u64)tn_i, (int)tn_standard, "
                f"tn_x, tn_y)")
    if dist == "bernoulli":
        return "tn_rng_bernoulli(tn_key, &tn_cursor, (tn_u64)tn_i, tn_x)"
    return "tn_rng_integer(tn_key, &tn_cursor, (tn_u64)tn_i, tn_bits0, (tn_u64)tn_bits1)"


@lru_cache(maxsize=None)
def _kernel(dist: str, dtype_name: str) -> RandomKernel:
    dtype = np.dtype(dtype_name)
    t = sc.c_type(dtype)
    name = f"tn_rng_{dist}_{dtype.name}"
    params = ",\n    ".join(_PARAMETERS)
    word = "const unsigned long long"
    source = f"""
{_philox()}
/* {dist} draws of {dtype.name} */
extern "C" __global__ void {name}(
    {params})
{{
    tn_rng_key tn_key;
    tn_rng_cursor tn_cursor;
    const double tn_x = __longlong_as_double(tn_bits0), tn_y = __longlong_as_double(tn_bits1);
    (void)tn_error; (void)tn_x; (void)tn_y; (void)tn_standard;
    tn_key.key0 = {at(word, 'tn_p1', '0')};
    tn_key.key1 = {at(word, 'tn_p1', '8')};
    tn_key.n = {at(word, 'tn_p1', '16')};
    tn_rng_start(&tn_cursor);
    for (long long tn_i = (long long)blockIdx.x * blockDim.x + threadIdx.x; tn_i < tn_n;
         tn_i += (long long)blockDim.x * gridDim.x)
        {at(t, 'tn_p0', f'tn_i * {dtype.itemsize}')} = ({t})({_value(dist, dtype)});
}}
{host_launcher(name, _PARAMETERS, synchronizes=False)}"""
    return RandomKernel(name, source)


def random_kernel(node: Apply) -> RandomKernel:
    """``node``'s kernel (``NotImplementedError`` when it has none)."""
    if not has_cuda_code(node):
        raise NotImplementedError(f"no CUDA code for {node.op}")
    return _kernel(c_random.kind_of(node), np.dtype(node.op.dtype).name)


_ADVANCE_PARAMETERS = ["char *tn_p0", "const char *tn_p1", "int *tn_error"]

#: the state after a draw, [key0, key1, n + 1], written by one thread into
#: the new state's buffer (which may be the state's)
ADVANCE = RandomKernel("tn_rng_advance", f"""
extern "C" __global__ void tn_rng_advance(
    {", ".join(_ADVANCE_PARAMETERS)})
{{
    (void)tn_error;
    if (blockIdx.x == 0 && threadIdx.x == 0) {{
        const unsigned long long k0 = {at('const unsigned long long', 'tn_p1', '0')},
            k1 = {at('const unsigned long long', 'tn_p1', '8')},
            n = {at('const unsigned long long', 'tn_p1', '16')};
        {at('unsigned long long', 'tn_p0', '0')} = k0;
        {at('unsigned long long', 'tn_p0', '8')} = k1;
        {at('unsigned long long', 'tn_p0', '16')} = n + 1;
    }}
}}
{host_launcher("tn_rng_advance", _ADVANCE_PARAMETERS, synchronizes=False)}""")


def _fits(backend, buffer, shape: tuple, dtype) -> bool:
    return (backend.is_array(buffer) and tuple(buffer.shape) == shape
            and buffer.dtype == dtype and buffer.flags.c_contiguous)


def _arguments(node, params) -> list[int] | None:
    """``[standard, a, b]`` of the launch, or None: a parameter of more
    than one element (drawn on the host)."""
    values = [np.asarray(p) for p in params]
    if any(v.size != 1 for v in values):
        return None
    values = [v.reshape(()) for v in values]
    if c_random.kind_of(node) != node.op.dist:      # a binomial of one trial: p only
        values = values[1:]
    if node.op.dist == "integers":
        low, high = (v.astype(np.int64) for v in values)
        span = (high.astype(np.uint64) - low.astype(np.uint64)).view(np.int64)
        bits = [int(low), int(span)]
    else:
        bits = [int(v.astype(np.float64).view(np.int64)) for v in values] + [0]
    return [int(node.op.standard), *bits[:2]]


def compile_draw(node: Apply, context):
    """The device path's ``run`` of a draw node (``DeviceOp.compile``): its
    kernel where it has one (the module built now), else the host draw."""
    backend = context.backend if context is not None else None
    if backend is None or not has_cuda_code(node):
        return perform_on_device
    kernel = random_kernel(node)
    backend.prepare([kernel, ADVANCE])
    first_param = 1 + (node.op.n_size or 0)
    dtype = node.outputs[1].type.numpy_dtype
    state_dtype = np.dtype(np.uint64)

    def run(node, inputs, cells, runtime):
        host = [runtime.to_host(v) if runtime.is_device_array(v) else v for v in inputs[1:]]
        arguments = _arguments(node, host[first_param - 1:])
        if arguments is None:
            return perform_on_device(node, inputs, cells, runtime)
        state = inputs[0]
        check_state(state, node.op.dist, runtime.is_device_array)
        if not state.flags.c_contiguous:
            return perform_on_device(node, inputs, cells, runtime)
        params = [np.asarray(p) for p in host[first_param - 1:]]
        shape = node.op.checked_shape(host[:first_param - 1], params)
        draw = cells[1][0]
        if not _fits(backend, draw, shape, dtype) or backend.may_share_memory(draw, state):
            draw = backend.empty(shape, dtype)
        if node.op.inplace:
            new_state = state
        else:
            new_state = cells[0][0]
            if (not _fits(backend, new_state, (STATE_LENGTH,), state_dtype)
                    or backend.may_share_memory(new_state, state)
                    or backend.may_share_memory(new_state, draw)):
                new_state = backend.empty((STATE_LENGTH,), state_dtype)
        n = int(np.prod(shape, dtype=np.int64))
        if n:
            threads = backend.elementwise_threads
            backend.launch(kernel, kernel.name, grid_size(n, threads, backend.max_blocks),
                           threads, [draw, state], [n, *arguments])
        backend.launch(ADVANCE, ADVANCE.name, 1, 1, [new_state, state], [])
        cells[0][0], cells[1][0] = new_state, draw
    return run
