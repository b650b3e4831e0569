"""CUDA C for reductions: ``Reduce`` (sum, prod, mean, max, min, any, all
over any axes, keepdims or not) and ``FusedReduce`` (sum, prod, max or min of
an elementwise ``Composite`` of the inputs, each element computed where it
is read: the elementwise result is never stored).

What each node reduces, its identity and how two partial results combine
come from the C linker's :class:`~tenure.linkers.c.reduce.ReductionPlan`,
and a fused composite's arithmetic from the scalar table, as for
:mod:`.elemwise`: one definition for both linkers.

A node's :class:`ReduceKernel` source holds two strategies, each for every
number of kept axes ``K`` (1 to the kept axes the node has) and reduced axes
``R`` (1 to the reduced axes it has), named by :func:`variant_name`:

- ``block``: one block per output element (a grid-stride loop over them);
  its threads take the reduced elements ``t, t + threads, ...``, each
  accumulating its own partial result, then the block combines the
  partials as a tree in shared memory (``__syncthreads`` between levels;
  the block's threads must be a power of two, at most :data:`MAX_THREADS`).
  For long reductions.
- ``thread``: one thread per output element, which reduces its elements in
  order.  For short reductions over many outputs (no synchronisation).

The contract of every variant:

- Arguments: the output's data pointer, each input's, the ``int *`` for
  error bits (a fused composite's: an integer to a negative power), the
  number of outputs ``n_out`` and of reduced elements per output ``n_red``,
  the ``K`` kept lengths, the ``R`` reduced lengths (outermost first), then
  the kept byte strides of every operand (the output first), then the
  reduced byte strides of every input.  64-bit integers throughout.
- The output holds ``n_out`` elements (no reduced axis); it must not
  overlap an input.  Operands are aligned to their itemsize.  Inputs
  broadcast (stride 0).
- Each output element is the reduction of its ``n_red`` values in the
  output dtype (the accumulator, as NumPy's), starting from the identity:
  ``sum`` of nothing is 0, ``prod`` 1, ``any`` false, ``all`` true, ``mean``
  ``0/0`` = NaN; ``max``/``min`` of nothing is the caller's to refuse.
  ``mean`` divides the sum by ``n_red`` in double precision.  ``max``/``min``
  propagate NaN.  Floating-point sums add in another order than NumPy's
  pairwise summation (the tree of partials): equal within both methods'
  error bounds, not bit for bit; integer sums, ``max``/``min``, ``any``/``all``
  are exact.

:mod:`.layout` (:func:`~.layout.reduction_layout`) works out the lengths and
strides; :mod:`.launch` (``run_reduce``) picks the strategy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tenure.linkers.c import scalar_code as sc
from tenure.linkers.c.cgen import comment
from tenure.linkers.c.reduce import ReductionPlan
from tenure.linkers.cuda.kernel_source import add_offsets, at, host_launcher
from tenure.symbolic.graph import Apply

__all__ = ["MAX_THREADS", "STRATEGIES", "ReduceKernel", "has_cuda_code", "reduce_kernel",
           "reduce_parameters", "variant_name"]

#: the most threads a ``block`` launch may have (the shared-memory tree's size)
MAX_THREADS = 256
#: the two ways a kernel reduces (see the module doc)
STRATEGIES = ("block", "thread")


def variant_name(name: str, strategy: str, kept: int, reduced: int) -> str:
    """The kernel of ``name`` for ``strategy`` over ``kept`` and ``reduced`` axes."""
    return f"{name}_{strategy}_k{kept}_r{reduced}"


@dataclass(frozen=True)
class ReduceKernel:
    """One reduction node's kernels (``source``, without the prelude).

    ``inputs``: how many inputs (all read from memory); ``dtypes``: of the
    output, then the inputs; ``max_kept`` / ``max_reduced``: the most axes
    of each kind a launch may have; ``fn``: the reduction's name;
    ``uses_status``: the kernels may set error bits."""

    name: str
    source: str
    inputs: int
    dtypes: tuple[np.dtype, ...]
    max_kept: int
    max_reduced: int
    fn: str
    uses_status: bool



def has_cuda_code(node: Apply) -> bool:
    """Whether ``node`` is a reduction with kernels here."""
    try:
        ReductionPlan(node)
    except (NotImplementedError, OverflowError):
        return False
    return True


def reduce_kernel(node: Apply, name: str | None = None) -> ReduceKernel:
    """``node``'s kernels (``NotImplementedError`` when it has no C code)."""
    plan = ReductionPlan(node)
    n_reduced = sum(plan.reduced)
    max_kept = max(1, plan.full_nd - n_reduced)
    max_reduced = max(1, n_reduced)
    dtypes = (plan.out_dtype,) + tuple(plan.in_dtypes)
    parts = [_variant(plan, strategy, k, r)
             for strategy in STRATEGIES
             for k in range(1, max_kept + 1) for r in range(1, max_reduced + 1)]
    text = "\n".join(parts)
    if name is None:
        name = "tn_rd_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    header = f"/* {comment(str(node.op))} on {', '.join(d.name for d in dtypes[1:])} */"
    source = header + "\n" + text.replace("@NAME@", name)
    return ReduceKernel(name, source, len(plan.in_dtypes), dtypes, max_kept, max_reduced,
                        plan.fn, any("tn_status" in line for line in plan.body))


def reduce_parameters(inputs: int, kept: int, reduced: int) -> list[str]:
    """The C parameters of a variant, in the contract's order."""
    operands = inputs + 1
    return (["char *tn_p0"] + [f"const char *tn_p{j}" for j in range(1, operands)]
            + ["int *tn_error", "long long tn_n_out", "long long tn_n_red"]
            + [f"long long tn_k{a}" for a in range(kept)]
            + [f"long long tn_r{a}" for a in range(reduced)]
            + [f"long long tn_ks{j}_{a}" for j in range(operands) for a in range(kept)]
            + [f"long long tn_rs{j}_{a}" for j in range(1, operands) for a in range(reduced)])


def _value(plan: ReductionPlan) -> list[str]:
    """Statements loading each input at ``tn_o<j>`` and computing ``tn_v``,
    the element's value in the accumulator's dtype."""
    lines = []
    for j, dtype in enumerate(plan.in_dtypes, 1):
        ctype = sc.c_type(dtype)
        normal = " != 0" if dtype.kind == "b" else ""
        lines.append(f"const {ctype} v{j - 1} = {at('const ' + ctype, f'tn_p{j}', f'tn_o{j}')}"
                     f"{normal}; "
                     f"(void)v{j - 1};")
    lines += list(plan.body)
    lines.append(f"const {plan.atype} tn_v = {plan.value};")
    return lines


def _store(plan: ReductionPlan, acc: str) -> str:
    """The statement writing accumulator ``acc`` to the output at ``tn_out``."""
    value = acc
    if plan.fn == "mean":
        value = f"({plan.atype})((double)({acc}) / (double)tn_n_red)"
    return f"{at(plan.atype, 'tn_p0', 'tn_out')} = {value};"


def _variant(plan: ReductionPlan, strategy: str, kept: int, reduced: int) -> str:
    inputs = len(plan.in_dtypes)
    operands = inputs + 1
    params = reduce_parameters(inputs, kept, reduced)
    kernel = variant_name("@NAME@", strategy, kept, reduced)
    kept_offsets = add_offsets("tn_o", "tn_k", "tn_ks", range(operands), kept, "tn_kk")
    # Each element starts from its output's input offsets (tn_base<j>).
    element = ["{", "    long long " + ", ".join(f"tn_o{j} = tn_base{j}"
                                             for j in range(1, operands)) + ";"]
    element += ["    " + s for s in add_offsets("tn_r", "tn_r", "tn_rs", range(1, operands),
                                            reduced, "tn_rr")]
    element += ["    " + s for s in _value(plan)]
    element += [f"    tn_acc = {plan.combine('tn_acc', 'tn_v')};", "}"]
    head = (["long long " + ", ".join(f"tn_o{j} = 0" for j in range(operands)) + ";"]
            + kept_offsets
            + [f"const long long tn_base{j} = tn_o{j};" for j in range(1, operands)]
            + ["const long long tn_out = tn_o0;", f"{plan.atype} tn_acc = {plan.identity()};"])
    if strategy == "thread":
        outer = ("for (long long tn_o = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                 "tn_o < tn_n_out; tn_o += (long long)blockDim.x * gridDim.x)")
        loop = (["for (long long tn_r = 0; tn_r < tn_n_red; tn_r++)"] + element
                + [_store(plan, "tn_acc")])
        shared = ""
    else:
        outer = "for (long long tn_o = blockIdx.x; tn_o < tn_n_out; tn_o += gridDim.x)"
        tree = plan.combine("tn_shared[threadIdx.x]", "tn_shared[threadIdx.x + tn_s]")
        loop = (["for (long long tn_r = threadIdx.x; tn_r < tn_n_red; tn_r += blockDim.x)"]
                + element
                + ["tn_shared[threadIdx.x] = tn_acc;", "__syncthreads();",
                   "for (unsigned int tn_s = blockDim.x / 2; tn_s > 0; tn_s /= 2) {",
                   f"    if (threadIdx.x < tn_s) tn_shared[threadIdx.x] = {tree};",
                   "    __syncthreads();", "}",
                   "if (threadIdx.x == 0) " + _store(plan, "tn_shared[0]"),
                   "__syncthreads();   /* tn_shared[0] is read before the next output's writes */"])
        shared = f"    __shared__ {plan.atype} tn_shared[{MAX_THREADS}];"
    body = "\n".join(["    {"] + ["        " + s for s in head + loop] + ["    }"])
    signature = ",\n    ".join(params)
    synchronizes = strategy == "block"
    return f"""
extern "C" __global__ void {kernel}(
    {signature})
{{
    int tn_status = 0;
{shared}
    {outer}
{body}
    if (tn_status) atomicOr(tn_error, tn_status);
}}
{host_launcher(kernel, params, synchronizes)}"""
