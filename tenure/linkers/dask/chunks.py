"""Per-chunk kernels: one node of a graph, compiled by tenure, run on a chunk.

A :class:`ChunkKernel` is what a Dask task calls: it holds an op and the
types of its inputs (static lengths dropped, except the 1s that mark
broadcasting: a chunk is shorter than the whole array) and, on first use in
a process, compiles the node with the chunk linker (the C linker by
default: the disk cache makes every process after the first load it without
running the compiler).  It pickles as the op, the types and the linker's
name, so a worker process rebuilds it from the task.

Threads.  A compiled thunk owns the storage of one call, so one thunk must
never run two chunks at once; Dask runs several tasks of a process on its
threads.  Each thread gets its own thunk of the same compiled code (the
module is loaded once per process; a thunk costs a plan and a schedule).

Memory.  Chunk kernels never write their inputs (the node has no destroy
map: the Dask mode compiles without in-place rewrites, and :func:`non_destructive`
refuses one) and return fresh arrays: a chunk Dask holds may be read by
other tasks.
"""

from __future__ import annotations

import hashlib
import pickle
import threading

import numpy as np

from tenure.linkers.c.linker import CLinker
from tenure.linkers.python import PythonLinker
from tenure.rewrites.fgraph import FunctionGraph
from tenure.symbolic.graph import Constant
from tenure.symbolic.types import TensorType

__all__ = ["ChunkKernel", "chunk_type", "non_destructive"]

#: the linkers a chunk kernel may be compiled with
CHUNK_LINKERS = {"c": CLinker, "py": PythonLinker}

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


class ChunkKernel:
    """``kernel(*chunks)``: ``op`` applied to one chunk of each input.

    ``inputs``: per input of the node, a :class:`~tenure.symbolic.graph.Constant`
    (kept in the kernel's graph: a weakly typed Python number must stay one,
    or ``x * 2`` of float32 would become float64) or the input's type (a
    chunk argument, in order).  ``output``: which output of the node the
    kernel returns (None: all of them, as a tuple)."""

    def __init__(self, op, inputs, output: int | None = 0, linker: str = "c",
                 key: str | None = None):
        non_destructive(op)
        if linker not in CHUNK_LINKERS:
            raise ValueError(f"dask linker: chunk_linker must be one of "
                             f"{', '.join(CHUNK_LINKERS)}, got {linker!r}")
        self.op = op
        self.inputs = tuple(i if isinstance(i, Constant) else chunk_type(i) for i in inputs)
        self.output = output
        self.linker = linker
        self.arg_types = [t for t in self.inputs if not isinstance(t, Constant)]
        # Constants compare by identity; their pickled form names them by
        # value.  Computed once: a task carries it (each task unpickles its kernel).
        self.key = key or hashlib.sha256(pickle.dumps((op, self.inputs, linker))).hexdigest()

    def __reduce__(self):
        return (ChunkKernel, (self.op, self.inputs, self.output, self.linker, self.key))

    def __repr__(self):
        return f"ChunkKernel({self.op}, output={self.output})"

    def _thunk(self):
        thunks = getattr(_THUNKS, "by_key", None)
        if thunks is None:
            thunks = _THUNKS.by_key = {}
        thunk = thunks.get(self.key)
        if thunk is None:
            args = [t() for t in self.arg_types]
            it = iter(args)
            node = self.op.make_node(*[i if isinstance(i, Constant) else next(it)
                                       for i in self.inputs])
            fgraph = FunctionGraph(args, list(node.outputs))
            thunk = thunks[self.key] = CHUNK_LINKERS[self.linker]().make_thunk(
                fgraph, set(), allow_gc=True)
        return thunk

    def __call__(self, *chunks):
        values = [np.asarray(c, dtype=t.numpy_dtype) for c, t in zip(chunks, self.arg_types)]
        results = self._thunk()(values)
        if self.output is None:
            return tuple(results)
        return results[self.output]
