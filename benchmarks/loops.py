"""Loops: per-step overhead, and what checkpoints cost and save.

``python benchmarks/loops.py`` prints, for tenure alone (the peers' loops are
rows of ``run.py``: ``rnn_train``):

- the time per step of a trivial loop (a scalar accumulated over 10,000
  steps; 100,000 on the C linker, best of 20 calls: on a shared machine the
  best call is the overhead's measure) on the py and C linkers -- issue
  34's target is 0.2 us;
- an RNN's gradient (100 steps, batch 64, 32 in, 256 hidden, float32, C
  linker), with the loss on every state and on the last one, stored, with
  ``checkpoint_every=10`` and under activation-memory budgets of 0.3 (which
  chooses the checkpoints) and 0.05 (below any even spacing: the binomial
  schedule's snapshots): time (best of 5 calls) and the memory plan's
  predicted and measured peak.

Set ``OPENBLAS_NUM_THREADS=1`` on a machine with few cores: NumPy's and
SciPy's OpenBLAS pools otherwise compete and the products dominate.
"""

from __future__ import annotations

import time

import numpy as np

import tenure as tn


def best_of(f, *args, repeat: int = 5) -> float:
    f(*args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def trivial_loop(linker: str, steps: int = 10_000, repeat: int = 5) -> float:
    """Seconds per step of ``acc + x[t]``."""
    x = tn.vector("x")
    totals, _ = tn.scan(lambda xt, acc: acc + xt, sequences=[x],
                        outputs_info=[tn.constant(0.0)])
    f = tn.function([x], totals[-1], mode=tn.Mode(linker=linker))
    return best_of(f, np.ones(steps), repeat=repeat) / steps


def rnn_gradient(checkpoint_every, loss_on_every_state: bool, budget=None):
    """(seconds per call, predicted peak, measured peak) of one gradient
    (``budget``: the mode's activation-memory budget, which chooses the
    checkpoints of a loop built without)."""
    rng = np.random.default_rng(0)
    xs = tn.tensor("xs", shape=(None, 64, 32), dtype="float32")
    h0 = tn.matrix("h0", dtype="float32")
    Wx = tn.shared((rng.normal(size=(32, 256)) * 0.1).astype("float32"), name="Wx")
    Wh = tn.shared((rng.normal(size=(256, 256)) * 0.05).astype("float32"), name="Wh")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh)), sequences=[xs],
                    outputs_info=[h0], checkpoint_every=checkpoint_every)
    cost = (hs ** 2).mean() if loss_on_every_state else (hs[-1] ** 2).mean()
    f = tn.function([xs, h0], [cost] + tn.grad(cost, [Wx, Wh]),
                    mode=tn.Mode(linker="c", activation_memory_budget=budget))
    X = rng.normal(size=(100, 64, 32)).astype("float32")
    H = np.zeros((64, 256), "float32")
    report = f.memory_report(X, H, print_report=False)
    return best_of(f, X, H, repeat=5), report.predicted_peak, report.measured_peak


def main() -> int:
    print(f"trivial loop, 10,000 steps, py: {trivial_loop('py') * 1e6:.2f} us/step")
    print(f"trivial loop, 100,000 steps, c: {trivial_loop('c', 100_000, 20) * 1e6:.3f} us/step")
    for every, budget in ((None, None), (10, None), (None, 0.3), (None, 0.05)):
        for on_every_state in (True, False):
            seconds, predicted, measured = rnn_gradient(every, on_every_state, budget)
            loss = "every state" if on_every_state else "the last state"
            how = f"budget {budget}" if budget else f"checkpoint_every={every}"
            print(f"RNN gradient, loss on {loss}, {how}: "
                  f"{seconds * 1e3:.1f} ms, peak predicted {predicted / 1e6:.2f} MB, "
                  f"measured {measured / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
