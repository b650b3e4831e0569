"""The CUDA linker's dispatch table: per op class, how the CUDA linker runs its nodes.

One table, keyed by op class.  An entry (:class:`CudaEntry`) has four
parts, each registered on its own by :func:`register_cuda_op` and each
inherited: :func:`lookup` resolves every part by walking the class's MRO and
taking the nearest class that registered that part, as Python resolves an
attribute.  So a subclass runs as its base does, and overrides only the
parts it registers (a part registered as None is none for that class and
its subclasses: the base's is not inherited).

- ``kernel``: the generated-kernel family (a :class:`KernelFamily`, or any
  object with its ``step(node, backend, context)``): the step that launches
  a node's kernel on a :class:`~.launch.Backend`, or None where the node has
  none.  A step is ``step(node, inputs, cells)`` with a ``kernel``
  attribute, which the executor compiles with the function (by its
  ``name``: one module per kernel).  Both executors use it: the kernels run
  on the host (``Mode(linker="cuda_host")``) and the device path.
- ``device``: the device path's implementation of the nodes without a
  kernel, a :class:`~.device_ops.DeviceOp`: ``run(node, inputs, cells,
  runtime)`` over device arrays, and the input positions it reads on the host.
- ``device_kernel``: the device path only: ``(node, backend, context) ->
  step or None``, a kernel step for the nodes ``kernel`` has none for (the
  softmax family's: the kernel of a float dtype over a cast input).
- ``placement``: where the device path runs a node: :data:`INPUTS` (the
  default: on the host when every input is a host value, else on the
  device), :data:`HOST` (always: it reads only shapes) or :data:`DEVICE`
  (always: it creates arrays, even from host values).

The device path runs a node on the host when its placement says so, else
by the first of ``kernel``, ``device_kernel``, ``device`` that takes it;
with none, compiling fails and names the op
(:class:`~.device_linker.UnsupportedOnDevice`).  ``cuda_host`` runs
``kernel`` or the op's ``perform``.

Entries receive a :class:`CudaContext` -- the linker compiling the graph,
its kernel backend and device runtime -- when a node's step is made:
``KernelFamily.step(node, backend, context)``, ``device_kernel(node,
backend, context)`` and ``DeviceOp.runner(node, context)``.  Today's
families ignore it.  A loop (``Scan``) runs on the device (its ``device``
part, :mod:`.device_ops`), its step compiled by the CUDA linker
(``LINKERS["cuda"].device_loop_linker``, bound as the op's inner mode),
and so does a loop's gradient in each of its forms (``state_on_device``).

Where the registrations live: one :func:`register_cuda_op` line per op
class, in the module that holds the part --

- :mod:`.launch`: the kernels of ``Elemwise``, ``Reduce``, ``FusedReduce``,
  ``Softmax``, ``LogSoftmax``, ``LogSumExp``.  A kernel part pairs the
  family's kernel builder (:mod:`.elemwise`, :mod:`.reduce`, :mod:`.nnet`:
  CUDA C only) with its launcher; :mod:`.launch` imports those modules to
  launch their kernels, so it is the one module that sees both (a family
  module importing :mod:`.launch` would be an import cycle);
- :mod:`.subtensor`: ``IncSubtensor``'s region kernel;
- :mod:`.device_ops`: every ``device`` part, the placements, and the softmax
  family's ``device_kernel``.

Those modules import this one; it imports them on the first lookup
(:func:`_load_builtins`), so that the table is complete whoever asks first
and no import cycle forms.

How an op of your own joins the CUDA linker: on the device path, by its
``perform`` when that is written with NumPy functions device arrays take
over (:func:`~.device_ops.register_device_op`), or by a device
implementation::

    register_cuda_op(Square, device=DeviceOp(square_on_device))

and with a generated kernel of its own, a :class:`KernelFamily` (a kernel
builder and a launcher of :mod:`.launch`'s kind)::

    register_cuda_op(Square, kernel=KernelFamily(square_kernel, run_square))
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["DEVICE", "HOST", "INPUTS", "CudaContext", "CudaEntry", "KernelFamily", "KernelStep",
           "OwnParts", "Placed", "kernel_step", "lookup", "register_cuda_op", "unregister_cuda_op"]

#: placements (see the module doc)
INPUTS, HOST, DEVICE = "inputs", "host", "device"
_PLACEMENTS = (INPUTS, HOST, DEVICE)

#: the modules that register the built-in entries (imported on first lookup)
_BUILTIN_FAMILIES = ("launch", "subtensor", "device_ops", "rowwise")


@dataclass(frozen=True)
class CudaContext:
    """What an entry may need of the compilation it takes part in."""

    #: the CUDA linker compiling the graph (None: a node asked alone)
    linker: Any = None
    #: where kernels run (a :class:`~.launch.Backend`)
    backend: Any = None
    #: the device runtime of the device path (None: kernels run on the host)
    runtime: Any = None


@dataclass(frozen=True)
class CudaEntry:
    """How the CUDA linker runs the nodes of one op class: its parts,
    resolved along the MRO (see the module doc)."""

    kernel: KernelFamily | None = None
    device: Any = None
    device_kernel: Callable | None = None
    placement: str = INPUTS


_PARTS = tuple(CudaEntry.__dataclass_fields__)
_DEFAULTS = CudaEntry()


class KernelStep:
    """``step(node, inputs, cells)``: ``node`` computed by its kernel on
    ``backend`` by the launcher ``run`` (:mod:`.launch`), into ``cells[0][0]``
    when that buffer may take the result."""

    def __init__(self, backend, kernel, run):
        self.backend = backend
        self.kernel = kernel
        self.run = run

    def __call__(self, node, inputs, cells):
        cell = cells[0]
        spare = _writable_output(self.backend, cell[0], node, inputs)
        cell[0] = self.run(self.backend, self.kernel, node, list(inputs), spare=spare)


def _writable_output(backend, buffer, node, inputs):
    """``buffer`` (an output cell's content) when it may take ``node``'s
    result: an array of ``backend``'s kind and the output's dtype,
    C-contiguous and writeable, and not an input (an in-place node writes
    into its destroyed input, by the launcher's rule).  The launcher uses it
    when its shape fits, and allocates otherwise."""
    if not backend.is_array(buffer) or buffer.dtype != node.outputs[0].type.numpy_dtype:
        return None
    if not (buffer.flags.c_contiguous and backend.writeable(buffer)):
        return None
    if any(buffer is x for x in inputs):
        return None
    return buffer


@dataclass(frozen=True)
class KernelFamily:
    """A generated-kernel family: ``build(node)`` makes a node's kernel
    (None, ``NotImplementedError`` or ``OverflowError``: the node has none);
    ``has_cuda_code(node)``, when given, is asked first (cheaper than a
    build).  The step launches it: ``KernelStep(backend, kernel, run)`` with
    the launcher ``run``, or ``make_step(backend, kernel)`` for a step of its
    own.  Override :meth:`step` for a family that needs the context."""

    build: Callable
    run: Callable | None = None
    has_cuda_code: Callable | None = None
    make_step: Callable | None = None

    def __post_init__(self):
        if (self.run is None) == (self.make_step is None):
            raise ValueError("KernelFamily: give exactly one of run and make_step")

    def step(self, node, backend, context: CudaContext | None = None):
        """The step computing ``node`` by its kernel on ``backend``, or None."""
        if self.has_cuda_code is not None and not self.has_cuda_code(node):
            return None
        kernel = self.build(node)
        if kernel is None:
            return None
        if self.make_step is not None:
            return self.make_step(backend, kernel)
        return KernelStep(backend, kernel, self.run)


#: op class -> the parts it registered itself (not its bases')
_TABLE: dict[type, dict[str, Any]] = {}
#: op class -> its resolved entry; emptied by every registration
_RESOLVED: dict[type, CudaEntry] = {}
_UNSET = object()
#: guards the table and its cache: a lookup never caches what a registration
#: made at the same time has changed
_TABLE_LOCK = threading.Lock()
_LOAD_LOCK = threading.RLock()
_builtins_loaded = False


def register_cuda_op(op_class: type, *, kernel=_UNSET, device=_UNSET, device_kernel=_UNSET,
                     placement=_UNSET) -> None:
    """Set the parts given of ``op_class``'s entry; those left out stay as
    they were (its own, or inherited).  A part given as None is none for
    ``op_class`` and its subclasses that register none of their own."""
    if not isinstance(op_class, type):
        raise TypeError(f"register_cuda_op: {op_class!r} is not a class")
    given = {name: value for name, value in (("kernel", kernel), ("device", device),
                                             ("device_kernel", device_kernel),
                                             ("placement", placement)) if value is not _UNSET}
    _check_parts(given)
    with _TABLE_LOCK:
        _TABLE.setdefault(op_class, {}).update(given)
        _RESOLVED.clear()


def _check_parts(parts: dict) -> None:
    kernel = parts.get("kernel")
    if kernel is not None and not callable(getattr(kernel, "step", None)):
        raise TypeError(f"register_cuda_op: kernel {kernel!r} has no step(node, backend, "
                        "context) (a KernelFamily)")
    device = parts.get("device")
    if device is not None and not callable(getattr(device, "run", None)):
        raise TypeError(f"register_cuda_op: device {device!r} is not a DeviceOp")
    if "placement" in parts and parts["placement"] not in _PLACEMENTS:
        raise ValueError(f"register_cuda_op: placement {parts['placement']!r} is not one of "
                         f"{_PLACEMENTS}")


def unregister_cuda_op(op_class: type, *parts: str) -> None:
    """Drop ``parts`` of ``op_class``'s own entry (all of them when none is
    named): its nodes fall back to a base's parts, or to none."""
    with _TABLE_LOCK:
        own = _TABLE.get(op_class, {})
        for name in parts or _PARTS:
            own.pop(name, None)
        if not own:
            _TABLE.pop(op_class, None)
        _RESOLVED.clear()


def _load_builtins() -> None:
    """Import the built-in families: each registers its op classes.  The
    flag is set once they are all in, so that another thread never sees a
    partial table (the lock is re-entrant: a family module being imported
    may look up)."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    with _LOAD_LOCK:
        if not _builtins_loaded:
            for name in _BUILTIN_FAMILIES:
                importlib.import_module(f"tenure.linkers.cuda.{name}")
            _builtins_loaded = True


def lookup(op_class: type) -> CudaEntry:
    """``op_class``'s entry: each part its own or its nearest base's in the
    MRO; a part nothing registered has its default (no kernel, no device
    implementation, placement :data:`INPUTS`)."""
    _load_builtins()
    entry = _RESOLVED.get(op_class)
    if entry is None:
        with _TABLE_LOCK:
            entry = _RESOLVED[op_class] = CudaEntry(**{p: _resolve(op_class, p)
                                                       for p in _PARTS})
    return entry


def _resolve(op_class: type, part: str):
    for cls in op_class.__mro__:
        own = _TABLE.get(cls)
        if own is not None and part in own:
            return own[part]
    return getattr(_DEFAULTS, part)


def kernel_step(node, backend, context: CudaContext | None = None):
    """The kernel step computing ``node`` on ``backend``, or None when no
    generated kernel computes it (then ``perform`` does)."""
    family = lookup(type(node.op)).kernel
    if family is None:
        return None
    try:
        return family.step(node, backend, context)
    except (NotImplementedError, OverflowError):
        return None


class OwnParts(MutableMapping):
    """A live view of the table: op class -> the ``part`` it registered
    itself (not inherited), over the classes that registered one that is
    not None; setting an item registers the part, deleting unregisters it.
    (``device_ops.DEVICE_OPS`` is the ``device`` view.)"""

    def __init__(self, part: str):
        if part not in _PARTS:
            raise ValueError(f"OwnParts: {part!r} is not one of {_PARTS}")
        self.part = part

    def __getitem__(self, op_class):
        _load_builtins()
        value = _TABLE.get(op_class, {}).get(self.part)
        if value is None:
            raise KeyError(op_class)
        return value

    def __setitem__(self, op_class, value):
        register_cuda_op(op_class, **{self.part: value})

    def __delitem__(self, op_class):
        self[op_class]            # KeyError when it has none of its own
        unregister_cuda_op(op_class, self.part)

    def __iter__(self):
        _load_builtins()
        with _TABLE_LOCK:
            return iter([cls for cls, own in _TABLE.items() if own.get(self.part) is not None])

    def __len__(self):
        return sum(1 for _ in self)

    def __repr__(self):
        return f"OwnParts({self.part!r}): {dict(self)!r}"


class Placed(Mapping):
    """A live view of the op classes registered with ``placement`` (their
    own), each mapped to it: ``cls in Placed(HOST)``.  (``device_ops.HOST_OPS``
    is the :data:`HOST` view.)"""

    def __init__(self, placement: str):
        self.placement = placement
        self._parts = OwnParts("placement")

    def __getitem__(self, op_class):
        if self._parts[op_class] != self.placement:
            raise KeyError(op_class)
        return self.placement

    def __iter__(self):
        return iter([cls for cls, where in self._parts.items() if where == self.placement])

    def __len__(self):
        return sum(1 for _ in self)

    def __repr__(self):
        return f"Placed({self.placement!r}): {list(self)!r}"
