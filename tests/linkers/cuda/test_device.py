"""The device runtimes (tenure.linkers.cuda.runtime): what the CUDA linker
says when it cannot run (which of CuPy and a device is missing), the pool
hook, and their registration with the graph layer."""

import numpy as np
import pytest

from tenure.linkers.cuda import runtime as device
from tenure.symbolic.device import CudaUnavailable


@pytest.fixture
def fresh_answer():
    """``unavailable_reason`` asked again (it remembers its answer)."""
    device.unavailable_reason.cache_clear()
    yield
    device.unavailable_reason.cache_clear()


def test_without_cupy_the_reason_names_cupy_and_the_extra(monkeypatch, fresh_answer):
    def no_cupy():
        raise ImportError("No module named 'cupy'")
    monkeypatch.setattr(device, "import_cupy", no_cupy)
    reason = device.unavailable_reason()
    assert "needs CuPy, which is not installed" in reason and "pip install cupy-cuda13x" in reason
    with pytest.raises(CudaUnavailable, match="needs CuPy"):
        device.require_device()
    with pytest.raises(CudaUnavailable, match="needs CuPy"):
        device.require_cupy()


def test_with_cupy_and_no_device_the_reason_names_the_device(fresh_answer):
    cupy = pytest.importorskip("cupy")
    reason = device.unavailable_reason()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:   # noqa: BLE001 -- no driver or no device: the case under test
        count = 0
    if count:
        assert reason is None
        assert device.require_device() is cupy
        return
    assert reason.startswith(f"CuPy {cupy.__version__} is installed, but no CUDA device")
    with pytest.raises(CudaUnavailable, match="no CUDA device"):
        device.require_device()


def test_the_pool_hook_counts_allocations_and_the_peak():
    """What CupyRuntime.track reports on a GPU, fed the calls CuPy's pool
    makes (no device needed: the hook is plain Python)."""
    cupy = pytest.importorskip("cupy")
    usage = device.Usage()
    hook = device.counting_hook(cupy, usage)
    with hook:
        hook.malloc_postprocess(device_id=0, size=100, mem_size=512, mem_ptr=1, pmem_id=1)
        hook.malloc_postprocess(device_id=0, size=600, mem_size=1024, mem_ptr=2, pmem_id=2)
        hook.free_postprocess(device_id=0, mem_size=512, mem_ptr=1, pmem_id=1)
        hook.malloc_postprocess(device_id=0, size=100, mem_size=512, mem_ptr=3, pmem_id=3)
    assert (usage.n_allocations, usage.allocated_bytes, usage.peak_bytes) == (3, 2048, 1536)


def test_importing_the_linker_registers_its_runtimes_with_the_graph_layer(monkeypatch):
    """The graph layer (tenure.symbolic.device) finds the runtimes through
    the registry tenure.linkers.cuda fills; it never imports them."""
    from tenure.symbolic import device as graph_side
    emulated = graph_side.cuda_runtime(emulated=True)
    assert isinstance(emulated, device.EmulatedRuntime) and emulated.name == graph_side.EMULATED
    array = emulated.from_host(np.arange(3.0))
    assert graph_side.runtime_of(array) is emulated
    assert graph_side.is_device_array(array) and graph_side.writeable(array)
    assert graph_side.runtime_of(np.arange(3.0)) is None
    assert not graph_side.is_device_array(np.arange(3.0))
    # with nothing registered, asking for the device says so
    monkeypatch.setattr(graph_side, "_MAKERS", {})
    monkeypatch.setattr(graph_side, "_RUNTIMES", {})
    with pytest.raises(CudaUnavailable, match="no runtime for the cuda .* is registered"):
        graph_side.cuda_runtime(emulated=False)
