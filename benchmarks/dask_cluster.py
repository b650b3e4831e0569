"""tenure's Dask linker against the same computation written with dask.array.

    python benchmarks/dask_cluster.py [--repeat N] [--quick] [--out DIR]

One ``distributed.LocalCluster`` (2 worker processes, 1 thread each: the
CI machine's 2 cores), two workloads, each run both ways on the same
cluster, alternating:

- ``elemwise_reduce``: ``sum(exp(x) * 2 + sin(x) * x)`` over a 1-d float64
  array made on the workers (``dask.array.random``, 2**26 elements = 512 MiB
  in chunks of 2**22; ``--quick``: 2**23 in 2**20).  tenure runs one fused
  kernel per chunk; dask.array runs each NumPy call on its own.
- ``logreg_step``: a data-parallel logistic-regression gradient step (the
  gradient of the mean cross-entropy wrt ``w``, ``b``; SGD) on 2**20 rows x
  32 features float64 in chunks of 2**17 rows (``--quick``: 2**17 in 2**14),
  the data already on the workers (persisted), the parameters on the client:
  tenure keeps them as shared variables updated by the call; the
  dask.array version computes the gradient and updates NumPy arrays.

Time: the median of ``--repeat`` calls (default 5) after one warm-up call.
Peak worker memory: per worker process, the kernel's high-water mark of its
resident memory during a call (``VmHWM``, reset before the call by writing 5
to ``/proc/self/clear_refs``) less its resident memory just before; the
highest over the workers and the calls.  Exact, not sampled: a peak that
lasts a microsecond counts.  Results: ``DIR/dask_cluster.md`` (also printed) and
``DIR/dask_cluster.json``, ``DIR`` defaulting to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import measure  # noqa: E402  (benchmarks/measure.py: also imported on the workers)

SIZES = {"full": {"n": 2**26, "chunk": 2**22, "rows": 2**20, "row_chunk": 2**17, "features": 32},
         "quick": {"n": 2**23, "chunk": 2**20, "rows": 2**17, "row_chunk": 2**14,
                   "features": 32}}
LR = 0.5


def elemwise_reduce(size):
    import dask.array as da
    import tenure as tn
    x = tn.vector("x")
    f = tn.function([x], tn.sum(tn.exp(x) * 2 + tn.sin(x) * x),
                    mode=tn.Mode(linker="dask", compute=True))
    data = da.random.default_rng(0).random(size["n"], chunks=size["chunk"])

    def tenure_call():
        return float(f(data))

    def dask_call():
        return float((da.exp(data) * 2 + da.sin(data) * data).sum().compute())
    return tenure_call, dask_call


def logreg_step(size, client):
    import dask.array as da
    import tenure as tn
    rng = da.random.default_rng(0)
    X = rng.standard_normal((size["rows"], size["features"]),
                            chunks=(size["row_chunk"], size["features"]))
    Y = (rng.random(size["rows"], chunks=size["row_chunk"]) > 0.5).astype(np.float64)
    X, Y = client.persist([X, Y])
    x, y = tn.matrix("x"), tn.vector("y")
    w, b = tn.shared(np.zeros(size["features"])), tn.shared(0.0)
    p = tn.sigmoid(x @ w + b)
    loss = -tn.mean(y * tn.log(p) + (1 - y) * tn.log(1 - p))
    gw, gb = tn.grad(loss, [w, b])
    step = tn.function([x, y], loss, updates=[(w, w - LR * gw), (b, b - LR * gb)],
                       mode=tn.Mode(linker="dask", compute=True))
    params = {"w": np.zeros(size["features"]), "b": 0.0}

    def tenure_call():
        return float(step(X, Y))

    def dask_call():
        z = X @ params["w"] + params["b"]
        p = 1 / (1 + da.exp(-z))
        loss = -da.mean(Y * da.log(p) + (1 - Y) * da.log(1 - p))
        err = (p - Y) / size["rows"]
        loss, gw, gb = da.compute(loss, X.T @ err, err.sum())
        params["w"] = params["w"] - LR * gw
        params["b"] = params["b"] - LR * gb
        return float(loss)
    return tenure_call, dask_call


def _reset_peak() -> int:
    """On a worker: start a new high-water mark; the resident bytes now."""
    if not measure.reset_hwm():
        raise RuntimeError("this kernel does not reset VmHWM (/proc/self/clear_refs)")
    return measure.rss()


def measured(call, repeat: int, client) -> dict:
    first = call()
    times, peaks = [], []
    for _ in range(repeat):
        before = client.run(_reset_peak)
        start = time.perf_counter()
        value = call()
        times.append(time.perf_counter() - start)
        after = client.run(measure.hwm)
        peaks.append(max(after[w] - before[w] for w in before))
    return {"time_s": statistics.median(times), "peak_extra_mb": max(peaks) / 2**20,
            "first": first, "last": value}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    from distributed import Client, LocalCluster
    size = SIZES["quick" if args.quick else "full"]
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    rows = []
    try:
        for name, make in (("elemwise_reduce", lambda: elemwise_reduce(size)),
                           ("logreg_step", lambda: logreg_step(size, client))):
            tenure_call, dask_call = make()
            tenure = measured(tenure_call, args.repeat, client)
            dask_ = measured(dask_call, args.repeat, client)
            rows.append({"workload": name, "tenure-dask": tenure, "dask.array": dask_})
            print(f"  {name:16s} tenure-dask {tenure['time_s']:.3f} s {tenure['peak_extra_mb']:7.1f}"
                  f" MB   dask.array {dask_['time_s']:.3f} s {dask_['peak_extra_mb']:7.1f} MB",
                  flush=True)
    finally:
        client.close()
        cluster.close()
    table = ["| workload | system | time/call | peak extra worker MB | time vs dask.array | "
             "memory vs dask.array |", "|---|---|---|---|---|---|"]
    for row in rows:
        base = row["dask.array"]
        for system in ("tenure-dask", "dask.array"):
            r = row[system]
            table.append(f"| {row['workload']} | {system} | {r['time_s'] * 1e3:.0f} ms | "
                         f"{r['peak_extra_mb']:.1f} | {r['time_s'] / base['time_s']:.2f} | "
                         f"{max(r['peak_extra_mb'], 1) / max(base['peak_extra_mb'], 1):.2f} |")
    text = "\n".join(table)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    with open(os.path.join(args.out, f"dask_cluster{suffix}.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(args.out, f"dask_cluster{suffix}.json"), "w") as fh:
        json.dump({"sizes": size, "repeat": args.repeat, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
