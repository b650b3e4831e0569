"""Compile time: the first compile of a graph into an empty cache, per system.

    python benchmarks/compile_time.py [--repeat N] [--only GRAPH ...] [--systems SYSTEM ...]
                                      [--out DIR]

Graphs (small sizes: compile time does not depend on them):

- ``demo``: ``tenure.demo``'s model (MLP 2-64-64-3, float64): the training
  step (log-softmax cross-entropy, gradients, SGD updates of shared
  parameters) and the prediction function (argmax of the logits).  Its graph
  code is repeated here, once per system, so that the two functions are timed
  apart: the table gives both together and, on a row of its own, ``predict``
  compiled after ``train`` in the same process.
- ``mlp_train``: ``workloads.MlpTrain`` (ReLU MLP 64-128-128-128-10, batch
  32, float32; MSE, every gradient, SGD on shared parameters).
- ``softmax_grad``: ``workloads.SoftmaxGrad`` (gradient of
  ``sum(softmax(x)*w)`` wrt ``x``, 32x64 float32).

Systems: ``tenure-c`` (tenure's C linker), ``pytensor-c`` (PyTensor's C mode:
the C VM with the FAST_RUN rewrites) and ``jax`` (``jax.jit`` on the CPU),
each skipped as "not installed" when its package is missing.

Method.  Every measurement is one fresh process (this script with the hidden
``--worker`` argument), which reports JSON on stdout.  tenure and PyTensor get
a new empty temporary cache directory each (``TENURE_FLAGS=compiledir=...``,
``PYTENSOR_FLAGS=compiledir=...``).  The worker imports the library first
(not timed), then times the library's one-time runtime build on its own:
tenure's C runtime (``tenure.linkers.c.runtime.load_runtime()``, when that
module exists), PyTensor's lazylinker and cutils extensions (importing
``pytensor.link.c.cvm`` and ``.cutils`` compiles them), JAX's backend start-up
(``jax.devices()``; per process, nothing is built).  Then it times the graph:
from the first symbolic variable to the compiled function (graph, gradients,
rewrites, code generation, C compiler), shared variables included.  For JAX
the graph time is the first call of the jitted function (tracing and XLA
compilation) less the median of five later calls.  Each compiled function is
called once afterwards (not timed) to check that it runs.

Warm cache: for tenure and PyTensor a second fresh process compiles the same
graph with the cache the first one filled (runtime loaded first, not counted).
JAX keeps no persistent compilation cache unless configured, so it has none.

With ``--repeat N`` every figure is the median of N such cold/warm pairs.
Results: ``DIR/compile_time.md`` (the table, also printed) and
``DIR/compile_time.json`` (every run), ``DIR`` defaulting to
``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("tenure") is None:
    # not installed (or a stale editable install): measure the checkout this script is in
    sys.path.insert(1, os.path.dirname(HERE))

from workloads import LR, MlpTrain, SoftmaxGrad, pytensor_mode, symbolic_mlp  # noqa: E402

GRAPHS = ("demo", "mlp_train", "softmax_grad")
SYSTEMS = ("tenure-c", "pytensor-c", "jax")
PACKAGE = {"tenure-c": "tenure", "pytensor-c": "pytensor", "jax": "jax"}
#: the environment variable that points each cached system at a compile directory
CACHE_FLAGS = {"tenure-c": "TENURE_FLAGS", "pytensor-c": "PYTENSOR_FLAGS"}

MLP_SIZES = {"batch": 32, "layers": (64, 128, 128, 128, 10)}
SOFTMAX_SIZES = {"rows": 32, "cols": 64}
DEMO_SIZES = {"batch": 32, "n_features": 2, "hidden": 64, "n_classes": 3, "lr": 0.1}

RESULT_MARK = "compile_time result: "
WORKER_TIMEOUT_S = 300
JAX_STEADY_CALLS = 5


# ============================================================================
# worker side: one system, one graph, one fresh process


def _seconds_since(start: float) -> float:
    return time.perf_counter() - start


def _demo_data() -> dict:
    """Parameters drawn as ``tenure.demo.init_layer`` draws them, and one batch."""
    rng = np.random.default_rng(0)
    s = DEMO_SIZES
    sizes = (s["n_features"], s["hidden"], s["hidden"], s["n_classes"])
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params += [rng.normal(scale=np.sqrt(2.0 / n_in), size=(n_in, n_out)), np.zeros(n_out)]
    return {"params": params,
            "X": rng.standard_normal((s["batch"], s["n_features"])),
            "y": rng.integers(0, s["n_classes"], s["batch"]).astype(np.int32)}


def _mlp_data() -> dict:
    return MlpTrain.data(**MLP_SIZES, rng=np.random.default_rng(0))


def _softmax_data() -> dict:
    return SoftmaxGrad.data(**SOFTMAX_SIZES, rng=np.random.default_rng(0))


# --- tenure-c


def tenure_runtime() -> float | None:
    """Seconds to build (or load) tenure's C runtime; None before it exists."""
    if importlib.util.find_spec("tenure.linkers.c.runtime") is None:
        return None
    runtime = importlib.import_module("tenure.linkers.c.runtime")
    if not hasattr(runtime, "load_runtime"):
        return None
    start = time.perf_counter()
    runtime.load_runtime()
    return _seconds_since(start)


def tenure_demo() -> dict:
    """``tenure.demo.build_model``'s two functions, each timed from its first variable."""
    import tenure as tn
    from tenure import In, Out
    d, lr = _demo_data(), DEMO_SIZES["lr"]
    mode = tn.Mode(linker="c")
    start = time.perf_counter()
    params = [tn.shared(p, borrow=True) for p in d["params"]]
    W1, b1, W2, b2, W3, b3 = params
    X, y = tn.matrix("X"), tn.vector("y", dtype="int32")
    h = tn.relu(tn.relu(X @ W1 + b1) @ W2 + b2)
    logits = h @ W3 + b3
    loss = -tn.log_softmax(logits, axis=1)[tn.arange(y.shape[0]), y].mean()
    grads = tn.grad(loss, params)
    train = tn.function([In(X, borrow=True), In(y, borrow=True)], loss,
                        updates=[(p, p - lr * g) for p, g in zip(params, grads)], mode=mode)
    train_s = _seconds_since(start)
    start = time.perf_counter()
    predict = tn.function([In(X, borrow=True)], Out(logits.argmax(axis=1), borrow=True),
                          mode=mode)
    predict_s = _seconds_since(start)
    train(d["X"], d["y"]), predict(d["X"])
    return {"train": train_s, "predict": predict_s}


def tenure_workload(workload, data) -> dict:
    built = workload.tenure(data, "c")
    built.step()
    return {"graph": built.compile_s}


# --- pytensor-c


def pytensor_runtime() -> float:
    """Seconds to compile PyTensor's C VM (lazylinker) and its cutils extension."""
    start = time.perf_counter()
    importlib.import_module("pytensor.link.c.cvm")
    importlib.import_module("pytensor.link.c.cutils")
    return _seconds_since(start)


def pytensor_demo() -> dict:
    """The demo's two functions in PyTensor, timed as for tenure."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor import In, Out
    from pytensor.tensor.special import log_softmax
    d, lr = _demo_data(), DEMO_SIZES["lr"]
    mode = pytensor_mode("c")  # the C VM with the FAST_RUN rewrites, as in run.py
    start = time.perf_counter()
    params = [pytensor.shared(p, borrow=True) for p in d["params"]]
    W1, b1, W2, b2, W3, b3 = params
    X, y = pt.matrix("X", dtype="float64"), pt.vector("y", dtype="int32")
    h = pt.maximum(pt.maximum(X @ W1 + b1, 0) @ W2 + b2, 0)
    logits = h @ W3 + b3
    loss = -log_softmax(logits, axis=1)[pt.arange(y.shape[0]), y].mean()
    grads = pytensor.grad(loss, params)
    train = pytensor.function([In(X, borrow=True), In(y, borrow=True)], loss,
                              updates=[(p, p - lr * g) for p, g in zip(params, grads)],
                              mode=mode)
    train_s = _seconds_since(start)
    start = time.perf_counter()
    predict = pytensor.function([In(X, borrow=True)], Out(logits.argmax(axis=1), borrow=True),
                                mode=mode)
    predict_s = _seconds_since(start)
    train(d["X"], d["y"]), predict(d["X"])
    return {"train": train_s, "predict": predict_s}


def pytensor_workload(workload, data) -> dict:
    built = workload.pytensor(data, "c")
    built.step()
    return {"graph": built.compile_s}


# --- jax


def jax_runtime() -> float:
    """Seconds for JAX to start its CPU backend (per process; nothing is built)."""
    import jax
    start = time.perf_counter()
    jax.devices()
    return _seconds_since(start)


def jax_compile_s(fn, *args) -> float:
    """Seconds of the first call of ``jax.jit(fn)`` (tracing + XLA compilation)
    less the median of ``JAX_STEADY_CALLS`` later calls."""
    import jax
    jitted = jax.jit(fn)
    start = time.perf_counter()
    jax.block_until_ready(jitted(*args))
    first = _seconds_since(start)
    steady = []
    for _ in range(JAX_STEADY_CALLS):
        start = time.perf_counter()
        jax.block_until_ready(jitted(*args))
        steady.append(_seconds_since(start))
    return max(first - statistics.median(steady), 0.0)


def _jax_sgd(loss_fn, lr: float):
    """A pure training step ``(params, *batch) -> (loss, new params)``: SGD on ``loss_fn``."""
    import jax

    def step(params, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        return loss, [p - lr * g for p, g in zip(params, grads)]
    return step


def jax_demo() -> dict:
    """The demo's training step (pure: returns the new parameters) and prediction."""
    import jax
    import jax.numpy as jnp
    d = _demo_data()

    def logits_of(params, X):
        W1, b1, W2, b2, W3, b3 = params
        h = jax.nn.relu(jax.nn.relu(X @ W1 + b1) @ W2 + b2)
        return h @ W3 + b3

    def loss_of(params, X, y):
        return -jax.nn.log_softmax(logits_of(params, X), axis=1)[jnp.arange(y.shape[0]), y].mean()

    params = [jnp.asarray(p) for p in d["params"]]
    X, y = jnp.asarray(d["X"]), jnp.asarray(d["y"])
    return {"train": jax_compile_s(_jax_sgd(loss_of, DEMO_SIZES["lr"]), params, X, y),
            "predict": jax_compile_s(lambda p, X: logits_of(p, X).argmax(axis=1), params, X)}


def jax_mlp_train() -> dict:
    import jax
    import jax.numpy as jnp
    d = _mlp_data()

    def loss_of(params, x, t):
        return jnp.mean((symbolic_mlp(jax.nn.relu, x, params) - t) ** 2)

    params = [jnp.asarray(p) for p in d["params"]]
    return {"graph": jax_compile_s(_jax_sgd(loss_of, LR), params, jnp.asarray(d["x"]),
                                   jnp.asarray(d["t"]))}


def jax_softmax_grad() -> dict:
    import jax
    import jax.numpy as jnp
    d = _softmax_data()
    grad = jax.grad(lambda x, w: jnp.sum(jax.nn.softmax(x, axis=1) * w))
    return {"graph": jax_compile_s(grad, jnp.asarray(d["x"]), jnp.asarray(d["w"]))}


# --- dispatch

RUNTIMES = {"tenure-c": tenure_runtime, "pytensor-c": pytensor_runtime, "jax": jax_runtime}
BUILDERS = {
    "tenure-c": {"demo": tenure_demo,
                 "mlp_train": lambda: tenure_workload(MlpTrain, _mlp_data()),
                 "softmax_grad": lambda: tenure_workload(SoftmaxGrad, _softmax_data())},
    "pytensor-c": {"demo": pytensor_demo,
                   "mlp_train": lambda: pytensor_workload(MlpTrain, _mlp_data()),
                   "softmax_grad": lambda: pytensor_workload(SoftmaxGrad, _softmax_data())},
    "jax": {"demo": jax_demo, "mlp_train": jax_mlp_train, "softmax_grad": jax_softmax_grad},
}


def _import_library(system: str) -> str:
    """Import the system's library (not timed); its version."""
    module = importlib.import_module(PACKAGE[system])
    if system == "pytensor-c":
        import pytensor.tensor  # noqa: F401  (what every graph needs)
    if system == "jax":
        module.config.update("jax_platforms", "cpu")
        module.config.update("jax_enable_x64", True)  # the demo is float64, as in tenure
    return module.__version__


def _fallback_notes(system: str, caught) -> list[str]:
    """Why the measurement may not be of the system's C path."""
    notes = sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}"
                    for w in caught if w.category.__name__ == "CLinkerWarning"})
    if system == "pytensor-c":
        import pytensor
        if not pytensor.config.cxx:
            notes.append("PyTensor found no C++ compiler (config.cxx is empty): "
                         "it ran the Python implementations")
    return notes


def worker(system: str, graph: str) -> dict:
    """Measure one system's runtime build and one graph's compile in this process."""
    version = _import_library(system)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runtime_s = RUNTIMES[system]()
        parts = BUILDERS[system][graph]()
    return {"version": version, "runtime_s": runtime_s, "parts": parts,
            "compile_s": sum(parts.values()), "notes": _fallback_notes(system, caught)}


def worker_main(system: str, graph: str) -> None:
    try:
        result = worker(system, graph)
    except Exception as exc:  # reported, not raised: the parent shows it in the table
        result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                  if str(exc) else type(exc).__name__}
    print(RESULT_MARK + json.dumps(result), flush=True)


# ============================================================================
# parent side: fresh processes, empty caches, medians, the table


def installed(system: str) -> bool:
    return importlib.util.find_spec(PACKAGE[system]) is not None


def worker_env(system: str, compiledir: str | None) -> dict:
    """The environment with ``system`` pointed at ``compiledir`` (later flags win)."""
    env = dict(os.environ)
    if compiledir is not None:
        name = CACHE_FLAGS[system]
        env[name] = ",".join(filter(None, (env.get(name, ""), f"compiledir={compiledir}")))
    if system == "jax":
        env.pop("JAX_COMPILATION_CACHE_DIR", None)  # no persistent cache: every compile is cold
        env["JAX_PLATFORMS"] = "cpu"
    return env


def run_worker(system: str, graph: str, compiledir: str | None) -> dict:
    """One fresh process measuring ``graph`` on ``system``; its JSON report."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", system, graph]
    try:
        proc = subprocess.run(command, env=worker_env(system, compiledir), capture_output=True,
                              text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"worker exited with {proc.returncode}: {tail[:300]}"}


def measure_pair(system: str, graph: str) -> dict:
    """A cold run into a new empty cache and, for systems with a cache, a warm run
    in another process with the cache the cold run filled."""
    if system not in CACHE_FLAGS:
        return {"cold": run_worker(system, graph, None), "warm": None}
    compiledir = tempfile.mkdtemp(prefix=f"compile-time-{system}-")
    try:
        cold = run_worker(system, graph, compiledir)
        warm = None if "error" in cold else run_worker(system, graph, compiledir)
    finally:
        shutil.rmtree(compiledir, ignore_errors=True)
    return {"cold": cold, "warm": warm}


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    """Medians over the runs, per figure; the errors and notes met on the way."""
    cold = [r["cold"] for r in runs if "error" not in r["cold"]]
    warm = [r["warm"] for r in runs if r["warm"] is not None and "error" not in r["warm"]]
    errors = sorted({r[k]["error"] for r in runs for k in ("cold", "warm")
                     if r[k] is not None and "error" in r[k]})
    part_names = cold[0]["parts"] if cold else {}
    return {
        "compile_s": _median(r["compile_s"] for r in cold),
        "runtime_s": _median(r["runtime_s"] for r in cold),
        "warm_compile_s": _median(r["compile_s"] for r in warm),
        "warm_runtime_s": _median(r["runtime_s"] for r in warm),
        "parts": {p: _median(r["parts"][p] for r in cold) for p in part_names},
        "warm_parts": {p: _median(r["parts"][p] for r in warm) for p in part_names},
        "version": cold[0]["version"] if cold else None,
        "notes": sorted({n for r in cold + warm for n in r["notes"]}),
        "errors": errors,
    }


def _cell(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.2f}"


def table_rows(graph: str, system: str, entry: dict) -> list[list[str]]:
    """The table's rows for one graph x system (two for ``demo``)."""
    if entry.get("skipped"):
        return [[graph, system, entry["skipped"], "—", "—"]]
    s = entry["summary"]
    if s["compile_s"] is None:
        return [[graph, system, "error", "—", "—"]]
    mark = " ‡" if s["notes"] else ""  # the footnote says what may not be the C path
    rows = [[graph, system, _cell(s["compile_s"]) + mark, _cell(s["runtime_s"]),
             _cell(s["warm_compile_s"]) + mark]]
    if "predict" in s["parts"]:
        rows[0][0] = "demo (train + predict)"
        rows.append(["demo: predict, after train", system, _cell(s["parts"]["predict"]) + mark,
                     "—", _cell(s["warm_parts"].get("predict")) + mark])
    return rows


def markdown(results: list[dict], meta: dict) -> str:
    head = ["graph", "system", "first compile s (empty cache)", "runtime one-time build s",
            "warm-cache compile s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    footnotes = []
    for entry in results:
        for row in table_rows(entry["graph"], entry["system"], entry):
            lines.append("| " + " | ".join(row) + " |")
        s = entry.get("summary") or {}
        for text in s.get("errors", []):
            footnotes.append(f"- {entry['graph']} / {entry['system']}: {text}")
        for text in s.get("notes", []):
            footnotes.append(f"- ‡ {entry['graph']} / {entry['system']}: {text}")
    versions = "".join(f"{k} {v}; " for k, v in sorted(meta["versions"].items()))
    lines += ["", f"Median of {meta['repeat']} fresh process(es) per figure; {meta['cores']} "
              f"cores; {versions}{meta['date']}.  Runtime: tenure's C runtime, PyTensor's "
              "lazylinker + cutils, JAX's backend start-up (per process, nothing built)."]
    if footnotes:
        lines += ["", *footnotes]
    return "\n".join(lines) + "\n"


def run_all(graphs, systems, repeat: int) -> list[dict]:
    results = []
    for graph in graphs:
        for system in systems:
            entry = {"graph": graph, "system": system}
            if not installed(system):
                entry["skipped"] = "not installed"
            else:
                entry["runs"] = []
                for _ in range(repeat):
                    entry["runs"].append(measure_pair(system, graph))
                entry["summary"] = summarize(entry["runs"])
            s = entry.get("summary") or {}
            print(f"  {graph:<13} {system:<11} first {_cell(s.get('compile_s')):>6} s  "
                  f"runtime {_cell(s.get('runtime_s')):>6} s  "
                  f"warm {_cell(s.get('warm_compile_s')):>6} s"
                  + (f"  ({entry['skipped']})" if "skipped" in entry else ""),
                  file=sys.stderr, flush=True)
            results.append(entry)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1,
                        help="median of N fresh cold/warm process pairs (default 1)")
    parser.add_argument("--only", nargs="+", choices=GRAPHS, default=list(GRAPHS),
                        metavar="GRAPH", help=f"graphs to measure: {', '.join(GRAPHS)}")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        metavar="SYSTEM", help=f"systems to measure: {', '.join(SYSTEMS)}")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", nargs=2, metavar=("SYSTEM", "GRAPH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(*args.worker)
        return
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    start = time.perf_counter()
    results = run_all(args.only, args.systems, args.repeat)
    meta = {"repeat": args.repeat, "cores": os.cpu_count(), "python": platform.python_version(),
            "date": datetime.date.today().isoformat(), "total_s": _seconds_since(start),
            "versions": {PACKAGE[e["system"]]: e["summary"]["version"] for e in results
                         if e.get("summary", {}).get("version")}}
    table = markdown(results, meta)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compile_time.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "compile_time.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print(table, end="")


if __name__ == "__main__":
    main()
