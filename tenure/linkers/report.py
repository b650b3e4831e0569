"""Memory reports: what a compiled function allocates, node by node.

:func:`memory_report` runs a function once on given arguments, watching every
step of its plan, and records for each output: shape, dtype, bytes, and how
its buffer came to be -- ``new``, ``view`` of an input, written ``in place``
into an input, or ``reused`` (last call's buffer, kept between calls).  From
the plan's lifetimes and those sizes it predicts the peak of the buffers the
function allocates; it then measures a second call with :mod:`tracemalloc`.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass, field

import numpy as np

from tenure.rewrites.destroy import buffer_roots


@dataclass(frozen=True)
class OutputRecord:
    step: int
    op: str
    variable: str
    shape: tuple
    dtype: str
    nbytes: int
    kind: str          # "new", "view", "in place", "reused"
    source: str = ""   # the input viewed or overwritten, when there is one


@dataclass
class MemoryReport:
    """The per-output records of one call, and the peaks.

    ``predicted_peak``: the most bytes of buffers the function allocated that
    are alive at once, from the plan's lifetimes (views and in-place results
    cost nothing, inputs are not counted).  ``measured_peak``: the
    tracemalloc peak of a call.  ``held_between_calls``: bytes of buffers the
    function keeps after returning (borrowed outputs, and intermediates when
    ``allow_gc`` is off).
    """

    records: list[OutputRecord] = field(default_factory=list)
    predicted_peak: int = 0
    measured_peak: int = 0
    held_between_calls: int = 0

    def rows(self) -> list[dict]:
        """The records as plain dicts (for tests, benchmarks, DataFrames)."""
        return [dict(r.__dict__) for r in self.records]

    def __str__(self) -> str:
        lines = [f"{'step':>4}  {'op':<34} {'shape':<16} {'dtype':<8} {'bytes':>12}  buffer"]
        for r in self.records:
            how = f"{r.kind} ({r.source})" if r.source else r.kind
            lines.append(f"{r.step:>4}  {r.op[:34]:<34} {str(r.shape):<16} {r.dtype:<8} "
                         f"{r.nbytes:>12,}  {how}")
        lines.append(f"predicted peak {self.predicted_peak:,} bytes; measured peak "
                     f"{self.measured_peak:,} bytes (tracemalloc); held between calls "
                     f"{self.held_between_calls:,} bytes")
        return "\n".join(lines)


def _kind(node, k, out, before, inputs) -> tuple[str, str]:
    op = node.op
    for mapping, label in ((op.view_map, "view"), (op.destroy_map, "in place")):
        for i in mapping.get(k, ()):
            if isinstance(inputs[i], np.ndarray) and np.shares_memory(out, inputs[i]):
                return label, str(node.inputs[i])
    if before is not None and out is before:
        return "reused", ""
    return "new", ""


def observe_call(thunk, input_values) -> tuple[list[OutputRecord], dict]:
    """Run ``thunk`` once step by step; return the records and the arrays
    each variable held (by plan slot)."""
    plan, storage = thunk.plan, thunk.storage
    for slot, value in zip(plan.inputs, input_values):
        storage[slot] = value
    records, seen = [], {}
    try:
        for index, step in enumerate(plan.steps):
            node = step.node
            inputs = [storage[i] for i in step.inputs]
            before = [storage[o] for o in step.outputs]
            cells = [[b] for b in before]
            node.op.perform(node, inputs, cells)
            for k, (slot, cell) in enumerate(zip(step.outputs, cells)):
                out = cell[0]
                storage[slot] = out
                seen[slot] = out
                kind, source = _kind(node, k, out, before[k], inputs)
                records.append(OutputRecord(index, str(node.op), str(node.outputs[k]),
                                            tuple(out.shape), out.dtype.name, int(out.nbytes),
                                            kind, source))
            for f in step.frees:
                storage[f] = None
    finally:
        thunk._clear_intermediates()
    return records, seen


def predicted_peak(plan, sizes: dict) -> int:
    """Most bytes of function-allocated buffers alive at once.

    A buffer is charged to its root (views and in-place results share it)
    and lives while any variable of that root is still held; inputs and
    constants are not the function's allocations.
    """
    roots = buffer_roots([s.node for s in plan.steps], ())
    slot_of = {var: i for i, var in enumerate(plan.variables)}
    outside = set(plan.inputs) | set(plan.constants)
    live: set[int] = set()
    peak = 0
    for step in plan.steps:
        live.update(step.outputs)
        charged = {slot_of.get(roots.get(plan.variables[s], plan.variables[s]), s)
                   for s in live}
        peak = max(peak, sum(sizes.get(r, 0) for r in charged if r not in outside))
        live.difference_update(step.frees)
    return peak


def _private(values: list) -> list:
    """Copies, so that in-place ops (a mutable input, a shared variable's
    update) overwrite nothing of the caller's or of the shared storage."""
    return [v.copy() if isinstance(v, np.ndarray) else v for v in values]


def memory_report(function, input_values: list) -> MemoryReport:
    """Observe one call of ``function`` (bound and filtered values: explicit
    inputs, then shared values), predict its peak, and measure another call.

    Both calls run on private copies of the inputs and assign no updates, so
    the report changes nothing the caller can see.
    """
    thunk = function._thunk
    records, seen = observe_call(thunk, _private(input_values))
    sizes = {slot: int(arr.nbytes) for slot, arr in seen.items() if isinstance(arr, np.ndarray)}
    report = MemoryReport(records=records, predicted_peak=predicted_peak(thunk.plan, sizes))
    measured_inputs = _private(input_values)
    tracemalloc.start()
    try:
        thunk(measured_inputs)
        report.measured_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    report.held_between_calls = sum(int(buf.nbytes) for _, buf in thunk.kept_buffers())
    return report
