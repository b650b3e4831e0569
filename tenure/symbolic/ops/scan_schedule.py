"""The binomial schedule of a loop's backward pass over few snapshots.

Reversing ``l`` steps of a loop -- the backward step of ``l - 1``, then of
``l - 2``, ..., then of 0 -- needs before each backward step ``t`` the
state before step ``t``.  Given the state before step 0 (a checkpoint) and
room for ``s`` more states (*snapshots*), the schedule that runs the fewest
forward steps is the binomial one of Griewank's *revolve* (Griewank 1992;
Griewank and Walther 2000): advance ``m`` steps from the state held, keep
the state there in a snapshot, reverse the ``l - m`` steps after it with
``s - 1`` snapshots, free it, and reverse the first ``m`` with ``s``.

Here a step reversed from the state before it costs one forward step (its
output, which its backward step reads) besides the *advances* counted below.
With ``beta(s, r) = C(s + r, s)`` and ``r`` the least repetition number with
``beta(s + 1, r) >= l``, the fewest advances are ``r * l - beta(s + 2, r - 1)``
(``l * (l - 1) / 2`` without snapshots: every step is reached from the
start), and ``m = min(beta(s + 1, r - 1), l - beta(s, r - 1))`` attains them.
Both were checked against the recursion's dynamic programme by exhaustion
(``tests/symbolic/ops/test_scan_schedule.py``).
"""

from __future__ import annotations

from math import comb

__all__ = ["advances", "first_snapshot", "repetitions", "reverse_binomially"]


def _beta(s: int, r: int) -> int:
    return comb(s + r, s) if r >= 0 else 0


def repetitions(steps: int, snapshots: int) -> int:
    """The least ``r`` with ``beta(snapshots + 1, r) >= steps``: how many
    times the schedule runs the busiest forward step, at most."""
    r = 0
    while _beta(snapshots + 1, r) < steps:
        r += 1
    return r


def advances(steps: int, snapshots: int) -> int:
    """The forward steps the binomial schedule runs to reach the states it
    reverses ``steps`` steps from, with ``snapshots`` states kept at once
    besides the one it starts from."""
    if steps <= 1:
        return 0
    if snapshots == 0:
        return steps * (steps - 1) // 2
    r = repetitions(steps, snapshots)
    return r * steps - _beta(snapshots + 2, r - 1)


def first_snapshot(steps: int, snapshots: int) -> int:
    """How many steps the schedule advances before it keeps its first
    snapshot (``1 <= m < steps``; with no snapshot, the last step's state is
    reached directly: ``steps - 1``)."""
    if steps < 2:
        raise ValueError(f"first_snapshot: a schedule of {steps} step(s) keeps no snapshot")
    if snapshots == 0:
        return steps - 1
    r = repetitions(steps, snapshots)
    return min(_beta(snapshots + 1, r - 1), steps - _beta(snapshots, r - 1))


def reverse_binomially(first: int, stop: int, snapshots: int, state, reverse_step, snapshot,
                       release, floor: int = 0) -> None:
    """Run the backward steps ``stop - 1`` down to ``max(first, floor)`` by the
    binomial schedule, from ``state`` (the state before step ``first``,
    which is read, never changed) and at most ``snapshots`` more at once.

    - ``reverse_step(state, at, t)``: step ``t``'s backward step, reaching the
      state before ``t`` from ``state`` (the one before ``at <= t``) in
      scratch memory, ``t - at`` advances;
    - ``snapshot(state, at, m)``: a new state before ``m`` reached from
      ``state`` (the one before ``at``), ``m - at`` advances;
    - ``release(kept)``: a snapshot no longer needed.
    """
    end = stop
    while end > max(first, floor):
        length = end - first
        m = first + (first_snapshot(length, snapshots) if length > 1 else 0)
        if end - m == 1:        # the last step: reached in scratch memory, no snapshot
            reverse_step(state, first, m)
        else:
            later = snapshot(state, first, m)
            try:
                reverse_binomially(m, end, snapshots - 1, later, reverse_step, snapshot,
                                   release, floor)
            finally:
                release(later)
        end = m
