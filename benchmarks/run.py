"""Benchmarks against peers: speed and peak memory, side by side in one run.

    python benchmarks/run.py [--only NAME ...] [--systems SYSTEM ...] [--quick] [--out DIR]
    python benchmarks/run.py --device cuda [--emulated] ...    # the GPU suite: see gpu.py

Every system x workload pair runs in its own fresh process (``worker.py``)
with ``MALLOC_MMAP_THRESHOLD_=131072``, so that freed arrays are returned to
the OS at once.  Results go to ``DIR`` (default ``benchmarks/results/``):
``bench.json`` (raw), ``bench.md`` (the table) and ``bench.png`` (the chart);
``--quick`` writes ``bench-quick.*`` instead.  The table is printed at the end.

Systems: ``tenure-<linker>`` for every linker in ``tenure.config.LINKERS``,
``pytensor`` (its default mode), ``pytensor-c`` (its C mode: the C VM with the
FAST_RUN rewrites), ``numpy``, ``torch`` (eager, CPU) and ``jax`` (``jax.jit`` on the
CPU, float64 enabled; the training step donates its parameters), each when
installed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu  # noqa: E402
import report  # noqa: E402
from worker_process import worker_result  # noqa: E402
from workloads import WORKLOADS, family, measured, skip_reason  # noqa: E402

PEERS = ("pytensor", "pytensor-c", "numpy", "torch", "jax")
MMAP_THRESHOLD = "131072"
TIMEOUT_S = {"full": 400, "quick": 90}


def tenure_systems() -> list[str]:
    """One system per tenure linker: a linker added to config.LINKERS joins by itself."""
    if importlib.util.find_spec("tenure") is None:
        # benchmarking the peers alone is never what was meant
        raise SystemExit("benchmarks/run.py: tenure is not importable from this Python; "
                         "install it first: pip install -e \".[bench]\"")
    from tenure.config import LINKERS
    return [f"tenure-{linker}" for linker in LINKERS]


def installed(system: str) -> bool:
    return importlib.util.find_spec(family(system)) is not None


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(f.readline().split()[1]) / 1024 ** 2, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": mem_gib,
            "platform": platform.platform(), "python": platform.python_version()}


def _busy_s() -> float:
    """CPU seconds spent busy by all cores since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def busy_cores(window_s: float = 0.5) -> float:
    """Cores kept busy by other processes over a short window (this one sleeps)."""
    before = _busy_s()
    time.sleep(window_s)
    return (_busy_s() - before) / window_s


def wait_quiet(max_wait_s: float) -> float:
    """Wait (up to ``max_wait_s``) until other processes use under BUSY_CORES cores;
    returns the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < max_wait_s:
        if busy_cores() < report.BUSY_CORES:
            break
        time.sleep(1.5)
    return time.perf_counter() - start


def tenure_source() -> str | None:
    """The commit of the tenure checkout measured, marked when it has local changes."""
    root = os.path.dirname(HERE)
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "tenure"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + (" + local changes to tenure/" if dirty else "")) if head else None


def run_worker(system: str, workload: str, variant: str | None, quick: bool,
               timeout: float) -> dict:
    """One pair in a fresh process; adds the wall time and the CPU other processes used."""
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), "--system", system,
           "--workload", workload]
    if variant:
        cmd += ["--variant", variant]
    if quick:
        cmd.append("--quick")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=MMAP_THRESHOLD)
    busy0, child0, start = _busy_s(), _children_cpu_s(), time.perf_counter()
    result = worker_result(cmd, timeout, env)
    wall = time.perf_counter() - start
    foreign = max(_busy_s() - busy0 - (_children_cpu_s() - child0), 0.0) / wall
    result.update(system=system, workload=workload, variant=variant, wall_s=wall,
                  foreign_load_cores=round(foreign, 2))
    return result


def _label(r: dict) -> str:
    return r["workload"] + (f" [{r['variant']}]" if r.get("variant") else "")


def describe(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {r.get('reason', '')}"
    text = (f"{report.fmt_time(r['time_s'])}/call, peak +{r['peak_extra_mb']:.1f} MB, "
            f"compile {r['compile_s']:.2f} s")
    if r.get("foreign_load_cores", 0) >= report.BUSY_CORES:
        text += f"  (other processes used {r['foreign_load_cores']:.1f} cores)"
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(WORKLOADS),
                        help=f"workloads to run (default: all of {', '.join(WORKLOADS)})")
    parser.add_argument("--systems", nargs="+", metavar="SYSTEM",
                        help="systems to run (default: every tenure linker, "
                             f"{', '.join(PEERS)})")
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes and fewer repeats: a check in under two minutes")
    parser.add_argument("--out", default=os.path.join(HERE, "results"),
                        help="output folder (default: benchmarks/results)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="shared machines: before each run, wait up to S seconds for "
                             "other processes to go quiet, and run once more (keeping the "
                             "quieter try) each run during which they did not (default 0: "
                             "don't wait)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: the GPU benchmarks of gpu.py, tenure's CUDA linker against "
                             "PyTorch, torch.compile, JAX and CuPy (default: cpu)")
    parser.add_argument("--emulated", action="store_true",
                        help="with --device cuda: tenure-cuda on the emulated device, peers "
                             "skipped (a smoke test without a GPU)")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        if args.wait_quiet:
            parser.error("--wait-quiet is for the CPU benchmarks")
        return gpu.main(args, "python benchmarks/run.py" + "".join(
            f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])),
            machine(), tenure_source())
    if args.emulated:
        parser.error("--emulated goes with --device cuda")

    known = tenure_systems() + list(PEERS)
    systems = args.systems or known
    unknown = [s for s in systems if s not in known]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(known)}")
    workloads = args.only or list(WORKLOADS)
    scale = "quick" if args.quick else "full"

    jobs = [(w, v, s) for w in workloads for v in getattr(WORKLOADS[w], "variants", (None,))
            for s in systems if measured(w, s, v)]
    command = "python benchmarks/run.py" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:]))
    doc = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "command": command, "scale": scale, "machine": machine(),
           "mmap_threshold": MMAP_THRESHOLD, "tenure_source": tenure_source(),
           "results": []}
    print(f"{len(jobs)} runs ({scale}) on {doc['machine']['cores']} cores, "
          f"{doc['machine']['cpu']}", flush=True)
    start = time.perf_counter()
    for k, (workload, variant, system) in enumerate(jobs, 1):
        label = f"[{k}/{len(jobs)}] {system} x {workload}" + (f" [{variant}]" if variant else "")
        reason = skip_reason(workload, system)
        if reason is None and not installed(system):
            reason = f"{family(system)} is not installed"
        if reason:
            result = {"system": system, "workload": workload, "variant": variant,
                      "status": "skipped", "reason": reason}
        else:
            waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
            result = run_worker(system, workload, variant, args.quick, TIMEOUT_S[scale])
            if waited:
                result["waited_for_quiet_s"] = round(waited, 1)
        doc["results"].append(result)
        print(f"{label}: {describe(result)}", flush=True)
    if args.wait_quiet > 0:  # one more try for the runs that shared the machine
        for i, old in enumerate(doc["results"]):
            if old["status"] != "ok" or old.get("foreign_load_cores", 0) < report.BUSY_CORES:
                continue
            waited = wait_quiet(args.wait_quiet)
            new = run_worker(old["system"], old["workload"], old["variant"], args.quick,
                             TIMEOUT_S[scale])
            new["waited_for_quiet_s"] = round(waited, 1)
            keep = new if (new["status"] == "ok" and new["foreign_load_cores"]
                           < old["foreign_load_cores"]) else old
            keep["tries"] = 2
            doc["results"][i] = keep
            print(f"again {old['system']} x {_label(old)}: {describe(keep)}", flush=True)
    doc["wall_s"] = round(time.perf_counter() - start, 1)

    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "bench-quick" if args.quick else "bench")
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    table = report.markdown(doc)
    with open(stem + ".md", "w") as f:
        f.write(table)
    chart = report.chart(doc, stem + ".png")
    print()
    print(table)
    print(f"wrote {stem}.json, {stem}.md" + (f", {stem}.png" if chart else
                                              " (no chart: matplotlib is not installed)"))
    print(f"total wall time {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
