"""Which nodes of a graph one Dask task runs together, and in what order.

Dask runs a task per chunk per lowered node; a chunk that goes through ten
elementwise nodes goes through ten tasks, each allocating a fresh array.
The fusion rewrites already merge trees of elementwise nodes, but a value
read twice (``p`` in a loss and in its gradient) ends a tree.  Here the
elementwise nodes a lazy value reaches, and the products of a matrix by a
vector or a matrix that feed them or read them (a block of rows of the
matrix gives the same rows of the result: ``x @ w + b``), are grouped into
*regions*: every node of a region is computed, chunk by chunk, by one
kernel (compiled and fused by tenure, see :class:`~.chunks.ChunkKernel`),
which returns the region's values that other nodes read, and the per-chunk
partials of the reductions over the region's values (the region's
*sinks*), so a value that only a reduction reads is never made whole.  A
product ``x.T @ e`` that sums over the region's rows (the gradient of a
data-parallel step) is a sink too: each chunk gives its partial product.

A region must stay one step of the graph: a node joins the region of one of
the nodes it reads only if none of its other inputs is computed from that
region through a node outside it (a cycle: the region would have to run
before and after that node).  :func:`lowering_order` lists the regions and
the other nodes in an order where each comes after what it reads.

Static: which values are lazy is decided from the graph alone, as
:func:`lazy_variables` says (the inputs with at least one axis, what
``alloc`` makes, and what is computed from those, shapes excepted); the
lowering checks at call time that a region's nodes all have one shape (a
length-1 axis broadcast at run time may break that) and lowers its nodes
one by one when they do not.

Both are lowering choices a mode may switch off by name (see
:mod:`tenure.rewrites.dask_specialize`): ``dask_regions`` (off: no region,
every node is lowered alone) and ``dask_partial_reductions`` (off: no
reduction is a region's sink; each is lowered alone, over whole axes).
"""

from __future__ import annotations

from typing import NamedTuple

from tenure.symbolic.fgraph import OUTPUT
from tenure.symbolic.graph import Apply, Variable
from tenure.symbolic.ops.blas import Dot, MatMul
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import Reduce
from tenure.symbolic.ops.shape import DimShuffle, Shape

__all__ = ["ALWAYS_LAZY", "COMBINED_REDUCTIONS", "Contraction", "Region", "is_rows_product",
           "lazy_variables", "lowering_order", "rows_contraction"]

#: ops lowered to Dask even when every input is concrete (their result may be big)
ALWAYS_LAZY = (Alloc,)

#: reductions whose per-chunk partials Dask's tree combines (``mean`` as sums)
COMBINED_REDUCTIONS = ("sum", "mean", "prod", "max", "min", "any", "all")


class Region(NamedTuple):
    """Elementwise ``nodes`` computed by one kernel per chunk (in graph
    order), the reductions ``sinks`` whose partials it computes too (with
    the ``helpers`` they need: the transposes of a sink product), and the
    ``outputs`` (values of ``nodes``) that something outside reads."""

    nodes: tuple[Apply, ...]
    sinks: tuple[Apply, ...]
    outputs: tuple[Variable, ...]
    helpers: tuple[Apply, ...] = ()

    @property
    def all_nodes(self) -> tuple[Apply, ...]:
        """Every node the region's kernel runs, in an order it may run them."""
        return self.nodes + self.helpers + self.sinks


class Contraction(NamedTuple):
    """A product ``x.T @ e`` summing over the rows of a region: ``x`` (a
    matrix) and ``e`` (a vector of the region) are read by the same blocks
    of rows, each block gives a partial product, and the partials add up.
    ``helpers``: the nodes between them and the product (``x.T``, and
    ``e.dimshuffle(0, "x")`` where the product is written as gradients
    write it), read by nothing else."""

    x: Variable
    e: Variable
    helpers: tuple[Apply, ...]


def rows_contraction(node, clients) -> Contraction | None:
    """``node`` as a :class:`Contraction`, or None.  ``clients(var)``: the
    nodes that read ``var`` (the graph's outputs count as readers too)."""
    if not isinstance(node.op, (Dot, MatMul)):
        return None
    a, b = node.inputs
    transpose = a.owner
    if (transpose is None or not isinstance(transpose.op, DimShuffle)
            or transpose.op.new_order != (1, 0) or clients(a) != [node]):
        return None
    helpers, e = [transpose], b
    column = b.owner
    if (b.ndim == 2 and column is not None and isinstance(column.op, DimShuffle)
            and column.op.new_order == (0, "x") and clients(b) == [node]):
        helpers.append(column)
        e = column.inputs[0]
    if e.ndim != 1:
        return None
    return Contraction(transpose.inputs[0], e, tuple(helpers))


def lazy_variables(fgraph) -> set[Variable]:
    """The variables whose values are Dask arrays when the graph is lowered."""
    lazy = {var for var in fgraph.inputs if var.ndim > 0}
    for node in fgraph.toposort():
        if isinstance(node.op, Shape):
            continue
        if isinstance(node.op, ALWAYS_LAZY) or any(v in lazy for v in node.inputs):
            lazy.update(node.outputs)
    return lazy


def is_rows_product(node) -> bool:
    """A matrix times a vector or a matrix (``dot``, ``matmul``): each block
    of the matrix's rows gives the same rows of the result, from the whole
    of the other operand."""
    return (isinstance(node.op, (Dot, MatMul)) and node.inputs[0].ndim == 2
            and node.inputs[1].ndim in (1, 2))


def _is_member(node, lazy: set) -> bool:
    return ((isinstance(node.op, Elemwise) or is_rows_product(node))
            and node.outputs[0] in lazy)


def _is_reduction_sink(node) -> bool:
    op = node.op
    return (isinstance(op, (Reduce, FusedReduce)) and op.fn_name in COMBINED_REDUCTIONS
            and bool(op.axis))


class _Grouping:
    """Regions grown one node at a time, in graph order (``reduction_sinks``:
    whether a reduction may be a region's sink)."""

    def __init__(self, fgraph, reduction_sinks: bool = True):
        self.fgraph = fgraph
        self.reduction_sinks = reduction_sinks
        self.region_of: dict[Apply, int] = {}
        self.members: dict[int, list[Apply]] = {}
        self.sinks: dict[int, list[Apply]] = {}
        self.helpers: dict[int, list[Apply]] = {}
        #: each node's position in the graph order
        self.placed: dict[Apply, int] = {}
        #: the id of the next new region (never one a merge freed: the
        #: count of regions would be, and a new region would take the
        #: place of a live one)
        self.next_region = 0

    def clients(self, var) -> list:
        return [client for client, _ in self.fgraph.clients.get(var, [])]

    def nodes_of(self, region: int) -> list[Apply]:
        return self.members[region] + self.helpers[region] + self.sinks[region]

    def _inside(self, var, region: int) -> bool:
        """Whether ``var`` is computed inside ``region``'s kernel (a sink's
        result is not: Dask's tree makes it from the kernels' partials)."""
        return (var.owner is not None and self.region_of.get(var.owner) == region
                and var.owner not in self.sinks[region])

    def _needs(self, var, region: int) -> bool:
        """Whether computing ``var`` needs ``region`` to have run.  A value of
        a region needs everything any node of that region reads: the region
        runs as one kernel."""
        stack, seen = [var.owner] if var.owner is not None else [], set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            other = self.region_of.get(node)
            if other == region:
                return True
            nodes = [node] if other is None else self.nodes_of(other)
            stack += [v.owner for n in nodes for v in n.inputs if v.owner is not None]
        return False

    def can_join(self, node, region: int) -> bool:
        """Whether ``node`` may run in ``region`` without a cycle."""
        return not any(self._needs(v, region) for v in node.inputs
                       if not self._inside(v, region))

    def is_sink(self, node) -> bool:
        return self.reduction_sinks and _is_reduction_sink(node)

    def place(self, node, lazy: set) -> None:
        self.placed[node] = len(self.placed)
        if self._place_contraction(node):
            return
        region = None
        if _is_member(node, lazy) or self.is_sink(node):
            region = self._region_for(node)
        if region is None and _is_member(node, lazy):
            region, self.next_region = self.next_region, self.next_region + 1
            self.members[region], self.sinks[region], self.helpers[region] = [], [], []
        if region is not None:
            self.region_of[node] = region
            (self.members if _is_member(node, lazy) else self.sinks)[region].append(node)
        if region is not None and _is_member(node, lazy):
            for other in self._other_regions(node, region):
                if self._can_merge(region, other):
                    self._merge(region, other)

    def _place_contraction(self, node) -> bool:
        """Make ``node`` a sink of the region of its ``e`` if it is a
        :class:`Contraction` over it (with its helpers); whether it did."""
        found = rows_contraction(node, self.clients)
        if found is None or found.e.owner is None:
            return False
        region = self.region_of.get(found.e.owner)
        if (region is None or found.e.owner not in self.members[region]
                or self._needs(found.x, region)
                or any(h in self.region_of for h in found.helpers)):
            return False
        for helper in found.helpers:
            self.region_of[helper] = region
            self.helpers[region].append(helper)
        self.region_of[node] = region
        self.sinks[region].append(node)
        return True

    def _other_regions(self, node, region: int) -> list[int]:
        """The regions other than ``region`` whose members ``node`` reads
        (through its matrix only, for a product) and that have its ndim."""
        found = []
        for var in node.inputs[:1] if is_rows_product(node) else node.inputs:
            other = self.region_of.get(var.owner) if var.owner is not None else None
            if (other is not None and other != region and other not in found
                    and var.owner in self.members[other]
                    and self.members[other][0].outputs[0].ndim == node.outputs[0].ndim):
                found.append(other)
        return found

    def _can_merge(self, region: int, other: int) -> bool:
        """Whether one kernel may run both regions: neither reads the other
        through a node outside both."""
        def reads_through_outside(readers: int, read: int) -> bool:
            return any(self._needs(v, read)
                       for node in self.nodes_of(readers)
                       for v in node.inputs
                       if not self._inside(v, readers) and not self._inside(v, read))
        return (not reads_through_outside(region, other)
                and not reads_through_outside(other, region))

    def _merge(self, region: int, other: int) -> None:
        """Move ``other``'s nodes into ``region`` (in graph order: the kernel's
        steps are built in that order)."""
        for node in self.nodes_of(other):
            self.region_of[node] = region
        for nodes in (self.members, self.helpers, self.sinks):
            nodes[region] = sorted(nodes[region] + nodes.pop(other), key=self.placed.get)

    def _region_for(self, node) -> int | None:
        ndim = None if self.is_sink(node) else node.outputs[0].ndim
        # A product joins the region of its matrix only: the other operand is
        # read whole, not by blocks of the region's shape.
        for var in node.inputs[:1] if is_rows_product(node) else node.inputs:
            region = self.region_of.get(var.owner) if var.owner is not None else None
            if region is None or var.owner in self.sinks[region]:
                continue
            if ndim is not None and self.members[region][0].outputs[0].ndim != ndim:
                continue
            if self.can_join(node, region):
                return region
        return None


def _regions(fgraph, reduction_sinks: bool = True) -> tuple[dict[Apply, Region], list[Region]]:
    lazy = lazy_variables(fgraph)
    grouping = _Grouping(fgraph, reduction_sinks)
    for node in fgraph.toposort():
        grouping.place(node, lazy)
    by_node, regions = {}, []
    for region_id, nodes in grouping.members.items():
        sinks, helpers = grouping.sinks[region_id], grouping.helpers[region_id]
        if len(nodes) < 2 and not sinks:
            continue
        inside = set(nodes) | set(sinks) | set(helpers)
        outputs = tuple(out for node in nodes for out in node.outputs
                        if any(client is OUTPUT or client not in inside
                               for client, _ in fgraph.clients.get(out, [])))
        region = Region(tuple(nodes), tuple(sinks), outputs, tuple(helpers))
        regions.append(region)
        by_node.update((node, region) for node in inside)
    return by_node, regions


def lowering_order(fgraph, regions: bool = True, reduction_sinks: bool = True) -> list:
    """The regions of ``fgraph`` and its other nodes (:class:`Apply`), each
    after every node and region it reads from.  ``regions=False``: the nodes
    alone, in graph order; ``reduction_sinks=False``: no reduction is a
    region's sink."""
    if not regions:
        return list(fgraph.toposort())
    by_node, _ = _regions(fgraph, reduction_sinks)
    unit_of = {node: by_node.get(node, node) for node in fgraph.apply_nodes}

    def dependencies(unit) -> list:
        nodes = unit.all_nodes if isinstance(unit, Region) else (unit,)
        found = []
        for node in nodes:
            for var in node.inputs:
                owner = unit_of.get(var.owner) if var.owner is not None else None
                if owner is not None and owner is not unit and owner not in found:
                    found.append(owner)
        return found

    order, done = [], set()
    for start in fgraph.toposort():
        stack = [(unit_of[start], None)]
        while stack:
            unit, pending = stack.pop()
            if id(unit) in done:
                continue
            if pending is None:
                pending = [d for d in dependencies(unit) if id(d) not in done]
            if pending:
                stack.append((unit, pending[1:]))
                stack.append((pending[0], None))
                continue
            done.add(id(unit))
            order.append(unit)
    return order
