"""How long Ctrl-C takes to stop a tenure call, on the benchmark workloads.

    python benchmarks/interrupt_latency.py [--linker c] [--tries 10] [--only NAME ...]

For each workload (full sizes), the compiled step runs in a loop while
another process sends this one SIGINT at a random moment, as a terminal's
Ctrl-C does; the latency is the time from the ``kill`` to the
KeyboardInterrupt reaching this loop.  A call that has already written shared
storage completes first (see ``tenure.linkers.commit``), so the latency is
at most the rest of that call.  Prints the median and the worst latency per
workload next to the step's own time.  Not a test: timings depend on the
machine.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from workloads import WORKLOADS  # noqa: E402

DEFAULT = ("elemwise", "softmax_infer", "softmax_grad", "mlp_infer", "mlp_train")

_KILLER = ("import os, sys, time\n"
           "time.sleep(float(sys.argv[2]))\n"
           "print(time.time(), flush=True)\n"
           "os.kill(int(sys.argv[1]), 2)\n")


def latency_once(step, delay: float) -> float:
    """Run ``step`` until a SIGINT sent after ``delay`` seconds stops it: the
    seconds from the kill to the KeyboardInterrupt."""
    killer = subprocess.Popen([sys.executable, "-c", _KILLER, str(os.getpid()), str(delay)],
                              stdout=subprocess.PIPE, text=True)
    try:
        while True:
            step()
    except KeyboardInterrupt:
        stopped = time.time()
    sent = float(killer.communicate()[0])
    return stopped - sent


def step_seconds(step, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linker", default="c")
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--only", nargs="+", default=DEFAULT)
    args = parser.parse_args()
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        raise SystemExit("interrupt_latency: SIGINT must have Python's default handler")
    rng = random.Random(0)
    print(f"{'workload':<16} {'step ms':>9} {'median ms':>10} {'worst ms':>9}")
    for name in args.only:
        w = WORKLOADS[name]
        data = w.data(**w.sizes["full"], rng=np.random.default_rng(0))
        step = w.tenure(data, args.linker).step
        step()   # warm: compiled, planned
        seconds = step_seconds(step)
        lat = [latency_once(step, 0.2 + rng.random() * max(seconds, 0.05) * 3)
               for _ in range(args.tries)]
        print(f"{name:<16} {seconds * 1e3:9.1f} {statistics.median(lat) * 1e3:10.1f} "
              f"{max(lat) * 1e3:9.1f}", flush=True)


if __name__ == "__main__":
    main()
