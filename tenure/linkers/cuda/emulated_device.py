"""An emulated CUDA device: arrays that behave like ``cupy.ndarray`` as far
as tenure can tell, over host memory.

CI has no GPU, yet tenure's CUDA path works on CuPy arrays.  To exercise that
path there, this module provides

- :class:`EmulatedDeviceArray`: one NumPy array inside (``_host``, possibly a
  view of another emulated array's memory) behind CuPy's interface: its
  attributes (``flags`` without ``writeable``, ``data.ptr``, ``device``,
  ``base``), its methods (``get``/``set``, reductions, ...), operators and
  ufuncs that return emulated arrays, and above all **CuPy's refusals**:
  ``np.asarray(a)`` raises CuPy's TypeError, a NumPy array (ndim > 0) mixed
  into a ufunc, an operator, an assignment or a NumPy function raises
  ``TypeError("Unsupported type <class 'numpy.ndarray'>")``, a NumPy function
  CuPy lacks raises TypeError, and there is no ``__index__``.  Code that
  would silently turn a device array into a host one on a GPU fails here
  too, so CI catches it.
- :class:`EmulatedDevice` (:func:`emulated_device`, one per process): the
  runtime that allocates such arrays and counts device bytes as CuPy's memory
  pool would.  Every emulated array whose host memory is a fresh allocation
  counts once, however it was made (``empty``, ``from_host``, ``copy``,
  ``astype``, ufuncs, NumPy functions, operators); views count nothing; the
  bytes come back when the last device array over the memory is
  garbage-collected.
- Asynchrony, as on a GPU (:class:`EmulatedStream`): kernel launches
  (:meth:`EmulatedDevice.launch`) and copies to the device are queued on the
  current stream and run at the next synchronisation point that reaches them
  (a read to the host, ``synchronize``, an event, any operation on device
  values issued now on that stream, which runs what that stream has queued
  first).  The null stream is CUDA's legacy default stream; non-blocking
  streams are ordered only by events.  New memory is garbage (0xFF bytes).
- CuPy's pool rule: a block freed goes back to the stream it was allocated
  on.  Queued work on that stream (or one ordered with it) may still use it
  -- the real pool only reuses it after that work -- but queued work on an
  unordered stream may find it reused: its bytes are poisoned and that work
  raises :class:`EmulatedIllegalAddress` when it runs.  A use-after-free
  across streams fails deterministically, at the synchronisation point, as
  ``CUDA_ERROR_ILLEGAL_ADDRESS`` does on a GPU.
- CUDA graphs (``stream.begin_capture()``, ``stream.end_capture()`` ->
  :class:`EmulatedGraph`, ``graph.launch(stream)``), under CUDA's rules:
  a capture (never on the null stream) records the launches and copies
  issued to the stream instead of queueing them, and a launch of the graph
  queues them again, with the pointers they were captured with.  An
  allocation, a synchronisation with the host (a device-to-host copy, a read
  of a value, a copy from host memory) or a wait for an event from outside
  the capture, issued on a capturing stream, raises
  :class:`EmulatedCaptureUnsupported` (CUDA's
  ``cudaErrorStreamCaptureUnsupported``) and invalidates the capture.  A
  graph launched after memory it uses went back to the pool is a
  use-after-free: :class:`EmulatedIllegalAddress` when it runs.  The
  emulated device runs CuPy-style array operations (ufuncs, NumPy
  functions) at once rather than queueing them, so it cannot capture them:
  on a capturing stream they raise too (views are metadata and do not).

Used by :class:`~tenure.linkers.cuda.runtime.EmulatedRuntime` (the
``"cuda"`` device under ``config.cuda_emulation``, whose kernels the CUDA
linker's :class:`~tenure.linkers.cuda.host_kernels.EmulatedDeviceBackend`
launches on it), and by the tests.  Imports nothing of tenure, and never
imports CuPy.
"""

from __future__ import annotations

import collections
import ctypes
import math
import threading
import weakref
from dataclasses import dataclass

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["CUPY_FUNCTIONS", "IMPLICIT_CONVERSION_MESSAGE", "DeviceArrayFlags",
           "DevicePointer", "EmulatedCaptureUnsupported", "EmulatedDevice",
           "EmulatedDeviceArray", "EmulatedEvent", "EmulatedGraph", "EmulatedIllegalAddress",
           "EmulatedStream", "emulated_device"]

#: CuPy's words when something tries to turn a device array into a NumPy one
IMPLICIT_CONVERSION_MESSAGE = ("Implicit conversion to a NumPy array is not allowed. "
                               "Please use `.get()` to construct a NumPy array explicitly.")

#: NumPy functions (``linalg.x``, ``fft.x`` in submodules) that CuPy implements
#: too (CuPy 14): only these work on emulated arrays through ``__array_function__``.
#: Left out: those taking a Python callback (``apply_along_axis``,
#: ``apply_over_axes``, ``piecewise``), which would hand it host arrays.
#: (``matmul`` is a ufunc in NumPy 2, so it reaches ``__array_ufunc__`` instead.)
CUPY_FUNCTIONS = frozenset("""
    all allclose amax amin angle any append argmax argmin argpartition argsort argwhere
    around array2string array_equal array_equiv array_repr array_split array_str astype
    atleast_1d atleast_2d atleast_3d average bincount broadcast_arrays broadcast_to can_cast
    choose clip column_stack common_type compress concat concatenate convolve copy copyto
    corrcoef correlate count_nonzero cov cross cumprod cumsum cumulative_prod cumulative_sum
    delete diag diag_indices_from diagflat diagonal diff digitize dot dsplit dstack ediff1d
    einsum empty_like expand_dims extract fft.fft fft.fft2 fft.fftn fft.fftshift fft.hfft
    fft.ifft fft.ifft2 fft.ifftn fft.ifftshift fft.ihfft fft.irfft fft.irfft2 fft.irfftn
    fft.rfft fft.rfft2 fft.rfftn fill_diagonal fix flatnonzero flip fliplr flipud full_like
    gradient histogram histogram2d histogramdd hsplit hstack i0 imag inner interp
    intersect1d isclose iscomplex iscomplexobj isin isneginf isposinf isreal isrealobj ix_
    kron lexsort linalg.cholesky linalg.cond linalg.cross linalg.det linalg.eig linalg.eigh
    linalg.eigvals linalg.eigvalsh linalg.inv linalg.lstsq linalg.matmul linalg.matrix_power
    linalg.matrix_rank linalg.matrix_transpose linalg.norm linalg.pinv linalg.qr
    linalg.slogdet linalg.solve linalg.svd linalg.tensorinv linalg.tensorsolve linspace
    logspace matmul matrix_transpose max may_share_memory mean median meshgrid min
    min_scalar_type moveaxis nan_to_num nanargmax nanargmin nancumprod nancumsum nanmax
    nanmean nanmedian nanmin nanprod nanstd nansum nanvar ndim nonzero ones_like outer
    packbits pad partition percentile permute_dims place poly polyadd polyfit polymul
    polysub polyval prod ptp put put_along_axis putmask quantile ravel ravel_multi_index
    real real_if_close repeat reshape resize result_type roll rollaxis roots rot90 round
    save savetxt savez savez_compressed searchsorted select setdiff1d setxor1d shape
    shares_memory sinc size sort sort_complex split squeeze stack std sum swapaxes take
    take_along_axis tensordot tile trace transpose trapezoid tril tril_indices_from
    trim_zeros triu triu_indices_from union1d unique unique_all unique_counts unique_inverse
    unique_values unpackbits unravel_index unwrap vander var vdot vsplit vstack where
    zeros_like
""".split())

#: functions for which NumPy returns a Python scalar but CuPy a 0-d device array
_DEVICE_SCALAR_RESULTS = frozenset({"allclose", "array_equal", "count_nonzero"})

#: DLPack's device types: host memory, and CUDA's (which CuPy's arrays report)
_DLPACK_CPU, _DLPACK_CUDA = 1, 2

_PYTHON_SCALARS = (bool, int, float, complex)


def _unsupported(value) -> TypeError:
    return TypeError(f"Unsupported type {type(value)}")


def _kernel_operand(value):
    """``value`` as a host operand for NumPy, if a CuPy kernel would take it:
    a device array, or a scalar (Python, NumPy, or a NumPy 0-d array)."""
    if isinstance(value, EmulatedDeviceArray):
        return value._host
    if isinstance(value, (*_PYTHON_SCALARS, np.generic)) or (
            isinstance(value, np.ndarray) and value.ndim == 0):
        return value
    raise _unsupported(value)


def _unwrap(obj, host_arrays_ok: bool = False):
    """``obj`` with every emulated array (also inside lists, tuples and dicts)
    replaced by its host array.  A NumPy array (ndim > 0) is refused, as a
    host array handed to CuPy would be, unless ``host_arrays_ok`` (indices:
    CuPy copies host index arrays to the device itself)."""
    if isinstance(obj, EmulatedDeviceArray):
        return obj._host
    if isinstance(obj, np.ndarray) and obj.ndim > 0 and not host_arrays_ok:
        raise _unsupported(obj)
    if isinstance(obj, (list, tuple)):
        items = [_unwrap(item, host_arrays_ok) for item in obj]
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, dict):
        return {key: _unwrap(value, host_arrays_ok) for key, value in obj.items()}
    return obj


def _is_index_array(item) -> bool:
    """An integer index array as CuPy sees one: a list or tuple, or an array
    (0-d too: CuPy keeps only true scalars as scalars) of integers."""
    if isinstance(item, (list, tuple)):
        item = np.asarray(item)
    return isinstance(item, np.ndarray) and item.dtype.kind in "iu"


def _cupy_key(shape: tuple, key, reading: bool = False):
    """``key`` (host values) as CuPy applies it to an array of ``shape``,
    where CuPy and NumPy differ: a zero slice step and a scalar index out of
    range raise CuPy's errors, index arrays that do not broadcast together
    raise its ``ValueError``, and integer index arrays -- which CuPy's
    kernels never check -- wrap around their axis (``% length``) instead of
    raising ``IndexError`` (``reading`` one from an empty axis raises
    CuPy's ``IndexError``; a write there is left to NumPy's: CuPy's is
    undefined).  So a device path that relies on NumPy's checks
    returns the same wrong result here as on a GPU, and CI sees it."""
    items = list(key) if isinstance(key, tuple) else [key]
    arrays = [np.asarray(item) for item in items if _is_index_array(item)]
    try:
        np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise ValueError("operands could not be broadcast together with shapes"
                         + " ".join(str(a.shape) for a in arrays)) from None

    def axes_of(item) -> int:
        if item is None or item is Ellipsis:
            return 0
        return np.ndim(item) if np.asarray(item).dtype.kind == "b" else 1
    rest = len(shape) - sum(map(axes_of, items))
    axis = 0
    for k, item in enumerate(items):
        if item is Ellipsis:
            axis += rest
        elif isinstance(item, slice):
            if item.step is not None and item.step == 0:
                raise ValueError("Slice step must be nonzero.")
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            if axis < len(shape) and not -shape[axis] <= item < shape[axis]:
                raise IndexError(f"Index {item} is out of bounds for axis {axis} with size "
                                 f"{shape[axis]}")
        elif _is_index_array(item) and axis < len(shape):
            if shape[axis]:
                items[k] = np.mod(np.asarray(item, dtype=np.int64), shape[axis])
            elif reading and np.size(item):
                raise IndexError("cannot do a non-empty take from an empty axes.")
        axis += axes_of(item)
    return tuple(items) if isinstance(key, tuple) else items[0]


def _emulated_in(obj):
    """The emulated arrays in ``obj`` (also inside lists, tuples and dicts)."""
    if isinstance(obj, EmulatedDeviceArray):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _emulated_in(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _emulated_in(item)


def _memory_owner(host: np.ndarray) -> np.ndarray:
    """The ndarray at the end of ``host``'s chain of bases: whose memory it is."""
    while isinstance(host.base, np.ndarray):
        host = host.base
    return host


def _wrap(result, related=()):
    """A NumPy result as the device would return it: arrays and NumPy scalars
    as emulated arrays (CuPy returns 0-d arrays, never scalars), tuples and
    lists item by item, anything else unchanged.  ``related``: the emulated
    arrays the result came from; one whose host array *is* the result (an
    ``out=`` argument, ``astype(copy=False)``) is returned itself, and a view
    of one's memory gets that array's owner as ``base``."""
    if isinstance(result, list):
        return [_wrap(item, related) for item in result]
    if isinstance(result, tuple):   # a named tuple (np.unique_all) becomes a plain one
        return tuple(_wrap(item, related) for item in result)
    if isinstance(result, np.generic):
        result = np.asarray(result)
    if not isinstance(result, np.ndarray):
        return result
    for array in related:
        if array._mem is result:      # (an identity: no synchronisation)
            return array
    owner = _memory_owner(result)
    source = next((array for array in related if _memory_owner(array._mem) is owner), None)
    base = source if source is None or source.base is None else source.base
    return EmulatedDeviceArray(result, base=base)


def _qualified_name(func) -> str:
    """``"sum"`` for ``np.sum``, ``"linalg.inv"`` for ``np.linalg.inv``."""
    submodule = getattr(func, "__module__", "").removeprefix("numpy").lstrip(".")
    return f"{submodule}.{func.__name__}" if submodule else func.__name__


def _view_or_synced(array, compute):
    """``compute(host array)``: on the memory as it is, without running the
    stream's queued work, when the result is a view of it (metadata, as on
    CuPy, and allowed during a capture); else again after that work ran (a
    copy reads the values)."""
    result = compute(array._mem)
    if isinstance(result, np.ndarray) and _memory_owner(result) is _memory_owner(array._mem):
        return result
    return compute(array._host)


def _view_method(name: str):
    """A method that makes a view when NumPy's does (see :func:`_view_or_synced`)."""
    def method(self, *args, **kwargs):
        args, kwargs = _unwrap(args), _unwrap(kwargs)
        result = _view_or_synced(self, lambda host: getattr(host, name)(*args, **kwargs))
        return _wrap(result, (self,))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``numpy.ndarray.{name}`` on device memory; a view needs no synchronisation."
    return method


def _host_method(name: str, host_arrays_ok: bool = False):
    """A method that runs ``numpy.ndarray.<name>`` on the host array and
    returns array results on the device."""
    def method(self, *args, **kwargs):
        result = getattr(self._host, name)(*_unwrap(args, host_arrays_ok),
                                           **_unwrap(kwargs, host_arrays_ok))
        return _wrap(result, (self, *_emulated_in((args, kwargs))))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``numpy.ndarray.{name}`` on device memory; arrays stay on the device."
    return method


@dataclass(frozen=True)
class DeviceArrayFlags:
    """CuPy's flags: contiguity and ownership; device memory has no ``writeable``."""

    c_contiguous: bool
    f_contiguous: bool
    owndata: bool

    def __getitem__(self, name: str) -> bool:   # flags["C_CONTIGUOUS"], as CuPy allows
        return getattr(self, name.lower())


@dataclass(frozen=True)
class DevicePointer:
    """What ``array.data`` is: ``ptr``, the address of the first element."""

    ptr: int


class EmulatedDeviceArray(NDArrayOperatorsMixin):
    """A ``cupy.ndarray`` look-alike over host memory (see the module doc).

    ``EmulatedDeviceArray(host, base=...)`` adopts ``host`` (no copy); allocate
    through :class:`EmulatedDevice` instead.  Operators come from
    :class:`~numpy.lib.mixins.NDArrayOperatorsMixin`, which routes each one
    (reflected and in place too) through :meth:`__array_ufunc__`.
    """

    # ``_mem``: the host array (no synchronisation: metadata and launches);
    # ``_alloc``: the pool block it lies in (None: not device memory of ours)
    __slots__ = ("_mem", "_base", "_alloc", "__weakref__")

    def __init__(self, host: np.ndarray, *, base: EmulatedDeviceArray | None = None):
        if not isinstance(host, np.ndarray):
            raise TypeError(f"EmulatedDeviceArray wraps a numpy.ndarray, got {type(host)}")
        self._mem = host
        self._base = base
        self._alloc = emulated_device()._track(host)

    @property
    def _host(self) -> np.ndarray:
        """The values, for an operation that runs now on the current stream:
        the work queued on it before runs first (see :class:`EmulatedStream`)."""
        emulated_device().sync_current()
        return self._mem

    # -- attributes -------------------------------------------------------------
    shape = property(lambda self: self._mem.shape)
    dtype = property(lambda self: self._mem.dtype)
    strides = property(lambda self: self._mem.strides)
    ndim = property(lambda self: self._mem.ndim)
    size = property(lambda self: self._mem.size)
    nbytes = property(lambda self: self._mem.nbytes)
    itemsize = property(lambda self: self._mem.itemsize)
    base = property(lambda self: self._base, doc="The array whose memory this views, or None.")
    device = property(lambda self: "emulated", doc="Where the memory is (a name).")
    T = property(lambda self: self.transpose())
    mT = property(lambda self: _wrap(self._host.mT, (self,)))
    real = property(lambda self: _wrap(self._host.real, (self,)))
    imag = property(lambda self: _wrap(self._host.imag, (self,)))

    @property
    def flags(self) -> DeviceArrayFlags:
        flags = self._mem.flags
        return DeviceArrayFlags(flags.c_contiguous, flags.f_contiguous, self._base is None)

    @property
    def data(self) -> DevicePointer:
        return DevicePointer(self._mem.ctypes.data)

    # -- host transfers ---------------------------------------------------------
    def get(self, stream=None, order: str = "C") -> np.ndarray:
        """A NumPy copy the caller owns."""
        return np.array(self._host, order=order, copy=True)

    def set(self, arr: np.ndarray, stream=None) -> None:
        """Copy host array ``arr`` (same dtype and shape) into this memory."""
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if arr.dtype != self.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if arr.shape != self.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if not (self._host.flags.c_contiguous or self._host.flags.f_contiguous):
            raise RuntimeError("Cannot set to non-contiguous array")   # a single memcpy on CuPy
        np.copyto(self._host, arr)

    # -- methods ----------------------------------------------------------------
    def copy(self, order: str = "C") -> EmulatedDeviceArray:
        return EmulatedDeviceArray(self._host.copy(order=order))

    def fill(self, value) -> None:
        self._host.fill(_kernel_operand(value))

    def tolist(self) -> list:
        return self._host.tolist()

    def tobytes(self, order: str = "C") -> bytes:
        """The values as bytes (a read back to the host, as CuPy's)."""
        return self._host.tobytes(order=order)

    item, astype, flatten, repeat = map(_host_method, ("item", "astype", "flatten", "repeat"))
    reshape, transpose, ravel, view, squeeze, swapaxes, diagonal = map(
        _view_method, ("reshape", "transpose", "ravel", "view", "squeeze", "swapaxes", "diagonal"))
    sum, prod, mean, var, std, cumsum, cumprod = map(
        _host_method, ("sum", "prod", "mean", "var", "std", "cumsum", "cumprod"))
    max, min, argmax, argmin, all, any = map(
        _host_method, ("max", "min", "argmax", "argmin", "all", "any"))
    sort, argsort, nonzero, dot, clip, conj, conjugate, round, trace = map(
        _host_method,
        ("sort", "argsort", "nonzero", "dot", "clip", "conj", "conjugate", "round", "trace"))

    def take(self, indices, axis=None, out=None):
        """CuPy's ``take``: indices out of range wrap around (CuPy has no
        ``mode``, and checks nothing)."""
        indices = np.asarray(_unwrap(indices, host_arrays_ok=True))
        length = self.size if axis is None else self.shape[axis]
        if indices.dtype.kind in "iu" and length:
            indices = np.mod(indices.astype(np.int64), length)
        result = self._host.take(indices, axis=axis,
                                 out=None if out is None else _device_out(out))
        return out if out is not None else _wrap(result, (self,))

    # -- indexing ---------------------------------------------------------------
    def __getitem__(self, key):
        host_key = _cupy_key(self.shape, _unwrap(key, host_arrays_ok=True), reading=True)
        key_items = host_key if isinstance(host_key, tuple) else (host_key,)

        def index(host):
            result = host[host_key]
            if isinstance(result, np.generic):
                # NumPy reads one element out; CuPy returns a 0-d view of it, and
                # a trailing Ellipsis makes NumPy do the same
                result = host[(*key_items, Ellipsis)]
            return result
        return _wrap(_view_or_synced(self, index), (self,))

    def __setitem__(self, key, value) -> None:
        self._host[_cupy_key(self.shape, _unwrap(key, host_arrays_ok=True))] = (
            _kernel_operand(value))

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # -- conversions: explicit reads of one value are allowed, as on CuPy -------
    def __bool__(self) -> bool:
        return bool(self._host)

    def __int__(self) -> int:
        return int(self._host)

    def __float__(self) -> float:
        return float(self._host)

    def __complex__(self) -> complex:
        return complex(self._host)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(IMPLICIT_CONVERSION_MESSAGE)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DLPACK_CUDA, 0)   # what CuPy says: consumers see device memory

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # CuPy exports its device memory, or a host copy when the consumer asks
        # for the CPU (np.from_dlpack(a, device="cpu")); only the copy can be emulated
        if dl_device is None or tuple(dl_device) != (_DLPACK_CPU, 0):
            raise BufferError("emulated device memory cannot be exported as device memory")
        if copy is False:
            raise ValueError("GPU memory cannot be exported to CPU without copy.")
        return self.get().__dlpack__(max_version=max_version)

    def __copy__(self) -> EmulatedDeviceArray:
        return self.copy()

    def __deepcopy__(self, memo) -> EmulatedDeviceArray:
        return self.copy()   # device memory holds no Python objects to copy deeply

    def __reduce__(self):
        return (_from_pickle, (self.get(),))

    def __repr__(self) -> str:
        # NumPy's "array(...)" with our name, continuation lines re-aligned
        name = type(self).__name__
        text = repr(self._host).removeprefix("array(")
        return f"{name}(" + text.replace("\n", "\n" + " " * (len(name) - len("array")))

    def __str__(self) -> str:
        return str(self._host)

    def __format__(self, spec: str) -> str:
        return format(self._host, spec)

    # -- NumPy protocols --------------------------------------------------------
    def __eq__(self, other):
        if _never_equal(other):   # CuPy: None, Ellipsis, ... equal no element
            return _wrap(np.zeros(self.shape, dtype=bool))
        return np.equal(self, other)

    def __ne__(self, other):
        if _never_equal(other):
            return _wrap(np.ones(self.shape, dtype=bool))
        return np.not_equal(self, other)

    __hash__ = None   # like every ndarray

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        related = tuple(_emulated_in((inputs, kwargs)))
        arrays = list(inputs)
        indices = arrays.pop(1) if method == "at" else None   # ufunc.at(a, indices[, b])
        outputs = [o for o in kwargs.get("out", ()) if o is not None]
        if any(map(_is_foreign, arrays + outputs)):
            return NotImplemented
        operands = [_kernel_operand(x) for x in arrays]
        if method == "at":   # CuPy's scatter: index arrays wrap, as for __setitem__
            operands.insert(1, _cupy_key(np.shape(operands[0]),
                                         _unwrap(indices, host_arrays_ok=True)))
        if "out" in kwargs:
            kwargs["out"] = tuple(None if o is None else _device_out(o) for o in kwargs["out"])
        if "where" in kwargs:
            kwargs["where"] = _kernel_operand(kwargs["where"])
        return _wrap(getattr(ufunc, method)(*operands, **kwargs), related)

    def __array_function__(self, func, types, args, kwargs):
        name = _qualified_name(func)
        if name not in CUPY_FUNCTIONS:
            return NotImplemented   # NumPy raises TypeError, as for a function CuPy lacks
        if not all(issubclass(t, (EmulatedDeviceArray, np.ndarray)) for t in types):
            return NotImplemented
        if name in _CUPY_DIFFERENCES:     # where CuPy's function behaves otherwise
            return _CUPY_DIFFERENCES[name](*args, **kwargs)
        result = func(*_unwrap(args), **_unwrap(kwargs))
        if name in _DEVICE_SCALAR_RESULTS:
            result = np.asarray(result)
        return _wrap(result, tuple(_emulated_in((args, kwargs))))


def _cupy_take(a, indices, axis=None, out=None, mode=None):
    return a.take(indices, axis=axis, out=out)


def _cupy_tensordot(a, b, axes=2):
    """CuPy's ``tensordot``: a 0-d operand takes only ``axes`` 0 or
    ``((), ())`` (tuples: CuPy compares, so lists of nothing are refused)."""
    if (np.ndim(a) == 0 or np.ndim(b) == 0) and axes != 0 and axes != ((), ()):
        raise ValueError("An input is zero-dim while axes has dimensions")
    related = tuple(_emulated_in((a, b)))
    return _wrap(np.tensordot(*_unwrap((a, b)), axes=axes), related)


def _cupy_array_split(ary, indices_or_sections, axis=0):
    """CuPy's ``array_split`` (CuPy 14): a negative point is wrapped once
    (``length + p``) and never clamped, so a point below ``-length`` starts
    the next piece *before* the array -- a view of memory that is not the
    array's.  CuPy makes it unchecked and a kernel reading it faults (or reads
    another allocation); here a piece with elements outside the array raises
    :class:`EmulatedIllegalAddress` at once.  Other pieces have CuPy's shapes,
    which are NumPy's."""
    length = ary.shape[axis]
    axis = axis % ary.ndim
    if np.isscalar(indices_or_sections):
        sections = int(indices_or_sections)
        each, large = (length - 1) // sections, (length - 1) % sections + 1
        points = [i * each + min(i, large) for i in range(1, sections)]
    else:
        points = [int(p) if int(p) >= 0 else length + int(p) for p in indices_or_sections]
    cuts, prev = [], 0
    for point in points:
        point = min(point, length)
        cuts.append((prev, max(point - prev, 0)))
        prev = point
    cuts.append((prev, length - prev))
    others = math.prod(n for i, n in enumerate(ary.shape) if i != axis)
    lead = (slice(None),) * axis
    pieces = []
    for start, size in cuts:
        if size and others and (start < 0 or start + size > length):
            raise EmulatedIllegalAddress(
                f"cupy.split made a view of elements {start}..{start + size - 1} of an axis of "
                f"length {length} (axis {axis} of an array of shape {ary.shape}): memory "
                "outside the array, which a kernel reading the piece would touch")
        pieces.append(ary[lead + (slice(max(start, 0), max(start, 0) + size),)])
    return pieces


def _cupy_split(ary, indices_or_sections, axis=0):
    """CuPy's ``split``: ``array_split`` after the equal-division check."""
    if np.isscalar(indices_or_sections) and ary.shape[axis] % int(indices_or_sections):
        raise ValueError("indices_or_sections must divide the size along the axes.\n"
                         "If you want to split the array into non-equally-sized arrays, "
                         "use array_split instead.")
    return _cupy_array_split(ary, indices_or_sections, axis)


def _cupy_var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """CuPy's ``var``: where ``n - ddof <= 0`` it multiplies by a NaN
    instead of dividing by zero, so the result is NaN where NumPy's is inf."""
    related = tuple(_emulated_in((a,)))
    host = _unwrap(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.var(host, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    axes = range(host.ndim) if axis is None else np.atleast_1d(axis)
    if host.size and int(np.prod([host.shape[i] for i in axes])) - ddof <= 0:
        result = np.full_like(result, np.nan)
    if out is not None:
        np.copyto(_device_out(out), result)
        return out
    return _wrap(np.asarray(result), related)


#: NumPy functions whose CuPy counterparts differ in what they check
_CUPY_DIFFERENCES = {"take": _cupy_take, "tensordot": _cupy_tensordot,
                     "split": _cupy_split, "array_split": _cupy_array_split, "var": _cupy_var}


def _device_out(value) -> np.ndarray:
    """The host array behind an ``out=`` argument, which must be on the device."""
    if not isinstance(value, EmulatedDeviceArray):
        raise _unsupported(value)
    return value._host


def _is_foreign(value) -> bool:
    """Neither array nor scalar: CuPy leaves it to its own ``__array_ufunc__``."""
    return not isinstance(value, (EmulatedDeviceArray, np.ndarray, np.generic, *_PYTHON_SCALARS))


def _never_equal(value) -> bool:
    """None, or an object with ``object``'s own equality: equal to no element."""
    return value is None or type(value).__eq__ is object.__eq__


def _from_pickle(host: np.ndarray) -> EmulatedDeviceArray:
    return emulated_device().from_host(host)


class EmulatedIllegalAddress(RuntimeError):
    """What CUDA reports as ``CUDA_ERROR_ILLEGAL_ADDRESS``: a queued
    operation touched memory that the pool may have handed to someone else
    before it ran.  Raised, as on a GPU, at the synchronisation point where
    the operation runs, not where it was issued."""


class EmulatedCaptureUnsupported(RuntimeError):
    """What CUDA reports as ``cudaErrorStreamCaptureUnsupported`` (and, at
    ``end_capture``, ``cudaErrorStreamCaptureInvalidated``): an operation a
    stream capture cannot record was issued on a capturing stream."""


class _Capture:
    """A stream capture in progress: the operations recorded, as
    ``(run, keep, block references, name)``, and the first refusal (which
    invalidates it)."""

    __slots__ = ("ops", "error")

    def __init__(self):
        self.ops: list = []
        self.error: str | None = None


class EmulatedGraph:
    """A captured sequence of operations (``cupy.cuda.Graph``): ``launch``
    queues them again on a stream, over the memory they were captured with."""

    def __init__(self, device, ops: list):
        self.device = device
        self._ops = tuple(ops)

    def __len__(self) -> int:
        return len(self._ops)

    def upload(self, stream=None) -> None:
        """(CuPy's ``Graph.upload``: nothing to do here.)"""

    def launch(self, stream=None) -> None:
        """Queue the captured operations on ``stream`` (None: the current
        one), in capture order.  One that uses memory gone back to the pool
        since the capture raises :class:`EmulatedIllegalAddress` when it runs."""
        stream = stream if stream is not None else self.device.current_stream()
        if stream._capture is not None:
            self.device._capture_refused(stream, "a graph launch (child graphs are not emulated)")
        for run, keep, refs, name in self._ops:
            blocks = [ref() for ref in refs]
            live = tuple(b for b in blocks if b is not None)
            op = self.device._enqueue(stream, run, [], keep, f"graph node {name}", live)
            if len(live) != len(blocks):
                op.poisoned = (f"graph node {name} uses device memory that went back to the "
                               f"pool after the graph was captured")


class _Block:
    """One allocation from the emulated pool: its bytes, the stream it was
    allocated on (CuPy's pool reuses a freed block only for allocations on
    that stream) and the queued operations that use it."""

    __slots__ = ("nbytes", "stream", "pending", "__weakref__")

    def __init__(self, nbytes: int, stream):
        self.nbytes = nbytes
        self.stream = stream
        self.pending: set = set()


class _Pending:
    """An operation queued on a stream: ``run()`` (None for a pure wait),
    the ``(stream, seq)`` points it waits for first, the host memory it
    keeps readable (as a GPU keeps the bytes: the pool does not unmap a
    freed block) and the pool blocks it uses (weakly: queued work does not
    keep a block from going back to the pool)."""

    __slots__ = ("seq", "stream", "run", "after", "keep", "blocks", "name", "poisoned")

    def __init__(self, seq, stream, run, after, keep, blocks, name):
        self.seq, self.stream, self.run, self.after = seq, stream, run, after
        self.keep, self.blocks, self.name = keep, blocks, name
        self.poisoned = None


def _ordered(a, b) -> bool:
    """Whether work on streams ``a`` and ``b`` is ordered without an event:
    the same stream, or the legacy null stream and a blocking stream (the
    null stream waits for them and they wait for it)."""
    return a is b or (a.null and not b.non_blocking) or (b.null and not a.non_blocking)


class EmulatedStream:
    """A CUDA stream of the emulated device (``cupy.cuda.Stream``'s
    interface: ``with stream:``, ``synchronize``, ``record``,
    ``wait_event``, ``done``, ``ptr``).  Work issued to it -- kernel
    launches (:meth:`EmulatedDevice.launch`), host-to-device copies -- is
    queued and runs, in issue order, at the next synchronisation point that
    reaches it: :meth:`synchronize`, an event's, or any operation that reads
    or writes device values now on this stream (a device-to-host copy,
    ``item()``, a CuPy-style array operation), which first runs what the
    current stream has queued.  The null stream is CUDA's legacy default
    stream: ordered with every blocking stream; a ``non_blocking`` stream
    is ordered with nothing but itself and the events it waits for."""

    def __init__(self, device, non_blocking: bool = False, *, null: bool = False):
        self.device = device
        self.non_blocking = non_blocking
        self.null = null
        self._queue: collections.deque = collections.deque()
        self._issued = 0     # seq of the last operation issued
        self._done = 0       # seq of the last operation run
        self._capture: _Capture | None = None   # a capture in progress

    ptr = property(lambda self: 0 if self.null else id(self))
    done = property(lambda self: self._done >= self._issued,
                    doc="Whether everything issued to the stream has run.")

    def __enter__(self):
        self.device._push(self)
        return self

    def __exit__(self, *exc):
        self.device._pop(self)

    def synchronize(self) -> None:
        if self._capture is not None:
            self.device._capture_refused(self, "a stream synchronisation")
        self.device._run_stream(self, ordered=True)

    def record(self, event=None) -> EmulatedEvent:
        """An event that is reached once the work issued so far has run."""
        if self._capture is not None:
            self.device._capture_refused(self, "an event record (not emulated in a capture)")
        return EmulatedEvent(self, self._issued)

    def wait_event(self, event: EmulatedEvent) -> None:
        """Work issued to this stream from now on runs after ``event``."""
        if self._capture is not None:    # cudaErrorStreamCaptureIsolation on a GPU
            self.device._capture_refused(self, "a wait for an event from outside the capture")
        self.device._enqueue(self, None, [(event.stream, event.seq)], (), "wait_event")

    # -- CUDA graphs -------------------------------------------------------------
    def begin_capture(self, mode=None) -> None:
        """Record what is issued to this stream from now on, instead of
        queueing it, until :meth:`end_capture` (see the module doc)."""
        self.device._begin_capture(self)

    def end_capture(self) -> EmulatedGraph:
        """The captured operations as a graph; raises
        :class:`EmulatedCaptureUnsupported` when the capture was invalidated."""
        return self.device._end_capture(self)

    def is_capturing(self) -> bool:
        return self._capture is not None

    def __repr__(self):
        kind = "null" if self.null else "non-blocking" if self.non_blocking else "blocking"
        return f"<EmulatedStream {kind} {self.ptr:#x}>"


class EmulatedEvent:
    """A point in a stream's work (``cupy.cuda.Event``'s ``done`` and
    ``synchronize``)."""

    def __init__(self, stream: EmulatedStream, seq: int):
        self.stream, self.seq = stream, seq

    done = property(lambda self: self.stream._done >= self.seq)

    def synchronize(self) -> None:
        self.stream.device._refuse_if_capturing("an event synchronisation")
        self.stream.device._run_until(self.stream, self.seq)


class EmulatedDevice:
    """The emulated device's runtime: allocation, host transfers, streams,
    and a memory pool's counts and rules (see the module doc).  Thread-safe."""

    name = "emulated"

    def __init__(self):
        # re-entrant: a garbage collection inside a locked section may run a
        # release (a weakref.finalize callback) in the same thread
        self._lock = threading.RLock()
        self._live: dict[int, weakref.ref] = {}   # id of a tracked host array -> its block
        self._used = self._peak = self._allocated = self._count = 0
        self.null_stream = EmulatedStream(self, null=True)
        self._streams: weakref.WeakSet = weakref.WeakSet()   # streams with queued work
        self._n_pending = 0
        self._n_capturing = 0             # streams capturing (checked before each sync)
        self._local = threading.local()   # each thread's stack of current streams

    # -- allocation and transfers -----------------------------------------------
    def empty(self, shape, dtype=float) -> EmulatedDeviceArray:
        """Uninitialised memory, as the pool's is: every byte 0xFF (NaN, -1)."""
        host = np.empty(shape, dtype)
        _poison(host)
        return EmulatedDeviceArray(host)

    def zeros(self, shape, dtype=float) -> EmulatedDeviceArray:
        return EmulatedDeviceArray(np.zeros(shape, dtype))

    def from_host(self, array) -> EmulatedDeviceArray:
        """A C-contiguous device copy of host data (always a copy).  As
        CuPy's: the host data is staged at once (the caller may reuse it),
        the copy to the device is queued on the current stream."""
        staged = np.array(array, order="C", copy=True)
        target = self.empty(staged.shape, staged.dtype)
        memory = target._mem    # (the queue holds memory, never the array)
        self.launch(lambda: np.copyto(memory, staged), [target], name="memcpy HtoD")
        return target

    def to_host(self, array: EmulatedDeviceArray) -> np.ndarray:
        return array.get()

    def asarray(self, value) -> EmulatedDeviceArray:
        """``value`` itself when on the device, else a device copy of it."""
        return value if isinstance(value, EmulatedDeviceArray) else self.from_host(value)

    @staticmethod
    def is_device_array(value) -> bool:
        return isinstance(value, EmulatedDeviceArray)

    # -- streams and queued work -------------------------------------------------
    def stream(self, non_blocking: bool = False) -> EmulatedStream:
        """A new stream (``cupy.cuda.Stream(non_blocking=...)``)."""
        return EmulatedStream(self, non_blocking)

    def current_stream(self) -> EmulatedStream:
        """This thread's current stream: the innermost ``with stream:``, else
        the null stream (CuPy's default in every thread)."""
        stack = getattr(self._local, "streams", None)
        return stack[-1] if stack else self.null_stream

    def launch(self, run, arrays, name: str = "kernel") -> None:
        """Queue ``run()`` (which reads and writes the memory of ``arrays``,
        emulated device arrays) on the current stream; it runs at the next
        synchronisation point that reaches it.  Like a GPU, the queue holds
        the memory, not the arrays: an array dropped meanwhile goes back to
        the pool (see :meth:`_free`)."""
        keep = tuple(a._mem for a in arrays)
        blocks = tuple({id(a._alloc): a._alloc for a in arrays if a._alloc is not None}.values())
        self._enqueue(self.current_stream(), run, [], keep, name, blocks)

    def sync_current(self) -> None:
        """Run what the current stream has queued (and what it is ordered
        after): an operation on device values is about to run on it now
        (refused on a capturing stream: see the module doc)."""
        if self._n_capturing:
            self._refuse_if_capturing("a synchronisation with the host (a read of device "
                                      "values, or an operation run at once)")
        if self._n_pending:
            self._run_stream(self.current_stream(), ordered=True)

    def synchronize(self) -> None:
        """``cudaDeviceSynchronize``: run everything queued on every stream."""
        self._refuse_if_capturing("a device synchronisation")
        while self._n_pending:
            for stream in list(self._streams) + [self.null_stream]:
                self._run_stream(stream, ordered=False)

    def _push(self, stream) -> None:
        self._local.__dict__.setdefault("streams", []).append(stream)

    def _pop(self, stream) -> None:
        stack = self._local.streams
        if not stack or stack[-1] is not stream:
            raise RuntimeError("streams left out of order")
        stack.pop()

    def _enqueue(self, stream, run, after, keep, name, blocks=()):
        """Queue an operation on ``stream`` (recorded instead while it
        captures); returns the queued ``_Pending`` (None when recorded)."""
        capture = stream._capture
        if capture is not None:
            with self._lock:
                capture.ops.append((run, keep, tuple(weakref.ref(b) for b in blocks), name))
            return None
        with self._lock:
            after = list(after) + self._implicit_waits(stream)
            stream._issued += 1
            op = _Pending(stream._issued, stream, run, after, keep, blocks, name)
            for block in blocks:
                block.pending.add(op)
            op.blocks = tuple(weakref.ref(block) for block in blocks)
            stream._queue.append(op)
            self._streams.add(stream)
            self._n_pending += 1
        return op

    # -- stream capture (CUDA graphs) -------------------------------------------
    def _begin_capture(self, stream) -> None:
        if stream.null:
            raise EmulatedCaptureUnsupported(
                "cudaErrorStreamCaptureUnsupported: the legacy default (null) stream cannot "
                "be captured; capture on a stream of your own")
        with self._lock:
            if stream._capture is not None:
                raise EmulatedCaptureUnsupported(
                    f"cudaErrorIllegalState: {stream!r} is already capturing")
            stream._capture = _Capture()
            self._n_capturing += 1

    def _end_capture(self, stream) -> EmulatedGraph:
        with self._lock:
            capture = stream._capture
            if capture is None:
                raise EmulatedCaptureUnsupported(
                    f"cudaErrorIllegalState: {stream!r} is not capturing")
            stream._capture = None
            self._n_capturing -= 1
        if capture.error is not None:
            raise EmulatedCaptureUnsupported(
                f"cudaErrorStreamCaptureInvalidated: the capture was invalidated by "
                f"{capture.error}")
        return EmulatedGraph(self, capture.ops)

    def _refuse_if_capturing(self, what: str) -> None:
        """Raise when this thread's current stream is capturing."""
        if self._n_capturing:
            stream = self.current_stream()
            if stream._capture is not None:
                self._capture_refused(stream, what)

    def _capture_refused(self, stream, what: str):
        """``what``, issued on capturing ``stream``: the capture is
        invalidated and CUDA's error raised."""
        with self._lock:
            if stream._capture is not None and stream._capture.error is None:
                stream._capture.error = what
        raise EmulatedCaptureUnsupported(
            f"cudaErrorStreamCaptureUnsupported: operation not permitted when stream is "
            f"capturing: {what}")

    def _implicit_waits(self, stream) -> list:
        """The legacy null stream's ordering: work on it waits for every
        blocking stream's work issued before, and theirs for its."""
        if stream.non_blocking:
            return []
        if stream.null:
            return [(s, s._issued) for s in self._streams
                    if s is not stream and not s.non_blocking and s._queue]
        null = self.null_stream
        return [(null, null._issued)] if null._queue else []

    def _run_stream(self, stream, ordered: bool) -> None:
        """Run all of ``stream``'s queue; ``ordered``: the blocking streams
        the legacy null stream is ordered with too (an operation issued now)."""
        if ordered and not stream.non_blocking:
            others = list(self._streams) if stream.null else [self.null_stream]
            for other in others:
                if other is not stream and not other.non_blocking:
                    self._run_until(other, other._issued)
        self._run_until(stream, stream._issued)

    def _run_until(self, stream, seq: int) -> None:
        """Run ``stream``'s queued operations up to ``seq``, each after the
        points it waits for; the first that touched freed memory raises."""
        with self._lock:
            queue = stream._queue
            while queue and queue[0].seq <= seq:
                op = queue.popleft()
                # Counted as pending until it has run: another thread's
                # sync_current reads the count without the lock, and must
                # not find 0 (and read memory) while this op still writes it.
                try:
                    self._run_op(stream, op)
                finally:
                    self._n_pending -= 1
            stream._done = max(stream._done, min(seq, stream._issued))

    def _run_op(self, stream, op) -> None:
        """Run one queued ``op`` of ``stream`` after the points it waits for
        (the caller holds the lock); raise if it touches freed memory."""
        for ref in op.blocks:
            block = ref()
            if block is not None:
                block.pending.discard(op)
        for other, other_seq in op.after:
            self._run_until(other, other_seq)
        stream._done = op.seq
        if op.poisoned:
            raise EmulatedIllegalAddress(op.poisoned)
        if op.run is not None:
            op.run()

    # -- accounting (reading one int needs no lock; updating several does) ------
    def used_bytes(self) -> int:
        """Bytes held by live allocations."""
        return self._used

    def peak_bytes(self) -> int:
        """The most :meth:`used_bytes` has been since :meth:`reset_peak`."""
        return self._peak

    def allocated_bytes(self) -> int:
        """Bytes of every allocation ever made (never decreases)."""
        return self._allocated

    def n_allocations(self) -> int:
        return self._count

    def reset_peak(self) -> None:
        with self._lock:
            self._peak = self._used

    def _track(self, host: np.ndarray) -> _Block | None:
        """The pool block of ``host``'s memory: a new one (counted as one
        allocation, on the current stream) unless it is a view of memory
        already counted; None when empty (CuPy allocates nothing for it)."""
        owner = _memory_owner(host)
        if not owner.flags.owndata or owner.nbytes == 0:
            return None
        key = id(owner)
        with self._lock:
            known = self._live.get(key)
            block = known() if known is not None else None
            if block is not None:
                return block
            if self._n_capturing:     # the pool is not graph-safe (as CuPy's is not)
                self._refuse_if_capturing(f"an allocation of {owner.nbytes} bytes from the "
                                          f"memory pool")
            block = _Block(owner.nbytes, self.current_stream())
            self._live[key] = weakref.ref(block)
            self._used += owner.nbytes
            self._allocated += owner.nbytes
            self._count += 1
            self._peak = max(self._peak, self._used)
        # the block goes back to the pool when the last device array over it
        # goes (views keep it, as they keep CuPy's memory), even while queued
        # work still holds the host bytes
        weakref.finalize(block, self._free, key, owner, block.nbytes, block.stream,
                         block.pending).atexit = False
        return block

    def _free(self, key: int, owner: np.ndarray, nbytes: int, stream, pending: set) -> None:
        """A block back in the pool.  CuPy's pool is stream-ordered: it hands
        the block again only to allocations on the stream it was allocated
        on, whose work runs after the work queued there before.  So queued
        work on that stream (or one ordered with it) may still use it; queued
        work on any other stream may find it reused: its bytes are poisoned
        and that work raises :class:`EmulatedIllegalAddress` when it runs."""
        with self._lock:
            if self._live.get(key) is not None and self._live[key]() is None:
                del self._live[key]
            self._used -= nbytes
            unordered = [op for op in pending if not _ordered(op.stream, stream)]
            for op in unordered:
                op.poisoned = (f"{op.name} queued on {op.stream!r} uses {nbytes} bytes "
                               f"allocated on {stream!r} and freed before it ran")
            if unordered:
                _poison(owner)


def _poison(host: np.ndarray) -> None:
    """Every byte of ``host``'s memory 0xFF: NaN as a float, -1 as an integer."""
    owner = _memory_owner(host)
    if owner.nbytes and owner.flags.owndata:
        ctypes.memset(owner.ctypes.data, 0xFF, owner.nbytes)


_DEVICE: EmulatedDevice | None = None
_DEVICE_LOCK = threading.Lock()


def emulated_device() -> EmulatedDevice:
    """The process's emulated device (one memory pool for every array)."""
    global _DEVICE
    if _DEVICE is None:
        with _DEVICE_LOCK:
            if _DEVICE is None:
                _DEVICE = EmulatedDevice()
    return _DEVICE
