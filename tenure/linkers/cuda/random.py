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

Parameters come two ways (:func:`draw_host_inputs` says which):

- *scalar constants*, read on the host: the kernel of
  :func:`random_kernel` takes the draw's data pointer, the state's, the
  unused error pointer of the launch convention, the number of elements,
  ``standard``, and the two parameters as 64-bit integers -- a float
  parameter's bits (the kernel reads them back as a double), or ``low`` and
  ``high - low`` for ``integers``.  Their domains were checked when the
  graph was built.
- *anything else* (an array, a value computed on the device: an RBM's
  ``binomial(1, sigmoid(h))``, a VAE's ``normal(mu, sigma)``) stays on the
  device: the kernel of :func:`array_kernel` reads element ``i``'s
  parameters through their byte strides, broadcast to the draw's shape
  (:func:`~.layout.launch_layout`, at most :data:`MAX_NDIM` axes once
  merged), converted as the C runtime converts them (to double, to int64 for
  ``integers``).  It is launched twice: first to check every parameter's
  domain (a launch whose error bit is read back, one synchronisation), then,
  when none is out of it, to draw -- so a bad parameter raises, in the
  reference's words (its check rerun on a host copy of the parameters),
  before the draw or the state is written.

The other draws (``binomial`` of other ``n``, ``choice``, ``permutation``),
float16 draws and parameters, an empty draw and a broadcast over more axes
are drawn on the host by the reference and copied
(:func:`~tenure.symbolic.ops.random.perform_on_device`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from tenure.linkers.c import random as c_random
from tenure.linkers.c import scalar_code as sc
from tenure.linkers.c.runtime import INCLUDE_DIR
from tenure.linkers.cuda.kernel_source import add_offsets, at, host_launcher
from tenure.linkers.cuda.layout import grid_size, launch_layout
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.random import STATE_LENGTH, check_state, perform_on_device
from tenure.symbolic.variable import TensorConstant

__all__ = ["ADVANCE", "MAX_NDIM", "RandomKernel", "array_kernel", "compile_draw",
           "draw_host_inputs", "has_cuda_code", "random_kernel"]

#: axes (after merging) an array-parameter launch takes; more go to the host
MAX_NDIM = 4


@dataclass(frozen=True)
class RandomKernel:
    """A module's worth of CUDA C: the kernel ``name`` (``source`` without
    the prelude)."""

    name: str
    source: str
    uses_status: bool = False


def has_cuda_code(node: Apply) -> bool:
    """Whether a kernel draws ``node``: a counter-indexed draw the C runtime
    draws.  The sequential ones (binomial, choice, permutation: each number
    depends on those before it) are drawn on the host."""
    return c_random.has_c_code(node) and c_random.kind_of(node) not in c_random.SEQUENTIAL


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


def _parameter_positions(node: Apply) -> list[int]:
    """The input positions of the parameters a kernel reads (``n`` of a
    binomial of one trial is not read)."""
    first = 1 + (node.op.n_size or 0)
    positions = list(range(first, len(node.inputs)))
    return positions[1:] if c_random.kind_of(node) != node.op.dist else positions


def _scalar_constant(variable) -> bool:
    return isinstance(variable, TensorConstant) and np.size(variable.data) == 1


def draw_host_inputs(node: Apply) -> frozenset:
    """The inputs the draw reads on the host: the size's lengths, and the
    parameters when the draw has no kernel or they are all scalar
    constants (the scalar kernel's arguments); other parameters stay on the
    device, where the array kernel reads them (a constant is uploaded once)."""
    sizes = range(1, 1 + (node.op.n_size or 0))
    if has_cuda_code(node) and not all(_scalar_constant(node.inputs[i])
                                       for i in _parameter_positions(node)):
        return frozenset(sizes)
    return frozenset(range(1, len(node.inputs)))


def _readable(dtype: np.dtype) -> bool:
    """Whether an array kernel reads a parameter of ``dtype`` (any with C
    code but float16, which the runtime's prelude does not convert)."""
    return dtype.name in sc.C_TYPES and dtype != np.float16


#: whether element ``i``'s parameters are in their domain, per draw (the
#: reference's checks: ``x - x == 0`` is ``isfinite``, false for inf and NaN)
_IN_DOMAIN = {
    "uniform": "tn_x - tn_x == 0 && tn_y - tn_y == 0 && tn_y >= tn_x",
    "normal": "tn_x - tn_x == 0 && tn_y - tn_y == 0 && tn_y >= 0",
    "bernoulli": "tn_x >= 0 && tn_x <= 1",
    "integers": "tn_bits1_high > tn_bits0",
}


def _read_parameters(kind: str, param_dtypes: tuple[np.dtype, ...]) -> list[str]:
    """Statements reading element ``i``'s parameters (at offsets ``tn_o2``,
    ``tn_o3``) as ``_value`` and :data:`_IN_DOMAIN` name them: doubles
    ``tn_x``, ``tn_y``, or for ``integers`` ``low`` and ``high - low`` as
    ``tn_bits0``, ``tn_bits1`` (``tn_bits1_high``: ``high``)."""
    read = [f"({'long long' if kind == 'integers' else 'double'})"
            f"{at('const ' + sc.c_type(d), f'tn_p{2 + j}', f'tn_o{2 + j}')}"
            for j, d in enumerate(param_dtypes)]
    if kind == "integers":
        return [f"const long long tn_bits0 = {read[0]}, tn_bits1_high = {read[1]};",
                "const long long tn_bits1 = (long long)((unsigned long long)tn_bits1_high"
                " - (unsigned long long)tn_bits0);"]
    y = read[1] if len(read) > 1 else "0.0"
    return [f"const double tn_x = {read[0]}, tn_y = {y};"]


def _array_parameters(n_params: int, ndim: int) -> list[str]:
    pointers = ["char *tn_p0", "const char *tn_p1"]
    pointers += [f"const char *tn_p{2 + j}" for j in range(n_params)]
    sizes = [f"long long tn_d{k}" for k in range(ndim)]
    strides = [f"long long tn_s{2 + j}_{k}" for j in range(n_params) for k in range(ndim)]
    return pointers + ["int *tn_error", "long long tn_n", "long long tn_check",
                       "long long tn_standard"] + sizes + strides


def _array_variant(name: str, kind: str, dtype: np.dtype, param_dtypes: tuple,
                   ndim: int) -> str:
    """The kernel over ``ndim`` axes: with ``tn_check``, set the error bit
    where a parameter is out of its domain; else draw."""
    t = sc.c_type(dtype)
    operands = range(2, 2 + len(param_dtypes))
    params = _array_parameters(len(param_dtypes), ndim)
    word = "const unsigned long long"
    body = ["long long " + ", ".join(f"tn_o{j} = 0" for j in operands) + ";"]
    body += add_offsets("tn_i", "tn_d", "tn_s", operands, ndim, "tn_")
    body += _read_parameters(kind, param_dtypes)
    body += [f"if (tn_check) {{ if (!({_IN_DOMAIN[kind]})) tn_status = 1; }}",
             f"else {at(t, 'tn_p0', f'tn_i * {dtype.itemsize}')} = ({t})({_value(kind, dtype)});"]
    loop = "\n".join("        " + line for line in body)
    variant = f"{name}_d{ndim}"
    signature = ",\n    ".join(params)
    return f"""
extern "C" __global__ void {variant}(
    {signature})
{{
    tn_rng_key tn_key;
    tn_rng_cursor tn_cursor;
    int tn_status = 0;
    (void)tn_standard;
    tn_key.key0 = {at(word, 'tn_p1', '0')};
    tn_key.key1 = {at(word, 'tn_p1', '8')};
    tn_key.n = {at(word, 'tn_p1', '16')};
    tn_rng_start(&tn_cursor);
    for (long long tn_i = (long long)blockIdx.x * blockDim.x + threadIdx.x; tn_i < tn_n;
         tn_i += (long long)blockDim.x * gridDim.x) {{
{loop}
    }}
    if (tn_status) atomicOr(tn_error, tn_status);
}}
{host_launcher(variant, params, synchronizes=False)}"""


@lru_cache(maxsize=None)
def _array_kernel(kind: str, dtype_name: str, param_dtypes: tuple[str, ...]) -> RandomKernel:
    dtype = np.dtype(dtype_name)
    dtypes = tuple(np.dtype(d) for d in param_dtypes)
    name = f"tn_rng_{kind}_{dtype.name}_from_{'_'.join(param_dtypes)}"
    header = (f"{_philox()}\n/* {kind} draws of {dtype.name}, parameters of "
              f"{', '.join(param_dtypes)} */")
    variants = [_array_variant(name, kind, dtype, dtypes, d) for d in range(1, MAX_NDIM + 1)]
    return RandomKernel(name, "\n".join([header, *variants]))


def array_kernel(node: Apply) -> RandomKernel | None:
    """``node``'s kernel over parameters in device memory (variants
    ``<name>_d<D>`` for ``D`` in 1..:data:`MAX_NDIM`), or None where the
    draw or a parameter's dtype has none."""
    if not has_cuda_code(node):
        return None
    dtypes = [node.inputs[i].type.numpy_dtype for i in _parameter_positions(node)]
    if not all(_readable(d) for d in dtypes):
        return None
    return _array_kernel(c_random.kind_of(node), np.dtype(node.op.dtype).name,
                         tuple(d.name for d in dtypes))


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


def _scalar_arguments(node, params) -> list[int]:
    """``[standard, a, b]`` of the scalar kernel's launch (``params``: the
    parameters read, one element each)."""
    values = [np.asarray(p).reshape(()) for p in params]
    if node.op.dist == "integers":
        low, high = (v.astype(np.int64) for v in values)
        span = (high.astype(np.uint64) - low.astype(np.uint64)).view(np.int64)
        bits = [int(low), int(span)]
    else:
        bits = [int(v.astype(np.float64).view(np.int64)) for v in values] + [0]
    return [int(node.op.standard), *bits[:2]]


def _outputs(backend, node, cells, state, shape: tuple, reads: list):
    """The buffers of the draw (last call's when it fits and meets nothing
    the launch reads) and of the state after it (the state's own when in
    place)."""
    dtype = node.outputs[1].type.numpy_dtype
    draw = cells[1][0]
    if not _fits(backend, draw, shape, dtype) or any(backend.may_share_memory(draw, a)
                                                     for a in [state, *reads]):
        draw = backend.empty(shape, dtype)
    if node.op.inplace:
        return draw, state
    new_state = cells[0][0]
    if (not _fits(backend, new_state, (STATE_LENGTH,), np.dtype(np.uint64))
            or backend.may_share_memory(new_state, state)
            or backend.may_share_memory(new_state, draw)):
        new_state = backend.empty((STATE_LENGTH,), np.dtype(np.uint64))
    return draw, new_state


def _raise_for_parameters(node, runtime, dims, params) -> None:
    """The reference's error for parameters a check launch found out of
    their domain (its check rerun on host copies of them)."""
    host = [runtime.to_host(p) if runtime.is_device_array(p) else np.asarray(p) for p in params]
    op = node.op
    if c_random.kind_of(node) != op.dist:           # a binomial of one trial: n is 1
        host = [np.ones((), np.int64), *host]
    op.checked_shape(dims, host)
    # The device's check and the reference's disagree: say which values.
    raise ValueError(f"{op}: the device found parameter(s) {', '.join(op.spec.params)} out of "
                     f"their domain, which the reference accepts: {host}")


class _Draw:
    """The ``run`` of one draw node with a kernel (see the module doc)."""

    def __init__(self, node: Apply, backend):
        self.node, self.backend = node, backend
        self.first_param = 1 + (node.op.n_size or 0)
        self.positions = _parameter_positions(node)
        self.scalar = random_kernel(node)
        self.array = array_kernel(node)
        backend.prepare([self.scalar, ADVANCE] + ([self.array] if self.array else []))
        self.check = None if self.array is None else replace(self.array, uses_status=True)

    def __call__(self, node, inputs, cells, runtime):
        state = inputs[0]
        check_state(state, node.op.dist, runtime.is_device_array)
        if not state.flags.c_contiguous:
            return perform_on_device(node, inputs, cells, runtime)
        dims = [int(runtime.to_host(d)) if runtime.is_device_array(d) else d
                for d in inputs[1:self.first_param]]
        params = [inputs[i] for i in self.positions]
        if all(not runtime.is_device_array(p) and np.size(p) == 1 for p in params):
            return self._scalar_draw(inputs, cells, state, dims, params)
        if self.array is None or not all(runtime.is_device_array(p) for p in params):
            return perform_on_device(node, inputs, cells, runtime)
        return self._array_draw(inputs, cells, runtime, state, dims, params)

    def _scalar_draw(self, inputs, cells, state, dims, params):
        node, backend = self.node, self.backend
        all_params = [np.asarray(p) for p in inputs[self.first_param:]]
        shape = node.op.checked_shape(dims, all_params)
        draw, new_state = _outputs(backend, node, cells, state, shape, [])
        n = int(np.prod(shape, dtype=np.int64))
        if n:
            backend.launch(self.scalar, self.scalar.name, self._grid(n),
                           backend.elementwise_threads, [draw, state],
                           [n, *_scalar_arguments(node, params)])
        self._advance(cells, state, draw, new_state)

    def _array_draw(self, inputs, cells, runtime, state, dims, params):
        node, backend = self.node, self.backend
        shape = node.op.draw_shape(dims, inputs[self.first_param:])
        n = int(np.prod(shape, dtype=np.int64))
        layout = launch_layout(shape, [(p.shape, p.strides) for p in params]) if n else None
        if layout is None or layout.ndim > MAX_NDIM:
            # nothing drawn (a parameter's values are still checked), or too many axes
            return perform_on_device(node, inputs, cells, runtime)
        integers = [*layout.dims, *(s for strides in layout.strides for s in strides)]
        variant = f"{self.array.name}_d{layout.ndim}"
        grid, threads = self._grid(n), backend.elementwise_threads
        standard = int(node.op.standard)
        if not standard and backend.launch(self.check, variant, grid, threads,
                                           [state, state, *params],
                                           [n, 1, standard, *integers]):
            _raise_for_parameters(node, runtime, dims, params)
        draw, new_state = _outputs(backend, node, cells, state, shape, params)
        backend.launch(self.array, variant, grid, threads, [draw, state, *params],
                       [n, 0, standard, *integers])
        self._advance(cells, state, draw, new_state)

    def _grid(self, n: int) -> int:
        return grid_size(n, self.backend.elementwise_threads, self.backend.max_blocks)

    def _advance(self, cells, state, draw, new_state) -> None:
        self.backend.launch(ADVANCE, ADVANCE.name, 1, 1, [new_state, state], [])
        cells[0][0], cells[1][0] = new_state, draw


def compile_draw(node: Apply, context):
    """The device path's ``run`` of a draw node (``DeviceOp.compile``): its
    kernels where it has them (built now), else the host draw."""
    backend = context.backend if context is not None else None
    if backend is None or not has_cuda_code(node):
        return perform_on_device
    return _Draw(node, backend)
