"""How long the memory pictures take, and what a foreign array costs per call.

    python benchmarks/seeing_memory.py [--nodes 200] [--repeat 3]

1. Drawing: a training step of a deep MLP with at least ``--nodes`` steps in
   its schedule; times (best of ``--repeat``) for building its timeline
   (``f.memory_timeline``: two observed calls included), drawing it with
   ``tn.plot_memory`` to PNG and to SVG, writing ``tn.memory_html``, and
   ``tn.printing.graph_picture`` to SVG (when Graphviz's ``dot`` is there).
   The target is under 2 s per drawing of a 200-node graph.
2. Borrowing a PyTorch CPU tensor (when PyTorch is installed): bytes
   tracemalloc sees per call of ``In(x, borrow=True)`` given the tensor
   itself, next to the same call given ``np.array(tensor)`` (the copy a
   user would otherwise make).  The target is 0 bytes of copy.

Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402
import tenure as tn  # noqa: E402
from tenure import In, Out  # noqa: E402


def deep_step(min_nodes: int):
    """A training step with at least ``min_nodes`` steps, and its arguments."""
    rng = np.random.default_rng(0)
    layers = 2
    while True:
        x, t = tn.matrix("x"), tn.matrix("t")
        weights = [tn.shared(rng.standard_normal((64, 64)) * 0.1, name=f"w{i}")
                   for i in range(layers)]
        h = x
        for w in weights:
            h = tn.tanh(h @ w)
        loss = ((h - t) ** 2).mean()
        grads = tn.grad(loss, weights)
        f = tn.function([In(x, borrow=True), In(t, borrow=True)], loss,
                        updates=[(w, w - 0.01 * g) for w, g in zip(weights, grads)])
        args = [rng.standard_normal((256, 64)), rng.standard_normal((256, 64))]
        n = len(f._thunk.plan.steps)
        if n >= min_nodes:
            return f, args, n
        layers = max(layers + 1, int(layers * min_nodes / max(n, 1)))


def drawing(nodes: int, repeat: int) -> None:
    f, args, n = deep_step(nodes)
    timeline = f.memory_timeline(*args)
    print(f"training step with {n} steps, {len(timeline.bands)} bands, predicted peak "
          f"{timeline.predicted_peak:,} bytes")
    folder = tempfile.mkdtemp()
    try:
        rows = [("memory_timeline (two calls)", lambda: f.memory_timeline(*args)),
                ("plot_memory -> png", lambda: tn.plot_memory(timeline,
                                                              path=f"{folder}/t.png")),
                ("plot_memory -> svg", lambda: tn.plot_memory(timeline,
                                                              path=f"{folder}/t.svg")),
                ("memory_html", lambda: tn.memory_html(timeline, path=f"{folder}/t.html"))]
        if shutil.which("dot"):
            rows.append(("graph_picture -> svg",
                         lambda: tn.printing.graph_picture(f, f"{folder}/g.svg")))
        for name, action in rows:
            print(f"  {name:<28} {measure.best_time(action, repeat):7.3f} s")
    finally:
        shutil.rmtree(folder)


def traced_peak(f, value, calls: int = 50) -> int:
    """The most bytes tracemalloc saw above the start, over ``calls`` calls
    (after one call of warm-up)."""
    f(value)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(calls):
            f(value)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def torch_borrow() -> None:
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: pip install torch==2.13.0")
        return
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], Out(x.sum(), borrow=True))
    tensor = torch.ones(1_000_000, dtype=torch.float64)
    print(f"PyTorch tensor of {tensor.numel() * 8:,} bytes into In(borrow=True): traced peak "
          f"above the start, over 50 calls")
    print(f"  the tensor itself            {traced_peak(f, tensor):>12,} bytes")
    print(f"  np.array(tensor) per call    {traced_peak(lambda t: f(np.array(t)), tensor):>12,} "
          "bytes")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    drawing(args.nodes, args.repeat)
    torch_borrow()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
