"""Row fusion: a matrix region whose row reductions feed back into its
elementwise work becomes one :class:`~tenure.symbolic.ops.rowwise.RowProgram`.

Phase ``"rows"``, after ``"fuse"`` has settled (its composites and fused
reductions are taken as they are, and its allocs read as broadcasts are
gone); name ``fuse_rows``, tag ``"fusion"``.

Which nodes.  A node may join a region when its op is a step a row program
holds (:func:`~tenure.symbolic.ops.rowwise.step_allowed`: elementwise ops,
reductions along the rows with ``keepdims`` or down the columns, ``sum_to``,
``expand_to``) and its values, of a dtype with C code, have at most
:data:`~tenure.symbolic.ops.rowwise.MAX_NDIM` dimensions.  Its *frame* is the
most dimensions one of them has: the rows are the index tuples of the
frame's leading axes, the columns its last.  Regions are the connected
groups of such nodes of one frame, linked by the values one makes and
another reads -- but a column reduction's result links nothing:
it is only ever an output (every row goes into it, so nothing in the same
pass over the rows can read it).

Which regions.  Only those where a row reduction is read inside the region:
that is the chain a row program runs in one go.  A region without one is
already a single pass (a fused elementwise op or reduction).

Cycles.  A region must be convex: no path leaves it and comes back (an op
outside reading a region value and feeding another region node).  Such a
returning node and everything in the region after it leave the region,
which is then looked at again.

The node's outputs are the region values read outside it or returned.
"""

from __future__ import annotations

from tenure.rewrites.engine import register_graph_rewrite
from tenure.symbolic.fgraph import OUTPUT
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.creation import ExpandTo
from tenure.symbolic.ops.reduce import Reduce, SumTo
from tenure.symbolic.ops.rowwise import (COLUMN, MAX_NDIM, ROW, RowProgram, reduction_kind,
                                         step_allowed)

__all__ = ["frame", "fuse_rows", "row_regions"]

#: the dtypes a row program's values may have (the C kernel's)
_DTYPES = ("float32", "float64", "bool", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64")
#: a row program's values are floats where it reduces (its C sums them)
_REDUCED_DTYPES = ("float32", "float64")


def frame(node) -> int:
    """The dimensions of the matrix ``node`` works on: the most any of its
    values has (a region's nodes all have one frame)."""
    return max(v.ndim for v in node.inputs + node.outputs)


def _joins(node) -> bool:
    """Whether ``node`` may be a step of a row region."""
    if not step_allowed(node.op) or len(node.outputs) != 1:
        return False
    out, nd = node.outputs[0], frame(node)
    if not 2 <= nd <= MAX_NDIM or out.ndim < 1 or out.dtype not in _DTYPES:
        return False
    if any(v.dtype not in _DTYPES or not _whole_rows(v, nd) for v in node.inputs):
        return False
    kind = reduction_kind(node.op, nd)
    if kind is not None:
        # over an axis an input spans (else the kernels would decline every
        # call: a reduction over a length 1)
        spanned = [_spans_columns(v) if kind == ROW else _spans_rows(v, nd)
                   for v in node.inputs]
        return out.dtype in _REDUCED_DTYPES and any(spanned)
    if type(node.op) is Reduce or isinstance(node.op, FusedReduce) or not _spans_rows(out, nd):
        # (a reduction over other axes; or a value that spans not every
        # row: the same for several rows, it is computed apart, an input of
        # the region -- as an output of it, several rows would write it)
        return False
    if type(node.op) is SumTo:
        # a sum_to with the same columns in and out (row programs decline
        # at run time one that sums)
        return (node.inputs[0].ndim == nd and len(node.inputs) == nd + 1
                and _spans_columns(node.inputs[0]) == _spans_columns(out))
    if type(node.op) is ExpandTo:
        return len(node.inputs) == nd + 1
    return True


def _spans_columns(var) -> bool:
    return var.ndim >= 1 and var.type.shape[-1] != 1


def _whole_rows(var, nd: int) -> bool:
    """Whether ``var`` spans all the rows of an ``nd``-d frame or none, as
    far as its static shape tells (a ``(seq, d)`` table read by a ``(batch,
    seq, d)`` op spans some: every call would decline)."""
    lead = ((1,) * (nd - var.ndim) + tuple(var.type.shape))[:-1] if var.ndim else ()
    return all(length == 1 for length in lead) or all(length != 1 for length in lead)


def _spans_rows(var, nd: int) -> bool:
    """Whether ``var`` spans every row of an ``nd``-d frame: all its leading
    axes (a value broadcast along some of them is not a region's)."""
    return var.ndim == nd and all(length != 1 for length in var.type.shape[:-1])


def _is_column(node) -> bool:
    return reduction_kind(node.op, frame(node)) == COLUMN


def row_regions(fgraph) -> list[list]:
    """The regions :func:`fuse_rows` would fuse, each a list of nodes in
    the schedule's order."""
    order = fgraph.toposort()
    position = {node: i for i, node in enumerate(order)}
    refused: set = set()
    while True:
        regions = _components(fgraph, order, refused)
        bad = set()
        for region in regions:
            bad |= _returning(fgraph, region, position)
        if not bad:
            return [sorted(r, key=position.__getitem__) for r in regions if _feeds_back(fgraph, r)]
        refused |= bad


def _components(fgraph, order, refused) -> list[set]:
    """The connected groups of joinable nodes (a column reduction's result links nothing)."""
    parent: dict = {}

    def find(node):
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for node in order:
        if node not in refused and _joins(node):
            parent[node] = node
    for node in parent:
        for var in node.inputs:
            producer = var.owner
            if (producer in parent and not _is_column(producer)
                    and frame(producer) == frame(node)):
                a, b = find(node), find(producer)
                if a is not b:
                    parent[a] = b
    groups: dict = {}
    for node in parent:
        groups.setdefault(find(node), set()).add(node)
    return [g for g in groups.values() if len(g) > 1]


def _returning(fgraph, region: set, position: dict) -> set:
    """The region's nodes that must leave it: those that read (through nodes
    outside) a value the region makes, and every region node after them."""
    outside_below: set = set()     # nodes outside the region that depend on it
    bad: set = set()
    for node in sorted(_below(fgraph, region), key=position.__getitem__):
        if node in region:
            if any(v.owner in outside_below or v.owner in bad for v in node.inputs):
                bad.add(node)
        else:
            outside_below.add(node)
    for node in region:
        if _is_column(node) and any(c in region for c, _ in _readers(fgraph, node)):
            bad.add(node)   # its readers then return through it
    return bad


def _below(fgraph, region: set) -> set:
    """Every node that depends on a region node (the region's own included)."""
    seen: set = set()
    stack = list(region)
    while stack:
        node = stack.pop()
        for out in node.outputs:
            for client, _ in fgraph.clients.get(out, ()):
                if client != OUTPUT and client not in seen:
                    seen.add(client)
                    stack.append(client)
    return seen | region


def _readers(fgraph, node) -> list:
    return [(c, i) for out in node.outputs for c, i in fgraph.clients.get(out, ())]


def _feeds_back(fgraph, region: set) -> bool:
    """Whether a row reduction of the region is read inside it."""
    return any(reduction_kind(node.op, frame(node)) == ROW
               and any(c in region for c, _ in _readers(fgraph, node)) for node in region)


def build_program(fgraph, nodes: list) -> tuple[RowProgram, list, list]:
    """``(op, inputs, replaced)``: the row program of ``nodes`` (in schedule
    order), its inputs, and the region values its outputs replace."""
    members = {node: j for j, node in enumerate(nodes)}
    inputs: list = []
    index: dict = {}
    steps = []
    for node in nodes:
        refs = []
        for var in node.inputs:
            if var.owner in members:
                refs.append(("s", members[var.owner]))
            else:
                if var not in index:
                    index[var] = len(inputs)
                    inputs.append(var)
                refs.append(("i", index[var]))
        steps.append((node.op, tuple(refs)))
    outputs, replaced = [], []
    for node in nodes:
        out = node.outputs[0]
        if any(c == OUTPUT or c not in members for c, _ in fgraph.clients.get(out, ())):
            outputs.append(members[node])
            replaced.append(out)
    return RowProgram(tuple(steps), tuple(outputs)), inputs, replaced


@register_graph_rewrite("rows", name="fuse_rows", tags=("fusion",))
def fuse_rows(fgraph) -> bool:
    """Each region of :func:`row_regions` becomes one :class:`RowProgram` node."""
    changed = False
    for nodes in row_regions(fgraph):
        if any(node not in fgraph.apply_nodes for node in nodes):
            continue
        op, inputs, replaced = build_program(fgraph, nodes)
        if not replaced:
            continue
        new = op(*inputs)
        new = new if isinstance(new, (list, tuple)) else [new]
        if any(a.type != b.type for a, b in zip(replaced, new)):
            continue    # never expected: refuse rather than change a type
        if fgraph.replace_all_validate(list(zip(replaced, new)), reason="fuse_rows"):
            changed = True
    return changed
