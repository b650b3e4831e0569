"""Memory reports: what a compiled function allocates, node by node.

:func:`memory_report` runs a function once on given arguments, watching every
step of its plan, and records for each output: shape, dtype, bytes, and how
its buffer came to be -- ``new``, ``view`` of an input, written ``in place``
into an input, or ``reused``: the dead buffer of an earlier intermediate that
the plan handed on (``source`` names it), or last call's buffer kept between
calls (``source`` is ``"last call"``).

The predicted peak comes from the plan alone: the planned sizes of the
buffers alive at each step (:class:`~tenure.rewrites.sizes.SizeModel`, not
an observed run) plus the temporaries the step's op makes
(``Op.workspace_bytes``), plus, from the commit point on, the copies of
shared storage that a call in backup mode keeps to undo a failure (see
:mod:`tenure.linkers.commit`).  The measured peak is :mod:`tracemalloc`'s
during further calls (the smallest of :data:`MEASURED_CALLS`: other
threads' allocations count too, and only ever add) -- for a function
computing on a device (a thunk with a ``runtime``: the cuda linker) the
device memory it allocated above what it held when the call began (:meth:`~tenure.linkers.cuda.runtime.CupyRuntime.track`:
CuPy's memory pool, or the emulated device's count).
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass, field

import numpy as np

from tenure.linkers.commit import planned_backups
from tenure.linkers.plan import Plan
from tenure.linkers.timeline import Timeline, build_timeline
from tenure.symbolic.device import is_device_array, writeable

#: the ``source`` of a buffer kept from the previous call
LAST_CALL = "last call"


@dataclass(frozen=True)
class OutputRecord:
    step: int
    op: str
    variable: str
    shape: tuple
    dtype: str
    nbytes: int
    kind: str          # "new", "view", "in place", "reused"
    source: str = ""   # the input viewed or overwritten, the donor reused, or "last call"
    workspace: int = 0  # planned temporaries of the step (on its first output's record)


@dataclass
class MemoryReport:
    """The per-output records of one call, and the peaks.

    ``predicted_peak``: from the plan for these input shapes -- the most bytes
    of buffers the function allocates that are alive at once (views and
    in-place results cost nothing, inputs are not counted, a buffer handed on
    to a later variable is counted once, buffers kept from the last call are
    not allocated again), each step's op temporaries included.
    ``predicted_by_step``: that sum at each step.  ``measured_peak``: the
    peak of a call, ``measured_by`` says how: ``"tracemalloc"`` (host
    memory), or the device's runtime (device memory).  ``held_between_calls``: bytes of buffers the
    function keeps after returning (borrowed outputs, and intermediates when
    ``allow_gc`` is off).
    """

    records: list[OutputRecord] = field(default_factory=list)
    predicted_peak: int = 0
    measured_peak: int = 0
    measured_by: str = "tracemalloc"
    held_between_calls: int = 0
    predicted_by_step: list[int] = field(default_factory=list)
    #: the plan observed, and the slots it found allocated before the call
    #: (what :func:`~tenure.linkers.timeline.build_timeline` draws from)
    plan: Plan | None = field(default=None, repr=False, compare=False)
    held: frozenset = field(default=frozenset(), repr=False, compare=False)
    #: ``(commit step, {shared slot: bytes})`` of the call's backup copies
    backups: tuple = field(default=(0, {}), repr=False, compare=False)

    def rows(self) -> list[dict]:
        """The records as plain dicts (for tests, benchmarks, DataFrames)."""
        return [dict(r.__dict__) for r in self.records]

    def timeline(self, input_kinds, output_kinds, title: str = "") -> Timeline:
        """The bands of this call (see :mod:`tenure.linkers.timeline`)."""
        return build_timeline(self.plan, self.held, self.predicted_by_step, self.measured_peak,
                              input_kinds, output_kinds, title, self.backups)

    def __str__(self) -> str:
        lines = [f"{'step':>4}  {'op':<34} {'shape':<16} {'dtype':<8} {'bytes':>12}  buffer"]
        for r in self.records:
            how = f"{r.kind} ({r.source})" if r.source else r.kind
            if r.workspace:
                how += f"; temporaries {r.workspace:,} bytes"
            lines.append(f"{r.step:>4}  {r.op[:34]:<34} {str(r.shape):<16} {r.dtype:<8} "
                         f"{r.nbytes:>12,}  {how}")
        lines.append(f"predicted peak {self.predicted_peak:,} bytes; measured peak "
                     f"{self.measured_peak:,} bytes ({self.measured_by}); held between calls "
                     f"{self.held_between_calls:,} bytes")
        return "\n".join(lines)


def _is_array(value) -> bool:
    """A host or a device array (the report reads both alike)."""
    return isinstance(value, np.ndarray) or is_device_array(value)


def _same_memory(a, b) -> bool:
    """Whether arrays ``a`` and ``b`` are in the same memory and share bytes."""
    return (isinstance(a, np.ndarray) == isinstance(b, np.ndarray)
            and bool(np.shares_memory(a, b)))


def _kind(node, k, out, before, donor_name, offered, inputs) -> tuple[str, str]:
    op = node.op
    for mapping, label in ((op.view_map, "view"), (op.destroy_map, "in place")):
        for i in mapping.get(k, ()):
            if _is_array(inputs[i]) and _is_array(out) and _same_memory(out, inputs[i]):
                return label, str(node.inputs[i])
    if _is_array(out) and out.size:
        if offered is not None and (out is offered or _same_memory(out, offered)):
            return "reused", donor_name
        if before is not None and (out is before or (
                _is_array(before) and _same_memory(out, before))):
            return "reused", LAST_CALL
    elif offered is not None and out is offered:
        return "reused", donor_name
    elif before is not None and out is before:
        return "reused", LAST_CALL
    return "new", ""


def observe_call(thunk, input_values, plan) -> list[OutputRecord]:
    """Run ``thunk`` once, step by step; return a record per output."""
    records: list[OutputRecord] = []
    storage = thunk.storage

    def observe(index, node, k, out, before, donor, offered):
        step = plan.steps[index]
        inputs = [storage[i] for i in step.inputs]
        donor_name = str(plan.variables[donor]) if donor is not None else ""
        kind, source = _kind(node, k, out, before, donor_name, offered, inputs)
        is_array = _is_array(out)
        records.append(OutputRecord(
            index, str(node.op), str(node.outputs[k]),
            tuple(out.shape) if is_array else (), out.dtype.name if is_array else "",
            int(out.nbytes) if is_array else 0, kind, source,
            step.workspace if k == 0 else 0))

    try:
        thunk.run_observed(input_values, observe)
    except Exception:
        thunk._clear_intermediates()
        raise
    return records


def held_slots(thunk, plan) -> frozenset[int]:
    """The slots whose buffer from an earlier call fits this plan's planned
    shape: the call writes into them and allocates nothing for them."""
    if plan.shapes is None:
        return frozenset()
    held = set()
    outside = set(plan.inputs) | set(plan.constants)
    for slot, value in enumerate(thunk.storage):
        if slot in outside or not _is_array(value):
            continue
        if (tuple(value.shape) == tuple(plan.shapes[slot])
                and value.dtype == plan.variables[slot].type.numpy_dtype
                and writeable(value)):
            held.add(slot)
    return frozenset(held)


def held_bytes(thunk) -> int:
    """Bytes of the distinct buffers a thunk holds between calls (constants
    and inputs aside)."""
    plan = thunk.plan
    outside = set(plan.inputs) | set(plan.constants)
    owners = {}
    for slot, value in enumerate(thunk.storage):
        if slot in outside or not _is_array(value):
            continue
        owner = value if value.base is None else value.base
        owners[id(owner)] = int(getattr(owner, "nbytes", value.nbytes))
    return sum(owners.values())


def _private(values: list) -> list:
    """Copies, so that in-place ops (a mutable input, a shared variable's
    update) overwrite nothing of the caller's or of the shared storage."""
    return [v.copy() if _is_array(v) else v for v in values]


#: how many calls a host measurement takes the smallest peak of (see _measured_peak)
MEASURED_CALLS = 3


def _measured_peak(thunk, input_values: list) -> tuple[int, str]:
    """The most memory a call of ``thunk`` held above what it began with, and
    how it was measured: device memory for a thunk that computes on a device
    (its runtime's count, of one call), else host memory (tracemalloc).

    tracemalloc counts every thread's allocations: a loop library finishing
    its build in the background, or a test runner's I/O thread, adds to the
    call's peak while it runs.  Others' allocations only ever add, and calls
    from one state allocate the same, so the smallest peak of
    :data:`MEASURED_CALLS` calls is the call's own.  Each call starts from
    the storage the first began with (the buffers held between calls) and
    gets its own private inputs (an in-place op may overwrite them), both
    set outside the measured window.  A device's count is this thread's
    (CuPy's memory hook) or this device's: one call."""
    runtime = thunk.runtime
    if runtime is not None:
        values = _private(input_values)
        with runtime.track() as usage:
            thunk(values)
            runtime.synchronize()
        return usage.peak_bytes, f"{runtime.name} memory"
    held = list(thunk.storage)
    peaks = []
    for _ in range(MEASURED_CALLS):
        thunk.storage[:] = held
        peaks.append(_traced_peak(thunk, _private(input_values)))
    return min(peaks), "tracemalloc"


def _traced_peak(thunk, input_values: list) -> int:
    tracemalloc.start()
    try:
        thunk(input_values)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def private_thunk(thunk):
    """``thunk.private_copy()``: a shallow copy with its own storage list
    (holding the same buffers: constants, kept outputs), for the report to run.  The caller
    holds the function's locks, which keep the Python call path out; the C
    call path of a function without Python steps or shared variables takes
    no lock (it runs whole while holding the GIL), and its calls -- which
    may come between any two steps of the report -- keep using the thunk's
    own list (and clear it when they fail), so neither run clears or
    replaces a slot the other is using."""
    return thunk.private_copy()


def memory_report(function, input_values: list) -> MemoryReport:
    """Observe one call of ``function`` (bound and filtered values: explicit
    inputs, then shared values), predict its peak from the plan, and measure
    another call.

    Both calls run on private copies of the inputs, in a private copy of the
    thunk's storage list (see :func:`private_thunk`), and assign no updates,
    so the report changes nothing the caller can see -- but for the buffer
    of a borrowed output, which they write as any call does.  The caller
    holds the function's locks.
    """
    return _report(private_thunk(function._thunk), input_values)


def _report(thunk, input_values: list) -> MemoryReport:
    plan = thunk.plan_for(input_values)
    records = observe_call(thunk, _private(input_values), plan)
    held = held_slots(thunk, plan)
    commit_step, backups = planned_backups(plan, thunk.fgraph)
    # a device's pool rounds each buffer up: the prediction counts in its unit
    unit = thunk.runtime.allocation_unit if thunk.runtime is not None else 1
    by_step = [peak + (sum(backups.values()) if step >= commit_step else 0)
               for step, peak in enumerate(plan.step_peaks(held, unit))]
    report = MemoryReport(records=records, predicted_peak=max(by_step, default=0),
                          predicted_by_step=by_step, plan=plan, held=held,
                          backups=(commit_step, backups))
    thunk.prepare(_private(input_values))   # what a call with new shapes sets up is not the call's
    report.measured_peak, report.measured_by = _measured_peak(thunk, input_values)
    report.held_between_calls = held_bytes(thunk)
    return report
