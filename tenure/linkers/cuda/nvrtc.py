"""Compiling kernel sources for the device without one: the check that CI
runs on every generated CUDA kernel (a kernel that does not compile fails
CI, though no GPU is there to run it).

:func:`check_compiles` compiles a module's source (:func:`compile_ptx`,
unoptimized: what the check needs is the front end's verdict, and NVVM's
optimizations are four fifths of the time) and :func:`compile_ptx` compiles a
module's source (:func:`.kernel_source.module_source`:
the prelude, then the kernels) to PTX with NVRTC -- the compiler CuPy uses
when the CUDA linker loads the same source on a device -- through CuPy's
bindings, which need the NVRTC library (``nvidia-cuda-nvrtc`` or a CUDA
toolkit) but no driver and no device.  Where CuPy or NVRTC is missing, the
toolkit's ``nvcc -ptx`` compiles it instead.  Neither: :class:`.device.CudaUnavailable`
naming both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import lru_cache

from tenure.symbolic.device import CudaUnavailable
from tenure.linkers.cuda.kernel_source import NVRTC_OPTIONS

__all__ = ["KernelCompileError", "DEFAULT_ARCH", "check_compiles", "compile_ptx", "compiler_name",
           "compiler_version", "compile_cubin"]

#: the virtual architecture checked against: the H100/H200 generation (sm_90)
DEFAULT_ARCH = "compute_90"


class KernelCompileError(RuntimeError):
    """A generated kernel did not compile; the message holds the compiler's log."""


def compiler_name() -> str:
    """``"nvrtc"`` or ``"nvcc"``: what :func:`compile_ptx` will use
    (:class:`CudaUnavailable` when neither is there)."""
    if _nvrtc() is not None:
        return "nvrtc"
    if shutil.which("nvcc"):
        return "nvcc"
    raise CudaUnavailable("no CUDA compiler to check kernels with: CuPy's NVRTC bindings "
                          f"did not load ({_nvrtc_problem()}) and nvcc is not on PATH; "
                          "pip install cupy-cuda13x nvidia-cuda-nvrtc")


@lru_cache(maxsize=None)
def compiler_version() -> str:
    """The compiler :func:`compile_ptx` uses and its version, e.g.
    ``"nvrtc 13.0"`` (part of what names a cached binary; asked once per
    process: nvcc's answer is a subprocess)."""
    if compiler_name() == "nvrtc":
        major, minor = _nvrtc().getVersion()
        return f"nvrtc {major}.{minor}"
    proc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True)
    return "nvcc " + (proc.stdout.strip().splitlines() or ["unknown"])[-1]


def compile_ptx(source: str, name: str = "tenure_kernels.cu", arch: str = DEFAULT_ARCH) -> str:
    """``source`` compiled to PTX for ``arch`` (raises :class:`KernelCompileError`
    with the log when it does not compile)."""
    return _compile(source, name, arch, "ptx").decode()


#: the option that makes :func:`check_compiles` fast: device debug code,
#: which NVVM (and nvcc) generate without optimizing
CHECK_OPTIONS = ("-G",)


def check_compiles(source: str, name: str = "tenure_kernels.cu", arch: str = DEFAULT_ARCH) -> str:
    """``source`` compiled to unoptimized PTX for ``arch``: whether it compiles
    (:class:`KernelCompileError` with the log when it does not), with every
    kernel an entry of the PTX, in a fifth of :func:`compile_ptx`'s time
    (5 s against 23 s for the reduction kernels' 2 MB module).  The PTX is
    not the code a device runs: :func:`compile_ptx` gives that."""
    return _compile(source, name, arch, "ptx", CHECK_OPTIONS).decode()


def compile_cubin(source: str, arch: str, name: str = "tenure_kernels.cu") -> bytes:
    """``source`` compiled to machine code for the real architecture ``arch``
    (``sm_90``): what a device loads without the driver's PTX compiler, whose
    PTX version may be older than this compiler's."""
    return _compile(source, name, arch, "cubin")


def _compile(source: str, name: str, arch: str, output: str, extra: tuple = ()) -> bytes:
    if compiler_name() == "nvrtc":
        return _with_nvrtc(source, name, arch, output, extra)
    return _with_nvcc(source, name, arch, output, extra)


_NVRTC_PROBLEM: list[str] = []


def _nvrtc():
    """CuPy's NVRTC bindings when they load with a library behind them, else None."""
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception as exc:   # ImportError, or the library is not found
        _NVRTC_PROBLEM[:] = [f"{type(exc).__name__}: {exc}"]
        return None
    return nvrtc


def _nvrtc_problem() -> str:
    return _NVRTC_PROBLEM[0] if _NVRTC_PROBLEM else "unknown"


def _with_nvrtc(source: str, name: str, arch: str, output: str, extra: tuple) -> bytes:
    nvrtc = _nvrtc()
    program = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(program, [f"--gpu-architecture={arch}", *NVRTC_OPTIONS, *extra])
        except nvrtc.NVRTCError as exc:
            raise KernelCompileError(f"NVRTC could not compile {name} ({exc}):\n"
                                     f"{nvrtc.getProgramLog(program)}") from None
        result = nvrtc.getPTX(program) if output == "ptx" else nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    return result if isinstance(result, bytes) else result.encode()


def _with_nvcc(source: str, name: str, arch: str, output: str, extra: tuple) -> bytes:
    options = [o for o in NVRTC_OPTIONS if not o.startswith("--std")]
    with tempfile.TemporaryDirectory(prefix="tenure_nvcc_") as directory:
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(source)
        out = f"{path}.{output}"
        proc = subprocess.run(["nvcc", f"-{output}", "-std=c++17", f"-arch={arch}", *options,
                               *extra, path, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelCompileError(f"nvcc could not compile {name} (exit code "
                                     f"{proc.returncode}):\n{proc.stderr}{proc.stdout}")
        with open(out, "rb") as f:
            return f.read()
