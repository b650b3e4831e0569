"""CUDA C for ``Softmax``, ``LogSoftmax`` and ``LogSumExp`` over any axes
(``keepdims`` for ``LogSumExp``), on float32 and float64 inputs: the nodes
the C linker's runtime computes (:func:`tenure.linkers.c.nnet.has_c_code`
says which), with the same results up to the device's ``exp``/``log``.

What is computed, row by row (a row: the values along the reduced axes),
as ``perform`` and the C runtime do: ``m``, the row's maximum, replaced by 0
when it is not finite (all -inf, any +inf, or any NaN -- a NaN makes the
row's sum NaN, so the whole row NaN, whatever ``m``); ``s``, the sum of
``exp(x - m)`` accumulated in double and rounded to the dtype; then softmax
``exp(x - m) / s``, log_softmax ``(x - m) - log(s)``, logsumexp ``log(s) + m``.
So rows of -inf give NaN (softmax, log_softmax) and -inf (logsumexp), and an
empty row gives -inf (logsumexp).

One kernel per (op, dtype) and number of kept axes ``K`` and reduced axes
``R`` (:func:`variant_name`): a block per row (a grid-stride loop over the
rows); its threads (a power of two, at most :data:`.reduce.MAX_THREADS`)
take the row's elements ``t, t + threads, ...`` in three passes -- the
maximum and the sum each combined as a tree in shared memory, then the
writes.  Arguments: the output's and the input's data pointers, an unused
``int *`` (the launch convention), the number of rows and of elements per
row, the ``K`` kept and ``R`` reduced lengths, then the kept byte strides of
the output and the input, then their reduced byte strides (the output's are
0 for logsumexp).  The output may be the input itself (exactly: every
element is read before it is written, by the thread that writes it); any
other overlap is the caller's to remove.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tenure.linkers.c import nnet as c_nnet
from tenure.linkers.c import scalar_code as sc
from tenure.linkers.cuda.kernel_source import add_offsets, at, host_launcher
from tenure.linkers.cuda.reduce import MAX_THREADS
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax

__all__ = ["NnetKernel", "has_cuda_code", "nnet_kernel", "nnet_parameters", "variant_name"]

_KINDS = {Softmax: "softmax", LogSoftmax: "log_softmax", LogSumExp: "logsumexp"}


def has_cuda_code(node: Apply) -> bool:
    """Whether ``node`` is a softmax, log_softmax or logsumexp with kernels here."""
    return c_nnet.has_c_code(node)


def variant_name(name: str, kept: int, reduced: int) -> str:
    return f"{name}_k{kept}_r{reduced}"


@dataclass(frozen=True)
class NnetKernel:
    """The kernels of one op kind and dtype (``source`` without the
    prelude), for up to ``max_kept`` kept and ``max_reduced`` reduced axes."""

    name: str
    source: str
    kind: str
    dtypes: tuple[np.dtype, ...]
    max_kept: int
    max_reduced: int
    uses_status: bool = False



def nnet_kernel(node: Apply) -> NnetKernel:
    """``node``'s kernels (``NotImplementedError`` when it has none)."""
    if not has_cuda_code(node):
        raise NotImplementedError(f"no CUDA code for {node.op}")
    kind = _KINDS[type(node.op)]
    dtype = np.dtype(node.inputs[0].dtype)
    ndim = node.inputs[0].ndim
    n_reduced = len(node.op.axis)
    max_kept, max_reduced = max(1, ndim - n_reduced), max(1, n_reduced)
    name = f"tn_nn_{kind}_{dtype.name}_k{max_kept}_r{max_reduced}"
    source = "\n".join([f"/* {kind} on {dtype.name} */"]
                       + [_variant(name, kind, dtype, k, r)
                          for k in range(1, max_kept + 1) for r in range(1, max_reduced + 1)])
    return NnetKernel(name, source, kind, (dtype, dtype), max_kept, max_reduced)


def nnet_parameters(kept: int, reduced: int) -> list[str]:
    """The C parameters of a variant, in the order the module doc gives."""
    return (["char *tn_p0", "const char *tn_p1", "int *tn_error", "long long tn_n_out",
             "long long tn_n_red"]
            + [f"long long tn_k{a}" for a in range(kept)]
            + [f"long long tn_r{a}" for a in range(reduced)]
            + [f"long long tn_ks{j}_{a}" for j in range(2) for a in range(kept)]
            + [f"long long tn_rs{j}_{a}" for j in range(2) for a in range(reduced)])


def _variant(name: str, kind: str, dtype: np.dtype, kept: int, reduced: int) -> str:
    t = sc.c_type(dtype)
    f = "f" if dtype == np.float32 else ""
    params = ",\n    ".join(nnet_parameters(kept, reduced))
    element = (f"long long tn_o0 = tn_row0, tn_o1 = tn_row1; "
               f"{' '.join(add_offsets('tn_r', 'tn_r', 'tn_rs', range(2), reduced, 'tn_rr'))} "
               f"const {t} tn_x = {at('const ' + t, 'tn_p1', 'tn_o1')};")
    if kind == "softmax":
        write = f"{at(t, 'tn_p0', 'tn_o0')} = ({t})(exp{f}(tn_x - tn_m) / tn_s);"
    elif kind == "log_softmax":
        write = f"{at(t, 'tn_p0', 'tn_o0')} = ({t})((tn_x - tn_m) - log{f}(tn_s));"
    else:
        write = None
    if write is None:
        final = (f"if (threadIdx.x == 0) {at(t, 'tn_p0', 'tn_row0')} = "
                 f"({t})(log{f}(tn_s) + tn_m);")
    else:
        final = (f"for (long long tn_r = threadIdx.x; tn_r < tn_n_red; tn_r += blockDim.x) "
                 f"{{ {element} {write} }}")
    kernel = variant_name(name, kept, reduced)
    tree = ("for (unsigned int tn_h = blockDim.x / 2; tn_h > 0; tn_h /= 2) {{ "
            "if (threadIdx.x < tn_h) tn_shared[threadIdx.x] = {combine}; __syncthreads(); }}")
    max_tree = tree.format(combine="tn_max2(tn_shared[threadIdx.x], "
                                   "tn_shared[threadIdx.x + tn_h])")
    sum_tree = tree.format(combine="tn_shared[threadIdx.x] + tn_shared[threadIdx.x + tn_h]")
    return f"""
extern "C" __global__ void {kernel}(
    {params})
{{
    __shared__ double tn_shared[{MAX_THREADS}];
    (void)tn_error;
    for (long long tn_row = blockIdx.x; tn_row < tn_n_out; tn_row += gridDim.x) {{
        long long tn_o0 = 0, tn_o1 = 0;
        {' '.join(add_offsets('tn_row', 'tn_k', 'tn_ks', range(2), kept, 'tn_kk'))}
        const long long tn_row0 = tn_o0, tn_row1 = tn_o1;
        /* the maximum, NaN winning */
        double tn_acc = -HUGE_VAL;
        for (long long tn_r = threadIdx.x; tn_r < tn_n_red; tn_r += blockDim.x) {{
            {element}
            tn_acc = tn_max2(tn_acc, (double)tn_x);
        }}
        tn_shared[threadIdx.x] = tn_acc;
        __syncthreads();
        {max_tree}
        const {t} tn_m = isfinite(tn_shared[0]) ? ({t})tn_shared[0] : ({t})0;
        __syncthreads();
        /* the sum of exp(x - m), in double */
        tn_acc = 0;
        for (long long tn_r = threadIdx.x; tn_r < tn_n_red; tn_r += blockDim.x) {{
            {element}
            tn_acc += (double)exp{f}(tn_x - tn_m);
        }}
        tn_shared[threadIdx.x] = tn_acc;
        __syncthreads();
        {sum_tree}
        const {t} tn_s = ({t})tn_shared[0];
        {final}
        __syncthreads();   /* tn_shared[0] is read before the next row's writes */
    }}
}}
{host_launcher(kernel, nnet_parameters(kept, reduced), synchronizes=True)}"""
