"""The binomial schedule (scan_schedule): its closed forms against the
recursion they solve, and the schedule run on counters."""

from functools import lru_cache

import pytest

from tenure.symbolic.ops.scan_schedule import advances, first_snapshot, reverse_binomially


@lru_cache(maxsize=None)
def fewest_advances(steps: int, snapshots: int) -> int:
    """The recursion itself: advance m steps and keep a snapshot there,
    reverse the rest with one snapshot less, then the first m."""
    if steps <= 1:
        return 0
    if snapshots == 0:
        return steps - 1 + fewest_advances(steps - 1, 0)
    return min(m + fewest_advances(steps - m, snapshots - 1) + fewest_advances(m, snapshots)
               for m in range(1, steps))


@pytest.mark.parametrize("snapshots", range(6))
def test_the_closed_forms_are_the_recursions_optimum(snapshots):
    for steps in range(1, 70):
        assert advances(steps, snapshots) == fewest_advances(steps, snapshots), steps
        if steps > 1:
            m = first_snapshot(steps, snapshots)
            assert 1 <= m < steps
            rest = steps - m
            # reversed from scratch memory when one step is left (no snapshot)
            after = 0 if rest == 1 else fewest_advances(rest, snapshots - 1)
            assert m + after + fewest_advances(m, snapshots) == advances(steps, snapshots)


def test_a_schedule_needs_two_steps():
    with pytest.raises(ValueError, match="1 step"):
        first_snapshot(1, 3)


class Counter:
    """States as step numbers: counts the advances and the snapshots alive."""

    def __init__(self):
        self.advanced, self.alive, self.most_alive, self.reversed = 0, 0, 0, []

    def reverse_step(self, state, at, t):
        assert state == at <= t
        self.advanced += t - at
        self.reversed.append(t)

    def snapshot(self, state, at, m):
        assert state == at < m
        self.advanced += m - at
        self.alive += 1
        self.most_alive = max(self.most_alive, self.alive)
        return m

    def release(self, kept):
        self.alive -= 1


@pytest.mark.parametrize("steps, snapshots", [(1, 0), (7, 0), (25, 4), (100, 3), (300, 6),
                                              (10, 20)])
def test_the_schedule_reverses_every_step_once_within_its_snapshots(steps, snapshots):
    run = Counter()
    reverse_binomially(5, 5 + steps, snapshots, 5, run.reverse_step, run.snapshot, run.release)
    assert run.reversed == list(range(5 + steps - 1, 4, -1))
    assert run.advanced == advances(steps, snapshots)
    assert run.most_alive <= snapshots and run.alive == 0


def test_the_schedule_stops_at_the_floor():
    run = Counter()
    reverse_binomially(0, 50, 3, 0, run.reverse_step, run.snapshot, run.release, floor=20)
    assert run.reversed == list(range(49, 19, -1))
    assert run.alive == 0
