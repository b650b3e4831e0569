"""0/1 knapsack solvers: which items to keep so the kept weight fits a capacity
and the kept value is largest.

The activation-memory budget (the ``memory`` phase) asks exactly this: each
forward intermediate the backward pass reads is an item, its *weight* the
bytes it holds, its *value* the recomputation it saves when kept.  Four
solvers share one signature, ``solve_<name>(values, weights, capacity)``, and
return a :class:`KnapsackSolution`; :func:`solve` picks one by name (the names
are those of ``activation_memory_budget_solver``):

``greedy``
    By value/weight ratio, taking each item that still fits.  Fast, feasible,
    not optimal.
``ilp``
    Exact, as a binary integer program solved by HiGHS through
    :func:`scipy.optimize.milp`.
``dp``
    Exact dynamic programming over integer capacities with the full
    ``(n + 1) x (C + 1)`` table, read backwards to recover the items.
``dp_sliding_hirschberg``
    The same optimum with two rolling rows, and Hirschberg's divide and
    conquer to recover the items: ``O(C)`` memory instead of ``O(n C)``.

Conventions every solver follows, so their answers can be compared item by
item: an item worth nothing is never chosen (it would only spend capacity),
an item that weighs nothing and is worth something is always chosen (it is
free), and when everything fits everything worth something is chosen.

**Quantization (the DP solvers).**  A DP indexes its table by capacity, so
weights must be integers.  When every weight is integral they are used as
they are, divided by their greatest common divisor (byte sizes often share
one), which is exact.  Otherwise -- or when the capacity in those units is
above :data:`EXACT_UNITS_LIMIT` -- the capacity is scaled to ``resolution``
units (default :data:`DEFAULT_RESOLUTION`) and every weight is rounded *up* to
whole units, so a set that fits in units also fits the true capacity; the
answer is then feasible but may miss the optimum by what the rounding costs.
A final check against the true weights (:func:`_repair`) guards against
floating-point rounding in the scaling.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: units the capacity is scaled to when the DP solvers must quantize weights
DEFAULT_RESOLUTION = 1000

#: the most capacity units integral weights are used in as they are; above it
#: they are scaled like non-integral ones (a DP row has this many entries)
EXACT_UNITS_LIMIT = 1 << 20


@dataclass(frozen=True)
class KnapsackSolution:
    """What a solver chose: the total ``value`` and ``weight`` of the chosen
    items, and the ``chosen`` and ``rejected`` indices (each sorted; together
    they are every index exactly once)."""

    value: float
    weight: float
    chosen: tuple[int, ...]
    rejected: tuple[int, ...]


# ---------------------------------------------------------------------------
# Input checks and the reduction every solver shares


def _as_vector(name: str, data: Sequence[float]) -> np.ndarray:
    array = np.asarray(data, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    for i in np.flatnonzero(~np.isfinite(array) | (array < 0)):
        what = "NaN" if np.isnan(array[i]) else "not finite" if array[i] > 0 else "negative"
        raise ValueError(f"{name}[{i}] is {what} ({array[i]!r}); "
                         f"{name} must be finite and non-negative")
    return array


def _check(values, weights, capacity) -> tuple[np.ndarray, np.ndarray, float]:
    """The inputs as float arrays and a float capacity, or a ValueError."""
    values = _as_vector("values", values)
    weights = _as_vector("weights", weights)
    if len(values) != len(weights):
        raise ValueError(f"values has {len(values)} items but weights has {len(weights)}")
    capacity = float(capacity)
    if math.isnan(capacity) or capacity < 0:
        raise ValueError(f"capacity must be non-negative, got {capacity!r}")
    return values, weights, capacity


def _solution(values: np.ndarray, weights: np.ndarray, chosen) -> KnapsackSolution:
    """The solution choosing ``chosen``; totals are exactly rounded sums, so
    they do not depend on the order a solver found the items in."""
    chosen = tuple(sorted(int(i) for i in chosen))
    taken = set(chosen)
    rejected = tuple(i for i in range(len(values)) if i not in taken)
    return KnapsackSolution(value=math.fsum(values[list(chosen)]),
                            weight=math.fsum(weights[list(chosen)]),
                            chosen=chosen, rejected=rejected)


def _reduce(values, weights, capacity) -> tuple[list[int], np.ndarray | None]:
    """Split off the items whose fate needs no solver.

    Returns ``(free, candidates)``: the free items (positive value, zero
    weight), always chosen, and the indices the solver must decide on
    (positive value, positive weight no heavier than the capacity) -- or
    ``None`` instead of the candidates when all of them fit together, so they
    are all chosen too.  Every other item is rejected.
    """
    worth = values > 0
    free = np.flatnonzero(worth & (weights == 0)).tolist()
    candidates = np.flatnonzero(worth & (weights > 0) & (weights <= capacity))
    if math.fsum(weights[candidates]) <= capacity:
        return free + candidates.tolist(), None
    return free, candidates


def _solver(core: Callable) -> Callable:
    """Wrap a solver core ``core(values, weights, capacity, **options)``, which
    sees only the candidates of :func:`_reduce` and returns the positions (in
    those arrays) it chose, into a full solver."""

    signature = inspect.signature(core)

    def solve_with(values, weights, capacity, **options) -> KnapsackSolution:
        # Refuse an unknown option even when no item needs the core to run.
        signature.bind(values, weights, capacity, **options)
        values, weights, capacity = _check(values, weights, capacity)
        chosen, candidates = _reduce(values, weights, capacity)
        if candidates is not None and len(candidates):
            picked = core(values[candidates], weights[candidates], capacity, **options)
            picked = _repair(values[candidates], weights[candidates], capacity, picked)
            chosen = chosen + candidates[picked].tolist()
        return _solution(values, weights, chosen)

    solve_with.__name__ = "solve" + core.__name__
    solve_with.__qualname__ = solve_with.__name__
    solve_with.__doc__ = core.__doc__
    return solve_with


def _repair(values, weights, capacity, picked) -> list[int]:
    """``picked``, less the items that cost least to give up while its true
    weight exceeds the capacity.  An exact solver never needs this; it catches
    a set that fits only within a solver's tolerance (the ILP's, or float
    rounding of the DP quantization), so every solution is feasible by the
    exact sum.  Such a set is over by a sliver, and what goes is the cheaper
    of (:func:`_cheapest_cover`): the least valuable item that weighs at
    least the excess alone, and the least valuable items taken together until
    they do (two items of 2e-16 worth 1 each rather than one of weight 1
    worth 3).  Dropping by worst value/weight ratio could drop the most
    valuable item instead."""
    picked = sorted(int(i) for i in picked)
    while picked:
        excess = math.fsum(weights[picked]) - capacity
        if excess <= 0:
            break
        for i in _cheapest_cover(values, weights, picked, excess):
            picked.remove(i)
    return picked


def _cheapest_cover(values, weights, picked: list[int], excess: float) -> list[int]:
    """Items of ``picked`` weighing ``excess`` or more together, of little
    total value: the cheaper of the least valuable single item that does it
    alone and the least valuable items accumulated until they do (those of
    them the rest still covers without are kept); by worst value/weight
    ratio when neither finds weight enough (then the loop goes on)."""
    options = []
    alone = [i for i in picked if weights[i] >= excess]
    if alone:
        options.append([min(alone, key=lambda i: (values[i], -weights[i]))])
    cheapest_first = sorted((i for i in picked if weights[i] > 0),
                            key=lambda i: (values[i], -weights[i]))
    together, weight = [], 0.0
    for i in cheapest_first:
        together.append(i)
        weight = math.fsum(weights[together])
        if weight >= excess:
            for j in sorted(together, key=lambda j: -values[j]):   # keep what is not needed
                if len(together) > 1 and weight - weights[j] >= excess:
                    together.remove(j)
                    weight = math.fsum(weights[together])
            options.append(together)
            break
    if options:
        return min(options, key=lambda drop: (math.fsum(values[drop]), len(drop)))
    return [min((i for i in picked if weights[i] > 0), key=lambda i: values[i] / weights[i])]


# ---------------------------------------------------------------------------
# Greedy and ILP


def _greedy(values, weights, capacity) -> list[int]:
    """Greedy by value/weight ratio: free items first, then the best ratio
    first, taking each item that still fits (an item that does not fit is
    skipped, not the end: a lighter one after it may still fit).  Feasible,
    at most the optimum; ``O(n log n)``."""
    with np.errstate(divide="ignore"):
        ratio = np.where(weights > 0, values / weights, np.inf)
    order = np.argsort(-ratio, kind="stable")
    picked, used = [], 0.0
    for i in order:
        if used + weights[i] <= capacity:
            picked.append(int(i))
            used += weights[i]
    return picked


def _ilp(values, weights, capacity) -> list[int]:
    """Exact, as the integer program ``max v.x  s.t.  w.x <= C,  x in {0, 1}^n``
    solved by HiGHS (:func:`scipy.optimize.milp`).  Raises RuntimeError with
    the solver's message when it does not report an optimum."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    # Scale the constraint to capacity 1: byte-sized weights would otherwise
    # meet HiGHS's absolute feasibility tolerance at a meaningless scale.
    row = (weights / capacity)[np.newaxis, :]
    with warnings.catch_warnings():
        # HiGHS stops within an absolute gap of 1e-6 by default, which is not
        # "exact" for small values; scipy passes the option through verbatim
        # but warns that it does not know it.
        warnings.filterwarnings("ignore", message="Unrecognized options", category=RuntimeWarning)
        result = milp(-values, integrality=np.ones(len(values)), bounds=Bounds(0, 1),
                      constraints=LinearConstraint(row, -np.inf, 1.0),
                      options={"mip_rel_gap": 0.0, "mip_abs_gap": 0.0})
    if result.status != 0 or result.x is None:
        raise RuntimeError(f"the ILP knapsack solver found no optimum: {result.message}")
    # Binary variables come back within the integrality tolerance of 0 or 1.
    return np.flatnonzero(result.x > 0.5).tolist()


# ---------------------------------------------------------------------------
# Dynamic programming


def _quantize(weights: np.ndarray, capacity: float, resolution: int) -> tuple[np.ndarray, int]:
    """Integer weights and capacity for the DP solvers (see the module
    docstring): exact for integral weights, rounded up otherwise."""
    if resolution < 1:
        raise ValueError(f"resolution must be a positive integer, got {resolution!r}")
    # Capacity beyond the total weight changes nothing; clamping it keeps a
    # huge (or infinite) budget from sizing the table.
    capacity = min(capacity, math.fsum(weights))
    if np.all(weights == np.floor(weights)) and weights.max() < 2.0 ** 53:
        units = weights.astype(np.int64)
        step = int(np.gcd.reduce(units))
        if capacity // step <= EXACT_UNITS_LIMIT:
            return units // step, int(capacity // step)
    # Up, and at least one unit: a positive weight never becomes free.  The
    # weight is divided by the capacity first (resolution / capacity
    # overflows for a capacity near the smallest float), and a weight
    # beyond any int64 (it never fits) is held to 2**62.
    units = np.ceil(weights / capacity * resolution)
    units = np.clip(units, 1, 2.0 ** 62).astype(np.int64)
    return units, int(resolution)


def _add_item(prev: np.ndarray, out: np.ndarray, weight: int, value: float) -> None:
    """One DP step: ``out[c]`` = best of ``prev[c]`` (item left out) and
    ``prev[c - weight] + value`` (item taken, when it fits)."""
    if weight >= len(prev):
        out[:] = prev  # heavier than every capacity: never taken
        return
    out[:weight] = prev[:weight]
    np.add(prev[:len(prev) - weight], value, out=out[weight:])
    np.maximum(out[weight:], prev[weight:], out=out[weight:])


def _last_row(values, units, lo: int, hi: int, capacity: int) -> np.ndarray:
    """Best value of items ``lo:hi`` for every capacity ``0..capacity``, with
    two rolling rows (the one returned and one scratch row)."""
    prev = np.zeros(capacity + 1)
    cur = np.empty(capacity + 1)
    for i in range(lo, hi):
        _add_item(prev, cur, int(units[i]), float(values[i]))
        prev, cur = cur, prev
    return prev


def _dp(values, weights, capacity, *, resolution: int = DEFAULT_RESOLUTION) -> list[int]:
    """Exact DP (over quantized weights, see the module docstring) with the
    full ``(n + 1) x (C + 1)`` table; the items are read back from it: item
    ``i`` was taken where its row differs from the row above.
    ``O(n C)`` time and memory."""
    units, cap = _quantize(weights, capacity, resolution)
    n = len(values)
    table = np.zeros((n + 1, cap + 1))
    for i in range(n):
        _add_item(table[i], table[i + 1], int(units[i]), float(values[i]))
    picked, c = [], cap
    for i in range(n, 0, -1):
        # A row equal to the one above at `c` means leaving item i - 1 out
        # reaches the same value; taking it was strictly better otherwise.
        if table[i, c] != table[i - 1, c]:
            picked.append(i - 1)
            c -= int(units[i - 1])
    return picked


def _dp_sliding_hirschberg(values, weights, capacity, *,
                                 resolution: int = DEFAULT_RESOLUTION) -> list[int]:
    """Exact DP (over quantized weights) in ``O(C)`` memory: two rolling rows
    give the best value, and Hirschberg's divide and conquer recovers the
    items without a table.

    For items ``lo:hi`` and capacity ``c``: the best value of the first half
    for every capacity ``j`` and of the second half for every ``c - j`` are
    two DP rows; the ``j`` maximizing their sum is how an optimum splits the
    capacity, and each half is then solved alone with its share.  The rows
    are dropped before descending, so memory stays a few rows of ``C``; the
    work is at most twice the full table's (each level of the recursion
    splits the capacity among its subproblems).  An explicit stack holds the
    pending halves (depth ``O(log n)``).
    """
    units, cap = _quantize(weights, capacity, resolution)
    picked = []
    stack = [(0, len(values), cap)]
    while stack:
        lo, hi, c = stack.pop()
        if units[lo:hi].sum() <= c:
            picked.extend(range(lo, hi))  # everything fits (one item included)
            continue
        if hi - lo == 1 or c == 0:
            continue  # a lone item that does not fit, or no room for any
        mid = (lo + hi) // 2
        first = _last_row(values, units, lo, mid, c)
        second = _last_row(values, units, mid, hi, c)
        split = int(np.argmax(first + second[::-1]))
        del first, second
        stack.append((mid, hi, c - split))
        stack.append((lo, mid, split))
    return picked


solve_greedy = _solver(_greedy)
solve_ilp = _solver(_ilp)
solve_dp = _solver(_dp)
solve_dp_sliding_hirschberg = _solver(_dp_sliding_hirschberg)

#: the solvers by the name ``activation_memory_budget_solver`` takes
SOLVERS: dict[str, Callable[..., KnapsackSolution]] = {
    "greedy": solve_greedy,
    "ilp": solve_ilp,
    "dp": solve_dp,
    "dp_sliding_hirschberg": solve_dp_sliding_hirschberg,
}


def solve(values, weights, capacity, solver: str = "greedy", **options) -> KnapsackSolution:
    """Solve the 0/1 knapsack with the solver named ``solver`` (a key of
    :data:`SOLVERS`); ``options`` go to it (the DP solvers take
    ``resolution``)."""
    try:
        fn = SOLVERS[solver]
    except (KeyError, TypeError):
        raise ValueError(f"unknown knapsack solver {solver!r}; "
                         f"expected one of {', '.join(SOLVERS)}") from None
    return fn(values, weights, capacity, **options)
