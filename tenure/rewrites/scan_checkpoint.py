"""How a loop's backward pass gets the forward states: ``loop_gradient``.

The gradient of a loop (:func:`tenure.grad` through ``tn.scan``) is one
:class:`~tenure.symbolic.ops.scan_grad.LoopGradient` node reading the forward
loop's stored trajectories: ``n`` values per state, alive from the forward
pass to the backward one, usually the largest saved activations of a
training step.  This rewrite (canonicalize phase, after ``merge`` has made
the forward loop and the one the gradient rebuilt one node) expands each
such node:

- **inline** -- the backward scan over the trajectories -- when the function
  has no activation-memory budget (``Mode(activation_memory_budget=...)``),
  or one the trajectories fit.  The loop then keeps each state's ``L``
  initial entries before its trajectory (``keeps_initial``), so that the
  backward scan reads the states before each step as views of one array:
  joining them (the inline form as built) would copy every trajectory;
- **checkpointed** otherwise: the forward loop keeps the states before every
  ``k``-th step instead of its trajectories (it is rebuilt with
  ``checkpoint_every=k``) and the backward pass recomputes one segment at a
  time from those checkpoints
  (:class:`~tenure.symbolic.ops.scan_grad.CheckpointedScanGrad`).

**Choosing the schedule.**  For a state with ``L`` taps, checkpointing every
``k`` steps keeps ``ceil(n / k) * L`` values and one segment's ``L + k``
while recomputing, against ``n`` stored; it costs one more forward pass,
less the checkpointed steps.  A loop may keep its share of the budget: a
fraction ``f`` of its stored bytes (``activation_memory_budget=f``), or for
a budget in bytes, the budget spread over the loops in proportion to what
they store.  The smallest ``k >= 2`` that fits is taken (the least
recomputation).  Below about ``2 * sqrt(n)`` values no ``k`` fits: each
segment is then reversed by the binomial schedule
(:mod:`~tenure.symbolic.ops.scan_schedule`), which keeps ``s`` snapshots,
a scratch state and one step's output (``(s + 1) * L + 1`` values) and runs
more forward steps; of the ``(k, s)`` that fit, the one running fewest is
taken, and when none fits, the one keeping least (one checkpoint, no
snapshot: every step reached from the start, ``n * (n - 1) / 2`` forward
steps).  Lengths unknown at compile time count as
:data:`~tenure.rewrites.sizes.NOMINAL_DIM` for a fractional budget; a
budget in bytes needs them known (a ``ValueError`` names the input).  The ``remat`` rewrite then
applies the budget to the other saved activations, and its report
(``fgraph.remat_report``) lists each loop's choice, with the forward steps
it runs again (``fgraph.loop_checkpoints``).  A loop the user built with
``checkpoint_every`` keeps it; a ``until`` loop (its length known only
once it ran) is never checkpointed; nor is a loop whose trajectory
something else reads whole (a loss on every state: the trajectory stays
stored for that reader, so checkpoints would only add memory and time).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# merge first: it makes the forward loop and the one the gradient rebuilt one
# node (rewrites of a phase run in the order they are registered)
from tenure.rewrites import canonicalize  # noqa: F401
from tenure.rewrites.engine import register_graph_rewrite
from tenure.rewrites.remat import require_known_sizes
from tenure.rewrites.scan_memory import is_last_entry
from tenure.rewrites.sizes import compile_time_shapes
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.scan import Scan
from tenure.symbolic.ops.scan_grad import LoopGradient
from tenure.symbolic.ops.scan_schedule import advances

__all__ = ["LoopCheckpoints", "Schedule", "expand_loop_gradients", "recomputed_steps",
           "schedule_for"]


@dataclass(frozen=True)
class LoopCheckpoints:
    """One loop's choice under the budget (``fgraph.loop_checkpoints``)."""

    #: the forward loop, as printed
    loop: str
    #: its length at compile time, and the step count between checkpoints
    #: (0: the trajectories stay stored)
    steps: int
    every: int
    #: bytes of the stored trajectories, the bytes allowed, and the bytes
    #: kept with checkpoints (checkpoints and one recomputed segment)
    stored_bytes: int
    allowed_bytes: int
    kept_bytes: int
    #: why the trajectories stay stored although they exceed the allowance
    reason: str = ""
    #: the loop's node in the graph being compiled
    node: Apply | None = dataclasses.field(default=None, compare=False, repr=False)
    #: None: each segment recomputed whole; else the states the binomial
    #: schedule keeps at once while it reverses a segment
    snapshots: int | None = None
    #: the forward steps the backward pass runs again (``steps`` for
    #: segments recomputed whole)
    recomputed: int = 0

    def __str__(self) -> str:
        if not self.every:
            why = self.reason or f"fits {self.allowed_bytes:,}"
            return (f"  keep  {self.stored_bytes:>14,} B  loop {self.loop} ({self.steps} steps): "
                    f"trajectories stored [{why}]")
        how = "" if self.snapshots is None else \
            f", each segment reversed keeping {self.snapshots} snapshot(s) (binomial schedule)"
        return (f"  ckpt  {self.kept_bytes:>14,} B  loop {self.loop} ({self.steps} steps): "
                f"checkpoint every {self.every} steps{how} instead of storing "
                f"{self.stored_bytes:,} B, {self.recomputed:,} forward steps run again "
                f"[allowed {self.allowed_bytes:,}]")


@dataclass(frozen=True)
class Schedule:
    """How a loop's backward pass gets its states: checkpoints every
    ``every`` steps (0: the trajectories stay stored), and each segment
    recomputed whole (``snapshots`` None) or reversed by the binomial
    schedule keeping ``snapshots`` states at once."""

    every: int = 0
    snapshots: int | None = None


def schedule_for(n: int, states: list[tuple[int, int]], allowed: int) -> Schedule:
    """The schedule for a loop of ``n`` steps whose states are ``(taps L,
    bytes per value)``, keeping at most ``allowed`` bytes (module doc):
    stored when the trajectories fit; else checkpoints every ``k`` steps
    with segments recomputed whole, the smallest ``k >= 2`` that fits; else
    the binomial schedule with the fewest forward steps that fits; else
    the one keeping least."""
    if n < 2 or n * sum(size for _, size in states) <= allowed:
        return Schedule()
    for k in range(2, n + 1):
        if _kept_bytes(n, k, states) <= allowed:
            return Schedule(k)
    best = None
    for k in range(2, n + 1):
        snapshots = _snapshots_fitting(n, k, states, allowed)
        if snapshots is not None:
            cost = recomputed_steps(n, Schedule(k, snapshots))
            if best is None or cost < best[0]:
                best = (cost, Schedule(k, snapshots))
    return best[1] if best is not None else Schedule(n, 0)


def recomputed_steps(n: int, schedule: Schedule) -> int:
    """The forward steps the backward pass of a loop of ``n`` steps runs
    again under ``schedule``: each step once, and the binomial schedule's
    advances."""
    k, snapshots = schedule.every, schedule.snapshots
    if not k:
        return 0
    if snapshots is None:
        return n
    return n + (n // k) * advances(k, snapshots) + advances(n % k, snapshots)


def _snapshots_fitting(n: int, every: int, states, allowed: int) -> int | None:
    """The most snapshots that fit ``allowed`` with checkpoints every
    ``every`` steps (None: not even none)."""
    left = allowed - _kept_bytes(n, every, states, snapshots=0)
    per_snapshot = sum(depth * size for depth, size in states)
    return left // per_snapshot if left >= 0 and per_snapshot else None


def _kept_bytes(n: int, every: int, states, snapshots: int | None = None) -> int:
    """Checkpoints every ``every`` steps, and while reversing, one segment
    (``L + k`` values a state) or the snapshots, the scratch state and a
    step's output (``(s + 1) * L + 1``)."""
    checkpoints = math.ceil(n / every)
    if snapshots is None:
        return sum((checkpoints * depth + depth + every) * size for depth, size in states)
    return sum((checkpoints * depth + (snapshots + 1) * depth + 1) * size
               for depth, size in states)


@register_graph_rewrite("canonicalize", name="loop_gradient", tags=("loop_gradient",))
def expand_loop_gradients(fgraph) -> bool:
    """Expand every :class:`LoopGradient`: inline, or over checkpoints when
    the trajectories exceed the budget (module doc)."""
    # every compilation runs this, on every pass of its phase: look before sorting
    if not any(isinstance(node.op, LoopGradient) for node in fgraph.apply_nodes):
        return False
    nodes = [node for node in fgraph.toposort() if isinstance(node.op, LoopGradient)]
    by_loop: dict[Apply, list[Apply]] = {}
    for node in nodes:
        by_loop.setdefault(_forward_loop(node), []).append(node)
    budget = getattr(fgraph, "memory_budget", None)
    schedules = _choose(fgraph, [loop for loop in by_loop if loop is not None], budget) \
        if budget is not None else {}
    for loop, gradients in by_loop.items():
        schedule = schedules.get(loop, Schedule())
        if schedule.every and _read_elsewhere(fgraph, loop, gradients):
            schedule = Schedule()
            fgraph.loop_checkpoints = tuple(
                _kept_anyway(choice) if choice.node is loop else choice
                for choice in fgraph.loop_checkpoints)
        if schedule.every:
            done = _checkpoint(fgraph, loop, gradients, schedule)
        else:
            done = loop is not None and all(loop.op.stored) and \
                _over_histories(fgraph, loop, gradients)
        if not done:    # a rewiring the graph refused: the form as built
            for node in gradients:
                _inline(fgraph, node)
    return True


def _inline(fgraph, node: Apply) -> None:
    if not fgraph.replace_all_validate(list(zip(node.outputs, node.op.inline(node.inputs))),
                                       reason="loop_gradient"):
        raise RuntimeError(f"loop_gradient: the graph refused the inline form of {node}")


def _forward_loop(node: Apply) -> Apply | None:
    """The loop whose trajectories ``node`` reads, when it may keep
    checkpoints instead (a scan node without them, not a ``until`` loop)."""
    _, _, groups = node.op.split(list(node.inputs))
    owners = {traj.owner for traj in groups[2]}
    if len(owners) != 1:
        return None
    loop = owners.pop()
    if loop is None or not isinstance(loop.op, Scan) or loop.op.checkpoint_every \
            or loop.op.as_while:
        return None
    trajectories = loop.op.output_groups(loop.outputs)[0]
    return loop if list(groups[2]) == list(trajectories) else None


def _choose(fgraph, loops: list[Apply], budget) -> dict[Apply, Schedule]:
    """The schedule of each loop (absent: stored); the choices go in
    ``fgraph.loop_checkpoints``."""
    shapes, unknown = compile_time_shapes(fgraph)
    if loops:
        require_known_sizes(budget, unknown)
    facts = {}
    for loop in loops:
        trajectories = loop.op.output_groups(loop.outputs)[0]
        dims = [shapes.get(traj) for traj in trajectories]
        if any(d is None for d in dims):
            continue
        n = int(dims[0][0])
        states = [(-taps[0], math.prod(d[1:]) * traj.type.numpy_dtype.itemsize)
                  for taps, d, traj in zip(loop.op.state_taps, dims, trajectories)]
        facts[loop] = (n, states, n * sum(size for _, size in states))
    total = sum(stored for _, _, stored in facts.values())
    schedules, report = {}, []
    for loop, (n, states, stored) in facts.items():
        # a budget in bytes: each loop's share, in proportion to what it stores
        allowed = budget.capacity(stored) if budget.is_fraction else \
            int(budget.budget * stored / total) if total else 0
        schedule = schedules[loop] = schedule_for(n, states, allowed)
        k, snapshots = schedule.every, schedule.snapshots
        report.append(LoopCheckpoints(
            str(loop.outputs[0]), n, k, stored, allowed,
            _kept_bytes(n, k, states, snapshots) if k else stored, node=loop,
            snapshots=snapshots, recomputed=recomputed_steps(n, schedule)))
    fgraph.loop_checkpoints = tuple(report)
    return schedules


def _read_elsewhere(fgraph, loop: Apply, gradients: list[Apply]) -> bool:
    """Whether anything but ``gradients`` reads a trajectory of ``loop`` whole
    (its last entry, ``hs[-1]``, is the loop's final value and does not
    count).  The trajectory then stays stored for that reader, which in a
    training step is usually a loss on every state, read again by its own
    backward pass: checkpoints would add memory and time and save nothing.
    (A reader done before the backward pass, such as ``hs.sum()``, would let
    checkpoints save memory; telling the two apart needs the schedule.)"""
    theirs = set(gradients)
    for trajectory in loop.op.output_groups(loop.outputs)[0]:
        for client in fgraph.clients.get(trajectory, []):
            if client[0] not in theirs and not is_last_entry(client):
                return True
    return False


def _kept_anyway(choice: LoopCheckpoints) -> LoopCheckpoints:
    return dataclasses.replace(choice, every=0, kept_bytes=choice.stored_bytes,
                               snapshots=None, recomputed=0,
                               reason="read whole by more than its gradient: kept for "
                                      "that reader, so checkpoints would save nothing")


def _over_histories(fgraph, loop: Apply, gradients: list[Apply]) -> bool:
    """``loop`` rebuilt to keep each state's initial entries before its
    trajectory, and each of its ``gradients`` reading the states before each
    step as views of that (the inline form joins them: a copy of every
    trajectory).  The loop's trajectories are views of it too."""
    op = loop.op
    kept = op.replaced(keeps_initial=(True,) * op.parts.n_states).make_node(*loop.inputs)
    pairs = []
    for node in gradients:
        pairs += list(zip(node.outputs, node.op.over_histories(node.inputs, kept)))
    histories = op.output_groups(kept.outputs)[0]
    trajectories = [history[-taps[0]:] for history, taps in zip(histories, op.state_taps)]
    new_outputs = trajectories + kept.outputs[len(trajectories):]
    pairs += [(old, new) for old, new in zip(loop.outputs, new_outputs)
              if fgraph.clients.get(old)]
    return fgraph.replace_all_validate(pairs, reason="loop_gradient")


def _checkpoint(fgraph, loop: Apply, gradients: list[Apply], schedule: Schedule) -> bool:
    """``loop`` rebuilt to keep checkpoints every ``schedule.every`` steps,
    and each of its ``gradients`` over them (computing only the sequences'
    gradients something reads)."""
    checkpointed = loop.op.replaced(checkpoint_every=schedule.every).make_node(*loop.inputs)
    pairs = []
    for node in gradients:
        read = [bool(fgraph.clients.get(out)) for out in node.outputs]
        backward = node.op.checkpointed(node.inputs, checkpointed, read, schedule.snapshots)
        pairs += [(old, new) for old, new in zip(node.outputs, backward) if new is not None]
    pairs += [(old, new) for old, new in zip(loop.outputs, checkpointed.outputs)
              if fgraph.clients.get(old)]
    return fgraph.replace_all_validate(pairs, reason="loop_gradient")
