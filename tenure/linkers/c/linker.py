"""The C linker: the whole schedule run by the C runtime, one C call per call.

``tn.Mode(linker="c")`` turns a rewritten graph's schedule into a
description for the C runtime's interpreter (see
:mod:`tenure.linkers.c.module`), which executes the entire schedule in one C
call per function call: nodes with C code (elementwise, products,
reductions, softmax, views, indexing) run C, every other node calls its
Python ``perform`` from inside the C loop, so every graph runs.  The graph's
elementwise and reduction loops come from loop libraries (:mod:`.kernels`),
built in the background and shared with every other graph that needs them;
only steps whose C depends on the node beyond a description (views,
set/inc_subtensor, outer products) compile into a small module of the
graph's own.

Memory: :class:`CThunk` is a :class:`~tenure.linkers.python.PythonThunk` that
runs its calls in C over the same storage list, so what it holds between
calls is exactly what the Python executor holds -- borrowed outputs (``keep``
slots, written into last call's buffer when shape and dtype fit: no
allocation per call in steady state), and without ``allow_gc`` the
intermediates; results handed out, inputs and the buffers results view are
dropped when a call returns (the executor's ``_clear_after`` rule), so an
``Out(borrow=False)`` result is never written by a later call.  In-place ops
write into the input the DestroyHandler let them destroy.  With ``allow_gc``
intermediates die after their last reader (the plan's ``frees``).
``free()``, ``kept_buffers()`` and ``drop_kept()`` are the executor's.

Plans per input-shape signature: the module runs one schedule, chosen when
compiling to lower peak memory for the sizes known then
(:func:`~tenure.linkers.plan.compile_time_order`); per signature (cached,
like the executor's plans) the thunk passes a table of the planned shape of
every step output and, with
``allow_gc``, the plan's buffer hand-on for those sizes on that schedule
(:attr:`~tenure.linkers.plan.Step.reuse`): a dead buffer is kept aside and
given to the step that takes it, after the same safety checks as the
executor's ``take_donor`` (held by nobody else, owns its memory, contiguous,
exactly the planned bytes).  Buffers below ``min_reuse_bytes`` (the ``py``
linker's ``MIN_REUSE_BYTES``) are not handed on.

``memory_report`` runs the plan through the Python executor's observing path
(:meth:`PythonThunk.run_observed`) on this thunk's storage: the report is
about the plan (what is allocated, viewed, written in place, reused), which
both executors share; its measured peak is the Python executor's.

No working C compiler: the linker falls back to the Python executor with one
warning (per process).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np

from tenure.linkers.c import cache, compiler, kernels, prelude, runtime
from tenure.linkers.c.call import StepsRunner
from tenure.linkers.c.dispatch import CContext, entry_for
from tenure.linkers.c.module import graph_module, shape_table, step_module_prelude
from tenure.linkers.commit import BACKUP
from tenure.linkers.interrupts import mark_committed
from tenure.linkers.plan import compile_time_order, make_plan, step_workspace
from tenure.linkers.python import MIN_REUSE_BYTES, PythonLinker, PythonThunk
from tenure.linkers.describe import error_note, user_message

__all__ = ["CLinker", "CThunk", "CLinkerWarning"]


class CLinkerWarning(UserWarning):
    """The C linker could not compile a graph and runs the Python executor instead."""


_warned_no_compiler = False


class CThunk(PythonThunk):
    """Runs one compiled graph through its C module: ``thunk(values) -> outputs``.

    ``run``: the module's entry; ``graph``: the
    :class:`~tenure.linkers.c.module.GraphModule` it was built from.
    """

    def __init__(self, plan, keep, fgraph, run=None, graph=None):
        super().__init__(plan, keep, fgraph)
        self.min_reuse_bytes = MIN_REUSE_BYTES
        self._run = run
        self.graph = graph
        self._status = np.full(1, -1, dtype=np.intp)
        performs = tuple((s.node.op.perform, s.node) for s in plan.steps)
        # The last entry is the commit hook: the Python call path holds Ctrl-C
        # from the commit point on; the compiled call path runs no Python there.
        self._py_steps = performs + (mark_committed,)
        self._py_steps_compiled = performs + (None,)
        self._tables: OrderedDict = OrderedDict()
        self._last_table_signature = object()
        self._last_table = None
        #: the nodes that run C code, each with its dispatch entry (:mod:`.dispatch`;
        #: set once the module is built)
        self._c_entries: dict = {}
        #: what the entries keep per node for the memory plan (workspace_bytes)
        self._workspace_memo: dict = {}
        # Without C steps, or without sizes, no table is ever needed.
        self._wants_table = bool(graph is not None and graph.shape_offsets)

    def _shape_table(self, values):
        """The ``shapes`` argument for these input values (cached per signature)."""
        if self._size_model is None:
            self._init_sizes()
        if not self._size_model:
            self._wants_table = False
            return None
        try:
            signature = self._signature(values)
        except AttributeError:
            return None
        if signature == self._last_table_signature:
            return self._last_table
        tables = self._tables
        if signature in tables:
            tables.move_to_end(signature)
            table = tables[signature]
        else:
            table = self._make_table(values)
            tables[signature] = table
            while len(tables) > self.max_plans:   # the executor's limit, for tables
                tables.popitem(last=False)
        self._last_table_signature, self._last_table = signature, table
        return table

    def cached_signatures(self) -> list:
        """The signatures that have a shape table, least recently used first."""
        return list(self._tables)

    def _fixed_order(self) -> list:
        """The module's schedule, fixed when it was compiled: the plans of
        reports (``plan_for``) describe it, not an order for their sizes."""
        return [s.node for s in self.plan.steps]

    def _planned(self) -> None:
        """The executor's plans, which a C thunk makes only for reports
        (``plan_for``), are not its calls': those are counted where their
        shape tables are made (:meth:`_make_table`)."""

    def _make_table(self, values):
        shapes = self._shapes(values)
        sized = None
        if shapes is not None and self.plans_per_signature:
            # The buffer hand-on for these sizes, on the schedule the module runs.
            self.plans_made += 1
            try:
                sized = make_plan(self.fgraph, True, shapes, keep=self._keep_outputs,
                                  order=[s.node for s in self.plan.steps],
                                  min_reuse_bytes=self.min_reuse_bytes,
                                  workspace_of=self.workspace_of)
            except Exception:  # noqa: BLE001 -- no hand-on rather than no call
                sized = None
        table = shape_table(self.graph, self.plan, shapes, sized)
        commit = self._base_entry.commit
        if table is not None and commit is not None and commit.mode_for(shapes) == BACKUP:
            table[0] |= 2
        return table

    def __call__(self, input_values: list) -> list:
        table = self._shape_table(input_values) if self._wants_table else None
        try:
            return self._run(self.storage, input_values if type(input_values) is list
                             else list(input_values), table, self._py_steps, self._status)
        except BaseException as exc:
            self._failed(exc)
            raise

    def prepare(self, input_values: list) -> None:
        """Make the shape table of these values' signature (see :meth:`PythonThunk.prepare`)."""
        if self._wants_table:
            self._shape_table(input_values)

    def workspace_of(self, node, shapes) -> int:
        """A step's temporaries: for a C step, what its dispatch entry says
        (an elementwise C loop's row buffers, see
        :func:`~tenure.linkers.c.elemwise.step_workspace`; none for other C
        kernels: a row or a block at most), the op's model for a ``perform``."""
        entry = self._c_entries.get(node)
        if entry is not None:
            return entry.workspace_bytes(node, shapes, self._workspace_memo)
        return step_workspace(node, shapes)

    def _failed(self, exc: BaseException) -> None:
        """After a failed call: hold nothing but constants and kept buffers, and
        name the step that raised in a note on the exception."""
        self._clear_intermediates()
        k = int(self._status[0])
        if 0 <= k < len(self.plan.steps) and isinstance(exc, BaseException):
            node = self.plan.steps[k].node
            exc.add_note(error_note(node, step=user_message(exc, node)))

    def _table_for(self, values) -> tuple:
        """``(shape table, whether it holds for every call with these shapes)``:
        a table read from the values of 0-d inputs is not."""
        table = self._shape_table(values) if self._wants_table else None
        return table, not self._value_inputs

    def fast_call_parts(self) -> dict | None:
        """What :func:`tenure.linkers.c.call.fast_caller` needs to run this
        thunk, or None when its calls must go through :meth:`__call__` and the
        Python path: a kept buffer (a borrowed output) is written next call
        into the same memory, which the caller may have passed back in as an
        argument; C steps refuse a kept buffer that overlaps an input of the
        graph, but a ``perform`` writes into whatever it is given, so every
        kept slot must come from a C step, and intermediates (which a kept
        view may hold on to) must not outlive the call."""
        if self._run is None or self.graph is None:
            return None
        commit = self._base_entry.commit
        if commit is not None and "py" in self.graph.kinds[commit.step:]:
            return None   # a perform after the commit point: Ctrl-C needs the Python path
        if self.kept_slots:
            if not self.plan.allow_gc:
                return None
            producer = {slot: kind for step, kind in zip(self.plan.steps, self.graph.kinds)
                        for slot in step.outputs}
            if any(producer.get(slot, "py") == "py" for slot in self.kept_slots):
                return None
        return dict(run=self._run, storage=self.storage, py_steps=self._py_steps_compiled,
                    status=self._status, table_for=self._table_for, on_error=self._failed,
                    runs_python="py" in self.graph.kinds)

    def steps_runner(self, types, lock):
        """The runtime's loop driver over this thunk (:class:`~.call.StepsRunner`)
        when its calls can take the C call path."""
        parts = self.fast_call_parts()
        if parts is None:
            return None
        return StepsRunner(parts, types, lock if parts["runs_python"] else None)


class CLinker:
    """Compiles a FunctionGraph into a :class:`CThunk` (one C module per graph)."""

    name = "c"

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True):
        """``keep_outputs``: indices of fgraph outputs whose buffers may be reused."""
        global _warned_no_compiler
        if compiler.find_compiler() is None:
            if not _warned_no_compiler:
                _warned_no_compiler = True
                warnings.warn("tenure: no working C compiler; the C linker falls back to the "
                              "Python executor (set tenure.config.cxx or $CC to use one)",
                              CLinkerWarning, stacklevel=3)
            return PythonLinker().make_thunk(fgraph, keep_outputs, allow_gc)
        # The module runs one schedule: the one lowest in memory for the sizes
        # known now (the executor re-plans per signature; C code is fixed).
        # Not under an activation-memory budget: there moving the Python steps
        # pulls recomputed products before the writes, and the peak check
        # (the executor's plan, at the compile-time sizes) does not see what
        # it costs this module: 2.21 MB against 2.11 for 512 rows in
        # test_transactions' budgeted step, where the check saw no rise.
        budgeted = getattr(fgraph, "memory_budget", None) is not None
        plan = make_plan(fgraph, allow_gc=allow_gc, keep=keep_outputs,
                         order=compile_time_order(
                             fgraph, runs_python=None if budgeted else self._runs_python))
        keep = {plan.outputs[i] for i in keep_outputs}
        thunk = CThunk(plan, keep, fgraph)
        graph = graph_module(plan, thunk.kept_slots, thunk._clear_after,
                             thunk._base_entry.commit, CContext(linker=self, plan=plan))
        try:
            # The loops build (in the background) while the compiled steps' module does.
            kernels.request(graph.loop_kernels)
            module = None
            if graph.source is not None:
                openmp = compiler.openmp_enabled()
                module = cache.load_module(
                    graph.name, graph.source, flags=graph.flags, openmp=openmp,
                    beside=prelude.beside(step_module_prelude(), graph.flags, openmp))
            loops = kernels.loops([loop.key for loop in graph.loop_kernels])
            run = runtime.load_runtime().Schedule(graph.description, loops, module)
        except compiler.CompileError as exc:
            warnings.warn(f"tenure: the C linker could not compile this graph and falls back "
                          f"to the Python executor: {exc.reason}", CLinkerWarning, stacklevel=3)
            return PythonLinker().make_thunk(fgraph, keep_outputs, allow_gc)
        thunk._run = run
        thunk.graph = graph
        if "blas" in graph.kinds:
            _import_blas()
        thunk._c_entries = {step.node: entry for step, entry in zip(plan.steps, graph.entries)
                            if entry is not None}
        thunk._wants_table = bool(graph.shape_offsets)
        return thunk

    def _runs_python(self, node) -> bool:
        """Whether ``node`` will be a Python step (no C entry takes it): the
        schedule puts such steps before its commit point where it can, so
        that calls may take the compiled call path."""
        return entry_for(node, CContext(linker=self)) is None


def _import_blas() -> None:
    """Import the module the runtime takes its BLAS from (``tn_blas_init``)
    now, at compile time: imported by the first product of the first call,
    its megabytes would count in that call's memory (a first
    ``memory_report``'s measured peak) and time.  A missing SciPy is left
    to the runtime's ``ImportError``, at the call."""
    try:
        import scipy.linalg.cython_blas  # noqa: F401
    except ImportError:
        pass
