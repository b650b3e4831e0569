"""The dask linker's own rewrites and lowering choices, by name.

The dask linker changes a graph in ways no other linker does: it drops the
``sum_to`` and ``alloc`` nodes a call's shapes show to be useless (on the C
linker they cost little; lowered to Dask each one splits the fused loops
around it, see :mod:`tenure.linkers.dask.specialize`), and it lowers
reductions and elementwise regions in its own way.  Each of those has a name
here, so that it can be switched off like any other rewrite, to bisect a
bug or to measure what it buys::

    tn.Mode(linker="dask", exclude=["dask_spread_alloc"])   # one of them
    tn.Mode(linker="dask", exclude=["dask"])                # all of them

========================  ==========  ========  =================================================
name                      phase       kind      what
========================  ==========  ========  =================================================
dask_sum_to_identity      specialize  call      ``sum_to(g, *dims)`` -> ``g`` where the call's
                                                shapes show that it sums nothing
dask_spread_alloc         specialize  call      an ``alloc(v, *dims)`` read only by elementwise
                                                ops that another input gives the allocated shape:
                                                they read ``v`` (broadcast inside the kernel)
dask_partial_reductions   specialize  lowering  a reduction over chunked axes: a keepdims partial
                                                per chunk (computed in a region's kernel where
                                                one makes what it reduces) and Dask's tree over
                                                the partials.  Off: the reduced axes are
                                                rechunked into one chunk and the reduction runs
                                                whole on each
dask_regions              fuse        lowering  elementwise nodes, row products and the partials
                                                of what sums over them, run as one kernel per
                                                chunk (:mod:`tenure.linkers.dask.regions`).
                                                Off: every node is its own layer of tasks
========================  ==========  ========  =================================================

Every one is tagged ``"dask"``; the call rewrites also ``"dask_call"``, the
lowering choices ``"dask_lowering"``.  None is a default rewrite: the
compile-time pipeline never runs them (a mode of another linker that
includes one changes nothing: without a call's shapes a call rewrite does
not fire, and a lowering choice is no rewrite of the graph at all).  The
dask linker selects them from its mode (:func:`selected`):

- a *call rewrite* is selected as a default rewrite is: unless the mode
  excludes it (by its name, a tag or its phase), and, with
  ``rewrites="none"`` or ``"fast_compile"``, only when the mode includes it.
  The dask linker runs it, with the rewrite engine, on a copy of the
  function's graph when a call's shapes are known (the copy carries them:
  :class:`CallShapes`), and keeps the result for the next call with the same
  outcome.  After ``dask_sum_to_identity`` the mode's fusion rewrites run
  again (the nodes it dropped had split the fused loops).
- a *lowering choice* is on unless the mode excludes it, whatever the preset:
  it says how a node becomes Dask tasks, and every way computes the same
  values.  It is registered here (as a rewrite that never fires) so that a
  mode can name it; the lowering reads the selection.

Why the lowering choices are not graph rewrites: what they split a node into
(a partial per chunk, one kernel per chunk of a region) exists only in the
Dask graph.  The symbolic graph has no chunks, and no op of it stands for
"this reduction, on one chunk".

Every rewrite here is exact for the shapes it was decided for: a replacement
stands for a value equal to the original's.
"""

from __future__ import annotations

import numpy as np

from tenure.rewrites.broadcast import broadcastable
from tenure.rewrites.engine import (Query, register_graph_rewrite, register_node_rewrite,
                                    registered_rewrites, rewrite_graph)
from tenure.symbolic.fgraph import Feature, FunctionGraph
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import SumTo

__all__ = ["CALL", "DASK", "LOWERING", "PARTIAL_REDUCTIONS", "REGIONS", "SPREAD_ALLOC",
           "SUM_TO_IDENTITY", "CallShapes", "call_shapes", "copy_graph", "fusion_rewrites",
           "identity_sum_tos", "rewrite_for_call", "selected", "spreadable_allocs"]

#: the tag of every rewrite and lowering choice of the dask linker
DASK = "dask"
#: the tag of those run on a graph at call time, with the call's shapes
CALL = "dask_call"
#: the tag of the lowering choices
LOWERING = "dask_lowering"

SUM_TO_IDENTITY = "dask_sum_to_identity"
SPREAD_ALLOC = "dask_spread_alloc"
PARTIAL_REDUCTIONS = "dask_partial_reductions"
REGIONS = "dask_regions"


# ----------------------------------------------------------------------------
# the call's shapes


class CallShapes(Feature):
    """The shapes of a graph's variables for one call (``{variable: shape}``,
    a shape a tuple of ints or None), carried by the graph the call rewrites
    run on.  A variable made by a rewrite has no shape here: no call rewrite
    fires on it."""

    def __init__(self, shapes: dict):
        self.shapes = shapes


def call_shapes(fgraph) -> dict | None:
    """The call's shapes ``fgraph`` carries, or None (compiling: no call yet)."""
    for feature in getattr(fgraph, "features", ()):
        if isinstance(feature, CallShapes):
            return feature.shapes
    return None


# ----------------------------------------------------------------------------
# dask_sum_to_identity


def _sums_nothing(node, shapes: dict) -> bool:
    g, out = node.inputs[0], node.outputs[0]
    return (shapes.get(g) is not None and shapes.get(g) == shapes.get(out)
            and g.type.dtype == out.type.dtype)


def identity_sum_tos(fgraph, shapes: dict) -> dict:
    """``{output: input}`` for every ``sum_to`` of ``fgraph`` that sums nothing
    for ``shapes`` (what :func:`dask_sum_to_identity` replaces)."""
    return {node.outputs[0]: node.inputs[0] for node in fgraph.apply_nodes
            if isinstance(node.op, SumTo) and _sums_nothing(node, shapes)}


@register_node_rewrite("specialize", name=SUM_TO_IDENTITY, tags=(DASK, CALL), default=False)
def dask_sum_to_identity(fgraph, node):
    """``sum_to(g, *dims)`` -> ``g`` where the call's shapes show that ``g``
    has the target shape already (and the dtype): nothing is summed."""
    if not isinstance(node.op, SumTo):
        return None
    shapes = call_shapes(fgraph)
    if shapes is None or not _sums_nothing(node, shapes):
        return None
    return node.inputs[0]


# ----------------------------------------------------------------------------
# dask_spread_alloc


def _may_spread(fgraph, node, outputs: set) -> bool:
    """Whether the graph alone lets ``node`` (an alloc) be spread into its
    readers: it is not an output, keeps its value's dtype, and every reader
    is elementwise."""
    value, out = node.inputs[0], node.outputs[0]
    readers = fgraph.clients.get(out, [])
    return (out not in outputs and value.type.dtype == out.type.dtype and bool(readers)
            and all(isinstance(getattr(r, "op", None), Elemwise) for r, _ in readers))


def _broadcasts_to(shape, want) -> bool:
    if shape is None:
        return False
    try:
        return np.broadcast_shapes(tuple(shape), tuple(want)) == tuple(want)
    except ValueError:
        return False


def spreadable_allocs(fgraph, shapes: dict) -> dict:
    """``{output: value}`` for every ``alloc`` of ``fgraph`` whose readers are
    all elementwise ops to which another input gives their output's shape
    (so the value broadcasts to the same result inside them), for
    ``shapes``.  The allocated shape must broadcast to that shape, so that
    no broadcast error the alloc would raise is lost.  The input that gives
    the shape is never one of the allocs that may be spread: whether one is
    does not depend on the others, nor on the order they are looked at."""
    outputs = set(fgraph.outputs)
    candidates = {node.outputs[0] for node in fgraph.apply_nodes
                  if isinstance(node.op, Alloc) and _may_spread(fgraph, node, outputs)}

    def gets_shape_elsewhere(reader, allocated) -> bool:
        want = shapes.get(reader.outputs[0])
        return want is not None and _broadcasts_to(shapes.get(allocated), want) and any(
            v is not allocated and v not in candidates and shapes.get(v) == want
            for v in reader.inputs)

    found = {}
    for out in candidates:
        if shapes.get(out) is not None and all(gets_shape_elsewhere(reader, out)
                                               for reader, _ in fgraph.clients[out]):
            found[out] = out.owner.inputs[0]
    return found


@register_graph_rewrite("specialize", name=SPREAD_ALLOC, tags=(DASK, CALL), default=False)
def dask_spread_alloc(fgraph) -> bool:
    """Each reader of an alloc that :func:`spreadable_allocs` finds for the
    call's shapes reads the alloc's value instead (the readers are made
    again: their static types follow their new inputs), and the alloc goes."""
    shapes = call_shapes(fgraph)
    spread = spreadable_allocs(fgraph, shapes) if shapes is not None else {}
    if not spread:
        return False
    readers = {reader for out in spread for reader, _ in fgraph.clients[out]}
    made: dict = {}
    pairs = []
    # inputs first: a reader of another reader reads the new one
    for reader in (node for node in fgraph.toposort() if node in readers):
        inputs = [broadcastable(spread[v], v.ndim) if v in spread else made.get(v, v)
                  for v in reader.inputs]
        new = reader.clone_with_new_inputs(inputs)
        made.update(zip(reader.outputs, new.outputs))
        pairs += zip(reader.outputs, new.outputs)
    return fgraph.replace_all_validate(pairs, reason=SPREAD_ALLOC)


# ----------------------------------------------------------------------------
# the lowering choices: names a mode may exclude


@register_node_rewrite("specialize", name=PARTIAL_REDUCTIONS, tags=(DASK, LOWERING),
                       default=False)
def dask_partial_reductions(fgraph, node):
    """A lowering choice (see the module notes): as a rewrite, it never fires."""
    return None


@register_node_rewrite("fuse", name=REGIONS, tags=(DASK, LOWERING), default=False)
def dask_regions(fgraph, node):
    """A lowering choice (see the module notes): as a rewrite, it never fires."""
    return None


# ----------------------------------------------------------------------------
# what a mode selects, and running the call rewrites


def selected(query: Query | None) -> frozenset[str]:
    """The names of the dask rewrites and lowering choices a mode's ``query``
    selects (None: a default mode's), as the module notes say."""
    query = Query() if query is None else query
    names = set()
    for rewrite in registered_rewrites().values():
        labels = rewrite.labels()
        if DASK not in rewrite.tags or labels & query.exclude:
            continue
        if LOWERING in rewrite.tags or labels & query.include or not query.only_included:
            names.add(rewrite.name)
    return frozenset(names)


def fusion_rewrites(query: Query | None) -> frozenset[str]:
    """The fusion rewrites ``query`` selects (run again after a call rewrite)."""
    query = Query() if query is None else query
    return frozenset(r.name for r in registered_rewrites().values()
                     if "fusion" in r.tags and query.selects(r))


def copy_graph(fgraph) -> tuple[FunctionGraph, dict]:
    """A copy of ``fgraph`` over the same inputs (new nodes; constants shared)
    and ``{original variable: its copy}``."""
    equiv = {var: var for var in fgraph.inputs}
    for node in fgraph.toposort():
        new = node.clone_with_new_inputs([equiv.get(v, v) for v in node.inputs])
        equiv.update(zip(node.outputs, new.outputs))
    return FunctionGraph(list(fgraph.inputs), [equiv.get(v, v) for v in fgraph.outputs]), equiv


def rewrite_for_call(fgraph, shapes: dict, names) -> tuple[FunctionGraph, list[str]]:
    """A copy of ``fgraph`` rewritten, for a call of these ``shapes`` (of
    ``fgraph``'s variables), by the rewrites ``names`` (phase by phase, as the
    engine runs them), and the names of those that changed it, in order."""
    copy, equiv = copy_graph(fgraph)
    feature = CallShapes({equiv.get(var, var): shape for var, shape in shapes.items()})
    copy.attach_feature(feature)
    try:
        applied = rewrite_graph(copy, Query(include=frozenset(names), only_included=True))
    finally:
        copy.remove_feature(feature)
    return copy, applied
