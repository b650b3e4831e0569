"""No steady memory growth per call, on every linker.

A function called in a loop must hold the same memory after the loop as
before it: nothing per call may be kept (a cache keyed on per-call objects, a
list that grows, a leaked reference).  The graph is a typical training step:
a matrix product that the rewrites turn into gemm, a bias, a reduction, its
gradient, updates of two shared variables, a borrowed input and a borrowed
output.

tracemalloc sees Python objects and NumPy's data buffers.  The loop runs
after a warm-up (caches and free lists filling up: NumPy keeps freed small
buffers for reuse), in two or three windows.  A leak grows in every window,
while a one-off allocation (a free list or a dict growing) shows in one, so
the assertion is on the smallest.  On the check linker, what NumPy allocates
in the Python functions behind its comparisons is left out (``EXCLUDED``):
NumPy's caches turn over there for tens of thousands of calls, bounded but at
random.  The limit, 0.25
bytes per call, is well below a leak of one small
object every few calls; the growth the ``py`` linker had before this test
(NumPy's ``dtype.name``, read on every gemm call) was 1.5 and 0.8 bytes per
call in the first two windows.

The long measurement, 100,000 calls after a 20,000-call warm-up on each
linker, runs by hand: ``python -m tests.test_leaks 100000``.
"""

import gc
import tracemalloc

import numpy as np
import numpy._core.fromnumeric
import numpy._core.numeric

import tenure as tn
from tenure import In, Out
from tenure.linkers import check

#: (warm-up calls, calls per window, windows), per linker (the check linker
#: checks every node: slower, so fewer calls, in three windows)
CALLS = {"py": (1_500, 3_000, 2), "check": (1_200, 500, 3), "c": (5_000, 30_000, 2)}
LIMIT = 0.25            # bytes per call


#: The check linker compares every node's output with NumPy's
#: (``np.allclose``, ``np.array_equal``), and NumPy keeps small blocks of
#: those calls in its caches, turning over for tens of thousands of calls (a
#: few KB at a time, at random: 0.006 bytes per call from 4,000 to 33,000
#: calls).  Left out, what they allocate would drown a leak anywhere else.
#: The blocks are allocated with one of these two NumPy files innermost (the
#: reduction under ``all`` and ``isclose``), so one frame per trace finds
#: them: four times cheaper than tracing deep enough to see check.py's own
#: lines.  What tenure's executor allocates through those files is measured
#: on the py linker, which leaves nothing out.
NUMPY_COMPARISONS = (numpy._core.fromnumeric.__file__, numpy._core.numeric.__file__)
EXCLUDED = {"check": [tracemalloc.Filter(False, path) for path in NUMPY_COMPARISONS]}


def training_step(mode):
    rng = np.random.default_rng(0)
    x = tn.matrix("x")
    w = tn.shared(rng.standard_normal((4, 3)) * 0.1, name="w")
    b = tn.shared(np.zeros(3), name="b")
    h = x @ w + b
    # h.T-free gradient of 0.5 * sum(h ** 2): x.T @ h (a gemm into w's update)
    f = tn.function([In(x, borrow=True)], [h.sum(), Out(h.max(axis=0), borrow=True)],
                    updates=[(w, w - 0.01 * (x.T @ h)), (b, b - 0.01 * h.sum(axis=0))],
                    mode=mode)
    return f, (rng.standard_normal((5, 4)),)


def growth_per_call(f, args, warm_up: int, calls: int, windows: int = 2,
                    excluded: list[tracemalloc.Filter] = ()) -> list[float]:
    """Bytes tracemalloc sees added per call, in each window of ``calls`` calls,
    after ``warm_up`` calls, leaving out what the ``excluded`` filters match."""
    # Tracing starts before the warm-up: caches and free lists (NumPy's
    # included) that fill up in the first calls then hold traced blocks, and
    # replacing one entry by another is no growth.  Started after it, the
    # turnover of entries allocated before tracing looks like growth for
    # thousands of calls.
    tracemalloc.start(1)
    try:
        for _ in range(warm_up):
            f(*args)
        before = traced_bytes(excluded)
        result = []
        for _ in range(windows):
            for _ in range(calls):
                f(*args)
            after = traced_bytes(excluded)
            result.append((after - before) / calls)
            before = after
        return result
    finally:
        tracemalloc.stop()


def traced_bytes(excluded: list[tracemalloc.Filter]) -> int:
    gc.collect()
    if not excluded:
        return tracemalloc.get_traced_memory()[0]
    snapshot = tracemalloc.take_snapshot().filter_traces(excluded)
    return sum(trace.size for trace in snapshot.traces)


def test_no_growth_per_call(mode):
    f, args = training_step(mode)
    warm_up, calls, windows = CALLS.get(mode.linker, CALLS["py"])
    growth = growth_per_call(f, args, warm_up, calls, windows, EXCLUDED.get(mode.linker, ()))
    assert min(growth) < LIMIT, (f"{mode.linker}: memory grows by {growth} bytes per call "
                                 f"over windows of {calls} calls")
    # the step did train: the loop ran the graph, not something cached
    assert np.isfinite(f(*args)[0])


def test_measurement_detects_a_small_leak():
    """The measurement itself: a function keeping 8 bytes (on average) per call
    is caught, with the py linker's window."""
    kept = []
    counter = iter(range(10**9))

    def leaky():
        i = next(counter)
        if i % 8 == 0:
            kept.append(float(i))  # a 24-byte float plus a list slot every 8 calls
        return i

    growth = growth_per_call(leaky, (), *CALLS["py"])
    assert min(growth) > 1.0


def test_excluded_lines_hide_no_other_leak():
    """What the check linker's measurement leaves out (NumPy's comparison
    files) does not hide a leak elsewhere, with the check linker's window."""
    kept = []

    def leaky():
        kept.append(float(len(kept)))   # a 24-byte float plus a list slot per call
        return check._close(np.ones(3), np.ones(3))

    growth = growth_per_call(leaky, (), *CALLS["check"], EXCLUDED["check"])
    assert min(growth) > 20.0


if __name__ == "__main__":
    # The long measurement, by hand (20,000 calls of warm-up, then CALLS calls):
    #   python -m tests.test_leaks [CALLS] [LINKER ...]
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    for linker in sys.argv[2:] or ["py", "check", "c"]:
        f, args = training_step(tn.Mode(linker=linker))
        (per_call,) = growth_per_call(f, args, 20_000, n, 1, EXCLUDED.get(linker, ()))
        print(f"{linker}: {per_call * n:+.0f} bytes over {n} calls = {per_call:+.4f} bytes "
              "per call", flush=True)
