"""How to compile: :class:`Mode` (which rewrites run, which linker runs the
result).  The linkers a mode may name are the rows of
:data:`tenure.linkers.table.LINKERS`, the one table of linkers (a linker
joins by adding a row there).
"""

from __future__ import annotations

import numbers

import numpy as np

from tenure import config
from tenure.linkers.table import LINKERS, chunk_linkers
from tenure.linkers.thunk import Linker, Thunk
from tenure.rewrites.engine import Query
from tenure.rewrites.knapsack import SOLVERS
from tenure.symbolic.device import cuda_runtime


class Mode:
    """How to compile: which rewrites run and which linker runs the result.

    ``linker``: ``"py"`` (the NumPy executor), ``"c"`` (the whole graph
    compiled into one C extension module: see :mod:`tenure.linkers.c.linker`;
    the NumPy executor, with a warning, where no C compiler works) or
    ``"check"`` (the NumPy executor checking every node: see
    :mod:`tenure.linkers.check`) or ``"dask"`` (calls build Dask graphs whose
    tasks run tenure kernels per chunk: see :mod:`tenure.linkers.dask`; needs
    the ``[dask]`` extra) or ``"cuda_host"`` (the CUDA linker's generated
    kernels run on the host, compiled as host C++, for testing and debugging
    them without a GPU: see :mod:`tenure.linkers.cuda.linker`) or ``"cuda"``
    (the graph computed on the GPU: device arrays in and out, device shared
    variables, generated kernels: see :mod:`tenure.linkers.cuda.device_linker`;
    :class:`~tenure.symbolic.device.CudaUnavailable` without CuPy or a device,
    unless ``cuda_emulation`` runs it on the emulated device: None, the
    default, takes ``config.cuda_emulation`` when the mode is made); ``None``
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

    def __init__(self, linker: str | None = None, include=(), exclude=(),
                 rewrites: str = "default", activation_memory_budget=None,
                 activation_memory_budget_solver: str = "dp", compute: bool = False,
                 chunk_linker: str = "c", cuda_emulation: bool | None = None):
        self.linker = config.linker if linker is None else linker
        if self.linker not in LINKERS:
            raise ValueError(f"Mode: unknown linker {self.linker!r}; expected one of "
                             f"{', '.join(LINKERS)}")
        if cuda_emulation is None:
            cuda_emulation = config.cuda_emulation
        #: for the cuda linker: whether it runs on the emulated device (the
        #: flag when the mode was made: its functions, and the steps of their
        #: loops, keep to one device)
        self.cuda_emulation = self.linker == "cuda" and bool(cuda_emulation)
        if self.linker == "cuda":
            # CudaUnavailable now, naming what is missing (CuPy, a device)
            cuda_runtime(self.cuda_emulation)
        self.compute, self.chunk_linker = check_dask_options(self.linker, compute, chunk_linker)
        if rewrites not in self.PRESETS:
            raise ValueError(f"Mode: rewrites must be one of {', '.join(self.PRESETS)}, got "
                             f"{rewrites!r}")
        for what, names in (("include", include), ("exclude", exclude)):
            if isinstance(names, str):
                raise TypeError(f"Mode: {what} must be a list of names, got the string "
                                f"{names!r} (write [{names!r}])")
        self.include = tuple(include)
        self.exclude = tuple(exclude) + LINKERS[self.linker].excludes
        self.rewrites = rewrites
        # "fast_compile" runs what is tagged for it; "none" only what `include` names.
        included = set(self.include) | ({"fast_compile"} if rewrites == "fast_compile" else set())
        self.query = Query(frozenset(included), frozenset(self.exclude),
                           only_included=rewrites != "default")
        self.query.check_names()
        self.activation_memory_budget = check_budget(activation_memory_budget)
        self.activation_memory_budget_solver = check_solver(activation_memory_budget_solver)

    def make_linker(self) -> Linker:
        """The linker this mode names, with its options."""
        return LINKERS[self.linker].make(self)

    def inner_mode(self, on_device: bool = False) -> Mode:
        """The mode an inner graph of a graph this mode compiles (a loop's
        step) is compiled with: the linker's ``inner_linker`` (see
        :data:`~tenure.linkers.table.LINKERS`), or its ``device_loop_linker``
        for an op whose state stays on the device (``on_device``), and the
        same rewrites; no activation-memory budget (a step keeps nothing for
        a backward pass)."""
        entry = LINKERS[self.linker]
        if on_device and entry.device_loop_linker is not None:
            linker = entry.device_loop_linker
        else:
            linker = entry.inner_linker or self.linker
        # a step compiled for the device computes on the loop's own device
        return Mode(linker=linker, include=self.include,
                    exclude=[name for name in self.exclude if name not in entry.excludes],
                    rewrites=self.rewrites, cuda_emulation=self.cuda_emulation)

    def make_thunk(self, fgraph, keep: set[int], input_specs, n_outputs: int) -> Thunk:
        """The linker's thunk for ``fgraph``; a linker that reads the ``In``
        specs (the dask linker's chunks, borrow and mutable flags) gets them
        and the number of outputs (the rest are updates)."""
        linker = self.make_linker()
        if LINKERS[self.linker].takes_input_specs:
            return linker.make_thunk(fgraph, keep, allow_gc=config.allow_gc,
                                     input_specs=input_specs, n_outputs=n_outputs)
        chunked = [spec.name or str(spec.variable) for spec in input_specs
                   if spec.chunks is not None]
        if chunked:
            raise ValueError(f"In(chunks=...) is a hint for the dask linker; this function's "
                             f"linker is {linker.name!r} (inputs with chunks: "
                             f"{', '.join(chunked)})")
        return linker.make_thunk(fgraph, keep, allow_gc=config.allow_gc)

    def __repr__(self):
        parts = [f"linker={self.linker!r}"]
        if self.include:
            parts.append(f"include={list(self.include)!r}")
        # (what every mode of the linker leaves out goes without saying)
        exclude = [n for n in self.exclude if n not in LINKERS[self.linker].excludes]
        if exclude:
            parts.append(f"exclude={exclude!r}")
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


def check_dask_options(linker: str, compute, chunk_linker) -> tuple[bool, str]:
    """``(compute, chunk_linker)``, checked: they mean something to the dask linker only."""
    if not isinstance(compute, (bool, np.bool_)):
        raise TypeError(f"Mode: compute must be a bool, got {type(compute).__name__} "
                        f"{compute!r}")
    if chunk_linker not in chunk_linkers():
        raise ValueError(f"Mode: chunk_linker must be one of {', '.join(chunk_linkers())}, "
                         f"got {chunk_linker!r}")
    if linker != "dask" and (compute or chunk_linker != "c"):
        raise ValueError(f"Mode: compute= and chunk_linker= are options of the dask linker; "
                         f"this mode's linker is {linker!r}")
    return bool(compute), chunk_linker


def check_budget_can_free(budget) -> None:
    """A budget lowers the peak by freeing saved activations and computing them
    again; with ``allow_gc`` off nothing is freed (every intermediate stays
    between calls), so the budget could only add work: refuse it."""
    if not config.allow_gc:
        raise ValueError(f"Mode: activation_memory_budget={budget!r} needs "
                         f"config.allow_gc=True; with allow_gc off every intermediate "
                         f"stays between calls, so recomputing cannot lower the peak "
                         f"(turn allow_gc on, or drop the budget)")


def check_budget(budget):
    """``activation_memory_budget`` as a float fraction, an int byte count or None."""
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


def check_solver(solver):
    """``activation_memory_budget_solver``, checked against the knapsack solvers."""
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"Mode: unknown activation_memory_budget_solver {solver!r}; expected "
                         f"one of {', '.join(map(repr, SOLVERS))}")
    return solver


#: PyTensor's (and Theano's) mode names, as the rewrite presets they mean
PYTENSOR_MODE_NAMES = {"FAST_RUN": "default", "FAST_COMPILE": "fast_compile"}


def as_mode(mode) -> Mode:
    """``function(mode=...)`` as a Mode: None (the default), a Mode, a
    rewrite preset (or PyTensor's name for one: ``"FAST_RUN"``,
    ``"FAST_COMPILE"``) or a linker name."""
    if mode is None:
        return Mode()
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, str):
        preset = PYTENSOR_MODE_NAMES.get(mode, mode)
        if preset in Mode.PRESETS:
            return Mode(rewrites=preset)
        return Mode(linker=mode)
    raise TypeError(f"mode: expected a Mode, a linker name or None, got {type(mode).__name__}")
