"""Compiling kernel sources for the device without one: the check that CI
runs on every generated CUDA kernel (a kernel that does not compile fails
CI, though no GPU is there to run it).

:func:`compile_ptx` compiles a module's source (:func:`.emulation.module_source`:
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

from tenure.symbolic.device import CudaUnavailable
from tenure.linkers.cuda.kernel_source import NVRTC_OPTIONS

__all__ = ["KernelCompileError", "DEFAULT_ARCH", "compile_ptx", "compiler_name"]

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


def compile_ptx(source: str, name: str = "tenure_kernels.cu", arch: str = DEFAULT_ARCH) -> str:
    """``source`` compiled to PTX for ``arch`` (raises :class:`KernelCompileError`
    with the log when it does not compile)."""
    if compiler_name() == "nvrtc":
        return _with_nvrtc(source, name, arch)
    return _with_nvcc(source, name, arch)


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


def _with_nvrtc(source: str, name: str, arch: str) -> str:
    nvrtc = _nvrtc()
    program = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(program, [f"--gpu-architecture={arch}", *NVRTC_OPTIONS])
        except nvrtc.NVRTCError as exc:
            raise KernelCompileError(f"NVRTC could not compile {name} ({exc}):\n"
                                     f"{nvrtc.getProgramLog(program)}") from None
        ptx = nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)
    return ptx.decode() if isinstance(ptx, bytes) else ptx


def _with_nvcc(source: str, name: str, arch: str) -> str:
    options = [o for o in NVRTC_OPTIONS if not o.startswith("--std")]
    with tempfile.TemporaryDirectory(prefix="tenure_nvcc_") as directory:
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(source)
        out = path + ".ptx"
        proc = subprocess.run(["nvcc", "-ptx", "-std=c++17", f"-arch={arch}", *options,
                               path, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelCompileError(f"nvcc could not compile {name} (exit code "
                                     f"{proc.returncode}):\n{proc.stderr}{proc.stdout}")
        with open(out) as f:
            return f.read()
