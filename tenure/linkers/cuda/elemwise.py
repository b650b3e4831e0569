"""CUDA C for elementwise nodes: ``Elemwise`` over any scalar op with C code,
``Composite`` (a fused scalar graph) included, in place or not.

The arithmetic is the C linker's: :func:`tenure.linkers.c.elemwise.scalar_kernel`
turns a node into C statements from the scalar table
(:mod:`tenure.linkers.c.scalar_code`), which both linkers compile; only the
loop around them differs.  One definition of each scalar op's math, so a
result differs from NumPy's only where the device's math library does (see
:data:`MATH_ULPS`).

A node's :class:`ElemwiseKernel` holds one source with a kernel per number
of axes ``D`` (1 to the output's ndim), ``<name>_d<D>``.  Its contract:

- Arguments, in order: the output's data pointer (``char *``), the data
  pointer of every input read from memory (Python-number inputs are
  literals in the code), an ``int *`` the kernel ORs error bits into
  (``TN_ERR_*`` of ``scalar_errors.h``; only when :attr:`uses_status`), the
  number of elements ``n``, the ``D`` lengths of the launch's axes
  (outermost first), then per operand (the output first) its ``D`` byte
  strides.  Everything is a 64-bit integer: any array the device holds.
- Element ``i`` (``0 <= i < n``, row-major over the axes) is read from every
  input at its own strides (0 on a broadcast axis, negative for a reversed
  view) and written once to the output.  Each thread takes elements
  ``i, i + threads, ...`` of a grid-stride loop, so any grid covers them all.
- Every operand must be aligned to its itemsize; the caller copies one that
  is not.  The output may *be* an input (same pointer and strides: in place);
  any other overlap between the output and an input is the caller's to
  remove (copy the input first), as for the C linker's loops.
- Bools read as 0/1 whatever byte they hold; a bool result is 0 or 1.

:mod:`.layout` works out ``n``, the axes and the strides from arrays, and
:mod:`.host_kernels` runs the same source on the CPU (CI has no GPU).
Compiled with ``--fmad=false`` (:data:`.kernel_source.NVRTC_OPTIONS`): like
the C linker, no contraction of ``a * b + c`` into one rounding, so the basic
operations round as NumPy's do.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tenure.linkers.c import elemwise as c_elemwise
from tenure.linkers.c import scalar_code as sc
from tenure.linkers.c.cgen import comment
from tenure.linkers.cuda.kernel_source import add_offsets, at, host_launcher
from tenure.symbolic.graph import Apply

__all__ = ["ElemwiseKernel", "MATH_ULPS", "elemwise_kernel", "has_cuda_code",
           "kernel_parameters", "variant_name"]

#: the largest error of the device's math functions that the scalar table
#: calls, in ulps, as NVIDIA's CUDA Math API documents it (full range, default
#: compilation: no --use_fast_math); basic arithmetic, sqrt and the
#: conversions are correctly rounded (0 ulps), hence equal to NumPy's.
#: NumPy's own results for these functions are within a few ulps of the
#: correctly rounded value too, so the two may differ by about the sum.
MATH_ULPS = {
    "float64": {"exp": 1, "expm1": 1, "log": 1, "log1p": 1, "sin": 2, "cos": 2, "tanh": 1,
                "erf": 2, "pow": 2, "tan": 2, "asin": 2, "acos": 2, "atan": 2, "atan2": 2,
                "sinh": 2, "cosh": 1, "asinh": 3, "acosh": 3, "atanh": 2, "log2": 1,
                "log10": 1, "exp2": 1},
    "float32": {"exp": 2, "expm1": 1, "log": 1, "log1p": 1, "sin": 2, "cos": 2, "tanh": 2,
                "erf": 2, "pow": 4, "tan": 4, "asin": 2, "acos": 2, "atan": 2, "atan2": 3,
                "sinh": 3, "cosh": 2, "asinh": 3, "acosh": 4, "atanh": 3, "log2": 1,
                "log10": 2, "exp2": 2},
}


def has_cuda_code(node: Apply) -> bool:
    """Whether ``node`` is an elementwise node with a kernel here."""
    return c_elemwise.has_c_code(node)


def variant_name(name: str, ndim: int) -> str:
    """The kernel of ``name`` for launches over ``ndim`` axes."""
    return f"{name}_d{ndim}"


@dataclass(frozen=True)
class ElemwiseKernel:
    """One node's kernels: ``source`` (without :func:`.kernel_source.prelude`) defines
    :func:`variant_name` ``(name, D)`` for ``D`` in 1..``max_ndim``.

    ``read``: the node's inputs read from memory, in argument order;
    ``dtypes``: of the operands (the output, then those inputs);
    ``uses_status``: the kernel may set error bits (only then must the
    caller read them back: a read is a device synchronisation)."""

    name: str
    source: str
    read: tuple[int, ...]
    dtypes: tuple[np.dtype, ...]
    max_ndim: int
    uses_status: bool


def elemwise_kernel(node: Apply, name: str | None = None) -> ElemwiseKernel:
    """``node``'s kernels (``NotImplementedError`` when it has no C code).
    ``name`` defaults to one made from the code, so equal nodes share it."""
    scalar = c_elemwise.scalar_kernel(node)
    read = tuple(i for i, d in enumerate(scalar.in_dtypes) if d is not None)
    dtypes = (scalar.out_dtype,) + tuple(scalar.in_dtypes[i] for i in read)
    max_ndim = max(1, scalar.out_ndim)
    body = tuple(scalar.body)
    if name is None:
        digest = hashlib.sha256("\n".join((*body, *map(str, dtypes), str(max_ndim)))
                                .encode()).hexdigest()[:16]
        name = f"tn_ew_{digest}"
    header = f"/* {comment(str(node.op.scalar_op))} on {', '.join(d.name for d in dtypes[1:])} */"
    uses_status = any("tn_status" in line for line in body)
    source = "\n".join([header] + [_variant(name, d, read, dtypes, body)
                                   for d in range(1, max_ndim + 1)])
    return ElemwiseKernel(name, source, read, dtypes, max_ndim, uses_status)


def kernel_parameters(operands: int, ndim: int) -> list[str]:
    """The C parameters of a kernel over ``operands`` operands (the output
    first) and ``ndim`` axes, in the contract's order."""
    pointers = ["char *tn_p0"] + [f"const char *tn_p{j}" for j in range(1, operands)]
    sizes = [f"long long tn_d{k}" for k in range(ndim)]
    strides = [f"long long tn_s{j}_{k}" for j in range(operands) for k in range(ndim)]
    return pointers + ["int *tn_error", "long long tn_n"] + sizes + strides


def _variant(name: str, ndim: int, read: tuple[int, ...], dtypes: tuple, body: tuple) -> str:
    """The kernel over ``ndim`` axes: a grid-stride loop; each element's
    offsets come from its row-major index, innermost axis first."""
    operands = len(dtypes)
    params = kernel_parameters(operands, ndim)
    lines = ["        long long " + ", ".join(f"tn_o{j} = 0" for j in range(operands)) + ";"]
    lines += ["        " + s for s in add_offsets("tn_i", "tn_d", "tn_s", range(operands), ndim,
                                                  "tn_")]
    for j, (i, dtype) in enumerate(zip(read, dtypes[1:]), 1):
        ctype = sc.c_type(dtype)
        normal = " != 0" if dtype.kind == "b" else ""
        lines.append(f"        const {ctype} v{i} = {at('const ' + ctype, f'tn_p{j}', f'tn_o{j}')}"
                     f"{normal};"
                     f" (void)v{i};")
    lines += [f"        {statement}" for statement in body]
    lines.append(f"        {at(sc.c_type(dtypes[0]), 'tn_p0', 'tn_o0')} = r;")
    signature = ",\n    ".join(params)
    loop = "\n".join(lines)
    host = host_launcher(variant_name(name, ndim), params, synchronizes=False)
    return f"""
extern "C" __global__ void {variant_name(name, ndim)}(
    {signature})
{{
    int tn_status = 0;
    const long long tn_step = (long long)blockDim.x * gridDim.x;
    for (long long tn_i = (long long)blockIdx.x * blockDim.x + threadIdx.x; tn_i < tn_n;
         tn_i += tn_step) {{
{loop}
    }}
    if (tn_status) atomicOr(tn_error, tn_status);
}}
{host}"""
