"""The graph a call lowers: the function's graph, specialised to the call's shapes.

A gradient graph is full of ``sum_to(g, *dims)`` nodes (the adjoint of
broadcasting) that sum nothing unless some length turns out to be 1 at run
time, and of ``alloc(v, *dims)`` nodes that spread a value over an array
only for the next elementwise op to read it.  Compiling cannot remove them
(tenure broadcasts a length-1 axis found at run time, as NumPy does), and on
the C linker they cost little.  Lowered to Dask they cost a lot: each one
splits the fused elementwise loops around it, so a chunk goes through a
chain of small tasks, each allocating a fresh chunk-sized array.

A call knows every shape before it lowers anything (the inputs' shapes, and
the ops' ``infer_shape`` through :class:`~tenure.rewrites.sizes.SizeModel`).
:class:`CallGraphs` uses them to rewrite the graph for the call, with the
dask linker's call rewrites (named, in :mod:`tenure.rewrites.dask_specialize`,
each switched off by excluding its name from the mode):

- ``dask_sum_to_identity``: a ``sum_to`` whose input already has the target
  shape (and dtype) is its input;
- the mode's fusion rewrites then merge the elementwise pieces those nodes
  split;
- ``dask_spread_alloc``: an ``alloc`` every reader of which is an
  elementwise op that gets the allocated shape from another input is
  replaced, in those readers, by its value (broadcasting inside the kernel
  gives the same result, and nothing chunk-sized is made); only where the
  allocated shape broadcasts to the reader's, so that the broadcast error
  the alloc would raise is not lost.

Exact: each replacement stands for a value equal to the original's, for
these shapes.  Rewritten graphs are kept per set of replacements, so calls
with the same shapes (every call of a training loop) reuse one graph and
the workers one set of compiled kernels.
"""

from __future__ import annotations

import math

import numpy as np

from tenure.rewrites.dask_specialize import (SPREAD_ALLOC, SUM_TO_IDENTITY, fusion_rewrites,
                                             identity_sum_tos, rewrite_for_call, selected,
                                             spreadable_allocs)
from tenure.rewrites.sizes import SizeModel, placeholder
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import SumTo

__all__ = ["CallGraphs", "out_of_place"]


def _shape_values(fgraph, values) -> list | None:
    """Stand-ins for the call's values that ``SizeModel`` can read shapes from
    (a Dask array becomes a zero-byte placeholder of its shape); None when a
    shape is not known (a Dask array with unknown chunk lengths)."""
    out = []
    for var, value in zip(fgraph.inputs, values):
        if isinstance(value, np.ndarray) or np.isscalar(value):
            out.append(value)
            continue
        shape = tuple(value.shape)
        if any(isinstance(n, float) and math.isnan(n) for n in shape):
            return None
        out.append(placeholder(var, tuple(int(n) for n in shape)))
    return out


def _rebuild(fgraph, swap: dict) -> FunctionGraph:
    """A copy of ``fgraph`` (same inputs) in which each node that is a key of
    ``swap`` applies that op instead."""
    equiv = {var: var for var in fgraph.inputs}
    for node in fgraph.toposort():
        inputs = [equiv.get(v, v) for v in node.inputs]
        if node in swap:
            new = swap[node].make_node(*inputs)
        else:
            new = node.clone_with_new_inputs(inputs)
        equiv.update(zip(node.outputs, new.outputs))
    return FunctionGraph(list(fgraph.inputs), [equiv.get(v, v) for v in fgraph.outputs])


def out_of_place(fgraph):
    """``fgraph``, with each in-place elementwise op (one written into the
    graph by hand: the dask mode runs no in-place rewrite) replaced by its
    out-of-place twin (same inputs, a new output); ``fgraph`` itself when
    there is none.  Chunk kernels must not write a chunk Dask holds."""
    twins = {node: Elemwise(node.op.scalar_op) for node in fgraph.apply_nodes
             if isinstance(node.op, Elemwise) and node.op.inplace_pattern}
    return _rebuild(fgraph, twins) if twins else fgraph


class CallGraphs:
    """The graph to lower for a call's values (see the module notes).

    ``query``: the mode's (None: a default mode's), which selects the call
    rewrites and the fusion rewrites run after them.  :attr:`rewrites_applied`:
    for each graph made for calls, the names of the rewrites that changed it,
    in order."""

    def __init__(self, fgraph, query=None):
        self.fgraph = fgraph
        enabled = selected(query)
        self.sum_to = SUM_TO_IDENTITY in enabled and any(
            isinstance(n.op, SumTo) for n in fgraph.apply_nodes)
        self.spread = SPREAD_ALLOC in enabled
        self.fusion = fusion_rewrites(query)
        self.has_candidates = self.sum_to or (self.spread and any(
            isinstance(n.op, Alloc) for n in fgraph.apply_nodes))
        self.sizes = SizeModel(fgraph) if self.has_candidates else None
        self._rebuilt: dict = {}
        self.rewrites_applied: dict[FunctionGraph, list[str]] = {}

    def for_values(self, values: list) -> FunctionGraph:
        """The graph to lower for ``values`` (the thunk's lazy inputs)."""
        if not self.has_candidates:
            return self.fgraph
        stand_ins = _shape_values(self.fgraph, values)
        if stand_ins is None:
            return self.fgraph
        shapes = self.sizes.shapes(stand_ins)
        sum_tos = identity_sum_tos(self.fgraph, shapes) if self.sum_to else {}
        key = frozenset(sum_tos)
        graphs = self._rebuilt.get(key)
        if graphs is None:
            graphs = self._rebuilt[key] = self._rewrite_for(shapes, sum_tos)
        fused, fused_sizes, alloc_graphs = graphs
        if fused_sizes is None:
            return fused
        fused_shapes = shapes if fused is self.fgraph else fused_sizes.shapes(stand_ins)
        allocs = spreadable_allocs(fused, fused_shapes)
        if not allocs:
            return fused
        key = frozenset(allocs)
        if key not in alloc_graphs:
            alloc_graphs[key] = self._rewrite(fused, fused_shapes, {SPREAD_ALLOC})
        return alloc_graphs[key]

    def _rewrite(self, fgraph, shapes: dict, names) -> FunctionGraph:
        graph, applied = rewrite_for_call(fgraph, shapes, names)
        self.rewrites_applied[graph] = self.rewrites_applied.get(fgraph, []) + applied
        return graph

    def _rewrite_for(self, shapes: dict, sum_tos: dict):
        """The graph without the ``sum_to`` nodes of ``sum_tos`` (fused again),
        and what the alloc rewrite needs: its sizes and the graphs it makes."""
        fused = self.fgraph
        if sum_tos:
            fused = self._rewrite(self.fgraph, shapes, {SUM_TO_IDENTITY} | self.fusion)
        has_allocs = self.spread and any(isinstance(n.op, Alloc) for n in fused.apply_nodes)
        if not has_allocs:
            return fused, None, {}
        return fused, self.sizes if fused is self.fgraph else SizeModel(fused), {}
