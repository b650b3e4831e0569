"""The 0/1 knapsack solvers: exact ones agree with each other and with brute
force, every answer is a feasible partition of the items, greedy is feasible
and no better than the optimum, the DP quantization stays within capacity,
and bad input is refused."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenure.rewrites import knapsack as ks
from tenure.rewrites.knapsack import SOLVERS, KnapsackSolution, solve

EXACT = ("ilp", "dp", "dp_sliding_hirschberg")
DP = ("dp", "dp_sliding_hirschberg")

#: values are compared to this tolerance: solvers sum in different orders
APPROX = dict(rel=1e-9, abs=1e-9)


def approx_for(name: str, values) -> dict:
    """How close solver ``name`` must come: the ILP is exact only up to
    HiGHS's feasibility and optimality tolerances (about 1e-7 of the largest
    value: an item worth 6e-8 next to one worth 1 may be left out)."""
    if name == "ilp":
        return dict(rel=1e-9, abs=max(1e-9, 1e-6 * max(values, default=0.0)))
    return APPROX


@st.composite
def instances(draw, max_items=25, max_weight=30):
    """(values, integer weights, integer capacity), capacity anywhere from 0
    to a bit over the total weight."""
    n = draw(st.integers(0, max_items))
    values = draw(st.lists(st.floats(0, 100, allow_subnormal=False), min_size=n, max_size=n))
    weights = draw(st.lists(st.integers(0, max_weight), min_size=n, max_size=n))
    capacity = draw(st.integers(0, sum(weights) + 2))
    return values, weights, capacity


def brute_force(values, weights, capacity) -> float:
    """The optimum by trying every subset."""
    best = 0.0
    for mask in itertools.product((0, 1), repeat=len(values)):
        if sum(w for w, m in zip(weights, mask) if m) <= capacity:
            best = max(best, math.fsum(v for v, m in zip(values, mask) if m))
    return best


def check_solution(sol: KnapsackSolution, values, weights, capacity) -> None:
    """``sol`` partitions the indices, fits, and reports its own totals."""
    n = len(values)
    assert isinstance(sol, KnapsackSolution)
    assert list(sol.chosen) == sorted(sol.chosen) and list(sol.rejected) == sorted(sol.rejected)
    assert sorted(sol.chosen + sol.rejected) == list(range(n))
    assert all(isinstance(i, int) for i in sol.chosen + sol.rejected)
    assert sol.weight == math.fsum(weights[i] for i in sol.chosen)
    assert sol.weight <= capacity
    assert sol.value == math.fsum(values[i] for i in sol.chosen)
    assert isinstance(sol.value, float)


# --- exact solvers ---------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(instances(max_items=12))
def test_exact_solvers_match_brute_force(instance):
    values, weights, capacity = instance
    best = brute_force(values, weights, capacity)
    for name in EXACT:
        sol = solve(values, weights, capacity, solver=name)
        check_solution(sol, values, weights, capacity)
        assert sol.value == pytest.approx(best, **approx_for(name, values)), name


@settings(max_examples=60, deadline=None)
@given(instances(max_items=25, max_weight=60))
def test_exact_solvers_agree(instance):
    values, weights, capacity = instance
    solutions = {name: solve(values, weights, capacity, solver=name) for name in EXACT}
    for name, sol in solutions.items():
        check_solution(sol, values, weights, capacity)
        assert sol.value == pytest.approx(solutions["dp"].value,
                                          **approx_for(name, values)), name


def test_exact_solvers_agree_on_a_larger_instance():
    rng = np.random.default_rng(7)
    values = rng.uniform(0, 10, 200)
    weights = rng.integers(1, 100, 200)
    capacity = int(weights.sum() // 3)
    solutions = {name: solve(values, weights, capacity, solver=name) for name in EXACT}
    for sol in solutions.values():
        check_solution(sol, values, weights, capacity)
    best = solutions["dp"].value
    assert solutions["dp_sliding_hirschberg"].value == pytest.approx(best, **APPROX)
    assert solutions["ilp"].value == pytest.approx(solutions["dp"].value, **APPROX)
    # Hirschberg's split and the table's backtracking find the same optimum;
    # greedy is visibly worse here, so the instance is not a trivial one.
    assert solve(values, weights, capacity).value < solutions["dp"].value


# --- greedy ----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(instances(max_items=12))
def test_greedy_is_feasible_and_at_most_optimal(instance):
    values, weights, capacity = instance
    sol = solve(values, weights, capacity, solver="greedy")
    check_solution(sol, values, weights, capacity)
    assert sol.value <= brute_force(values, weights, capacity) + 1e-9


def test_greedy_goes_by_ratio_and_skips_what_does_not_fit():
    # ratios 3, 2, 1.5, 1: item 1 no longer fits after 0, item 2 still does
    values, weights = [6, 8, 3, 1], [2, 4, 2, 1]
    sol = solve(values, weights, 5, solver="greedy")
    assert sol.chosen == (0, 2, 3) and sol.rejected == (1,)
    # The best ratio first is not always best: the textbook instance.
    sol = solve([60, 100, 120], [10, 20, 30], 50, solver="greedy")
    assert sol.chosen == (0, 1) and sol.value == 160
    # A free item is taken first, whatever its value.
    assert solve([0.5, 10], [0, 1], 0).chosen == (0,)


# --- edge cases, every solver ---------------------------------------------


@pytest.mark.parametrize("name", SOLVERS)
def test_empty_input(name):
    assert solve([], [], 5, solver=name) == KnapsackSolution(0.0, 0.0, (), ())


@pytest.mark.parametrize("name", SOLVERS)
def test_capacity_zero_takes_only_free_items(name):
    sol = solve([3, 4, 5, 0], [1, 0, 2, 0], 0, solver=name)
    assert sol.chosen == (1,) and sol.value == 4 and sol.weight == 0


@pytest.mark.parametrize("name", SOLVERS)
def test_zero_weight_items_are_always_taken(name):
    sol = solve([1, 9, 2, 7], [0, 5, 0, 5], 6, solver=name)
    assert sol.chosen == (0, 1, 2) and sol.value == 12


@pytest.mark.parametrize("name", SOLVERS)
def test_everything_fits(name):
    sol = solve([1, 2, 3], [4, 5, 6], 100, solver=name)
    assert sol.chosen == (0, 1, 2) and sol.rejected == () and sol.weight == 15
    assert solve([1, 2], [4, 5], math.inf, solver=name).chosen == (0, 1)


@pytest.mark.parametrize("name", SOLVERS)
def test_an_item_heavier_than_the_capacity(name):
    sol = solve([100], [11], 10, solver=name)
    assert sol == KnapsackSolution(0.0, 0.0, (), (0,))
    sol = solve([100, 1], [11, 3], 10, solver=name)
    assert sol.chosen == (1,) and sol.rejected == (0,)


@pytest.mark.parametrize("name", SOLVERS)
def test_worthless_items_are_never_chosen(name):
    sol = solve([0, 5, 0], [1, 1, 1], 3, solver=name)
    assert sol.chosen == (1,)


@pytest.mark.parametrize("name", EXACT)
def test_exact_on_a_known_instance(name):
    # the textbook instance: items 1 and 2 (value 220) beat the best-ratio item 0
    sol = solve([60, 100, 120], [10, 20, 30], 50, solver=name)
    assert sol.chosen == (1, 2) and sol.value == 220 and sol.weight == 50


# --- quantization ----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_subnormal=False),
                          st.floats(0, 10, allow_subnormal=False)), max_size=20),
       st.floats(0, 50, allow_subnormal=False),
       st.sampled_from([1, 7, 100, 1000]))
# HiGHS takes both (1e-38 over, within its tolerance); the repair must drop the cheap one
@example(items=[(1.0, 1.175494351e-38), (2.0, 5.552137041471842e-29)],
         capacity=5.552137041471842e-29, resolution=1)
# two slivers over: the repair gave up the item worth 3, not the two worth 1
@example(items=[(1.0, 2.220446049250313e-16), (1.0, 2.220446049250313e-16), (3.0, 1.0)],
         capacity=1.0, resolution=1)
# resolution / capacity overflowed to inf: an OverflowError building the table
@example(items=[(1.0, 2.2250738585072014e-308), (1.0, 2.2250738585072014e-308)],
         capacity=2.2250738585072014e-308, resolution=7)
def test_quantized_weights_never_exceed_the_capacity(items, capacity, resolution):
    values = [v for v, _ in items]
    weights = [w for _, w in items]
    exact = solve(values, weights, capacity, solver="ilp").value
    for name in DP:
        sol = solve(values, weights, capacity, solver=name, resolution=resolution)
        check_solution(sol, values, weights, capacity)
        # HiGHS's tolerances (about 1e-7 of the objective) let it miss an item
        # worth less than that; the quantized DPs must not beat it by more.
        assert sol.value <= exact + 1e-6 * max(1.0, sum(values))
    # The two DPs see the same quantized problem, so they reach the same optimum.
    assert (solve(values, weights, capacity, solver="dp", resolution=resolution).value
            == pytest.approx(solve(values, weights, capacity, solver="dp_sliding_hirschberg",
                                   resolution=resolution).value, **APPROX))


def test_a_set_over_by_a_sliver_gives_up_what_costs_least():
    values, weights = np.array([1.0, 2.0, 5.0]), np.array([2.0 ** -30, 3.0, 4.0])
    # over by 2**-30: dropping that item (worth 1) keeps the rest, though it
    # has by far the best value/weight ratio
    assert ks._repair(values, weights, 7.0, [0, 1, 2]) == [1, 2]
    # over by 2: only the items of weight >= 2 fix it alone; the cheaper goes
    assert ks._repair(values, weights, 5.0, [0, 1, 2]) == [0, 2]
    assert ks._repair(values, weights, 8.0, [0, 1, 2]) == [0, 1, 2]
    # over by 2 * 2**-52: the two slivers (worth 1 each) together cost less than
    # the one item that weighs the excess alone (worth 3), which a random run
    # of the property below found the ILP's repair dropping
    tiny = 2.0 ** -52
    assert ks._repair(np.array([1.0, 1.0, 3.0]), np.array([tiny, tiny, 1.0]), 1.0,
                      [0, 1, 2]) == [2]
    assert solve([1.0, 1.0, 3.0], [tiny, tiny, 1.0], 1.0, solver="ilp").value == 3.0


def test_quantization_is_exact_for_integral_weights():
    units, cap = ks._quantize(np.array([4096.0, 8192.0, 12288.0]), 20480.0, 1000)
    assert units.tolist() == [1, 2, 3] and cap == 5  # divided by their gcd
    units, cap = ks._quantize(np.array([3.0, 5.0]), 7.9, 1000)
    assert units.tolist() == [3, 5] and cap == 7  # a fractional capacity is floored


def test_quantization_rounds_weights_up():
    units, cap = ks._quantize(np.array([0.25, 0.5, 1.5]), 1.0, 10)
    assert cap == 10 and units.tolist() == [3, 5, 15]
    # Large integral weights are scaled instead of sizing a huge table.
    units, cap = ks._quantize(np.array([3e9 + 1, 5e9 + 3]), 6e9, 1000)
    assert cap == 1000 and units.tolist() == [501, 834]


def test_fractional_weights_reach_the_optimum_when_they_are_coarse():
    # multiples of 1/4 of the capacity: the quantization loses nothing
    values, weights = [5, 4, 3, 6], [0.25, 0.5, 0.75, 0.5]
    for name in SOLVERS:
        if name != "greedy":
            assert solve(values, weights, 1.0, solver=name).value == 11


# --- errors ----------------------------------------------------------------


def test_length_mismatch():
    with pytest.raises(ValueError, match="values has 2 items but weights has 3"):
        solve([1, 2], [1, 2, 3], 4)


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("values, weights, capacity, message", [
    ([1, -2, 3], [1, 1, 1], 2, r"values\[1\] is negative"),
    ([1, 2, 3], [1, 1, -0.5], 2, r"weights\[2\] is negative"),
    ([1, float("nan")], [1, 1], 2, r"values\[1\] is NaN"),
    ([1, 2], [float("nan"), 1], 2, r"weights\[0\] is NaN"),
    ([1, 2], [float("inf"), 1], 2, r"weights\[0\] is not finite"),
    ([1, 2], [1, 1], -1, "capacity must be non-negative"),
    ([1, 2], [1, 1], float("nan"), "capacity must be non-negative"),
    ([[1, 2]], [[1, 1]], 2, "one-dimensional"),
])
def test_bad_input(name, values, weights, capacity, message):
    with pytest.raises(ValueError, match=message):
        solve(values, weights, capacity, solver=name)


def test_unknown_solver_lists_the_valid_ones():
    with pytest.raises(ValueError, match="greedy, ilp, dp, dp_sliding_hirschberg"):
        solve([1], [1], 1, solver="simplex")


def test_bad_options():
    with pytest.raises(ValueError, match="resolution"):
        solve([1, 1], [0.5, 0.7], 1.0, solver="dp", resolution=0)
    with pytest.raises(TypeError):
        solve([], [], 1.0, solver="greedy", resolution=10)


def test_ilp_failure_is_reported(monkeypatch):
    import scipy.optimize

    class Failed:
        status, x, message = 1, None, "Iteration or time limit reached."

    monkeypatch.setattr(scipy.optimize, "milp", lambda *a, **k: Failed())
    with pytest.raises(RuntimeError, match="time limit reached"):
        solve([1, 2, 3], [2, 2, 2], 3, solver="ilp")


def test_public_names():
    assert set(SOLVERS) == {"greedy", "ilp", "dp", "dp_sliding_hirschberg"}
    for name, fn in SOLVERS.items():
        assert fn is getattr(ks, f"solve_{name}")
        assert fn.__name__ == f"solve_{name}"
    sol = solve([1], [1], 1)
    with pytest.raises(AttributeError):
        sol.value = 2.0  # frozen
