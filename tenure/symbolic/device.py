"""Where a value lives, as the graph layer needs to know it: host memory
(NumPy arrays) or the ``"cuda"`` device.

The ``"cuda"`` device is reached through a *runtime* (allocate, copy from
and to the host and within the device, overlap tests, ...).  The runtimes
themselves are the compute half of the device and live in the CUDA linker
(:mod:`tenure.linkers.cuda.runtime`: CuPy's, and the emulated device's that
``config.cuda_emulation`` makes *the* ``"cuda"`` device); this module only
holds a registry of them, which that package fills when it is imported
(``import tenure`` imports it), so that nothing here imports a higher layer:

- :func:`register_device_runtime` ``(name, make, owns)``: the runtime named
  ``name`` (:data:`CUDA` or :data:`EMULATED`, also its ``name`` attribute)
  is built by ``make()`` on first use, once per process, and
  ``owns(value)`` says, cheaply and without importing anything, whether a
  value is one of its device arrays.
- :func:`cuda_runtime`: the runtime of ``"cuda"`` (:class:`CudaUnavailable`
  naming what is missing when it cannot be built);
  :func:`runtime_of`: the runtime a given array belongs to (or None);
  :func:`is_device_array`, :func:`writeable`.

Used by :mod:`tenure.symbolic.shared` (device storage of shared variables),
:mod:`tenure.symbolic.types` (the input gate), the scalar ops, and the
linkers and the function layer above.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from tenure import config

__all__ = ["CUDA", "EMULATED", "CudaUnavailable", "cuda_runtime", "is_device_array",
           "register_device_runtime", "runtime_of", "writeable"]

#: the names of the two runtimes of ``"cuda"``: a real device (CuPy's), and
#: the emulated device (``config.cuda_emulation``)
CUDA, EMULATED = "cuda", "cuda (emulated)"


class CudaUnavailable(RuntimeError):
    """The CUDA linker cannot run here: CuPy, NVRTC or a device is missing
    (the message says which)."""


_MAKERS: dict[str, Callable] = {}
#: ``(name, owns)`` of the registered runtimes, in registration order
_OWNERS: tuple = ()
_RUNTIMES: dict = {}
_LOCK = threading.Lock()


def register_device_runtime(name: str, make: Callable, owns: Callable[[object], bool]) -> None:
    """Make the runtime ``name`` known: built by ``make()`` on its first use
    (which may raise :class:`CudaUnavailable`; nothing is kept then), its
    device arrays recognised by ``owns(value)``.  Registering a name again
    replaces its entry (a runtime already built is kept)."""
    global _OWNERS
    with _LOCK:
        _MAKERS[name] = make
        _OWNERS = tuple((n, o) for n, o in _OWNERS if n != name) + ((name, owns),)


def cuda_runtime(emulated: bool | None = None):
    """The runtime of the ``"cuda"`` device: CuPy's on the current device,
    or the emulated one when ``emulated`` (None: while
    ``config.cuda_emulation`` is set); raises :class:`CudaUnavailable`
    naming what is missing."""
    return _runtime(EMULATED if (config.cuda_emulation if emulated is None else emulated)
                    else CUDA)


def _runtime(name: str):
    runtime = _RUNTIMES.get(name)
    if runtime is not None:
        return runtime
    with _LOCK:
        if name not in _RUNTIMES:
            make = _MAKERS.get(name)
            if make is None:
                raise CudaUnavailable(
                    f"no runtime for the {name} device is registered (tenure.linkers.cuda "
                    f"registers them when imported, as 'import tenure' does)")
            _RUNTIMES[name] = make()
        return _RUNTIMES[name]


def runtime_of(value):
    """The runtime whose device array ``value`` is, or None for anything
    else (host arrays, Python values).  Imports nothing: a CuPy array can
    only exist once CuPy is imported."""
    for name, owns in _OWNERS:
        if owns(value):
            return _runtime(name)
    return None


def is_device_array(value) -> bool:
    """Whether ``value`` is an array in device memory (CuPy's or emulated)."""
    for _, owns in _OWNERS:
        if owns(value):
            return True
    return False


def writeable(array) -> bool:
    """Whether tenure may write ``array``: device memory has no read-only
    flag; a NumPy array says."""
    if isinstance(array, np.ndarray):
        return array.flags.writeable
    return is_device_array(array)
