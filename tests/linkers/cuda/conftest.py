"""Where the CUDA kernel tests run: ``on_host`` (the kernels run on the
host over NumPy arrays: always, in CI too) and ``backend`` (on the host,
then the CUDA device where there is one; skipped with the reason where
not).  A test
module lists its kernels in ``KERNELS``: each backend builds them all at
once (one compilation) before the module's first test.

``device``: the runtime of the ``"cuda"`` device for the device-path tests
(``Mode(linker="cuda")``, device shared variables): the emulated device
(``config.cuda_emulation``), then the real one where there is one."""

import numpy as np
import pytest

import tenure as tn

from tenure.linkers.c import compiler
from tenure.linkers.cuda import host_kernels
from tenure.linkers.cuda.cupy_backend import CupyBackend
from tenure.linkers.cuda.runtime import unavailable_reason
from tenure.symbolic.device import cuda_runtime


def _prepared(backend, module):
    backend.prepare(getattr(module, "KERNELS", []))
    return backend


@pytest.fixture(scope="module")
def on_host(request):
    """The kernels run on the host, the module's kernels built."""
    if compiler.find_compiler() is None:
        pytest.skip("no working C compiler to run kernels on the host with")
    return _prepared(host_kernels.HostBackend(), request.module)


@pytest.fixture(scope="module", params=["host", "device"])
def backend(request):
    """On the host, then the CUDA device where there is one."""
    if request.param == "host":
        return request.getfixturevalue("on_host")
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    return _prepared(CupyBackend(), request.module)


@pytest.fixture(params=["emulated", "device"])
def device(request):
    """The runtime of the "cuda" device the test runs on: the emulated device,
    then the real one (skipped with the reason where there is none)."""
    if request.param == "emulated":
        if compiler.find_compiler() is None:
            pytest.skip("no working C compiler to emulate kernels with")
        with tn.config.change_flags(cuda_emulation=True):
            yield cuda_runtime()
        return
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    yield cuda_runtime()


def host(value):
    """A result as a NumPy array (a device array is copied back)."""
    if isinstance(value, np.ndarray):
        return value
    return value.get()
