"""The NumPy executor: the reference linker.

It runs a plan's schedule over a flat storage list, calling each op's
``perform``.  Intermediates are dropped right after their last reader (when the
plan was made with ``allow_gc``); without it they stay between calls and each
op writes its next result into last call's buffer.  Output slots listed in
``keep`` (borrowed outputs) keep their array between calls in either case.

Plans per input shape.  With ``allow_gc``, the executor plans each
input-shape signature (the shapes of the input values, shared values
included, in ``plan.inputs`` order, and the values of the dims that 0-d
inputs decide -- ``zeros(n)``'s ``n``; ``X[i*20:(i+1)*20]``'s 20 rows, the
same whatever ``i``) on its first call: it evaluates the
graph's :class:`~tenure.rewrites.sizes.SizeModel` once (built on the first
call, so compiling costs nothing more), lets :func:`make_plan` choose the
schedule and the buffer assignment for those sizes, and caches the plan.  The
cache holds the :data:`PythonThunk.max_plans` most recently used signatures:
a function called with ever new shapes (varying sequence lengths) must not
grow without bound, and the few shapes a function alternates between
(training and evaluation batches, a last short batch) stay planned.  Graphs
whose buffers cannot be handed on at all (see :func:`reuse_possible`) skip
all this and pay nothing per call.

Executing buffer reuse: when a planned donor dies, its array is kept aside
instead of dropped; when the receiving step runs, its output cell is
pre-filled with the donor's memory reinterpreted to the planned shape and
dtype -- only if that memory is C-contiguous, writeable, owned by the array
(or by the one array it views), exactly the planned size, and held by nobody
else (reference counts: an array an op returned that is also a constant's or
a caller's is never written).  Ops write into a pre-filled cell when shape and
dtype fit and allocate otherwise.  Donors nobody took are dropped when the call
returns: nothing is kept aside between calls.
"""

from __future__ import annotations

import copy
import sys
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from tenure.linkers.commit import BACKUP, CommitPoint, commit_point
from tenure.linkers.interrupts import mark_committed
from tenure.linkers.plan import Plan, make_plan, reuse_possible, step_workspace
from tenure.linkers.describe import error_note, user_message
from tenure.linkers.thunk import Thunk
from tenure.rewrites.destroy import view_root
from tenure.symbolic.device import writeable
from tenure.symbolic.graph import Variable

_getrefcount = sys.getrefcount
_ndarray = np.ndarray


def _calibrate() -> tuple[int, int]:
    """The reference counts :func:`take_donor` sees for an array nobody else
    holds: ``(owner taken directly, owner seen through a view)``."""
    aside = {0: np.empty(4)}
    direct = _probe(aside)
    aside = {0: np.empty(4)[::1]}
    return direct, _probe(aside, through_view=True)


def _probe(aside, through_view=False) -> int:
    buf = aside.pop(0)
    if not through_view:
        return _getrefcount(buf)
    owner = buf.base
    return _getrefcount(owner)


_DIRECT_REFS, _VIEWED_REFS = _calibrate()


def take_donor(aside: dict, donor: int, shape: tuple, dtype: np.dtype, nbytes: int):
    """The memory of the dead buffer kept aside for ``donor``, as an array of
    ``shape`` and ``dtype`` (``None`` when it cannot be used safely).

    The buffer leaves ``aside`` either way: a donor is taken once.
    """
    buf = aside.pop(donor, None)
    if type(buf) is not _ndarray:
        return None
    owner = buf.base
    if owner is None:
        if _getrefcount(buf) != _DIRECT_REFS:
            return None
        owner = buf
    else:
        # Seen through a view (a buffer taken earlier, or a reshaped result):
        # the view must be the only holder of an array that owns its memory.
        if (type(owner) is not _ndarray or owner.base is not None
                or _getrefcount(buf) != _DIRECT_REFS or _getrefcount(owner) != _VIEWED_REFS):
            return None
        del buf
    flags = owner.flags
    if not (flags.c_contiguous and flags.writeable) or owner.nbytes != nbytes:
        return None
    if owner.shape == shape and owner.dtype == dtype:
        return owner
    return _ndarray(shape, dtype, buffer=owner)


def op_perform(node):
    """What computes ``node``: its op's ``perform`` (the NumPy reference)."""
    return node.op.perform


def step_tuples(plan: Plan, perform_of=op_perform) -> list[tuple]:
    """The plan's steps as plain tuples for the executor's hot loop:
    ``(perform, node, input slots, output slots, frees, takes, stash)``;
    ``perform_of(node)`` says what computes each node (``perform(node,
    inputs, output cells)``: a linker that runs some nodes its own way
    gives its callable).

    ``takes``: ``(output index, donor slot, shape, dtype, bytes)`` for each
    output computed into a dead buffer; ``stash``: the freed slots to keep
    aside for a later step.
    """
    result = []
    for s in plan.steps:
        takes = ()
        if plan.nbytes is not None:
            takes = tuple((k, d, plan.shapes[o], plan.variables[o].type.numpy_dtype,
                           plan.nbytes[o])
                          for k, (o, d) in enumerate(zip(s.outputs, s.reuse)) if d is not None)
        stash = tuple(f for f in s.frees if f in plan.donors)
        result.append((perform_of(s.node), s.node, s.inputs, s.outputs, s.frees, takes, stash))
    return result


class Entry(NamedTuple):
    """What a call with one input-shape signature runs."""

    plan: Plan
    #: the plan's steps as :func:`step_tuples`
    steps: list
    #: where the schedule first writes shared storage (None: it never does)
    commit: CommitPoint | None
    #: ``commit.mode_for`` these sizes (None: decided per signature at call time)
    mode: str | None = None


def run_steps(steps, storage: list, aside: dict) -> None:
    """Run step tuples over ``storage`` (the executor's hot loop); a step
    that raises gets a note naming it."""
    node = None
    try:
        for perform, node, ins, outs, frees, takes, stash in steps:
            cells = [[storage[o]] for o in outs]
            if takes:
                # A taker's slot is empty (an intermediate): None when refused.
                for k, donor, shape, dtype, size in takes:
                    cells[k][0] = take_donor(aside, donor, shape, dtype, size)
            perform(node, [storage[i] for i in ins], cells)
            for o, cell in zip(outs, cells):
                storage[o] = cell[0]
            # No loop variable may keep a buffer alive past its last reader.
            cell = None
            if stash:
                for s in stash:
                    aside[s] = storage[s]
            for f in frees:
                storage[f] = None
    except BaseException as exc:
        if node is not None:
            exc.add_note(error_note(node, step=user_message(exc, node)))
        raise


_NO_SIGNATURE = object()

#: the smallest buffer the ``py`` linker hands on to a later step.  Below it,
#: NumPy's allocator gives back recently freed memory about as fast as an op
#: takes a pre-filled output cell (measured: the cell's shape checks cost a
#: microsecond or two per step), so small buffers are simply reallocated.
#: The ``check`` linker hands on buffers of every size (0), so the test
#: suite's small arrays exercise the reuse paths too.
MIN_REUSE_BYTES = 1 << 16


class PythonThunk(Thunk):
    """Runs one compiled graph.  ``thunk(input_values) -> output values``.

    ``plan``: the plan made without sizes (its slots are every plan's slots).
    ``fgraph``: the graph, to plan per input-shape signature (without it,
    ``plan`` is always run as it is).
    """

    #: how many input-shape signatures keep their plan (least recently used dropped)
    max_plans = 16
    #: the smallest buffer handed on to a later step (the ``py`` linker sets
    #: :data:`MIN_REUSE_BYTES`)
    min_reuse_bytes = 0
    #: ``(node, shapes) -> bytes`` of a step's temporaries, for plans with sizes
    workspace_of = staticmethod(step_workspace)
    #: what computes each node (see :func:`step_tuples`)
    perform_of = staticmethod(op_perform)

    def __init__(self, plan: Plan, keep: set[int] = frozenset(), fgraph=None):
        self.plan = plan
        self.fgraph = fgraph
        #: output slots whose buffer survives the call (borrowed outputs)
        self.kept_slots = tuple(sorted(keep))
        self.storage: list = [None] * plan.n_slots
        for slot, value in plan.constants.items():
            self.storage[slot] = value
        # The steps as plain tuples: the loop of run_steps is the per-call hot path.
        self._steps = step_tuples(plan, self.perform_of)
        self._base_entry = self._make_entry(plan)
        #: signature -> commit mode, for calls of the base plan (see :meth:`_commit_mode`)
        self._commit_modes: OrderedDict = OrderedDict()
        self._input_slots = plan.inputs
        self._output_slots = plan.outputs
        # Dropped after each call: inputs (the caller's), results handed out,
        # and the buffers results are views of -- a result handed out must not
        # be overwritten by the next call, even with allow_gc off.
        slot_of = {var: i for i, var in enumerate(plan.variables)}
        result_roots = {slot_of[view_root(plan.variables[s])] for s in plan.outputs
                        if s not in keep}
        self._clear_after = tuple(
            slot for slot in set(plan.inputs) | set(plan.outputs) | result_roots
            if slot not in plan.constants and slot not in keep)
        self._keep_outputs = tuple(i for i, s in enumerate(plan.outputs) if s in keep)
        #: whether plans are made per input-shape signature
        self.plans_per_signature = (fgraph is not None and plan.allow_gc
                                    and reuse_possible(plan, keep))
        self._plans: OrderedDict = OrderedDict()   # signature -> Entry
        self._last_signature = _NO_SIGNATURE
        self._last_entry = self._base_entry
        self._size_model = None                    # built on the first call that needs it
        self._value_inputs: tuple[int, ...] = ()   # 0-d inputs whose values decide sizes
        self._value_dims: tuple = ()               # the dims they decide (in a fixed order)
        self._dims_by_values: dict = {}            # their recent values -> those dims
        #: how many plans were made for signatures (a miss of the plan cache)
        self.plans_made = 0

    # -- buffers held between calls ----------------------------------------------
    def kept_buffers(self) -> list[tuple[int, np.ndarray]]:
        """The buffers held between calls, as (slot, array)."""
        return [(s, self.storage[s]) for s in self.kept_slots if self.storage[s] is not None]

    def drop_kept(self, slot: int) -> None:
        self.storage[slot] = None

    def free(self) -> None:
        """Release every buffer held between calls."""
        for slot in self.kept_slots:
            self.storage[slot] = None

    def private_copy(self) -> PythonThunk:
        """A shallow copy with its own storage list (holding the same
        buffers: constants, kept outputs): see
        :func:`tenure.linkers.report.private_thunk`."""
        private = copy.copy(self)
        private.storage = list(self.storage)
        return private

    # -- plans per input-shape signature ---------------------------------------
    def plan_for(self, input_values: list) -> Plan:
        """The plan a call with these input values runs, with its sizes (for
        reports: a thunk that does not plan per signature runs its one plan,
        given here the sizes of these values)."""
        if self.plans_per_signature:
            return self._entry(input_values)[0]
        shapes = self._shapes(input_values) if self.fgraph is not None else None
        if shapes is None:
            return self.plan
        return make_plan(self.fgraph, self.plan.allow_gc, shapes, keep=self._keep_outputs,
                         order=[s.node for s in self.plan.steps], reuse=False,
                         workspace_of=self.workspace_of)

    def cached_signatures(self) -> list:
        """The signatures that have a plan, least recently used first."""
        return list(self._plans)

    def _signature(self, values) -> tuple:
        """What a plan depends on: the inputs' shapes, and the sizes that
        0-d inputs' values decide -- the values of those dims, not of the
        inputs: ``X[i * 20:(i + 1) * 20]`` has 20 rows whatever ``i``, so
        every minibatch of a loop over ``i`` shares one plan."""
        signature = tuple([v.shape for v in values])
        if self._value_inputs:
            raw = tuple([values[i].tobytes() for i in self._value_inputs])
            known = self._dims_by_values
            dims = known.get(raw)
            if dims is None:      # values met recently need no evaluation
                dims = known[raw] = self._size_model.dim_values(self._value_dims,
                                                                self._sized_values(values))
                if len(known) > 4 * self.max_plans:
                    known.pop(next(iter(known)), None)     # the oldest
            signature += dims
        return signature

    def _entry(self, values) -> tuple:
        """``(plan, step tuples)`` for these input values."""
        try:
            signature = self._signature(values)
        except AttributeError:  # an input that is not an array: no sizes to plan with
            return self._base_entry
        if signature == self._last_signature:
            return self._last_entry
        return self._lookup(signature, values)

    def _lookup(self, signature, values) -> tuple:
        if self._size_model is None:
            self._init_sizes()
            signature = self._signature(values)
        plans = self._plans
        entry = plans.get(signature)
        if entry is None:
            shapes = self._shapes(values)
            plan = make_plan(self.fgraph, True, shapes, keep=self._keep_outputs,
                             order=self._fixed_order(), min_reuse_bytes=self.min_reuse_bytes,
                             workspace_of=self.workspace_of) \
                if shapes is not None else self.plan
            entry = self._make_entry(plan, shapes)
            plans[signature] = entry
            self._planned()
            while len(plans) > self.max_plans:
                plans.popitem(last=False)
        else:
            plans.move_to_end(signature)
        self._last_signature, self._last_entry = signature, entry
        return entry

    def _fixed_order(self) -> list | None:
        """The schedule every plan runs, or None: the executor orders each
        signature's plan for its sizes."""
        return None

    def _planned(self) -> None:
        """Count a plan made for a call's signature (:attr:`plans_made`)."""
        self.plans_made += 1

    def _make_entry(self, plan: Plan, shapes: dict | None = None) -> Entry:
        """The entry running ``plan``; with ``shapes``, its commit mode for them
        (raising a shape error of a step after the commit point now, before
        the call runs anything)."""
        commit = commit_point(plan, self.fgraph) if self.fgraph is not None else None
        mode = commit.mode_for(shapes) if commit is not None and shapes is not None else None
        return Entry(plan, step_tuples(plan, self.perform_of) if plan is not self.plan
                     else self._steps,
                     commit, mode)

    def _commit_mode(self, values, entry: Entry) -> str:
        """How this call gets past ``entry``'s commit point (see
        :mod:`tenure.linkers.commit`), decided once per signature."""
        if entry.mode is not None:
            return entry.mode
        if self._size_model is None:
            self._init_sizes()   # before the signature: it may read 0-d input values
        try:
            signature = self._signature(values)
        except AttributeError:
            return BACKUP
        modes = self._commit_modes
        mode = modes.get(signature)
        if mode is None:
            mode = entry.commit.mode_for(self._shapes(values))
            modes[signature] = mode
            while len(modes) > self.max_plans:
                modes.popitem(last=False)
        return mode

    def _init_sizes(self) -> None:
        from tenure.rewrites.sizes import SizeModel
        try:
            model = SizeModel(self.fgraph)
        except Exception:  # noqa: BLE001 -- no sizes: plans without reuse
            self._size_model = False
            return
        needs = value_dependence(model, self.fgraph.inputs)
        deps = {v for found in needs.values() for v in found}
        if any(getattr(v, "ndim", None) != 0 for v in deps):
            # A size that depends on the values in an array (an op that cannot
            # infer its shape, computed from one): no signature fixes it, and
            # evaluating it would run part of the graph.  Plan without sizes.
            self._size_model = False
            return
        index = {var: i for i, var in enumerate(self.fgraph.inputs)}
        # Sizes read from 0-d inputs (``zeros(n)``): the values of those
        # dims join the signature.
        self._value_inputs = tuple(sorted(index[v] for v in deps))
        self._value_dims = tuple(dict.fromkeys(   # (in the model's order: the graph's)
            d for var, dims in model.dims.items() if var in needs
            for d in dims if isinstance(d, Variable)))
        self._size_model = model

    def _shapes(self, values) -> dict | None:
        if self._size_model is None:
            self._init_sizes()
        model = self._size_model
        if not model:
            return None
        try:
            return model.shapes(self._sized_values(values))
        except Exception:  # noqa: BLE001 -- unknown sizes: no reuse
            return None

    def _sized_values(self, values: list) -> list:
        """The input values the size model computes with (NumPy's ops): these
        values here; a device thunk gives it host copies of the 0-d inputs
        that decide sizes."""
        return values

    def prepare(self, input_values: list) -> None:
        """Set up what a call with these values' shapes needs (its plan), so
        that a measured call measures the call alone."""
        if self.plans_per_signature:
            self._entry(input_values)

    # -- calling -------------------------------------------------------------------
    def __call__(self, input_values: list) -> list:
        entry = self._entry(input_values) if self.plans_per_signature else self._base_entry
        commit = entry.commit
        mode = self._commit_mode(input_values, entry) if commit is not None else None
        storage = self.storage
        for slot, value in zip(self._input_slots, input_values):
            storage[slot] = value
        aside: dict = {}   # dead buffers waiting for the step that takes them
        try:
            if commit is None:
                self._run_steps(entry.steps, storage, aside)
            else:
                self._run_committing(entry.steps, commit, mode, storage, aside)
        except BaseException:
            aside.clear()
            self._clear_intermediates()
            raise
        results = [storage[o] for o in self._output_slots]
        for slot in self._clear_after:
            storage[slot] = None
        return results

    #: runs step tuples (the checking executor runs them with its checks)
    _run_steps = staticmethod(run_steps)

    def _run_committing(self, steps, commit: CommitPoint, mode: str, storage, aside) -> None:
        """The steps before the commit point, then the rest as one unit: Ctrl-C
        waits for the call to end, and in :data:`BACKUP` mode the shared
        storage written is restored if a step raises."""
        self._run_steps(steps[:commit.step], storage, aside)
        backups = []
        if mode == BACKUP:
            for slot in commit.written:
                value = storage[slot]
                if writeable(value):    # a host array, or device storage
                    backups.append((value, value.copy()))
        mark_committed()
        try:
            self._run_steps(steps[commit.step:], storage, aside)
        except BaseException:
            for value, saved in backups:
                value[...] = saved
            raise

    def run_observed(self, input_values: list, observe) -> list:
        """A call that reports every output as it is computed:
        ``observe(index, node, k, value, before, donor, prefilled)`` with the
        buffer the slot held before the step (last call's), the donor slot
        whose dead buffer was offered (or ``None``) and the array offered.
        ``observe`` must not keep the arrays (a buffer held elsewhere is never
        handed on)."""
        steps = self._entry(input_values)[1] if self.plans_per_signature else self._steps
        storage = self.storage
        for slot, value in zip(self._input_slots, input_values):
            storage[slot] = value
        aside: dict = {}
        try:
            for index, (perform, node, ins, outs, frees, takes, stash) in enumerate(steps):
                before = [storage[o] for o in outs]
                cells = [[b] for b in before]
                offered = {}
                for k, donor, shape, dtype, size in takes:
                    buf = take_donor(aside, donor, shape, dtype, size)
                    if buf is not None:
                        cells[k][0] = buf
                        offered[k] = (donor, buf)
                    del buf
                perform(node, [storage[i] for i in ins], cells)
                for k, (o, cell) in enumerate(zip(outs, cells)):
                    storage[o] = cell[0]
                    donor, buf = offered.pop(k, (None, None))
                    observe(index, node, k, cell[0], before[k], donor, buf)
                    del buf
                del before, cells, cell
                for s in stash:
                    aside[s] = storage[s]
                for f in frees:
                    storage[f] = None
        finally:
            aside.clear()
        results = [storage[o] for o in self._output_slots]
        for slot in self._clear_after:
            storage[slot] = None
        return results

    def _clear_intermediates(self) -> None:
        """After a failed call, hold nothing but constants and kept buffers."""
        keep = set(self.plan.constants) | set(self.kept_slots)
        for slot in range(len(self.storage)):
            if slot not in keep:
                self.storage[slot] = None


def value_dependence(model, inputs) -> dict:
    """``{variable: inputs whose values (not just shapes) its size needs}`` for
    the variables of a :class:`~tenure.rewrites.sizes.SizeModel` whose size
    needs any (e.g. ``zeros(n)`` needs the value of ``n``)."""
    from tenure.symbolic.graph import Constant, Variable, io_toposort
    from tenure.symbolic.ops.shape import Shape
    dims = {d for ds in model.dims.values() if ds for d in ds if isinstance(d, Variable)}
    if not dims:
        return {}
    roots = set(inputs)
    needs: dict = {}

    def of(var) -> frozenset:
        if var in roots:
            return frozenset((var,))
        if isinstance(var, Constant):
            return frozenset()
        return needs.get(var, frozenset())

    for node in io_toposort(list(roots), list(dims)):
        if isinstance(node.op, Shape):
            # The shape of an input needs no values; of a computed variable, its value.
            (x,) = node.inputs
            found = frozenset() if x in roots or isinstance(x, Constant) else of(x)
        else:
            found = frozenset().union(*(of(v) for v in node.inputs))
        for out in node.outputs:
            needs[out] = found
    result = {}
    for var, ds in model.dims.items():
        if ds:
            deps = frozenset().union(*(of(d) for d in ds if isinstance(d, Variable)))
            if deps:
                result[var] = deps
    return result


class PythonLinker:
    """Compiles a FunctionGraph into a :class:`PythonThunk`."""

    name = "py"

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True) -> PythonThunk:
        """``keep_outputs``: indices of fgraph outputs whose buffers may be reused."""
        plan = make_plan(fgraph, allow_gc=allow_gc, keep=keep_outputs)
        keep = {plan.outputs[i] for i in keep_outputs}
        thunk = PythonThunk(plan, keep, fgraph)
        thunk.min_reuse_bytes = MIN_REUSE_BYTES
        return thunk
