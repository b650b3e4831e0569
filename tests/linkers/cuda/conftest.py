"""Where the CUDA kernel tests run: ``emulated`` (host emulation, NumPy
arrays: always, in CI too) and ``backend`` (host emulation, then the CUDA
device where there is one; skipped with the reason where not).  A test
module lists its kernels in ``KERNELS``: each backend builds them all at
once (one compilation) before the module's first test."""

import pytest

from tenure.linkers.c import compiler
from tenure.linkers.cuda import emulation
from tenure.linkers.cuda.cupy_backend import CupyBackend
from tenure.linkers.cuda.device import unavailable_reason


def _prepared(backend, module):
    backend.prepare(getattr(module, "KERNELS", []))
    return backend


@pytest.fixture(scope="module")
def emulated(request):
    """Host emulation with the module's kernels built."""
    if compiler.find_compiler() is None:
        pytest.skip("no working C compiler to emulate kernels with")
    return _prepared(emulation.EmulatedBackend(), request.module)


@pytest.fixture(scope="module", params=["emulated", "device"])
def backend(request):
    """Host emulation, then the CUDA device where there is one."""
    if request.param == "emulated":
        return request.getfixturevalue("emulated")
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    return _prepared(CupyBackend(), request.module)
