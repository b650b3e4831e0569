"""Device code compiled by tenure, loaded by CuPy.

Why not ``cupy.RawModule(code=...)``: CuPy appends ``-ftz=true`` to every
program it compiles, whatever the options it is given, so float32 subnormal
numbers become zero in every kernel -- on the H100, ``abs`` of ``2.9e-39``
gave 0, ``x != 0`` gave False.  NumPy and the C linker keep subnormals.  So
the CUDA backend compiles each module's source itself (:func:`.nvrtc.compile_cubin`
with :data:`.kernel_source.NVRTC_OPTIONS`: ``--ftz=false``) and gives CuPy the
machine code to load (``cupy.cuda.function.Module.load``).  Machine code for
the device's own architecture (``sm_90``), as CuPy does, not PTX: the
driver's PTX compiler may be older than NVRTC and refuse its PTX.

The binaries are kept in tenure's compile cache, in ``cubin/`` of the entries
directory that :func:`.c.cache_dirs.locate` gives (private: 0700 and 0600,
the same checks as the C modules), one file per module named by the SHA-256
of what determines it: the source, the options, the architecture and the
compiler's version.  A file that does not load (damaged) is compiled again
and replaced.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from tenure.linkers.c import cache_dirs
from tenure.linkers.cuda import nvrtc
from tenure.linkers.cuda.kernel_source import NVRTC_OPTIONS

__all__ = ["binary_for", "binary_key", "device_arch", "load_module"]

#: one compile of a module at a time in this process (threads loading the same
#: module share the file; processes each write theirs whole, by rename)
_LOCK = threading.Lock()


def device_arch(cupy) -> str:
    """The architecture of the current device: ``sm_90`` on an H100."""
    return f"sm_{cupy.cuda.Device().compute_capability}"


def binary_key(source: str, arch: str) -> str:
    """The SHA-256 naming the machine code of ``source`` for ``arch``."""
    parts = [source, arch, nvrtc.compiler_version(), *NVRTC_OPTIONS]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _binary_path(key: str) -> Path:
    directory = cache_dirs.ensure_private_dir(cache_dirs.locate().build / "cubin")
    return directory / f"{key}.cubin"


def binary_for(source: str, arch: str, *, fresh: bool = False) -> bytes:
    """The machine code of ``source`` for ``arch``: from the cache, else
    compiled (and kept); ``fresh`` compiles again whatever the cache holds."""
    path = _binary_path(binary_key(source, arch))
    with _LOCK:
        if not fresh:
            try:
                return cache_dirs.read_file(path)
            except FileNotFoundError:
                pass
        binary = nvrtc.compile_cubin(source, arch)
        try:
            cache_dirs.write_private_file(path, binary)
        except OSError as exc:
            if exc.errno not in cache_dirs.CANNOT_WRITE:
                raise
        return binary


def load_module(cupy, source: str):
    """``source`` compiled by tenure for the current device and loaded
    (a ``cupy.cuda.function.Module``: ``get_function(name)`` gives its kernels)."""
    arch = device_arch(cupy)
    module = cupy.cuda.function.Module()
    try:
        module.load(binary_for(source, arch))
    except cupy.cuda.driver.CUDADriverError:
        # a cached file that does not load: compile again, once
        module = cupy.cuda.function.Module()
        module.load(binary_for(source, arch, fresh=True))
    return module
