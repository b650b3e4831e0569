"""``function``: compile a graph into a callable that keeps the memory contract.

The pieces: :class:`In` and :class:`Out` say how each input and output may be
aliased, :class:`Mode` chooses the linker, and :class:`Function` is what the
user calls.  Compilation clones the graph into a
:class:`~tenure.rewrites.fgraph.FunctionGraph` (inputs first, then the shared
variables it reads), hands it to the linker, and works out once which results
could alias memory they must not; each call then copies exactly those that do.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from tenure import config
from tenure.linkers.interrupts import begin_call, end_call, mark_committed
from tenure.linkers.report import MemoryReport, memory_report
from tenure.linkers.timeline import Timeline
from tenure.rewrites.destroy import DestroyHandler, buffer_roots, destroyers
from tenure.rewrites.fgraph import FunctionGraph
from tenure.symbolic.device import cuda_runtime, runtime_of, writeable
from tenure.symbolic.graph import Constant, Variable, ancestors, clone_get_equiv
from tenure.symbolic.shared import SharedVariable, register_lender
from tenure.symbolic.ops.shape import specify_shape
from tenure.symbolic.types import TensorType, is_same_memory


class UnusedInputError(ValueError):
    """An input of ``function`` is not needed by any output or update."""


class ReentrantCallError(RuntimeError):
    """A function was called (or reported on) from inside one of its own
    calls, in the same thread: the running call owns its buffers, so the
    inner one is refused before it changes anything."""


class In:
    """How a function treats one input.

    ``borrow=True``: outputs may alias the caller's array (no defensive copy).
    ``mutable=True``: the caller gives the buffer away; tenure may overwrite
    it as workspace.  ``borrow`` defaults to ``mutable`` (as in PyTensor), and
    ``mutable=True, borrow=False`` is a ValueError.  ``value``: the default used when
    the argument is not given.  ``name``: the keyword to pass it by (defaults
    to the variable's name).  ``chunks``: for the dask linker only, how a
    NumPy argument is cut into chunks (anything ``dask.array.from_array``
    takes: ``"auto"`` when not given); a Dask array argument keeps its own.
    """

    def __init__(self, variable: Variable, name: str | None = None, value=None,
                 borrow: bool | None = None, mutable: bool = False, chunks=None):
        if not isinstance(variable, Variable):
            raise TypeError(f"In(): expected a symbolic variable, got "
                            f"{type(variable).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"In({variable}): name must be a string (the keyword to pass the "
                            f"input by) or None, got {type(name).__name__} {name!r}")
        if borrow is None:  # as in PyTensor: a buffer given away is necessarily lent
            borrow = mutable
        if mutable and not borrow:
            raise ValueError(f"In({variable}): mutable=True requires borrow=True (a buffer "
                             "tenure may overwrite is necessarily lent to it)")
        self.variable = variable
        self.name = name if name is not None else variable.name
        self.value = value
        self.borrow = bool(borrow)
        self.mutable = bool(mutable)
        self.chunks = chunks

    def __repr__(self):
        chunks = "" if self.chunks is None else f", chunks={self.chunks!r}"
        return (f"In({self.variable}, name={self.name!r}, borrow={self.borrow}, "
                f"mutable={self.mutable}{chunks})")


class Out:
    """How a function returns one output.

    ``borrow=False`` (default): a fresh array the caller owns.  ``borrow=True``:
    possibly an internal buffer that the next call overwrites (and that may
    alias shared storage or borrowed inputs); in steady state it costs no
    allocation per call.
    """

    def __init__(self, variable: Variable, borrow: bool = False):
        if not isinstance(variable, Variable):
            raise TypeError(f"Out(): expected a symbolic variable, got "
                            f"{type(variable).__name__}")
        self.variable = variable
        self.borrow = bool(borrow)

    def __repr__(self):
        return f"Out({self.variable}, borrow={self.borrow})"


class Mode:
    """How to compile: which rewrites run and which linker runs the result.

    ``linker``: ``"py"`` (the NumPy executor), ``"c"`` (the whole graph
    compiled into one C extension module: see :mod:`tenure.linkers.c.linker`;
    the NumPy executor, with a warning, where no C compiler works) or
    ``"check"`` (the NumPy executor checking every node: see
    :mod:`tenure.linkers.check`) or ``"dask"`` (calls build Dask graphs whose
    tasks run tenure kernels per chunk: see :mod:`tenure.linkers.dask`; needs
    the ``[dask]`` extra) or ``"cuda_emulated"`` (the CUDA linker's generated
    kernels run on the CPU under host emulation, for testing and debugging
    them without a GPU: see :mod:`tenure.linkers.cuda.linker`) or ``"cuda"``
    (the graph computed on the GPU: device arrays in and out, device shared
    variables, generated kernels: see :mod:`tenure.linkers.cuda.device_linker`;
    :class:`~tenure.symbolic.device.CudaUnavailable` without CuPy or a device,
    unless ``config.cuda_emulation`` runs it on the emulated device); ``None``
    means ``config.linker``.  For the dask linker only: ``compute=True``
    returns NumPy outputs (computed in the call)
    instead of Dask arrays, and ``chunk_linker`` (``"c"`` or ``"py"``)
    compiles the per-chunk kernels.  ``include`` / ``exclude``: rewrite names or tags
    to add to / remove from the selection, e.g. ``Mode(exclude=["fusion"])``
    to compile without fusion.  ``rewrites``: ``"default"`` (every safe
    rewrite), ``"fast_compile"`` (only what is needed to run: none today) or
    ``"none"``.

    ``activation_memory_budget``: keep at most this much of the forward
    values a gradient graph saves for its backward pass, and recompute the
    rest (see :mod:`tenure.rewrites.remat`): a float in [0, 1] is a fraction
    of their bytes (1.0 keeps them all, 0.0 as few as possible), an int is a
    number of bytes (which needs the inputs' shapes to be static).  ``None``
    (the default): no budget.  ``activation_memory_budget_solver``: how to
    choose what to keep, one of ``"greedy"``, ``"ilp"``, ``"dp"``,
    ``"dp_sliding_hirschberg"`` (the names PyTorch uses).  The default,
    ``"dp"``, is PyTorch's default too: exact, and fast for the tens of
    saved values a training step has.  The budget is applied by the
    ``remat`` rewrite; ``exclude=["remat"]`` or ``rewrites="none"`` turn it off.
    It needs ``config.allow_gc`` (the default): compiling with a budget and
    ``allow_gc`` off is a ``ValueError``, since nothing would be freed.
    """

    PRESETS = ("default", "fast_compile", "none")
    #: linkers a mode may name besides ``config.LINKERS`` (never the default)
    EXTRA_LINKERS = ("check", "dask", "cuda", "cuda_emulated")

    def __init__(self, linker: str | None = None, include=(), exclude=(),
                 rewrites: str = "default", activation_memory_budget=None,
                 activation_memory_budget_solver: str = "dp", compute: bool = False,
                 chunk_linker: str = "c"):
        from tenure.rewrites.engine import Query
        self.linker = config.linker if linker is None else linker
        if self.linker not in config.LINKERS + self.EXTRA_LINKERS:
            raise ValueError(f"Mode: unknown linker {self.linker!r}; expected one of "
                             f"{', '.join(config.LINKERS + self.EXTRA_LINKERS)}")
        #: for the cuda linker: whether it runs on the emulated device (the
        #: flag when the mode was made: its functions keep to one device)
        self.cuda_emulation = self.linker == "cuda" and config.cuda_emulation
        if self.linker == "cuda":
            # CudaUnavailable now, naming what is missing (CuPy, a device)
            cuda_runtime(self.cuda_emulation)
        self.compute, self.chunk_linker = _check_dask_options(self.linker, compute, chunk_linker)
        if self.linker == "dask":
            # A chunk Dask holds may be read by other tasks: nothing is overwritten.
            exclude = tuple(exclude) + ("inplace",)
        if rewrites not in self.PRESETS:
            raise ValueError(f"Mode: rewrites must be one of {', '.join(self.PRESETS)}, got "
                             f"{rewrites!r}")
        for what, names in (("include", include), ("exclude", exclude)):
            if isinstance(names, str):
                raise TypeError(f"Mode: {what} must be a list of names, got the string "
                                f"{names!r} (write [{names!r}])")
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.rewrites = rewrites
        # "fast_compile" runs what is tagged for it; "none" only what `include` names.
        included = set(self.include) | ({"fast_compile"} if rewrites == "fast_compile" else set())
        self.query = Query(frozenset(included), frozenset(self.exclude),
                           only_included=rewrites != "default")
        self.query.check_names()
        self.activation_memory_budget = _check_budget(activation_memory_budget)
        self.activation_memory_budget_solver = _check_solver(activation_memory_budget_solver)

    def make_linker(self):
        if self.linker == "check":
            from tenure.linkers.check import CheckLinker
            return CheckLinker()
        if self.linker == "c":
            from tenure.linkers.c.linker import CLinker
            return CLinker()
        if self.linker == "dask":
            try:
                from tenure.linkers.dask.linker import DaskLinker
            except ImportError as exc:
                raise ImportError(f"Mode(linker='dask') needs Dask, which is not installed "
                                  f"({exc}); pip install 'tenure[dask]'") from exc
            return DaskLinker(compute=self.compute, chunk_linker=self.chunk_linker)
        if self.linker == "cuda_emulated":
            from tenure.linkers.cuda.linker import EmulatedCudaLinker
            return EmulatedCudaLinker()
        if self.linker == "cuda":
            from tenure.linkers.cuda.device_linker import CudaLinker
            return CudaLinker(emulated=self.cuda_emulation)
        from tenure.linkers.python import PythonLinker
        return PythonLinker()

    def __repr__(self):
        parts = [f"linker={self.linker!r}"]
        if self.include:
            parts.append(f"include={list(self.include)!r}")
        if self.exclude:
            parts.append(f"exclude={list(self.exclude)!r}")
        if self.rewrites != "default":
            parts.append(f"rewrites={self.rewrites!r}")
        if self.activation_memory_budget is not None:
            parts.append(f"activation_memory_budget={self.activation_memory_budget!r}")
        if self.activation_memory_budget_solver != "dp":
            parts.append(f"activation_memory_budget_solver="
                         f"{self.activation_memory_budget_solver!r}")
        if self.compute:
            parts.append("compute=True")
        if self.chunk_linker != "c":
            parts.append(f"chunk_linker={self.chunk_linker!r}")
        return f"Mode({', '.join(parts)})"


def _check_dask_options(linker: str, compute, chunk_linker) -> tuple[bool, str]:
    """``(compute, chunk_linker)``, checked: they mean something to the dask linker only."""
    if not isinstance(compute, (bool, np.bool_)):
        raise TypeError(f"Mode: compute must be a bool, got {type(compute).__name__} "
                        f"{compute!r}")
    if chunk_linker not in ("c", "py"):
        raise ValueError(f"Mode: chunk_linker must be 'c' or 'py', got {chunk_linker!r}")
    if linker != "dask" and (compute or chunk_linker != "c"):
        raise ValueError(f"Mode: compute= and chunk_linker= are options of the dask linker; "
                         f"this mode's linker is {linker!r}")
    return bool(compute), chunk_linker


def _check_budget_can_free(budget) -> None:
    """A budget lowers the peak by freeing saved activations and computing them
    again; with ``allow_gc`` off nothing is freed (every intermediate stays
    between calls), so the budget could only add work: refuse it."""
    if not config.allow_gc:
        raise ValueError(f"Mode: activation_memory_budget={budget!r} needs "
                         f"config.allow_gc=True; with allow_gc off every intermediate "
                         f"stays between calls, so recomputing cannot lower the peak "
                         f"(turn allow_gc on, or drop the budget)")


def _check_budget(budget):
    """``activation_memory_budget`` as a float fraction, an int byte count or None."""
    import numbers
    if budget is None:
        return None
    if isinstance(budget, (bool, np.bool_)) or not isinstance(budget, numbers.Real):
        raise TypeError(f"Mode: activation_memory_budget must be None, a fraction (a float "
                        f"in [0, 1]) or a number of bytes (an int >= 0), got "
                        f"{type(budget).__name__} {budget!r}")
    if isinstance(budget, numbers.Integral):
        if budget < 0:
            raise ValueError(f"Mode: activation_memory_budget as a number of bytes must be "
                             f">= 0, got {budget!r}")
        return int(budget)
    budget = float(budget)
    if not 0.0 <= budget <= 1.0:  # NaN fails too
        raise ValueError(f"Mode: activation_memory_budget as a fraction must be in [0, 1], "
                         f"got {budget!r} (for a number of bytes, pass an int)")
    return budget


def _check_solver(solver):
    from tenure.rewrites.knapsack import SOLVERS
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"Mode: unknown activation_memory_budget_solver {solver!r}; expected "
                         f"one of {', '.join(map(repr, SOLVERS))}")
    return solver


def _as_mode(mode) -> Mode:
    if mode is None:
        return Mode()
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, str):
        if mode in Mode.PRESETS:
            return Mode(rewrites=mode)
        return Mode(linker=mode)
    raise TypeError(f"mode: expected a Mode, a linker name or None, got {type(mode).__name__}")


# ----------------------------------------------------------------------------
# Compile-time analysis of what may alias what


@dataclass
class _Hazards:
    """What one result (output or update value) may alias, decided at compile
    time; each call then checks only these with ``np.may_share_memory``."""
    inputs: list[int] = field(default_factory=list)     # explicit inputs, always checked
    defaults: list[int] = field(default_factory=list)   # explicit inputs, checked when defaulted
    shared: list[int] = field(default_factory=list)     # shared variables
    constant: bool = False                              # a constant's data
    outputs: list[int] = field(default_factory=list)    # other outputs
    updates: list[int] = field(default_factory=list)    # other update values

    def __bool__(self):
        return bool(self.inputs or self.defaults or self.shared or self.constant
                    or self.outputs or self.updates)


class _Spec(NamedTuple):
    """What a :class:`Function` was compiled from: :meth:`Function.copy` and
    unpickling compile it again from this (never from its runtime state)."""
    inputs: list
    outputs: list
    single_output: bool
    updates: list           # explicit and default updates, checked
    givens: object
    mode: Mode
    allow_input_downcast: bool
    name: str | None


class Function:
    """A compiled function.  Call it with positional or keyword arguments.

    Attributes: ``fgraph`` (the compiled graph), ``trust_input`` (skip the
    input gate: the caller promises arrays of exactly the right type),
    ``inputs`` / ``outputs`` (the In / Out specs), ``name``.

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
                 allow_input_downcast: bool, on_unused_input: str, name: str | None):
        self._spec = _Spec(list(inputs), list(outputs), single_output, list(updates), givens,
                           mode, allow_input_downcast, name)
        self.inputs = inputs
        self.outputs = outputs
        self.name = name
        self.mode = mode
        self.trust_input = False
        self.allow_input_downcast = allow_input_downcast
        self._single = single_output
        self._build_graph(givens, on_unused_input, updates)
        #: held for the whole of every call: one call at a time uses the
        #: compiled function's storage
        self._lock = threading.RLock()
        # The shared variables' locks, in the one global order (see Container).
        self._shared_locks = tuple(c.lock for c in sorted(
            {id(c): c for c in self._containers}.values(), key=lambda c: c.serial))
        self._locks = (self._lock,) + self._shared_locks
        self._guard_and_rewrite()
        self._analyse_aliasing()
        keep = {i for i, spec in enumerate(self.outputs)
                if spec.borrow and i not in self._no_reuse}
        self._thunk = self._make_thunk(mode.make_linker(), keep)
        if getattr(self._thunk, "fresh_results", False):
            # The linker returns results that alias nothing (or lazy ones that
            # cannot be checked without computing them): nothing to copy.
            self._any_hazard = False
            self._writable_inputs = []
        #: the linker's input gate where it takes arrays of its own kind (a
        #: Dask array), else None: each input's type filters it
        self._filter = getattr(self._thunk, "filter_input", None)
        #: where the linker keeps its values elsewhere (a device), the move of
        #: trusted arguments there (``trust_input`` skips the gate, not the move)
        self._place = getattr(self._thunk, "place_inputs", None)
        #: the compiled call path (C linker), or None: calls go through :meth:`_call`
        self._fast_call = self._make_fast_call()
        if self._thunk.kept_slots:
            # Its borrowed outputs' buffers are written again next call: a
            # shared variable must copy them rather than adopt them.
            register_lender(self)
        self._defaults = [None if spec.value is None else self._own_default(spec)
                          for spec in inputs]
        _check_storage(self.shared_vars, getattr(self._thunk, "runtime", None), mode.linker)
        names = [spec.name for spec in inputs]
        self._index_of_name = {n: i for i, n in enumerate(names) if n is not None
                               and names.count(n) == 1}
        self._ambiguous_names = {n for n in names if n is not None and names.count(n) > 1}

    # -- compilation ----------------------------------------------------------
    def _make_thunk(self, linker, keep: set[int]):
        """The linker's thunk; a linker that reads the ``In`` specs (its
        ``takes_input_specs``: the dask linker's chunks, borrow and mutable
        flags) gets them and the number of outputs (the rest are updates)."""
        if getattr(linker, "takes_input_specs", False):
            return linker.make_thunk(self.fgraph, keep, allow_gc=config.allow_gc,
                                     input_specs=self.inputs, n_outputs=self._n_out)
        chunked = [spec.name or str(spec.variable) for spec in self.inputs
                   if spec.chunks is not None]
        if chunked:
            raise ValueError(f"In(chunks=...) is a hint for the dask linker; this function's "
                             f"linker is {linker.name!r} (inputs with chunks: "
                             f"{', '.join(chunked)})")
        return linker.make_thunk(self.fgraph, keep, allow_gc=config.allow_gc)

    def _own_default(self, spec: In) -> np.ndarray:
        """The default value of ``spec``, as the function's own copy (a caller's
        array changed after compiling must not change the default)."""
        what = f"default value of input {spec.name}"
        if self._filter is not None:    # the linker's own kind of array (on its device)
            value = self._filter(spec.variable.type, spec.value, self.allow_input_downcast, what)
        else:
            value = spec.variable.type.filter(spec.value,
                                              allow_downcast=self.allow_input_downcast, what=what)
        return value.copy() if is_same_memory(value, spec.value) else value

    def _build_graph(self, givens, on_unused_input, updates) -> None:
        in_vars = [spec.variable for spec in self.inputs]
        out_vars = [spec.variable for spec in self.outputs]
        upd_vars = [expr for _, expr in updates]
        targets = out_vars + upd_vars
        if givens:
            targets = _apply_givens(targets, givens, in_vars)
        # Every shared variable the outputs read becomes an implicit input.
        shared_vars = [v for v in ancestors(targets, blockers=in_vars)
                       if isinstance(v, SharedVariable) and v not in in_vars]
        for var, _ in updates:
            if var not in shared_vars:
                shared_vars.append(var)
        _check_missing(targets, in_vars)
        _check_unused(self.inputs, targets, on_unused_input)
        equiv = clone_get_equiv(in_vars, targets,
                                replace={v: v for v in shared_vars}, copy_inputs=True)
        self.shared_vars = shared_vars
        self._containers = [v.container for v in shared_vars]
        self._update_containers = [var.container for var, _ in updates]
        self._update_shared_index = [shared_vars.index(var) for var, _ in updates]
        self.fgraph = FunctionGraph([equiv[v] for v in in_vars] + shared_vars,
                                    [equiv.get(v, v) for v in targets])
        self._n_out = len(out_vars)

    def _guard_and_rewrite(self) -> None:
        """Attach the DestroyHandler (refusing a graph that overwrites protected
        memory), then run the mode's rewrites under its watch."""
        from tenure.rewrites.engine import rewrite_graph
        fg = self.fgraph
        n_in = len(self.inputs)
        mutable = [var for var, spec in zip(fg.inputs[:n_in], self.inputs) if spec.mutable]
        updated = [self.shared_vars[j] for j in self._update_shared_index]
        fg.attach_feature(DestroyHandler(mutable=mutable, updated=updated))
        fg.validate()
        if self.mode.activation_memory_budget is not None:
            _check_budget_can_free(self.mode.activation_memory_budget)
            from tenure.rewrites.remat import MemoryBudget
            fg.memory_budget = MemoryBudget(self.mode.activation_memory_budget,
                                            self.mode.activation_memory_budget_solver)
        #: the names of the rewrites that changed the graph, in order
        self.rewrites_applied = rewrite_graph(fg, self.mode.query)

    def _analyse_aliasing(self) -> None:
        fg = self.fgraph
        n_in = len(self.inputs)
        explicit = {var: i for i, var in enumerate(fg.inputs[:n_in])}
        shared = {var: i for i, var in enumerate(fg.inputs[n_in:])}
        root_of = buffer_roots(fg.toposort(), fg.inputs)
        roots = [root_of.get(v, v) for v in fg.outputs]
        out_roots, upd_roots = roots[:self._n_out], roots[self._n_out:]
        # Mutable inputs that the graph overwrites: copied at call time when they
        # overlap any other argument, so writing one never changes another.
        destroyed = {root_of.get(v, v) for v in destroyers(fg.apply_nodes)}
        self._destroyed_inputs = [i for var, i in explicit.items() if var in destroyed]
        #: shared variables whose storage the graph overwrites (an update in
        #: place): an argument overlapping one is copied first (see
        #: :meth:`_copy_inputs_over_destroyed_shared`)
        self._destroyed_shared = [j for var, j in shared.items() if var in destroyed]

        def hazards(root: Variable, k: int, is_update: bool) -> _Hazards:
            h = _Hazards()
            if root in explicit:
                i = explicit[root]
                spec = self.inputs[i]
                # Outputs may alias borrowed inputs; shared storage may only adopt
                # a buffer the caller gave away (mutable).  A default value is the
                # function's own and is never handed out.
                if not (spec.mutable if is_update else spec.borrow):
                    h.inputs.append(i)
                elif spec.value is not None:
                    h.defaults.append(i)
            elif root in shared:
                j = shared[root]
                if is_update:
                    if self._update_shared_index[k] != j:
                        h.shared.append(j)
                elif not self.outputs[k].borrow:
                    h.shared.append(j)
            elif isinstance(root, Constant):
                h.constant = is_update or not self.outputs[k].borrow
            if is_update:
                h.updates = [u for u in range(k) if upd_roots[u] is root]
            elif not self.outputs[k].borrow:
                h.outputs = [o for o in range(self._n_out) if o != k and out_roots[o] is root
                             and (o < k or self.outputs[o].borrow)]
                h.updates = [u for u, r in enumerate(upd_roots) if r is root]
            return h

        self._update_hazards = [hazards(r, k, True) for k, r in enumerate(upd_roots)]
        self._output_hazards = [hazards(r, k, False) for k, r in enumerate(out_roots)]
        #: whether any result may need a copy at all (most functions: none)
        self._any_hazard = any(self._update_hazards) or any(self._output_hazards)
        # A borrowed output's buffer is reused next call unless it may also become
        # shared storage (the next call would then write into a shared value).
        self._no_reuse = {k for k, r in enumerate(out_roots) if r in upd_roots
                          or r in explicit or r in shared or isinstance(r, Constant)}
        #: mutable inputs the call may overwrite or make shared storage: a
        #: read-only argument for one (a JAX array, a read-only ndarray) is
        #: copied first, so the caller's memory is never written
        self._writable_inputs = sorted(set(self._destroyed_inputs) | {
            explicit[r] for r in upd_roots if r in explicit and self.inputs[explicit[r]].mutable})

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
        parts = getattr(self._thunk, "fast_call_parts", None)
        if parts is None or self._writable_inputs or self._any_hazard:
            return None
        parts = parts()
        if parts is None:
            return None
        # Compiled code runs holding the GIL, so no other call can come in
        # between -- unless a step calls Python (a perform), which may let
        # another thread run: then the call also holds the function's lock.
        runs_python = parts.pop("runs_python")
        locks = ((self._lock,) if runs_python else ()) + self._shared_locks
        from tenure.linkers.c.call import fast_caller
        from tenure.linkers.c.compiler import CompileError
        fallback = fallback or self._call
        try:
            fast = fast_caller(**parts, locks=locks, fallback=fallback,
                               types=[spec.variable.type for spec in self.inputs],
                               containers=self._containers,
                               update_containers=self._update_containers,
                               n_out=self._n_out, single=self._single)
        except CompileError:  # the graph compiled, the call path did not: call through Python
            return None
        return self._guard_fast_call(fast, fallback, runs_python)

    def _guard_fast_call(self, fast, fallback, runs_python: bool):
        """``fast``, or a Python wrapper doing the two checks the C path
        cannot: a call from inside a running one (only a step calling Python
        can make it) is refused, and positional arrays overlapping shared
        storage the graph overwrites go to ``fallback`` (the Python path,
        which copies them under the locks).  Most functions need neither and
        get ``fast`` itself."""
        destroyed = tuple(self._containers[j] for j in self._destroyed_shared)
        if not runs_python and not destroyed:
            return fast
        is_running_here = self._lock._is_owned
        reentered = self._reentered

        def guarded(*args, **kwargs):
            if runs_python and is_running_here():
                raise reentered("call")
            # Read without the locks: the Python path checks again holding them.
            if destroyed and _any_overlaps_storage(args, destroyed):
                return fallback(*args, **kwargs)
            return fast(*args, **kwargs)
        return guarded

    # -- calling ----------------------------------------------------------------
    def _bind(self, args, kwargs) -> tuple[list, list[bool]]:
        """Arguments in input order; also which ones came from a default value."""
        n = len(self.inputs)
        if len(args) > n:
            raise TypeError(f"{self._label()} takes {n} argument(s) {self._signature()}, "
                            f"got {len(args)}")
        values = list(args) + [_MISSING] * (n - len(args))
        for key, value in kwargs.items():
            if key in self._ambiguous_names:
                raise TypeError(f"{self._label()}: several inputs are named {key!r}; pass "
                                "them positionally")
            i = self._index_of_name.get(key)
            if i is None:
                raise TypeError(f"{self._label()} got an unexpected keyword argument {key!r}; "
                                f"expected {self._signature()}")
            if values[i] is not _MISSING:
                raise TypeError(f"{self._label()} got several values for input {key!r}")
            values[i] = value
        from_default = [False] * n
        for i, value in enumerate(values):
            if value is _MISSING:
                if self._defaults[i] is None:
                    raise TypeError(f"{self._label()} is missing a value for input "
                                    f"{self._input_label(i)}; expected {self._signature()}")
                values[i] = self._defaults[i]
                from_default[i] = True
        return values, from_default

    def __call__(self, *args, **kwargs):
        fast = self._fast_call
        if fast is not None:
            return fast(*args, **kwargs)
        return self._call(*args, **kwargs)

    def _call(self, *args, **kwargs):
        """A call through Python: binding, the input gate, the contract's copies,
        as one transaction: holding the function's lock and its shared
        variables' (in their global order), with Ctrl-C held from the commit
        point to the assignment of the updates (see
        :mod:`tenure.linkers.interrupts`)."""
        if self._lock._is_owned():
            raise self._reentered("call")
        if not self._shared_locks:
            # No shared variable, so no update and no commit point: only the
            # function's own buffers to guard.
            with self._lock:
                return self._call_holding_locks(args, kwargs)
        locks = self._locks
        token = begin_call() if self._update_containers else -1
        held = 0
        try:
            for lock in locks:
                lock.acquire()
                held += 1
            return self._call_holding_locks(args, kwargs)
        finally:
            for k in range(held - 1, -1, -1):
                locks[k].release()
            # Last: a Ctrl-C held meanwhile is delivered when this call has returned.
            end_call(token)

    def _call_holding_locks(self, args, kwargs):
        if self.trust_input and not kwargs and len(args) == len(self.inputs):
            values, from_default = list(args), None
            if self._place is not None:
                values = self._place(values)
        else:
            values, from_default = self._bind(args, kwargs)
            allow = self.allow_input_downcast
            for i, spec in enumerate(self.inputs):
                if from_default[i]:
                    continue
                what = f"input {self._input_label(i)}"
                if self._filter is None:
                    values[i] = spec.variable.type.filter(values[i], allow_downcast=allow,
                                                          what=what)
                else:
                    values[i] = self._filter(spec.variable.type, values[i], allow, what)
        if from_default is not None and any(from_default):
            # A default is the function's own data: never hand it out to be written.
            values = [v.copy() if d and self.inputs[i].mutable else v
                      for i, (v, d) in enumerate(zip(values, from_default))]
        for i in self._writable_inputs:
            if not writeable(values[i]):
                values[i] = values[i].copy()
        shared_values = [c.value for c in self._containers]
        if self._destroyed_shared:
            self._copy_inputs_over_destroyed_shared(values, shared_values)
        if self._destroyed_inputs:
            self._separate_destroyed_inputs(values, shared_values)
        if self._thunk.kept_slots:
            self._release_kept_aliasing(values, shared_values)
        results = self._thunk(values + shared_values)
        if self._update_containers:
            # From here to the last assignment the call must complete (the
            # thunk marked this already if it wrote shared storage in place).
            mark_committed()
        outputs, updates = results[:self._n_out], results[self._n_out:]
        if self._any_hazard:
            self._copy_where_needed(outputs, updates, values, shared_values, from_default)
        for container, value in zip(self._update_containers, updates):
            container.value = value
        if self._single:
            return outputs[0]
        return outputs

    def _copy_inputs_over_destroyed_shared(self, values, shared_values) -> None:
        """Copy an argument that overlaps shared storage the graph overwrites
        (an update computed in place): the graph would otherwise read it
        after writing it.  A mutable input the graph overwrites is left to
        :meth:`_separate_destroyed_inputs`, which copies it instead."""
        destroyed = [shared_values[j] for j in self._destroyed_shared]
        for i, value in enumerate(values):
            if i not in self._destroyed_inputs and any(
                    _may_overlap(value, storage) for storage in destroyed):
                values[i] = value.copy()

    def _reentered(self, what: str) -> ReentrantCallError:
        """The error for a call (or report) made inside a running call of this
        function, in the same thread (from one of its steps)."""
        return ReentrantCallError(
            f"{self._label()} {self._signature()}: a {what} was made while a call of "
            f"the same function is running in this thread (from inside one of its "
            f"steps, such as an op's perform); a function cannot be re-entered, since "
            f"the running call owns its buffers and its shared variables' transaction.  "
            f"Nothing was changed by this {what}.  Compute the value another way, or "
            f"call a copy that updates nothing (f.copy(delete_updates=True))")

    @contextlib.contextmanager
    def _holding_call_locks(self, what: str):
        """Hold what a call holds (the function's lock, then its shared
        variables' in their global order), refusing re-entry as a call does."""
        if self._lock._is_owned():
            raise self._reentered(what)
        held = 0
        try:
            for lock in self._locks:
                lock.acquire()
                held += 1
            yield
        finally:
            for k in range(held - 1, -1, -1):
                self._locks[k].release()

    def _separate_destroyed_inputs(self, values, shared_values) -> None:
        """Copy a mutable input the graph overwrites when it overlaps another argument."""
        for i in self._destroyed_inputs:
            others = [v for j, v in enumerate(values) if j != i] + shared_values
            if any(np.may_share_memory(values[i], other) for other in others):
                values[i] = values[i].copy()

    def _release_kept_aliasing(self, values, shared_values) -> None:
        """Stop reusing a kept output buffer that the caller passed back in (or
        made shared storage): the next result must not be written over it."""
        for slot, buf in self._thunk.kept_buffers():
            if any(np.may_share_memory(buf, v) for v in values + shared_values):
                self._thunk.drop_kept(slot)

    def _copy_where_needed(self, outputs, updates, values, shared_values, from_default) -> None:
        """Copy each result that aliases memory the contract keeps it from aliasing."""
        # What each shared variable holds after this call: an update value whose
        # buffer was another shared variable's is fine if that one moves to a new
        # buffer (a swap), and must be copied if it keeps it.
        final_shared = list(shared_values)
        for k, j in enumerate(self._update_shared_index):
            final_shared[j] = updates[k]

        def clashes(arr, h: _Hazards, shared_arrays) -> bool:
            if h.constant:
                return True
            return (any(np.may_share_memory(arr, values[i]) for i in h.inputs)
                    or any(from_default is not None and from_default[i]
                           and np.may_share_memory(arr, values[i]) for i in h.defaults)
                    or any(np.may_share_memory(arr, shared_arrays[j]) for j in h.shared)
                    or any(np.may_share_memory(arr, updates[u]) for u in h.updates)
                    or any(np.may_share_memory(arr, outputs[o]) for o in h.outputs))

        for k, h in enumerate(self._update_hazards):
            if h and clashes(updates[k], h, final_shared):
                updates[k] = final_shared[self._update_shared_index[k]] = updates[k].copy()
        for k, h in enumerate(self._output_hazards):
            # An output must not alias shared storage from before or after the call.
            if h and (clashes(outputs[k], h, shared_values)
                      or any(np.may_share_memory(outputs[k], final_shared[j]) for j in h.shared)):
                outputs[k] = outputs[k].copy()

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
            swap = self._check_swap(swap)
            from tenure.symbolic.graph import clone_replace
            targets = out_vars + [expr for _, expr in updates]
            if givens:  # givens first, as when this function was compiled
                targets = _apply_givens(targets, givens, [i.variable for i in spec.inputs])
                givens = None
            targets = clone_replace(targets, swap)
            out_vars, exprs = targets[:len(out_vars)], targets[len(out_vars):]
            updates = [(swap.get(var, var), expr) for (var, _), expr in zip(updates, exprs)]
        outputs = [o if o.variable is v else Out(v, borrow=o.borrow)
                   for o, v in zip(spec.outputs, out_vars)]
        if name is None and self.name:
            name = self.name + " copy"
        copied = Function(list(spec.inputs), outputs, spec.single_output,
                          _check_updates(updates), givens, spec.mode,
                          spec.allow_input_downcast, "ignore", name)
        copied.trust_input = self.trust_input
        return copied

    def _check_swap(self, swap) -> dict:
        from collections.abc import Mapping
        if not isinstance(swap, Mapping):
            raise TypeError(f"{self._label()}.copy(): swap must be a dict {{old shared "
                            f"variable: new shared variable}}, got {type(swap).__name__}")
        for old, new in swap.items():
            for what, var in (("key", old), ("value", new)):
                if not isinstance(var, SharedVariable):
                    raise TypeError(f"{self._label()}.copy(): every {what} of swap must be a "
                                    f"shared variable, got {type(var).__name__} {var}")
            if new.type != old.type:
                raise TypeError(f"{self._label()}.copy(): swap replaces {old} (type "
                                f"{old.type}) with {new} of another type, {new.type}; the "
                                "replacement must have the same type")
            if old not in self.shared_vars:
                raise ValueError(f"{self._label()}.copy(): swap names {old}, which this "
                                 "function does not use (its shared variables: "
                                 f"{', '.join(map(str, self.shared_vars)) or 'none'})")
        return dict(swap)

    def __copy__(self) -> Function:
        return self.copy()

    def __reduce__(self):
        # The symbolic specs, the mode and the flags: never the compiled state
        # (thunks, C modules, buffers, locks), which loading builds again.
        return (_restore_function, (self._spec, self.trust_input))

    def dprint(self, **kwargs):
        """Print the compiled graph: :func:`tenure.printing.debugprint` of this
        function (same keywords)."""
        from tenure.printing import debugprint
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

    def memory_report(self, *args, print_report: bool = True, **kwargs) -> MemoryReport:
        """Run the function on these arguments and report its memory, node by node.

        Prints (unless ``print_report=False``) and returns a
        :class:`~tenure.linkers.report.MemoryReport`: for every output of every
        step (in schedule order) its shape, dtype, bytes and whether its buffer
        is new, a view or an in-place write of an input, or reused (the dead
        buffer of an earlier variable, named, or last call's); then the peak
        the plan predicts for these input shapes, the measured peak
        (tracemalloc) and the bytes held between calls.  The runs use private
        copies of the arguments and of shared values and assign no updates:
        nothing visible changes.
        """
        values, _ = self._bind(args, kwargs)
        gate = self._filter or (lambda type_, v, allow, what: type_.filter(
            v, allow_downcast=allow, what=what))
        values = [gate(spec.variable.type, v, self.allow_input_downcast,
                       f"input {self._input_label(i)}")
                  for i, (spec, v) in enumerate(zip(self.inputs, values))]
        # The report runs the thunk: as a call, never beside another call's run.
        with self._holding_call_locks("memory report"):
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
        return report.timeline(input_kinds, output_kinds, self.name or "")

    # -- naming -------------------------------------------------------------
    def _label(self) -> str:
        return f"function {self.name!r}" if self.name else "function"

    def _input_label(self, i: int) -> str:
        name = self.inputs[i].name
        return repr(name) if name is not None else f"#{i} ({self.inputs[i].variable.type})"

    def _signature(self) -> str:
        parts = []
        for i, spec in enumerate(self.inputs):
            text = spec.name if spec.name is not None else f"<input #{i}>"
            if spec.value is not None:
                text += "=<default>"
            parts.append(text)
        return "(" + ", ".join(parts) + ")"

    def __repr__(self):
        return f"<Function {self.name or ''}{self._signature()} mode={self.mode}>"


_MISSING = object()


def _may_overlap(value, storage) -> bool:
    """Whether an argument and shared storage may share memory (in the same
    memory: host arrays, or device arrays of one runtime)."""
    runtime = runtime_of(storage)
    if runtime is None:
        return isinstance(value, np.ndarray) and np.may_share_memory(value, storage)
    return runtime_of(value) is runtime and runtime.may_share_memory(value, storage)


def _any_overlaps_storage(args, containers) -> bool:
    """Whether a positional NumPy argument overlaps a container's host
    storage (the C path's check: it takes exact ndarrays only)."""
    for arg in args:
        if type(arg) is np.ndarray:
            for container in containers:
                if np.may_share_memory(arg, container.value):
                    return True
    return False


def _restore_function(spec: _Spec, trust_input: bool) -> Function:
    """A pickled :class:`Function`, compiled again (see :meth:`Function.__reduce__`)."""
    f = Function(list(spec.inputs), list(spec.outputs), spec.single_output, list(spec.updates),
                 spec.givens, spec.mode, spec.allow_input_downcast, "ignore", spec.name)
    f.trust_input = trust_input
    return f


# ----------------------------------------------------------------------------
# Graph preparation helpers


def _check_storage(shared_vars, runtime, linker: str) -> None:
    """A TypeError naming each shared variable whose storage is not where the
    linker computes (``runtime``: None for host memory, else the device's
    runtime): values never move between host and device behind the caller's
    back."""
    misplaced = [var for var in shared_vars if var.runtime is not runtime]
    if not misplaced:
        return
    names = ", ".join(f"{var} ({var.device})" for var in misplaced)
    if runtime is None:
        raise TypeError(f"shared variable(s) {names} are stored on a device, and the "
                        f"{linker!r} linker computes on the host: compile with "
                        "Mode(linker='cuda'), or make them with device='cpu'")
    raise TypeError(f"shared variable(s) {names} are not stored on the device the "
                    f"{linker!r} linker computes on ({runtime.name}): make them with "
                    "tn.shared(..., device='cuda') or from device arrays")


def _apply_givens(targets, givens, in_vars):
    from tenure.symbolic.graph import clone_replace
    from tenure.symbolic.variable import as_tensor_variable
    items = givens.items() if isinstance(givens, dict) else givens
    replace = {}
    for key, value in items:
        if not isinstance(key, Variable):
            raise TypeError(f"givens: keys must be symbolic variables, got "
                            f"{type(key).__name__}")
        if key in in_vars:
            raise ValueError(f"givens: {key} is an input of the function; givens may replace "
                             "only other variables (drop it from the inputs, or from givens)")
        value = as_tensor_variable(value)
        if isinstance(value, Constant) and value.type != key.type:
            value = key.type.make_constant(value.data)
        replace[key] = value
    return clone_replace(list(targets), replace)


def _check_unused(inputs: list[In], targets, on_unused_input: str) -> None:
    if on_unused_input not in ("raise", "warn", "ignore"):
        raise ValueError(f"on_unused_input: expected 'raise', 'warn' or 'ignore', got "
                         f"{on_unused_input!r}")
    if on_unused_input == "ignore":
        return
    used = set(ancestors(targets, blockers=[spec.variable for spec in inputs]))
    for i, spec in enumerate(inputs):
        if spec.variable not in used:
            msg = (f"input {spec.name or spec.variable} (#{i}) is not used to compute any "
                   "output or update; pass on_unused_input='ignore' (or 'warn') if that is "
                   "intended")
            if on_unused_input == "raise":
                raise UnusedInputError(msg)
            warnings.warn(msg, stacklevel=4)


def _check_missing(targets, in_vars) -> None:
    for var in ancestors(targets, blockers=in_vars):
        if (var.owner is None and var not in in_vars
                and not isinstance(var, (Constant, SharedVariable))):
            raise ValueError(f"{var} ({var.type}) is needed to compute the outputs but is not "
                             "among the function's inputs (add it to the inputs, or give it "
                             "a value with givens)")


def _as_in(item, i: int) -> In:
    spec = item if isinstance(item, In) else In(item) if isinstance(item, Variable) else None
    if spec is None:
        raise TypeError(f"inputs[{i}]: expected a symbolic variable or In(...), got "
                        f"{type(item).__name__}")
    var = spec.variable
    if isinstance(var, SharedVariable):
        raise TypeError(f"inputs[{i}]: {var} is a shared variable; shared variables are "
                        "implicit inputs (leave it out, or use givens to replace it)")
    if isinstance(var, Constant):
        raise TypeError(f"inputs[{i}]: {var} is a constant and cannot be an input")
    return spec


def _as_out(item, i) -> Out:
    if isinstance(item, Out):
        return item
    if isinstance(item, Variable):
        return Out(item)
    raise TypeError(f"outputs[{i}]: expected a symbolic variable or Out(...), got "
                    f"{type(item).__name__}")


def _check_updates(updates) -> list[tuple[SharedVariable, Variable]]:
    if updates is None:
        return []
    if isinstance(updates, (set, frozenset)):
        raise TypeError("updates: expected a list of (shared variable, expression) pairs or "
                        f"a dict, got a {type(updates).__name__}, which has no order (the "
                        "compiled function would depend on it: write a list)")
    items = list(updates.items()) if isinstance(updates, dict) else list(updates)
    checked = []
    seen = set()
    for pair in items:
        try:
            var, expr = pair
        except (TypeError, ValueError):
            raise TypeError(f"updates: expected (shared variable, expression) pairs, got "
                            f"{pair!r}") from None
        if not isinstance(var, SharedVariable):
            raise TypeError(f"updates: {var} is not a shared variable; only shared variables "
                            "can be updated")
        if var in seen:
            raise ValueError(f"updates: {var} is updated twice")
        seen.add(var)
        checked.append((var, _check_update(var, expr, "updates: the new value of")))
    return checked


def _check_update(var: SharedVariable, expr, what: str) -> Variable:
    """``expr`` as the new value of ``var``, or a TypeError: same dtype and
    ndim, no contradicting static length, and no static length 1 where
    ``var``'s length can change (PyTensor refuses that too: there a static
    length 1 means broadcastable, and an update must not make a variable
    broadcastable; here it usually means a reduction kept a dimension)."""
    from tenure.symbolic.variable import as_tensor_variable
    expr = as_tensor_variable(expr)
    if isinstance(expr, Constant) and expr.type != var.type:
        expr = var.type.make_constant(expr.data)
    if not (isinstance(expr.type, TensorType) and expr.dtype == var.dtype
            and expr.ndim == var.ndim and var.type.is_compatible_replacement(expr.type)):
        raise TypeError(f"{what} {var} has type {expr.type}, but {var} has type {var.type} "
                        f"(cast it with .astype({var.dtype!r}) or reshape it)")
    ones = [axis for axis, (mine, its) in enumerate(zip(var.type.shape, expr.type.shape))
            if mine is None and its == 1]
    if ones:
        raise TypeError(
            f"{what} {var} has type {expr.type}, statically of length 1 in axis "
            f"{', '.join(map(str, ones))}, where {var} ({var.type}) has a length that can "
            f"change; as PyTensor does, tenure refuses an update that would make a variable "
            f"of any length broadcastable.  If the length is meant to be 1, give the shared "
            f"variable that static length (shared(value, shape=...)); if the value should "
            f"take {var}'s shape, broadcast it: tn.broadcast_to(expr, {var}.shape)")
    if any(mine is not None and its is None
           for mine, its in zip(var.type.shape, expr.type.shape)):
        # The variable's static lengths hold for every value it will have: a
        # call whose new value has others raises (before anything is written).
        expr = specify_shape(expr, var.type.shape)
    return expr


def _with_default_updates(updates, out_specs, in_specs, givens, no_default_updates):
    """``updates`` and the default updates: ``(s, s.default_update)`` for every
    shared variable ``s`` the outputs or the updates (these included) read
    that has one, is not updated explicitly and not excluded by
    ``no_default_updates`` (True: none; a list: not those)."""
    if isinstance(no_default_updates, (bool, np.bool_)):
        if no_default_updates:
            return updates
        excluded = set()
    elif isinstance(no_default_updates, (list, tuple, set, frozenset)):
        for var in no_default_updates:
            if not isinstance(var, SharedVariable):
                raise TypeError(f"no_default_updates: expected shared variables, got "
                                f"{type(var).__name__} {var}")
        excluded = set(no_default_updates)
    else:
        raise TypeError(f"no_default_updates: expected a bool or a list of shared variables, "
                        f"got {type(no_default_updates).__name__}")
    in_vars = [spec.variable for spec in in_specs]
    updated = {var for var, _ in updates}
    updates = list(updates)
    frontier = [spec.variable for spec in out_specs] + [expr for _, expr in updates]
    while frontier:  # default updates may read more shared variables with default updates
        if givens:
            frontier = _apply_givens(frontier, givens, in_vars)
        found = []
        for var in ancestors(frontier, blockers=in_vars):
            if (isinstance(var, SharedVariable) and var not in updated and var not in excluded
                    and getattr(var, "default_update", None) is not None):
                updated.add(var)
                found.append((var, _check_update(var, var.default_update,
                                                 "the default_update of")))
        updates += found
        frontier = [expr for _, expr in found]
    return updates


def function(inputs: Sequence = (), outputs=None, updates=None, givens=None, mode=None,
             allow_input_downcast: bool = False, on_unused_input: str = "raise",
             name: str | None = None, no_default_updates=False,
             trust_input: bool = False) -> Function:
    """Compile a function from ``inputs`` to ``outputs``.

    ``inputs``: variables or :class:`In` specs.  ``outputs``: a variable or
    :class:`Out` (the call returns one value), a list of them (returns a
    list), or ``None``.  ``updates``: ``(shared, expression)`` pairs, all
    computed from the values before the call and assigned together after it.
    ``givens``: ``{variable: replacement}`` substituted into the graph.
    ``allow_input_downcast``: accept arguments that need a lossy cast.
    ``on_unused_input``: ``"raise"``, ``"warn"`` or ``"ignore"``.
    ``no_default_updates``: the shared variables the graph reads that have a
    ``default_update`` (and no explicit update) are updated with it, unless
    this is True (none are) or a list of those that are not.
    ``trust_input``: sets :attr:`Function.trust_input`.
    """
    if isinstance(inputs, (Variable, In)):
        raise TypeError("function(): inputs must be a list (e.g. [x]), got a single "
                        f"{type(inputs).__name__}")
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"function(): inputs must be a list or a tuple (their order is the "
                        f"order of the arguments), got a {type(inputs).__name__}")
    in_specs = [_as_in(item, i) for i, item in enumerate(inputs)]
    seen = set()
    for spec in in_specs:
        if spec.variable in seen:
            raise ValueError(f"function(): input {spec.variable} is given twice")
        seen.add(spec.variable)
    single = isinstance(outputs, (Variable, Out))
    if outputs is None:
        out_items = []
    elif single:
        out_items = [outputs]
    elif isinstance(outputs, (list, tuple)):
        out_items = list(outputs)
    else:
        raise TypeError(f"function(): outputs must be a variable, Out, a list or None, got "
                        f"{type(outputs).__name__}")
    out_specs = [_as_out(item, i) for i, item in enumerate(out_items)]
    all_updates = _with_default_updates(_check_updates(updates), out_specs, in_specs, givens,
                                        no_default_updates)
    f = Function(in_specs, out_specs, single, all_updates, givens, _as_mode(mode),
                 allow_input_downcast, on_unused_input, name)
    f.trust_input = bool(trust_input)
    return f
