"""Compiling a test module's kernels for the device (NVRTC, else nvcc), as
CI does for every kernel the CUDA tests generate: a skip where neither is
installed (a failure in CI, which installs NVRTC)."""

from tenure.linkers.cuda import nvrtc
from tenure.symbolic.device import CudaUnavailable
from tenure.linkers.cuda.kernel_source import module_source
from tests.helpers import need


def device_compiler() -> str:
    """``"nvrtc"`` or ``"nvcc"``, or :func:`tests.helpers.need`'s skip."""
    try:
        return nvrtc.compiler_name()
    except CudaUnavailable as exc:
        need(False, str(exc))


def compile_all(kernels) -> str:
    """The unoptimized PTX (:func:`.nvrtc.check_compiles`) of one module
    holding every kernel of ``kernels`` (equal kernels once): one NVRTC
    program."""
    device_compiler()
    unique = {k.name: k for k in kernels}
    return nvrtc.check_compiles(module_source(unique.values()))


def assert_defined(ptx: str, names) -> None:
    """Every kernel function of ``names`` is an entry of ``ptx``."""
    missing = [name for name in names if f".entry {name}(" not in ptx]
    assert not missing, f"not in the PTX: {missing[:5]}"
