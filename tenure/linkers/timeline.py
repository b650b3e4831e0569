"""The memory timeline of one call: every buffer as a band over the schedule.

A :class:`Timeline` is the data behind :func:`tenure.plot_memory` and
:func:`tenure.memory_html`, built from a :class:`~tenure.linkers.report.MemoryReport`
and the plan it observed, with no drawing library involved.  Its contract:

- *x*: the steps of the schedule, ``0 .. len(steps) - 1``; a band alive at
  step ``s`` covers ``[s, s + 1)``.
- *y*: bytes.  Above zero (region ``"call"``) is what the call allocates:
  each buffer from the step that writes it to the step after which the plan
  releases it (or to the last step, for a buffer the call hands back or
  keeps), stacked in the order they were allocated, and each step's planned
  temporaries (``workspace``) on that step alone.  At every step the stack
  is exactly the report's ``predicted_by_step``, so its highest point is
  exactly ``predicted_peak``.  Below zero (region ``"held"``) is what exists
  before the call starts and the predicted peak does not count: inputs,
  shared variables, and buffers kept from the last call (a borrowed
  output's).
- a band is one buffer; its *segments* say which variable holds it over
  which steps, and how it came to: its kind (:data:`KINDS`).  A view costs no
  bytes and makes no segment; an op writing in place starts an ``"in place"``
  segment of the buffer it overwrites; a dead buffer the plan hands on is
  ``"held aside"`` until the step that takes it, then ``"reused"``.  A
  call that keeps copies of shared storage to undo a failure after its commit
  point (see :mod:`tenure.linkers.commit`) has a ``"backup"`` band for each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: segment kinds, in legend order, with the colour both renderers use
KINDS: dict[str, str] = {
    "input": "#9e9e9e",               # the caller's array, never written
    "borrowed input": "#607d8b",      # In(borrow=True): outputs may alias it
    "shared variable": "#8d6e63",     # shared storage
    "kept from last call": "#b39ddb",  # a buffer held between calls
    "new": "#4e79a7",                 # a fresh intermediate
    "in place": "#f28e2b",            # an op overwrote the buffer of its input
    "held aside": "#d3d3d3",          # dead, kept for a later step to take
    "reused": "#59a14f",              # a dead buffer handed on to this variable
    "output": "#e15759",              # a fresh array returned to the caller
    "lent output": "#b07aa1",         # Out(borrow=True): the next call overwrites it
    "workspace": "#edc948",           # an op's planned temporaries
    "backup": "#76b7b2",              # a copy of shared storage, to undo a failed call
}

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")

#: kinds of the plan's inputs, by how the function takes them
INPUT_KINDS = ("input", "borrowed input", "shared variable")
#: kinds of what the function returns (an update of a shared variable is no output)
OUTPUT_KINDS = ("output", "lent output", "")


@dataclass(frozen=True)
class Segment:
    """Steps ``start .. stop`` (inclusive) of a band, held by one variable.

    ``kind`` is what the segment is drawn as; ``how`` is how the variable
    came to hold the buffer (``"new"``, ``"in place"``, ``"reused"``, or the
    kind itself): they differ for what the caller receives, drawn as
    ``"output"`` / ``"lent output"`` however its buffer was made.
    """
    kind: str
    how: str
    variable: str
    op: str          # the op that computed ``variable`` ("" for an input)
    start: int
    stop: int


@dataclass(frozen=True)
class Band:
    """One buffer.  ``lower[i]``: its lower edge in bytes at step ``start + i``
    (negative in the ``"held"`` region)."""
    name: str
    nbytes: int
    region: str        # "call" or "held"
    start: int
    stop: int
    lower: tuple[int, ...]
    segments: tuple[Segment, ...]

    def upper(self, step: int) -> int:
        return self.lower[step - self.start] + self.nbytes


@dataclass
class Timeline:
    """The bands of one call, the op of every step, and the peaks."""
    steps: tuple[str, ...]
    bands: tuple[Band, ...]
    predicted_peak: int
    predicted_by_step: tuple[int, ...]
    measured_peak: int
    title: str = ""

    def height(self, step: int) -> int:
        """Bytes the call has allocated at ``step`` (the top of the stack)."""
        return max((b.upper(step) for b in self.bands
                    if b.region == "call" and b.start <= step <= b.stop), default=0)

    @property
    def held_bytes(self) -> int:
        """Bytes that exist before the call (the depth below zero)."""
        return sum(b.nbytes for b in self.bands if b.region == "held")

    @property
    def peak_step(self) -> int:
        """The first step at the predicted peak."""
        return self.predicted_by_step.index(self.predicted_peak) if self.steps else 0

    def kinds(self) -> list[str]:
        """The segment kinds present, in :data:`KINDS` order."""
        present = {seg.kind for band in self.bands for seg in band.segments}
        return [kind for kind in KINDS if kind in present]

    def to_dict(self) -> dict:
        """Plain data (for JSON)."""
        return {
            "title": self.title, "steps": list(self.steps),
            "predicted_peak": self.predicted_peak, "measured_peak": self.measured_peak,
            "predicted_by_step": list(self.predicted_by_step),
            "bands": [{"name": b.name, "nbytes": b.nbytes, "region": b.region,
                       "start": b.start, "stop": b.stop, "lower": list(b.lower),
                       "segments": [dict(s.__dict__) for s in b.segments]}
                      for b in self.bands],
        }


@dataclass
class _OpenBand:
    """A band being built: its segments so far (the last one still open)."""
    name: str
    nbytes: int
    region: str
    start: int
    segments: list = field(default_factory=list)   # [kind, how, variable, op, start]
    stop: int | None = None

    def switch(self, kind: str, variable: str, op: str, step: int, how: str = "") -> None:
        segment = [kind, how or kind, variable, op, step]
        if self.segments and self.segments[-1][4] == step:
            self.segments[-1] = segment   # written twice in one step: the last one holds it
        else:
            self.segments.append(segment)

    def closed(self, lower: tuple[int, ...]) -> Band:
        starts = [s[4] for s in self.segments[1:]] + [self.stop + 1]
        segments = tuple(Segment(kind, how, var, op, first, end - 1)
                         for (kind, how, var, op, first), end in zip(self.segments, starts))
        return Band(self.name, self.nbytes, self.region, self.start, self.stop, lower,
                    segments)


def build_timeline(plan, held, predicted_by_step, measured_peak: int,
                   input_kinds, output_kinds, title: str = "", backups=(0, {})) -> Timeline:
    """The timeline of ``plan`` (a sized :class:`~tenure.linkers.plan.Plan`)
    with the slots in ``held`` already allocated when the call starts.

    ``input_kinds``: one of :data:`INPUT_KINDS` per input of the plan;
    ``output_kinds``: one of :data:`OUTPUT_KINDS` per output of the plan.
    ``backups``: ``(commit step, {shared slot: bytes})``, the copies of
    shared storage a call in backup mode keeps from its commit point on
    (:func:`~tenure.linkers.commit.planned_backups`).
    """
    if not plan.sized:
        raise ValueError("build_timeline: the plan has no sizes (plan it for input shapes)")
    builder = _Builder(plan, frozenset(held), dict(zip(plan.outputs, output_kinds)))
    builder.open_held(input_kinds)
    commit_step, backup_bytes = backups
    for index, step in enumerate(plan.steps):
        if index == commit_step:
            builder.open_backups(index, backup_bytes)
        builder.run_step(index, step)
    bands = builder.close_all()
    return Timeline(tuple(str(step.node.op) for step in plan.steps), bands,
                    max(predicted_by_step, default=0), tuple(predicted_by_step),
                    measured_peak, title)


class _Builder:
    """Walks the plan step by step, opening, switching and closing bands."""

    def __init__(self, plan, held: frozenset, output_kind: dict):
        self.plan = plan
        self.held = held
        self.output_kind = output_kind
        self.open: dict[int, _OpenBand] = {}    # root slot -> band holding its buffer
        self.finished: list[_OpenBand] = []
        self.order: list[_OpenBand] = []        # every band, in the order opened
        self.aside_after = _donor_deaths(plan)  # donor root slot -> step it dies after

    def _name(self, slot: int) -> str:
        return str(self.plan.variables[slot])

    def _new_band(self, slot: int, nbytes: int, region: str, start: int) -> _OpenBand:
        band = _OpenBand(self._name(slot), nbytes, region, start)
        self.open[slot] = band
        self.order.append(band)
        return band

    def open_held(self, input_kinds) -> None:
        """The inputs, then the buffers kept from the last call."""
        plan = self.plan
        for slot, kind in zip(plan.inputs, input_kinds):
            if plan.nbytes[slot]:
                self._new_band(slot, plan.nbytes[slot], "held", 0).switch(
                    kind, self._name(slot), "", 0)
        for step in plan.steps:
            for slot, nbytes in step.allocates:
                if slot in self.held:
                    self._new_band(slot, nbytes, "held", 0).switch(
                        "kept from last call", self._name(slot), "", 0)

    def open_backups(self, index: int, backup_bytes: dict[int, int]) -> None:
        """The copies of shared storage taken at the commit point."""
        for slot, nbytes in backup_bytes.items():
            band = _OpenBand(f"backup of {self._name(slot)}", nbytes, "call", index)
            band.switch("backup", band.name, "", index)
            self.order.append(band)

    def run_step(self, index: int, step) -> None:
        plan = self.plan
        op = str(step.node.op)
        allocated = dict(step.allocates)
        for k, slot in enumerate(step.outputs):
            variable = self._name(slot)
            role = self.output_kind.get(slot, "")
            donor = step.reuse[k] if step.reuse else None
            if donor is not None:
                band = self.open.pop(donor)
                self.open[slot] = band
                band.switch(role or "reused", variable, op, index, "reused")
            elif slot in allocated:
                band = self.open.get(slot) if slot in self.held else None
                if band is None:
                    band = self._new_band(slot, allocated[slot], "call", index)
                band.switch(role or "new", variable, op, index, "new")
            elif k in step.node.op.destroy_map and plan.roots[slot] in self.open:
                self.open[plan.roots[slot]].switch(role or "in place", variable, op, index,
                                                   "in place")
        if step.workspace:
            band = _OpenBand(f"temporaries of {op}", step.workspace, "call", index, stop=index)
            band.switch("workspace", band.name, op, index)
            self.order.append(band)
        for root, died in self.aside_after.items():
            if died == index and root in self.open:
                self.open[root].switch("held aside", self._name(root), "", index + 1)
        for slot, _ in step.releases:
            if slot not in self.held and slot in self.open:
                self.open.pop(slot).stop = index

    def close_all(self) -> tuple[Band, ...]:
        last = max(len(self.plan.steps) - 1, 0)
        for band in self.order:
            if band.stop is None:
                band.stop = last
        lowers = _stack(self.order, len(self.plan.steps))
        return tuple(band.closed(lower) for band, lower in zip(self.order, lowers))


def _donor_deaths(plan) -> dict[int, int]:
    """``{donor root slot: the step after which its last holder is dead}``."""
    members: dict[int, list[int]] = {}
    for slot, root in enumerate(plan.roots):
        if root in plan.donors:
            members.setdefault(root, []).append(slot)
    dies_after = {}
    for index, step in enumerate(plan.steps):
        for slot in step.frees:
            dies_after[slot] = index
    return {root: max(dies_after.get(s, -1) for s in slots) for root, slots in members.items()}


def _stack(bands: list[_OpenBand], n_steps: int) -> list[tuple[int, ...]]:
    """Lower edges: ``"call"`` bands stacked up from zero at every step, in the
    order they were opened; ``"held"`` bands stacked down from zero, once."""
    lowers: list[list[int]] = [[] for _ in bands]
    depth = 0
    for i, band in enumerate(bands):
        if band.region == "held":
            depth -= band.nbytes
            lowers[i] = [depth] * (band.stop - band.start + 1)
    for step in range(n_steps):
        height = 0
        for i, band in enumerate(bands):
            if band.region == "call" and band.start <= step <= band.stop:
                lowers[i].append(height)
                height += band.nbytes
    return [tuple(lower) for lower in lowers]


def band_polygons(timeline: Timeline) -> list[tuple[list[tuple[int, int]], Band, Segment]]:
    """``(vertices, band, segment)`` of every segment of every band: the
    outline of a stepwise band, along its top edge then back along its
    bottom."""
    polygons = []
    for band in timeline.bands:
        for seg in band.segments:
            top, bottom = [], []
            for step in range(seg.start, seg.stop + 1):
                low = band.lower[step - band.start]
                top += [(step, low + band.nbytes), (step + 1, low + band.nbytes)]
                bottom += [(step, low), (step + 1, low)]
            polygons.append((top + bottom[::-1], band, seg))
    return polygons


def format_bytes(value: float) -> str:
    """``1536`` -> ``'1.5 KiB'`` (negative values below the axis read as positive)."""
    value, unit = abs(value), 0
    while value >= 1024 and unit < len(BYTE_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.0f} B" if unit == 0 else f"{value:.1f} {BYTE_UNITS[unit]}"


def byte_limits(timelines) -> tuple[float, float]:
    """``(low, high)``: one byte scale for drawing all of ``timelines``, so
    that side by side they compare at a glance (room for the deepest held
    region below zero and the highest peak, predicted or measured, above)."""
    low = -max(t.held_bytes for t in timelines) * 1.05
    high = max(max(t.predicted_peak, t.measured_peak, 1) for t in timelines) * 1.12
    return low, high


def byte_ticks(low: float, high: float, count: int = 6) -> list[int]:
    """About ``count`` round tick values from ``low`` to ``high``: multiples of
    1, 2 or 5 times a power of 1024 times a power of ten, so that they read
    as round numbers of B, KiB, MiB..."""
    span = max(high - low, 1)
    unit = 1
    while span / unit >= 1024 and unit < 1024 ** (len(BYTE_UNITS) - 1):
        unit *= 1024
    raw = span / unit / count
    decade = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * decade for m in (1, 2, 5, 10) if m * decade >= raw) * unit
    step = max(int(step), 1)
    first = math.ceil(low / step) * step
    return list(range(int(first), int(high) + 1, step))
