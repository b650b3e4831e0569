"""The device's :class:`.launch.Backend`: CuPy arrays, kernels compiled by
NVRTC through CuPy.

tenure compiles a module's source (:func:`.kernel_source.module_source`, the
text CI compiles and runs on the host) to PTX for the device present, with
:data:`~.kernel_source.NVRTC_OPTIONS`, keeps it in its compile cache, and has
CuPy load it (:mod:`.device_code`: CuPy's own compile would flush float32
subnormals to zero): a module is compiled once per machine, then loaded.
Launches go on CuPy's current
stream; only a kernel that may set error bits (:attr:`~.elemwise.ElemwiseKernel.uses_status`)
reads them back, which waits for it.
"""

from __future__ import annotations

import numpy as np

from tenure.linkers.cuda.runtime import require_device
from tenure.linkers.cuda.device_code import load_module
from tenure.linkers.cuda.kernel_source import module_source
from tenure.linkers.cuda.layout import MAX_BLOCKS, THREADS_PER_BLOCK
from tenure.linkers.cuda.reduce import MAX_THREADS

__all__ = ["CupyBackend"]


class CupyBackend:
    """Kernels on the current CUDA device (:class:`.device.CudaUnavailable`
    when there is none)."""

    elementwise_threads = THREADS_PER_BLOCK
    reduction_threads = MAX_THREADS
    max_blocks = MAX_BLOCKS

    def __init__(self):
        self.cupy = require_device()
        self._modules: dict = {}
        self._status = self.cupy.zeros(1, np.int32)

    def prepare(self, kernels) -> None:
        """Compile (or load from the cache) ``kernels`` as one module."""
        kernels = [k for k in {k.name: k for k in kernels}.values() if k.name not in self._modules]
        if kernels:
            module = load_module(self.cupy, module_source(kernels))
            self._modules.update({k.name: module for k in kernels})

    def is_array(self, value) -> bool:
        return isinstance(value, self.cupy.ndarray)

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype)

    def copy(self, array):
        return self.cupy.array(array, copy=True, order="C")

    def may_share_memory(self, a, b) -> bool:
        return bool(self.cupy.may_share_memory(a, b))

    def pointer(self, array) -> int:
        return array.data.ptr

    def writeable(self, array) -> bool:
        return True   # device memory has no read-only flag

    def from_host(self, array: np.ndarray):
        return self.cupy.asarray(array)

    def to_host(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def launch(self, kernel, variant: str, grid: int, block: int, arrays: list,
               integers: list[int]) -> int:
        self.prepare([kernel])
        function = self._modules[kernel.name].get_function(variant)
        if kernel.uses_status:
            self._status.fill(0)
        function((grid,), (block,), (*arrays, self._status, *[np.int64(v) for v in integers]))
        return int(self._status.get()[0]) if kernel.uses_status else 0
