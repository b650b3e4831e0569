"""What every generated CUDA source shares: the prelude each module starts
with, how NVRTC compiles it, the index arithmetic of the kernels, and the
host launcher that runs each kernel on the host."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tenure.linkers.c import scalar_code as sc
from tenure.linkers.c.elemwise import __file__ as _c_elemwise_file

__all__ = ["INCLUDE", "NVRTC_OPTIONS", "add_offsets", "at", "host_launcher", "module_source",
           "prelude"]

#: the CUDA headers (tenure_cuda.h, host_kernels.h)
INCLUDE = Path(__file__).parent / "include"
_C_INCLUDE = Path(_c_elemwise_file).parent / "include"

#: how NVRTC compiles every kernel: C++17, no fused multiply-add (NumPy
#: rounds ``a * b + c`` twice; so do the C linker's loops), float32
#: subnormals kept and IEEE division and square root (as NumPy; said
#: explicitly: on the H100 float32 subnormals came back flushed to zero), and
#: no warning for the scalar helpers a module does not call (177: declared,
#: never referenced)
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true",
                 "--prec-sqrt=true", "--diag-suppress=177")


@lru_cache(maxsize=None)
def prelude() -> str:
    """What every module's source starts with: the CUDA prelude
    (``include/tenure_cuda.h``), the error bits and the scalar helpers."""
    return "\n".join([(INCLUDE / "tenure_cuda.h").read_text(),
                      (_C_INCLUDE / "scalar_errors.h").read_text(), sc.support_code()])


def module_source(kernels) -> str:
    """The source of a module of ``kernels``: the prelude, then each
    kernel's source -- the text NVRTC compiles for the device and the host
    compiler compiles to run on the host."""
    return "\n".join([prelude()] + [k.source for k in kernels])


def at(ctype: str, pointer: str, offset: str) -> str:
    """The C lvalue of the ``ctype`` at byte ``offset`` from the operand
    ``pointer``: every operand access of a kernel goes through ``TN_AT``,
    which host-compiled kernels check against the operand's bytes (see
    ``include/host_kernels.h``)."""
    return f"TN_AT({ctype}, {pointer}, {offset})"


def add_offsets(index: str, lengths: str, strides: str, operands, axes: int,
                prefix: str) -> list[str]:
    """Statements adding to ``tn_o<j>`` (for each ``j`` of ``operands``) the
    byte offset of the row-major ``index`` over ``axes`` axes whose lengths
    are ``<lengths><a>`` and strides ``<strides><j>_<a>``, innermost axis
    first (the outermost needs no remainder).  ``prefix`` names the
    temporaries, so that several decompositions can share a scope."""
    lines = [f"long long {prefix}rem = {index}, {prefix}c;"]
    for a in range(axes - 1, -1, -1):
        step = (f"{prefix}c = {prefix}rem;" if a == 0 else
                f"{prefix}c = {prefix}rem % {lengths}{a}; {prefix}rem /= {lengths}{a};")
        adds = " ".join(f"tn_o{j} += {prefix}c * {strides}{j}_{a};" for j in operands)
        lines.append(f"{step} {adds}")
    return lines


def host_launcher(kernel: str, params: list[str], synchronizes: bool) -> str:
    """Run on the host, ``<kernel>_host(grid, block, <params>)`` runs
    ``kernel`` as a launch (see ``include/host_kernels.h``): thread after
    thread, or, for a kernel that ``synchronizes`` (``__syncthreads``), the
    threads of a block as coroutines meeting at its barriers."""
    args = ", ".join(p.rsplit(" ", 1)[1].lstrip("*") for p in params)
    how = "TN_RUN_ON_HOST_THREADS" if synchronizes else "TN_RUN_ON_HOST"
    return (f"#ifdef TN_ON_HOST\n"
            f"extern \"C\" void {kernel}_host(unsigned int tn_grid, unsigned int tn_block, "
            f"{', '.join(params)})\n"
            f"{{ {how}({kernel}, tn_grid, tn_block, {args}); }}\n"
            f"#endif")
