"""C code for reductions: ``Reduce`` (sum, prod, mean, max, min, any, all over
any axes, with or without keepdims) and ``FusedReduce`` (sum, prod, max or min
of an elementwise ``Composite`` of the inputs, computed element by element from
the inputs: the elementwise result is never stored, not even block by block).

Same shape as :mod:`tenure.linkers.c.elemwise`, which this module builds on
(its ``scalar_kernel`` and ``load_element``):

- :func:`has_c_code` ``(node) -> bool``;
- :func:`loop_kernel` ``(node)``: the node's row, kept and divide loops
  (:func:`loop_code`), compiled once into a loop library for every graph
  that needs them (:mod:`.kernels`), with :data:`SUPPORT_CODE` and
  :data:`COMPILE_FLAGS` (elemwise's);
- :func:`description` ``(node)``: what the C runtime's reduction driver,
  ``tn_rd_run`` (``src/reduce.c``: layout, split, fill, threads), needs to
  know; the schedule interpreter hands it over with the loops.

The kernel (``tn_rd_run`` with a node's description and loops) -- its
contract with the caller:

- operand 0 is the output, then node input ``i`` (a ``FusedReduce`` takes no Python-number
  inputs: its constants are inside the composite, and parameters of the
  loops as an elementwise node's are, read from the description's
  ``constants``: one compiled loop serves every value).  Inputs broadcast against
  each other with NumPy's rules; the reduction runs over the broadcast shape.
- The output is allocated by the caller with the output's full shape (the
  reduced shape, length 1 on reduced axes with keepdims) and dtype, any strides
  (negative too); it must not overlap an input.  Dtypes, ndims, the broadcast,
  the output's shape and writeability are checked on every call: a mismatch
  returns -1 with ``TypeError``/``ValueError`` set.
- Returns 0, or -1 with a Python exception set (the caller holds the GIL).
  ``max``/``min`` over an empty axis (even into an empty output) raise NumPy's
  ``ValueError`` (``zero-size array to reduction operation maximum which has no
  identity``).  ``sum``/``prod``/``any``/``all`` of nothing are 0/1/False/True;
  ``mean`` of nothing is NaN, with NumPy's RuntimeWarning.  Integer
  arithmetic wraps like NumPy's; an integer to a negative power in a fused
  composite is NumPy's ``ValueError``.

Loops.  The output is first filled with the reduction's identity (``-inf`` for
a float ``max``, the smallest integer for an int one, ...).  The iteration runs
over the broadcast input shape with the output's strides set to 0 on reduced
axes; length-1 axes go, axes are ordered by the inputs' strides (memory order)
and merged where every operand allows.  Then:

- innermost axis reduced ("rows"): the values of a row are computed :data:`BLOCK`
  at a time into a stack buffer (one vectorizable loop: this is where ``exp``
  of a fused ``sum(exp(x))`` runs through libmvec) and folded into one
  accumulator, which is combined once into the output element;
- innermost axis kept: ``out[k] = combine(out[k], value[k])`` along the row, in
  chunks of :data:`BLOCK` (vectorizable: no reassociation needed).

Typed, vectorizable loops run when every input is aligned and contiguous along
the innermost axis or broadcast along it (stride 0: copied into a stack buffer
per chunk, so ``sum(exp(x - c), axis=1)`` with ``c`` of shape ``(n, 1)``
vectorizes too); otherwise strided loops with ``memcpy`` loads.  The row loops
depend only on the reduction kind, dtypes and scalar body: they are named
after a hash of their text and include-guarded, so nodes of one module that
differ only in axes share them.

Threads.  With OpenMP (``config.openmp``; elemwise's
:func:`~tenure.linkers.c.elemwise.parallel_settings`), a reduction over at
least ``config.openmp_elemwise_minsize`` input elements splits one kept axis
(the output moves along it) into parts that the threads take as they come
(about eight per thread, as elementwise loops do): the kept axis with the most
units, a unit being one index of an outer axis or :data:`BLOCK` elements of
the innermost one (so parts start where serial chunks do).  Threads
write disjoint output elements, and each element is reduced by the same code
over the same values in the same order as serially, so the results are the
serial build's bit for bit, whatever the thread count.  A reduction with no
kept axis (``axis=None``, say) stays on one thread: splitting it would change
its summation order.

Accuracy.  Floating-point sums (and means) accumulate in the output dtype, as
NumPy does (float32 in float32: no wider accumulator), and in the same order:
along a reduced innermost axis with NumPy's pairwise summation (``n < 8``:
in order; up to 128 values: 8 interleaved accumulators added as
``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`` then the tail; longer rows split in
two at a multiple of 8, recursively: NumPy's ``pairwise_sum``), and along outer
axes by plain accumulation into the output, as NumPy's reduction loop does.
The tests check that contiguous rows (``axis=-1``, ``axis=None`` on a
contiguous array, means too) give NumPy's results bit for bit.  Where NumPy's
iterator cuts or orders rows differently (casting buffers of 8192 elements,
other layouts), or for a fused node (whose NumPy ``perform`` sums blocks), the
difference is within both methods' error bounds: pairwise about
``eps * log2(n) * sum|x|``, plain accumulation ``eps * n * sum|x|`` at worst
(typically ``sqrt(n)``).  ``prod`` multiplies in order (no reassociation);
``max``/``min`` fold each buffer as a tree of halving passes (exact in any
order); ``any``/``all`` and integer sums are exact.  ``max``/``min`` propagate
NaN (which NaN, and the sign of a zero result from ``-0.0`` and ``0.0``, may
differ from NumPy's).  ``mean`` divides the sum by the count in double
precision and rounds to the output dtype, as NumPy does.  Values of a fused
composite follow elemwise.py (exp & co. via libmvec: within a few ulps of
NumPy's).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from tenure.linkers.c import kernels
from tenure.linkers.c.cgen import C_DTYPES, C_TYPES, c_string, input_label, no_contract, typenum
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.linkers.c.elemwise import COMPILE_FLAGS, load_element, parallel_settings, scalar_kernel
from tenure.linkers.c.elemwise import SUPPORT_CODE as _EW_SUPPORT_CODE
from tenure.linkers.c import scalar_code as sc
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.reduce import Reduce
from tenure.symbolic.ops.trace import Trace

__all__ = ["BLOCK", "COMPILE_FLAGS", "SUPPORT_CODE", "Description", "ReductionPlan",
           "description", "has_c_code", "loop_code", "loop_kernel"]

#: values computed at a time (on the stack) along a reduced innermost axis;
#: NumPy's pairwise block size, so its blocks and ours coincide
BLOCK = 128

_KINDS = ("sum", "prod", "mean", "max", "min", "any", "all")


class ReductionPlan:
    """What one reduction node computes, ready to print as C (the C linker's
    loops and the CUDA linker's kernels): the inputs' dtypes, the scalar body
    of a fused composite (``body``, its constants as literals; ``statements``,
    reading them as parameters: ``param_loads`` defines them from the
    loops' ``params``, whose bytes are ``constants``), the value each element
    contributes (``value``, converted to the accumulator), :meth:`combine`,
    :meth:`identity`."""

    def __init__(self, node: Apply):
        op = node.op
        if type(op) is Reduce:
            fn, axes, keepdims = op.fn_name, op.axis, op.keepdims
            x = node.inputs[0]
            self.in_dtypes = [np.dtype(x.dtype)]
            self.body, self.statements, self.param_loads, self.constants = [], [], [], b""
            value, value_dtype = "v0", self.in_dtypes[0]
        elif isinstance(op, FusedReduce):
            fn, axes, keepdims = op.fn_name, op.axis, op.keepdims
            kernel = scalar_kernel(op.elemwise_op.make_node(*node.inputs))
            if any(d is None for d in kernel.in_dtypes):
                raise NotImplementedError("FusedReduce with Python-number inputs")
            self.in_dtypes = list(kernel.in_dtypes)
            # the composite's constants are parameters of the C loops (see
            # elemwise.ScalarKernel); `body` defines them as literals
            self.body = list(kernel.body)
            self.statements = list(kernel.statements)
            self.param_loads = kernel.param_loads()
            self.constants = kernel.param_bytes()
            value, value_dtype = "r", kernel.out_dtype
        else:
            raise NotImplementedError(f"{op} is not a reduction with C code")
        if len(node.outputs) != 1 or fn not in _KINDS:
            raise NotImplementedError(f"{op}: no C code for reduction {fn!r}")
        self.fn = fn
        self.keepdims = keepdims
        self.in_ndims = [v.ndim for v in node.inputs]
        self.full_nd = max(self.in_ndims, default=0)
        self.reduced = [int(d in axes) for d in range(self.full_nd)]
        out = node.outputs[0]
        self.out_dtype = np.dtype(out.dtype)
        self.out_ndim = out.ndim
        sc.check_c_dtypes(str(op), self.in_dtypes + [value_dtype, self.out_dtype])
        self.acc = self.out_dtype          # the accumulator: always the output dtype
        self.value = sc.c_convert(value, value_dtype, self.acc)
        self.atype = sc.c_type(self.acc)
        self.pairwise = fn in ("sum", "mean") and self.acc.kind == "f"

    def combine(self, a: str, b: str) -> str:
        """C expression: accumulator ``a`` combined with value ``b``."""
        kind, t = self.acc.kind, self.atype
        if self.fn in ("sum", "mean", "prod"):
            sym = "*" if self.fn == "prod" else "+"
            if kind in "iu":  # wraps, without C's signed-overflow undefined behaviour
                return f"(({t})((npy_uint64)({a}) {sym} (npy_uint64)({b})))"
            return f"({a} {sym} {b})"
        if self.fn in ("max", "min"):
            cmp = ">" if self.fn == "max" else "<"
            nan = f" || {b} != {b}" if kind == "f" else ""
            return f"(({b} {cmp} {a}{nan}) ? {b} : {a})"
        return f"({a} {'|' if self.fn == 'any' else '&'} {b})"

    def identity(self) -> str:
        """C literal of :meth:`identity_value`."""
        return sc.c_literal(self.identity_value(), self.acc)

    def identity_value(self):
        """The reduction's identity in the accumulator's dtype (as a Python number)."""
        d, fn = self.acc, self.fn
        if fn in ("sum", "mean", "any"):
            value = 0
        elif fn in ("prod", "all"):
            value = 1
        elif d.kind == "f":
            value = -np.inf if fn == "max" else np.inf
        elif d.kind == "b":
            value = 0 if fn == "max" else 1
        else:
            info = np.iinfo(d)
            value = int(info.min) if fn == "max" else int(info.max)
        return value


def has_c_code(node: Apply) -> bool:
    """Whether the node has C code (:func:`loop_code` and :func:`description`)."""
    try:
        ReductionPlan(node)
    except (NotImplementedError, OverflowError):
        return False
    return True


# --------------------------------------------------------------------------
# The generated function


def _broadcast_pointers(plan: ReductionPlan, pad: str, n: str, start: str) -> list[str]:
    """Typed pointers ``p<i>`` to the inputs at element ``start`` of a
    contiguous run of ``n`` (at most BLOCK) elements; an input with stride 0 (a
    broadcast one) is copied to a stack buffer first, so the loop over the
    run stays one vectorizable loop."""
    lines = []
    for i, d in enumerate(plan.in_dtypes):
        t = sc.c_type(d)
        lines += [pad + f"const {t} *p{i} = (const {t} *)ptr[{i + 1}]"
                  f" + (s[{i + 1}] ? {start} : 0);",
                  pad + f"{t} bc{i}[{BLOCK}];",
                  pad + f"if (s[{i + 1}] == 0) {{",
                  pad + f"    for (npy_intp k = 0; k < {n}; k++)",
                  pad + f"        bc{i}[k] = p{i}[0];",
                  pad + f"    p{i} = bc{i};",
                  pad + "}"]
    return lines


def _params(plan: ReductionPlan) -> str:
    """C defining the parameters (a fused composite's constants) from
    ``params``, once per call: loop invariants for the loops after it."""
    return "".join(f"\n    {load}" for load in plan.param_loads) or "\n    (void)params;"


def _values(plan: ReductionPlan, fname: str) -> str:
    """``fname_values(buf, ptr, s, n, contiguous, status, params)``: the values of ``n``
    elements (inputs at ``ptr[1..]`` with strides ``s[1..]``) into ``buf``."""
    nin = len(plan.in_dtypes)
    names = [f"v{i}" for i in range(nin)]
    pad = " " * 8
    voids = " ".join(f"(void){n};" for n in names)
    cont = _broadcast_pointers(plan, pad, "n", "0")
    cont += [pad + "TN_IVDEP", pad + "for (npy_intp k = 0; k < n; k++) {"]
    cont += [pad + "    " + load_element(n, d, f"p{i}[k]") for i, (n, d) in
             enumerate(zip(names, plan.in_dtypes))]
    cont += [pad + "    " + voids] + [pad + "    " + s for s in plan.statements]
    cont += [pad + f"    buf[k] = {plan.value};", pad + "}"]
    strided = [pad + f"const char *q{i} = ptr[{i + 1}];" for i in range(nin)]
    step = "".join(f", q{i} += s[{i + 1}]" for i in range(nin))
    strided += [pad + f"for (npy_intp k = 0; k < n; k++{step}) {{"]
    strided += [pad + "    " + load_element(n, d, f"q{i}", strided=True) for i, (n, d) in
                enumerate(zip(names, plan.in_dtypes))]
    strided += [pad + "    " + voids] + [pad + "    " + s for s in plan.statements]
    strided += [pad + f"    buf[k] = {plan.value};", pad + "}"]
    nl = "\n"
    return f"""
static void {fname}_values({plan.atype} *restrict buf, char *const *ptr, const npy_intp *s,
                           npy_intp n, int contiguous, int *status, const char *params)
{{
    int tn_status = 0;{_params(plan)}
    if (contiguous) {{
{nl.join(cont)}
    }} else {{
{nl.join(strided)}
    }}
    *status |= tn_status;
}}
"""


def _row_reducer(plan: ReductionPlan, fname: str, nops: int) -> str:
    """``fname_row(ptr, s, n, contiguous, status, params)``: the reduction of ``n``
    values, combined into the output element at ``ptr[0]``."""
    t = plan.atype
    if plan.pairwise:
        fold = f"""
/* NumPy's pairwise_sum over the values of n elements */
static {t} {fname}_pairwise(char *const *ptr, const npy_intp *s, npy_intp n, int contiguous,
                            int *status, const char *params)
{{
    if (n <= {BLOCK}) {{
        {t} buf[{BLOCK}], res;
        npy_intp i;
        {fname}_values(buf, ptr, s, n, contiguous, status, params);
        if (n < 8) {{
            res = -0.0;
            for (i = 0; i < n; i++)
                res += buf[i];
            return res;
        }} else {{
            {t} r[8];
            for (int j = 0; j < 8; j++)
                r[j] = buf[j];
            for (i = 8; i < n - (n % 8); i += 8)
                for (int j = 0; j < 8; j++)
                    r[j] += buf[i + j];
            res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for (; i < n; i++)
                res += buf[i];
            return res;
        }}
    }} else {{
        npy_intp n2 = n / 2;
        char *half[{nops}];
        n2 -= n2 % 8;
        for (int j = 0; j < {nops}; j++)
            half[j] = ptr[j] + n2 * s[j];
        return {fname}_pairwise(ptr, s, n2, contiguous, status, params)
               + {fname}_pairwise(half, s, n - n2, contiguous, status, params);
    }}
}}
"""
        pairwise = f"{fname}_pairwise(ptr, s, n, contiguous, status, params)"
        call = f"acc = {plan.combine('acc', pairwise)};"
    else:
        fold = ""
        if plan.fn in ("max", "min"):
            # Exact in any order: a tree of halving passes, each one
            # elementwise (vectorizable) loop.
            fold_buffer = f"""npy_intp w = m;
            while (w > 1) {{
                const npy_intp h = w / 2;
                TN_IVDEP
                for (npy_intp k = 0; k < h; k++)
                    buf[k] = {plan.combine('buf[k]', 'buf[k + w - h]')};
                w -= h;
            }}
            acc = {plan.combine('acc', 'buf[0]')};"""
        else:
            fold_buffer = f"""for (npy_intp k = 0; k < m; k++)
                acc = {plan.combine('acc', 'buf[k]')};"""
        call = f"""{{
        {t} buf[{BLOCK}];
        char *q[{nops}];
        for (int j = 0; j < {nops}; j++)
            q[j] = ptr[j];
        for (npy_intp start = 0; start < n; start += {BLOCK}) {{
            const npy_intp m = n - start < {BLOCK} ? n - start : {BLOCK};
            {fname}_values(buf, q, s, m, contiguous, status, params);
            {fold_buffer}
            for (int j = 1; j < {nops}; j++)
                q[j] += m * s[j];
        }}
    }}"""
    return fold + f"""
static void {fname}_row(char *const *ptr, const npy_intp *s, npy_intp n,
                                       int contiguous, int *status, const char *params)
{{
    {t} acc;
    memcpy(&acc, ptr[0], sizeof acc);
    {call}
    memcpy(ptr[0], &acc, sizeof acc);
}}
"""


def _kept(plan: ReductionPlan, fname: str) -> str:
    """``fname_kept(ptr, s, n, contiguous, status, params)``: ``out[k] = combine(out[k],
    value[k])`` along a kept innermost axis."""
    nin = len(plan.in_dtypes)
    names = [f"v{i}" for i in range(nin)]
    pad = " " * 8
    t = plan.atype
    voids = " ".join(f"(void){n};" for n in names)
    cont = [pad + f"for (npy_intp c0 = 0; c0 < n; c0 += {BLOCK}) {{"]
    pad = " " * 12
    cont += [pad + f"const npy_intp m = n - c0 < {BLOCK} ? n - c0 : {BLOCK};",
             pad + f"{t} *const o = ({t} *)ptr[0] + c0;"]
    cont += _broadcast_pointers(plan, pad, "m", "c0")
    cont += [pad + "TN_IVDEP", pad + "for (npy_intp k = 0; k < m; k++) {"]
    cont += [pad + "    " + load_element(n, d, f"p{i}[k]") for i, (n, d) in
             enumerate(zip(names, plan.in_dtypes))]
    cont += [pad + "    " + voids] + [pad + "    " + s for s in plan.statements]
    cont += [pad + f"    const {t} val = {plan.value};", pad + f"    const {t} a = o[k];",
             pad + f"    o[k] = {plan.combine('a', 'val')};", pad + "}"]
    cont += [" " * 8 + "}"]
    pad = " " * 8
    strided = [pad + "char *q = ptr[0];"] + [pad + f"const char *q{i} = ptr[{i + 1}];"
                                             for i in range(nin)]
    step = ", q += s[0]" + "".join(f", q{i} += s[{i + 1}]" for i in range(nin))
    strided += [pad + f"for (npy_intp k = 0; k < n; k++{step}) {{"]
    strided += [pad + "    " + load_element(n, d, f"q{i}", strided=True) for i, (n, d) in
                enumerate(zip(names, plan.in_dtypes))]
    strided += [pad + "    " + voids] + [pad + "    " + s for s in plan.statements]
    strided += [pad + f"    const {t} val = {plan.value};",
                pad + f"    {t} a; memcpy(&a, q, sizeof a);",
                pad + f"    a = {plan.combine('a', 'val')};",
                pad + "    memcpy(q, &a, sizeof a);", pad + "}"]
    nl = "\n"
    return f"""
static void {fname}_kept(char *const *ptr, const npy_intp *s, npy_intp n,
                                        int contiguous, int *status, const char *params)
{{
    int tn_status = 0;{_params(plan)}
    if (contiguous) {{
{nl.join(cont)}
    }} else {{
{nl.join(strided)}
    }}
    *status |= tn_status;
}}
"""


def loop_code(node: Apply, name: str) -> str:
    """C defining ``name_row``, ``name_kept`` (and for a mean ``name_divide``):
    ``node``'s arithmetic (the runtime's ``tn_rd_row_fn`` and
    ``tn_rd_divide_fn``).  It depends only on the reduction, the dtypes and
    the scalar body, not on the axes or the graph: :mod:`.kernels` compiles
    it once for every graph that needs it.  ``NotImplementedError`` when the
    node has no C code."""
    plan = ReductionPlan(node)
    nops = len(plan.in_dtypes) + 1
    code = _values(plan, name) + _row_reducer(plan, name, nops) + _kept(plan, name)
    if plan.fn == "mean":
        t = plan.atype
        code += f"""
static void {name}_divide(char *p, double count)
{{
    {t} v;
    memcpy(&v, p, sizeof v);
    v = ({t})((double)v / count);
    memcpy(p, &v, sizeof v);
}}
"""
    return no_contract(code)


def loop_kernel(node: Apply) -> "kernels.LoopKernel":
    """``node``'s loops as a :class:`.kernels.LoopKernel` (compiled apart
    from the graph, shared by every graph that needs them)."""
    divide = "divide" if ReductionPlan(node).fn == "mean" else None
    return kernels.LoopKernel(loop_code(node, kernels.PLACEHOLDER), SUPPORT_CODE, COMPILE_FLAGS,
                              struct="tn_rd_loops", members=("row", "kept", divide),
                              capsule=kernels.reduce_capsule_name)


@dataclass(frozen=True)
class Description:
    """What the runtime's ``tn_rd_kernel`` says of a reduction: per operand
    (the output, then the inputs) its dtype, ndim and label; the inputs'
    broadcast ndim and which of its axes are reduced; ``keepdims``; the
    identity as the output dtype's bytes; the ufunc named when an empty
    reduction has no identity (max, min); when loops take threads;
    ``constants``: the values of the loops' parameters (a fused composite's
    numbers)."""

    dtypes: tuple[np.dtype, ...]
    ndims: tuple[int, ...]
    labels: tuple[str, ...]
    full_nd: int
    reduced: tuple[int, ...]
    keepdims: bool
    identity: bytes
    no_identity: str | None
    minsize: int
    threads: int
    constants: bytes = b""


def description(node: Apply) -> Description:
    """``node``'s :class:`Description` (``NotImplementedError`` without C code)."""
    plan = ReductionPlan(node)
    nin = len(plan.in_dtypes)
    par = parallel_settings()
    minsize, threads = (-1, 0) if par is None else (min(max(par.minsize, 1), 2**62), par.threads)
    return Description((plan.out_dtype, *plan.in_dtypes), (plan.out_ndim, *plan.in_ndims),
                       ("output 0", *(input_label(node, i) for i in range(nin))),
                       plan.full_nd, tuple(plan.reduced), bool(plan.keepdims),
                       np.array(plan.identity_value(), dtype=plan.acc).tobytes(),
                       {"max": "maximum", "min": "minimum"}.get(plan.fn), minsize, threads,
                       plan.constants)


# --------------------------------------------------------------------------
# Runtime helpers (C), shared by every generated function

#: C helpers every generated function needs, once per module (include-guarded)
SUPPORT_CODE = _EW_SUPPORT_CODE


# How the C linker runs them (.dispatch): from a description, with loops from
# the shared loop libraries (.kernels).
_ENTRY = CEntry("reduce", sys.modules[__name__], step="reduce")
register_c_op(Reduce, _ENTRY)
register_c_op(FusedReduce, _ENTRY)


# --------------------------------------------------------------------------
# trace: a compiled step of its own (C in the graph's module, see .dispatch)


class TraceC:
    """The C of :class:`~tenure.symbolic.ops.trace.Trace`: one pass down the
    diagonal, by strides (any layout), summed in the output's type (integers
    in ``npy_uint64``, which wraps as NumPy's sums do)."""

    def has_c_code(self, node: Apply) -> bool:
        return (node.inputs[0].dtype in C_DTYPES and node.outputs[0].dtype in C_DTYPES
                and abs(node.op.offset) < 2**31)   # i + k never overflows

    def c_function(self, node: Apply, fname: str) -> str:
        x, out = node.inputs[0], node.outputs[0]
        name, label, k = c_string(fname), c_string(input_label(node, 0)), node.op.offset
        ctype, otype = C_TYPES[x.dtype], C_TYPES[out.dtype]
        acc = otype if out.type.numpy_dtype.kind == "f" else "npy_uint64"
        return f"""
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    (void)shape;   /* a 0-d result */
    return tn_bl_check({name}, {label}, inputs[0], {typenum(x.dtype)}, {c_string(x.dtype)}, 2);
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    const npy_intp none[1] = {{0}};
    npy_intp i, n, m, s0, s1, k = {k};
    const char *p;
    {acc} acc = 0;
    {otype} result;
    if ({fname}_shape(inputs, NULL) < 0
            || tn_bl_check_out({name}, outputs[0], {typenum(out.dtype)}, {c_string(out.dtype)},
                               0, none) < 0)
        return -1;
    n = PyArray_DIM(inputs[0], 0);
    m = PyArray_DIM(inputs[0], 1);
    s0 = PyArray_STRIDE(inputs[0], 0);
    s1 = PyArray_STRIDE(inputs[0], 1);
    p = PyArray_BYTES(inputs[0]);
    /* x[i, i + k] for the rows i where both indices are in range */
    for (i = k < 0 ? -k : 0; i < n && i + k < m; i++) {{
        {ctype} v;
        memcpy(&v, p + i * s0 + (i + k) * s1, sizeof v);   /* any alignment */
        acc += ({acc})v;
    }}
    result = ({otype})acc;
    memcpy(PyArray_BYTES(outputs[0]), &result, sizeof result);
    return 0;
}}
"""


register_c_op(Trace, CEntry("trace", TraceC()))
