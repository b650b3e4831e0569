"""Per-chunk kernels: a piece of a graph, compiled by tenure, run on chunks.

A :class:`ChunkKernel` is what a Dask task calls: a few nodes (one op, or a
region of elementwise ops with the partial reductions that read it, see
:mod:`.regions`) written as :class:`Step`\\ s over the kernel's arguments,
and the types of those arguments (static lengths dropped, except the 1s
that mark broadcasting: a chunk is shorter than the whole array).  On first
use in a process it builds the nodes, fuses them (the fusion rewrites) and
compiles them with the chunk linker (the C linker by default: the disk
cache makes every process after the first load it without running the
compiler).  It pickles as its steps, types and linker's name, so a worker
process rebuilds it from the task.

Threads.  A compiled thunk owns the storage of one call, so one thunk must
never run two chunks at once; Dask runs several tasks of a process on its
threads.  Each thread gets its own thunk of the same compiled code (the
module is loaded once per process; a thunk costs a plan and a schedule).

Memory.  Chunk kernels never write their arguments (no step has a destroy
map: the Dask mode compiles without in-place rewrites, and
:func:`non_destructive` refuses one) and return fresh arrays: a chunk Dask
holds may be read by other tasks.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from typing import NamedTuple

import numpy as np

from tenure.linkers.table import LINKERS, chunk_linkers
from tenure.rewrites.engine import Query, rewrite_graph
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Constant
from tenure.symbolic.types import TensorType

__all__ = ["FUSION", "Arg", "ChunkKernel", "Result", "Step", "chunk_type", "joined",
           "non_destructive", "steps_of"]

#: the rewrites a kernel of several steps runs before it is compiled: fusion
#: only (the function's graph went through every other rewrite when it was
#: compiled)
FUSION = Query(include=frozenset({"fusion"}), only_included=True)

# Per thread: {kernel key: thunk}.  Worker threads live as long as the worker.
_THUNKS = threading.local()


def chunk_type(t: TensorType) -> TensorType:
    """``t`` for a chunk: the same dtype and ndim, lengths unknown except 1
    (a length-1 axis broadcasts, in every chunk)."""
    return TensorType(t.dtype, tuple(1 if n == 1 else None for n in t.shape))


def non_destructive(op) -> None:
    """Raise unless ``op`` leaves its inputs alone (a chunk is shared data)."""
    if getattr(op, "destroy_map", None):
        raise ValueError(f"dask linker: {op} overwrites its input {op.destroy_map}; a chunk "
                         "kernel must not (the dask mode compiles without in-place rewrites)")


class Arg(NamedTuple):
    """The kernel's ``index``-th argument (a chunk)."""

    index: int


class Result(NamedTuple):
    """Output ``output`` of the kernel's ``step``-th step."""

    step: int
    output: int = 0


class Step(NamedTuple):
    """``op`` applied to ``inputs``: each an :class:`Arg`, a :class:`Result` of
    an earlier step or a :class:`~tenure.symbolic.graph.Constant` (kept in the
    kernel: a weakly typed Python number must stay one, or ``x * 2`` of
    float32 would become float64)."""

    op: object
    inputs: tuple


def steps_of(nodes, outputs) -> tuple[tuple[Step, ...], list, tuple[Result, ...]]:
    """``nodes`` (in an order where each comes after the nodes it reads) as
    steps: ``(steps, arguments, results)`` where ``arguments`` are the
    variables the nodes read that no node computes (constants excepted) and
    ``results`` name ``outputs`` (variables the nodes compute)."""
    made: dict = {}
    arguments: list = []
    steps = []
    for node in nodes:
        refs = []
        for var in node.inputs:
            if var in made:
                refs.append(made[var])
            elif isinstance(var, Constant):
                refs.append(var)
            else:
                if var not in arguments:
                    arguments.append(var)
                refs.append(Arg(arguments.index(var)))
        steps.append(Step(node.op, tuple(refs)))
        for k, out in enumerate(node.outputs):
            made[out] = Result(len(steps) - 1, k)
    return tuple(steps), arguments, tuple(made[v] for v in outputs)


def joined(blocks, axes: tuple[int, ...]):
    """The blocks Dask passes for axes read whole (nested lists, one level
    per axis) as one array; one block is returned as it is."""
    if not axes:
        return blocks
    parts = [joined(b, axes[1:]) for b in blocks]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axes[0])


class ChunkKernel:
    """``kernel(*chunks)``: ``steps`` run on one chunk of each argument.

    ``arg_types``: the type of each argument (as the whole array's; the
    kernel makes them chunk types).  ``outputs``: the results the kernel
    returns, one array, or a tuple when there are several.  ``whole_axes``:
    per argument, the axes the kernel reads whole, in order; Dask passes
    the blocks along them as (nested) lists, which the kernel joins (a
    single block is used as it is, not copied)."""

    def __init__(self, steps, arg_types, outputs, linker: str = "c", whole_axes=None,
                 key: str | None = None):
        for step in steps:
            non_destructive(step.op)
        if linker not in chunk_linkers():
            raise ValueError(f"dask linker: chunk_linker must be one of "
                             f"{', '.join(chunk_linkers())}, got {linker!r}")
        self.steps = tuple(steps)
        self.arg_types = tuple(chunk_type(t) for t in arg_types)
        self.outputs = tuple(outputs)
        self.linker = linker
        self.whole_axes = tuple(whole_axes or ((),) * len(self.arg_types))
        # Constants compare by identity; their pickled form names them by
        # value.  Computed once: a task carries it (each task unpickles its kernel).
        self.key = key or hashlib.sha256(pickle.dumps(
            (self.steps, self.arg_types, self.outputs, linker, self.whole_axes))).hexdigest()

    @classmethod
    def of_nodes(cls, nodes, outputs, linker: str = "c",
                 whole_axes=None) -> tuple[ChunkKernel, list]:
        """The kernel computing ``outputs`` of ``nodes``, and the variables
        whose chunks are its arguments, in order.  ``whole_axes``: the axes
        of some of those variables the kernel reads whole (see the class)."""
        steps, arguments, results = steps_of(nodes, outputs)
        whole = [tuple((whole_axes or {}).get(v, ())) for v in arguments]
        return cls(steps, [v.type for v in arguments], results, linker, whole), arguments

    def __reduce__(self):
        return (ChunkKernel, (self.steps, self.arg_types, self.outputs, self.linker,
                              self.whole_axes, self.key))

    def __repr__(self):
        ops = ", ".join(str(step.op) for step in self.steps)
        return f"ChunkKernel({ops})"

    def _thunk(self):
        thunks = getattr(_THUNKS, "by_key", None)
        if thunks is None:
            thunks = _THUNKS.by_key = {}
        thunk = thunks.get(self.key)
        if thunk is None:
            thunk = thunks[self.key] = self._compile()
        return thunk

    def _compile(self):
        args = [t() for t in self.arg_types]
        nodes = []

        def value(ref):
            if isinstance(ref, Arg):
                return args[ref.index]
            if isinstance(ref, Result):
                return nodes[ref.step].outputs[ref.output]
            return ref

        for step in self.steps:
            nodes.append(step.op.make_node(*[value(ref) for ref in step.inputs]))
        outputs = [value(ref) for ref in self.outputs]
        fgraph = FunctionGraph(args, outputs)
        if len(self.steps) > 1:
            rewrite_graph(fgraph, FUSION)
        return LINKERS[self.linker].make(None).make_thunk(fgraph, set(), allow_gc=True)

    def __call__(self, *chunks):
        values = [np.asarray(joined(c, axes), dtype=t.numpy_dtype)
                  for c, t, axes in zip(chunks, self.arg_types, self.whole_axes)]
        try:
            results = self._thunk()(values)
        except Exception as exc:
            exc.add_note(f"tenure: raised in a Dask task running {self!r} on a chunk")
            raise
        if len(self.outputs) == 1:
            return results[0]
        return tuple(results)
