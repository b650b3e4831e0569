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
  bytes come back when the host memory is garbage-collected.

Never imports CuPy.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["CUPY_FUNCTIONS", "IMPLICIT_CONVERSION_MESSAGE", "DeviceArrayFlags",
           "DevicePointer", "EmulatedDevice", "EmulatedDeviceArray", "emulated_device"]

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
        if array._host is result:
            return array
    owner = _memory_owner(result)
    source = next((array for array in related if _memory_owner(array._host) is owner), None)
    base = source if source is None or source.base is None else source.base
    return EmulatedDeviceArray(result, base=base)


def _qualified_name(func) -> str:
    """``"sum"`` for ``np.sum``, ``"linalg.inv"`` for ``np.linalg.inv``."""
    submodule = getattr(func, "__module__", "").removeprefix("numpy").lstrip(".")
    return f"{submodule}.{func.__name__}" if submodule else func.__name__


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

    __slots__ = ("_host", "_base", "__weakref__")

    def __init__(self, host: np.ndarray, *, base: EmulatedDeviceArray | None = None):
        if not isinstance(host, np.ndarray):
            raise TypeError(f"EmulatedDeviceArray wraps a numpy.ndarray, got {type(host)}")
        self._host = host
        self._base = base
        emulated_device()._track(host)

    # -- attributes -------------------------------------------------------------
    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    strides = property(lambda self: self._host.strides)
    ndim = property(lambda self: self._host.ndim)
    size = property(lambda self: self._host.size)
    nbytes = property(lambda self: self._host.nbytes)
    itemsize = property(lambda self: self._host.itemsize)
    base = property(lambda self: self._base, doc="The array whose memory this views, or None.")
    device = property(lambda self: "emulated", doc="Where the memory is (a name).")
    T = property(lambda self: self.transpose())
    mT = property(lambda self: _wrap(self._host.mT, (self,)))
    real = property(lambda self: _wrap(self._host.real, (self,)))
    imag = property(lambda self: _wrap(self._host.imag, (self,)))

    @property
    def flags(self) -> DeviceArrayFlags:
        flags = self._host.flags
        return DeviceArrayFlags(flags.c_contiguous, flags.f_contiguous, self._base is None)

    @property
    def data(self) -> DevicePointer:
        return DevicePointer(self._host.ctypes.data)

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

    item, astype, reshape, transpose, ravel, flatten, view = map(
        _host_method, ("item", "astype", "reshape", "transpose", "ravel", "flatten", "view"))
    squeeze, swapaxes, diagonal, repeat = map(
        _host_method, ("squeeze", "swapaxes", "diagonal", "repeat"))
    sum, prod, mean, var, std, cumsum, cumprod = map(
        _host_method, ("sum", "prod", "mean", "var", "std", "cumsum", "cumprod"))
    max, min, argmax, argmin, all, any = map(
        _host_method, ("max", "min", "argmax", "argmin", "all", "any"))
    sort, argsort, nonzero, dot, clip, conj, conjugate, round, trace = map(
        _host_method,
        ("sort", "argsort", "nonzero", "dot", "clip", "conj", "conjugate", "round", "trace"))
    take = _host_method("take", host_arrays_ok=True)

    # -- indexing ---------------------------------------------------------------
    def __getitem__(self, key):
        host_key = _unwrap(key, host_arrays_ok=True)
        result = self._host[host_key]
        if isinstance(result, np.generic):
            # NumPy reads one element out; CuPy returns a 0-d view of it, and
            # a trailing Ellipsis makes NumPy do the same
            key_items = host_key if isinstance(host_key, tuple) else (host_key,)
            result = self._host[(*key_items, Ellipsis)]
        return _wrap(result, (self,))

    def __setitem__(self, key, value) -> None:
        self._host[_unwrap(key, host_arrays_ok=True)] = _kernel_operand(value)

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
        if method == "at":
            operands.insert(1, _unwrap(indices, host_arrays_ok=True))
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
        result = func(*_unwrap(args), **_unwrap(kwargs))
        if name in _DEVICE_SCALAR_RESULTS:
            result = np.asarray(result)
        return _wrap(result, tuple(_emulated_in((args, kwargs))))


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


class EmulatedDevice:
    """The emulated device's runtime: allocation, host transfers, and a
    memory pool's counts (see the module doc).  Thread-safe."""

    name = "emulated"

    def __init__(self):
        # re-entrant: a garbage collection inside a locked section may run a
        # release (a weakref.finalize callback) in the same thread
        self._lock = threading.RLock()
        self._live: dict[int, int] = {}   # id of a tracked host array -> its bytes
        self._used = self._peak = self._allocated = self._count = 0

    # -- allocation and transfers -----------------------------------------------
    def empty(self, shape, dtype=float) -> EmulatedDeviceArray:
        return EmulatedDeviceArray(np.empty(shape, dtype))

    def zeros(self, shape, dtype=float) -> EmulatedDeviceArray:
        return EmulatedDeviceArray(np.zeros(shape, dtype))

    def from_host(self, array) -> EmulatedDeviceArray:
        """A C-contiguous device copy of host data (always a copy)."""
        return EmulatedDeviceArray(np.array(array, order="C", copy=True))

    def to_host(self, array: EmulatedDeviceArray) -> np.ndarray:
        return array.get()

    def asarray(self, value) -> EmulatedDeviceArray:
        """``value`` itself when on the device, else a device copy of it."""
        return value if isinstance(value, EmulatedDeviceArray) else self.from_host(value)

    @staticmethod
    def is_device_array(value) -> bool:
        return isinstance(value, EmulatedDeviceArray)

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

    def _track(self, host: np.ndarray) -> None:
        """Count ``host``'s memory as one allocation, unless it is a view of
        memory already counted (or empty: CuPy allocates nothing for it)."""
        owner = _memory_owner(host)
        if not owner.flags.owndata or owner.nbytes == 0:
            return
        key = id(owner)
        with self._lock:
            if key in self._live:
                return
            self._live[key] = owner.nbytes
            self._used += owner.nbytes
            self._allocated += owner.nbytes
            self._count += 1
            self._peak = max(self._peak, self._used)
        # the bytes come back when the memory itself goes, not its wrapper:
        # views keep the owner alive, as they keep CuPy's memory
        weakref.finalize(owner, self._release, key).atexit = False

    def _release(self, key: int) -> None:
        with self._lock:
            self._used -= self._live.pop(key, 0)


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
