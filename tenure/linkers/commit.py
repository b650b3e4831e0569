"""A call is a transaction: the commit point of a schedule, and what keeps the
steps after it from failing half-way.

Updates are assigned after the whole schedule ran, so a call that raises
changes no shared variable -- except through in-place writes: an update
``(w, w - lr * g)`` is computed into ``w``'s own buffer (the memory contract
allows it and the memory plans count on it), and a step after that write may
still raise.  The *commit point* of a schedule is its first step that writes
into a shared variable's storage.  Every step before it may fail (a shape
that does not fit, an index out of bounds, an error in any op, Ctrl-C) and
leaves nothing changed.  From the commit point on, the call must reach its
end, which is made sure of in one of two ways, chosen per input-shape
signature:

- *validated*: every step from the commit point on runs an op whose
  :meth:`~tenure.symbolic.graph.Op.check_shapes` says it cannot fail for the
  planned shapes of this signature (the size model's, worked out from the
  input shapes alone).  A shape it refuses raises before the call runs any
  step.  Training steps are of this kind: products, elementwise loops, sums;
- *backup*: otherwise (an op that may fail on values, such as indexing, or
  sizes that cannot be planned), the storage of each shared variable written
  from the commit point on is copied just before it, and copied back if a
  later step raises.  This costs one copy of those variables, only in calls
  of such graphs.

Ctrl-C: the linkers call :func:`~tenure.linkers.interrupts.mark_committed` at
the commit point (see :mod:`tenure.linkers.interrupts`).  Running out of
memory after the commit point of a validated schedule is the one failure
neither way covers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tenure.linkers.describe import compiled_detail, user_call, user_message
from tenure.linkers.thunk import step_note
from tenure.rewrites.destroy import view_root
from tenure.symbolic.graph import Apply, Constant
from tenure.symbolic.shared import SharedVariable

__all__ = ["CommitPoint", "commit_point", "planned_backups", "writes_shared_storage", "VALIDATED",
           "BACKUP"]

#: how a signature's calls get past the commit point safely
VALIDATED, BACKUP = "validated", "backup"


@dataclass(frozen=True)
class CommitPoint:
    """Where a schedule first writes shared storage, and what it writes from there on."""

    #: index in ``plan.steps`` of the first step writing a shared variable's storage
    step: int
    #: input slots of the shared variables whose storage is written from there on
    written: tuple[int, ...]
    #: the nodes of the steps from the commit point on, in schedule order
    nodes: tuple[Apply, ...]

    def mode_for(self, shapes: dict | None) -> str:
        """:data:`VALIDATED` when every node from the commit point on is known
        to succeed for these planned shapes (``{variable: shape or None}``),
        :data:`BACKUP` when that is not known.  Raises the op's ``ValueError``
        (with a note naming the node) for shapes it refuses."""
        if shapes is None:
            return BACKUP
        for node in self.nodes:
            check = node.op.check_shapes
            if check is None:
                return BACKUP
            ins = [_shape_of(v, shapes) for v in node.inputs]
            outs = [shapes.get(v) for v in node.outputs]
            if any(s is None for s in ins) or any(s is None for s in outs):
                return BACKUP
            try:
                safe = check(node, ins, outs)
            except ValueError as exc:
                # in the user's terms, as a step's error is (describe.py)
                step = user_message(exc, node)
                exc.add_note(f"tenure: refused before the call ran any step: {user_call(node)} "
                             f"cannot run on inputs of shapes {', '.join(map(str, ins))}"
                             f"{compiled_detail(node, step)}{step_note(node)}")
                raise
            if not safe:
                return BACKUP
        return VALIDATED


def _shape_of(var, shapes: dict):
    if isinstance(var, Constant):
        return np.shape(var.data)
    return shapes.get(var)


def writes_shared_storage(node: Apply) -> bool:
    """Whether ``node`` writes into a shared variable's storage (an in-place
    update, or a write into a view of one): a schedule's commit point is its
    first such step."""
    return any(isinstance(view_root(node.inputs[targets[0]]), SharedVariable)
               for targets in node.op.destroy_map.values())


def commit_point(plan, fgraph) -> CommitPoint | None:
    """The commit point of ``plan``'s schedule, or None when no step writes
    into a shared variable's storage."""
    first, written = None, []
    for k, step in enumerate(plan.steps):
        if not writes_shared_storage(step.node):
            continue
        first = k if first is None else first
        for targets in step.node.op.destroy_map.values():
            root = plan.roots[step.inputs[targets[0]]]
            if root not in written and isinstance(plan.variables[root], SharedVariable):
                written.append(root)
    if first is None:
        return None
    return CommitPoint(first, tuple(written), tuple(s.node for s in plan.steps[first:]))


def planned_backups(plan, fgraph) -> tuple[int, dict[int, int]]:
    """``(commit step, {shared input slot: bytes})``: the copies a call of
    ``plan`` (a sized plan) makes of shared storage at its commit point, alive
    to the end of the call; ``{}`` when it makes none (no commit point, or a
    validated one).  Memory reports count them."""
    commit = commit_point(plan, fgraph)
    if commit is None:
        return len(plan.steps), {}
    shapes = ({var: shape for var, shape in zip(plan.variables, plan.shapes)}
              if plan.shapes is not None else None)
    if commit.mode_for(shapes) != BACKUP:
        return commit.step, {}
    return commit.step, {slot: plan.nbytes[slot] for slot in commit.written
                         if plan.nbytes and plan.nbytes[slot]}
