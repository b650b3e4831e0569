"""Whether the CUDA linker can run here, and why not.

CuPy is imported lazily, only from here (it is the ``[cuda]`` extra, and
importing tenure must not need it).  :func:`require_device` returns the
``cupy`` module when CuPy is installed and a CUDA device answers, and
otherwise raises :class:`CudaUnavailable` saying which of the two is
missing; :func:`unavailable_reason` is the same answer as a string (or
None), for tests that skip without a device.
"""

from __future__ import annotations

import functools
import importlib

__all__ = ["CudaUnavailable", "import_cupy", "require_cupy", "require_device",
           "unavailable_reason"]


class CudaUnavailable(RuntimeError):
    """The CUDA linker cannot run here: CuPy, NVRTC or a device is missing
    (the message says which)."""


def import_cupy():
    """``import cupy`` (the one place tenure imports it)."""
    return importlib.import_module("cupy")


def require_cupy():
    """The ``cupy`` module, or :class:`CudaUnavailable` when it is not installed."""
    try:
        return import_cupy()
    except ImportError as exc:
        raise CudaUnavailable(f"the CUDA linker needs CuPy, which is not installed ({exc}); "
                              f"pip install 'tenure[cuda]'") from None


def require_device():
    """The ``cupy`` module, once a CUDA device has answered; else
    :class:`CudaUnavailable` naming what is missing (CuPy, or a device/driver)."""
    reason = unavailable_reason()
    if reason is not None:
        raise CudaUnavailable(reason)
    return require_cupy()


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> str | None:
    """Why the CUDA linker cannot run here, or None when it can (asked once)."""
    try:
        cupy = require_cupy()
    except CudaUnavailable as exc:
        return str(exc)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:   # CUDARuntimeError: no driver, no device, driver too old
        return (f"CuPy {cupy.__version__} is installed, but no CUDA device is usable: "
                f"{type(exc).__name__}: {exc}")
    if count == 0:
        return f"CuPy {cupy.__version__} is installed, but the CUDA driver reports no device"
    return None
