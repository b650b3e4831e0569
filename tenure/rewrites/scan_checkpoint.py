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

**Choosing k.**  For a state with ``L`` taps, checkpointing every ``k``
steps keeps ``ceil(n / k) * L`` values and one segment's ``L + k`` while
recomputing, against ``n`` stored; it costs one more forward pass, less the
checkpointed steps.  A loop may keep its share of the budget: a fraction
``f`` of its stored bytes (``activation_memory_budget=f``), or for a budget
in bytes, the budget spread over the loops in proportion to what they
store.  The smallest ``k >= 2`` that fits is taken (the least
recomputation); when none does, the ``k`` that keeps least (about
``sqrt(n)``).  Lengths unknown at compile time count as
:data:`~tenure.rewrites.sizes.NOMINAL_DIM` for a fractional budget; a
budget in bytes needs them known (a ``ValueError`` names the input).  The ``remat`` rewrite then
applies the budget to the other saved activations, and its report
(``fgraph.remat_report``) lists each loop's choice
(``fgraph.loop_checkpoints``).  A loop the user built with
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

__all__ = ["LoopCheckpoints", "checkpoint_every_for", "expand_loop_gradients"]


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

    def __str__(self) -> str:
        if not self.every:
            why = self.reason or f"fits {self.allowed_bytes:,}"
            return (f"  keep  {self.stored_bytes:>14,} B  loop {self.loop} ({self.steps} steps): "
                    f"trajectories stored [{why}]")
        return (f"  ckpt  {self.kept_bytes:>14,} B  loop {self.loop} ({self.steps} steps): "
                f"checkpoint every {self.every} steps instead of storing "
                f"{self.stored_bytes:,} B [allowed {self.allowed_bytes:,}]")


def checkpoint_every_for(n: int, states: list[tuple[int, int]], allowed: int) -> int:
    """Steps between checkpoints for a loop of ``n`` steps whose states are
    ``(taps L, bytes per value)``, keeping at most ``allowed`` bytes: 0 (store
    the trajectories) when they fit, else the smallest ``k >= 2`` that fits,
    else the ``k`` that keeps least."""
    if n < 2 or n * sum(size for _, size in states) <= allowed:
        return 0
    candidates = range(2, n + 1)
    fitting = [k for k in candidates if _kept_bytes(n, k, states) <= allowed]
    if fitting:
        return fitting[0]
    return min(candidates, key=lambda k: _kept_bytes(n, k, states))


def _kept_bytes(n: int, every: int, states) -> int:
    """Checkpoints every ``every`` steps, and one segment being recomputed."""
    return sum((math.ceil(n / every) * depth + depth + every) * size for depth, size in states)


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
    every = _choose(fgraph, [loop for loop in by_loop if loop is not None], budget) \
        if budget is not None else {}
    for loop, gradients in by_loop.items():
        k = every.get(loop, 0)
        if k and _read_elsewhere(fgraph, loop, gradients):
            k = 0
            fgraph.loop_checkpoints = tuple(
                _kept_anyway(choice) if choice.node is loop else choice
                for choice in fgraph.loop_checkpoints)
        if k:
            done = _checkpoint(fgraph, loop, gradients, k)
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


def _choose(fgraph, loops: list[Apply], budget) -> dict[Apply, int]:
    """Steps between checkpoints per loop (absent: stored); the choices go
    in ``fgraph.loop_checkpoints``."""
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
    every, report = {}, []
    for loop, (n, states, stored) in facts.items():
        # a budget in bytes: each loop's share, in proportion to what it stores
        allowed = budget.capacity(stored) if budget.is_fraction else \
            int(budget.budget * stored / total) if total else 0
        k = checkpoint_every_for(n, states, allowed)
        every[loop] = k
        report.append(LoopCheckpoints(str(loop.outputs[0]), n, k, stored, allowed,
                                      _kept_bytes(n, k, states) if k else stored, node=loop))
    fgraph.loop_checkpoints = tuple(report)
    return every


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


def _checkpoint(fgraph, loop: Apply, gradients: list[Apply], every: int) -> bool:
    """``loop`` rebuilt to keep checkpoints every ``every`` steps, and each of
    its ``gradients`` over them (computing only the sequences' gradients
    something reads)."""
    checkpointed = loop.op.replaced(checkpoint_every=every).make_node(*loop.inputs)
    pairs = []
    for node in gradients:
        read = [bool(fgraph.clients.get(out)) for out in node.outputs]
        pairs += [(old, new) for old, new in zip(
            node.outputs, node.op.checkpointed(node.inputs, checkpointed, read))
            if new is not None]
    pairs += [(old, new) for old, new in zip(loop.outputs, checkpointed.outputs)
              if fgraph.clients.get(old)]
    return fgraph.replace_all_validate(pairs, reason="loop_gradient")
