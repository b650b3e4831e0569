"""Per-call peak memory of the demo's training step, with and without the
in-place and fusion rewrites (tracemalloc, one process, steady state).

    python benchmarks/demo_step_memory.py [--batch-size N] [--hidden N]
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np

import tenure as tn
from tenure import demo


def step_peak(mode, batch_size: int, hidden: int, calls: int = 5) -> tuple[int, object]:
    """(median tracemalloc peak of one training step, the compiled step)."""
    rng = np.random.default_rng(0)
    params, train, _ = demo.build_model(rng, 2, hidden, 3, 0.1, mode=mode)
    X, y = demo.make_spirals(rng, batch_size // 3 + 1)
    X, y = X[:batch_size], y[:batch_size]
    train(X, y)  # warm up: buffers kept between calls exist from now on
    peaks = []
    for _ in range(calls):
        tracemalloc.start()
        try:
            train(X, y)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return int(np.median(peaks)), train


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args(argv)
    rewritten, f = step_peak(tn.Mode(), args.batch_size, args.hidden)
    plain, _ = step_peak(tn.Mode(exclude=["inplace", "fusion"]), args.batch_size, args.hidden)
    in_place = sum(bool(n.op.destroy_map) for n in f.fgraph.apply_nodes)
    print(f"demo training step, batch {args.batch_size}, hidden {args.hidden}:")
    print(f"  default mode:                        peak {rewritten / 2**20:8.2f} MiB per call "
          f"({in_place} in-place nodes)")
    print(f"  Mode(exclude=['inplace', 'fusion']): peak {plain / 2**20:8.2f} MiB per call")
    print(f"  ratio {rewritten / plain:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
