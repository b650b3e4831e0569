"""Time and peak memory of the knapsack solvers from 100 to 2000 items.

Random instances: values uniform in [0, 1), integer weights 1..100, capacity
half the total weight.  Time is the best of a few untraced runs; the peak is
tracemalloc's (numpy reports its buffers to it) over one more run, above what
was allocated before it.  Prints a Markdown table and the ratio of the
full-table DP's peak to the Hirschberg DP's at the largest size (issue 7
asks for at least 20x at 2000 items).

    python benchmarks/knapsack_solvers.py [--sizes 100 250 ...] [--repeat N]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from tenure.rewrites.knapsack import SOLVERS

SIZES = (100, 250, 500, 1000, 2000)

#: the full-table DP must use at least this many times the Hirschberg DP's peak
REQUIRED_RATIO = 20.0


def instance(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed + n)
    values = rng.random(n)
    weights = rng.integers(1, 101, n)
    return values, weights, int(weights.sum() // 2)


def measure(solver, values, weights, capacity, repeat: int) -> tuple[float, int, float]:
    """(best time in seconds, peak bytes, the optimum found)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        solution = solver(values, weights, capacity)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        solver(values, weights, capacity)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return min(times), peak, solution.value


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    names = list(SOLVERS)
    print("| items | capacity | " + " | ".join(f"{n} time | {n} peak" for n in names) + " |")
    print("|---:|---:|" + "---:|---:|" * len(names))
    peaks = {}
    for n in args.sizes:
        values, weights, capacity = instance(n)
        cells, optimum = [], {}
        for name in names:
            seconds, peak, value = measure(SOLVERS[name], values, weights, capacity, args.repeat)
            peaks[n, name] = peak
            optimum[name] = value
            cells.append(f"{seconds * 1e3:.1f} ms | {_bytes(peak)}")
        print(f"| {n} | {capacity} | " + " | ".join(cells) + " |")
        exact = [optimum[name] for name in ("ilp", "dp", "dp_sliding_hirschberg")]
        if max(exact) - min(exact) > 1e-9 * max(exact):
            raise SystemExit(f"exact solvers disagree at {n} items: {optimum}")

    largest = max(args.sizes)
    ratio = peaks[largest, "dp"] / peaks[largest, "dp_sliding_hirschberg"]
    verdict = "ok" if ratio >= REQUIRED_RATIO else f"below the required {REQUIRED_RATIO:.0f}x"
    print(f"\nfull-table DP peak / Hirschberg DP peak at {largest} items: {ratio:.0f}x ({verdict})")
    return 0 if ratio >= REQUIRED_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
