"""The Dask linker on data larger than the cluster's memory: a few epochs
of a data-parallel logistic-regression step, against hand-written dask.array.

    python benchmarks/dask_spill.py [--epochs N] [--rounds R] [--quick] [--out DIR]

The cluster: one ``distributed.LocalCluster`` of 2 worker processes x 1
thread (the machine's 2 cores) with a memory limit of ``--worker-mb`` MiB
each (full: 640, ``--quick``: 320), and Dask's memory thresholds set so that
a worker spills instead of pausing (``SPILL_CONFIG``): it writes its oldest
chunks to disk once the data it holds passes 40% of the limit
(``distributed.worker.memory.target``) or its process passes 80%
(``...spill``), and it never pauses nor is killed (``pause`` and
``terminate`` off).  Distributed's default pause at 80% is, most likely,
what hung the first version of this script: a worker holds ~110-150 MiB
before any data (Python, NumPy, distributed, tenure's kernels), so with a
40 MB limit it paused at once and for good.  The spill directory is a
fresh temporary directory, removed at the end.

The data: ``rows`` x 32 float64 features and their 0/1 labels (full:
2**23 rows, 2112 MiB, in chunks of 2**17 rows = 32 MiB; ``--quick``: 2**22
rows, 1056 MiB, chunks of 2**16 rows), 1.65x the cluster's total limit,
made on the workers by ``dask.array.random`` (never in this process) and
persisted.  Persisting is what an out-of-core training job does with a
data set it reads many times: the workers keep what fits and spill the rest
to their local disk, and each epoch reads the spilled chunks back (and
writes others out).  Recomputing the data each epoch instead would never
spill (a chunk is made, used and dropped) and would time the random number
generator rather than the training.

Both systems run ``--epochs`` full-batch gradient steps from zero
parameters on the same persisted data, ``--rounds`` times (after one
warm-up epoch each), alternating epoch by epoch and which of the two goes
first, so that each pair of epochs meets the same load on a shared machine:

- tenure: ``tn.function([x, y], loss, updates=[(w, ...), (b, ...)],
  mode=tn.Mode(linker="dask", compute=True))``, ``w`` and ``b`` shared;
- dask.array: the same step written by hand (``z = X @ w + b``, the loss,
  the gradient ``X.T @ err`` and ``err.sum()``, one ``dask.compute`` per
  epoch, NumPy parameters on the client).

Reported: the median time of one epoch (over rounds x epochs) and the
median of the pairs' ratios (tenure / dask.array), the disk
traffic per epoch (the workers' own spill metrics: bytes written to and
read back from disk), what the workers hold in memory and on disk at the
end, and, for one epoch of each system, the tasks the workers ran (task
stream: count, compute seconds, disk-read seconds) and the size of the
graph handed to the scheduler; and the cores that other processes kept
busy during the epochs (``/proc/stat`` less this process and its children's
CPU time: the machine is shared).  Checks: the two systems end with the same
parameters and losses (float64 round-off: rtol 1e-9), the workers really
spilled (bytes written to and read from disk > 0 in every timed epoch), no worker was
restarted, and the same steps on a subsample (the first 4 chunks' rows)
give the same parameters with tenure's dask linker on the cluster (reading
the spilled data) as with tenure's C linker on one machine in this process.
Results: ``DIR/dask_spill.md`` (also printed) and ``DIR/dask_spill.json``
(``-quick`` with ``--quick``), ``DIR`` defaulting to ``benchmarks/results/``.
A watchdog stops the script after ``--timeout`` seconds (default 1200)
instead of letting a stuck cluster hang it.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"full": {"rows": 2**23, "row_chunk": 2**17, "features": 32, "worker_mb": 640},
         "quick": {"rows": 2**22, "row_chunk": 2**16, "features": 32, "worker_mb": 320}}
# Spill, never pause: a paused worker runs nothing until its memory falls,
# and a worker whose baseline is near its limit never falls.
SPILL_CONFIG = {"distributed.worker.memory.target": 0.4,
                "distributed.worker.memory.spill": 0.8,
                "distributed.worker.memory.pause": False,
                "distributed.worker.memory.terminate": False}
LR = 0.5
SUBSAMPLE_CHUNKS = 4
SYSTEMS = ("tenure-dask", "dask.array")


def tenure_step(features: int, linker: str):
    """``(step, w, b)``: one SGD step of the mean cross-entropy on shared ``w``, ``b``."""
    import tenure as tn
    x, y = tn.matrix("x"), tn.vector("y")
    w, b = tn.shared(np.zeros(features), name="w"), tn.shared(0.0, name="b")
    p = tn.sigmoid(x @ w + b)
    loss = -tn.mean(y * tn.log(p) + (1 - y) * tn.log(1 - p))
    gw, gb = tn.grad(loss, [w, b])
    mode = tn.Mode(linker="dask", compute=True) if linker == "dask" else tn.Mode(linker=linker)
    return tn.function([x, y], loss, updates=[(w, w - LR * gw), (b, b - LR * gb)],
                       mode=mode), w, b


class TenureRun:
    """Epochs of the tenure step (compiled once; parameters reset per run)."""

    def __init__(self, features: int):
        self.step, self.w, self.b = tenure_step(features, "dask")
        self.features = features

    def reset(self):
        self.w.set_value(np.zeros(self.features))
        self.b.set_value(0.0)

    def epoch(self, X, Y) -> float:
        return float(self.step(X, Y))

    def params(self):
        return self.w.get_value().copy(), float(self.b.get_value())


class DaskArrayRun:
    """The same steps written with dask.array: parameters on the client."""

    def __init__(self, features: int):
        self.features = features
        self.reset()

    def reset(self):
        self.w, self.b = np.zeros(self.features), 0.0

    def graph(self, X, Y):
        import dask.array as da
        z = X @ self.w + self.b
        p = 1 / (1 + da.exp(-z))
        loss = -da.mean(Y * da.log(p) + (1 - Y) * da.log(1 - p))
        err = (p - Y) / X.shape[0]
        return loss, X.T @ err, err.sum()

    def epoch(self, X, Y) -> float:
        import dask
        loss, gw, gb = dask.compute(*self.graph(X, Y))
        self.w, self.b = self.w - LR * gw, self.b - LR * gb
        return float(loss)

    def params(self):
        return self.w.copy(), float(self.b)


# -- on the workers ------------------------------------------------------------------
def _worker_state(dask_worker=None) -> dict:
    """A worker's spill counters (cumulative) and what it holds now."""
    import psutil
    data = dask_worker.data
    metrics = getattr(data, "cumulative_metrics", {})
    peak = 0.0
    try:
        with open("/proc/self/status") as fh:
            peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 2**10
    except (OSError, StopIteration):
        pass
    state = {"pid": os.getpid(), "rss_mb": psutil.Process().memory_info().rss / 2**20,
             "peak_rss_mb": peak,
             "status": str(dask_worker.status),
             "written_mb": metrics.get(("disk-write", "bytes"), 0.0) / 2**20,
             "writes": metrics.get(("disk-write", "count"), 0.0),
             "read_mb": metrics.get(("disk-read", "bytes"), 0.0) / 2**20,
             "reads": metrics.get(("disk-read", "count"), 0.0),
             "keys_in_memory": len(getattr(data, "fast", data)),
             "keys_on_disk": len(getattr(data, "slow", ()))}
    spilled = getattr(data, "spilled_total", None)
    state["on_disk_mb"] = (spilled.disk if spilled is not None else 0) / 2**20
    fast = getattr(data, "fast", None)
    state["in_memory_mb"] = (getattr(fast, "total_weight", 0) if fast is not None else 0) / 2**20
    return state


def _quiet(name: str, level: int) -> None:
    logging.getLogger(name).setLevel(level)


def cluster_state(client) -> dict:
    return client.run(_worker_state)


def traffic(before: dict, after: dict) -> dict:
    """Spill traffic between two ``cluster_state`` readings, all workers."""
    return {k: sum(after[w][k] - before[w][k] for w in after)
            for k in ("written_mb", "read_mb", "writes", "reads")}


# -- profiling one epoch -------------------------------------------------------------
def _graph_sizes(record: list):
    """Patch ``dask.compute`` (the Dask linker calls it) to record the size of
    the graph it is handed: tasks (keys) before and after Dask's optimisation,
    and when it was called.  Measuring adds to the profiled epoch's wall time,
    which is why the profile is an epoch of its own, not a timed one."""
    import dask
    real = dask.compute

    def keys(collections) -> int:
        return len(set().union(*(c.__dask_graph__().keys() for c in collections)))

    def compute(*args, **kwargs):
        collections = [a for a in args if dask.is_dask_collection(a)]
        entered = time.perf_counter()
        record.append({"tasks_in_graph": keys(collections),
                       "tasks_after_optimize": keys(dask.optimize(*collections)),
                       "entered": entered})
        return real(*args, **kwargs)
    return real, compute


def profile_epoch(client, system: str, run, X, Y) -> dict:
    """One epoch under the task stream: what ran on the workers, by task name."""
    import dask
    from distributed import get_task_stream
    record: list = []
    real, patched = _graph_sizes(record)
    dask.compute = patched
    try:
        with get_task_stream(client) as ts:
            start = time.perf_counter()
            run.epoch(X, Y)
            wall = time.perf_counter() - start
    finally:
        dask.compute = real
    by_name: dict = defaultdict(lambda: defaultdict(float))
    for task in ts.data:
        name = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        name = str(name).rsplit("-", 1)[0]
        entry = by_name[name]
        entry["tasks"] += 1
        for ss in task["startstops"]:
            entry[f"{ss['action']}_s"] += ss["stop"] - ss["start"]
    totals: dict = defaultdict(float)
    for entry in by_name.values():
        for k, v in entry.items():
            totals[k] += v
    graph = dict(record[0]) if record else {}
    # time on the client before the graph was handed to Dask: tenure's
    # lowering (or the dask.array expressions), the same for both
    graph["client_build_s"] = graph.pop("entered", start) - start
    return {"system": system, "wall_s": wall, "graph": graph,
            "totals": dict(totals), "by_task": {k: dict(v) for k, v in by_name.items()}}


def _cpu_seconds() -> tuple[float, float]:
    """(the machine's busy CPU seconds, ours: this process and its children,
    the scheduler's and the workers' processes) so far."""
    import psutil
    with open("/proc/stat") as fh:
        fields = [float(v) for v in fh.readline().split()[1:]]
    busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    ours = 0.0
    me = psutil.Process()
    for proc in [me] + me.children(recursive=True):
        try:
            t = proc.cpu_times()
            ours += t.user + t.system
        except psutil.Error:
            pass
    return busy, ours


def paired_rounds(runs: dict, X, Y, epochs: int, rounds: int, client) -> dict:
    """``rounds`` runs of ``epochs`` epochs from zero parameters, the two
    systems alternating epoch by epoch (which goes first alternates too), so
    that each pair of epochs shares the machine's load of the moment."""
    out = {s: [] for s in SYSTEMS}
    pairs = []
    for r in range(rounds):
        current = {s: {"times_s": [], "losses": [], "traffic": [], "busy_cores": []}
                   for s in SYSTEMS}
        for run in runs.values():
            run.reset()
        for e in range(epochs):
            order = SYSTEMS if (r * epochs + e) % 2 == 0 else SYSTEMS[::-1]
            for system in order:
                before, (busy0, ours0) = cluster_state(client), _cpu_seconds()
                start = time.perf_counter()
                loss = runs[system].epoch(X, Y)
                elapsed = time.perf_counter() - start
                busy1, ours1 = _cpu_seconds()
                c = current[system]
                c["times_s"].append(elapsed)
                c["losses"].append(loss)
                c["traffic"].append(traffic(before, cluster_state(client)))
                # cores other processes (the other engineers') kept busy
                c["busy_cores"].append(max(0.0, (busy1 - busy0) - (ours1 - ours0)) / elapsed)
            t, d = (current[s]["times_s"][-1] for s in SYSTEMS)
            pairs.append(t / d)
            tr = {s: current[s]["traffic"][-1] for s in SYSTEMS}
            print(f"  round {r} epoch {e}: tenure-dask {t:.2f} s, dask.array {d:.2f} s "
                  f"(ratio {t / d:.2f}); disk written/read MiB: tenure-dask "
                  f"{tr['tenure-dask']['written_mb']:.0f}/{tr['tenure-dask']['read_mb']:.0f}, "
                  f"dask.array {tr['dask.array']['written_mb']:.0f}/"
                  f"{tr['dask.array']['read_mb']:.0f}; cores busy with others' work "
                  f"{current['tenure-dask']['busy_cores'][-1]:.1f}/"
                  f"{current['dask.array']['busy_cores'][-1]:.1f}", flush=True)
        for s in SYSTEMS:
            w, b = runs[s].params()
            out[s].append(dict(current[s], w=w, b=b))
    return {"rounds": out, "ratios": pairs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker-mb", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=1200, help="watchdog, seconds")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, wait
    size = dict(SIZES["quick" if args.quick else "full"])
    if args.worker_mb:
        size["worker_mb"] = args.worker_mb
    spill_dir = tempfile.mkdtemp(prefix="tenure-dask-spill-")
    t0 = time.perf_counter()
    with dask.config.set(SPILL_CONFIG):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               memory_limit=size["worker_mb"] * 2**20,
                               local_directory=spill_dir, dashboard_address=None)
    client = Client(cluster)
    report: dict = {"sizes": size, "epochs": args.epochs, "rounds": args.rounds,
                    "spill_config": SPILL_CONFIG}
    try:
        client.wait_for_workers(2)
        # The warning that unmanaged memory is high is this benchmark's
        # premise (a worker's baseline is a third of its limit); what the
        # workers hold is reported below instead.
        client.run(_quiet, "distributed.worker.memory", logging.ERROR)
        state0 = cluster_state(client)
        rng = da.random.default_rng(0)
        X = rng.standard_normal((size["rows"], size["features"]),
                                chunks=(size["row_chunk"], size["features"]))
        true_w = np.linspace(-1, 1, size["features"])
        Y = (rng.random(size["rows"], chunks=size["row_chunk"])
             < 1 / (1 + da.exp(-(X @ true_w)))).astype(np.float64)
        start = time.perf_counter()
        X, Y = client.persist([X, Y])
        wait([X, Y])
        report["make_data_s"] = time.perf_counter() - start
        made = cluster_state(client)
        report["after_making"] = made
        data_mb = (X.nbytes + Y.nbytes) / 2**20
        limit_mb = 2 * size["worker_mb"]
        print(f"data {data_mb:.0f} MiB on 2 workers of {size['worker_mb']} MiB "
              f"({data_mb / limit_mb:.2f}x the total); made in {report['make_data_s']:.1f} s; "
              f"on disk {sum(s['on_disk_mb'] for s in made.values()):.0f} MiB, in memory "
              f"{sum(s['in_memory_mb'] for s in made.values()):.0f} MiB", flush=True)

        runs = {"tenure-dask": TenureRun(size["features"]),
                "dask.array": DaskArrayRun(size["features"])}
        warm = {}
        for system, run in runs.items():           # compile, load kernels, first lowering
            run.reset()
            start = time.perf_counter()
            run.epoch(X, Y)
            warm[system] = time.perf_counter() - start
        report["warmup_epoch_s"] = warm
        paired = paired_rounds(runs, X, Y, args.epochs, args.rounds, client)
        rounds = paired["rounds"]
        profiles = [profile_epoch(client, system, runs[system], X, Y) for system in SYSTEMS]
        for p in profiles:
            tot = p["totals"]
            print(f"  profile {p['system']:11s} {p['wall_s']:.2f} s: graph "
                  f"{p['graph'].get('tasks_in_graph')} tasks "
                  f"({p['graph'].get('tasks_after_optimize')} optimized), built in "
                  f"{p['graph']['client_build_s'] * 1e3:.0f} ms; ran "
                  f"{tot.get('tasks', 0):.0f} tasks, compute {tot.get('compute_s', 0):.2f} s, "
                  f"disk-read {tot.get('disk-read_s', 0):.2f} s, disk-write "
                  f"{tot.get('disk-write_s', 0):.2f} s, transfer {tot.get('transfer_s', 0):.2f} s",
                  flush=True)
            for name, entry in sorted(p["by_task"].items(), key=lambda kv: -kv[1].get(
                    "compute_s", 0)):
                print(f"      {name:40s} {entry['tasks']:5.0f} tasks  compute "
                      f"{entry.get('compute_s', 0):.3f} s  disk-read "
                      f"{entry.get('disk-read_s', 0):.3f} s", flush=True)
        report["profiles"] = profiles

        # A subsample of the same persisted (spilled) data: tenure's dask
        # linker on the cluster against tenure's C linker in this process.
        n = SUBSAMPLE_CHUNKS * size["row_chunk"]
        xs, ys = X[:n].compute(), Y[:n].compute()
        sub_dask = TenureRun(size["features"])
        sub_dask.reset()
        [sub_dask.epoch(X[:n], Y[:n]) for _ in range(args.epochs)]
        step_c, w_c, b_c = tenure_step(size["features"], "c")
        [step_c(xs, ys) for _ in range(args.epochs)]
        w_s, b_s = sub_dask.params()
        subsample_same = bool(np.allclose(w_s, w_c.get_value(), rtol=1e-9, atol=1e-12)
                              and np.isclose(b_s, b_c.get_value(), rtol=1e-9, atol=1e-12))
        end = cluster_state(client)
    finally:
        # a worker's heartbeat racing the scheduler's shutdown logs an error
        try:
            client.run(_quiet, "distributed", logging.CRITICAL)
        except Exception:  # noqa: BLE001  (a cluster that failed: close it all the same)
            pass
        client.close()
        cluster.close()
        shutil.rmtree(spill_dir, ignore_errors=True)
    last = {s: rounds[s][-1] for s in SYSTEMS}
    t, d = last["tenure-dask"], last["dask.array"]
    same = bool(np.allclose(t["w"], d["w"], rtol=1e-9, atol=1e-12)
                and np.isclose(t["b"], d["b"], rtol=1e-9, atol=1e-12)
                and np.allclose(t["losses"], d["losses"], rtol=1e-9))
    max_w_diff = float(np.max(np.abs(t["w"] - d["w"])))
    spilled = all(t["written_mb"] > 0 and t["read_mb"] > 0
                  for s in SYSTEMS for r in rounds[s] for t in r["traffic"])
    restarted = ({s["pid"] for s in state0.values()} != {s["pid"] for s in end.values()})
    epoch_times = {s: [x for r in rounds[s] for x in r["times_s"]] for s in SYSTEMS}
    median = {s: statistics.median(v) for s, v in epoch_times.items()}
    per_epoch = {s: {k: statistics.median(t[k] for r in rounds[s] for t in r["traffic"])
                     for k in ("written_mb", "read_mb")} for s in SYSTEMS}
    ratio = statistics.median(paired["ratios"])
    busy = statistics.median(b for s in SYSTEMS for r in rounds[s] for b in r["busy_cores"])
    prof = {p["system"]: p for p in profiles}
    table = ["| system | time/epoch (median) | vs dask.array (median of pairs) | "
             "spill written/epoch | "
             "read back/epoch | tasks/epoch | compute s/epoch | same result |",
             "|---|---|---|---|---|---|---|---|"]
    for s in SYSTEMS:
        table.append(f"| {s} | {median[s]:.2f} s | {ratio if s == SYSTEMS[0] else 1:.2f} | "
                     f"{per_epoch[s]['written_mb']:.0f} MiB | {per_epoch[s]['read_mb']:.0f} MiB | "
                     f"{prof[s]['totals'].get('tasks', 0):.0f} | "
                     f"{prof[s]['totals'].get('compute_s', 0):.2f} | {same} |")
    text = (f"{args.epochs} epochs x {args.rounds} rounds, {size['rows']} x {size['features']} "
            f"f64 + labels = {data_mb:.0f} MiB on 2 workers x 1 thread limited to "
            f"{size['worker_mb']} MiB each ({limit_mb} MiB in all: data = "
            f"{data_mb / limit_mb:.2f}x); made on the workers in {report['make_data_s']:.1f} s; "
            f"held at the end: {sum(s['in_memory_mb'] for s in end.values()):.0f} MiB in "
            f"memory, {sum(s['on_disk_mb'] for s in end.values()):.0f} MiB on disk; highest "
            f"worker resident memory {max(s['peak_rss_mb'] for s in end.values()):.0f} MiB; "
            f"spilled in every epoch: {spilled}; a worker restarted: {restarted}; largest |w| "
            f"difference {max_w_diff:.1e}; subsample ({n} rows) equals the C linker's: "
            f"{subsample_same}; cores other processes kept busy during an epoch (median, of "
            f"{os.cpu_count()}): "
            f"{busy:.1f}\n\n" + "\n".join(table))
    print(text)
    report.update({"data_mb": data_mb, "epoch_times_s": epoch_times, "median_epoch_s": median,
                   "paired_ratios": paired["ratios"], "median_paired_ratio": ratio,
                   "median_busy_cores": busy,
                   "spill_per_epoch_mb": per_epoch, "same_parameters": same,
                   "max_w_difference": max_w_diff, "spilled_every_epoch": spilled,
                   "worker_restarted": restarted, "subsample_equals_c": subsample_same,
                   "end": end, "total_s": time.perf_counter() - t0,
                   "rounds_detail": {s: [{k: v for k, v in r.items() if k not in ("w",)}
                                         | {"w": r["w"].tolist()} for r in rounds[s]]
                                     for s in SYSTEMS}})
    os.makedirs(args.out, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    with open(os.path.join(args.out, f"dask_spill{suffix}.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(args.out, f"dask_spill{suffix}.json"), "w") as fh:
        json.dump(report, fh, indent=1, default=str)
    return 0 if same and subsample_same and spilled and not restarted else 1


if __name__ == "__main__":
    sys.exit(main())
