"""``Mode(linker="cuda")``: the graph computed on the device.

Values: a function's inputs arrive as device arrays (the input gate,
:meth:`CudaThunk.filter_input`, copies host arrays to the device and takes
device arrays as they are), shared variables must be stored on the device
(``tn.shared(cupy_array)``, ``tn.shared(v, device="cuda")``; compiling
refuses others, naming them), and every result is a device array.

Nodes: each runs where its data is, as its op's entry in the dispatch
table (:mod:`.dispatch`) says.  *Device* nodes run their generated kernel
(the entry's ``kernel``, or ``device_kernel``: softmax over a cast) or its
device implementation (``device``: :data:`.device_ops.DEVICE_OPS`); a node
that has neither makes compiling fail with its name
(:class:`UnsupportedOnDevice`) -- nothing moves device data through host
memory.  *Host* nodes are the shape arithmetic of a graph: ``Shape`` (it
reads only an array's shape: placement ``HOST``), and any node whose inputs
are all host values (constants, shapes, what is computed from them) except
the ones that create arrays (``alloc``, ``arange``, ``eye``: placement
``DEVICE``), which run on the device.  A host value a device node needs as
data is copied to it (a constant once, when compiling); where a device node
reads a shape, a length or an index, it takes the host value as it is.  A result that is a host
value (a function returning ``x.shape``) is copied to the device, so every
result is a device array.

Memory: the executor is the Python linker's (schedule, plans per input
shape, kept buffers for borrowed outputs, the transaction's commit point
with device backups), so a borrowed output's buffer is written again by the
next call -- in steady state a call allocates nothing for it -- and
updates go into a shared variable's own device buffer when the
DestroyHandler allows.

CUDA graphs: with ``config.cuda_graphs`` a call goes first to the thunk's
:class:`~.graphs.FunctionGraphs`, which captures the kernel sequence once
per input-shape signature and replays it (see :mod:`.graphs` for the
contract); a call it cannot take runs node by node as above.  Private
copies of the thunk (``copy.copy``: the memory report's) never use graphs.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from tenure.linkers.cuda.cupy_backend import CupyBackend
from tenure.linkers.cuda.dispatch import HOST, INPUTS, CudaContext, lookup
from tenure.linkers.cuda.host_kernels import EmulatedDeviceBackend
from tenure.linkers.cuda.graphs import FunctionGraphs, arena_plan
from tenure.linkers.cuda.linker import CudaThunk, host_backend
from tenure.linkers.plan import make_plan
from tenure.linkers.python import MIN_REUSE_BYTES, op_perform
from tenure.symbolic.device import cuda_runtime, runtime_of
from tenure.symbolic.graph import Constant
from tenure.symbolic.types import DOWNCAST_HINT

__all__ = ["CudaLinker", "DeviceThunk", "UnsupportedOnDevice", "host_nodes"]


class UnsupportedOnDevice(NotImplementedError):
    """A graph has nodes that cannot run on the device (the message names them)."""


def host_nodes(nodes) -> set:
    """The nodes (in schedule order) that run on the host: see the module
    doc; each op's placement is its dispatch entry's (:mod:`.dispatch`)."""
    host_values: set = set()
    found = set()
    for node in nodes:
        placement = lookup(type(node.op)).placement
        on_host = placement == HOST or (
            placement == INPUTS
            and all(isinstance(v, Constant) or v in host_values for v in node.inputs))
        if on_host:
            found.add(node)
            host_values.update(node.outputs)
    return found


class DeviceStep:
    """A device node's step: its host-value inputs made what ``run`` reads
    (device copies where it reads data, host scalars where it reads shapes
    and indices), then ``run(node, inputs, cells)``."""

    def __init__(self, run, runtime, uploads: tuple, host_reads: tuple, constants: dict,
                 by_kernel: bool):
        self.run = run
        #: whether a generated kernel computes the node (else a device_ops entry)
        self.by_kernel = by_kernel
        self.runtime = runtime
        self.uploads = uploads
        self.host_reads = host_reads
        #: device copies of the constants among the uploads, made once
        self.constants = constants

    def __call__(self, node, inputs, cells):
        for i in self.uploads:
            copy = self.constants.get(i)
            inputs[i] = copy if copy is not None else self.runtime.from_host(np.asarray(inputs[i]))
        for i in self.host_reads:
            value = inputs[i]
            if isinstance(value, np.ndarray) and value.ndim == 0:
                inputs[i] = value[()]       # a NumPy scalar: CuPy takes these, not 0-d arrays
        self.run(node, inputs, cells)


class DeviceThunk(CudaThunk):
    """The :class:`.linker.CudaThunk` over device arrays (see the module doc)."""

    #: the linker's input gate (:class:`~tenure.function.Function` calls it)
    filter_input = None
    #: the thunk's CUDA graphs (None: an arena, or a private copy, runs node by node)
    graphs = None

    def __init__(self, plan, keep, fgraph, backend, runtime, graphs: bool = True,
                 linker=None):
        self.runtime = runtime
        self.filter_input = functools.partial(filter_device_input, runtime)
        nodes = [step.node for step in plan.steps]
        self.host = host_nodes(nodes)
        self.host_values = {v for n in self.host for v in n.outputs}
        self.device_steps: dict = {}
        self.unsupported: list = []        # found while the steps are made
        super().__init__(plan, keep, fgraph, backend, CudaContext(linker, backend, runtime))
        missing = self.unsupported
        if missing:
            names = sorted({type(n.op).__name__ for n in missing})
            raise UnsupportedOnDevice(
                f"the cuda linker cannot run {', '.join(names)} on the device (no kernel and "
                f"no device implementation): {', '.join(str(n) for n in missing[:5])}")
        #: result positions holding host values: copied to the device after a call
        self._host_results = [k for k, v in enumerate(fgraph.outputs)
                              if isinstance(v, Constant) or v in self.host_values]
        # the constants' uploads (queued on this stream) come before any call's
        # kernels, whichever stream a call runs on
        with runtime.calls.call():
            pass
        if graphs:
            self.graphs = FunctionGraphs(
                self, functools.partial(_arena_thunk, fgraph, backend, runtime, linker))

    def set_call_layout(self, n_args: int, n_out: int, update_inputs) -> None:
        """How a call's values and results are laid out (from
        :class:`~tenure.function.Function`): see :meth:`.graphs.FunctionGraphs.set_call_layout`."""
        if self.graphs is not None:
            self.graphs.set_call_layout(n_args, n_out, update_inputs)

    def __copy__(self):
        """A shallow copy (the memory report's private thunk) that runs node
        by node: a report must neither use nor change the function's graphs."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.graphs = None
        return clone

    # -- buffers held between calls: graph calls lend theirs too ------------------
    def kept_buffers(self) -> list:
        """The kept buffers, and those graph calls lent as borrowed outputs
        (with slot :data:`GRAPH_SLOT`): ``shared``/``set_value`` copy them."""
        kept = super().kept_buffers()
        if self.graphs is not None:
            kept += [(GRAPH_SLOT, buf) for buf in self.graphs.lent()]
        return kept

    def drop_kept(self, slot) -> None:
        """A graph's buffer stays: a graph call copies its arguments into
        its own buffers first, so an argument that is one is no hazard."""
        if slot is not GRAPH_SLOT:
            super().drop_kept(slot)

    def free(self) -> None:
        super().free()
        if self.graphs is not None:
            self.graphs.clear()

    def run_steps_only(self, input_values: list) -> list:
        """The steps over ``self.storage``, without call ordering or the
        host results' upload (a graph's warm-up and capture)."""
        return CudaThunk.__call__(self, input_values)

    def _perform_of(self, node):
        if node in self.host:
            return op_perform(node)
        step = self.device_steps.get(node)
        if step is None:
            step = self.device_steps[node] = self._device_step(node)
        return step

    def _device_step(self, node) -> DeviceStep:
        """By the dispatch entry's parts, the first that takes the node:
        ``kernel`` (found by the executor), ``device_kernel``, ``device``."""
        entry = lookup(type(node.op))
        kernel = self.kernel_steps.get(node) or self._device_kernel(entry, node)
        if kernel is not None:
            run, host_reads = kernel, frozenset()
        elif entry.device is None:      # reported after the steps are made (see __init__)
            self.unsupported.append(node)
            return DeviceStep(_unsupported, self.runtime, (), (), {}, False)
        else:
            run = functools.partial(_run_entry, entry.device.runner(node, self.context),
                                    self.runtime)
            host_reads = entry.device.host_inputs(node)
        uploads = tuple(i for i, v in enumerate(node.inputs) if i not in host_reads
                        and (isinstance(v, Constant) or v in self.host_values))
        constants = {i: self.runtime.from_host(np.asarray(node.inputs[i].data))
                     for i in uploads if isinstance(node.inputs[i], Constant)}
        return DeviceStep(run, self.runtime, uploads, tuple(sorted(host_reads)), constants,
                          kernel is not None)

    def _device_kernel(self, entry, node):
        if entry.device_kernel is None:
            return None
        return entry.device_kernel(node, self.backend, self.context)

    def place_inputs(self, values: list) -> list:
        """Trusted arguments (``trust_input``: no gate) on the device: host
        arrays copied there, device arrays as they are."""
        is_device_array = self.runtime.is_device_array
        return [v if is_device_array(v) else self.runtime.from_host(np.asarray(v))
                for v in values]

    def _sized_values(self, values: list) -> list:
        """The 0-d inputs whose values decide sizes (a minibatch's index in
        ``X[i * 20:(i + 1) * 20]``) as host values, for the size model, which
        computes with NumPy: one 0-d copy each, made when the plan signature
        meets a value it has not seen recently, or a plan is made."""
        if not self._value_inputs:
            return values
        values = list(values)
        for i in self._value_inputs:
            if self.runtime.is_device_array(values[i]):
                values[i] = self.runtime.to_host(values[i])
        return values

    def __call__(self, input_values: list) -> list:
        """One call, on the caller's current stream, ordered after the last
        call on the device (:class:`~tenure.linkers.cuda.runtime.CallOrder`); the
        arguments and shared storage it reads stay alive until that stream
        has run it (an update may drop the old storage at the commit)."""
        with self.runtime.calls.call(keep=input_values):
            if self.graphs is not None:
                results = self.graphs.call(input_values)
                if results is not None:
                    return results
            results = super().__call__(input_values)
            for k in self._host_results:
                results[k] = self.runtime.from_host(np.asarray(results[k]))
        return results


#: the slot :meth:`DeviceThunk.kept_buffers` gives a graph's lent buffer
GRAPH_SLOT = "graph"


def _arena_thunk(fgraph, backend, runtime, linker) -> DeviceThunk:
    """A graph's arena: the thunk of :func:`.graphs.arena_plan` (every buffer
    kept), without graphs of its own."""
    plan = arena_plan(fgraph)
    return DeviceThunk(plan, set(plan.outputs), fgraph, backend, runtime, graphs=False,
                       linker=linker)


def _run_entry(run, runtime, node, inputs, cells):
    run(node, inputs, cells, runtime)


def _unsupported(node, inputs, cells):
    raise UnsupportedOnDevice(f"{node} cannot run on the device")


def filter_device_input(runtime, type_, value, allow_downcast: bool | None, what: str,
                        strict: bool = False, downcast_hint: str = DOWNCAST_HINT):
    """The input gate on the device: a device array of ``runtime`` checked
    (and cast on the device when allowed), another device's array refused, a
    host value checked by ``type_.filter`` and copied to the device
    (``strict``: either of the input's dtype already)."""
    found = runtime_of(value)
    if found is runtime:
        return type_.filter_device_array(value, strict=strict, allow_downcast=allow_downcast,
                                         what=what, downcast_hint=downcast_hint)
    if found is not None:
        raise TypeError(f"{what}: expected an array on {runtime.name} or a host array, got a "
                        f"{found.name} device array ({type(value).__name__})")
    return runtime.from_host(type_.filter(value, strict=strict, allow_downcast=allow_downcast,
                                          what=what, downcast_hint=downcast_hint))


_BACKENDS: dict = {}
_BACKENDS_LOCK = threading.Lock()


def device_backend(runtime, emulated: bool):
    """The kernel backend of ``runtime``'s device, one per process."""
    with _BACKENDS_LOCK:
        backend = _BACKENDS.get(runtime.name)
        if backend is None:
            if emulated:
                backend = EmulatedDeviceBackend(
                    runtime, check_device_compile=host_backend().check_device_compile)
            else:
                backend = CupyBackend()
            _BACKENDS[runtime.name] = backend
        return backend


class CudaLinker:
    """``Mode(linker="cuda")``: see the module doc."""

    name = "cuda"

    def __init__(self, emulated: bool = False):
        self.runtime = cuda_runtime(emulated)
        self.backend = device_backend(self.runtime, emulated)

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True) -> DeviceThunk:
        plan = make_plan(fgraph, allow_gc=allow_gc, keep=keep_outputs)
        keep = {plan.outputs[i] for i in keep_outputs}
        thunk = DeviceThunk(plan, keep, fgraph, self.backend, self.runtime, linker=self)
        thunk.min_reuse_bytes = MIN_REUSE_BYTES
        return thunk
