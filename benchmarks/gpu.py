"""GPU benchmarks: tenure's CUDA linker against PyTorch, torch.compile, JAX and CuPy.

    python benchmarks/run.py --device cuda [--only NAME ...] [--systems SYSTEM ...] [--quick]
    python benchmarks/run.py --device cuda --emulated --quick    # no GPU: tenure alone

Each system x workload pair runs in a fresh process (``gpu.py --worker --system S
--workload W [--variant V]``) printing one JSON line.  It makes the data on the
host (fixed seed) and a float64 NumPy reference (not for the MLP at full size:
too slow), puts inputs and parameters on the device once, builds, and measures:

- ``compile_s``: tenure's ``function`` (graph, gradients, compilation), JAX's
  lower + compile, torch.compile's first call; 0 when eager.  The first call
  (``first_call_s``) is checked against the reference (relative error 1e-3).
- ``time_s``: after 2 warm-up calls, the median of single calls each followed
  by a device synchronization (without it the time would be the launch's);
  at least 5 calls, as many as fit in ~3 s.
- ``peak_mb``: device memory one call needs above what was in use before it
  (the previous result dropped: a fresh result counts, a buffer kept for a
  borrowed output does not).  tenure, CuPy: a hook on CuPy's pool
  (``cuda_runtime().track()``); PyTorch: ``max_memory_allocated()`` after
  ``reset_peak_memory_stats()``; JAX: ``peak_bytes_in_use`` less
  ``bytes_in_use`` before, a peak it cannot reset (earlier calls count too).
- ``allocations_per_call``: pool allocations over 10 calls (tenure, CuPy,
  PyTorch); 0 is the target of ``borrow_steady_state [borrow=True]``.
- elemwise: bytes moved (x, z read, the result written) per second over the
  copy bandwidth measured in the same worker: ``bandwidth_fraction`` (>= 0.8).

Products are plain float32 everywhere (JAX's default TF32 is switched off, as
it is off in PyTorch and CuPy).  Results: ``benchmarks/results/gpu[-emulated]
[-quick].json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import report  # noqa: E402
from worker_process import worker_result  # noqa: E402
from workloads import (LR, WORKLOADS, MlpTrain, SoftmaxGrad, SoftmaxInfer,  # noqa: E402
                       family, symbolic_mlp)

SYSTEMS = ("tenure-cuda", "torch", "torch-compile", "jax", "cupy")
MODULES = {"torch": "torch", "jax": "jax", "cupy": "cupy"}
BASELINE = "torch"
_MLP = {"full": {"batch": 4096, "layers": (1024, 4096, 4096, 4096, 1024)},
        "quick": {"batch": 256, "layers": (64, 128, 128, 64)}}
_SOFTMAX = {"full": {"rows": 8192, "cols": 8192}, "quick": {"rows": 512, "cols": 512}}
_ELEMWISE = {"full": {"n": 64 * 2 ** 20}, "quick": {"n": 2 ** 20}}
SIZES = {"elemwise": _ELEMWISE, "softmax_infer": _SOFTMAX, "softmax_grad": _SOFTMAX,
         "mlp_train": _MLP, "mlp_train_budget": _MLP, "borrow_steady_state": _ELEMWISE}
GRADIENT = {"softmax_grad", "mlp_train", "mlp_train_budget"}
ELEMWISE_GRAPH = {"elemwise", "borrow_steady_state"}
#: where the other workloads' data and float64 references come from
SOURCES = {"softmax_infer": SoftmaxInfer, "softmax_grad": SoftmaxGrad, "mlp_train": MlpTrain,
           "mlp_train_budget": MlpTrain}
#: tenure's variants; the peers run each workload once
VARIANTS = {"mlp_train_budget": ("budget 1.0", "budget 0.5"),
            "borrow_steady_state": ("borrow=True", "borrow=False")}
#: a float64 host reference of the full-size MLP step takes minutes: checked with --quick
NO_FULL_REFERENCE = {"mlp_train", "mlp_train_budget"}
SETTINGS = {"full": dict(warmup=2, target_s=3.0, min_calls=5, max_calls=1000),
            "quick": dict(warmup=2, target_s=0.5, min_calls=5, max_calls=100)}
TRACKED_CALLS = 10
TIMEOUT_S = {"full": 600, "quick": 240}
BANDWIDTH_TARGET = 0.8
MB = 1024 * 1024


class Skip(Exception):
    """The pair cannot run here (the message says why): recorded, never a failure."""


# -- devices: how each system moves data, synchronizes and counts memory -------------


class TenureDevice:
    """tenure's ``"cuda"`` runtime: CuPy's pool or the emulated device.  The cupy
    system uses it too: the same pool, so the same hook counts its memory."""

    def __init__(self, emulated: bool):
        import tenure as tn
        if emulated:
            tn.config.cuda_emulation = True
        from tenure.symbolic.device import CudaUnavailable, cuda_runtime
        try:
            self.rt = cuda_runtime()
        except CudaUnavailable as exc:
            raise Skip(str(exc)) from None
        self.name = "emulated" if emulated else gpu_name()
        self.versions = {"tenure": tn.__version__}
        if not emulated:
            self.versions["cupy"] = self.rt.cupy.__version__
        self.sync = self.rt.synchronize

    def put(self, a):
        return self.rt.from_host(np.ascontiguousarray(a))

    def get(self, a):
        return self.rt.to_host(a) if self.rt.is_device_array(a) else np.asarray(a)

    def peak_bytes(self, call):
        with self.rt.track() as usage:
            call()
            self.sync()
        return usage.peak_bytes

    def allocations(self, call, calls):
        with self.rt.track() as usage:
            for _ in range(calls):
                call()
            self.sync()
        return usage.n_allocations / calls

    def copy_seconds(self, a, b):
        return _copy_seconds(lambda: b.__setitem__(Ellipsis, a), self.sync)


class TorchDevice:
    def __init__(self):
        import torch
        if not torch.cuda.is_available():
            raise Skip(f"PyTorch {torch.__version__} sees no CUDA device")
        torch.set_float32_matmul_precision("highest")  # plain float32, no TF32
        self.torch, self.cuda, self.sync = torch, torch.cuda, torch.cuda.synchronize
        self.name, self.versions = torch.cuda.get_device_name(0), {"torch": torch.__version__}

    def put(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to("cuda")

    def get(self, a):
        return a.detach().cpu().numpy()

    def peak_bytes(self, call):
        self.sync()
        before = self.cuda.memory_allocated()
        self.cuda.reset_peak_memory_stats()
        call()
        self.sync()
        return self.cuda.max_memory_allocated() - before

    def allocations(self, call, calls):
        key = "allocation.all.allocated"  # the caching allocator's running count of blocks
        n0 = self.cuda.memory_stats().get(key, 0)
        for _ in range(calls):
            call()
        self.sync()
        return (self.cuda.memory_stats().get(key, 0) - n0) / calls

    def copy_seconds(self, a, b):
        return _copy_seconds(lambda: b.copy_(a), self.sync)


class JaxDevice:
    """Steps wait for their own results (``block_until_ready``): ``sync`` does nothing;
    JAX counts no allocations."""

    def __init__(self):
        import jax
        if jax.default_backend() != "gpu":
            raise Skip(f"JAX {jax.__version__} has no GPU backend here "
                       f"(backend {jax.default_backend()})")
        jax.config.update("jax_default_matmul_precision", "highest")  # no TF32
        self.jax = jax
        self.name, self.versions = jax.devices()[0].device_kind, {"jax": jax.__version__}

    def put(self, a):
        return self.jax.device_put(np.ascontiguousarray(a))

    def get(self, a):
        return np.asarray(a)

    def peak_bytes(self, call):
        before = (self.jax.devices()[0].memory_stats() or {}).get("bytes_in_use")
        call()
        peak = (self.jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
        return None if before is None or peak is None else peak - before

    def sync(self):
        pass

    def allocations(self, call, calls):
        return None

    def copy_seconds(self, a, b):
        copy = self.jax.jit(lambda v: v.copy())
        return _copy_seconds(lambda: copy(a).block_until_ready(), self.sync)


def make_device(fam: str, emulated: bool):
    if fam in ("tenure", "cupy"):
        return TenureDevice(emulated)
    return TorchDevice() if fam == "torch" else JaxDevice()


def gpu_name() -> str:
    try:
        import cupy
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no CuPy, or no device
        return "unknown"


def _copy_seconds(copy, sync) -> float:
    return timed_calls(copy, sync, dict(warmup=1, target_s=0, min_calls=10, max_calls=10))[
        "time_s"]


# -- workloads: the math of workloads.py, float32, on the device ---------------------


@dataclass
class Built:
    step: object                     # one call -> its result (device arrays)
    observe: object                  # a result -> host arrays compared with the reference
    compile_s: float = 0.0
    compiled_on_first_call: bool = False


def make_data(workload: str, sizes: dict, rng) -> dict:
    if workload in ELEMWISE_GRAPH:
        return {"x": rng.standard_normal(sizes["n"], dtype=np.float32),
                "z": rng.standard_normal(sizes["n"], dtype=np.float32)}
    return SOURCES[workload].data(**sizes, rng=rng)


def reference(workload: str, d: dict) -> list:
    if workload in ELEMWISE_GRAPH:
        x, z = d["x"].astype(np.float64), d["z"].astype(np.float64)
        return [np.exp(x) * 2 + np.sin(z) * x]
    return SOURCES[workload].reference(d)


def _clocked(make):
    start = time.perf_counter()
    value = make()
    return value, time.perf_counter() - start


def build_tenure(workload, d, dev, variant) -> Built:
    import tenure as tn
    In, Out = tn.In, tn.Out

    def compile_():
        if workload in ELEMWISE_GRAPH:
            x, z = tn.vector("x", dtype="float32"), tn.vector("z", dtype="float32")
            y = Out(tn.exp(x) * 2 + tn.sin(z) * x, borrow=variant != "borrow=False")
            return tn.function([In(x, borrow=True), In(z, borrow=True)], y, mode=mode)
        x = tn.matrix("x", dtype="float32")
        if workload == "softmax_infer":
            y = tn.exp(x - tn.log(tn.sum(tn.exp(x), axis=1, keepdims=True)))
            return tn.function([In(x, borrow=True)], Out(y, borrow=True), mode=mode)
        if workload == "softmax_grad":
            w = tn.matrix("w", dtype="float32")
            g = tn.grad(tn.sum(tn.softmax(x, axis=1) * w), x)
            return tn.function([In(x, borrow=True), In(w, borrow=True)], Out(g, borrow=True),
                               mode=mode)
        t = tn.matrix("t", dtype="float32")
        loss = tn.mean((symbolic_mlp(tn.relu, x, params) - t) ** 2)
        grads = tn.grad(loss, params)
        return tn.function([In(x, borrow=True), In(t, borrow=True)], loss, mode=mode,
                           updates=[(p, p - LR * g) for p, g in zip(params, grads)])

    budget = {"activation_memory_budget": float(variant.split()[-1])} \
        if workload == "mlp_train_budget" else {}
    mode = tn.Mode(linker="cuda", **budget)
    # the parameters go to the device before the clock starts: data, not compilation
    params = [tn.shared(p, device="cuda") for p in d.get("params", [])]
    f, compile_s = _clocked(compile_)
    names = ("x", "z") if workload in ELEMWISE_GRAPH else \
        {"softmax_infer": ("x",), "softmax_grad": ("x", "w")}.get(workload, ("x", "t"))
    args = [dev.put(d[k]) for k in names]
    return Built(lambda: f(*args),
                 lambda r: [dev.get(r)] + [p.get_value() for p in params], compile_s)


def build_cupy(workload, d, dev, variant) -> Built:
    cp = dev.rt.cupy
    x = dev.put(d["x"])
    if workload == "elemwise":
        z = dev.put(d["z"])
        return Built(lambda: cp.exp(x) * 2 + cp.sin(z) * x, lambda r: [dev.get(r)])
    return Built(lambda: cp.exp(x - cp.log(cp.sum(cp.exp(x), axis=1, keepdims=True))),
                 lambda r: [dev.get(r)])


def build_torch(workload, d, dev, variant, compiled: bool) -> Built:
    """Eager, or with the function (for gradients: the forward, whose backward
    AOTAutograd compiles with it) through ``torch.compile`` in its default mode."""
    torch = dev.torch
    wrap = torch.compile if compiled else (lambda fn: fn)
    x = dev.put(d["x"])
    if workload in ("elemwise", "softmax_infer"):
        if workload == "elemwise":
            z = dev.put(d["z"])
            fn, args = wrap(lambda x, z: torch.exp(x) * 2 + torch.sin(z) * x), (x, z)
        else:
            fn, args = wrap(lambda x: torch.exp(
                x - torch.log(torch.sum(torch.exp(x), dim=1, keepdim=True)))), (x,)

        def step():
            with torch.inference_mode():
                return fn(*args)
        return Built(step, lambda r: [dev.get(r)], compiled_on_first_call=compiled)
    if workload == "softmax_grad":
        x.requires_grad_()
        w = dev.put(d["w"])
        forward = wrap(lambda x, w: torch.sum(torch.softmax(x, dim=1) * w))
        return Built(lambda: torch.autograd.grad(forward(x, w), x)[0], lambda r: [dev.get(r)],
                     compiled_on_first_call=compiled)
    t = dev.put(d["t"])
    params = [dev.put(p).requires_grad_() for p in d["params"]]
    loss_fn = wrap(lambda x, t, *ps: torch.mean((symbolic_mlp(torch.relu, x, ps) - t) ** 2))

    def train_step():
        loss = loss_fn(x, t, *params)
        grads = torch.autograd.grad(loss, params)  # no .grad tensors kept between calls
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(g, alpha=LR)
        return loss.detach()
    return Built(train_step, lambda r: [dev.get(r)] + [dev.get(p) for p in params],
                 compiled_on_first_call=compiled)


def build_jax(workload, d, dev, variant) -> Built:
    jax = dev.jax
    import jax.numpy as jnp
    if workload in GRADIENT and workload != "softmax_grad":
        return _jax_train(jax, jnp, d, dev)
    fn, names = {
        "elemwise": (lambda x, z: jnp.exp(x) * 2 + jnp.sin(z) * x, ("x", "z")),
        "softmax_infer": (lambda x: jnp.exp(x - jnp.log(jnp.sum(jnp.exp(x), axis=1,
                                                               keepdims=True))), ("x",)),
        "softmax_grad": (jax.grad(lambda x, w: jnp.sum(jax.nn.softmax(x, axis=1) * w)),
                         ("x", "w"))}[workload]
    args = [dev.put(d[k]) for k in names]
    compiled, compile_s = _clocked(lambda: jax.jit(fn).lower(*args).compile())
    return Built(lambda: jax.block_until_ready(compiled(*args)), lambda r: [dev.get(r)],
                 compile_s)


def _jax_train(jax, jnp, d, dev) -> Built:
    """The CPU benchmark's jitted SGD step (``workloads.MlpTrain.jax``: it donates
    the parameters), whose arrays JAX puts on its default device, the GPU."""
    built = MlpTrain.jax(d)
    return Built(built.step, built.observe, built.compile_s)


def build(system: str, workload: str, d: dict, dev, variant) -> Built:
    fam = family(system)
    if fam == "torch":
        return build_torch(workload, d, dev, variant, compiled=system == "torch-compile")
    return {"tenure": build_tenure, "jax": build_jax, "cupy": build_cupy}[fam](
        workload, d, dev, variant)


def skip_reason(workload: str, system: str, emulated: bool) -> str | None:
    fam = family(system)
    if emulated and fam != "tenure":
        return "needs a GPU (--emulated runs tenure-cuda alone)"
    if workload == "borrow_steady_state" and fam != "tenure":
        return "no Out(borrow=...) to compare: tenure only"
    if fam == "cupy" and workload in GRADIENT:
        return "CuPy has no automatic differentiation"
    if fam in MODULES and importlib.util.find_spec(MODULES[fam]) is None:
        return f"{MODULES[fam]} is not installed"
    return None


# -- the worker: one pair, measured ----------------------------------------------------


def check(workload: str, got: list, d: dict, ref: list) -> dict:
    """The first call against the reference; for training, each parameter's step
    (lr x gradient), not the parameter, whose value would hide it."""
    import worker  # the CPU suite's comparison, tolerances and messages
    slack = None
    if "params" in d:
        # a step read back from a float32 parameter carries that parameter's rounding
        slack = [0.0] + [2 * np.spacing(np.abs(r).astype(np.float32)).astype(np.float64)
                         for r in ref[1:]]
        got = got[:1] + [g - p for g, p in zip(got[1:], d["params"])]
        ref = ref[:1] + [r - p for r, p in zip(ref[1:], d["params"])]
    return worker.check(got, ref, WORKLOADS[workload], slack)


def timed_calls(step, sync, settings: dict) -> dict:
    """Warm up, then single synchronized calls until ~target_s: the median per call.
    Each result is dropped at once: a held result would count in the next call."""
    for _ in range(settings["warmup"]):
        step()
        sync()
    times = []
    gc.collect()
    gc.disable()  # a collection inside a timed call would be noise, not the system's cost
    try:
        while len(times) < settings["max_calls"] and (
                len(times) < settings["min_calls"] or sum(times) < settings["target_s"]):
            start = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return {"time_s": statistics.median(times), "calls": len(times), "min_time_s": min(times)}


def bandwidth(dev, n: int, time_s: float) -> dict:
    """The elemwise call's traffic (x, z read, the result written) per second, and
    its fraction of the copy bandwidth (one array read, one written) measured here."""
    copy_s = dev.copy_seconds(dev.put(np.ones(n, np.float32)), dev.put(np.zeros(n, np.float32)))
    achieved, copy = 3 * 4 * n / time_s, 2 * 4 * n / copy_s
    return {"achieved_gbps": achieved / 1e9, "copy_gbps": copy / 1e9,
            "bandwidth_fraction": achieved / copy}


def run_pair(system: str, workload: str, variant, quick: bool, emulated: bool) -> dict:
    scale = "quick" if quick else "full"
    sizes = SIZES[workload][scale]
    result = {"scale": scale, "sizes": {k: list(v) if isinstance(v, tuple) else v
                                        for k, v in sizes.items()}}
    reason = skip_reason(workload, system, emulated)
    if reason:
        return {**result, "status": "skipped", "reason": reason}
    dev = make_device(family(system), emulated)
    result.update(device=dev.name, versions=dev.versions)

    d = make_data(workload, sizes, np.random.default_rng(0))
    ref = None if workload in NO_FULL_REFERENCE and not quick else reference(workload, d)
    built = build(system, workload, d, dev, variant)
    first, result["first_call_s"] = _clocked(lambda: (built.step(), dev.sync())[0])
    result["compile_s"] = (result["first_call_s"] if built.compiled_on_first_call
                           else built.compile_s)
    result["check"] = (check(workload, built.observe(first), d, ref) if ref is not None else
                       {"skipped": "no float64 reference at full size (too slow on the host)"})
    del first, ref

    result.update(timed_calls(built.step, dev.sync, SETTINGS[scale]))
    gc.collect()
    peak = dev.peak_bytes(built.step)
    result["peak_mb"] = None if peak is None else peak / MB
    allocations = dev.allocations(built.step, TRACKED_CALLS)
    if allocations is not None:
        result["allocations_per_call"] = allocations
    if workload in ELEMWISE_GRAPH:
        del d, built  # room for the copy's two arrays at full size
        gc.collect()
        result.update(bandwidth(dev, sizes["n"], result["time_s"]))
    return {**result, "status": "ok"}


def worker_main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="one GPU pair (run.py --device cuda starts these)")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--system", required=True, choices=SYSTEMS)
    parser.add_argument("--workload", required=True, choices=list(SIZES))
    parser.add_argument("--variant", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--emulated", action="store_true")
    args = parser.parse_args(argv)
    # JAX would take 75% of the device at start-up, and its memory stats would show that
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    try:
        result = run_pair(args.system, args.workload, args.variant, args.quick, args.emulated)
    except Skip as exc:
        result = {"status": "skipped", "reason": str(exc)}
    except Exception as exc:  # reported, not raised: one failure must not stop the suite
        result = {"status": "error", "traceback": traceback.format_exc(),
                  "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    result.update(system=args.system, workload=args.workload, variant=args.variant)
    print(json.dumps(result), flush=True)
    return 0


# -- the suite: one worker per pair, then the table ------------------------------------


def run_worker(system, workload, variant, quick, emulated) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--system", system,
           "--workload", workload] + (["--variant", variant] if variant else []) \
        + (["--quick"] if quick else []) + (["--emulated"] if emulated else [])
    timeout = TIMEOUT_S["quick" if quick else "full"]
    start = time.perf_counter()
    result = worker_result(cmd, timeout)
    result.update(system=system, workload=workload, variant=variant,
                  wall_s=round(time.perf_counter() - start, 1))
    return result


def jobs(workloads, systems) -> list:
    return [(w, v, s) for w in workloads for s in systems
            for v in (VARIANTS.get(w, (None,)) if family(s) == "tenure" else (None,))]


def _label(r: dict) -> str:
    return r["workload"] + (f" [{r['variant']}]" if r.get("variant") else "")


def describe(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {r.get('reason', '')}"
    peak = "n/a" if r["peak_mb"] is None else f"{r['peak_mb']:.1f} MB"
    return f"{report.fmt_time(r['time_s'])}/call, peak {peak}, compile {r['compile_s']:.2f} s"


def _ratio(value) -> str:
    if value is None:
        return "—"
    return f"**{value:.2f}**" if value > 1.1 else f"{value:.2f}"


def _row(r: dict, base: dict | None) -> list:
    peak, floor = r["peak_mb"], report.MEM_FLOOR_MB
    mem = None
    if base and peak is not None and base["peak_mb"] is not None:
        mem = max(peak, floor) / max(base["peak_mb"], floor)
    return [_label(r), r["system"], report.fmt_time(r["time_s"]),
            _ratio(r["time_s"] / base["time_s"] if base else None),
            "n/a" if peak is None else f"{peak:.1f}", _ratio(mem),
            f"{r['compile_s']:.2f} s" if r["compile_s"] else "—",
            report.fmt_time(r["first_call_s"]),
            (f"{r['achieved_gbps']:.3g} ({r['bandwidth_fraction']:.2f})"
             if "bandwidth_fraction" in r else "—"),
            f"{r['allocations_per_call']:g}" if "allocations_per_call" in r else "—"]


def markdown(doc: dict) -> str:
    ok = [r for r in doc["results"] if r["status"] == "ok"]
    by_key = {(r["workload"], r.get("variant"), r["system"]): r for r in ok}
    versions = {}
    for r in ok:
        for k, v in r.get("versions", {}).items():
            versions.setdefault(k, v)
    m = doc["machine"]
    lines = [f"GPU benchmarks ({doc['scale']}), {doc['date'][:10]}: {m['gpu']}; host "
             f"{m['cores']} cores, {m['cpu']}; tenure {doc.get('tenure_source') or '?'}; "
             f"`{doc['command']}`; total {doc.get('wall_s', 0):.0f} s. Versions: "
             + (", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "—") + ".", ""]
    head = ["workload", "system", "time/call", "time vs torch", "peak MB", "peak vs torch",
            "compile", "first call", "GB/s (of copy)", "allocs/call"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in ok:
        # torch eager's row for the workload: its own variant, else its only run
        base = None if r["system"] == BASELINE else (
            by_key.get((r["workload"], r.get("variant"), BASELINE))
            or by_key.get((r["workload"], None, BASELINE)))
        lines.append("| " + " | ".join(_row(r, base)) + " |")
    lines += ["", "time/call: median of single calls, each followed by a device "
              "synchronization, after 2 warm-up calls. peak MB: device memory one call needs "
              "above what was in use before it (tenure, CuPy: a hook on CuPy's pool; torch: "
              "max_memory_allocated; JAX: peak_bytes_in_use, a peak it cannot reset). vs "
              "torch: this row/torch eager's, bold above 1.1 (peaks under "
              f"{report.MEM_FLOOR_MB:g} MB count as {report.MEM_FLOOR_MB:g} MB). compile: "
              "tenure's function, JAX lower+compile, "
              "torch.compile's first call. GB/s (of copy): elemwise traffic (12 bytes/element) "
              "per second (its fraction of the device's copy bandwidth). allocs/call: pool "
              f"allocations over {TRACKED_CALLS} calls, per call."]
    if doc.get("emulated"):
        lines += ["", "Emulated device (host memory): times and bandwidths say nothing about a "
                  "GPU; the checks, peaks and allocation counts are the device path's."]
    lines += targets(ok)
    other = [r for r in doc["results"] if r["status"] != "ok"]
    if other:
        lines += ["", "Not measured:", ""] + [
            f"- {_label(r)} x {r['system']}: {r['status']}: {r.get('reason', '')}" for r in other]
    return "\n".join(lines) + "\n"


def targets(ok: list) -> list:
    """The issue's targets for tenure-cuda (✓ met, ✗ missed), and the budget's effect."""
    out, mine = [], {_label(r): r for r in ok if r["system"] == "tenure-cuda"}
    if "bandwidth_fraction" in mine.get("elemwise", {}):
        f = mine["elemwise"]["bandwidth_fraction"]
        out.append(f"- elemwise: {f:.2f} of the copy bandwidth (target ≥ {BANDWIDTH_TARGET}) "
                   + ("✓" if f >= BANDWIDTH_TARGET else "✗"))
    borrowed = mine.get("borrow_steady_state [borrow=True]", {})
    if "allocations_per_call" in borrowed:
        a = borrowed["allocations_per_call"]
        out.append(f"- borrow_steady_state [borrow=True]: {a:g} allocations per call (target 0) "
                   + ("✓" if a == 0 else "✗"))
    full = mine.get("mlp_train_budget [budget 1.0]")
    half = mine.get("mlp_train_budget [budget 0.5]")
    if full and half and full["peak_mb"] and half["peak_mb"] is not None:
        out.append(f"- mlp_train_budget: at budget 0.5 the peak is "
                   f"{half['peak_mb'] / full['peak_mb']:.2f}x and the time "
                   f"{half['time_s'] / full['time_s']:.2f}x those at 1.0")
    return ["", "Targets (tenure-cuda):", ""] + out if out else []


def main(args, command: str, machine: dict, source: str | None) -> int:
    """The GPU suite of ``run.py --device cuda`` (``args``: run.py's parsed options)."""
    if importlib.util.find_spec("tenure") is None:
        raise SystemExit("benchmarks/run.py: tenure is not importable from this Python; "
                         "install it first: pip install -e \".[bench]\"")
    if not args.emulated:
        from tenure.linkers.cuda.runtime import unavailable_reason
        reason = unavailable_reason()
        if reason is not None:
            print(f"benchmarks/run.py --device cuda: no usable CUDA device: {reason} "
                  "(--emulated runs tenure-cuda on the emulated device)", file=sys.stderr)
            return 2
    systems, workloads = args.systems or list(SYSTEMS), args.only or list(SIZES)
    for kind, given, known in (("system", systems, SYSTEMS), ("workload", workloads, SIZES)):
        unknown = [g for g in given if g not in known]
        if unknown:
            print(f"benchmarks/run.py --device cuda: unknown {kind}(s) {', '.join(unknown)}; "
                  f"known: {', '.join(known)}", file=sys.stderr)
            return 2
    scale = "quick" if args.quick else "full"
    doc = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "command": command, "scale": scale, "emulated": args.emulated,
           "machine": {**machine, "gpu": "emulated" if args.emulated else gpu_name()},
           "tenure_source": source, "results": []}
    todo = jobs(workloads, systems)
    print(f"{len(todo)} GPU runs ({scale}) on {doc['machine']['gpu']}", flush=True)
    start = time.perf_counter()
    for k, (workload, variant, system) in enumerate(todo, 1):
        reason = skip_reason(workload, system, args.emulated)
        result = ({"system": system, "workload": workload, "variant": variant,
                   "status": "skipped", "reason": reason} if reason else
                  run_worker(system, workload, variant, args.quick, args.emulated))
        doc["results"].append(result)
        print(f"[{k}/{len(todo)}] {system} x {_label(result)}: {describe(result)}", flush=True)
    doc["wall_s"] = round(time.perf_counter() - start, 1)

    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "gpu" + "-emulated" * args.emulated + "-quick" * args.quick)
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    table = markdown(doc)
    with open(stem + ".md", "w") as f:
        f.write(table)
    print(f"\n{table}\nwrote {stem}.json, {stem}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())
