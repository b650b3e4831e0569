"""One system x one workload, in this (fresh) process; prints one JSON line.

    python benchmarks/worker.py --system tenure-py --workload elemwise [--quick]

``run.py`` starts one of these per pair with ``MALLOC_MMAP_THRESHOLD_`` set, so
that freed arrays go back to the OS and the resident high-water mark means
something.  The steps: make the data, compute the NumPy reference (float64),
compile (timed: ``compile_s``), make the first call (timed: ``first_call_s``)
and check its result against the reference, warm up, then the measured runs
(median time per call, peak memory over the resident size after warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402
from workloads import WORKLOADS, build, family, skip_reason  # noqa: E402

#: (warm-up calls, seconds of measured runs, fewest and most runs, shortest run)
SETTINGS = {"full": dict(warmup=2, target_s=3.0, min_repeats=5, max_repeats=200,
                         min_run_s=0.02),
            "quick": dict(warmup=1, target_s=0.4, min_repeats=3, max_repeats=50,
                          min_run_s=0.005)}
TRACED_CALLS = {"full": 10, "quick": 5}


def tolerance(dtype, workload=None) -> float:
    """Allowed error relative to the reference's largest magnitude (a deep
    float32 network may allow more: its ``float32_tolerance``)."""
    if np.dtype(dtype).itemsize > 4:
        return 1e-9
    return getattr(workload, "float32_tolerance", 1e-3)


def check(got: list, ref: list, workload, slack: list | None = None) -> dict:
    """Compare the first call's results with the reference; raise when they differ.

    ``slack``: per result, an absolute error allowed on top (elementwise), for
    differences of stored values whose own rounding is larger than the difference.
    """
    if len(got) != len(ref):
        raise AssertionError(f"{len(got)} results, expected {len(ref)}")
    worst = 0.0
    for k, (g, r) in enumerate(zip(got, ref)):
        g = np.asarray(g)
        r = np.asarray(r)
        if g.shape != r.shape:
            raise AssertionError(f"result {k}: shape {g.shape}, expected {r.shape}")
        scale = max(float(np.max(np.abs(r))), 1e-30) if r.size else 1.0
        diff = np.abs(g.astype(np.float64) - r)
        if slack is not None:
            diff = np.maximum(diff - slack[k], 0)
        err = float(np.max(diff)) / scale if r.size else 0.0
        tol = tolerance(g.dtype, workload)
        if not err <= tol:
            raise AssertionError(f"{workload.name}: result {k} ({g.dtype}{list(g.shape)}) differs "
                                 f"from the NumPy reference: max error {err:.3g} x max|ref| "
                                 f"> {tol:g}")
        worst = max(worst, err)
    return {"max_rel_error": worst}


def versions(system: str) -> dict:
    out = {"python": platform.python_version(), "numpy": np.__version__}
    fam = family(system)
    if fam == "tenure":
        import tenure
        out["tenure"] = tenure.__version__
    elif fam == "pytensor":
        import pytensor
        out["pytensor"] = pytensor.__version__
        out["pytensor_blas_ldflags"] = pytensor.config.blas__ldflags
    elif fam == "torch":
        import torch
        out["torch"] = torch.__version__
        out["torch_threads"] = torch.get_num_threads()
    elif fam == "jax":
        import jax
        out["jax"] = jax.__version__
        out["jax_backend"] = jax.default_backend()
    return out


def prepare(system: str) -> None:
    warnings.simplefilter("ignore")  # PyTensor warns about BLAS on import; the JSON records it
    if family(system) == "torch":
        import torch
        torch.set_num_threads(os.cpu_count() or 1)


def run(system: str, workload_name: str, variant: str | None, quick: bool, seed: int) -> dict:
    w = WORKLOADS[workload_name]
    scale = "quick" if quick else "full"
    sizes = w.sizes[scale]
    result = {"system": system, "workload": workload_name, "variant": variant, "scale": scale,
              "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()},
              "mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_")}
    reason = skip_reason(workload_name, system)
    if reason:
        return {**result, "status": "skipped", "reason": reason}
    prepare(system)
    result["versions"] = versions(system)

    data = w.data(**sizes, rng=np.random.default_rng(seed))
    # (a workload whose variants change what is computed, not only how: its
    # reference per variant)
    ref = w.reference(data, variant) if getattr(w, "reference_per_variant", False) \
        else w.reference(data)
    # Training workloads return the loss and the updated parameters.
    start0 = [p.copy() for p in data["params"]] if w.gradient and "params" in data else None

    # Resident size before compiling, less the reference arrays freed below: the
    # base of ``held_mb`` (what compiling and warming up left resident).
    transient = sum(np.asarray(a).nbytes for a in ref + (start0 or []))
    rss0 = measure.rss() - transient
    start = time.perf_counter()
    built = build(workload_name, system, data, variant)
    build_s = time.perf_counter() - start
    result["compile_s"] = built.compile_s
    result["setup_s"] = build_s - built.compile_s

    start = time.perf_counter()
    first = built.step()
    result["first_call_s"] = time.perf_counter() - start
    got = built.observe(first)
    slack = None
    if start0 is not None:
        # Compare the parameter steps (lr x gradient), not the parameters, whose
        # values hide them; the step read back from a float32 parameter carries
        # that parameter's rounding: allow 2 ulps of it.
        slack = [0.0] + [2 * np.spacing(np.abs(r).astype(np.float32)).astype(np.float64)
                         for r in ref[1:]]
        got = got[:1] + [g - p for g, p in zip(got[1:], start0)]
        ref = ref[:1] + [r - p for r, p in zip(ref[1:], start0)]
    result["check"] = check(got, ref, w, slack)
    del first, got, ref, start0, slack

    settings = SETTINGS[scale]
    inner, per_call = measure.calibrate(built.step, settings["warmup"], settings["min_run_s"])
    meter = measure.PeakMeter()
    result.update(measure.timed_runs(built.step, inner, per_call, settings["target_s"],
                                     settings["min_repeats"], settings["max_repeats"], meter))
    result["held_mb"] = (meter.baseline - rss0) / measure.MB
    if workload_name == "borrow_steady_state":
        result.update(measure.traced_per_call(built.step, TRACED_CALLS[scale]))
    result["status"] = "ok"
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", required=True)
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--variant", default=None,
                        help="for borrow_steady_state: borrow=True or borrow=False")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        result = run(args.system, args.workload, args.variant, args.quick, args.seed)
    except Exception as exc:  # reported, not raised: one failure must not stop the suite
        result = {"system": args.system, "workload": args.workload, "variant": args.variant,
                  "scale": "quick" if args.quick else "full", "status": "error",
                  "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                  "traceback": traceback.format_exc()}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
