"""The device runtimes: the compute half of the ``"cuda"`` device.

A *runtime* is the few operations tenure needs from device memory
(allocate, copy from and to the host and within the device, overlap tests,
allocation counts, products through cuBLAS).  :class:`CupyRuntime` works on
CuPy arrays; :class:`EmulatedRuntime` on the emulated device of
:mod:`tenure.linkers.cuda.emulated_device` (host memory behind arrays that
refuse implicit conversion exactly as CuPy's do), which
``config.cuda_emulation`` makes *the* ``"cuda"`` device: CI, which has no
GPU, runs the device path on it, asynchronous as a GPU is.

The graph layer never imports this module.  :func:`register_runtimes`
(called when :mod:`tenure.linkers.cuda` is imported, which ``import tenure``
does) registers both runtimes with :mod:`tenure.symbolic.device`, where
shared variables, the input gate and the function layer find them:
``cuda_runtime()`` (the runtime of ``"cuda"``), ``runtime_of(array)``,
``is_device_array``, ``writeable``.  The CUDA linker (:mod:`.device_linker`,
:mod:`.graphs`, :mod:`.cupy_backend`, :mod:`.host_kernels`) and tests use the
names here directly.

Work goes to the caller's current stream; :class:`CallOrder` (a runtime's
``calls``) orders tenure's calls, uploads and ``set_value`` copies across
streams and keeps what a call reads alive until its stream has run it.

CUDA graphs (:mod:`tenure.linkers.cuda.graphs`) need three more operations
of a runtime: ``capturing(stream)`` (a ``with`` block whose work on
``stream`` is captured into a graph rather than run; anything a capture
cannot hold -- an allocation from the memory pool, which is not
graph-safe, a synchronisation with the host, a copy from host memory --
raises, :class:`CaptureUnsupported` or the device's own error, and ends the
capture), ``launch_graph(graph)`` (on the current stream) and
``copy_async(target, source)`` (a device-to-device copy queued on the
current stream, allocating nothing).

CuPy is imported lazily, only from here (it is the ``[cuda]`` extra, and
importing tenure must not need it).  :func:`require_device` returns the
``cupy`` module when CuPy is installed and a CUDA device answers, and
otherwise raises :class:`~tenure.symbolic.device.CudaUnavailable` saying
which of the two is missing; :func:`unavailable_reason` is the same answer
as a string (or None), for tests that skip without a device.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading

import numpy as np

from tenure.linkers.cuda.emulated_device import EmulatedDeviceArray, emulated_device
from tenure.symbolic.device import CUDA, EMULATED, CudaUnavailable, register_device_runtime

__all__ = ["CallOrder", "CaptureUnsupported", "CapturedGraph", "CupyRuntime", "EmulatedRuntime",
           "Usage", "captured_on", "copy_into_device", "counting_hook", "import_cupy",
           "refusing_allocations", "register_runtimes", "require_cupy", "require_device",
           "unavailable_reason"]


class CaptureUnsupported(RuntimeError):
    """Work a CUDA graph cannot capture was issued during a capture (an
    allocation from CuPy's memory pool, which is not graph-safe: its blocks
    go back to the pool while the graph still writes them)."""


class CapturedGraph:
    """What ``with runtime.capturing(stream) as captured:`` leaves:
    ``captured.graph`` once the block has ended without an error."""

    __slots__ = ("graph",)

    def __init__(self):
        self.graph = None


def import_cupy():
    """``import cupy`` (the one place tenure imports it)."""
    return importlib.import_module("cupy")


def require_cupy():
    """The ``cupy`` module, or :class:`~tenure.symbolic.device.CudaUnavailable`
    when it is not installed."""
    try:
        return import_cupy()
    except ImportError as exc:
        raise CudaUnavailable(f"the CUDA linker needs CuPy, which is not installed ({exc}); "
                              f"pip install cupy-cuda13x (or pip install -e '.[cuda]' in "
                              f"tenure's source tree)") from None


def require_device():
    """The ``cupy`` module, once a CUDA device has answered; else
    :class:`~tenure.symbolic.device.CudaUnavailable` naming what is missing
    (CuPy, or a device/driver)."""
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


# -- device runtimes ---------------------------------------------------------------


class Usage:
    """Device memory a block of code allocated (:meth:`CupyRuntime.track`):
    ``n_allocations`` and ``allocated_bytes`` (every allocation, even those
    freed again), ``peak_bytes`` (the most it held at once above what was in
    use when the block began)."""

    __slots__ = ("n_allocations", "allocated_bytes", "peak_bytes")

    def __init__(self):
        self.n_allocations = self.allocated_bytes = self.peak_bytes = 0

    def __repr__(self):
        return (f"Usage(n_allocations={self.n_allocations}, "
                f"allocated_bytes={self.allocated_bytes}, peak_bytes={self.peak_bytes})")


class CupyRuntime:
    """The device operations tenure needs, over CuPy arrays on the current
    CUDA device (allocations from CuPy's memory pool)."""

    name = CUDA
    #: CuPy's pool hands out multiples of 512 bytes (its allocation unit):
    #: what a buffer of n bytes costs, for planned peaks to compare with measured
    allocation_unit = 512

    def __init__(self, cupy):
        self.cupy = cupy
        self.calls = CallOrder(self)

    def is_device_array(self, value) -> bool:
        return isinstance(value, self.cupy.ndarray)

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype)

    def from_host(self, array: np.ndarray):
        """A device copy, queued on the current stream (after the last
        call's work: see :class:`CallOrder`)."""
        with self.calls.call():
            return self.cupy.array(array, copy=True, order="C")

    def to_host(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def copy_into(self, target, source) -> None:
        """``source`` (a host or device array of ``target``'s shape) written
        into ``target`` (a host array straight into it when it is contiguous
        and of the same dtype, as ``set`` requires; else through a device copy)."""
        copy_into_device(self, target, source, self.cupy.copyto)

    def arange(self, start, stop, step, dtype):
        return self.cupy.arange(start, stop, step, dtype=dtype)

    def scatter_add(self, target, positions, values) -> None:
        """``target[positions] += values`` with repeated positions adding up."""
        import cupyx       # CuPy's extras: imported with the first scatter
        cupyx.scatter_add(target, positions, values)

    def gemm(self, x, y, out, alpha, beta) -> bool:
        """``out = alpha * x @ y + beta * out`` by cuBLAS, without a
        temporary, for 2-d float or complex arrays of ``out``'s dtype
        (False, doing nothing, for others)."""
        if not _blas_operands(x, y, out):
            return False
        from cupy import cublas     # loads libcublas: only when a product runs
        cublas.gemm("N", "N", x, y, out=out, alpha=alpha, beta=beta)
        return True

    def may_share_memory(self, a, b) -> bool:
        return bool(self.cupy.may_share_memory(a, b))

    def synchronize(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()

    def current_stream(self):
        """This thread's current stream, where tenure issues its work."""
        return self.cupy.cuda.get_current_stream()

    def stream(self, non_blocking: bool = False):
        """A new CUDA stream (``with runtime.stream():`` makes it current)."""
        return self.cupy.cuda.Stream(non_blocking=non_blocking)

    @contextlib.contextmanager
    def track(self):
        """Count the pool allocations made in the block (this thread's): a
        CuPy memory hook sees every allocation from the pool and every
        return to it."""
        usage = Usage()
        hook = counting_hook(self.cupy, usage)
        with hook:
            yield usage

    # -- CUDA graphs -------------------------------------------------------------
    @contextlib.contextmanager
    def capturing(self, stream):
        """Capture the block's work on ``stream`` (not the null stream) into
        ``captured.graph``; an allocation from the pool in this thread raises
        :class:`CaptureUnsupported` (a memory hook), and CUDA refuses host
        synchronisations and copies itself.  On any error the capture is
        ended and its graph dropped."""
        with captured_on(stream, refusing_allocations(self.cupy)) as captured:
            yield captured

    def launch_graph(self, graph) -> None:
        graph.launch(self.cupy.cuda.get_current_stream())

    def copy_async(self, target, source) -> None:
        """``source`` copied into ``target`` (device arrays of one shape and
        dtype) on the current stream, allocating nothing."""
        self.cupy.copyto(target, source)


def refusing_allocations(cupy):
    """A CuPy memory hook (``with hook:``, this thread) raising
    :class:`CaptureUnsupported` for any allocation from the pool: a block
    allocated during a capture goes back to the pool while the graph still
    uses it, so a captured function must allocate nothing."""
    class RefusingHook(cupy.cuda.MemoryHook):
        name = "tenure-capture"

        def malloc_preprocess(self, **kwargs):
            raise CaptureUnsupported(
                f"an allocation of {kwargs['mem_size']} bytes from CuPy's memory pool during "
                f"a CUDA graph capture (the pool is not graph-safe)")

    return RefusingHook()


@contextlib.contextmanager
def captured_on(stream, guard):
    """Capture the block's work on ``stream`` (under ``guard``, a context that
    refuses what a capture must not do) into the ``CapturedGraph`` it
    yields; on any error the capture is ended and its graph dropped."""
    captured = CapturedGraph()
    with stream:
        stream.begin_capture()
        try:
            with guard:
                yield captured
        except BaseException:
            _end_quietly(stream)
            raise
        captured.graph = stream.end_capture()


def copy_into_device(runtime, target, source, copyto) -> None:
    """``source`` (a host or device array of ``target``'s shape) written into
    the device array ``target`` on ``runtime``, ordered after the calls that
    may still read it: a host array straight in when it is contiguous and of
    the same dtype (as ``set`` requires), else uploaded and copied on the
    device with ``copyto`` (CuPy's, or NumPy's over emulated arrays)."""
    with runtime.calls.call():
        if isinstance(source, np.ndarray):
            if target.flags.c_contiguous and source.dtype == target.dtype:
                target.set(source)
                return
            source = runtime.from_host(source)
        copyto(target, source, casting="unsafe")


def _end_quietly(stream) -> None:
    """End a capture that failed (its graph, or CUDA's invalidation error, dropped)."""
    try:
        stream.end_capture()
    except Exception:   # noqa: BLE001 -- the capture's own error is the one raised
        pass


def counting_hook(cupy, usage: Usage):
    """A CuPy memory hook adding every allocation from the pool to ``usage``
    and following the bytes held, for its peak (``with hook:`` turns it on
    in this thread)."""
    class CountingHook(cupy.cuda.MemoryHook):
        name = "tenure-usage"

        def __init__(self):
            self.live = 0

        def malloc_postprocess(self, **kwargs):
            usage.n_allocations += 1
            usage.allocated_bytes += kwargs["mem_size"]
            self.live += kwargs["mem_size"]
            usage.peak_bytes = max(usage.peak_bytes, self.live)

        def free_postprocess(self, **kwargs):
            self.live -= kwargs["mem_size"]

    return CountingHook()


class EmulatedRuntime:
    """The same operations over the emulated device
    (:mod:`tenure.linkers.cuda.emulated_device`: host memory behind arrays that
    behave like CuPy's), for running the device path without a GPU."""

    name = EMULATED
    #: the emulated device counts each allocation's exact bytes
    allocation_unit = 1

    def __init__(self):
        self.device = emulated_device()
        self.calls = CallOrder(self)

    def is_device_array(self, value) -> bool:
        return isinstance(value, EmulatedDeviceArray)

    def empty(self, shape, dtype):
        return self.device.empty(shape, dtype)

    def from_host(self, array: np.ndarray):
        with self.calls.call():
            return self.device.from_host(array)

    def to_host(self, array) -> np.ndarray:
        return array.get()

    def copy_into(self, target, source) -> None:
        copy_into_device(self, target, source, np.copyto)

    def arange(self, start, stop, step, dtype):
        return self.device.from_host(np.arange(start, stop, step, dtype=dtype))

    def scatter_add(self, target, positions, values) -> None:
        np.add.at(target, positions, values)

    def gemm(self, x, y, out, alpha, beta) -> bool:
        """As cuBLAS does it: no device memory beyond ``out`` (the product
        is formed in host memory, which the emulated device does not count)."""
        if not _blas_operands(x, y, out):
            return False
        result = np.matmul(x.get(), y.get())
        result *= _host_scalar(alpha)
        result += _host_scalar(beta) * out.get()
        out.set(result.astype(out.dtype, copy=False))
        return True

    def may_share_memory(self, a, b) -> bool:
        """Bounds of the memory, as CuPy's: metadata, no synchronisation."""
        return bool(np.may_share_memory(getattr(a, "_mem", a), getattr(b, "_mem", b)))

    def synchronize(self) -> None:
        """Wait for the current stream: run what is queued on it."""
        self.device.current_stream().synchronize()

    def current_stream(self):
        return self.device.current_stream()

    def stream(self, non_blocking: bool = False):
        """A new stream of the emulated device (``cupy.cuda.Stream``)."""
        return self.device.stream(non_blocking)

    def launch(self, run, arrays, name: str = "kernel") -> None:
        """Queue ``run()`` over ``arrays``' memory on the current stream."""
        self.device.launch(run, arrays, name)

    # -- CUDA graphs (the emulated device's capture: see its module doc) ---------
    @contextlib.contextmanager
    def capturing(self, stream):
        with captured_on(stream, contextlib.nullcontext()) as captured:
            yield captured

    def launch_graph(self, graph) -> None:
        graph.launch(self.device.current_stream())

    def copy_async(self, target, source) -> None:
        """Queued on the current stream, as a device-to-device copy is."""
        target_mem, source_mem = target._mem, source._mem
        self.device.launch(lambda: np.copyto(target_mem, source_mem, casting="unsafe"),
                           [target, source], name="memcpy DtoD")

    @contextlib.contextmanager
    def track(self):
        usage = Usage()
        device = self.device
        start_count, start_bytes = device.n_allocations(), device.allocated_bytes()
        start_used = device.used_bytes()
        device.reset_peak()
        try:
            yield usage
        finally:
            usage.n_allocations = device.n_allocations() - start_count
            usage.allocated_bytes = device.allocated_bytes() - start_bytes
            usage.peak_bytes = max(0, device.peak_bytes() - start_used)


class CallOrder:
    """The order of tenure's work on one device across streams.

    Each call runs on the caller's current stream.  Work on one stream runs
    in order, and CuPy's pool reuses memory freed on a stream only for
    allocations on that stream, so within a stream nothing more is needed.
    Across streams nothing is ordered, so ``with order.call(keep):`` makes
    the current stream wait (an event, no host wait) for the last call's
    work when that was issued on another stream -- a call reads what the
    last one wrote (shared storage, kept buffers, uploaded constants) -- and
    keeps ``keep`` (the arrays the call used: arguments, shared storage an
    update may replace) alive until the call's stream has passed them, so
    that none goes back to its own stream's pool while this one may still
    read it."""

    def __init__(self, runtime):
        self.runtime = runtime
        self._lock = threading.Lock()
        self._last = None            # (stream ptr, event) of the last call
        self._retired: list = []     # (event, arrays kept until it is reached)

    @contextlib.contextmanager
    def call(self, keep=()):
        stream = self.runtime.current_stream()
        with self._lock:
            last = self._last
            self._retired = [(e, kept) for e, kept in self._retired if not e.done]
        if last is not None and last[0] != stream.ptr:
            stream.wait_event(last[1])
        try:
            yield
        finally:
            event = stream.record()
            with self._lock:
                self._last = (stream.ptr, event)
                if keep:
                    self._retired.append((event, list(keep)))

    def pending(self) -> int:
        """How many calls' arrays are still held for their streams."""
        with self._lock:
            return len(self._retired)


def _blas_operands(x, y, out) -> bool:
    """Whether cuBLAS's gemm takes these: 2-d, one float or complex dtype,
    ``out`` contiguous and exactly the product's shape (not a shape the
    product broadcasts to)."""
    return (x.ndim == y.ndim == out.ndim == 2 and out.dtype.char in "fdFD"
            and x.dtype == y.dtype == out.dtype
            and tuple(out.shape) == (x.shape[0], y.shape[1])
            and (out.flags.c_contiguous or out.flags.f_contiguous))


def _host_scalar(value):
    """A scalar (a Python or NumPy number, or a 0-d device array) as a host number."""
    return value.item() if hasattr(value, "item") else value


def _is_cupy_array(value) -> bool:
    """Whether ``value`` is a CuPy array; never imports CuPy (a CuPy array
    can only exist once CuPy is imported)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(value, cupy.ndarray)


def _is_emulated_array(value) -> bool:
    return isinstance(value, EmulatedDeviceArray)


def register_runtimes() -> None:
    """Register both runtimes with :mod:`tenure.symbolic.device` (again:
    the same entries), each built on first use: the emulated one, and
    CuPy's on the current device (:func:`require_device` first, so that
    ``cuda_runtime()`` without a device raises
    :class:`~tenure.symbolic.device.CudaUnavailable` naming what is missing)."""
    register_device_runtime(EMULATED, EmulatedRuntime, _is_emulated_array)
    register_device_runtime(CUDA, lambda: CupyRuntime(require_device()), _is_cupy_array)
