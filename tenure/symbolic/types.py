"""Tensor types: a dtype plus a static shape, and the input gate (``filter``)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from tenure import config
from tenure.symbolic.device import is_device_array

#: how a function's caller allows a lossy cast of an argument (the default
#: advice of :meth:`TensorType.filter`'s errors)
DOWNCAST_HINT = "pass allow_input_downcast=True"

#: dtypes a TensorType may have.
SUPPORTED_DTYPES = frozenset(
    np.dtype(d).name for d in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128"))


#: the canonical name of each spelling of a supported dtype met so far
#: (``"float64"``, ``np.float64``, ``np.dtype("float64")``, ``float``...):
#: building every graph node asks, and ``np.dtype(d).name`` is slow
_CANONICAL_NAMES: dict = {name: name for name in SUPPORTED_DTYPES}


def normalize_dtype(dtype, what: str = "dtype") -> str:
    """``dtype`` as a canonical name (``None`` means ``config.floatX``)."""
    if dtype is None:
        return config.floatX
    try:
        return _CANONICAL_NAMES[dtype]
    except (KeyError, TypeError):     # not met yet, or unhashable
        pass
    if dtype == "floatX":
        return config.floatX
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"{what}: expected a NumPy dtype, got {dtype!r}") from None
    if name not in SUPPORTED_DTYPES:
        raise TypeError(f"{what}: dtype {name} is not supported; expected one of "
                        f"{', '.join(sorted(SUPPORTED_DTYPES))}")
    try:
        _CANONICAL_NAMES[dtype] = name
    except TypeError:
        pass
    return name


def _normalize_shape(shape) -> tuple[int | None, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError(f"shape: expected a tuple of ints or None, got {shape!r}") from None
    out = []
    for i, dim in enumerate(items):
        if dim is None:
            out.append(None)
        elif isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and dim >= 0:
            out.append(int(dim))
        else:
            raise ValueError(f"shape: dimension {i} must be a non-negative int or None, "
                             f"got {dim!r}")
    return tuple(out)


def _shape_str(shape) -> str:
    inner = ", ".join("?" if d is None else str(d) for d in shape)
    if len(shape) == 1:
        inner += ","
    return f"({inner})"


class TensorType:
    """The type of an n-dimensional array: ``dtype`` and ``shape``.

    ``shape`` has one entry per dimension: an int when the length is known
    when the graph is built (a *static* shape), ``None`` otherwise.
    """

    def __init__(self, dtype=None, shape: Sequence[int | None] = ()):
        self.dtype = normalize_dtype(dtype)
        self.shape = _normalize_shape(shape)

    # -- identity -----------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def broadcastable(self) -> tuple[bool, ...]:
        return tuple(d == 1 for d in self.shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def __eq__(self, other) -> bool:
        return (type(self) is type(other) and self.dtype == other.dtype
                and self.shape == other.shape)

    def __hash__(self) -> int:
        return hash((type(self), self.dtype, self.shape))

    def __str__(self) -> str:
        return f"{self.dtype}{_shape_str(self.shape)}"

    def __repr__(self) -> str:
        return f"TensorType({self.dtype}, shape={self.shape})"

    def clone(self, dtype=None, shape=None) -> TensorType:
        return TensorType(self.dtype if dtype is None else dtype,
                          self.shape if shape is None else shape)

    def is_compatible_replacement(self, other: TensorType) -> bool:
        """Whether a variable of type ``other`` may stand in for one of this type:
        same dtype and ndim, and no contradicting static length."""
        if not isinstance(other, TensorType):
            return False
        if other.dtype != self.dtype or other.ndim != self.ndim:
            return False
        return all(a is None or b is None or a == b for a, b in zip(self.shape, other.shape))

    # -- variables ----------------------------------------------------------
    def __call__(self, name: str | None = None):
        """A new root variable of this type."""
        from tenure.symbolic.variable import TensorVariable
        return TensorVariable(self, name=name)

    def make_constant(self, value, name: str | None = None):
        from tenure.symbolic.variable import TensorConstant
        return TensorConstant(self, value, name=name)

    # -- values -------------------------------------------------------------
    def filter(self, value, strict: bool = False, allow_downcast: bool | None = None,
               what: str = "value", downcast_hint: str = DOWNCAST_HINT) -> np.ndarray:
        """Convert ``value`` to an ndarray of this type or raise.

        The input gate of every function, with PyTensor's rules.  Arrays are
        accepted when their dtype casts *safely* to this dtype, or with any
        numeric cast when ``allow_downcast`` (NumPy's C cast: out-of-range
        integers wrap, floats round).  Lists and Python scalars convert when
        nothing is lost (``f(0.5)`` into float32, ``f(2.0)`` into int64), else
        only with ``allow_downcast``; with ``allow_downcast`` None (the
        default: no one said), a lone float into a ``config.floatX`` input is
        taken rounded too.  A Python int out of the dtype's range is a
        :class:`ValueOutOfRange`, unless ``allow_downcast`` (then it wraps,
        as in an array).  ndim and static lengths must match.  With
        ``strict`` the value must already be an array of exactly this dtype
        (an ndarray, or another library's array, which needs no conversion
        either).

        Array types: a masked array (``np.ma.MaskedArray``) is refused with a
        TypeError (its mask would be ignored; pass ``.filled(...)`` or
        ``.data``).  Any other ndarray subclass (``np.matrix``, ``np.memmap``,
        user subclasses) is taken as a plain ``np.ndarray`` view of the same
        memory, so every linker computes on the same kind of array.

        Arrays of other libraries (PyTorch CPU tensors, JAX CPU arrays, any
        object with ``__dlpack__`` or the array interface) are taken as an
        ndarray view of the same memory too, without a copy (see
        :func:`foreign_ndarray`), and are then checked and cast like an
        ndarray (strongly typed; ``strict`` accepts them when the dtype is
        exact).  Arrays in device memory are refused with a TypeError.

        The result is ``value`` itself when no conversion was needed, or for a
        subclass or another library's array a plain view of its memory;
        :func:`is_same_memory` tells these apart from a converted copy.

        ``downcast_hint``: how the caller allows a lossy cast, said in the
        error that refuses one (a function's ``allow_input_downcast=True`` by
        default; a shared variable says its own).
        """
        if isinstance(value, np.ndarray):
            arr = value if type(value) is np.ndarray else base_ndarray(value, what)
            arr = self._cast_array(arr, strict, allow_downcast, what, downcast_hint)
        elif is_device_array(value):     # (after the ndarray test: the gate's common case)
            raise TypeError(f"{what}: expected a host array, got a device array "
                            f"({type(value).__name__} of shape {tuple(value.shape)}, dtype "
                            f"{value.dtype}); compile with Mode(linker='cuda') to compute "
                            "on the device, or pass value.get()")
        elif is_foreign_array(value):
            arr = foreign_ndarray(value, what)
            arr = self._cast_array(arr, strict, allow_downcast, what, downcast_hint)
        else:
            if strict:
                raise TypeError(f"{what}: expected an ndarray of dtype {self.dtype}, got "
                                f"{type(value).__name__} (strict input)")
            arr = self._convert_python_value(value, allow_downcast, what, downcast_hint)
        self.check_shape(arr, what)
        return arr

    def filter_device_array(self, value, strict: bool = False,
                            allow_downcast: bool | None = None,
                            what: str = "value", downcast_hint: str = DOWNCAST_HINT):
        """A device array (CuPy's, or the emulated device's) as an array of
        this type on the same device: ``value`` itself, or cast on the device
        by the rules of :meth:`filter`."""
        arr = self._cast_array(value, strict, allow_downcast, what, downcast_hint)
        self.check_shape(arr, what)
        return arr

    def _cast_array(self, arr, strict: bool, allow_downcast: bool, what: str,
                    downcast_hint: str = DOWNCAST_HINT):
        """``arr`` (any array with ``dtype`` and ``astype``) in this dtype:
        itself, or cast when that is safe or ``allow_downcast``."""
        target = self.numpy_dtype
        if arr.dtype == target:
            return arr
        if strict:
            raise TypeError(f"{what}: expected dtype {self.dtype}, got {arr.dtype} "
                            "(strict input)")
        if not (np.can_cast(arr.dtype, target, "safe") or allow_downcast):
            raise TypeError(
                f"{what}: expected dtype {self.dtype}, got {arr.dtype}; casting "
                f"{arr.dtype} to {self.dtype} could lose information (cast it "
                f"yourself, or {downcast_hint})")
        return arr.astype(target)

    def check_shape(self, arr, what: str) -> None:
        """A TypeError unless ``arr`` has this type's ndim, a ValueError
        unless its lengths match the static ones."""
        if arr.ndim != self.ndim:
            raise TypeError(f"{what}: expected {self.ndim} dimension(s) ({self}), got an "
                            f"array with {arr.ndim} (shape {tuple(arr.shape)})")
        for axis, (want, got) in enumerate(zip(self.shape, arr.shape)):
            if want is not None and want != got:
                raise ValueError(f"{what}: expected static shape {_shape_str(self.shape)}, "
                                 f"got shape {tuple(arr.shape)} (axis {axis}: {got} != {want})")

    def _convert_python_value(self, value, allow_downcast: bool | None, what: str,
                              downcast_hint: str = DOWNCAST_HINT) -> np.ndarray:
        """Python scalars, lists and NumPy scalars into an array of this dtype,
        by PyTensor's rules: with ``allow_downcast``, NumPy's C cast, as for an
        array of these values (out-of-range ints wrap, floats round); else a
        conversion that loses nothing, and a lossy one only for a lone float
        into a ``config.floatX`` input with ``allow_downcast`` None (no one
        said either way), PyTensor's exception for float literals.  An int
        out of the dtype's range is then a :class:`ValueOutOfRange`."""
        target = self.numpy_dtype
        natural = self._natural_array(value, what)
        if natural.dtype == target:
            return natural
        if allow_downcast:
            # the same cast as for an array, so f(300) and f(np.array(300)) agree
            try:
                with np.errstate(over="ignore", invalid="ignore"):   # (asked for)
                    return natural.astype(target)
            except (OverflowError, TypeError, ValueError) as exc:
                # only ints that no NumPy integer dtype holds (object arrays)
                raise ValueOutOfRange(f"{what}: {value!r} does not fit in {self.dtype} "
                                      f"({exc})") from None
        converted = self._cast_python_value(value, natural, what)
        if (_float_literal_for_floatx(value, target, allow_downcast)
                or _converts_exactly(natural, converted)):
            return converted
        given, stored = _first_loss(natural, converted)
        raise TypeError(f"{what}: {_short_repr(value)} cannot be stored exactly as "
                        f"{self.dtype} ({given!r} would be {stored!r}); cast it yourself, "
                        f"or {downcast_hint}")

    def _natural_array(self, value, what: str) -> np.ndarray:
        """``value`` as NumPy reads it, refused unless it holds numbers (Python
        ints beyond int64 come as an object array)."""
        try:
            natural = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{what}: expected an array-like of {self.dtype}, got "
                            f"{type(value).__name__} ({exc})") from None
        if ((natural.dtype == object and not _all_python_ints(value))
                or natural.dtype.kind in "USVMm"):
            raise NotNumeric(f"{what}: expected numbers convertible to {self.dtype}, got "
                             f"{type(value).__name__} holding {natural.dtype}")
        return natural

    def _cast_python_value(self, value, natural: np.ndarray, what: str) -> np.ndarray:
        """``value`` converted to this dtype as NumPy converts Python numbers
        (floats round, overflow to inf and truncate into ints), to be
        compared with ``natural``: an int out of range is a
        :class:`ValueOutOfRange`, a complex into a real dtype a TypeError."""
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                return np.asarray(value, dtype=self.numpy_dtype)
        except OverflowError as exc:
            raise ValueOutOfRange(f"{what}: {value!r} does not fit in {self.dtype} "
                                  f"({exc})") from None
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}: expected {self.dtype}, got {type(value).__name__} "
                            f"holding {natural.dtype} values ({exc})") from None

    def is_valid_value(self, value) -> bool:
        """Whether ``value`` is already an array of exactly this type (strict filter)."""
        try:
            self.filter(value, strict=True)
        except (TypeError, ValueError):
            return False
        return True

    def signature_of(self, data: np.ndarray):
        """A hashable key identifying a constant value of this type."""
        return (self, data.shape, data.tobytes())

    def short_value_repr(self, data: np.ndarray) -> str:
        if data.size <= 8:
            text = np.array2string(data, separator=", ", threshold=8)
            return text.replace("\n", "")
        return f"Constant{{{self}}}"


def base_ndarray(value: np.ndarray, what: str) -> np.ndarray:
    """An ndarray subclass as a plain ndarray view of the same memory; masked
    arrays are refused (no linker would honour the mask)."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"{what}: got a masked array (numpy.ma.MaskedArray), which is not accepted: "
            "its mask would be ignored; pass value.filled(fill_value) to replace the "
            "masked entries, or value.data to use the underlying data as it is")
    return value.view(np.ndarray)


def is_same_memory(result: np.ndarray, value) -> bool:
    """Whether ``result``, what :meth:`TensorType.filter` returned for
    ``value``, is the caller's own array (``value`` itself, the base-class
    view of an ndarray subclass, or the view of another library's array)
    rather than a converted copy: the caller of ``filter`` must then decide
    about copies."""
    if result is value:
        return True
    if is_device_array(value) or is_device_array(result):
        return False    # cast into a new device array, or copied between memories
    if isinstance(value, np.ndarray):
        return np.may_share_memory(result, value)
    if is_foreign_array(value):
        try:
            source = foreign_ndarray(value, "value")
        except TypeError:
            return True  # cannot tell: say it is, so that the caller copies
        return np.may_share_memory(result, source)
    return False


# --------------------------------------------------------------------------
# Arrays of other libraries: DLPack and the array interface

#: DLPack device types whose memory is host memory NumPy reads in place:
#: kDLCPU, and the pinned host memory of CUDA and ROCm.
DLPACK_HOST_DEVICES = {1: "CPU", 3: "CUDA host (pinned)", 11: "ROCm host (pinned)"}

#: names of the other DLPack device types, for error messages
_DLPACK_DEVICE_NAMES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
                        10: "ROCm", 12: "ExtDev", 13: "CUDA managed", 14: "oneAPI",
                        15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


def is_foreign_array(value) -> bool:
    """Whether ``value`` is another library's array that the input gate takes
    without a copy: not a NumPy array or scalar, and has ``__dlpack__`` or the
    array interface (``__array_interface__`` / ``__array_struct__``)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return False
    return (hasattr(type(value), "__dlpack__") or hasattr(value, "__array_interface__")
            or hasattr(value, "__array_struct__"))


def _type_label(value) -> str:
    cls = type(value)
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def foreign_ndarray(value, what: str) -> np.ndarray:
    """Another library's array as a plain ndarray on the same memory, without
    a copy (``value`` must satisfy :func:`is_foreign_array`).

    DLPack (``__dlpack__``) first, through :func:`numpy.from_dlpack`: the
    array must be in host memory (``__dlpack_device__``: CPU, or pinned host
    memory), else a TypeError (device arrays need the CUDA linker, which this
    build does not have: copy them to the host).  The view is read-only when
    the producer says so (JAX arrays; a read-only NumPy array exported with
    DLPack 1.0); a PyTorch tensor gives a writeable view.  A tensor that
    requires grad is refused (``.detach()`` it).  Otherwise the array
    interface, through :func:`numpy.asarray` (read-only when the interface
    says so).
    """
    label = _type_label(value)
    if hasattr(type(value), "__dlpack__"):
        _check_dlpack_device(value, label, what)
        if getattr(value, "requires_grad", False) is True:
            raise TypeError(
                f"{what}: got a {label} that requires grad; tenure cannot take it (the "
                "exporter refuses, and tenure would not track its gradient): pass "
                "tensor.detach(), the same memory without a copy")
        try:
            arr = np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError, ValueError, AttributeError) as exc:
            raise TypeError(f"{what}: expected an array tenure can read (NumPy, or a CPU "
                            f"array through DLPack), got a {label} that DLPack could not "
                            f"hand over: {type(exc).__name__}: {exc}") from None
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}: expected an array tenure can read, got a {label} "
                            f"whose array interface NumPy refused: {exc}") from None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biufc":
        raise TypeError(f"{what}: expected numeric array data, got a {label} holding "
                        f"{getattr(arr, 'dtype', type(arr).__name__)}")
    return arr if type(arr) is np.ndarray else arr.view(np.ndarray)


def _check_dlpack_device(value, label: str, what: str) -> None:
    """A TypeError unless ``value``'s DLPack device is host memory."""
    if not hasattr(type(value), "__dlpack_device__"):
        return  # NumPy reads the device from the capsule, and refuses others
    try:
        device_type, device_id = value.__dlpack_device__()
        device_type, device_id = int(device_type), int(device_id)
    except Exception as exc:  # noqa: BLE001 -- any failure of a foreign object
        raise TypeError(f"{what}: got a {label} whose __dlpack_device__() failed: "
                        f"{type(exc).__name__}: {exc}") from None
    if device_type in DLPACK_HOST_DEVICES:
        return
    name = _DLPACK_DEVICE_NAMES.get(device_type, "another")
    raise TypeError(
        f"{what}: expected an array in CPU memory, got a {label} on {name} device "
        f"{device_id} (DLPack device type {device_type}); arrays in device memory need "
        "a function compiled with Mode(linker='cuda') (CuPy and a CUDA device): compile "
        "for it, or copy the array to the host first (e.g. tensor.cpu(), "
        "cupy.asnumpy(a), jax.device_get(a))")


class ValueOutOfRange(OverflowError, ValueError, TypeError):
    """A Python int outside the range of the input's integer dtype.  Each
    class its callers catch: an OverflowError, as NumPy 2 raises; a
    TypeError, as PyTensor raises for a value its type cannot store (its
    tests expect it); a ValueError, as tenure raised before."""


class NotNumeric(TypeError, ValueError):
    """A value that holds no numbers (a string, a dict, any object) where an
    array is expected: a TypeError, and the ValueError NumPy raises
    converting a string to numbers (so PyTensor's users catch that)."""


def _float_literal_for_floatx(value, target: np.dtype, allow_downcast: bool | None) -> bool:
    """PyTensor's exception to exact conversion: with ``allow_downcast`` None, a
    lone float (Python's or NumPy's) goes into an input of ``config.floatX``
    rounded, so that ``f(0.1)`` works when floatX is float32."""
    return (allow_downcast is None and isinstance(value, (float, np.floating))
            and target == np.dtype(config.floatX))


def _converts_exactly(natural: np.ndarray, converted: np.ndarray) -> bool:
    """Whether ``converted`` holds the same numbers as ``natural`` (NaN as NaN)."""
    if natural.dtype == object:   # Python ints beyond int64: compare them as Python does
        return all(c == v for c, v in zip(converted.ravel().tolist(), natural.ravel()))
    return bool(np.array_equal(natural, converted, equal_nan=natural.dtype.kind in "fc"))


def _first_loss(natural: np.ndarray, converted: np.ndarray) -> tuple:
    """The first value that does not survive the conversion, and what it becomes."""
    for given, stored in zip(natural.ravel().tolist(), converted.ravel().tolist()):
        if given != stored and not (given != given and stored != stored):   # (NaN is kept)
            return given, stored
    raise AssertionError("no value was lost")


def _short_repr(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 5] + "(...)"


def _all_python_ints(value) -> bool:
    try:
        items = np.asarray(value, dtype=object).ravel()
    except (TypeError, ValueError):
        return False
    return all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items)


def python_scalar_dtype(value) -> str:
    """The dtype a lone Python number gets: bool, int64, floatX or complex128."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, numbers.Integral):
        # Like NumPy: int64, then uint64 for larger non-negative ints, then float64.
        if -(2**63) <= value < 2**63:
            return "int64"
        return "uint64" if 0 <= value < 2**64 else "float64"
    if isinstance(value, numbers.Real):
        return config.floatX
    if isinstance(value, numbers.Complex):
        return "complex128"
    raise TypeError(f"expected a Python number, got {type(value).__name__}")


# --------------------------------------------------------------------------
# Constructors


def _type_for(ndim: int, dtype, shape, fn_name: str) -> TensorType:
    if shape is None:
        shape = (None,) * ndim
    shape = _normalize_shape(shape)
    if len(shape) != ndim:
        raise ValueError(f"{fn_name}: shape must have {ndim} entries, got {shape!r}")
    return TensorType(dtype, shape)


def tensor(name: str | None = None, dtype=None, shape=None, ndim: int | None = None):
    """A symbolic tensor.  Give ``shape`` (ints or None) or ``ndim``."""
    if shape is None:
        if ndim is None:
            raise TypeError("tensor(): give shape= (e.g. (None, 3)) or ndim=")
        shape = (None,) * ndim
    shape = _normalize_shape(shape)
    if ndim is not None and ndim != len(shape):
        raise ValueError(f"tensor(): ndim={ndim} does not match shape {shape}")
    return TensorType(dtype, shape)(name)


def scalar(name=None, dtype=None, shape=None):
    """A symbolic 0-d tensor (``dtype`` defaults to ``config.floatX``)."""
    return _type_for(0, dtype, shape, "scalar")(name)


def vector(name=None, dtype=None, shape=None):
    """A symbolic 1-d tensor."""
    return _type_for(1, dtype, shape, "vector")(name)


def matrix(name=None, dtype=None, shape=None):
    """A symbolic 2-d tensor."""
    return _type_for(2, dtype, shape, "matrix")(name)


def tensor3(name=None, dtype=None, shape=None):
    """A symbolic 3-d tensor."""
    return _type_for(3, dtype, shape, "tensor3")(name)


def tensor4(name=None, dtype=None, shape=None):
    """A symbolic 4-d tensor."""
    return _type_for(4, dtype, shape, "tensor4")(name)


class GenericType:
    """The type of a shared variable holding any Python object
    (``shared("text")``, ``shared([])``, ``shared({...})``): PyTensor's
    ``generic``.  Opaque: no op computes on it (an op given one refuses it,
    as any non-tensor), and ``filter`` takes any value as it is."""

    ndim = None
    dtype = None

    def filter(self, value, strict: bool = False, allow_downcast=None, what: str = "value",
               **_):
        return value

    def __eq__(self, other):
        return isinstance(other, GenericType)

    def __hash__(self):
        return hash(GenericType)

    def __str__(self):
        return "generic"

    __repr__ = __str__
