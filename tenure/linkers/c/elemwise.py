"""C code for elementwise nodes: ``Elemwise`` over any scalar op with C code,
including ``Composite`` (a fused scalar graph), in place or not.

What the C linker uses:

- :func:`has_c_code` ``(node) -> bool``: whether the node has C code.
- :func:`loop_kernel` ``(node)``: the node's arithmetic, two small loops over
  one block (:func:`loop_code`), which :mod:`.kernels` compiles once into a
  loop library for every graph that needs it; :data:`SUPPORT_CODE` (the
  scalar helpers) and :data:`COMPILE_FLAGS` (speed only, see below) go with it.
- :func:`description` ``(node)``: what the C runtime's loop driver,
  ``tn_ew_run`` (``src/elemwise.c``), needs to know of the operands, and the
  values of the node's constants; the schedule interpreter hands it over
  with the loops.

Constants are data, not code: the node's Python numbers (its weak inputs,
the constants of a Composite) are the loops' *parameters*, converted to
their computation dtypes when the graph is compiled and passed in the
description as bytes (``ScalarKernel.param_bytes``), which the loops read
once per block before their loop (``TN_PARAM``: loop invariants, as literals
were).  So ``x * 1.5`` and ``x * 2.5`` run the same compiled loops, and a
graph compiled again with other numbers builds no new loop library.  A
number stays a literal only where its value changes the code
(:func:`.scalar_code.c_weak_in_code`: float powers the compiler folds or
NumPy computes as a square root, integer divisors; and comparisons
:func:`.scalar_code.c_fold` decides alone).  Either way the value is
converted exactly as NumPy converts it, so the results are the same bits.

The kernel (``tn_ew_run`` with a node's description and loops) -- its
contract with the caller:

- operand 0 is the output, then the inputs read from memory; positions
  holding a Python number (a weakly typed constant, ``Elemwise.weak_inputs``)
  are not operands: the loops read them from the description's constants.
- The output has the output's full shape and dtype (any strides, including
  negative ones).  For an in-place op (``destroy_map``) it may be the
  destroyed input itself when that has the output's shape: computing element
  ``k`` reads every input at ``k`` before writing ``k``, so an output that
  *is* an input (same data, shape and strides) is safe.  An input that
  partially overlaps the output any other way (a shifted or reversed view of
  it, or a broadcast one) is not: the caller (the schedule interpreter)
  copies such an input first.
- Inputs broadcast to the output shape with NumPy's rules (stride 0 on
  broadcast axes).  Dtypes, ndims, the broadcast and the output's writeability
  are checked on every call (cheap; a wrong array must not crash the
  interpreter): a mismatch returns -1 with ``TypeError``/``ValueError`` set.
- Returns 0, or -1 with a Python exception set (the caller holds the GIL).
  The only value error is NumPy's: an integer to a negative integer power
  (``ValueError``).  Integer division or remainder by zero gives 0 like NumPy,
  without NumPy's RuntimeWarning; floating-point errors are silent too.

Loops: when every operand is aligned, C-contiguous and of the output's shape,
one flat loop (``GCC ivdep``: no dependence between elements, so in place
vectorizes too).  Otherwise length-1 axes go, axes are ordered by the output's
strides and merged where every operand allows, and the innermost axis runs the
same typed loop when it is contiguous for all operands -- or contiguous for
some and one repeated element (stride 0, an ``(n, 1)`` operand) for the
others, which are then copied out into a row buffer first -- else a strided
loop with ``memcpy`` loads (which copes with unaligned arrays).

Threads: the innermost rows are cut into blocks of :data:`BLOCK` elements, the
work items, numbered row by row.  With OpenMP (``config.openmp``, see
:func:`parallel_settings`) a loop over at least ``config.openmp_elemwise_minsize``
elements is cut into chunks of consecutive items, about eight per thread,
which the threads take as they come (``schedule(dynamic)``: on a machine
shared with other processes, a thread that gets no core for a while does not
hold up the loop); each thread has its own row buffer.  Otherwise one thread
runs them all.  The blocks do
not depend on the thread count and a block is a multiple of every vector width
from a row's start, so every element takes the same path through the same
code (vector body or scalar tail, libmvec or libm) whatever the number of
threads: the results are identical to a serial build's, bit for bit.  The
settings are in the node's description (read from the config when the graph
is compiled); the loops themselves have no OpenMP in them at all.  The child of a fork()
from a process that ran threads runs serially: GNU libgomp's thread pool does
not survive fork (see ``tn_omp_usable``).

Floating point: contraction into FMAs would round differently from NumPy, so
the code turns it off (``#pragma GCC optimize``, ``STDC FP_CONTRACT``).  With
:data:`COMPILE_FLAGS`, exp/log/sin/cos/pow/expm1/log1p/tanh/erf in vectorized
loops call glibc's libmvec (a few ulps, like NumPy's own SIMD math; libm
otherwise, within an ulp), so like NumPy's results they may differ by an ulp
between a contiguous and a strided layout.  The flags change nothing else:
without ``errno`` sqrt vectorizes, without trapping math the NaN-aware selects
(maximum, relu, where) if-convert.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from tenure.linkers.c import kernels
from tenure.linkers.c.cgen import comment, input_label, no_contract
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.linkers.c import scalar_code as sc
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.composite import Composite, format_steps
from tenure.symbolic.ops.elemwise import Elemwise

__all__ = ["BLOCK", "COMPILE_FLAGS", "SUPPORT_CODE", "Description", "Parallel", "description",
           "has_c_code", "loop_code", "loop_kernel", "parallel_settings", "step_workspace"]

#: flags to compile the generated code with (see the module doc): speed only,
#: and ``TN_VECTOR_MATH`` lets transcendental functions vectorize (glibc's
#: libmvec: a few ulps, where libm is within one)
COMPILE_FLAGS = ("-fno-math-errno", "-fno-trapping-math", "-DTN_VECTOR_MATH", "-lm")

#: elements per work item of a loop (a row is cut into blocks of this many):
#: a multiple of every vector width, and of 64 bytes for every dtype, so that
#: cutting changes no element's path through a vectorized loop (see the module doc)
BLOCK = 4096


# --------------------------------------------------------------------------
# The scalar body: from a node to C statements computing one element


@dataclass
class _Value:
    """An operand of a scalar step: a C variable of ``dtype``, or a Python
    number (``shown``: how the loop's comment shows it, once it is C)."""

    ident: str | None = None
    dtype: np.dtype | None = None
    number: object = None
    shown: str | None = None

    @property
    def probe(self):
        """What ScalarOp's dtype rules take for this operand."""
        return self.number if self.ident is None else np.empty((0,), self.dtype)


class _Shown:
    """A constant of a Composite as a loop's comment prints it (its repr)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


@dataclass
class ScalarKernel:
    """What one elementwise node computes, ready to print as C.

    ``statements`` compute ``r`` from the inputs ``v<i>`` and the parameters
    ``tn_c<k>``: the node's Python numbers, converted to their computation
    dtypes (``params``, one 0-d array each), which the loops read from the
    node's description (:func:`param_bytes`) -- so the statements, hence the
    loops, do not depend on the numbers' values.  ``body`` is the same with
    the parameters defined as literals first (for code that takes no
    parameters: the CUDA linker's kernels)."""

    in_dtypes: list            # per node input: np.dtype, or None when it is a Python number
    in_ndims: list[int]
    out_dtype: np.dtype
    out_ndim: int
    statements: list[str] = field(default_factory=list)
    params: list = field(default_factory=list)
    label: str = ""            # the scalar op as the loop's comment shows it
    _count: int = 0

    def temp(self, dtype: np.dtype, expr: str) -> str:
        name = f"t{self._count}"
        self._count += 1
        self.statements.append(f"const {sc.c_type(dtype)} {name} = {expr};")
        return name

    def param(self, value: np.ndarray) -> str:
        """A new parameter holding ``value`` (0-d, of its C dtype): its C name."""
        self.params.append(value)
        return f"tn_c{len(self.params) - 1}"

    @property
    def body(self) -> list[str]:
        """The statements, after the parameters' definitions as literals."""
        return [f"const {sc.c_type(v.dtype)} tn_c{k} = {sc.c_literal(v, v.dtype)};"
                for k, v in enumerate(self.params)] + self.statements

    def param_loads(self) -> list[str]:
        """C statements defining each parameter ``tn_c<k>`` from ``params`` (the
        bytes of :func:`param_bytes`; a loop's ``const char *params``)."""
        return [f"TN_PARAM({sc.c_type(v.dtype)}, tn_c{k}, params, {offset});"
                for k, (v, offset) in enumerate(zip(self.params, _param_offsets(self.params)))]

    def param_bytes(self) -> bytes:
        """The parameters' values as the loops read them: each at an offset
        that is a multiple of its itemsize, in native byte order."""
        offsets = _param_offsets(self.params)
        data = bytearray(offsets[-1] + self.params[-1].itemsize if self.params else 0)
        for v, offset in zip(self.params, offsets):
            data[offset:offset + v.itemsize] = v.tobytes()
        return bytes(data)


def _param_offsets(params: list) -> list[int]:
    offsets, end = [], 0
    for v in params:
        end = -(-end // v.itemsize) * v.itemsize
        offsets.append(end)
        end += v.itemsize
    return offsets


def scalar_kernel(node: Apply) -> ScalarKernel:
    """The C body of an Elemwise node; ``NotImplementedError`` when some step
    or dtype has no C code.  Worked out once per op and types (the linker
    asks several times per node); the result is shared: read it, never
    change it."""
    op = node.op
    if not isinstance(op, Elemwise):
        raise NotImplementedError(f"{op} is not an Elemwise op")
    if len(node.outputs) != 1:
        raise NotImplementedError(f"{op}: {len(node.outputs)} outputs (one expected)")
    out = node.outputs[0]
    # Equal ops may hold other Python numbers (weak inputs are not props), and
    # equal numbers may print differently (0.0 and -0.0): both are in the key.
    exact = tuple(repr(value) for _, _, value in op.weak_inputs)
    return _scalar_kernel(op, op.weak_inputs, exact,
                          tuple((v.dtype, v.ndim) for v in node.inputs), (out.dtype, out.ndim))


@functools.lru_cache(maxsize=4096)
def _scalar_kernel(op: Elemwise, weak_inputs: tuple, exact: tuple, inputs: tuple,
                   output: tuple) -> ScalarKernel:
    weak = {i: value for i, _, value in weak_inputs}
    kernel = ScalarKernel(in_dtypes=[None if i in weak else np.dtype(dtype)
                                     for i, (dtype, _) in enumerate(inputs)],
                          in_ndims=[ndim for _, ndim in inputs],
                          out_dtype=np.dtype(output[0]), out_ndim=output[1])
    sc.check_c_dtypes(str(op), [d for d in kernel.in_dtypes if d is not None]
                      + [kernel.out_dtype])
    args = [_Value(number=weak[i]) if i in weak else _Value(f"v{i}", kernel.in_dtypes[i])
            for i in range(len(inputs))]
    # NumPy's power by a 0-d exponent takes its scalar path (sqrt for 0.5):
    # only for a power node of its own (inside a Composite, as in its perform,
    # the exponent is an array like any other operand).
    by_a_scalar = (op.scalar_op.name == "power" and 1 not in weak and inputs[1][1] == 0)
    result = _emit(op.scalar_op, args, kernel, by_a_scalar)
    value = (result.ident if result.ident is not None
             else _constant(kernel, op.scalar_op, 0, result.number, kernel.out_dtype)[0])
    src = result.dtype if result.ident is not None else kernel.out_dtype
    kernel.statements.append(f"const {sc.c_type(kernel.out_dtype)} r = "
                             f"{sc.c_convert(value, src, kernel.out_dtype)};")
    if not kernel.label:
        kernel.label = str(op.scalar_op)
    return kernel


def _constant(kernel: ScalarKernel, op: ps.ScalarOp, position: int, number,
              dtype) -> tuple[str, bool]:
    """``(C, is_param)`` for the Python number ``number``, input ``position``
    of ``op``, in its computation dtype: a literal where the value changes
    the code (:func:`.scalar_code.c_weak_in_code`), else a new parameter."""
    if sc.c_weak_in_code(op, position, number, dtype):
        return sc.c_weak_literal(op, position, number, dtype), False
    return kernel.param(sc.c_weak_value(op, position, number, dtype)), True


def _emit(op: ps.ScalarOp, args: list[_Value], kernel: ScalarKernel,
          power_by_a_scalar: bool = False) -> _Value:
    """Append the statements computing ``op(*args)`` (a Composite step by step;
    ``power_by_a_scalar``: ``op`` is a power whose exponent is 0-d)."""
    if isinstance(op, Composite):
        temps: list[_Value] = []
        shown = []    # the steps, each constant shown as its C (a parameter's name)
        for step_op, refs in op.steps:
            step_args = [args[v] if k == "i" else temps[v] if k == "t" else _Value(number=v)
                         for k, v in refs]
            temps.append(_emit(step_op, step_args, kernel))
            shown.append((step_op, tuple(
                ("c", _Shown(a.shown or repr(a.number))) if k == "c" else (k, v)
                for (k, v), a in zip(refs, step_args))))
        if not kernel.label:
            kernel.label = f"Composite{{{format_steps(op.nin, tuple(shown))}}}"
        return temps[-1]
    probes = [a.probe for a in args]
    out_dtype = np.dtype(op.output_dtype(probes))
    folded = sc.c_fold(op, probes)
    if folded is not None:
        return _Value(kernel.temp(out_dtype, sc.c_literal(folded, out_dtype)), out_dtype)
    dtypes = sc.c_input_dtypes(op, probes)
    names = []
    for position, (arg, dtype) in enumerate(zip(args, dtypes)):
        if arg.ident is None:
            code, is_param = _constant(kernel, op, position, arg.number, dtype)
            arg.shown = code if is_param else None
            names.append(code)
            continue
        converted = sc.c_convert(arg.ident, arg.dtype, dtype)
        # Templates may repeat an argument: give a conversion a name of its own.
        names.append(arg.ident if converted == arg.ident else kernel.temp(dtype, converted))
    if power_by_a_scalar and out_dtype.kind == "f":
        code = sc.float_power_by_a_scalar(names, out_dtype)
    else:
        code = sc.c_code(op, names, dtypes, out_dtype)
    return _Value(kernel.temp(out_dtype, code), out_dtype)


def has_c_code(node: Apply) -> bool:
    """Whether the node has C code (:func:`loop_code` and :func:`description`)."""
    try:
        scalar_kernel(node)
    except (NotImplementedError, OverflowError):
        return False
    return True


# --------------------------------------------------------------------------
# The loop


def _operands(kernel: ScalarKernel) -> tuple[list[int], list]:
    """The inputs read from memory (not the Python numbers), and the dtypes
    of the loop's operands: the output, then those inputs."""
    read = [i for i, d in enumerate(kernel.in_dtypes) if d is not None]
    return read, [kernel.out_dtype] + [kernel.in_dtypes[i] for i in read]


def loop_code(node: Apply, name: str) -> str:
    """C defining ``name_typed`` and ``name_strided``: ``node``'s arithmetic
    over one block (the runtime's ``tn_ew_typed_fn`` and ``tn_ew_strided_fn``).
    It depends only on the scalar expression and the dtypes, never on the
    graph, nor on the values of the node's Python numbers (parameters, read
    from ``params`` before the loop; see :class:`ScalarKernel`): :mod:`.kernels`
    compiles it once for every graph that needs it.  Needs
    :data:`SUPPORT_CODE` earlier; ``NotImplementedError`` when the node has
    no C code."""
    kernel = scalar_kernel(node)
    read, dtypes = _operands(kernel)
    # One typed loop serves contiguous rows and filled ones (rows[j] is at[j]
    # when contiguous): each copy of a vectorized loop costs compile time.
    typed, strided = _inner_loops(kernel, read, dtypes)
    inner_strides = " ".join(f"const npy_intp s{j} = strides[{j}];" for j in range(len(dtypes)))
    # Loaded once per block, outside the loops: loop invariants, as literals were.
    params = "".join(f"\n    {load}" for load in kernel.param_loads()) or "\n    (void)params;"
    return no_contract(f"""
/* {comment(kernel.label)} on {", ".join(d.name for d in dtypes[1:])} */
static int {name}_typed(char *const *at, char *const *rows, npy_intp m, const char *params)
{{
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
    int tn_status = 0;{params}
{typed}
    return tn_status;
}}

static int {name}_strided(char *const *at, const npy_intp *strides, npy_intp m,
                          const char *params)
{{
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
    int tn_status = 0;{params}
    {inner_strides}
{strided}
    return tn_status;
}}
""")


def loop_kernel(node: Apply) -> "kernels.LoopKernel":
    """``node``'s loops as a :class:`.kernels.LoopKernel` (compiled apart
    from the graph, shared by every graph that needs them)."""
    return kernels.LoopKernel(loop_code(node, kernels.PLACEHOLDER), SUPPORT_CODE, COMPILE_FLAGS)


@dataclass(frozen=True)
class Description:
    """What the runtime's ``tn_ew_kernel`` says of a node's loop: the inputs
    read from memory (operand ``j + 1`` is input ``read[j]``), per operand
    (the output first) its dtype, ndim and label, the widest itemsize, when
    the loop takes threads (``minsize`` -1: never), and ``constants``: the
    values of the loops' parameters (:meth:`ScalarKernel.param_bytes`)."""

    read: tuple[int, ...]
    dtypes: tuple[np.dtype, ...]
    ndims: tuple[int, ...]
    labels: tuple[str, ...]
    width: int
    minsize: int
    threads: int
    constants: bytes = b""


def description(node: Apply) -> Description:
    """``node``'s :class:`Description` (``NotImplementedError`` without C code);
    the thread settings are the config's now."""
    kernel = scalar_kernel(node)
    read, dtypes = _operands(kernel)
    par = parallel_settings()
    minsize, threads = (-1, 0) if par is None else (min(max(par.minsize, 1), 2**62), par.threads)
    return Description(tuple(read), tuple(dtypes),
                       (kernel.out_ndim,) + tuple(kernel.in_ndims[i] for i in read),
                       ("output 0",) + tuple(input_label(node, i) for i in read),
                       max(d.itemsize for d in dtypes), minsize, threads,
                       kernel.param_bytes())


def row_operands(node: Apply) -> tuple[tuple[int, ...], int]:
    """``(inputs read, widest itemsize)`` of the loop :func:`loop_code`
    writes for ``node`` (the inputs given as Python numbers are not read):
    what :func:`row_buffer_bytes` needs, worked out once per node."""
    read, dtypes = _operands(scalar_kernel(node))
    return tuple(read), max(d.itemsize for d in dtypes)


def row_buffer_bytes(operands: tuple[tuple[int, ...], int], in_shapes: list,
                     out_shape: tuple | None) -> int:
    """Bytes of the row buffers the runtime's loop driver allocates for these
    (planned) shapes, given the node's :func:`row_operands`: where an input
    repeats one element along the innermost axis of the loop (after
    ``tn_ew_layout`` merged the axes it can), each thread copies it out into
    a buffer of one block of every operand, so that the typed loop still
    runs.  The plan sees C-contiguous arrays; other layouts may take another
    path, without the buffer."""
    read, width = operands
    if not out_shape:
        return 0
    shapes = [in_shapes[i] for i in read]
    if any(shape is None for shape in shapes):
        return 0
    n, repeated = planned_row(tuple(out_shape), [tuple(shape) for shape in shapes])
    if not repeated or n <= 1:
        return 0
    return min(n, BLOCK) * width * (1 + len(read)) * loop_threads(int(np.prod(out_shape)))


def planned_row(out_shape: tuple, in_shapes: list[tuple]) -> tuple[int, bool]:
    """``(n, repeated)`` as ``tn_ew_layout`` works them out for C-contiguous
    operands: the length of the loop's innermost axis once axes that every
    operand steps through as one are merged, and whether some input repeats
    one element along it (stride 0)."""
    if all(shape == out_shape for shape in in_shapes):
        return int(np.prod(out_shape)), False      # the flat path: one row
    axes = [d for d, length in enumerate(out_shape) if length != 1]
    if not axes:
        return 1, False
    strides = [_element_strides(out_shape, out_shape, axes)]
    strides += [_element_strides(shape, out_shape, axes) for shape in in_shapes]
    lengths = [out_shape[axes[0]]]
    inner = [s[0] for s in strides]
    for k in range(1, len(axes)):
        length = out_shape[axes[k]]
        if all(s[k - 1] == s[k] * length for s in strides):
            lengths[-1] *= length
        else:
            lengths.append(length)
        inner = [s[k] for s in strides]
    return lengths[-1], any(stride == 0 for stride in inner[1:])


def _element_strides(shape: tuple, out_shape: tuple, axes: list[int]) -> list[int]:
    """Strides in elements of a C-contiguous array of ``shape`` over the
    output's ``axes`` (0 where it is broadcast)."""
    offset = len(out_shape) - len(shape)
    step, own = 1, {}
    for d in range(len(shape) - 1, -1, -1):
        own[d + offset] = step if shape[d] != 1 else 0
        step *= shape[d]
    return [own.get(d, 0) for d in axes]


def loop_threads(size: int) -> int:
    """The threads a generated loop over ``size`` elements runs on (see
    the runtime's ``tn_ew_threads``): OpenMP's default is ``OMP_NUM_THREADS`` or the
    CPUs this process may run on."""
    par = parallel_settings()
    if par is None or size < par.minsize:
        return 1
    if par.threads:
        return par.threads
    requested = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(requested) if requested.isdigit() and int(requested) > 0 \
        else len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Parallel:
    """How generated loops use threads, read from the config when the code is
    generated (so a change of the config changes the source, hence the cache
    key): run on ``threads`` threads (0: OpenMP's default) when the loop
    covers at least ``minsize`` elements."""

    minsize: int
    threads: int


def parallel_settings() -> Parallel | None:
    """The current :class:`Parallel` settings, or None for serial code (no
    OpenMP in the source at all): ``config.openmp`` is off, or the compiler
    cannot build OpenMP code (see :func:`compiler.openmp_enabled`)."""
    from tenure import config
    from tenure.linkers.c import compiler
    if not compiler.openmp_enabled():
        return None
    return Parallel(config.openmp_elemwise_minsize, config.openmp_threads)


def _inner_loops(kernel: ScalarKernel, read: list[int], dtypes: list) -> tuple[str, str]:
    """The loop over one block (``m`` elements) twice: typed over aligned rows
    (the one the compiler vectorizes; input pointers from ``rows``, the
    output's from ``at``), and over byte strides with memcpy loads from ``at``."""
    types = [sc.c_type(d) for d in dtypes]
    names = [f"v{i}" for i in read]
    contiguous = _loop(
        [f"{types[0]} *const o0 = ({types[0]} *)at[0];"]
        + [f"const {types[j]} *const p{j} = (const {types[j]} *)rows[{j}];"
           for j in range(1, len(dtypes))],
        [load_element(v, d, f"p{j}[k]")
         for j, (v, d) in enumerate(zip(names, dtypes[1:]), 1)],
        names, kernel.statements, "o0[k] = r;", vectorize=True)
    strided = _loop(
        [f"char *q{j} = at[{j}];" for j in range(len(dtypes))],
        [load_element(v, d, f"q{j}", strided=True)
         for j, (v, d) in enumerate(zip(names, dtypes[1:]), 1)],
        names, kernel.statements, "memcpy(q0, &r, sizeof r);", vectorize=False,
        step=", ".join(f"q{j} += s{j}" for j in range(len(dtypes))))
    return contiguous, strided


def load_element(name: str, dtype: np.dtype, source: str, strided: bool = False) -> str:
    """Read one input element into ``name``.  Bools are normalised to 0/1: a
    bool array viewed from other bytes may hold any nonzero value."""
    ctype = sc.c_type(dtype)
    if strided:
        read = f"{ctype} {name}; memcpy(&{name}, {source}, sizeof {name});"
        return read + (f" {name} = {name} != 0;" if dtype.kind == "b" else "")
    return f"const {ctype} {name} = {source}{' != 0' if dtype.kind == 'b' else ''};"


def _loop(setup: list[str], loads: list[str], names: list[str], body: list[str], store: str,
          vectorize: bool, step: str = "") -> str:
    """One inner loop over the ``m`` elements of a block: load, compute, store."""
    pad = " " * 4
    lines = [pad + s for s in setup]
    if vectorize:
        lines.append(pad + "TN_IVDEP")
    lines.append(pad + f"for (npy_intp k = 0; k < m; k++{', ' + step if step else ''}) {{")
    lines += [pad + "    " + s for s in loads]
    if names:  # the scalar code may ignore an input (isnan of an int)
        lines.append(pad + "    " + " ".join(f"(void){n};" for n in names))
    lines += [pad + "    " + s for s in body]
    lines.append(pad + "    " + store)
    lines.append(pad + "}")
    return "\n".join(lines)


#: the scalar helpers every generated function needs, once per module, after
#: the runtime's API (:func:`.runtime.header`, where the loop driver is)
SUPPORT_CODE = no_contract(sc.support_code())


def step_workspace(node: Apply, shapes, memo: dict) -> int:
    """A C elementwise step's temporaries for the memory plan: its loop's row
    buffers (:func:`row_buffer_bytes`); ``memo`` keeps each node's operands."""
    operands = memo.get(node)
    if operands is None:
        operands = memo[node] = row_operands(node)
    return row_buffer_bytes(operands, [shapes.get(v) for v in node.inputs],
                            shapes.get(node.outputs[0]))


# How the C linker runs Elemwise (.dispatch): from a description, with loops
# from the shared loop libraries (.kernels).
register_c_op(Elemwise, CEntry("elemwise", sys.modules[__name__], step="elemwise",
                               workspace=step_workspace))
