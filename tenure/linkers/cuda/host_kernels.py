"""Generated CUDA kernels run on the host (host-compiled kernels): how CI,
which has no GPU, executes the kernels' logic (indexing, broadcasting,
strides, in place, the scalar code, a block's threads meeting at
``__syncthreads``) and compares it with NumPy.

:func:`load` compiles kernel sources (:func:`.kernel_source.module_source`:
the same text NVRTC compiles for a device) as host C++ with
``TN_ON_HOST`` defined and ``include/host_kernels.h`` first
(``__global__`` vanishes, ``blockIdx``/``threadIdx`` become per-thread
globals, math comes from ``<math.h>``), into a shared library kept in
tenure's compile cache, and returns a :class:`HostModule`.
``module.launch(variant, grid, block, arrays, integers)`` then runs a kernel
over NumPy arrays as a device would run it over device arrays: the same
arguments, a (small, odd) grid of blocks of threads.  A kernel whose
threads never wait for each other (elementwise) runs thread after thread; one
that synchronises (reductions, softmax) runs each block's threads as
coroutines, a round between barriers (see the header).
:class:`HostBackend` is the :class:`.launch.Backend` over all this.

Every operand access of a host-compiled kernel is checked against the bytes of
the array it belongs to (``TN_AT`` in the header, :func:`span`): an access
outside them is not made, and the launch raises :class:`KernelBoundsError`
naming the kernel, the operand and the bytes -- so a kernel that would
read or write outside its buffers on a device (an empty or zero-length
part, a wrong stride, a length off by one) fails in CI.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import numpy as np

from tenure.linkers.c import cache, compiler, prelude
from tenure.linkers.c.cache_entries import link_beside
from tenure.linkers.cuda import nvrtc
from tenure.linkers.cuda.kernel_source import INCLUDE, module_source

__all__ = ["HOST_BLOCKS", "HOST_REDUCTION_THREADS", "HOST_THREADS", "HostBackend",
           "EmulatedDeviceBackend", "HostModule", "KernelBoundsError", "load", "span"]

#: the grid on the host: a few blocks of an odd number of threads, so the
#: grid-stride loops wrap and threads end on different elements; a block
#: reduction's threads are a power of two (coroutines: see the header)
HOST_BLOCKS = 3
HOST_THREADS = 5
HOST_REDUCTION_THREADS = 8
#: the most threads a block that synchronises may have on the host
#: (TN_HOST_MAX_THREADS in the header)
HOST_MAX_THREADS = 64

#: how the host compiler builds the kernels: C++ (the source is CUDA C++),
#: no contraction into FMAs (as on the device), and no optimisation: the
#: tests' arrays are small, and a module of hundreds of kernels compiles in a
#: third of -O1's time (the same IEEE arithmetic: SSE).  The source starts by
#: including ``include/host_kernels.h`` as a prelude (:mod:`tenure.linkers.c.prelude`),
#: precompiled once: its C++ headers are half of a small module's build
#: (0.32 s a module, 0.22 s with the prelude precompiled, on 2 cores).
HOST_FLAGS = ("-x", "c++", "-std=c++17", "-O0", "-ffp-contract=off", "-DTN_ON_HOST")

_LIBRARY = "kernels.so"


class KernelBoundsError(RuntimeError):
    """A kernel run on the host accessed bytes outside an operand's array: a bug
    of the kernel or of its launch, never of the caller's input."""


def span(array) -> tuple[int, int]:
    """The bytes ``array`` (NumPy's or the emulated device's) spans around
    its data pointer, ``[lo, hi)``: ``lo`` negative under negative strides,
    nothing (``(0, 0)``) when it is empty."""
    if array.size == 0:
        return (0, 0)
    lo = sum((n - 1) * s for n, s in zip(array.shape, array.strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(array.shape, array.strides) if s > 0)
    return (lo, hi + array.dtype.itemsize)


_loaded: dict[str, "HostModule"] = {}
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A child forked while another thread of the parent was building a
    module would find ``_lock`` held forever (that thread is not in the
    child): it gets a new one."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class HostModule:
    """Host-compiled kernels loaded from one shared library."""

    def __init__(self, path: Path):
        self.path = path
        # PyDLL: a launch keeps the GIL, so launches from several Python
        # threads never meet in the one coroutine scheduler and the static
        # __shared__ arrays of a library.
        self.library = ctypes.PyDLL(str(path))
        self._failed = ctypes.c_int.in_dll(self.library, "tn_host_failed")

    def launch(self, variant: str, grid: int, block: int, addresses: list[int],
               integers: list[int], spans: list[tuple[int, int]] | None = None) -> int:
        """Run the kernel function ``variant`` as a launch of ``grid`` blocks
        of ``block`` threads over the arrays at ``addresses`` (the output
        first, then the inputs it reads) and ``integers``; returns the error
        bits it set.  ``spans``: each array's bytes (:func:`span`), which
        every access is checked against (None: unchecked)."""
        status = ctypes.c_int(0)
        function = getattr(self.library, variant + "_host")
        pointers = [ctypes.c_void_p(a) for a in addresses]
        self._set_spans(addresses, spans)
        self._failed.value = 0
        function(ctypes.c_uint(grid), ctypes.c_uint(block), *pointers, ctypes.byref(status),
                 *[ctypes.c_longlong(v) for v in integers])
        if self._failed.value:
            raise RuntimeError(f"could not run {variant} on blocks of {block} threads on the "
                               f"host (at most {HOST_MAX_THREADS}, and memory for their "
                               f"stacks)")
        fault = (ctypes.c_longlong * 3)()
        if self.library.tn_host_fault(fault):
            operand, offset, size = fault
            where = ("an unknown pointer" if operand < 0 else
                     f"operand {operand} ({'the output' if operand == 0 else 'an input'}), "
                     f"whose bytes are [{spans[operand][0]}, {spans[operand][1]})")
            raise KernelBoundsError(
                f"{variant} (a launch of {grid} block(s) of {block} thread(s), integers "
                f"{list(integers)}) accessed bytes [{offset}, {offset + size}) of {where}")
        return status.value

    def _set_spans(self, addresses: list[int], spans) -> None:
        n = len(addresses) if spans is not None else -1
        spans = spans or []
        array = ctypes.c_longlong * max(1, len(addresses))
        self.library.tn_host_set_spans(
            ctypes.c_int(n), array(*addresses), array(*(lo for lo, _ in spans)),
            array(*(hi for _, hi in spans)))


class HostBackend:
    """The :class:`.launch.Backend` of kernels run on the host: NumPy arrays, kernels
    from :func:`load` (each kernel's module built the first time it runs, or
    all at once by :meth:`prepare`), small grids (see the module doc)."""

    elementwise_threads = HOST_THREADS
    reduction_threads = HOST_REDUCTION_THREADS
    max_blocks = HOST_BLOCKS

    def __init__(self, check_device_compile: bool = False):
        #: also compile each module for the device (:func:`.nvrtc.check_compiles`):
        #: the tests' way to compile every kernel the suites generate
        self.check_device_compile = check_device_compile
        self._modules: dict[str, HostModule] = {}

    def prepare(self, kernels) -> None:
        """Build ``kernels`` into one module (one compilation for many)."""
        kernels = [k for k in {k.name: k for k in kernels}.values() if k.name not in self._modules]
        if kernels:
            if self.check_device_compile:
                nvrtc.check_compiles(module_source(kernels))
            module = load(kernels)
            self._modules.update({k.name: module for k in kernels})

    def is_array(self, value) -> bool:
        return isinstance(value, np.ndarray)

    def empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def copy(self, array) -> np.ndarray:
        return np.array(array, copy=True, order="C")   # C-contiguous, aligned

    def may_share_memory(self, a, b) -> bool:
        return np.may_share_memory(a, b)

    def pointer(self, array) -> int:
        return array.ctypes.data

    def writeable(self, array) -> bool:
        return array.flags.writeable

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, array) -> np.ndarray:
        return array

    def launch(self, kernel, variant: str, grid: int, block: int, arrays: list,
               integers: list[int]) -> int:
        self.prepare([kernel])
        return self._modules[kernel.name].launch(variant, grid, block,
                                                 [self.pointer(a) for a in arrays], integers,
                                                 [span(a) for a in arrays])


class EmulatedDeviceBackend(HostBackend):
    """Host-compiled kernels over the emulated device's arrays
    (:class:`~tenure.linkers.cuda.runtime.EmulatedRuntime`): the backend of
    ``Mode(linker="cuda")`` under ``config.cuda_emulation``."""

    def __init__(self, runtime, check_device_compile: bool = False):
        super().__init__(check_device_compile)
        self.runtime = runtime

    def is_array(self, value) -> bool:
        return self.runtime.is_device_array(value)

    def empty(self, shape, dtype):
        return self.runtime.empty(shape, dtype)

    def copy(self, array):
        return array.copy()

    def may_share_memory(self, a, b) -> bool:
        return self.runtime.may_share_memory(a, b)

    def pointer(self, array) -> int:
        return array.data.ptr

    def writeable(self, array) -> bool:
        return True     # device memory has no read-only flag

    def from_host(self, array: np.ndarray):
        return self.runtime.from_host(array)

    def to_host(self, array) -> np.ndarray:
        return self.runtime.to_host(array)

    def launch(self, kernel, variant: str, grid: int, block: int, arrays: list,
               integers: list[int]) -> int:
        """Queued on the current stream of the emulated device, as a GPU
        queues it (the queue holds the arrays' memory, not the arrays); a
        kernel that may set error bits is waited for, as
        :class:`~.cupy_backend.CupyBackend` waits to read them back."""
        self.prepare([kernel])
        module = self._modules[kernel.name]
        addresses = [self.pointer(a) for a in arrays]
        spans = [span(a) for a in arrays]      # metadata: no synchronisation
        status = [0]

        def run():
            status[0] = module.launch(variant, grid, block, addresses, integers, spans)

        self.runtime.launch(run, arrays, name=variant)
        if kernel.uses_status:
            self.runtime.synchronize()
        return status[0]


def load(kernels: list) -> HostModule:
    """The host-compiled module of ``kernels`` (elementwise or reduction kernels:
    built once, then from the cache)."""
    kernels = tuple(kernels)
    source = prelude.include_line(_header_text()) + module_source(kernels)
    with _lock:
        if source not in _loaded:
            recipe = _recipe()
            entry = cache.load_files("cuda_host", source, recipe,
                                     lambda directory: _build(directory, source, recipe))
            _loaded[source] = HostModule(entry / _LIBRARY)
        return _loaded[source]


def _recipe() -> compiler.Recipe:
    command = compiler.find_compiler()
    if command is None:
        raise compiler.CompileError("no working C compiler to run CUDA kernels on the host "
                                    "with: set tenure.config.cxx or $CC")
    return compiler.Recipe(command, compiler.compiler_version(command), None,
                           ("-fPIC", "-shared", *HOST_FLAGS), ())


def _header_text() -> str:
    """``include/host_kernels.h``: the prelude of every module (its name, in
    the source's first line, carries the digest of this text, so the cache
    key covers it)."""
    return (INCLUDE / "host_kernels.h").read_text(encoding="utf-8")


def _build(directory: Path, source: str, recipe: compiler.Recipe) -> None:
    source_path = directory / "kernels.cu"
    source_path.write_text(source)
    # The prelude (and its precompiled form) beside the source for the build
    # only: hard links into its own cache entry, gone once the library is.
    linked = link_beside(directory, prelude.files(_header_text(), recipe, language="c++"))
    try:
        compiler.compile_shared_library(source_path, directory / _LIBRARY, recipe)
    finally:
        for path in linked:
            path.unlink(missing_ok=True)
