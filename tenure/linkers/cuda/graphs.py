"""Whole-function CUDA graphs for ``Mode(linker="cuda")``.

A call of a device function issues one launch per node, and at a thousand
elements the launches, not the kernels, are the cost.  With
``config.cuda_graphs`` (the default) a function captures its whole kernel
sequence as one CUDA graph per input-shape signature and replays it: a
call is then the copies of its arguments, one graph launch and the copies
its results need.

The contract:

- **When.**  The first call of a signature runs as usual (the *warm-up*:
  its results are that call's) over buffers of the signature's own (an
  *arena*: every intermediate kept, so that nothing is allocated again),
  then runs the steps once more on a private non-blocking stream under
  capture -- recorded, not executed.  Later calls with the same signature
  and the same shared storage replay the graph.
- **Which functions.**  Those whose steps, once warm, do nothing a capture
  cannot hold: an allocation from the memory pool (the pool is not
  graph-safe: a block freed after the capture may be handed out while the
  graph still writes it), a synchronisation with the host (a kernel's error
  flags read back, an index checked, a shape read from the device), a copy
  of fresh host data to the device (a value computed on the host used as
  data).  The capture is how this is decided: the device (CUDA, or the
  emulated device in CI) refuses such work, the capture is dropped, and the
  function runs uncaptured for that signature; :func:`graph_status` says
  why.  Nothing is guessed: a function is captured only where the capture
  succeeded.  Nor where a replay would copy more than
  :data:`COPY_BYTES_PER_LAUNCH` per launch it saves (see *Stable pointers*):
  large arguments and results run uncaptured, where no copy is made.
- **Stable pointers.**  A graph bakes in the addresses it was captured
  with.  Arguments are *copied into fixed input buffers* (one
  device-to-device copy each, queued before the launch), rather than the
  graph being captured again when an argument's address changes: callers
  pass new arrays on nearly every call (a host array is uploaded to a new
  one each time), so re-capturing would capture on every call.  Shared
  storage cannot be copied in (an in-place update must write the storage
  itself), so the graph is keyed by the storage's addresses, shapes and
  strides: ``set_value(v, borrow=True)`` adopting a new array, or an update
  that replaced the buffer on an uncaptured call, drops the graph and the
  next call captures again (``set_value`` of the same shape copies into
  the buffer: the graph stays valid and reads the new value).  The arena,
  the fixed input buffers and the graph live as long as the signature's
  record (the most recently used :data:`MAX_GRAPHS` per function).
- **Results keep their contract.**  ``Out(y, borrow=False)`` is a fresh
  array on every call (a copy of the arena's buffer, made after the
  launch); ``Out(y, borrow=True)`` is the arena's buffer itself, written
  again by the next call (lent: ``shared``/``set_value`` copy it).  An
  update computed in place writes the shared storage inside the graph; one
  computed into the arena is copied into the shared variable's own buffer
  after the launch (after the outputs were copied, so they hold the values
  from before the call), so the storage's address does not change.  An
  update that is another shared variable's storage (a swap) is staged
  through a fresh copy first.
- **Streams.**  A replay is a call like any other (:class:`~tenure.linkers.cuda.runtime.CallOrder`):
  on the caller's current stream, after the last call's work.

``config.cuda_graphs = False`` turns all this off (calls run node by node,
as before).  The arena holds every intermediate between calls: a captured
function keeps the memory of all its buffers, as a graph's private pool
would.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from tenure import config
from tenure.linkers.plan import make_plan

__all__ = ["COPY_BYTES_PER_LAUNCH", "CopiesOutweighLaunches", "FunctionGraphs", "GraphStatus",
           "MAX_GRAPHS", "graph_status"]

#: signatures whose graph (and arena) a function keeps, least recently used dropped
MAX_GRAPHS = 8

#: the bytes a replay may copy (arguments in, results out) per launch it saves.
#: A step of the uncaptured device path costs tens of microseconds of host time
#: (541 us for the 11 launches of a 20-node graph on the H100); 16 MiB copied in
#: and again out is about 10 us at an H100's bandwidth.  Above this the copies
#: cost more than the launches: on the H100 the 64M-element elemwise call took
#: 702 us replayed against 373 us uncaptured.
COPY_BYTES_PER_LAUNCH = 16 * 2**20


class CopiesOutweighLaunches(Exception):
    """A signature not captured: a replay would copy more than its launches cost."""


@dataclass
class GraphStatus:
    """Where a function stands with CUDA graphs (:func:`graph_status`).

    ``enabled``: ``config.cuda_graphs``; ``captured``: the input-shape
    signatures (argument shapes) that have a graph; ``refused``: the
    signatures whose capture failed, with the reason; ``reason``: why the
    function's last call did not replay a graph (None when it did);
    ``captures``, ``replays``, ``invalidations``: counts (an invalidation is
    a graph dropped because the shared storage it was captured with changed).
    """

    enabled: bool
    captured: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)
    reason: str | None = None
    captures: int = 0
    replays: int = 0
    invalidations: int = 0


def graph_status(function) -> GraphStatus:
    """The :class:`GraphStatus` of a compiled function (one that does not
    run on the cuda linker has none: ``reason`` says so)."""
    graphs = getattr(function._thunk, "graphs", None)
    if graphs is None:
        return GraphStatus(enabled=config.cuda_graphs,
                           reason=f"the function runs on the {function.mode.linker!r} linker; "
                                  f"CUDA graphs are for Mode(linker='cuda')")
    return graphs.status()


class _Record:
    """One signature's graph: its arena (``storage``), fixed input buffers,
    the graph, the results the graph writes and what to do with each after
    a launch."""

    __slots__ = ("fingerprint", "storage", "inputs", "graph", "results", "actions", "lent_inputs")

    def __init__(self, fingerprint, storage, inputs):
        self.fingerprint = fingerprint
        self.storage = storage
        self.inputs = inputs
        self.graph = self.results = self.actions = None
        self.lent_inputs = ()

    def arrays(self) -> list:
        """Every device buffer the graph uses (to keep alive past pending launches)."""
        return [v for v in self.storage if hasattr(v, "data")] + list(self.inputs)


# what finishing a call does with each result (see _actions)
_AS_IS, _COPY, _UPLOAD, _INTO, _STAGED_INTO = range(5)


class FunctionGraphs:
    """The CUDA graphs of one :class:`~.device_linker.DeviceThunk`:
    ``call(values)`` returns the call's results through a graph (captured
    now or replayed), or None when this call cannot use one (the thunk then
    runs it node by node).  Needs the call's layout
    (:meth:`set_call_layout`, from :class:`~tenure.function.Function`)."""

    def __init__(self, thunk, make_arena):
        self.thunk = thunk
        self.runtime = thunk.runtime
        self._make_arena = make_arena    # () -> a DeviceThunk keeping every buffer
        self._arena = None
        self._stream = None
        self.layout = None               # (n_args, n_out, update positions in values)
        self._records: OrderedDict = OrderedDict()
        self._refused: OrderedDict = OrderedDict()
        self._reason: str | None = "not called yet"
        self.captures = self.replays = self.invalidations = 0

    def set_call_layout(self, n_args: int, n_out: int, update_inputs) -> None:
        """``n_args`` arguments come first in a call's values, then shared
        storage; results are ``n_out`` outputs, then updates, the ``k``-th of
        the storage at values position ``update_inputs[k]``."""
        self.layout = (n_args, n_out, tuple(update_inputs))

    # -- status ------------------------------------------------------------------
    def status(self) -> GraphStatus:
        return GraphStatus(enabled=config.cuda_graphs, captured=list(self._records),
                           refused=dict(self._refused), reason=self._reason,
                           captures=self.captures, replays=self.replays,
                           invalidations=self.invalidations)

    def lent(self) -> list:
        """The buffers handed out as borrowed outputs by graph calls."""
        lent = []
        n_out = self.layout[1] if self.layout else 0
        for record in self._records.values():
            lent += [r for k, r in enumerate(record.results[:n_out])
                     if record.actions[k][0] == _AS_IS]
        return lent

    def clear(self) -> None:
        """Drop every graph (its buffers kept until the streams passed them)."""
        records = list(self._records.values())
        self._records.clear()
        self._refused.clear()
        self._retire(records)

    # -- calling -------------------------------------------------------------------
    def call(self, values: list):
        """The results of a call through a graph, or None (see the class doc)."""
        if not config.cuda_graphs:
            self._reason = "config.cuda_graphs is off"
            return None
        if self.layout is None:
            self._reason = "the call layout is unknown (a thunk not made by tn.function)"
            return None
        n_args = self.layout[0]
        args, shared = values[:n_args], values[n_args:]
        try:
            key = tuple([(a.shape, a.dtype) for a in args])
            fingerprint = tuple([_fingerprint(v) for v in shared])
        except AttributeError:      # a value that is not a device array: no signature
            self._reason = "an argument is not a device array"
            return None
        record = self._records.get(key)
        if record is not None:
            if record.fingerprint == fingerprint:
                self._records.move_to_end(key)
                return self._replay(record, args)
            self._invalidate(key, record)
        elif key in self._refused:
            self._reason = self._refused[key]
            return None
        return self._capture(key, fingerprint, args, shared)

    def _replay(self, record, args) -> list:
        runtime = self.runtime
        for k, (buffer, arg) in enumerate(zip(record.inputs, args)):
            if arg is buffer:
                continue          # a lent identity output passed back in
            if k in record.lent_inputs and runtime.may_share_memory(arg, buffer):
                arg = arg.copy()  # part of it passed back: not copied over itself
            runtime.copy_async(buffer, arg)
        runtime.launch_graph(record.graph)
        self.replays += 1
        self._reason = None
        return self._finish(record.results, record.actions)

    def _capture(self, key, fingerprint, args, shared) -> list:
        """The warm-up (this call's results), then the capture."""
        runtime = self.runtime
        arena = self._arena_thunk()
        record = _Record(fingerprint, _fresh_storage(arena.plan),
                         [runtime.empty(a.shape, a.dtype) for a in args])
        for buffer, arg in zip(record.inputs, args):
            runtime.copy_async(buffer, arg)
        values = list(record.inputs) + list(shared)
        results = self._run_arena(record, values)      # raises as an uncaptured call would
        copied = sum(a.nbytes for a in args) + sum(getattr(r, "nbytes", 0) for r in results)
        launches = len(arena.plan.steps)
        if copied > launches * COPY_BYTES_PER_LAUNCH:
            return self._refuse(key, CopiesOutweighLaunches(
                f"a replay would copy {copied / 2**20:.1f} MiB into and out of the graph's "
                f"buffers to save {launches} launch(es): more than "
                f"{COPY_BYTES_PER_LAUNCH // 2**20} MiB per launch costs more than the launches"),
                record, results)
        try:
            with runtime.capturing(self._capture_stream()) as captured:
                captured_results = self._run_arena(record, values)
        except Exception as exc:    # noqa: BLE001 -- any failure: no graph for this signature
            return self._refuse(key, exc, record, results)
        record.graph = captured.graph
        record.results = captured_results
        record.actions = self._actions(captured_results, shared)
        record.lent_inputs = self._lent_inputs(record)
        self._records[key] = record
        self._refused.pop(key, None)
        while len(self._records) > MAX_GRAPHS:
            self._retire([self._records.popitem(last=False)[1]])
        self.captures += 1
        self._reason = None
        # this call's values are in the warm-up's buffers (the same ones,
        # unless a step took a new buffer on its first run)
        return self._finish(results, self._actions(results, shared))

    def _refuse(self, key, exc, record, results) -> list:
        """No graph for ``key``: the reason kept, the arena dropped, and the
        warm-up's results -- buffers nobody else holds now, as an uncaptured
        call's are -- returned as they are."""
        notes = [n.removeprefix("tenure: raised while computing ")
                 for n in getattr(exc, "__notes__", ()) if n.startswith("tenure: raised while")]
        where = f" (while capturing {notes[0].split(' (inputs:')[0]})" if notes else ""
        reason = f"{type(exc).__name__}: {exc}{where}"
        self._refused[key] = self._reason = reason
        while len(self._refused) > MAX_GRAPHS:
            self._refused.popitem(last=False)
        self._retire([record])
        host = set(self.thunk._host_results)
        return [self.runtime.from_host(_host_array(r)) if k in host else r
                for k, r in enumerate(results)]

    def _invalidate(self, key, record) -> None:
        """Drop ``key``'s graph: the shared storage it baked in changed."""
        del self._records[key]
        self.invalidations += 1
        self._retire([record])

    # -- the arena -----------------------------------------------------------------
    def _arena_thunk(self):
        if self._arena is None:
            self._arena = self._make_arena()
        return self._arena

    def _capture_stream(self):
        if self._stream is None:
            self._stream = self.runtime.stream(non_blocking=True)
        return self._stream

    def _run_arena(self, record, values) -> list:
        """The arena's steps over ``record``'s buffers (its kernels write
        into the buffers the first run left in each slot)."""
        arena = self._arena
        arena.storage = record.storage
        try:
            return arena.run_steps_only(values)
        finally:
            arena.storage = None      # the record alone holds its buffers

    def _retire(self, records) -> None:
        """Buffers of dropped graphs go back to the pool only once the
        current stream (ordered after the last call) has passed them."""
        arrays = [a for r in records for a in r.arrays()]
        if arrays:
            with self.runtime.calls.call(keep=arrays):
                pass

    # -- results -------------------------------------------------------------------
    def _actions(self, results, shared) -> list:
        """What each result needs after a launch: ``(_AS_IS,)`` a borrowed
        output, ``(_COPY,)`` a fresh copy, ``(_UPLOAD,)`` a host value to the
        device, ``(_INTO, target)`` an update copied into its storage
        (``_STAGED_INTO`` through a fresh copy when it is shared storage),
        ``(_AS_IS,)`` too for an update computed in place."""
        n_args, n_out, update_inputs = self.layout
        host = set(self.thunk._host_results)
        kept = set(self.thunk._keep_outputs)
        actions: list = [None] * len(results)
        for k in range(n_out, len(results)):
            target = shared[update_inputs[k - n_out] - n_args]
            actions[k] = self._update_action(results[k], target, shared, k in host)
        for k in range(n_out):
            # A kept (borrowed) output never aliases shared storage or an
            # update's value (Function keeps no such output), so the copies
            # into storage after the launch cannot change it.
            actions[k] = (_UPLOAD,) if k in host else (_AS_IS,) if k in kept else (_COPY,)
        return actions

    def _update_action(self, result, target, shared, on_host: bool) -> tuple:
        if on_host:
            return (_UPLOAD,)
        if _fingerprint(result) == _fingerprint(target):
            return (_AS_IS,)       # computed in place, into the storage itself
        if result.shape != target.shape or result.dtype != target.dtype:
            return (_COPY,)        # a new shape: the storage is replaced
        if any(self.runtime.may_share_memory(result, s) for s in shared):
            return (_STAGED_INTO, target)
        return (_INTO, target)

    def _finish(self, results, actions) -> list:
        """The call's results from the buffers the graph wrote (see
        :meth:`_actions`): copies first, then the updates' copies into
        storage, so that no output reads an updated value."""
        out = list(results)
        staged = []
        for k, action in enumerate(actions):
            kind = action[0]
            if kind == _COPY:
                out[k] = results[k].copy()
            elif kind == _STAGED_INTO:
                staged.append((k, action[1], results[k].copy()))
            elif kind == _INTO:
                staged.append((k, action[1], results[k]))
            elif kind == _UPLOAD:
                out[k] = self.runtime.from_host(_host_array(results[k]))
        for k, target, source in staged:
            self.runtime.copy_async(target, source)
            out[k] = target
        return out

    def _lent_inputs(self, record) -> tuple:
        """Fixed input buffers a borrowed output may be a view of."""
        lent = [r for r, a in zip(record.results, record.actions) if a[0] == _AS_IS]
        return tuple(k for k, buffer in enumerate(record.inputs)
                     if any(self.runtime.may_share_memory(buffer, r) for r in lent))


def _fingerprint(array) -> tuple:
    """What a graph baked in of ``array``: its address and layout."""
    return (array.data.ptr, array.shape, array.strides, array.dtype)


def _fresh_storage(plan) -> list:
    storage = [None] * plan.n_slots
    for slot, value in plan.constants.items():
        storage[slot] = value
    return storage


def _host_array(value) -> np.ndarray:
    return np.asarray(value)


def arena_plan(fgraph):
    """The arena's plan: no intermediate freed, every result kept, so a
    warm run allocates nothing."""
    return make_plan(fgraph, allow_gc=False, keep=set(range(len(fgraph.outputs))))
