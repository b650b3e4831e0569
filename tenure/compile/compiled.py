""":class:`Function`: a compiled function, and what its calls do.

Compiling: :func:`~tenure.compile.prepare.build_graph` clones the graph into
a :class:`~tenure.symbolic.fgraph.FunctionGraph` (inputs first, then the
shared variables it reads), the DestroyHandler guards the mode's rewrites,
:func:`~tenure.compile.aliasing.analyse_aliasing` works out once which
results could alias memory they must not, and the mode's linker makes the
thunk (:class:`~tenure.linkers.thunk.Thunk`), which the function drives
through that interface alone.  Calling: the C path when the thunk offers one
and nothing needs Python (:mod:`.fast_call`), else binding, the input gate,
the thunk and exactly the copies the contract needs, as one transaction
(:mod:`.calls`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tenure.compile.aliasing import (
    analyse_aliasing, copy_inputs_over_destroyed_shared, copy_where_needed,
    separate_destroyed_inputs)
from tenure.compile.calls import call_locks, holding, reentered_error, run_transaction
from tenure.compile.fast_call import make_fast_call
from tenure.compile.io import In, Out, check_stateful_values
from tenure.compile.mode import Mode, check_budget_can_free
from tenure.compile.prepare import (
    apply_swap, build_graph, check_storage, check_swap, check_updates, stateful_update)
from tenure.compile.signature import CallSignature
from tenure.linkers.interrupts import mark_committed
from tenure.linkers.profile import profile_function
from tenure.linkers.report import MemoryReport, memory_report
from tenure.linkers.table import LINKERS
from tenure.linkers.thunk import mark_update_steps
from tenure.linkers.timeline import Timeline
from tenure.printing import debugprint
from tenure.rewrites.destroy import DestroyHandler
from tenure.rewrites.engine import rewrite_graph
from tenure.rewrites.expand import expand_ops
from tenure.rewrites.remat import MemoryBudget
from tenure.symbolic.device import writeable
from tenure.symbolic.graph import Variable
from tenure.symbolic.inner_graph import OpWithInnerGraphs
from tenure.symbolic.shared import Container, SharedVariable, register_lender
from tenure.symbolic.types import is_same_memory


#: ``_own_default``'s default: the input's ``In(value=)``
_SPEC_VALUE = object()


class FunctionSpec(NamedTuple):
    """What a :class:`Function` was compiled from: :meth:`Function.copy` and
    unpickling compile it again from this (never from its runtime state)."""
    inputs: list
    outputs: list
    single_output: bool
    updates: list           # explicit and default updates, checked
    givens: object
    mode: Mode
    allow_input_downcast: bool | None
    name: str | None
    #: the keys of ``function(outputs={key: variable})``, in the outputs'
    #: order (sorted); None: the outputs were a variable or a list
    output_keys: tuple | None = None
    #: where it was compiled (``file:line``): its ``name`` when none was given
    location: str | None = None


class Function:
    """A compiled function.  Call it with positional or keyword arguments.

    Attributes: ``fgraph`` (the compiled graph), ``trust_input`` (skip the
    input gate: the caller promises arrays of exactly the right type),
    ``inputs`` / ``outputs`` (the In / Out specs), ``name``,
    ``shared_vars`` (the shared variables it reads or updates: the inputs of
    ``fgraph`` after the explicit ones) and ``update_shared_index`` (for
    each update, in the order of ``fgraph``'s outputs after the function's
    own, the position of its shared variable in ``shared_vars``).

    A function pickles (and ``copy.deepcopy`` copies it) on every linker:
    what is stored is the symbolic graph it was compiled from, with its mode
    and flags, and loading compiles it again (the C linker loads the module
    from its disk cache when it is there, without running the compiler).
    Shared variables pickled in the same ``pickle.dumps`` call stay
    connected to it.  Loading a pickle executes code (and compiles and
    loads native code): never unpickle untrusted data.
    """

    def __init__(self, inputs: list[In], outputs: list[Out], single_output: bool,
                 updates: list[tuple[SharedVariable, Variable]], givens, mode: Mode,
                 allow_input_downcast: bool | None, on_unused_input: str, name: str | None,
                 profile: bool = False, output_keys: tuple | None = None,
                 cells: dict | None = None, location: str | None = None):
        self._spec = FunctionSpec(list(inputs), list(outputs), single_output, list(updates),
                                  givens, mode, allow_input_downcast, name, output_keys,
                                  location)
        self.inputs = inputs
        self.outputs = outputs
        #: the name given (reports and errors name the function by it), else,
        #: as in PyTensor, where it was compiled (``location``: file:line)
        self.name = name if name is not None else location
        self.given_name = name
        self.mode = mode
        self.trust_input = False
        self.allow_input_downcast = allow_input_downcast
        self._single = single_output
        #: (see FunctionSpec.output_keys: a call returns a dict of them)
        self._output_keys = output_keys
        self._call_signature = CallSignature(inputs)
        self._gate = self._gate_rules()
        #: the stateful inputs (``In(update=)``), whose new values the graph
        #: computes as outputs after the function's own
        self._stateful = [i for i, spec in enumerate(inputs) if spec.update is not None]
        self._n_user_out = len(outputs)
        outputs = list(outputs) + [Out(stateful_update(spec)) for spec in inputs
                                   if spec.update is not None]
        self._n_out = len(outputs)
        self.fgraph, self.shared_vars, self.update_shared_index = build_graph(
            inputs, outputs, updates, givens, on_unused_input)
        check_stateful_values(inputs)
        self._containers = [v.container for v in self.shared_vars]
        self._update_containers = [var.container for var, _ in updates]
        #: each input's value cell (Theano's container: ``f.container[x]``),
        #: None for an input without a value; filled once the gate is known.
        #: ``cells``: ones to take as they are (a pickle's or a deep copy's)
        self._cells = [new_cell(spec) for spec in inputs]
        taken = dict(cells or {})
        for i, cell in taken.items():
            self._cells[i] = cell
        #: ``_lock`` is held for the whole of every call (one call at a time
        #: uses the compiled storage); then the locks of the shared variables'
        #: containers and of the cells another function may also write (a
        #: stateful input's, or one taken from another function)
        self._lock, self._shared_locks = call_locks(
            self._containers + [cell for spec, cell in zip(inputs, self._cells)
                                if spec.update is not None or isinstance(spec.value, Container)])
        self._locks = (self._lock,) + self._shared_locks
        self._guard_and_rewrite()
        self._take_aliasing(analyse_aliasing(self.fgraph, inputs, outputs,
                                             self.update_shared_index))
        # errors raised computing only an update say which (see step_note);
        # marked before the linker builds its thunk, which may rebuild the graph
        mark_update_steps(self.fgraph, self._n_out, [var for var, _ in updates])
        self._thunk = mode.make_thunk(self.fgraph, self._kept_outputs(), inputs, self._n_out)
        self._adopt_thunk()
        for i, (spec, cell) in enumerate(zip(inputs, self._cells)):
            if isinstance(spec.value, Container):
                self._check_taken_cell(spec)
            elif cell is not None and i not in taken:
                cell.value = self._own_default(spec)
        check_storage(self.shared_vars, self._thunk.runtime, mode.linker)
        #: the :class:`~tenure.linkers.profile.Profile` its calls accumulate
        #: into (``function(profile=True)``), or None
        self.profile = profile_function(self) if profile else None

    # -- compilation ----------------------------------------------------------
    def _guard_and_rewrite(self) -> None:
        """Expand the ops the linker has no kernel for (:mod:`tenure.rewrites.expand`),
        attach the DestroyHandler (refusing a graph that overwrites protected
        memory), then run the mode's rewrites under its watch."""
        fg = self.fgraph
        if LINKERS[self.mode.linker].expands_ops:
            expand_ops(fg)
        n_in = len(self.inputs)
        mutable = [var for var, spec in zip(fg.inputs[:n_in], self.inputs) if spec.mutable]
        updated = [self.shared_vars[j] for j in self.update_shared_index]
        fg.attach_feature(DestroyHandler(mutable=mutable, updated=updated))
        fg.validate()
        if self.mode.activation_memory_budget is not None:
            check_budget_can_free(self.mode.activation_memory_budget)
            fg.memory_budget = MemoryBudget(self.mode.activation_memory_budget,
                                            self.mode.activation_memory_budget_solver)
        #: the names of the rewrites that changed the graph, in order
        self.rewrites_applied = rewrite_graph(fg, self.mode.query)
        bind_inner_modes(fg, self.mode)

    def _take_aliasing(self, aliasing) -> None:
        """Keep what each call needs of the aliasing analysis as attributes
        (read on every call)."""
        self._aliasing = aliasing
        self._destroyed_inputs = aliasing.destroyed_inputs
        self._destroyed_shared = aliasing.destroyed_shared
        self._output_hazards = aliasing.output_hazards
        self._any_hazard = aliasing.any_hazard
        self._writable_inputs = aliasing.writable_inputs
        #: the borrowed outputs of constants: the copies this function lends
        self._lent_constants = {}

    def _kept_outputs(self) -> set[int]:
        """The borrowed outputs whose buffer the thunk may keep for the next call."""
        return {i for i, spec in enumerate(self.outputs)
                if spec.borrow and i not in self._aliasing.no_reuse}

    def _adopt_thunk(self) -> None:
        """Read what the thunk offers (see :mod:`tenure.linkers.thunk`)."""
        thunk = self._thunk
        if thunk.fresh_results:
            # The linker returns results that alias nothing (or lazy ones that
            # cannot be checked without computing them): nothing to copy.
            self._any_hazard = False
            self._writable_inputs = []
        #: the input gate (the linker's: its own kind of array, on its device)
        self._filter = thunk.filter_input
        #: the move of trusted arguments to where the thunk computes
        #: (``trust_input`` skips the gate, not the move)
        self._place = thunk.place_inputs
        n_in = len(self.inputs)
        thunk.set_call_layout(n_in, self._n_out, [n_in + j for j in self.update_shared_index])
        #: the compiled call path (C linker), or None: calls go through :meth:`_call`
        self._fast_call = self._make_fast_call()
        #: the thunk's loop driver (see :meth:`run_steps`): None until asked, False: none
        self._steps_runner = None
        if thunk.kept_slots:
            # Its borrowed outputs' buffers are written again next call: a
            # shared variable must copy them rather than adopt them.
            register_lender(self)

    def _allow_downcast(self, spec: In) -> bool | None:
        """Whether an argument for ``spec`` may be cast with loss: the input's
        own ``allow_downcast``, else the function's ``allow_input_downcast``
        (None: neither said, PyTensor's default rules)."""
        return self.allow_input_downcast if spec.allow_downcast is None else spec.allow_downcast

    def _gate_rules(self) -> list[tuple[bool, dict]]:
        """Each input's rules for the input gate, decided once (the Python
        call path reads them on every call): ``(allow_downcast, keywords)``,
        its own ``allow_downcast`` over the function's, and ``strict`` or
        what a refused cast advises."""
        rules = []
        for spec in self.inputs:
            if spec.strict:
                rules.append((False, {"strict": True}))
            elif spec.allow_downcast is False:  # the function's flag would not change it
                rules.append((False, {"downcast_hint": "drop allow_downcast=False from its In"}))
            else:
                rules.append((self._allow_downcast(spec), {}))
        return rules

    def _filter_argument(self, i: int, spec: In, value):
        """Argument ``i`` through the input gate, with its input's rules."""
        allow, keywords = self._gate[i]
        return self._filter(spec.variable.type, value, allow, f"input {self._input_label(i)}",
                            **keywords)

    def _check_taken_cell(self, spec: In) -> None:
        """A TypeError unless the value in the cell ``In(x, value=cell)`` took
        (another function's ``f.container[...]``) is already of this
        input's type: the functions share the cell, so it cannot be cast."""
        what = f"value of input {spec.name} (In(value=) a container)"
        try:
            self._filter(spec.variable.type, spec.value.value, False, what, strict=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{exc}; the functions sharing a container need one type") from None

    def _own_default(self, spec: In, given=_SPEC_VALUE):
        """The default value of ``spec`` (or ``given`` for it), as the
        function's own copy (a caller's array changed after compiling must
        not change the default)."""
        given = spec.value if given is _SPEC_VALUE else given
        what = f"default value of input {spec.name}"
        value = self._filter(spec.variable.type, given, self._allow_downcast(spec), what)
        return value.copy() if is_same_memory(value, given) else value

    def _make_fast_call(self, fallback=None):
        """The C call path (:mod:`tenure.linkers.c.call`) when every call of this
        function can take it: arguments the C gate accepts as they are need no
        conversion, and the call needs none of the Python path's extra work --
        no result that might have to be copied to keep the contract, no
        mutable input to separate from the others it overlaps or to copy
        when read-only (one the graph overwrites or an update adopts), and kept
        buffers only where the compiled code itself refuses to write into one
        that an argument overlaps.  Any other call falls back to :meth:`_call`.
        """
        if self._writable_inputs or self._any_hazard:
            return None
        if self._stateful or any(spec.implicit for spec in self.inputs):
            return None   # the C caller binds every input positionally and keeps no state
        if self._output_keys is not None:
            return None   # the C caller returns a list; the Python path makes the dict
        return make_fast_call(
            self._thunk, fallback=fallback or self._call, lock=self._lock,
            shared_locks=self._shared_locks,
            types=[spec.variable.type for spec in self.inputs],
            containers=self._containers, update_containers=self._update_containers,
            n_out=self._n_out, single=self._single,
            destroyed_containers=tuple(self._containers[j] for j in self._destroyed_shared),
            reentered=self._reentered)

    def run_steps(self, args: list, reads: tuple, writes: tuple, cond: int, first: int,
                  stop: int):
        """Calls ``first..stop-1`` of this function as a loop's step, with no
        Python between two calls (the protocol of
        :func:`tenure.symbolic.inner_graph.register_inner_compiler`), or None
        when they cannot be run that way: the loop then calls the function
        once per step.  Only a function whose every call can take the C call
        path, and that reads no shared variable, has a runner."""
        runner = self._steps_runner
        if runner is None:
            runner = False
            if self._fast_call is not None and not self._shared_locks:
                types = [spec.variable.type for spec in self.inputs]
                runner = self._thunk.steps_runner(types, self._lock) or False
            self._steps_runner = runner
        if not runner:
            return None
        return runner(args, reads, writes, cond, first, stop)

    # -- calling ----------------------------------------------------------------
    def _bind(self, args, kwargs) -> tuple[list, list[bool]]:
        """Arguments in input order; also which ones came from a default value."""
        return self._call_signature.bind(args, kwargs, self._cells, self._label)

    def __call__(self, *args, **kwargs):
        fast = self._fast_call
        if fast is not None:
            return fast(*args, **kwargs)
        return self._call(*args, **kwargs)

    def _call(self, *args, **kwargs):
        """A call through Python: binding, the input gate, the contract's copies,
        as one transaction (see :mod:`tenure.compile.calls`)."""
        if self._lock._is_owned():
            raise self._reentered("call")
        if not self._shared_locks:
            # No shared variable, so no update and no commit point: only the
            # function's own buffers to guard.
            with self._lock:
                return self._call_holding_locks(args, kwargs)
        return run_transaction(self._locks, bool(self._update_containers),
                               lambda: self._call_holding_locks(args, kwargs))

    def _call_holding_locks(self, args, kwargs):
        if self.trust_input and not kwargs and len(args) == len(self.inputs):
            values, from_default = self._place(list(args)), None
        else:
            values, from_default = self._bind(args, kwargs)
            for i, spec in enumerate(self.inputs):
                if not from_default[i]:
                    values[i] = self._filter_argument(i, spec, values[i])
        if from_default is not None and any(from_default):
            # A default is the function's own data: never hand it out to be written.
            values = [v.copy() if d and self.inputs[i].mutable else v
                      for i, (v, d) in enumerate(zip(values, from_default))]
        for i in self._writable_inputs:
            if not writeable(values[i]):
                values[i] = values[i].copy()
        shared_values = [c.value for c in self._containers]
        if self._destroyed_shared:
            copy_inputs_over_destroyed_shared(self._aliasing, values, shared_values)
        if self._destroyed_inputs:
            separate_destroyed_inputs(self._aliasing, values, shared_values)
        if self._thunk.kept_slots:
            self._release_kept_aliasing(values, shared_values)
        results = self._thunk(values + shared_values)
        if self._update_containers:
            # From here to the last assignment the call must complete (the
            # thunk marked this already if it wrote shared storage in place).
            mark_committed()
        outputs, updates = results[:self._n_out], results[self._n_out:]
        if self._any_hazard:
            copy_where_needed(self._aliasing, self.update_shared_index, outputs, updates,
                              values, shared_values, from_default, self._lent_constants)
        for container, value in zip(self._update_containers, updates):
            container.value = value
        if self._stateful:
            # The stateful inputs' new values (fresh arrays: Out(borrow=False))
            # become their values for the next call.
            for i, value in zip(self._stateful, outputs[self._n_user_out:]):
                self._cells[i].value = value
            outputs = outputs[:self._n_user_out]
        if self._single:
            return outputs[0]
        if self._output_keys is not None:
            return dict(zip(self._output_keys, outputs))
        return outputs

    # -- inputs' values (Theano's containers) ------------------------------------------
    def __getitem__(self, key):
        """The value input ``key`` (its name, variable or In) takes when a
        call does not pass it (its ``In(value=)``, or a stateful input's
        value now)."""
        return self._cells[self._input_with_value(key)].value

    def __setitem__(self, key, value) -> None:
        """Set the value input ``key`` (its name, variable or In) takes when
        a call does not pass it (through the input's gate: its dtype,
        ``strict`` and ``allow_downcast``)."""
        i = self._input_with_value(key)
        own = self._own_default(self.inputs[i], value)
        cell = self._cells[i]
        with self._lock, cell.lock:
            cell.value = own

    @property
    def container(self) -> "InputContainers":
        """``f.container[key]``: the cell holding input ``key``'s value (its
        name, variable or In), Theano's container: ``In(y, value=cell)`` in
        another function shares it, so that a stateful input's update in
        one is the value in both.  A shared variable gives its own."""
        return InputContainers(self)

    @property
    def value(self) -> "InputValues":
        """``f.value[name]``: the same as ``f[name]`` (PyTensor's spelling)."""
        return InputValues(self)

    def _input_with_value(self, key) -> int:
        """The position of the input ``key`` names (a name, the input's
        variable or its In), which must have a value."""
        if isinstance(key, str):
            matches = [i for i, spec in enumerate(self.inputs) if spec.name == key]
        else:
            matches = [i for i, spec in enumerate(self.inputs)
                       if key is spec or key is spec.variable]
        name = key if isinstance(key, str) else str(key)
        if not matches:
            names = [spec.name for spec in self.inputs if spec.name is not None]
            raise KeyError(f"{self._label()} has no input {name!r} (its inputs: {names})")
        if len(matches) > 1:
            raise KeyError(f"{self._label()}: several inputs are named {name!r}")
        (i,) = matches
        if self._cells[i] is None:
            raise KeyError(f"{self._label()}: input {name!r} has no value of its own: it is "
                           f"passed in each call (In({name}, value=...) gives it one)")
        return i

    def _reentered(self, what: str):
        """The error for a call (or report) made inside a running call of this
        function, in the same thread (from one of its steps)."""
        return reentered_error(f"{self._label()} {self._signature()}", what)

    def _release_kept_aliasing(self, values, shared_values) -> None:
        """Stop reusing a kept output buffer that the caller passed back in (or
        made shared storage): the next result must not be written over it."""
        for slot, buf in self._thunk.kept_buffers():
            if any(np.may_share_memory(buf, v) for v in values + shared_values):
                self._thunk.drop_kept(slot)

    # -- copying and pickling ----------------------------------------------------
    def copy(self, share_memory: bool = False, swap=None, delete_updates: bool = False,
             name: str | None = None) -> Function:
        """A new function computing the same, compiled again from the same graph.

        It uses the same shared variables unless ``swap`` (``{old: new}``, both
        shared variables of the same type, ``old`` one this function uses)
        replaces them: the copy reads and updates ``new`` where this one reads
        and updates ``old``.  ``delete_updates=True``: the copy has no updates
        (explicit or default) and writes no shared variable.  ``name``: the
        copy's name (default: this one's with ``" copy"`` added).  The copy
        keeps ``trust_input``.  ``share_memory`` is accepted for PyTensor's
        sake and has no effect: a copy always has its own intermediate and
        output storage, so that a call of one never overwrites what the
        other returned or is computing.
        """
        if not isinstance(share_memory, (bool, np.bool_)):
            raise TypeError(f"{self._label()}.copy(): share_memory must be a bool, got "
                            f"{type(share_memory).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{self._label()}.copy(): name must be a string or None, got "
                            f"{type(name).__name__} {name!r}")
        spec = self._spec
        out_vars = [o.variable for o in spec.outputs]
        updates = [] if delete_updates else list(spec.updates)
        givens = spec.givens
        if swap:
            swap = check_swap(swap, self.shared_vars, self._label())
            out_vars, updates = apply_swap(out_vars, updates, givens,
                                           [i.variable for i in spec.inputs], swap)
            givens = None   # applied by apply_swap
        outputs = [o if o.variable is v else Out(v, borrow=o.borrow)
                   for o, v in zip(spec.outputs, out_vars)]
        if name is None and self.given_name:
            name = self.given_name + " copy"
        copied = Function(list(spec.inputs), outputs, spec.single_output,
                          check_updates(updates), givens, spec.mode,
                          spec.allow_input_downcast, "ignore", name,
                          output_keys=spec.output_keys, location=spec.location)
        copied.trust_input = self.trust_input
        copied._take_values(self._values_now())   # the values now, as Theano's copy has
        return copied

    def __copy__(self) -> Function:
        return self.copy()

    def __reduce__(self):
        # The symbolic specs, the mode and the flags: never the compiled state
        # (thunks, C modules, buffers, locks), which loading builds again.
        # The cells themselves: functions pickled (or deep-copied with one
        # memo) together keep sharing the cells they shared.
        cells = {i: cell for i, cell in enumerate(self._cells) if cell is not None}
        return (restore_function, (self._spec, self.trust_input, cells))

    def _values_now(self) -> dict:
        """The inputs' values now (their ``In(value=)``, or what ``f[name] =``
        or a stateful input's update made them), by position."""
        return {i: cell.value for i, cell in enumerate(self._cells) if cell is not None}

    def _take_values(self, values: dict) -> None:
        """Take ``values`` (:meth:`_values_now` of a function compiled from
        the same spec) as the inputs' values, as copies."""
        for i, value in values.items():
            self._cells[i].value = value.copy()

    # -- buffers and reports ------------------------------------------------------
    def dprint(self, **kwargs):
        """Print the compiled graph: :func:`tenure.printing.debugprint` of this
        function (same keywords)."""
        return debugprint(self, **kwargs)

    def free(self) -> None:
        """Release the buffers this function keeps between calls (borrowed outputs)."""
        with self._lock:   # not while a call or a report uses them
            self._thunk.free()

    def lent_buffers(self) -> list:
        """The buffers this function lends as borrowed outputs and will write
        again next call (read by :func:`~tenure.symbolic.shared.shared` and
        ``set_value``, which copy a value overlapping one instead of adopting it)."""
        return [buf for _, buf in self._thunk.kept_buffers()]

    def memory_report(self, *args, print_report: bool = False, **kwargs) -> MemoryReport:
        """Run the function on these arguments and report its memory, node by node.

        Returns (and with ``print_report=True`` also prints) a
        :class:`~tenure.linkers.report.MemoryReport`: for every output of every
        step (in schedule order) its shape, dtype, bytes and whether its buffer
        is new, a view or an in-place write of an input, or reused (the dead
        buffer of an earlier variable, named, or last call's); then the peak
        the plan predicts for these input shapes, the measured peak
        (tracemalloc) and the bytes held between calls.  The runs use private
        copies of the arguments and of shared values and assign no updates:
        nothing visible changes.  ``print(f.memory_report(...))`` prints the
        table (once).
        """
        values, _ = self._bind(args, kwargs)
        values = [self._filter_argument(i, spec, v)
                  for i, (spec, v) in enumerate(zip(self.inputs, values))]
        # The report runs the thunk: as a call, never beside another call's run.
        if self._lock._is_owned():
            raise self._reentered("memory report")
        with holding(self._locks):
            report = memory_report(self, values + [c.value for c in self._containers])
        if print_report:
            print(report)
        return report

    def memory_timeline(self, *args, **kwargs) -> Timeline:
        """Run the function on these arguments (as :meth:`memory_report` does:
        nothing visible changes) and return its memory timeline: every buffer
        as a band over the schedule, coloured by how it is held (see
        :mod:`tenure.linkers.timeline`).  :func:`tenure.plot_memory` and
        :func:`tenure.memory_html` draw it."""
        report = self.memory_report(*args, print_report=False, **kwargs)
        input_kinds = ["borrowed input" if spec.borrow else "input" for spec in self.inputs]
        input_kinds += ["shared variable"] * len(self._containers)
        output_kinds = ["lent output" if spec.borrow else "output" for spec in self.outputs]
        output_kinds += [""] * (len(self.fgraph.outputs) - len(output_kinds))
        return report.timeline(input_kinds, output_kinds, self.given_name or "")

    # -- naming -------------------------------------------------------------
    def _label(self) -> str:
        return f"function {self.given_name!r}" if self.given_name else "function"

    def _input_label(self, i: int) -> str:
        return self._call_signature.input_label(i)

    def _signature(self) -> str:
        return self._call_signature.text

    def __repr__(self):
        return f"<Function {self.given_name or ''}{self._signature()} mode={self.mode}>"


def bind_inner_modes(fgraph, mode: Mode) -> None:
    """Give every op of ``fgraph`` that holds inner graphs (a loop) the mode
    they compile with, ``mode.inner_mode(on_device=op.state_on_device)``.
    The nodes are this function's own (:func:`build_graph` copied the user's
    graph): each gets a copy of its op, and the user's graph keeps the op it
    had."""
    inner = {}
    for node in fgraph.apply_nodes:
        if isinstance(node.op, OpWithInnerGraphs):
            on_device = node.op.state_on_device
            if on_device not in inner:
                inner[on_device] = mode.inner_mode(on_device=on_device)
            node.op = node.op.with_inner_mode(inner[on_device])


def restore_function(spec: FunctionSpec, trust_input: bool, values: dict | None = None
                     ) -> Function:
    """A pickled :class:`Function`, compiled again, with its inputs' values
    (see :meth:`Function.__reduce__`; pickles from before they were kept
    have none)."""
    values = values or {}
    # Cells as they are (what a pickle or a deep copy made of the function's:
    # shared cells stay shared); arrays, from pickles made before cells were
    # kept, as values.
    cells = {i: v for i, v in values.items() if isinstance(v, Container)}
    f = Function(list(spec.inputs), list(spec.outputs), spec.single_output, list(spec.updates),
                 spec.givens, spec.mode, spec.allow_input_downcast, "ignore", spec.name,
                 output_keys=spec.output_keys, cells=cells, location=spec.location)
    f.trust_input = trust_input
    f._take_values({i: v for i, v in values.items() if i not in cells})
    return f


def new_cell(spec: In) -> Container | None:
    """The cell of ``spec``'s value: the container it was given
    (``In(x, value=f.container[y])``, shared with that function), a new one
    for a value (filled by the function, through its gate), or None."""
    if isinstance(spec.value, Container):
        return spec.value
    return None if spec.value is None else Container(None)


class InputContainers:
    """``f.container``: the cells of the inputs' values by name, variable or
    In (Theano's containers); a shared variable's container by the
    variable."""

    def __init__(self, function: Function):
        self._function = function

    def __getitem__(self, key) -> Container:
        f = self._function
        if isinstance(key, SharedVariable) and key in f.shared_vars:
            return key.container
        return f._cells[f._input_with_value(key)]


class InputValues:
    """``f.value``: the inputs' values by name, read and written as
    ``f[name]`` (PyTensor's ``f.value[name]``)."""

    def __init__(self, function: Function):
        self._function = function

    def __getitem__(self, name: str):
        return self._function[name]

    def __setitem__(self, name: str, value) -> None:
        self._function[name] = value

    def __repr__(self):
        f = self._function
        return repr({spec.name: cell.value for spec, cell in zip(f.inputs, f._cells)
                     if cell is not None})
