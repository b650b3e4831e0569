"""Two Python threads on two cores against one: do tenure's C loops overlap?

    python benchmarks/gil_threads.py [--repeat N] [--out DIR]

Each call is kept on one core (``OMP_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``,
set before anything is imported), so the only parallelism is the threads'.
For each workload, 8 calls of a C-linker function run one after another on
one thread, then 4 on each of two threads at once; the speedup is the first
time over the second (2.0 is perfect overlap, 1.0 is none: what a loop that
kept the GIL gives).  The last row does the same through the Dask linker on
Dask's threaded scheduler (1 worker thread against 2), over a chunked array.

Time: the best of ``--repeat`` runs (default 3).  Results:
``DIR/gil_threads.md`` (also printed), ``DIR`` defaulting to
``benchmarks/results/``.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import best_time  # noqa: E402
CALLS = 8


def workloads():
    import tenure as tn
    rng = np.random.default_rng(0)
    x, y = tn.vector("x"), tn.matrix("y")
    a, b = tn.matrix("a"), tn.matrix("b")
    s = tn.matrix("s", dtype="float32")
    yield ("elementwise exp(sin x)·cos x + log1p(x²), 2^22 f64",
           tn.function([x], tn.exp(tn.sin(x)) * tn.cos(x) + tn.log1p(x * x), mode="c"),
           (np.linspace(0, 1, 2**22),))
    yield ("sum over rows, 4096×4096 f64",
           tn.function([y], tn.sum(y, axis=0), mode="c"), (rng.random((4096, 4096)),))
    yield ("matmul 1000×1000 f64 (BLAS)",
           tn.function([a, b], a @ b, mode="c"),
           (rng.standard_normal((1000, 1000)), rng.standard_normal((1000, 1000))))
    yield ("softmax rows, 2048×4096 f32",
           tn.function([s], tn.softmax(s, axis=-1), mode="c"),
           (rng.random((2048, 4096), dtype=np.float32),))


def one_thread(f, args) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        f(*args)
    return time.perf_counter() - start


def two_threads(f, args) -> float:
    with ThreadPoolExecutor(2) as pool:
        pool.submit(f, *args).result()     # both threads started and warm
        start = time.perf_counter()
        for future in [pool.submit(f, *args) for _ in range(CALLS)]:
            future.result()
        return time.perf_counter() - start


def dask_linker_rows(repeat: int):
    import dask
    import dask.array as da
    import tenure as tn
    x = tn.vector("x")
    f = tn.function([x], tn.sum(tn.exp(tn.sin(x)) * tn.cos(x) + tn.log1p(x * x)),
                    mode=tn.Mode(linker="dask", compute=True))
    data = da.from_array(np.linspace(0, 1, 2**24), chunks=2**20)
    times = {}
    for workers in (1, 2):
        with dask.config.set(scheduler="threads", num_workers=workers):
            f(data)
            times[workers] = best_time(lambda: f(data), repeat)
    return ("dask linker, threaded scheduler: fused sum over 2^24 f64 in 16 chunks",
            times[1], times[2])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    rows = []
    for name, f, values in workloads():
        f(*values)
        one = min(one_thread(f, values) for _ in range(args.repeat))
        two = min(two_threads(f, values) for _ in range(args.repeat))
        rows.append((name, one, two))
        print(f"  {name:60s} {one * 1e3:8.1f} ms  {two * 1e3:8.1f} ms  {one / two:.2f}×",
              flush=True)
    rows.append(dask_linker_rows(args.repeat))
    table = ["| workload | 1 thread | 2 threads | speedup |", "|---|---|---|---|"]
    table += [f"| {name} | {one * 1e3:.0f} ms | {two * 1e3:.0f} ms | {one / two:.2f}× |"
              for name, one, two in rows]
    text = "\n".join(table)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gil_threads.md"), "w") as fh:
        fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
