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
:class:`CallGraphs` uses them to rebuild the graph for the call:

- a ``sum_to`` whose input already has the target shape (and dtype) is its
  input;
- the fusion rewrites then merge the elementwise pieces those nodes split;
- an ``alloc`` every reader of which is an elementwise op that gets the
  allocated shape from another input is replaced by its value (broadcasting
  inside the kernel gives the same result, and nothing chunk-sized is made);
  only where the allocated shape broadcasts to the reader's, so that the
  broadcast error the alloc would raise is not lost.

Exact: each replacement stands for a value equal to the original's, for
these shapes.  Rebuilt graphs are kept per set of replacements, so calls
with the same shapes (every call of a training loop) reuse one graph and
the workers one set of compiled kernels.
"""

from __future__ import annotations

import math

import numpy as np

from tenure.linkers.dask.chunks import FUSION
from tenure.rewrites.engine import rewrite_graph
from tenure.symbolic.fgraph import FunctionGraph
from tenure.rewrites.sizes import SizeModel, placeholder
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import SumTo
from tenure.symbolic.ops.shape import DimShuffle

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


def _rebuild(fgraph, alias: dict, swap: dict | None = None) -> FunctionGraph:
    """A copy of ``fgraph`` (same inputs) in which each node output that is a
    key of ``alias`` is replaced by (the copy of) the variable it maps to,
    and each node that is a key of ``swap`` applies that op instead."""
    equiv = {var: var for var in fgraph.inputs}
    swap = swap or {}
    for node in fgraph.toposort():
        inputs = [equiv.get(v, v) for v in node.inputs]
        if node.outputs[0] in alias:
            equiv[node.outputs[0]] = _broadcastable(equiv.get(alias[node.outputs[0]],
                                                              alias[node.outputs[0]]),
                                                    node.outputs[0].ndim)
            continue
        if node in swap:
            new = swap[node].make_node(*inputs)
        else:
            new = node.clone_with_new_inputs(inputs)
        equiv.update(zip(node.outputs, new.outputs))
    return FunctionGraph(list(fgraph.inputs), [equiv.get(v, v) for v in fgraph.outputs])


def _broadcastable(value, ndim: int):
    """``value`` with leading length-1 axes up to ``ndim`` (as broadcasting reads it)."""
    if value.ndim == ndim:
        return value
    pad = ndim - value.ndim
    return DimShuffle(value.ndim, ("x",) * pad + tuple(range(value.ndim)))(value)


def identity_sum_tos(fgraph, shapes: dict) -> dict:
    """``{output: input}`` for every ``sum_to`` that sums nothing for ``shapes``."""
    found = {}
    for node in fgraph.apply_nodes:
        if not isinstance(node.op, SumTo):
            continue
        g, out = node.inputs[0], node.outputs[0]
        if shapes.get(g) is not None and shapes.get(g) == shapes.get(out) \
                and g.type.dtype == out.type.dtype:
            found[out] = g
    return found


def spread_allocs(fgraph, shapes: dict) -> dict:
    """``{output: value}`` for every ``alloc`` whose readers are all
    elementwise ops that another input gives the allocated shape (so the
    value broadcasts to the same result inside them)."""
    found = {}
    outputs = set(fgraph.outputs)
    for node in fgraph.apply_nodes:
        if not isinstance(node.op, Alloc):
            continue
        value, out = node.inputs[0], node.outputs[0]
        if out in outputs or value.type.dtype != out.type.dtype or shapes.get(out) is None:
            continue
        readers = fgraph.clients.get(out, [])
        if readers and all(_gets_shape_elsewhere(reader, out, shapes, found)
                           for reader, _ in readers):
            found[out] = value
    return found


def _gets_shape_elsewhere(reader, allocated, shapes: dict, replaced: dict) -> bool:
    """Whether ``reader`` is elementwise, another of its inputs has its
    output's shape, and the allocated shape broadcasts to that shape: the
    alloc then adds nothing, and dropping it drops no check (an output
    shape taken from a static length must not hide an alloc of another)."""
    if not isinstance(getattr(reader, "op", None), Elemwise):
        return False
    want = shapes.get(reader.outputs[0])
    return want is not None and _broadcasts_to(shapes.get(allocated), want) and any(
        v is not allocated and v not in replaced and shapes.get(v) == want
        for v in reader.inputs)


def _broadcasts_to(shape, want) -> bool:
    if shape is None:
        return False
    try:
        return np.broadcast_shapes(tuple(shape), tuple(want)) == tuple(want)
    except ValueError:
        return False


def out_of_place(fgraph):
    """``fgraph``, with each in-place elementwise op (one written into the
    graph by hand: the dask mode runs no in-place rewrite) replaced by its
    out-of-place twin (same inputs, a new output); ``fgraph`` itself when
    there is none.  Chunk kernels must not write a chunk Dask holds."""
    twins = {node: Elemwise(node.op.scalar_op) for node in fgraph.apply_nodes
             if isinstance(node.op, Elemwise) and node.op.inplace_pattern}
    return _rebuild(fgraph, {}, twins) if twins else fgraph


class CallGraphs:
    """The graph to lower for a call's values (see the module notes)."""

    def __init__(self, fgraph):
        self.fgraph = fgraph
        self.has_candidates = any(isinstance(n.op, (SumTo, Alloc)) for n in fgraph.apply_nodes)
        self.sizes = SizeModel(fgraph) if self.has_candidates else None
        self._rebuilt: dict = {}

    def for_values(self, values: list) -> FunctionGraph:
        """The graph to lower for ``values`` (the thunk's lazy inputs)."""
        if not self.has_candidates:
            return self.fgraph
        stand_ins = _shape_values(self.fgraph, values)
        if stand_ins is None:
            return self.fgraph
        shapes = self.sizes.shapes(stand_ins)
        sum_tos = identity_sum_tos(self.fgraph, shapes)
        key = frozenset(sum_tos)
        graphs = self._rebuilt.get(key)
        if graphs is None:
            graphs = self._rebuilt[key] = self._rebuild_for(sum_tos, stand_ins)
        fused, fused_sizes, alloc_graphs = graphs
        if fused_sizes is None:
            return fused
        allocs = spread_allocs(fused, fused_sizes.shapes(stand_ins))
        if not allocs:
            return fused
        key = frozenset(allocs)
        if key not in alloc_graphs:
            alloc_graphs[key] = _rebuild(fused, allocs)
        return alloc_graphs[key]

    def _rebuild_for(self, sum_tos: dict, stand_ins: list):
        fused = _rebuild(self.fgraph, sum_tos) if sum_tos else self.fgraph
        if sum_tos:
            rewrite_graph(fused, FUSION)
        has_allocs = any(isinstance(n.op, Alloc) for n in fused.apply_nodes)
        return fused, SizeModel(fused) if has_allocs else None, {}
