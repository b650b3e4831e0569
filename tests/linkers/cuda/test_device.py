"""What the CUDA linker says when it cannot run: which of CuPy and a device
is missing."""

import pytest

from tenure.symbolic import device
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
    assert "needs CuPy, which is not installed" in reason and "tenure[cuda]" in reason
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
