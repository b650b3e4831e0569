"""The Dask linker: a compiled function whose calls build Dask graphs.

``tn.function(..., mode=tn.Mode(linker="dask"))`` compiles the graph with
every rewrite except the in-place ones (a chunk Dask holds may be read by
other tasks, so nothing is overwritten; an in-place op written into the
graph by hand runs as its out-of-place twin, which ``mutable`` allows: it
lets tenure overwrite an argument, it does not make it) and checks that
every op a lazy value reaches can be lowered (:func:`.lower.unsupported`:
the error names them).  A call then lowers the graph (:mod:`.lower`) over
its arguments (the graph first rewritten for the call's shapes, see
:mod:`.specialize`; the dask linker's own rewrites and lowering choices
have names, :mod:`tenure.rewrites.dask_specialize`, which the mode may
exclude like any rewrite's: ``Mode(linker="dask", exclude=["dask_regions"])``):

- a ``dask.array`` argument is used as it is (checked lazily: ndim, static
  lengths, dtype, cast as the input gate would, without computing it);
- a NumPy argument becomes a Dask array with the chunks its ``In`` names
  (``In(x, chunks=...)``, anything ``dask.array.from_array`` takes;
  default ``"auto"``).  Its chunks are views of the caller's array when the
  input is borrowed or the call computes everything before returning, and
  copies otherwise: a lazy result must not change when the caller later
  writes the array (``dask.array.from_array`` would always copy);
- a 0-d NumPy argument or shared value stays a NumPy value (lowering may
  read it: an index, a length; it travels inside the tasks);
- a shared variable's value travels once per call, not with each task: a
  value of :data:`SCATTER_BYTES` or more is scattered to every worker when
  a ``distributed`` client is the default scheduler (on every worker, so
  that losing one loses no copy); a smaller one, or any without a client,
  is one task of the graph (sent with the graph, once to each worker that
  reads it, and recomputable from the graph if a worker dies: a scatter is
  a round trip to every worker before the graph leaves, dearer than a few
  kilobytes in it) holding the value itself when the call computes its
  outputs, a copy when they stay lazy (an update may later write the value
  in place).

Updates of shared variables are computed before the call returns, in one
``dask.compute`` with the outputs when those are computed too
(``Mode(linker="dask", compute=True)``: NumPy outputs); otherwise outputs
are Dask arrays, lazy.  Computed results alias nothing the contract keeps
from them (a result that may is copied): no constant, no shared value, no
other result, and no argument the caller did not lend.  An output may be a
borrowed argument or a view of it (the argument itself when the output is
that input); an update from a ``mutable`` argument adopts it; nothing else.
An update is assigned only after everything computed, so a call that
raises (a task failed) changes no shared variable.

What the Dask linker never does (results are made on the workers and
gathered): write a buffer in place (an argument's, a shared value's) or
keep an output buffer for the next call (``Out(borrow=True)`` is a fresh
array each call); and it never promises a view of an argument (whether a
gathered result is one is Dask's business: from a cluster it never is).
:attr:`DaskLinker.shares_buffers` says so to the suites.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from tenure.linkers.dask.chunks import ChunkKernel
from tenure.linkers.dask.lower import (LoweringError, chunked, is_lazy, lower_graph,
                                       unsupported)
from tenure.linkers.dask.regions import lowering_order
from tenure.linkers.dask.specialize import CallGraphs, out_of_place
from tenure.linkers.thunk import Thunk, mark_update_steps
from tenure.rewrites.dask_specialize import PARTIAL_REDUCTIONS, REGIONS, selected
from tenure.symbolic.graph import Constant
from tenure.symbolic.shared import SharedVariable
from tenure.symbolic.types import DOWNCAST_HINT

__all__ = ["SCATTER_BYTES", "DaskLinker", "DaskThunk", "default_client"]

#: the smallest shared value scattered to the workers rather than sent in the graph
SCATTER_BYTES = 1 << 20

#: what a ``chunks`` hint may be (see ``dask.array.from_array``)
DEFAULT_CHUNKS = "auto"


def default_client():
    """The ``distributed`` client Dask computes with now, or None."""
    try:
        from distributed import default_client as current
    except ImportError:  # dask without distributed: local schedulers only
        return None
    try:
        return current()
    except ValueError:
        return None


class _Context:
    """What lowering keeps between calls: the chunk kernel of each node or
    region (a kernel hashes its steps once), the helper nodes lowering makes
    (:meth:`made_once`), and the lowering order of each graph (the graphs a call
    lowers are kept between calls too, see :mod:`.specialize`).

    ``enabled``: the names of the dask rewrites and lowering choices the
    mode selects (:func:`tenure.rewrites.dask_specialize.selected`); the
    lowering reads :attr:`partial_reductions` and :attr:`regions`."""

    def __init__(self, chunk_linker: str, enabled=None):
        self.chunk_linker = chunk_linker
        enabled = selected(None) if enabled is None else enabled
        #: ``dask_partial_reductions``: a reduction is per-chunk partials and a tree
        self.partial_reductions = PARTIAL_REDUCTIONS in enabled
        #: ``dask_regions``: elementwise regions run as one kernel per chunk
        self.regions = REGIONS in enabled
        self._kernels: dict = {}
        self._made: dict = {}
        self._orders: dict = {}

    def kernel(self, key, nodes_and_outputs) -> tuple[ChunkKernel, list]:
        """``(kernel, arguments)`` for ``key`` (a node or a region), made from
        ``nodes_and_outputs()`` the first time: the nodes the kernel runs,
        the variables it returns and the axes it reads whole (see
        :meth:`ChunkKernel.of_nodes`)."""
        found = self._kernels.get(key)
        if found is None:
            nodes, outputs, whole_axes = nodes_and_outputs()
            found = self._kernels[key] = ChunkKernel.of_nodes(nodes, outputs,
                                                              self.chunk_linker, whole_axes)
        return found

    def made_once(self, key, make):
        """``make()``, made the first time ``key`` is asked for: the symbolic
        helpers lowering builds for a node (a reduction's per-chunk partial,
        an op on a flattened input).  A key names its purpose with the node:
        the same reduction is a region's sink in one call and lowered alone
        in the next (when the region's shapes differ)."""
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = make()
        return found

    def lowering_order(self, fgraph) -> list:
        found = self._orders.get(fgraph)
        if found is None:
            found = self._orders[fgraph] = lowering_order(
                fgraph, regions=self.regions, reduction_sinks=self.partial_reductions)
        return found


class DaskThunk(Thunk):
    """Calls lower the graph over their arguments; see the module notes."""

    #: no output buffer is kept between calls
    kept_slots = ()
    #: computed results alias only what the contract allows (see the module
    #: notes), and lazy ones cannot be checked without computing them: the
    #: function copies nothing after a call
    fresh_results = True

    def __init__(self, fgraph, n_outputs: int, input_specs, compute: bool, chunk_linker: str,
                 borrowed_outputs=frozenset(), query=None, update_names=()):
        self.fgraph = fgraph
        self.n_outputs = n_outputs
        #: the shared variables the results after ``n_outputs`` update, by
        #: name: each graph lowered is marked with them, so that an error in
        #: a node computing only an update says which (``step_note``)
        self.update_names = tuple(update_names)
        #: the outputs the caller borrows (``Out(borrow=True)``): two of them
        #: may be one array; any other pair of results may not
        self.borrowed_outputs = frozenset(borrowed_outputs)
        self.compute = compute
        self.context = _Context(chunk_linker, selected(query))
        self.graphs = CallGraphs(fgraph, query)
        self.is_shared = [isinstance(v, SharedVariable) for v in fgraph.inputs]
        specs = list(input_specs) + [None] * (len(fgraph.inputs) - len(input_specs))
        # A default value is lent by nobody: never handed out, never adopted.
        self.borrowed = [spec is not None and spec.borrow and spec.value is None
                         for spec in specs]
        self.mutable = [spec is not None and spec.mutable and spec.value is None
                        for spec in specs]
        position = {var: i for i, var in enumerate(fgraph.inputs)}
        #: per result, the input it is (returned or assigned as it came), or None
        self.returned_input = [position.get(var) for var in fgraph.outputs]
        #: what no result may alias: the graph's constants
        self.constants = [var.data for var in fgraph.variables
                          if isinstance(var, Constant) and isinstance(var.data, np.ndarray)]
        self.chunks = [DEFAULT_CHUNKS if spec is None or spec.chunks is None else spec.chunks
                       for spec in specs]
        self.labels = [f"input {spec.name or spec.variable}" if spec is not None else str(var)
                       for spec, var in zip(specs, fgraph.inputs)]
        for label, chunks, var in zip(self.labels, self.chunks, fgraph.inputs):
            if isinstance(chunks, (tuple, list)) and len(chunks) != var.ndim:
                raise ValueError(f"{label}: In(chunks={chunks!r}) names {len(chunks)} axes; "
                                 f"the input has {var.ndim} ({var.type})")

    # -- the input gate for lazy arguments -------------------------------------------
    @staticmethod
    def filter_input(type_, value, allow_downcast: bool | None, what: str, strict: bool = False,
                     downcast_hint: str = DOWNCAST_HINT):
        """``value`` for an input of ``type_``: a Dask array is checked and cast
        lazily (the rules of :meth:`TensorType.filter`; ``strict``: of the
        input's dtype already); anything else goes through ``type_.filter``."""
        if not is_lazy(value):
            return type_.filter(value, strict=strict, allow_downcast=allow_downcast, what=what,
                                downcast_hint=downcast_hint)
        if value.ndim != type_.ndim:
            raise TypeError(f"{what}: expected a {type_.ndim}-d array ({type_}), got a "
                            f"{value.ndim}-d dask array of shape {value.shape}")
        for axis, (want, got) in enumerate(zip(type_.shape, value.shape)):
            if want is not None and got == got and got != want:  # got is NaN when unknown
                raise ValueError(f"{what}: expected length {want} on axis {axis} ({type_}), "
                                 f"got a dask array of shape {value.shape}")
        dtype = type_.numpy_dtype
        if value.dtype == dtype:
            return value
        if strict:
            raise TypeError(f"{what}: expected an array of dtype {dtype}, got a dask array of "
                            f"dtype {value.dtype} (strict input)")
        if allow_downcast or np.can_cast(value.dtype, dtype, "safe"):
            return value.astype(dtype)
        raise TypeError(f"{what}: a dask array of dtype {value.dtype} cannot be cast safely "
                        f"to {dtype} ({type_}); {downcast_hint} to cast anyway")

    # -- calling ------------------------------------------------------------------------
    def __call__(self, values: list) -> list:
        client = default_client() if any(self.is_shared) else None
        lazy_inputs = [self._lazy_input(i, value, client) for i, value in enumerate(values)]
        graph = self.graphs.for_values(lazy_inputs)
        if getattr(graph, "update_names", None) != self.update_names:
            mark_update_steps(graph, self.n_outputs, self.update_names)
        results = lower_graph(graph, lazy_inputs, self.context)
        # Updates always, outputs when asked; a result concrete from the
        # start (made from constants) needs no computing but must be fresh too.
        todo = [k for k, r in enumerate(results)
                if not is_lazy(r) or k >= self.n_outputs or self.compute]
        lazy = [k for k in todo if is_lazy(results[k]) and self._given(k) is None]
        for k, value in zip(lazy, dask.compute(*[results[k] for k in lazy]) if lazy else ()):
            results[k] = value
        for k in todo:
            results[k] = self._result(k, results[k], values, results)
        self._keep_apart(results)
        return results

    def _may_alias(self, j: int, k: int) -> bool:
        """Whether results ``j`` and ``k`` may be one array: two borrowed
        outputs, or a borrowed output and an update (the output may be the
        shared storage then); never two updates, nor a non-borrowed output
        and anything else."""
        borrowed = [i < self.n_outputs and i in self.borrowed_outputs for i in (j, k)]
        updates = [i >= self.n_outputs for i in (j, k)]
        return all(borrowed) or (any(borrowed) and any(updates))

    def _keep_apart(self, results: list) -> None:
        """Copy each result that aliases an earlier one it may not alias (the
        same input handed back twice, a computed result and a view of it) —
        or, lazily, is the same Dask array object (writing one with
        ``__setitem__`` would change the other)."""
        for k, result in enumerate(results):
            for j in range(k):
                if self._may_alias(j, k):
                    continue
                if is_lazy(result):
                    if result is results[j]:
                        result = results[k] = result.copy()
                elif isinstance(result, np.ndarray) and isinstance(results[j], np.ndarray) \
                        and np.may_share_memory(result, results[j]):
                    result = results[k] = result.copy()

    def _given(self, k: int) -> int | None:
        """The input result ``k`` may be handed back as the caller passed it
        (the result is that input): an output of a borrowed input, an update
        from a mutable one (the shared variable adopts the buffer); else None."""
        i = self.returned_input[k]
        if i is None:
            return None
        allowed = self.mutable[i] if k >= self.n_outputs else self.borrowed[i]
        return i if allowed else None

    def _result(self, k: int, value, values: list, results: list) -> np.ndarray:
        """Result ``k`` as an array of its type that aliases nothing it must
        not: a constant, an argument the caller did not lend (borrowed, for an
        output; mutable, for an update), a shared value, another result."""
        given = self._given(k)
        if given is not None and isinstance(values[given], np.ndarray) and (
                k < self.n_outputs or values[given].flags.writeable):
            return values[given]   # (a shared variable adopts only writeable storage)
        dtype = self.fgraph.outputs[k].type.numpy_dtype
        array = np.asarray(value)
        if array.dtype != dtype:
            return array.astype(dtype)
        lent = self.mutable if k >= self.n_outputs else self.borrowed
        held = [v for i, v in enumerate(values) if isinstance(v, np.ndarray) and not lent[i]]
        if not array.flags.writeable or any(np.may_share_memory(array, h)
                                            for h in held + self.constants):
            array = array.copy()
        return array

    def _lazy_input(self, i: int, value, client):
        if is_lazy(value):
            return value
        if value.ndim == 0:
            # A 0-d value stays concrete: an index, a length, a learning rate
            # that lowering may need to read, small enough for any task (and
            # to copy, where a lazy result must not see a later write).
            return value if self.compute or self.borrowed[i] else value.copy()
        if self.is_shared[i]:
            if client is not None and value.nbytes >= SCATTER_BYTES:
                return _scattered(client, value)
            return chunked(value, value.shape, copy=not self.compute)
        try:
            return chunked(value, self.chunks[i], copy=not (self.compute or self.borrowed[i]))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{self.labels[i]}: In(chunks={self.chunks[i]!r}) does not cut an "
                             f"array of shape {value.shape} into chunks ({exc})") from None

    def free(self) -> None:
        """Nothing is held between calls."""


def _scattered(client, value: np.ndarray) -> da.Array:
    """``value`` as a one-chunk Dask array whose chunk lives on the cluster
    (sent once to each worker, then read by every task that needs it)."""
    future = client.scatter(value, hash=False, broadcast=True)
    name = f"tenure-shared-{future.key}"
    return da.Array({(name,) + (0,) * value.ndim: future}, name,
                    chunks=tuple((n,) for n in value.shape), dtype=value.dtype,
                    meta=np.empty((0,) * value.ndim, dtype=value.dtype))


class DaskLinker:
    """Makes :class:`DaskThunk`\\ s (see the module notes)."""

    name = "dask"
    #: never writes an argument or a shared value in place, never returns a
    #: view of one, never keeps an output buffer between calls (the suites
    #: skip the tests that check a linker does: ``pytest.mark.shares_buffers``)
    shares_buffers = False
    #: the function hands ``make_thunk`` its ``In`` specs (chunks, borrow, mutable)
    takes_input_specs = True

    def __init__(self, compute: bool = False, chunk_linker: str = "c", query=None):
        self.compute = compute
        self.chunk_linker = chunk_linker
        #: the mode's rewrite query: which of the dask linker's own rewrites
        #: and lowering choices run (:mod:`tenure.rewrites.dask_specialize`)
        self.query = query

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True,
                   input_specs=(), n_outputs: int | None = None) -> DaskThunk:
        original, fgraph = fgraph, out_of_place(fgraph)
        missing = unsupported(fgraph)
        if missing:
            names = sorted({str(node.op) for node in missing})
            raise LoweringError(f"dask linker: no lowering for {', '.join(names)} (ops the "
                                "dask linker lowers: elementwise and fused loops, reductions, "
                                "softmax and other ops along axes, products, shape ops and "
                                "indexing)")
        # ``keep_outputs``: the borrowed outputs (less those the function keeps
        # from an update's buffer: treating them as not borrowed only copies more)
        return DaskThunk(fgraph, len(fgraph.outputs) if n_outputs is None else n_outputs,
                         input_specs, self.compute, self.chunk_linker, keep_outputs,
                         self.query, getattr(original, "update_names", ()))
