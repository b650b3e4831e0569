"""Shared variables: named, persistent state in tenure space.

A :class:`SharedVariable` is a graph root whose value lives in a
:class:`Container` that outlives any one function call.  Every function that
uses it reads that container, and ``updates`` write into it.

The contract (the docs page "Memory aliasing and borrowing" explains it):

- ``shared(v)`` copies ``v``; ``shared(v, borrow=True)`` may keep ``v`` itself.
- Two shared variables never share storage.
- ``get_value()`` returns a copy the caller owns; ``get_value(borrow=True)``
  may return the internal buffer (read it, do not write it).
- ``set_value(v)`` copies; ``set_value(v, borrow=True)`` may adopt ``v``.

On a device (``shared(cupy_array)``, or ``shared(v, device="cuda")``: see
:mod:`tenure.symbolic.device`) the storage is a device array, and the rules
are PyTensor's for GPU storage: ``borrow`` never makes tenure keep a host
array (device memory is never the caller's host array); ``get_value()``
returns the kind of array the variable was made from (a device array, or a
NumPy copy when it was made from host data), ``return_internal_type=True``
the device array; ``set_value`` of the same shape and dtype copies into the
existing device buffer, and ``set_value(device_array, borrow=True)`` adopts
it.
"""

from __future__ import annotations

import copy
import itertools
import numbers
import threading
import weakref

import numpy as np

from tenure import config
from tenure.symbolic.device import cuda_runtime, runtime_of, writeable
from tenure.symbolic.graph import Variable
from tenure.symbolic.types import (GenericType, TensorType, base_ndarray, foreign_ndarray,
                                   is_foreign_array, is_same_memory, python_scalar_dtype)
from tenure.symbolic.variable import TensorMethods


_SERIALS = itertools.count()


class Container:
    """The storage cell of a shared variable (one value, replaced or updated in place).

    ``lock``: held by every call that reads or updates the value, for the whole
    call, and by ``get_value`` / ``set_value``: calls are atomic with respect
    to the shared variables they touch.  A call takes the locks of all its
    containers in ``serial`` order (creation order), so two calls never wait
    for each other in a cycle.  Re-entrant: a call made from inside another
    one's ``perform`` in the same thread does not wait for itself.
    """

    __slots__ = ("value", "lock", "serial", "__weakref__")

    def __init__(self, value):
        self.value = value
        self.lock = threading.RLock()
        self.serial = next(_SERIALS)

    def __getstate__(self):
        return {"value": self.value}

    def __setstate__(self, state):
        self.__init__(state["value"])


# Live shared variables, so that a borrowed value already used as another
# shared variable's storage is copied instead of aliased.
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _aliases_other_shared(value, owner: SharedVariable | None) -> bool:
    """Whether ``value`` (a host or device array) overlaps another live shared
    variable's storage (only storage in the same memory can)."""
    runtime = runtime_of(value)
    for var in list(_LIVE):
        if var is owner:
            continue
        stored = var.container.value
        if stored is not None and _overlaps(stored, value, runtime):
            return True
    return False


# What lends buffers it writes again later: compiled functions with borrowed
# outputs (``Out(y, borrow=True)``), each with a ``lent_buffers()`` method.
# A borrowed value overlapping one of those buffers is copied instead of
# adopted, or the lender's next call would overwrite the shared value.
_LENDERS: weakref.WeakSet = weakref.WeakSet()


def register_lender(lender) -> None:
    """Make ``lender`` (anything with a ``lent_buffers()`` method returning
    the arrays it will write again: a :class:`~tenure.function.Function`
    with borrowed outputs) known to ``shared`` and ``set_value``."""
    _LENDERS.add(lender)


def _overlaps(stored, value, runtime) -> bool:
    """Whether ``stored`` and ``value`` (``runtime``'s arrays: None for host
    memory) may share memory; arrays in different memories never do."""
    if runtime_of(stored) is not runtime:
        return False
    return (np.may_share_memory(stored, value) if runtime is None
            else runtime.may_share_memory(stored, value))


def _aliases_a_lent_buffer(value) -> bool:
    """Whether ``value`` (or the buffer it views) overlaps a buffer some
    function lent as a borrowed output and will overwrite next call."""
    if not _LENDERS:
        return False
    runtime = runtime_of(value)
    return any(_overlaps(buf, value, runtime)
               for lender in list(_LENDERS) for buf in lender.lent_buffers())


#: the devices a shared variable's storage may be on
DEVICES = ("cpu", "cuda")
#: how a pickle names the device of device storage
_CUDA, _EMULATED = "cuda", "cuda (emulated)"


class SharedVariable(TensorMethods, Variable):
    """A tensor with a persistent value, usable by every function that mentions it.

    ``default_update``: None, or an expression (of this variable's type) that
    every function reading this variable assigns to it after each call, as
    if ``(self, default_update)`` were among its ``updates`` -- unless the
    function updates it explicitly or is compiled with
    ``no_default_updates`` (PyTensor's rule; random generators use it).
    """

    #: the update functions apply when they have no explicit one (None: none)
    default_update = None

    def __init__(self, type: TensorType, value, name: str | None = None,
                 borrow: bool = False, strict: bool = False, allow_downcast=None,
                 runtime=None, host_values: bool = True):
        super().__init__(type, name=name)
        #: where the storage is: None (host memory), or the device's runtime
        #: (:mod:`tenure.symbolic.device`)
        self.runtime = runtime
        #: whether ``get_value()`` returns NumPy arrays (the variable was made
        #: from host data) rather than device arrays
        self.host_values = host_values
        #: ``set_value`` takes only ndarrays of exactly this type (no conversion)
        self.strict = bool(strict)
        #: whether values may be cast with loss of precision: True (any cast, as
        #: NumPy's ``astype``), False (none, Python floats included) or None
        #: (the default rules: safe casts, and Python floats into any float dtype)
        self.allow_downcast = None if allow_downcast is None else bool(allow_downcast)
        self.container = Container(None)
        self.container.value = self._filter(value, borrow,
                                            what=f"shared() value for {name or 'shared'}")
        _LIVE.add(self)

    @property
    def device(self) -> str:
        """``"cpu"``, or ``"cuda"`` when the storage is device memory."""
        return "cpu" if self.runtime is None else "cuda"

    def clone(self, name=None):
        raise TypeError(f"shared variable {self} cannot be cloned; its storage is unique")

    def __getstate__(self):
        # The device's runtime is the process's: stored as which device it is.
        state = dict(self.__dict__)
        if self.runtime is not None:
            state["runtime"] = _EMULATED if self.runtime.name == _EMULATED else _CUDA
        return state

    def __setstate__(self, state):
        # Unpickled (or deep-copied): a live shared variable like any other.
        runtime = state.get("runtime")
        if runtime in (_EMULATED, _CUDA):
            state = dict(state, runtime=cuda_runtime(emulated=runtime == _EMULATED))
        self.__dict__.update(state)
        _LIVE.add(self)

    def get_value(self, borrow: bool = False, return_internal_type: bool = False):
        """The current value.

        ``borrow=False`` (default): a copy the caller owns.
        ``borrow=True``: may be the internal buffer; read it, do not write it.
        ``return_internal_type=True``: the internal object itself (an ndarray
        on the CPU, the device array on a device), with no conversion; a copy
        of it unless ``borrow``.  Device storage made from host data returns
        a NumPy copy otherwise (whatever ``borrow`` says).
        """
        with self.container.lock:
            value = self.container.value
            if self.runtime is not None and self.host_values and not return_internal_type:
                return self.runtime.to_host(value)
            return value if borrow else value.copy()

    def set_value(self, value, borrow: bool = False) -> None:
        """Replace the value.  It is copied unless ``borrow=True``, in which case
        tenure may adopt ``value`` as its storage (so don't keep writing it).
        ``value`` may be another library's CPU array (a PyTorch tensor, a JAX
        array: anything with ``__dlpack__`` or the array interface); borrowed,
        its memory is adopted when it is writeable (a JAX array is copied).

        The new value must have the same dtype (safe casts of Python values are
        accepted) and number of dimensions; the shape may change.
        """
        what = f"set_value of {self}"
        if self.runtime is not None and not (borrow and self.runtime.is_device_array(value)):
            self._copy_into_storage(value, what)
            return
        value = self._filter(value, borrow, what=what, strict=self.strict)
        with self.container.lock:
            self.container.value = value

    def zero(self, borrow: bool = False) -> None:
        """Set every element to zero, keeping the shape (PyTensor's
        ``SharedVariable.zero``).  ``borrow=True`` writes zeros into the
        current storage, so arrays borrowed from it (``get_value(borrow=True)``)
        see them; else the storage becomes a new array of zeros.  On a device
        the current buffer is always written (no allocation)."""
        with self.container.lock:
            current = self.container.value
            if self.runtime is not None:
                self.runtime.copy_into(current, np.zeros(tuple(current.shape), current.dtype))
            elif borrow:
                current[...] = 0
            else:
                self.container.value = np.zeros_like(current)

    def _copy_into_storage(self, value, what: str) -> None:
        """Device storage: ``value`` copied into the current device buffer
        when it has the same shape (no allocation), else into a new one."""
        source = self._checked(value, what, self.strict)
        with self.container.lock:
            current = self.container.value
            if current is not None and tuple(current.shape) == tuple(source.shape):
                self.runtime.copy_into(current, source)
                return
            if self.runtime.is_device_array(source):
                self.container.value = source.copy()
            else:
                self.container.value = self.runtime.from_host(source)

    def _filter(self, value, borrow: bool, what: str, strict: bool = False):
        """``value`` as this variable's storage: checked, cast if needed, and
        copied unless it may be kept (borrowed, writeable, and not another
        shared variable's storage)."""
        arr = self._checked(value, what, strict)
        if self.runtime is not None and not self.runtime.is_device_array(arr):
            return self.runtime.from_host(arr)     # host data onto the device
        if not is_same_memory(arr, value):
            return arr  # converted: already a fresh array of our own
        # (an ndarray subclass, or another library's array -- a PyTorch tensor,
        # a JAX array -- arrives here as a plain view of the caller's memory)
        # The caller's own array: keep it only when lent and lending is safe
        # (writeable, so updates may go in place; not another shared's
        # storage; not a buffer a function will write again next call).
        if (not borrow or not writeable(arr) or _aliases_other_shared(arr, self)
                or _aliases_a_lent_buffer(arr)):
            arr = arr.copy()
        return arr

    def _checked(self, value, what: str, strict: bool):
        """``value`` checked against the type and cast if needed: a device
        array of this variable's device stays one, anything else becomes a
        host array."""
        if isinstance(value, Variable):
            raise TypeError(f"{what}: expected a value, got symbolic variable {value} "
                            "(use updates= to assign an expression)")
        allow = self.allow_downcast
        found = runtime_of(value)
        if found is not None:
            if found is not self.runtime:
                where = "host memory" if self.runtime is None else self.runtime.name
                raise TypeError(f"{what}: got a {found.name} device array "
                                f"({type(value).__name__}) for a shared variable in {where}")
            return self.type.filter_device_array(value, strict=strict, allow_downcast=allow,
                                                 what=what, downcast_hint=self._downcast_hint())
        return self.type.filter(value, strict=strict, allow_downcast=allow, what=what,
                                downcast_hint=self._downcast_hint())

    def _downcast_hint(self) -> str:
        """How to have a lossy cast of a new value (``set_value`` takes no
        option: the variable's ``allow_downcast``, as in PyTensor, decides)."""
        return (f"create the shared variable with tn.shared(..., dtype={self.dtype!r}, "
                "allow_downcast=True)")

    def __str__(self) -> str:
        return self.name if self.name is not None else f"<shared {self.type}>"


class GenericSharedVariable(SharedVariable):
    """A shared variable holding any Python object (PyTensor's generic shared
    variable): what :func:`shared` makes of a value that is not numeric
    data.  It keeps the object and gives it back; nothing computes on it,
    and a function that reads or updates it is refused.

    ``get_value()`` and ``set_value(v)`` copy (``copy.deepcopy``) unless
    ``borrow=True``; any object is accepted, with ``strict`` or not (as
    PyTensor's generic type does)."""

    def __init__(self, value, name: str | None = None, borrow: bool = False,
                 strict: bool = False):
        Variable.__init__(self, GenericType(), name=name)
        self.runtime = None
        self.host_values = True
        self.strict = bool(strict)
        self.allow_downcast = None
        self.container = Container(None)
        self.set_value(value, borrow=borrow)

    def __setstate__(self, state):
        # (no storage another shared variable's buffer could overlap)
        self.__dict__.update(state)

    def get_value(self, borrow: bool = False, return_internal_type: bool = False):
        """The object held: itself with ``borrow=True``, else a deep copy."""
        with self.container.lock:
            value = self.container.value
        return value if borrow else copy.deepcopy(value)

    def set_value(self, value, borrow: bool = False) -> None:
        """Hold ``value``: itself with ``borrow=True``, else a deep copy."""
        if isinstance(value, Variable):
            raise TypeError(f"set_value of {self}: expected a value, got symbolic variable "
                            f"{value}")
        value = value if borrow else copy.deepcopy(value)
        with self.container.lock:
            self.container.value = value

    def zero(self, borrow: bool = False) -> None:
        raise TypeError(f"{self}.zero(): it holds a {type(self.container.value).__name__}, "
                        f"not an array (zero() sets an array's elements to 0)")

    def _refused_in_functions(self) -> TypeError:
        """The error of a function that would read or update it."""
        return TypeError(f"{self} is a generic shared variable (it holds a "
                         f"{type(self.container.value).__name__}): functions compute on "
                         f"tensors only; read and write it with get_value() and set_value()")

    def __str__(self) -> str:
        return self.name if self.name is not None else "<shared generic>"


def shared(value, name: str | None = None, borrow: bool = False,
           dtype=None, shape=None, strict: bool = False,
           allow_downcast=None, device: str | None = None) -> SharedVariable:
    """A shared variable holding ``value``.

    ``value`` is copied unless ``borrow=True``, which lets tenure keep the very
    array as its storage (aliasing is allowed, never promised: an update may
    replace the buffer).  The type comes from the value: its dtype (Python
    floats become ``config.floatX``, unless ``dtype`` is given) and its number
    of dimensions; lengths are not static unless ``shape`` says so, so
    ``set_value`` can change them.

    The storage is always a plain ``np.ndarray``: another ndarray subclass
    (``np.matrix``, ``np.memmap``, ...) is stored as a base-class array (a
    view of the same memory when borrowed), and a masked array is refused
    (pass ``.filled(...)`` or ``.data``).  Another library's CPU array (a
    PyTorch tensor, a JAX array: anything with ``__dlpack__`` or the array
    interface) keeps its dtype, like an ndarray, and is stored as a copy, or
    when borrowed and writeable as an ndarray view of its memory (a read-only
    one, such as a JAX array, is copied).

    ``device``: where the storage is, ``"cpu"`` or ``"cuda"``; ``None`` (the
    default): where ``value`` is -- a device array (CuPy's, or the emulated
    device's) makes device storage whose ``get_value()`` returns device
    arrays, anything else goes where ``config.device`` says (``"cpu"``
    unless set).  ``device="cuda"`` with host data copies it to the device,
    and ``get_value()`` then returns NumPy copies (``get_value(borrow=True,
    return_internal_type=True)`` the device array itself).  Functions that
    use device storage must be compiled with ``Mode(linker="cuda")``.

    A value that is not numeric data (a string, a dict, None, any object, an
    empty list, a list NumPy makes no numeric array of, an array of strings)
    is held as an opaque object: a :class:`GenericSharedVariable`, as
    PyTensor's ``shared`` does.

    ``strict=True``: ``set_value`` takes only ndarrays of exactly the
    variable's dtype (no conversion at all).  ``allow_downcast``: whether
    ``set_value`` (and an explicit ``dtype``) may cast with loss of precision:
    ``True`` any cast (NumPy's ``astype``), ``False`` none (not even Python
    floats that do not fit exactly), ``None`` (default) the usual rules:
    safe casts, and Python floats into any float dtype.
    """
    if isinstance(value, Variable):
        raise TypeError(f"shared(): expected a value, got symbolic variable {value}")
    if device not in (None,) + DEVICES:
        raise ValueError(f"shared(): device must be one of {', '.join(DEVICES)} (or None: "
                         f"where the value is), got {device!r}")
    found = runtime_of(value)
    if found is not None:
        return _device_shared(value, found, name, borrow, dtype, shape, strict,
                              allow_downcast, device)
    if isinstance(value, np.ma.MaskedArray):
        # Refused by the input gate too, but np.asarray below would drop the mask.
        base_ndarray(value, what=f"shared() value for {name or 'shared'}")
    if _is_generic(value):
        return _generic_shared(value, name, borrow, dtype, shape, strict, device)
    if isinstance(value, (np.ndarray, np.generic)):
        natural = np.asarray(value)
    elif is_foreign_array(value):
        # Strongly typed, like an ndarray; taken without a copy (the filter
        # below copies it unless borrowed).
        natural = value = foreign_ndarray(value, what=f"shared() value for {name or 'shared'}")
    else:
        try:
            natural = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"shared(): cannot make an array of {type(value).__name__} "
                            f"({exc})") from None
        if natural.ndim == 0 and dtype is None:
            dtype = python_scalar_dtype(value)
        elif natural.dtype.kind == "f" and dtype is None:
            dtype = config.floatX
    if natural.dtype == object or natural.dtype.kind in "USVM":
        raise TypeError(f"shared(): expected numeric data, got dtype {natural.dtype}")
    if dtype is None:
        dtype = natural.dtype
    if shape is None:
        shape = (None,) * natural.ndim
    if device is None:
        device = config.device
    runtime = cuda_runtime() if device == "cuda" else None
    return SharedVariable(TensorType(dtype, shape), value, name=name, borrow=borrow,
                          strict=strict, allow_downcast=allow_downcast, runtime=runtime)


def _is_generic(value) -> bool:
    """Whether :func:`shared` holds ``value`` as an opaque object: a value
    that is not numeric data -- neither a number, nor an array (NumPy's,
    another library's), nor a non-empty list or tuple NumPy makes a numeric
    array of (an empty one is PyTensor's generic too: NumPy's float64 for
    it would be a guess)."""
    if isinstance(value, (numbers.Number, np.generic)) or is_foreign_array(value):
        return False
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "biufc"
    if not isinstance(value, (list, tuple)) or len(value) == 0:
        return True
    try:
        natural = np.asarray(value)
    except (TypeError, ValueError):
        return True
    return natural.dtype.kind not in "biufc"


def _generic_shared(value, name, borrow, dtype, shape, strict, device) -> GenericSharedVariable:
    for option, given in (("dtype", dtype), ("shape", shape)):
        if given is not None:
            raise TypeError(f"shared(): {option}= applies to numeric data; a "
                            f"{type(value).__name__} is held as a generic object")
    if device == "cuda":
        raise TypeError(f"shared(): a {type(value).__name__} cannot be stored on a device "
                        f"(only numeric data is): leave device= out")
    return GenericSharedVariable(value, name=name, borrow=borrow, strict=strict)


def _device_shared(value, runtime, name, borrow, dtype, shape, strict, allow_downcast,
                   device) -> SharedVariable:
    """:func:`shared` of a device array: device storage returning device
    arrays, or with ``device="cpu"`` host storage holding a copy."""
    if device == "cpu":
        return shared(runtime.to_host(value), name=name, dtype=dtype, shape=shape,
                      strict=strict, allow_downcast=allow_downcast)
    if value.dtype == object or value.dtype.kind not in "biufc":
        raise TypeError(f"shared(): expected numeric data, got dtype {value.dtype}")
    type_ = TensorType(value.dtype if dtype is None else dtype,
                       (None,) * value.ndim if shape is None else shape)
    return SharedVariable(type_, value, name=name, borrow=borrow, strict=strict,
                          allow_downcast=allow_downcast, runtime=runtime, host_values=False)
