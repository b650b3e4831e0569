"""In-place insertion: make ops write their result into an input's buffer
wherever the DestroyHandler proves nobody else needs that buffer.

Runs last among the value-changing phases ("inplace"), after fusion, so fused
elementwise loops are made in-place too.  Each candidate is tried through
``replace_all_validate``: the DestroyHandler refuses it when the buffer is
protected (a constant, an input the caller did not give away, a shared
variable that is not updated, a result the caller receives) or when its other
readers cannot all run first; the change is then rolled back and the next
candidate tried.

What this buys: an elementwise chain reuses one buffer instead of allocating
one per step, a mutable input (``In(x, borrow=True, mutable=True)``) serves
as workspace, and an update ``(w, w - lr * g)`` is computed in ``w``'s own
buffer.
"""

from __future__ import annotations

from tenure.rewrites.destroy import (DestroyHandler, buffer_roots, destroy_orderings, destroyers,
                                    order_with_constraints, version_of)
from tenure.rewrites.engine import register_graph_rewrite
from tenure.symbolic.graph import Apply, Constant, Variable
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.subtensor_update import _IncSubtensorBase


def _candidate_inputs(fgraph, node: Apply) -> list[int]:
    """Inputs of an Elemwise node that could hold its output, best first.

    The buffer must have the output's exact type, must not be a constant, and
    no *other* input of the same node may show the same buffer (writing one
    position while reading another of the same memory would clobber it).
    A shared variable being updated comes first (its update then lands in its
    own buffer, which stays the storage), then inputs that nothing else reads:
    reusing them frees a buffer without forcing any reader to move.
    """
    handler = next((f for f in fgraph.features if isinstance(f, DestroyHandler)), None)
    updated = handler.updated if handler else set()
    out_type = node.outputs[0].type
    candidates = []
    for i, inp in enumerate(node.inputs):
        if isinstance(inp, Constant) or inp.type != out_type:
            continue
        version = version_of(inp)
        if any(j != i and other is not inp and version_of(other) is version
               for j, other in enumerate(node.inputs)):
            continue
        others = len([c for c in fgraph.readers(inp) if c is not node])
        candidates.append((inp not in updated, others, i))
    return [i for *_, i in sorted(candidates)]


class _LocalCheck:
    """A fast, conservative test that overwriting a buffer is allowed.

    The DestroyHandler's full validation looks at the whole graph; doing it
    after every candidate makes this pass quadratic or worse on large graphs
    (a gradient graph has thousands of nodes).  This check looks only at the
    candidate: the buffer is not protected, not already overwritten, not
    returned, and every other reader of it is an *ancestor* of the node (so it
    runs first in any order and no ordering cycle can appear).  The pass then
    validates once, for all its changes together.
    """

    def __init__(self, fgraph):
        handler = next((f for f in fgraph.features if isinstance(f, DestroyHandler)), None)
        self.fgraph = fgraph
        self.mutable = handler.mutable if handler else set()
        self.updated = handler.updated if handler else set()
        self.inputs = set(fgraph.inputs)
        #: an order respecting every data edge and every existing ordering
        #: constraint; a new constraint that points forward in it keeps the
        #: graph acyclic
        self.order = order_with_constraints(fgraph.toposort(),
                                            destroy_orderings(fgraph.apply_nodes))
        self.position = {node: k for k, node in enumerate(self.order)}
        self.roots = buffer_roots(self.order, fgraph.inputs)
        self.destroyed = set(destroyers(fgraph.apply_nodes))

    def allows(self, node: Apply, i: int) -> bool:
        version = version_of(node.inputs[i])
        if version in self.destroyed:
            return False
        root = self.roots.get(version, version)
        if isinstance(root, Constant):
            return False
        if root in self.inputs and root not in self.mutable and root not in self.updated:
            return False
        if any(version_of(out) is version for out in self.fgraph.outputs):
            return False
        # Each other reader must run before `node`: fine when it already comes
        # earlier in the order (the new constraint points forward).
        here = self.position[node]
        return all(self.position.get(r, here) < here
                   for r in self._readers(version) if r is not node)

    def _readers(self, version: Variable) -> list[Apply]:
        """Every node reading ``version``, directly or through views of it."""
        readers, stack, seen = [], [version], set()
        while stack:
            var = stack.pop()
            for client in self.fgraph.readers(var):
                if client in seen:
                    continue
                seen.add(client)
                readers.append(client)
                for k, targets in client.op.view_map.items():
                    if any(client.inputs[t] is var for t in targets):
                        stack.append(client.outputs[k])
        return readers

    def record(self, old_node: Apply, new_node: Apply, i: int) -> None:
        self.destroyed.add(version_of(old_node.inputs[i]))
        source = new_node.inputs[i]
        self.roots[new_node.outputs[0]] = self.roots.get(source, source)
        self.position[new_node] = self.position[old_node]


def inplace_pass(fgraph, proposals, reason: str, wanted) -> bool:
    """Apply in-place versions proposed for each node; ``proposals(node)``
    yields ``(input index, new node)`` pairs, best first, for a node that
    ``wanted(node)`` (the pass orders the graph only when one is)."""
    if not any(wanted(node) for node in fgraph.apply_nodes):
        return False
    check = _LocalCheck(fgraph)
    changes = []

    def apply_all():
        for node in check.order:
            if node not in fgraph.apply_nodes:
                continue
            for i, new_node in proposals(node):
                if check.allows(node, i):
                    fgraph.replace_all(list(zip(node.outputs, new_node.outputs)), reason)
                    check.record(node, new_node, i)
                    changes.append(new_node)
                    break

    if fgraph.try_changes(apply_all, reason):
        return bool(changes)
    # The local check let through something the full validation refuses (it
    # should not): fall back to validating each candidate on its own.
    changed = False
    for node in fgraph.toposort():
        for i, new_node in proposals(node):
            if node in fgraph.apply_nodes and fgraph.replace_all_validate(
                    list(zip(node.outputs, new_node.outputs)), reason):
                changed = True
                break
    return changed


@register_graph_rewrite("inplace", tags=("inplace", "elemwise_inplace"))
def elemwise_inplace(fgraph) -> bool:
    """Elementwise (and fused) ops write their result into one of their inputs."""
    def wanted(node):
        return isinstance(node.op, Elemwise) and not node.op.inplace_pattern

    def proposals(node):
        if wanted(node):
            for i in _candidate_inputs(fgraph, node):
                yield i, Elemwise(node.op.scalar_op, {0: i}).make_node(*node.inputs)

    return inplace_pass(fgraph, proposals, "elemwise_inplace", wanted)


@register_graph_rewrite("inplace", tags=("inplace", "subtensor_inplace"))
def subtensor_update_inplace(fgraph) -> bool:
    """``set_subtensor`` / ``inc_subtensor`` write into ``x`` instead of a copy of it
    (the gradient of indexing, ``inc_subtensor(zeros_like(x)[i], g)``, then
    costs no copy of the zeros)."""
    def wanted(node):
        return (isinstance(node.op, _IncSubtensorBase) and not node.op.inplace
                and not isinstance(node.inputs[0], Constant))

    def proposals(node):
        op = node.op
        if wanted(node):
            new_op = type(op)(op.pattern, set_instead_of_inc=op.set_instead_of_inc, inplace=True)
            yield 0, new_op.make_node(*node.inputs)

    return inplace_pass(fgraph, proposals, "subtensor_update_inplace", wanted)
