"""C for row programs (:class:`~tenure.symbolic.ops.rowwise.RowProgram`): a
region's passes over each row while the row is in cache.

One compiled step per node (``CEntry(many_outputs=True)``, C of the graph's
module): the step reads the inputs, works out every value's shape, takes the
outputs' buffers and runs the kernel.

Rows.  In a frame of ``nd`` dimensions (the most a value of the program
has), the rows are the index tuples of the leading ``nd - 1`` axes, in C
order, and the columns the last axis; every value spans all the rows or
none (its leading lengths are the frame's, or all 1).  The kernel reads an
input's rows one byte stride apart (leading axes that merge, as a
C-contiguous array's do); an input whose rows are not is copied in C order
first (a copy the memory plan does not count).

The kernel.  Rows are independent; they go in chunks (a fixed number for a
given row count, whatever the threads) to threads.  For each row, the
program runs as *passes* over the row's columns: pass ``p`` computes the
row reductions whose inputs are known after ``p`` earlier passes (several
in one loop: a multi-output loop), the outputs and column sums that become
known then, and the values they need, straight from the inputs (an
elementwise value read in two passes is computed in both: recomputing from
the row in cache costs less than storing it).  A value that does not span
the columns (a row's mean, ``sqrt(var + eps)``) is computed once per row
and pass, outside the loop over the columns.  Columns go :data:`BLOCK` at a
time: inputs that are not contiguous along the row (broadcast along it, or
strided) are copied into a stack buffer first, so every loop over a block
is one vectorizable loop.  Column sums accumulate per chunk of rows and the
chunks' partial sums are added in chunk order at the end: results do not
depend on the number of threads.  Memory: the outputs, the partial sums
(at most :data:`CHUNKS` rows of them: the plan's workspace) and stack
buffers of a block.

Accuracy.  Each value is its op's, computed by the C of the scalar table as
an elementwise node computes it.  A row sum adds the values of a block of
:data:`BLOCK` as NumPy's pairwise sum adds a block, and the blocks in order;
column sums add rows in order within a chunk.  Both are within the error
bounds of NumPy's summation (pairwise within a row, plain accumulation down
the columns), not bit for bit.  ``mean`` divides the sum by the count in
double precision, as NumPy does; ``max``/``min`` propagate NaN.

Declining.  The step returns 1 -- the interpreter then runs the node's
``perform`` -- when a call's shapes are not what the kernel covers: a value
that spans some rows but not all, or whose column count is neither the
frame's nor 1, a ``sum_to``
that sums, an ``expand_to`` that cannot broadcast, a reduction over an axis
that is broadcast, an output that would not cover all rows, an empty
matrix, an input of another dtype or ndim or unaligned, or an error bit of a
scalar op (an integer to a negative power).  ``perform`` then computes the
values, or raises the error the unfused ops raise.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from tenure.linkers.c.cgen import c_string, comment, input_label, no_contract, typenum
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.linkers.c.elemwise import SUPPORT_CODE, load_element, parallel_settings, scalar_kernel
from tenure.linkers.c import scalar_code as sc
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.creation import ExpandTo
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import SumTo
from tenure.symbolic.ops.rowwise import COLUMN, MAX_NDIM, ROW, RowProgram, reduction_kind

__all__ = ["BLOCK", "CHUNKS", "PassWork", "RowPlan", "combine", "has_c_code", "identity",
           "reduced_value", "step_function", "value_code"]

#: columns computed at a time (NumPy's pairwise block, so a row of at most
#: this many sums as NumPy's does)
BLOCK = 128
#: the most chunks of rows (each with its own column partial sums)
CHUNKS = 64

_EW, _SUM_TO, _EXPAND_TO = "ew", "sum_to", "expand_to"


def _kind(inner: Apply, nd: int) -> str:
    """A step's kind in a frame of ``nd`` dimensions."""
    op = inner.op
    if isinstance(op, Elemwise):
        return _EW
    if type(op) is SumTo:
        return _SUM_TO
    if type(op) is ExpandTo:
        return _EXPAND_TO
    kind = reduction_kind(op, nd)
    if kind is None or max(v.ndim for v in inner.inputs) != nd:
        raise NotImplementedError(f"{op}: not a step of a row program of {nd} dimensions")
    return kind


@dataclass
class _Step:
    """One step: its kind, op, value index, the value indices it reads
    (None for an elementwise op's Python number) and, for reductions, the
    scalar kernel of its values."""

    kind: str
    node: Apply
    index: int
    reads: list
    kernel: object = None          # a ScalarKernel (elementwise, fused reductions)
    compute: int = 0               # the pass that computes it


class RowPlan:
    """What the kernels of one :class:`RowProgram` node do (see the module
    doc), the C and the CUDA linker's alike.  Values are numbered: the
    node's inputs, then its steps.  Per value: ``dtypes``, ``ndims``,
    ``spans`` (whether it spans the columns, statically); ``steps`` (each
    with its pass), ``arrays`` (the inputs read as arrays), ``dims`` (those
    read as lengths: a sum_to's, an expand_to's), ``outputs`` (the value of
    each output), ``passes``."""

    def __init__(self, node: Apply):
        if not isinstance(node.op, RowProgram):
            raise NotImplementedError(f"{node.op} is not a row program")
        self.node = node
        nin = len(node.inputs)
        inner_nodes = node.op.inner(node)
        values = list(node.inputs) + [inner.outputs[0] for inner in inner_nodes]
        self.dtypes = [np.dtype(v.dtype) for v in values]
        self.ndims = [v.ndim for v in values]
        #: the frame: the rows are the index tuples of its leading axes
        self.nd = max(self.ndims)
        if not 2 <= self.nd <= MAX_NDIM:
            raise NotImplementedError(f"a row program of {self.nd} dimensions")
        self.spans = [v.ndim >= 1 and v.type.shape[-1] != 1 for v in values]
        sc.check_c_dtypes(str(node.op), self.dtypes)
        index = {var: i for i, var in enumerate(values)}
        self.steps = [self._step(inner, nin + j, index, self.nd)
                      for j, inner in enumerate(inner_nodes)]
        read = {i for s in self.steps if s.kind != _SUM_TO and s.kind != _EXPAND_TO
                for i in s.reads if i is not None and i < nin}
        read |= {s.reads[0] for s in self.steps if s.kind in (_SUM_TO, _EXPAND_TO)
                 and s.reads[0] < nin}
        self.dims = sorted({i for s in self.steps if s.kind in (_SUM_TO, _EXPAND_TO)
                            for i in s.reads[1:]})
        if any(self.ndims[i] != 0 or self.dtypes[i].kind not in "iu" for i in self.dims):
            raise NotImplementedError("a row program's lengths are 0-d integers")
        self.arrays = sorted(read)
        self.outputs = [nin + j for j in node.op.outputs]
        self._schedule(nin)

    @staticmethod
    def _step(inner: Apply, index: int, values: dict, nd: int) -> _Step:
        kind = _kind(inner, nd)
        weak = dict(getattr(inner.op, "weak_positions", ()))
        reads = [None if i in weak else values[v] for i, v in enumerate(inner.inputs)]
        step = _Step(kind, inner, index, reads)
        if kind == _EW:
            step.kernel = scalar_kernel(inner)
        elif isinstance(inner.op, FusedReduce):
            step.kernel = scalar_kernel(inner.op.elemwise_op.make_node(*inner.inputs))
            if any(d is None for d in step.kernel.in_dtypes):
                raise NotImplementedError("a fused reduction with Python-number inputs")
        lengths_ok = len(reads) == nd + 1 and inner.outputs[0].ndim == nd
        if kind in (_SUM_TO, _EXPAND_TO) and not lengths_ok:
            raise NotImplementedError(f"{inner.op} to other than {nd} dimensions")
        return step

    def _schedule(self, nin: int) -> None:
        """Each step's pass: a row reduction is computed in the pass where
        its inputs are ready and can be read from the next one."""
        ready = [0] * (nin + len(self.steps))    # per value: the first pass that can read it
        for s in self.steps:
            s.compute = max((ready[i] for i in self.reads(s.index)), default=0)
            ready[s.index] = s.compute + 1 if s.kind == ROW else s.compute
        self.passes = 1 + max((s.compute for s in self.steps), default=0)

    # -- helpers for the code

    def ctype(self, index: int) -> str:
        """The C type of value ``index``."""
        return sc.c_type(self.dtypes[index])

    def step_of(self, index: int) -> _Step | None:
        nin = len(self.node.inputs)
        return self.steps[index - nin] if index >= nin else None

    def in_loop(self, index: int) -> bool:
        """Whether a value is computed (or loaded) inside the loop over the
        columns: it spans them, and is no reduction's result."""
        step = self.step_of(index)
        return self.spans[index] and (step is None or step.kind not in (ROW, COLUMN))

    def column_steps(self) -> list:
        """The column reductions, widest dtype first (their partial sums
        share one buffer, each aligned)."""
        cols = [s for s in self.steps if s.kind == COLUMN]
        return sorted(cols, key=lambda s: -self.dtypes[s.index].itemsize)

    def column_bytes(self) -> int:
        """Bytes of one column's partial sums, every column reduction together."""
        return sum(self.dtypes[s.index].itemsize for s in self.column_steps())

    def column_offsets(self) -> dict[int, int]:
        """Per column reduction (value index), where its partial sums start
        in a chunk's buffer, in units of ``m`` bytes (widest first: aligned)."""
        offsets, off = {}, 0
        for s in self.column_steps():
            offsets[s.index] = off
            off += self.dtypes[s.index].itemsize
        return offsets

    def work(self, p: int) -> "PassWork":
        """What pass ``p`` does (see :class:`PassWork`)."""
        nin = len(self.node.inputs)
        rows = [s for s in self.steps if s.kind == ROW and s.compute == p]
        cols = [s for s in self.steps if s.kind == COLUMN and s.compute == p]
        stored = [v for v in self.outputs if self.step_of(v).kind not in (ROW, COLUMN)
                  and self.step_of(v).compute == p]
        loop_out = [v for v in stored if self.in_loop(v)]
        pre_out = [v for v in stored if not self.in_loop(v)]
        loop, pre = self._needed([s.index for s in rows + cols] + stored)
        loaded = sorted({r for v in loop for r in self.reads(v) if r < nin and self.in_loop(r)}
                        | {r for s in rows + cols for r in s.reads
                           if r is not None and r < nin and self.in_loop(r)})
        return PassWork(rows, cols, loop_out, pre_out, loop, pre, loaded)

    def reads(self, v: int) -> list[int]:
        """The values step ``v`` computes from (a sum_to's or expand_to's
        lengths are no values: only checked)."""
        step = self.step_of(v)
        reads = step.reads[:1] if step.kind in (_SUM_TO, _EXPAND_TO) else step.reads
        return [r for r in reads if r is not None]

    def _needed(self, roots: list[int]) -> tuple[list[int], list[int]]:
        """The steps (value indices) that ``roots`` need, in order: those
        inside the loop and those of the row's preamble.  Inputs and
        reductions' results are there already."""
        nin = len(self.node.inputs)
        loop, pre, seen = set(), set(), set()
        stack = list(roots)
        while stack:
            v = stack.pop()
            if v in seen or v < nin:
                continue
            seen.add(v)
            step = self.step_of(v)
            if step.kind in (ROW, COLUMN):
                if v not in roots:
                    continue
            else:
                (loop if self.in_loop(v) else pre).add(v)
            stack.extend(self.reads(v))
        return sorted(loop), sorted(pre)

    def extents(self, shapes: list, lengths: dict) -> tuple | None:
        """``(R, C, n, m, lead)`` for a call: each value's rows (1 or ``n``)
        and columns (1 or ``m``), the matrix's, and the frame's leading
        lengths, from the array inputs' ``shapes`` (per input, None when it
        is no array input) and ``lengths`` (input index -> int) -- or None
        where the kernels decline the call (the module doc).  The C step
        computes the same in C (:func:`_shape_code`, :func:`_checks`)."""
        nd, nin = self.nd, len(self.node.inputs)
        L, reduced = {}, {}
        for v in range(nin):
            shape = tuple(shapes[v]) if v in self.arrays else ()
            L[v] = (1,) * (nd - len(shape)) + shape
        for s in self.steps:
            v = s.index
            if s.kind in (_SUM_TO, _EXPAND_TO):
                src, target = s.reads[0], tuple(lengths[d] for d in s.reads[1:])
                if s.kind == _SUM_TO and target != L[src]:
                    return None
                if s.kind == _EXPAND_TO and any(t < 0 or have not in (1, t)
                                                for have, t in zip(L[src], target)):
                    return None
                L[v] = target
                continue
            joined = [_joined([L[r][k] for r in self.reads(v)]) for k in range(nd)]
            if None in joined:
                return None
            reduced[v] = tuple(joined)
            if s.kind == ROW:
                joined[-1] = 1
            elif s.kind == COLUMN:
                joined[:-1] = [1] * (nd - 1)
            L[v] = tuple(joined)
        lead = tuple(max(shape[k] for shape in L.values()) for k in range(nd - 1))
        n, m = math.prod(lead), max(shape[-1] for shape in L.values())
        if n == 0 or m == 0:
            return None
        R, C = {}, {}
        for v, shape in L.items():
            if shape[:-1] not in (lead, (1,) * (nd - 1)) or shape[-1] not in (1, m):
                return None
            R[v], C[v] = (n if shape[:-1] == lead else 1), shape[-1]
        for s in self.steps:
            if (s.kind == ROW and reduced[s.index][-1] != m) or (s.kind == COLUMN and (
                    reduced[s.index][:-1] != lead or C[s.index] != m)):
                return None
        for v in self.outputs:
            if self.step_of(v).kind != COLUMN and (
                    R[v] != n or (self.in_loop(v) and C[v] != m)):
                return None
        return R, C, n, m, lead


def _joined(lengths: list[int]) -> int | None:
    """NumPy's broadcast of lengths, or None when two clash."""
    out = 1
    for length in lengths:
        if length != 1:
            if out not in (1, length):
                return None
            out = length
    return out


@dataclass
class PassWork:
    """What one pass over a row does: the row reductions it computes
    (``rows``), the column sums it adds to (``cols``), the outputs it stores
    from inside the loop over the columns (``loop_out``) and before it
    (``pre_out``, values that do not span the columns), the steps computed
    in the loop (``loop``) and in the preamble (``pre``), and the inputs the
    loop loads (``loaded``)."""

    rows: list
    cols: list
    loop_out: list
    pre_out: list
    loop: list
    pre: list
    loaded: list

    @property
    def has_loop(self) -> bool:
        return bool(self.rows or self.cols or self.loop_out)


def has_c_code(node: Apply) -> bool:
    """Whether the node is a row program with a kernel (:class:`RowPlan`)."""
    try:
        RowPlan(node)
    except (NotImplementedError, OverflowError):
        return False
    return True


# --------------------------------------------------------------------------
# The row function: every pass over one row


def value_code(plan: RowPlan, step: _Step) -> list[str]:
    """C assigning ``x<index>`` (declared by the caller) from the values it reads."""
    if step.kind in (_SUM_TO, _EXPAND_TO):
        return [f"x{step.index} = x{step.reads[0]};"]
    kernel = step.kernel
    loads = [f"const {sc.c_type(d)} v{i} = x{r};" for i, (r, d) in
             enumerate(zip(step.reads, kernel.in_dtypes)) if r is not None]
    voids = [f"(void)v{i};" for i, r in enumerate(step.reads) if r is not None]
    body = ["    " + s for s in loads + voids + kernel.body]
    return ["{"] + body + [f"    x{step.index} = r;", "}"]


def reduced_value(plan: RowPlan, step: _Step) -> tuple[list[str], str]:
    """``(code, expr)``: the value a reduction step folds, in its output dtype."""
    acc = plan.dtypes[step.index]
    if step.kernel is None:      # a Reduce: its input
        (source,) = step.reads
        return [], sc.c_convert(f"x{source}", plan.dtypes[source], acc)
    kernel = step.kernel
    loads = [f"const {sc.c_type(d)} v{i} = x{r};" for i, (r, d) in
             enumerate(zip(step.reads, kernel.in_dtypes))]
    voids = [f"(void)v{i};" for i in range(len(step.reads))]
    name = f"f{step.index}"
    return ([f"{sc.c_type(acc)} {name};", "{"]
            + ["    " + s for s in loads + voids + kernel.body]
            + [f"    {name} = {sc.c_convert('r', kernel.out_dtype, acc)};", "}"]), name


def combine(fn: str, a: str, b: str) -> str:
    """C: accumulator ``a`` of a ``fn`` reduction combined with ``b``."""
    if fn in ("sum", "mean"):
        return f"({a} + {b})"
    cmp = ">" if fn == "max" else "<"
    return f"(({b} {cmp} {a} || {b} != {b}) ? {b} : {a})"


def identity(fn: str, dtype) -> str:
    """C: a ``fn`` reduction's identity in ``dtype``."""
    value = {"sum": 0, "mean": 0, "max": -np.inf, "min": np.inf}[fn]
    return sc.c_literal(value, dtype)


def _pass_code(plan: RowPlan, p: int, out_slot: dict, col_offset: dict) -> list[str]:
    """C of pass ``p`` over row ``i`` (see the module doc)."""
    work = plan.work(p)
    rows, cols, loop_out, pre_out = work.rows, work.cols, work.loop_out, work.pre_out
    loop, pre, loaded = work.loop, work.pre, work.loaded
    code = [f"/* pass {p} */"]
    for v in pre:
        code += value_code(plan, plan.step_of(v))
    for v in pre_out:
        code.append(f"memcpy(ob[{out_slot[v]}] + i * ors[{out_slot[v]}], &x{v}, sizeof x{v});")
    if not work.has_loop:
        return code
    for s in rows:
        start = identity(s.node.op.fn_name, plan.dtypes[s.index])
        code.append(f"{plan.ctype(s.index)} a{s.index} = {start};")
    code += ["for (npy_intp j0 = 0; j0 < m; j0 += TN_RW_BLOCK) {",
             "    const npy_intp mb = m - j0 < TN_RW_BLOCK ? m - j0 : TN_RW_BLOCK;"]
    body = []
    for r in loaded:
        t = plan.ctype(r)
        body += [f"const {t} *p{r};", f"{t} b{r}[TN_RW_BLOCK];",
                 f"if (cs[{plan.arrays.index(r)}] == (npy_intp)sizeof(*p{r})) {{",
                 f"    p{r} = (const {t} *)row{r} + j0;",
                 "} else {",
                 "    for (npy_intp e = 0; e < mb; e++)",
                 f"        memcpy(&b{r}[e], row{r} + (j0 + e) * cs[{plan.arrays.index(r)}], "
                 f"sizeof b{r}[e]);",
                 f"    p{r} = b{r};", "}"]
    for s in rows:
        body.append(f"{plan.ctype(s.index)} buf{s.index}[TN_RW_BLOCK];")
    for s in cols:
        t = plan.ctype(s.index)
        body.append(f"{t} *const c{s.index} = ({t} *)(cp + {col_offset[s.index]} * m) + j0;")
    for v in loop_out:
        t = plan.ctype(v)
        body.append(f"{t} *const o{v} = ({t} *)(ob[{out_slot[v]}] + i * ors[{out_slot[v]}]) + j0;")
    body += ["TN_IVDEP", "for (npy_intp e = 0; e < mb; e++) {"]
    inner = [load_element(f"x{r}", plan.dtypes[r], f"p{r}[e]") for r in loaded]
    for v in loop:
        inner.append(f"{plan.ctype(v)} x{v};")
        inner += value_code(plan, plan.step_of(v))
    for s in rows:
        pre_code, expr = reduced_value(plan, s)
        inner += pre_code + [f"buf{s.index}[e] = {expr};"]
    for s in cols:
        pre_code, expr = reduced_value(plan, s)
        total = combine(s.node.op.fn_name, f"c{s.index}[e]", expr)
        inner += pre_code + [f"c{s.index}[e] = {total};"]
    for v in loop_out:
        inner.append(f"o{v}[e] = x{v};")
    body += ["    " + s for s in inner] + ["}"]
    for s in rows:
        body += _fold(plan, s)
    code += ["    " + s for s in body] + ["}"]
    for s in rows:
        t = plan.ctype(s.index)
        if s.node.op.fn_name == "mean":
            code.append(f"x{s.index} = ({t})((double)a{s.index} / (double)m);")
        else:
            code.append(f"x{s.index} = a{s.index};")
        if s.index in out_slot:
            q = out_slot[s.index]
            code.append(f"memcpy(ob[{q}] + i * ors[{q}], &x{s.index}, sizeof x{s.index});")
    return code


def _fold(plan: RowPlan, s: _Step) -> list[str]:
    """Fold ``buf<k>``'s ``mb`` values into the row's accumulator ``a<k>``."""
    k, t, fn = s.index, plan.ctype(s.index), s.node.op.fn_name
    if fn in ("sum", "mean"):
        # NumPy's pairwise sum of a block of at most 128
        return ["if (mb < 8) {",
                f"    {t} res = -0.0;",
                "    for (npy_intp e = 0; e < mb; e++)",
                f"        res += buf{k}[e];",
                f"    a{k} += res;",
                "} else {",
                f"    {t} r8[8];",
                "    npy_intp e;",
                "    for (int q = 0; q < 8; q++)",
                f"        r8[q] = buf{k}[q];",
                "    for (e = 8; e < mb - (mb % 8); e += 8)",
                "        for (int q = 0; q < 8; q++)",
                f"            r8[q] += buf{k}[e + q];",
                f"    {t} res = ((r8[0] + r8[1]) + (r8[2] + r8[3])) "
                "+ ((r8[4] + r8[5]) + (r8[6] + r8[7]));",
                "    for (; e < mb; e++)",
                f"        res += buf{k}[e];",
                f"    a{k} += res;",
                "}"]
    return ["{",
            "    npy_intp w = mb;",
            "    while (w > 1) {",
            "        const npy_intp h = w / 2;",
            "        TN_IVDEP",
            "        for (npy_intp e = 0; e < h; e++)",
            f"            buf{k}[e] = {combine(fn, f'buf{k}[e]', f'buf{k}[e + w - h]')};",
            "        w -= h;",
            "    }",
            f"    a{k} = {combine(fn, f'a{k}', f'buf{k}[0]')};",
            "}"]


def _row_function(plan: RowPlan, fname: str, out_slot: dict, col_offset: dict) -> str:
    decls = []
    for a, v in enumerate(plan.arrays):
        decls.append(f"const char *const row{v} = base[{a}] + i * rs[{a}];")
        if not plan.in_loop(v):
            t = plan.ctype(v)
            decls.append(f"{t} x{v};")
            decls.append(f"memcpy(&x{v}, row{v}, sizeof x{v});"
                         + (f" x{v} = x{v} != 0;" if plan.dtypes[v].kind == "b" else ""))
    for s in plan.steps:
        if not plan.in_loop(s.index) and s.kind != COLUMN:
            decls.append(f"{plan.ctype(s.index)} x{s.index};")
    body = []
    for p in range(plan.passes):
        body += _pass_code(plan, p, out_slot, col_offset)
    lines = "\n".join("        " + s for s in decls + body)
    return f"""
static void {fname}_rows(npy_intp i0, npy_intp i1, npy_intp m, const char *const *base,
                         const npy_intp *rs, const npy_intp *cs, char *const *ob,
                         const npy_intp *ors, char *cp, int *status)
{{
    int tn_status = 0;
    (void)cs; (void)cp;
    for (npy_intp i = i0; i < i1; i++) {{
{lines}
    }}
    *status |= tn_status;
}}
"""


def _driver(plan: RowPlan, fname: str, out_slot: dict, col_offset: dict) -> str:
    """``fname_run``: the chunks of rows (threads), then the column sums."""
    par = parallel_settings()
    pragma = ""
    if par is not None:
        threads = f" num_threads({par.threads})" if par.threads else ""
        minsize = min(max(par.minsize, 1), 2**62)
        pragma = (f"#pragma omp parallel for schedule(dynamic, 1) if (n * m >= {minsize})"
                  f"{threads} reduction(|:status)")
    init, combine = [], []
    for s in plan.column_steps():
        k, t = s.index, plan.ctype(s.index)
        off = col_offset[k]
        init += [f"        {{ {t} *c = ({t} *)(cp + {off} * m);",
                 "          for (npy_intp j = 0; j < m; j++) c[j] = 0; }"]
        q = out_slot[k]
        mean = (f"            s = ({t})((double)s / (double)n);\n"
                if s.node.op.fn_name == "mean" else "")
        combine.append(f"""    for (npy_intp j = 0; j < m; j++) {{
        {t} s = (({t} *)colp)[{off} * m / sizeof(s) + j];
        for (npy_intp c = 1; c < nchunk; c++)
            s += (({t} *)(colp + c * chunk))[{off} * m / sizeof(s) + j];
{mean}        memcpy(ob[{q}] + j * ocs[{q}], &s, sizeof s);
    }}""")
    nl = "\n"
    return f"""
/* 0, or the scalar ops' error bits */
static int {fname}_run(npy_intp n, npy_intp m, const char *const *base, const npy_intp *rs,
                       const npy_intp *cs, char *const *ob, const npy_intp *ors,
                       const npy_intp *ocs, char *colp, npy_intp nchunk)
{{
    const npy_intp chunk = m * {plan.column_bytes()};
    int status = 0;
    (void)ocs;
    {pragma}
    for (npy_intp c = 0; c < nchunk; c++) {{
        char *cp = colp == NULL ? NULL : colp + c * chunk;
        if (cp != NULL) {{
{nl.join(init)}
        }}
        {fname}_rows(c * n / nchunk, (c + 1) * n / nchunk, m, base, rs, cs, ob, ors, cp,
                     &status);
    }}
{nl.join(combine)}
    return status;
}}
"""


# --------------------------------------------------------------------------
# The step: inputs, shapes, outputs, the kernel


def _shape_code(plan: RowPlan) -> list[str]:
    """C working out ``L[v * nd + k]`` (value ``v``'s length along frame axis
    ``k``) for every step, and ``RL`` (what a reduction reduces); ``return
    1`` declines (:meth:`RowPlan.extents` is its Python twin)."""
    nd, code = plan.nd, []
    for s in plan.steps:
        v = s.index
        if s.kind in (_SUM_TO, _EXPAND_TO):
            src = s.reads[0]
            for k, d in enumerate(s.reads[1:]):
                dim, have = f"D[{plan.dims.index(d)}]", f"L[{src * nd + k}]"
                if s.kind == _SUM_TO:   # only one that sums nothing
                    code.append(f"if ({dim} != {have}) return 1;")
                else:
                    code.append(f"if ({dim} < 0 || ({have} != 1 && {have} != {dim})) return 1;")
                code.append(f"L[{v * nd + k}] = {dim};")
            continue
        for k in range(nd):
            code.append(f"L[{v * nd + k}] = 1;")
            code += [f"if (!tn_rw_join(&L[{v * nd + k}], L[{r * nd + k}])) return 1;"
                     for r in s.reads if r is not None]
        if s.kind in (ROW, COLUMN):
            axes = [nd - 1] if s.kind == ROW else range(nd - 1)
            for k in range(nd):
                code.append(f"RL[{v * nd + k}] = L[{v * nd + k}];")
            code += [f"L[{v * nd + k}] = 1;" for k in axes]
    return code


def _checks(plan: RowPlan, nv: int) -> list[str]:
    """C: the frame's lengths ``F``, ``n`` and ``m``, each value's rows
    ``R[v]`` (1 or ``n``) and columns ``C[v]`` (1 or ``m``), and what the
    kernel needs of them; ``return 1`` declines."""
    nd = plan.nd
    code = [f"for (int k = 0; k < {nd}; k++) {{",
            "    F[k] = 1;",
            f"    for (int v = 0; v < {nv}; v++)",
            f"        if (L[v * {nd} + k] > F[k]) F[k] = L[v * {nd} + k];",
            "}",
            f"for (int k = 0; k < {nd - 1}; k++)",
            "    n *= F[k];",
            f"m = F[{nd - 1}];",
            "if (n == 0 || m == 0) return 1;",
            f"for (int v = 0; v < {nv}; v++) {{",
            "    int ones = 1, full = 1;",
            f"    for (int k = 0; k < {nd - 1}; k++) {{",
            f"        ones &= L[v * {nd} + k] == 1;",
            f"        full &= L[v * {nd} + k] == F[k];",
            "    }",
            f"    C[v] = L[v * {nd} + {nd - 1}];",
            "    if (!(ones || full) || (C[v] != 1 && C[v] != m)) return 1;",
            "    R[v] = full ? n : 1;",
            "}"]
    for s in plan.steps:
        v = s.index
        if s.kind == ROW:
            code.append(f"if (RL[{v * nd + nd - 1}] != m) return 1;")
        elif s.kind == COLUMN:
            code.append(f"if (C[{v}] != m) return 1;")
            code += [f"if (RL[{v * nd + k}] != F[{k}]) return 1;" for k in range(nd - 1)]
    for v in plan.outputs:
        if plan.step_of(v).kind != COLUMN:
            code.append(f"if (R[{v}] != n) return 1;")
            if plan.in_loop(v):
                code.append(f"if (C[{v}] != m) return 1;")
    return code


#: C helpers of the steps (include-guarded: one copy per module)
_STEP_HELPERS = """
#ifndef TN_RW_HELPERS
#define TN_RW_HELPERS
/* NumPy's broadcast of one length into another: 0 when they clash */
static int tn_rw_join(npy_intp *into, npy_intp length)
{
    if (length == 1 || length == *into) return 1;
    if (*into != 1) return 0;
    *into = length;
    return 1;
}

/* The byte stride from one row to the next of `a` (its last axis the
 * columns, its leading axes, left-padded to the frame's nd - 1, of the
 * frame's lengths F): 0 when it has no row axis longer than 1; -1 when its
 * rows are not one stride apart (leading axes that do not merge). */
static npy_intp tn_rw_row_stride(PyArrayObject *a, int nd, const npy_intp *F)
{
    const int off = nd - PyArray_NDIM(a);
    npy_intp stride = 0, next = -1;
    for (int k = nd - 2; k >= 0; k--) {
        npy_intp s;
        if (F[k] == 1)
            continue;
        if (k < off)
            return -1;
        s = PyArray_STRIDE(a, k - off);
        if (next < 0)
            stride = s;
        else if (s != next)
            return -1;
        next = s * F[k];
    }
    return stride;
}
#endif
"""


def step_function(k: int, step, offsets: tuple, label: str, context=None) -> tuple[str, str]:
    """``(kernel, step function)`` of a row program's node (the ``step_code``
    of its entry)."""
    node = step.node
    plan = RowPlan(node)
    nin, nd = len(node.inputs), plan.nd
    nv = nin + len(plan.steps)
    fname = f"tn_rw{k}"
    out_slot = {v: q for q, v in enumerate(plan.outputs)}
    col_offset = plan.column_offsets()
    kernel = no_contract(SUPPORT_CODE + f"\n#ifndef TN_RW_BLOCK\n#define TN_RW_BLOCK {BLOCK}\n"
                         "#endif\n" + _row_function(plan, fname, out_slot, col_offset)
                         + _driver(plan, fname, out_slot, col_offset))
    na, nout = len(plan.arrays), len(plan.outputs)
    lines = [f"/* step {k}: {comment(label)} */", _STEP_HELPERS,
             f"static int {fname}_shapes(PyObject **S, PyArrayObject **in, npy_intp *F, "
             "npy_intp *R, npy_intp *C, npy_intp *n_out, npy_intp *m_out)",
             "{",
             f"    npy_intp L[{nv * nd}], RL[{nv * nd}], D[{max(len(plan.dims), 1)}], n = 1, m;",
             "    (void)D; (void)RL;"]
    for a, v in enumerate(plan.arrays):
        var, vnd = node.inputs[v], plan.ndims[v]
        what = c_string(f"tenure: {input_label(node, v)} of {label}")
        lines += [f"    if (tn_cl_array(S[{step.inputs[v]}], &in[{a}], {what}) < 0) return -1;",
                  f"    if (PyArray_TYPE(in[{a}]) != {typenum(var.dtype)} "
                  f"|| PyArray_NDIM(in[{a}]) != {vnd} || !PyArray_ISALIGNED(in[{a}])",
                  f"            || !PyArray_ISNOTSWAPPED(in[{a}])) return 1;"]
        lines += [f"    L[{v * nd + j}] = "
                  f"{f'PyArray_DIM(in[{a}], {j - (nd - vnd)})' if j >= nd - vnd else '1'};"
                  for j in range(nd)]
    for d, v in enumerate(plan.dims):
        what = c_string(f"tenure: {input_label(node, v)} of {label}")
        lines.append(f"    if (tn_vw_scalar(S[{step.inputs[v]}], {what}, &D[{d}]) < 0) "
                     "{ PyErr_Clear(); return 1; }")
    for v in range(nin):
        if v not in plan.arrays:
            lines += [f"    L[{v * nd + j}] = 1;" for j in range(nd)]
    lines += ["    " + s for s in _shape_code(plan) + _checks(plan, nv)]
    lines += ["    *n_out = n; *m_out = m;", "    return 0;", "}", ""]
    lines += [f"static int tn_step{k}(PyObject **S, const npy_intp *planned, PyObject **aside)",
              "{",
              f"    PyArrayObject *in[{max(na, 1)}] = {{NULL}}, *out[{nout}] = {{NULL}};",
              f"    PyArrayObject *copies[{max(na, 1)}] = {{NULL}};",
              f"    npy_intp F[{nd}], R[{nv}], C[{nv}], n, m, shape[{nd}];",
              f"    const char *base[{max(na, 1)}];",
              f"    npy_intp rs[{max(na, 1)}], cs[{max(na, 1)}], ors[{nout}], ocs[{nout}];",
              f"    char *ob[{nout}], *colp = NULL;",
              "    npy_intp nchunk;",
              "    int status = 0, q;",
              f"    status = {fname}_shapes(S, in, F, R, C, &n, &m);",
              "    if (status != 0) return status;"]
    for a, v in enumerate(plan.arrays):
        vnd = plan.ndims[v]
        lines += [f"    rs[{a}] = R[{v}] == 1 ? 0 : tn_rw_row_stride(in[{a}], {nd}, F);",
                  f"    if (rs[{a}] < 0) {{   /* rows not one stride apart: copy */",
                  f"        copies[{a}] = (PyArrayObject *)PyArray_NewCopy(in[{a}], NPY_CORDER);",
                  f"        if (copies[{a}] == NULL) {{ status = -1; goto fail; }}",
                  f"        in[{a}] = copies[{a}];",
                  f"        rs[{a}] = tn_rw_row_stride(in[{a}], {nd}, F);",
                  "    }",
                  f"    base[{a}] = PyArray_BYTES(in[{a}]);",
                  f"    cs[{a}] = {_stride(f'C[{v}]', a, vnd - 1) if vnd else '0'};"]
    for q, v in enumerate(plan.outputs):
        out = node.outputs[q]
        ond, off = out.ndim, offsets[q]
        column = plan.step_of(v).kind == COLUMN
        dims = [f"{'1' if column else f'F[{j}]'}" for j in range(ond - 1)] + [f"C[{v}]"]
        lines += [f"    {'; '.join(f'shape[{i}] = {d}' for i, d in enumerate(dims))};"]
        taken = "NULL" if off < 0 else (
            f"(aside != NULL && planned[{off}] == 1 && planned[{off + 1}] >= 0 ? "
            f"tn_cl_take(aside, planned[{off + 1}], {typenum(out.dtype)}, {ond}, shape) : NULL)")
        row_stride = "0" if column else f"tn_rw_row_stride(out[{q}], {nd}, F)"
        lines += [f"    out[{q}] = tn_cl_output(S[{step.outputs[q]}], NULL, in, {na}, S, "
                  f"tn_graph_inputs, TN_N_INPUTS, {typenum(out.dtype)}, {ond}, shape, {taken});",
                  f"    if (out[{q}] == NULL) goto fail;",
                  f"    ob[{q}] = PyArray_BYTES(out[{q}]);",
                  f"    ors[{q}] = {row_stride};",
                  f"    ocs[{q}] = PyArray_STRIDE(out[{q}], {ond - 1});",
                  f"    if (ors[{q}] < 0 || !PyArray_ISALIGNED(out[{q}]) || (shape[{ond - 1}] > 1 "
                  f"&& ocs[{q}] != {plan.dtypes[v].itemsize})) {{ status = 1; goto fail; }}"]
    lines += [f"    nchunk = n < {CHUNKS} ? n : {CHUNKS};"]
    if plan.column_bytes():
        lines += [f"    colp = PyMem_RawMalloc((size_t)(nchunk * m * {plan.column_bytes()}));",
                  "    if (colp == NULL) { PyErr_NoMemory(); status = -1; goto fail; }"]
    lines += ["    Py_BEGIN_ALLOW_THREADS",
              f"    status = {fname}_run(n, m, base, rs, cs, ob, ors, ocs, colp, nchunk);",
              "    Py_END_ALLOW_THREADS",
              "    PyMem_RawFree(colp);",
              "    if (status != 0) { status = 1; goto fail; }   /* perform raises the error */",
              f"    for (q = 0; q < {nout}; q++)",
              "        Py_SETREF(S[tn_rw" + str(k) + "_outs[q]], (PyObject *)out[q]);",
              f"    for (q = 0; q < {max(na, 1)}; q++)",
              "        Py_XDECREF(copies[q]);",
              "    return 0;",
              "fail:",
              f"    for (q = 0; q < {nout}; q++)",
              "        Py_XDECREF(out[q]);",
              f"    for (q = 0; q < {max(na, 1)}; q++)",
              "        Py_XDECREF(copies[q]);",
              "    return status;",
              "}", ""]
    outs = ", ".join(str(s) for s in step.outputs)
    lines.insert(1, f"static const Py_ssize_t tn_rw{k}_outs[] = {{{outs}}};")
    return kernel, "\n".join(lines)


def _stride(length: str, a: int, axis: int) -> str:
    """C: input ``a``'s byte stride along ``axis``, 0 where it is broadcast."""
    return f"{length} == 1 ? 0 : PyArray_STRIDE(in[{a}], {axis})"


def _workspace(node: Apply, shapes, memo: dict) -> int:
    """The column partial sums: one set per chunk of rows."""
    plan = memo.get(node)
    if plan is None:
        plan = memo[node] = RowPlan(node)
    width = plan.column_bytes()
    if not width:
        return 0
    full = [shapes.get(v) for v in node.inputs]
    rows = max((math.prod(s[:-1]) for s in full if s is not None and len(s) == plan.nd),
               default=0)
    cols = max((s[-1] for s in full if s is not None and len(s) >= 1), default=0)
    return min(rows, CHUNKS) * cols * width


# How the C linker runs RowProgram (.dispatch): a step of the graph's module
# writing every output; its loops at -O3.
register_c_op(RowProgram, CEntry("rowwise", sys.modules[__name__], step_code=step_function,
                                 many_outputs=True, loops=True, workspace=_workspace))
