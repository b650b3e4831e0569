"""CUDA C for row programs (:class:`~tenure.symbolic.ops.rowwise.RowProgram`),
and the step that launches them.

The program is the C linker's (:class:`~tenure.linkers.c.rowwise.RowPlan`:
its passes, the values each pass computes, the shapes it covers), and so is
each value's scalar code: one definition for both linkers.

Two kernels per node, with the same parameters:

- ``<name>_rows``: a block per chunk of rows (a grid-stride loop over the
  chunks: a fixed number for a given row count, as on the C linker), its
  rows in order.  For each row, each pass runs over the columns ``t, t +
  threads, ...`` of thread ``t``: the row reductions of the pass, each
  thread folding its columns, then combined as a tree in shared memory
  (``__syncthreads`` between levels; a block's threads are a power of two,
  at most :data:`~tenure.linkers.cuda.reduce.MAX_THREADS`), in the output
  dtype; the outputs the pass makes; the column sums, each thread adding
  its columns of the row to the chunk's partial sums (a thread owns the
  same columns in every row: no two threads write one partial sum).  A
  value that does not span the columns is computed by every thread.
- ``<name>_cols``: a thread per column (a grid-stride loop), adding the
  chunks' partial sums in chunk order into the output (a mean divides by
  the row count in double precision).

Arguments: each output's data pointer, the partial sums' buffer (a chunk
after another, each ``m * column_bytes`` bytes: per column reduction, widest
first, ``m`` partial sums), each array input's data pointer, the ``int *``
for error bits (a scalar op's: an integer to a negative power), then the
row count ``n`` (the product of the frame's leading lengths), the column
count ``m``, the chunks, each array input's row and column byte strides (0
where it is broadcast; an input whose rows are not one stride apart is
copied first), each output's.
64-bit integers throughout.  Outputs hold their full shapes and overlap no
input; inputs are aligned to their itemsize.

The step (:class:`RowStep`) works out the shapes as the C step does
(:meth:`~tenure.linkers.c.rowwise.RowPlan.extents`); a call the kernels do
not cover -- or whose scalar code set an error bit -- runs the node's
``perform`` on the host copies of its inputs, which computes it or raises
the unfused ops' error, and the results go back to where the inputs were.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tenure.linkers.c.rowwise import RowPlan, combine, identity, reduced_value, value_code
from tenure.linkers.cuda.dispatch import KernelFamily, register_cuda_op
from tenure.linkers.cuda.kernel_source import at, host_launcher
from tenure.linkers.cuda.layout import grid_size
from tenure.linkers.cuda.reduce import MAX_THREADS
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.rowwise import RowProgram

__all__ = ["CHUNKS", "RowKernel", "RowStep", "has_cuda_code", "row_kernel", "row_stride"]

#: the most chunks of rows (blocks of the rows kernel), each with its partial sums
CHUNKS = 256
#: the most row reductions a node's kernel holds (each a shared array)
MAX_ROW_REDUCTIONS = 16


@dataclass(frozen=True, eq=False)
class RowKernel:
    """One node's two kernels (``source`` without the prelude) and its plan."""

    name: str
    source: str
    plan: RowPlan
    uses_status: bool


def has_cuda_code(node: Apply) -> bool:
    """Whether the node is a row program with kernels here (the C linker's
    plan, at most :data:`MAX_ROW_REDUCTIONS` row reductions)."""
    try:
        plan = RowPlan(node)
    except (NotImplementedError, OverflowError):
        return False
    return sum(s.kind == "row" for s in plan.steps) <= MAX_ROW_REDUCTIONS


def parameters(plan: RowPlan) -> list[str]:
    """The C parameters of both kernels, in the order the module doc gives."""
    nout, narr = len(plan.outputs), len(plan.arrays)
    return ([f"char *tn_p{q}" for q in range(nout)] + ["char *tn_pc"]
            + [f"const char *tn_q{a}" for a in range(narr)]
            + ["int *tn_error", "long long tn_n", "long long tn_m", "long long tn_nchunk"]
            + [f"long long tn_{s}{a}" for a in range(narr) for s in ("rs", "cs")]
            + [f"long long tn_o{s}{q}" for q in range(nout) for s in ("rs", "cs")])


def row_kernel(node: Apply) -> RowKernel:
    """``node``'s kernels (``NotImplementedError`` when it has none)."""
    if not has_cuda_code(node):
        raise NotImplementedError(f"no CUDA code for {node.op}")
    plan = RowPlan(node)
    body = _rows_kernel(plan, "@NAME@") + _cols_kernel(plan, "@NAME@")
    name = "tn_rowprog_" + hashlib.sha256(body.encode()).hexdigest()[:16]
    sets_status = any("tn_status" in line for s in plan.steps if s.kernel is not None
                      for line in s.kernel.body)
    return RowKernel(name, body.replace("@NAME@", name), plan, sets_status)


def _load(plan: RowPlan, v: int, offset: str) -> str:
    a = plan.arrays.index(v)
    t = plan.ctype(v)
    normal = " != 0" if plan.dtypes[v].kind == "b" else ""
    return f"const {t} x{v} = {at('const ' + t, f'tn_q{a}', offset)}{normal};"


def _column_at(plan: RowPlan, v: int, offsets: dict, chunk: str, j: str) -> str:
    t = plan.ctype(v)
    return at(t, "tn_pc", f"{chunk} + {offsets[v]} * tn_m + {j} * (long long)sizeof({t})")


def _pass(plan: RowPlan, p: int, out_slot: dict, offsets: dict) -> list[str]:
    work = plan.work(p)
    code = [f"/* pass {p} */"]
    for v in work.pre:
        code += value_code(plan, plan.step_of(v))
    for v in work.pre_out:
        q = out_slot[v]
        code.append(f"if (threadIdx.x == 0) {at(plan.ctype(v), f'tn_p{q}', f'i * tn_ors{q}')} "
                    f"= x{v};")
    if not work.has_loop:
        return code
    for s in work.rows:
        code.append(f"{plan.ctype(s.index)} a{s.index} = "
                    f"{identity(s.node.op.fn_name, plan.dtypes[s.index])};")
    loop = [_load(plan, r, f"i * tn_rs{plan.arrays.index(r)} + j * tn_cs{plan.arrays.index(r)}")
            for r in work.loaded]
    for v in work.loop:
        loop.append(f"{plan.ctype(v)} x{v};")
        loop += value_code(plan, plan.step_of(v))
    for s in work.rows:
        pre, expr = reduced_value(plan, s)
        loop += pre + [f"a{s.index} = {combine(s.node.op.fn_name, f'a{s.index}', expr)};"]
    for s in work.cols:
        pre, expr = reduced_value(plan, s)
        cell = _column_at(plan, s.index, offsets, "tn_chunk", "j")
        loop += pre + [f"{cell} = {combine(s.node.op.fn_name, cell, expr)};"]
    for v in work.loop_out:
        q = out_slot[v]
        loop.append(f"{at(plan.ctype(v), f'tn_p{q}', f'i * tn_ors{q} + j * tn_ocs{q}')} = x{v};")
    code += ["for (long long j = threadIdx.x; j < tn_m; j += blockDim.x) {"]
    code += ["    " + s for s in loop] + ["}"]
    if not work.rows:
        return code
    code += [f"tn_sh{s.index}[threadIdx.x] = a{s.index};" for s in work.rows]
    code += ["__syncthreads();",
             "for (unsigned int tn_h = blockDim.x / 2; tn_h > 0; tn_h /= 2) {",
             "    if (threadIdx.x < tn_h) {"]
    for s in work.rows:
        k = s.index
        total = combine(s.node.op.fn_name, f"tn_sh{k}[threadIdx.x]",
                        f"tn_sh{k}[threadIdx.x + tn_h]")
        code.append(f"        tn_sh{k}[threadIdx.x] = {total};")
    code += ["    }", "    __syncthreads();", "}"]
    for s in work.rows:
        k, t = s.index, plan.ctype(s.index)
        code.append(f"x{k} = ({t})((double)tn_sh{k}[0] / (double)tn_m);"
                    if s.node.op.fn_name == "mean" else f"x{k} = tn_sh{k}[0];")
        if k in out_slot:
            q = out_slot[k]
            code.append(f"if (threadIdx.x == 0) {at(t, f'tn_p{q}', f'i * tn_ors{q}')} = x{k};")
    code.append("__syncthreads();   /* tn_sh[0] is read before the next writes */")
    return code


def _rows_kernel(plan: RowPlan, name: str) -> str:
    out_slot = {v: q for q, v in enumerate(plan.outputs)}
    offsets = plan.column_offsets()
    params = parameters(plan)
    shared = [f"__shared__ {plan.ctype(s.index)} tn_sh{s.index}[{MAX_THREADS}];"
              for s in plan.steps if s.kind == "row"]
    zero = [f"{_column_at(plan, s.index, offsets, 'tn_chunk', 'j')} = 0;"
            for s in plan.column_steps()]
    row = []
    for a, v in enumerate(plan.arrays):
        if not plan.in_loop(v):
            row.append(_load(plan, v, f"i * tn_rs{a}"))
    row += [f"{plan.ctype(s.index)} x{s.index};" for s in plan.steps
            if not plan.in_loop(s.index) and s.kind != "column"]
    for p in range(plan.passes):
        row += _pass(plan, p, out_slot, offsets)
    pad = " " * 12
    kernel = f"{name}_rows"
    nl = "\n"
    return f"""
/* a row program: {plan.passes} passes over each row */
extern "C" __global__ void {kernel}(
    {(',' + nl + '    ').join(params)})
{{
    int tn_status = 0;
    {(nl + '    ').join(shared)}
    for (long long tn_c = blockIdx.x; tn_c < tn_nchunk; tn_c += gridDim.x) {{
        const long long tn_chunk = tn_c * tn_m * {plan.column_bytes()};
        (void)tn_chunk;
        for (long long j = threadIdx.x; j < tn_m; j += blockDim.x) {{
            {(nl + pad).join(zero)}
        }}
        for (long long i = tn_c * tn_n / tn_nchunk; i < (tn_c + 1) * tn_n / tn_nchunk; i++) {{
{nl.join(pad + s for s in row)}
        }}
    }}
    if (tn_status) atomicOr(tn_error, tn_status);
}}
{host_launcher(kernel, params, synchronizes=True)}"""


def _cols_kernel(plan: RowPlan, name: str) -> str:
    out_slot = {v: q for q, v in enumerate(plan.outputs)}
    offsets = plan.column_offsets()
    params = parameters(plan)
    lines = []
    for s in plan.column_steps():
        k, t, q = s.index, plan.ctype(s.index), out_slot[s.index]
        first = _column_at(plan, k, offsets, "0", "j")
        later = _column_at(plan, k, offsets, f"c * tn_m * {plan.column_bytes()}", "j")
        lines += ["{",
                  f"    {t} s = {first};",
                  "    for (long long c = 1; c < tn_nchunk; c++)",
                  f"        s = s + {later};"]
        if s.node.op.fn_name == "mean":
            lines.append(f"    s = ({t})((double)s / (double)tn_n);")
        lines += [f"    {at(t, f'tn_p{q}', f'j * tn_ocs{q}')} = s;", "}"]
    kernel = f"{name}_cols"
    nl = "\n"
    return f"""
extern "C" __global__ void {kernel}(
    {(',' + nl + '    ').join(params)})
{{
    (void)tn_error;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < tn_m;
         j += (long long)blockDim.x * gridDim.x) {{
{nl.join(' ' * 8 + s for s in lines)}
    }}
}}
{host_launcher(kernel, params, synchronizes=False)}"""


def row_stride(array, lead: tuple) -> int | None:
    """The byte stride from one row to the next of ``array`` (its leading
    axes, left-padded, of the frame's leading lengths ``lead``): 0 without
    a row axis longer than 1; None when its rows are not one stride apart
    (the C step's ``tn_rw_row_stride``)."""
    off = len(lead) - (array.ndim - 1)
    stride, following = 0, None
    for k in range(len(lead) - 1, -1, -1):
        if lead[k] == 1:
            continue
        if k < off:
            return None
        s = array.strides[k - off]
        if following is None:
            stride = s
        elif s != following:
            return None
        following = s * lead[k]
    return stride


class RowStep:
    """``step(node, inputs, cells)``: a row program by its kernels on
    ``backend`` (or by its ``perform`` on the host: the module doc)."""

    def __init__(self, backend, kernel: RowKernel):
        self.backend = backend
        self.kernel = kernel

    def __call__(self, node, inputs, cells):
        backend, plan = self.backend, self.kernel.plan
        arrays = {}
        for v in plan.arrays:
            a = inputs[v]
            if not backend.is_array(a):
                a = backend.from_host(np.asarray(a))
            want = node.inputs[v].type
            if a.dtype != want.numpy_dtype or a.ndim != want.ndim:
                return self._on_host(node, inputs, cells)    # perform's error
            arrays[v] = a
        lengths = {v: int(backend.to_host(inputs[v]) if backend.is_array(inputs[v])
                          else inputs[v]) for v in plan.dims}
        extents = plan.extents([tuple(arrays[v].shape) if v in arrays else None
                                for v in range(len(node.inputs))], lengths)
        if extents is None:
            return self._on_host(node, inputs, cells)
        R, C, n, m, lead = extents
        for v, a in arrays.items():
            if (backend.pointer(a) % a.dtype.itemsize
                    or any(s % a.dtype.itemsize for s in a.strides)
                    or (R[v] != 1 and row_stride(a, lead) is None)):
                arrays[v] = backend.copy(a)      # aligned, C-contiguous: rows one stride apart
        outputs = []
        for q, (v, var) in enumerate(zip(plan.outputs, node.outputs)):
            column = plan.step_of(v).kind == "column"
            shape = tuple(1 if column else d for d in lead[:var.ndim - 1]) + (C[v],)
            outputs.append(self._output(cells[q][0], shape, var.type.numpy_dtype,
                                        list(arrays.values())))
        nchunk = min(n, CHUNKS)
        partials = backend.empty((max(nchunk * m * plan.column_bytes(), 1),), np.uint8)
        integers = [n, m, nchunk]
        for v in plan.arrays:
            a = arrays[v]
            integers += [row_stride(a, lead) if R[v] != 1 else 0,
                         a.strides[-1] if a.ndim and C[v] != 1 else 0]
        for v, out in zip(plan.outputs, outputs):
            column = plan.step_of(v).kind == "column"
            integers += [0 if column else row_stride(out, lead), out.strides[-1]]
        operands = outputs + [partials] + [arrays[v] for v in plan.arrays]
        threads = backend.reduction_threads
        status = backend.launch(self.kernel, f"{self.kernel.name}_rows",
                                min(nchunk, backend.max_blocks), threads, operands, integers)
        if plan.column_bytes():
            status |= backend.launch(self.kernel, f"{self.kernel.name}_cols",
                                     grid_size(m, backend.elementwise_threads,
                                               backend.max_blocks),
                                     backend.elementwise_threads, operands, integers)
        if status:
            return self._on_host(node, inputs, cells)        # perform raises the error
        for cell, out in zip(cells, outputs):
            cell[0] = out

    def _output(self, buffer, shape: tuple, dtype, inputs: list):
        """``buffer`` when it may take the output (this backend's array of
        its shape and dtype, C-contiguous, overlapping no input), else a new one."""
        backend = self.backend
        if (backend.is_array(buffer) and tuple(buffer.shape) == shape and buffer.dtype == dtype
                and buffer.flags.c_contiguous and backend.writeable(buffer)
                and not any(backend.may_share_memory(buffer, a) for a in inputs)):
            return buffer
        return backend.empty(shape, dtype)

    def _on_host(self, node, inputs, cells):
        """``perform`` on host copies; the results where the inputs were."""
        backend = self.backend
        on_device = any(backend.is_array(a) and not isinstance(a, np.ndarray) for a in inputs)
        host = [backend.to_host(a) if backend.is_array(a) else a for a in inputs]
        results = [[None] for _ in cells]
        node.op.perform(node, host, results)
        for cell, (value,) in zip(cells, results):
            cell[0] = backend.from_host(np.ascontiguousarray(value)) if on_device else value


# How the CUDA linker runs RowProgram (.dispatch): its own kernels and step.
register_cuda_op(RowProgram, kernel=KernelFamily(row_kernel, make_step=RowStep,
                                                 has_cuda_code=has_cuda_code))
