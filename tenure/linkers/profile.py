"""Profiles: where a function's calls spend their time, beside its memory.

``tn.function(..., profile=True)`` gives the function a :class:`Profile`
(``f.profile``) that accumulates over its calls: for every node of the
schedule its op, how many calls ran it, the seconds they took (total and
mean), whether it ran as a Python step (the op's ``perform``) or as C, and
from the memory plan of the last call's input shapes the bytes the step
allocates and the bytes planned live while it runs (its buffers and
temporaries: the memory report's ``predicted_by_step``).  ``print(f.profile)``
prints it as one table, slowest first; :meth:`Profile.rows` and
:meth:`Profile.to_dict` give the same as plain data.

It also counts the memory plans: ``plans_made``, the calls that made one
(a new input-shape signature, or one that left the cache), and
``plan_hits``, the calls that found theirs planned.  The signature is the
inputs' shapes and the sizes 0-d inputs decide, not their values: a loop
over minibatches ``X[i * 20:(i + 1) * 20]`` makes one plan for the full
batches and one for a last, shorter one, however many indices it visits.
(A function whose buffers cannot be handed on plans once, when compiled:
its calls count in neither.)

How it is measured (``time.perf_counter``):

- every call as a whole, from the function's entry to its return;
- the thunk's run inside it (the linker computing the schedule);
- each Python step (``perform``) on its own: on the ``py`` linker every
  step, on the ``c`` linker the steps its C interpreter hands to Python.

The C linker's C steps run inside one C call, which is not timed step by
step: their time is reported together, as one row ``C steps (n nodes)``:
the thunk's run less the Python steps inside it.  Each C node's own row
shows its calls and memory, and no time.  What is left of a call -- binding
the arguments, the input gate, the copies the memory contract needs, the
executor's loop between steps -- is the row ``call overhead``.  So the
rows' times add up to the calls' total, and their fractions to 1.

A profiled function's calls go through the Python call path (on the ``c``
linker, the compiled call path is not used: the schedule it runs is the
same), and its timers cost a few microseconds per step.  A function compiled
without ``profile`` has none of this: ``f.profile`` is None and its calls
take no wrapper.  Memory reports (``f.memory_report``) of a profiled
function are not counted in its profile.  ``f.copy()`` and a pickled ``f``
compile without a profile.

The ``py`` and ``c`` linkers profile; the others (``check``, ``dask``,
``cuda``, ``cuda_host``) refuse ``profile=True`` with an error naming
the linker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from time import perf_counter

#: the linkers whose functions can be profiled
PROFILED_LINKERS = ("py", "c")


class ProfileUnsupported(ValueError):
    """``profile=True`` for a linker that cannot be profiled."""


@dataclass
class NodeTime:
    """One node's line of a :class:`Profile`."""

    index: int              # its position in the compiled schedule
    node: object            # the Apply node
    op: str                 # the op's label
    python: bool            # whether it runs as a Python step (its perform)
    calls: int = 0
    seconds: float | None = 0.0   # None: not timed on its own (a C step)
    #: from the plan of the last call's shapes (None: no sizes known)
    allocated_bytes: int | None = None
    live_bytes: int | None = None

    @property
    def mean_seconds(self) -> float | None:
        if self.seconds is None or not self.calls:
            return None if self.seconds is None else 0.0
        return self.seconds / self.calls


@dataclass
class Profile:
    """Time per node over a function's profiled calls, with its planned memory.

    ``linker``: the linker's name.  ``calls``: how many calls were profiled.
    ``total_seconds``: their time, entry to return.  ``run_seconds``: the
    thunk's runs inside them.  ``nodes``: a :class:`NodeTime` per node of the
    schedule.  ``c_seconds``: the C linker's C steps together (0 on ``py``).
    ``predicted_peak``: the planned peak of the last call's shapes (None: no
    sizes known).  ``plans_made``, ``plan_hits``: the calls that made a
    memory plan for their input-shape signature, and those that found it
    made (see the module notes).
    """

    linker: str
    name: str = ""
    nodes: list[NodeTime] = field(default_factory=list)
    calls: int = 0
    total_seconds: float = 0.0
    run_seconds: float = 0.0
    predicted_peak: int | None = None
    plans_made: int = 0
    plan_hits: int = 0
    #: id of the last call's input-shape signature whose memory is shown
    _memory_signature: object = field(default=None, repr=False, compare=False)

    # -- derived figures ----------------------------------------------------------
    @property
    def python_seconds(self) -> float:
        """Seconds spent in Python steps (``perform``)."""
        return sum(n.seconds for n in self.nodes if n.python and n.seconds)

    @property
    def c_seconds(self) -> float:
        """Seconds of the C steps together (the thunk's runs less their Python steps)."""
        if not any(not n.python for n in self.nodes):
            return 0.0
        return max(self.run_seconds - self.python_seconds, 0.0)

    @property
    def overhead_seconds(self) -> float:
        """What the calls spent outside the steps (binding, input gate,
        copies, the executor's loop)."""
        return max(self.total_seconds - self.python_seconds - self.c_seconds, 0.0)

    @property
    def python_fraction(self) -> float:
        """The fraction of the calls' time spent in Python steps."""
        return self.python_seconds / self.total_seconds if self.total_seconds else 0.0

    def reset(self) -> None:
        """Forget every call profiled so far (the memory columns stay)."""
        self.calls = self.plans_made = self.plan_hits = 0
        self.total_seconds = self.run_seconds = 0.0
        for n in self.nodes:
            n.calls = 0
            n.seconds = 0.0 if n.python else None

    # -- as data ---------------------------------------------------------------------
    def rows(self) -> list[dict]:
        """The table's rows as plain dicts, slowest first: one per node
        (``kind`` ``"python"`` or ``"c"``), then ``"c steps"`` (the C steps
        together, C linker only) and ``"overhead"``.  ``fraction``: of the
        calls' total time (None for a node not timed on its own); the
        fractions of the rows that have one add up to 1."""
        total = self.total_seconds
        rows = []
        for n in self.nodes:
            rows.append(dict(kind="python" if n.python else "c", index=n.index, op=n.op,
                             calls=n.calls, seconds=n.seconds, mean_seconds=n.mean_seconds,
                             fraction=(n.seconds / total if total else 0.0)
                             if n.seconds is not None else None,
                             allocated_bytes=n.allocated_bytes, live_bytes=n.live_bytes))
        rows.sort(key=lambda r: (-(r["seconds"] or 0.0), r["index"]))
        n_c = sum(not n.python for n in self.nodes)
        if n_c:
            rows.append(dict(kind="c steps", index=None, op=f"C steps ({n_c} nodes)",
                             calls=self.calls, seconds=self.c_seconds,
                             mean_seconds=self.c_seconds / self.calls if self.calls else 0.0,
                             fraction=self.c_seconds / total if total else 0.0,
                             allocated_bytes=None, live_bytes=None))
        rows.append(dict(kind="overhead", index=None, op="call overhead", calls=self.calls,
                         seconds=self.overhead_seconds,
                         mean_seconds=self.overhead_seconds / self.calls if self.calls else 0.0,
                         fraction=self.overhead_seconds / total if total else 0.0,
                         allocated_bytes=None, live_bytes=None))
        return rows

    def to_dict(self) -> dict:
        """The whole profile as plain data (``rows`` as :meth:`rows`)."""
        return dict(name=self.name, linker=self.linker, calls=self.calls,
                    total_seconds=self.total_seconds, run_seconds=self.run_seconds,
                    python_seconds=self.python_seconds, c_seconds=self.c_seconds,
                    overhead_seconds=self.overhead_seconds,
                    python_fraction=self.python_fraction,
                    predicted_peak=self.predicted_peak, plans_made=self.plans_made,
                    plan_hits=self.plan_hits, rows=self.rows())

    def __str__(self) -> str:
        title = f"profile of function {self.name!r}" if self.name else "profile"
        lines = [f"{title} ({self.linker} linker): {self.calls} calls, "
                 f"{self.total_seconds:.6f} s, {self.python_fraction:.1%} in Python steps, "
                 f"memory plans: {self.plans_made} made, {self.plan_hits} reused",
                 f"{'step':>4}  {'op':<34} {'kind':<8} {'calls':>6} {'total s':>10} "
                 f"{'mean s':>10} {'time':>6} {'allocates':>12} {'live bytes':>12}"]

        def fmt(value, spec, blank="-"):
            return blank if value is None else format(value, spec)

        for r in self.rows():
            lines.append(
                f"{fmt(r['index'], '>4', ''):>4}  {r['op'][:34]:<34} {r['kind']:<8} "
                f"{r['calls']:>6} {fmt(r['seconds'], '.6f'):>10} "
                f"{fmt(r['mean_seconds'], '.6f'):>10} {fmt(r['fraction'], '.1%'):>6} "
                f"{fmt(r['allocated_bytes'], ','):>12} {fmt(r['live_bytes'], ','):>12}")
        peak = "unknown" if self.predicted_peak is None else f"{self.predicted_peak:,} bytes"
        lines.append(f"predicted peak {peak} (plan of the last call's shapes); "
                     f"f.memory_report(...) measures it node by node")
        return "\n".join(lines)

    # -- collecting -------------------------------------------------------------------
    def _timed(self, perform, record: NodeTime, active):
        """``perform`` timed into ``record`` while a profiled call runs (a
        memory report running the same steps is not counted)."""
        def timed_perform(node, inputs, cells):
            if not active.on:
                return perform(node, inputs, cells)
            start = perf_counter()
            try:
                return perform(node, inputs, cells)
            finally:
                record.seconds += perf_counter() - start
                record.calls += 1
        return timed_perform

    def _note_memory(self, thunk, values) -> None:
        """The memory columns, from the plan of these values' shapes (made
        once per signature)."""
        try:
            signature = thunk._signature(values)
        except Exception:  # noqa: BLE001 -- not arrays: no sizes
            signature = None
        if signature is not None and signature == self._memory_signature:
            return
        self._memory_signature = signature
        try:
            plan = thunk.plan_for(values)
        except Exception:  # noqa: BLE001 -- a plan that cannot be made shows no bytes
            plan = None
        by_node = {n.node: n for n in self.nodes}
        for n in self.nodes:
            n.allocated_bytes = n.live_bytes = None
        self.predicted_peak = None
        if plan is None or not plan.sized:
            return
        peaks = plan.step_peaks()
        for step, live in zip(plan.steps, peaks):
            n = by_node.get(step.node)
            if n is not None:
                n.allocated_bytes = sum(b for _, b in step.allocates)
                n.live_bytes = live
        self.predicted_peak = max(peaks, default=0)


class _Active(threading.local):
    on = False


class ProfiledThunk:
    """Stands in for a function's thunk: times its runs and notes the
    memory plan of new input shapes; every other attribute is the thunk's."""

    def __init__(self, thunk, profile: Profile, active: _Active):
        self.__dict__.update(_thunk=thunk, _profile=profile, _active=active)

    def __getattr__(self, name):
        thunk = self.__dict__.get("_thunk")
        if thunk is None:   # not set up (e.g. mid-copy): no delegation loop
            raise AttributeError(name)
        return getattr(thunk, name)

    def __call__(self, values: list) -> list:
        thunk, profile = self._thunk, self._profile
        profile._note_memory(thunk, values)
        start = perf_counter()
        try:
            return thunk(values)
        finally:
            profile.run_seconds += perf_counter() - start


def check_profiled_linker(linker: str) -> None:
    """Refuse ``profile=True`` for a linker that cannot be profiled, naming it."""
    if linker not in PROFILED_LINKERS:
        raise ProfileUnsupported(
            f"function(profile=True): the {linker!r} linker cannot be profiled (the "
            f"{' and '.join(repr(k) for k in PROFILED_LINKERS)} linkers can); compile "
            f"without profile, or with Mode(linker='py') or Mode(linker='c')")


def profile_function(function) -> Profile:
    """Attach a :class:`Profile` to a compiled ``function`` and return it:
    its steps are timed, its calls go through the Python call path and are
    timed whole (see the module notes)."""
    from tenure.linkers.c.linker import CThunk
    from tenure.linkers.python import PythonThunk, step_tuples

    linker = function.mode.linker
    thunk = function._thunk
    check_profiled_linker(linker)
    if type(thunk) not in (PythonThunk, CThunk):
        raise ProfileUnsupported(f"function(profile=True): the {linker!r} linker made a "
                                 f"{type(thunk).__name__}, which cannot be profiled")
    compiled_c = isinstance(thunk, CThunk) and thunk._run is not None
    kinds = thunk.graph.kinds if compiled_c else ["py"] * len(thunk.plan.steps)
    profile = Profile(linker="c" if compiled_c else "py", name=function.given_name or "")
    active = _Active()
    records = {}
    for index, (step, kind) in enumerate(zip(thunk.plan.steps, kinds)):
        python = kind == "py"
        record = NodeTime(index, step.node, str(step.node.op), python,
                          seconds=0.0 if python else None)
        records[step.node] = record
        profile.nodes.append(record)

    if compiled_c:
        # The interpreter calls ``py_steps[k][0](node, inputs, cells)`` for a Python step.
        steps = list(thunk._py_steps)
        for k, (step, kind) in enumerate(zip(thunk.plan.steps, kinds)):
            if kind == "py":
                perform, node = steps[k]
                steps[k] = (profile._timed(perform, records[node], active), node)
        thunk._py_steps = tuple(steps)
        c_records = [records[s.node] for s, kind in zip(thunk.plan.steps, kinds) if kind != "py"]
        run = thunk._run

        def counted_run(*args):
            result = run(*args)
            if active.on:
                for record in c_records:
                    record.calls += 1
            return result
        thunk._run = counted_run
    else:
        base = thunk.perform_of

        def perform_of(node):
            return profile._timed(base(node), records[node], active)
        thunk.perform_of = perform_of
        thunk._steps = step_tuples(thunk.plan, perform_of)
        thunk._base_entry = thunk._make_entry(thunk.plan)
        thunk._last_entry = thunk._base_entry
        thunk._plans.clear()

    function._thunk = ProfiledThunk(thunk, profile, active)
    function._fast_call = None      # every call through the timed Python path
    call = function._call
    totals_lock = threading.Lock()   # calls of other threads end concurrently

    plans = thunk.plans_per_signature

    def profiled_call(*args, **kwargs):
        if active.on:               # a call inside a running one: the call refuses it
            return call(*args, **kwargs)
        active.on = True
        made_before = thunk.plans_made
        start = perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            elapsed = perf_counter() - start
            active.on = False
            made = thunk.plans_made - made_before
            with totals_lock:
                profile.total_seconds += elapsed
                profile.calls += 1
                if plans:
                    profile.plans_made += made
                    profile.plan_hits += not made
    function._call = profiled_call
    return profile
