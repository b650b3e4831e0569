"""What overwrites what: views, destroyers, the orderings they impose, and the
:class:`DestroyHandler` that refuses graphs breaking the memory contract.

Ops declare ``view_map`` (an output may be a view of an input) and
``destroy_map`` (an output is written into an input's buffer).  Two notions
follow:

- the *root* of a variable: the buffer it may share memory with, following
  views and in-place writes (what aliasing analysis needs);
- the *version* of a variable: following views only.  An in-place op reads
  one version of a buffer and produces the next; readers of the old version
  must run before it, and nothing may read the old version after it.

A graph is valid when no version is overwritten by two nodes, no protected
buffer is overwritten (constants, inputs that are not mutable, shared
variables that are not updated), no result returned or assigned is a version
that gets overwritten, and the "readers first" orderings have no cycle.
"""

from __future__ import annotations

from tenure.symbolic.fgraph import Feature, InconsistencyError
from tenure.symbolic.graph import Apply, Constant, Variable


def view_chain(var: Variable) -> tuple[list[Apply], Variable]:
    """The nodes through which ``var`` is a view (or in-place result) of another
    buffer, and that buffer's own variable (its *view root*)."""
    chain = []
    while var.owner is not None:
        op = var.owner.op
        targets = op.view_map.get(var.index) or op.destroy_map.get(var.index)
        if not targets:
            break
        if len(targets) != 1:
            raise NotImplementedError(f"{op}: an output viewing several inputs is not supported")
        chain.append(var.owner)
        var = var.owner.inputs[targets[0]]
    return chain, var


def view_root(var: Variable) -> Variable:
    """The variable whose buffer ``var`` may be (through views and in-place ops)."""
    return view_chain(var)[1]


def version_of(var: Variable) -> Variable:
    """The variable whose contents ``var`` shows: follows views, not in-place writes."""
    while var.owner is not None:
        targets = var.owner.op.view_map.get(var.index)
        if not targets:
            break
        var = var.owner.inputs[targets[0]]
    return var


def buffer_roots(ordered_nodes, variables=()) -> dict[Variable, Variable]:
    """:func:`view_root` of every output of ``ordered_nodes`` (a topological
    order) and of ``variables``, in one pass: long in-place chains would make
    one walk per variable quadratic."""
    roots: dict[Variable, Variable] = {}
    for node in ordered_nodes:
        op = node.op
        for k, out in enumerate(node.outputs):
            targets = op.view_map.get(k) or op.destroy_map.get(k)
            if targets:
                source = node.inputs[targets[0]]
                roots[out] = roots.get(source, source)
            else:
                roots[out] = out
    for var in variables:
        roots.setdefault(var, var)
    return roots


def destroyers(nodes) -> dict[Variable, Apply]:
    """Every version that some node overwrites, with that node.

    Raises :class:`InconsistencyError` when one version is overwritten by two
    nodes: whichever ran second would read clobbered data.
    """
    found: dict[Variable, Apply] = {}
    for node in nodes:
        for inputs in node.op.destroy_map.values():
            for i in inputs:
                version = version_of(node.inputs[i])
                if found.get(version, node) is not node:
                    raise InconsistencyError(
                        f"the buffer of {version} is overwritten by two nodes: "
                        f"{found[version]} and {node}")
                found[version] = node
    return found


def destroy_orderings(nodes) -> dict[Apply, set[Apply]]:
    """``{destroyer: readers}``: every other reader of a version it overwrites
    (directly or through a view) must run before it."""
    found = destroyers(nodes)
    if not found:
        return {}
    orderings: dict[Apply, set[Apply]] = {}
    for node in nodes:
        for inp in node.inputs:
            destroyer = found.get(version_of(inp))
            if destroyer is not None and destroyer is not node:
                orderings.setdefault(destroyer, set()).add(node)
    return orderings


def order_with_constraints(base: list[Apply], extra: dict[Apply, set[Apply]]) -> list[Apply]:
    """A topological order of ``base`` (a valid order) that also puts every node
    of ``extra[n]`` before ``n``; ties keep ``base``'s order.  Raises
    :class:`InconsistencyError` on a cycle."""
    import heapq
    if not extra:
        return base
    position = {node: i for i, node in enumerate(base)}
    preds: dict[Apply, set[Apply]] = {node: set() for node in base}
    for node in base:
        for inp in node.inputs:
            if inp.owner in preds:
                preds[node].add(inp.owner)
        preds[node] |= {p for p in extra.get(node, ()) if p in preds}
    succs: dict[Apply, list[Apply]] = {node: [] for node in base}
    for node, before in preds.items():
        for p in before:
            succs[p].append(node)
    waiting = {node: len(before) for node, before in preds.items()}
    ready = [(position[n], n) for n in base if waiting[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for nxt in succs[node]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, (position[nxt], nxt))
    if len(order) != len(base):
        stuck = [n for n in base if waiting[n] > 0]
        raise InconsistencyError(
            "in-place operations cannot be ordered: a buffer would be overwritten before all "
            f"of its readers ran (nodes involved: {stuck[:4]})")
    return order


class DestroyHandler(Feature):
    """Guards every destructive op in a FunctionGraph.

    ``mutable``: the graph inputs the caller gave away (``In(mutable=True)``);
    ``updated``: the shared variables this function assigns.  Every other
    input, every constant, and every result the graph returns or assigns is
    protected.  ``validate`` raises :class:`InconsistencyError` (a
    ``ValueError``) naming the offending node; ``orderings`` tells the
    schedule to run readers before destroyers.
    """

    def __init__(self, mutable=(), updated=()):
        self.mutable = set(mutable)
        self.updated = set(updated)
        #: the nodes that overwrite an input, kept up to date by the hooks below
        self.destroying: set[Apply] = set()

    def on_attach(self, fgraph) -> None:
        self.destroying = {n for n in fgraph.apply_nodes if n.op.destroy_map}

    def on_import(self, fgraph, node, reason) -> None:
        if node.op.destroy_map:
            self.destroying.add(node)

    def on_prune(self, fgraph, node, reason) -> None:
        self.destroying.discard(node)

    def orderings(self, fgraph) -> dict[Apply, set[Apply]]:
        return destroy_orderings(fgraph.apply_nodes) if self.destroying else {}

    def validate(self, fgraph) -> None:
        if not self.destroying:
            return  # nothing overwrites anything: nothing to check
        found = destroyers(self.destroying)
        order = fgraph.toposort()
        roots = buffer_roots(order, fgraph.inputs)
        inputs = set(fgraph.inputs)
        for version, node in found.items():
            root = roots.get(version, version)
            if isinstance(root, Constant):
                raise InconsistencyError(f"{node} would overwrite constant {root}")
            if root in inputs and root not in self.mutable and root not in self.updated:
                if type(root).__name__ == "SharedVariable":
                    raise InconsistencyError(f"{node} would overwrite shared variable {root}, "
                                             "which this function does not update")
                raise InconsistencyError(f"{node} would overwrite input {root}, which is not "
                                         "In(..., borrow=True, mutable=True)")
        for k, out in enumerate(fgraph.outputs):
            version = version_of(out)
            if version in found:
                raise InconsistencyError(f"{found[version]} would overwrite the buffer of "
                                         f"{version}, which result #{k} ({out}) returns or "
                                         "assigns")
        order_with_constraints(order, destroy_orderings(fgraph.apply_nodes))
