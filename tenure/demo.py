"""``python -m tenure.demo``: compile and run a small model with shared state.

A linear regression model trained by gradient descent on a synthetic data set.
Its parameters are shared variables (``borrow=True``: tenure keeps the arrays
without copying), the training step assigns them through ``updates``, inputs
are lent with ``In(..., borrow=True)`` and predictions are returned with
``Out(..., borrow=True)`` so steady-state calls reuse one buffer.  The gradient
is written out by hand here; ``tn.grad`` arrives with the gradient issue.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tenure as tn
from tenure import In, Out


def make_data(rng: np.random.Generator, n: int, d: int):
    """Features, targets and the true weights of a noisy linear problem."""
    true_w = rng.normal(size=d)
    X = rng.normal(size=(n, d))
    y = X @ true_w + 0.5 + 0.01 * rng.normal(size=n)
    return X, y, true_w


def build(d: int, lr: float):
    """The model, its training step and its prediction function."""
    w = tn.shared(np.zeros(d), name="w", borrow=True)
    b = tn.shared(np.float64(0.0), name="b", borrow=True)
    X = tn.matrix("X")
    y = tn.vector("y")
    pred = X @ w + b
    err = pred - y
    loss = (err ** 2).mean()
    n = X.shape[0].astype("float64")
    grad_w = 2 * (X.T @ err) / n          # d loss / d w, derived by hand
    grad_b = 2 * err.sum() / n
    train = tn.function([In(X, borrow=True), In(y, borrow=True)], loss,
                        updates=[(w, w - lr * grad_w), (b, b - lr * grad_b)], name="train")
    predict = tn.function([In(X, borrow=True)], Out(pred, borrow=True), name="predict")
    return w, b, train, predict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.features < 1:
        parser.error("--epochs, --batch-size and --features must be positive")

    rng = np.random.default_rng(args.seed)
    X, y, true_w = make_data(rng, 1024, args.features)
    w, b, train, predict = build(args.features, args.lr)
    print(f"tenure {tn.__version__}: linear regression, {len(X)} samples x {args.features} "
          f"features, linker {train.mode.linker!r}")
    print("\nThe training step (updates assign w and b together after each call):")
    tn.debugprint(train)

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(X))
        losses = [train(X[idx], y[idx]) for idx in np.array_split(order, len(X) // args.batch_size)]
        if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:3d}  mean loss {np.mean(losses):.6f}")
    elapsed = time.perf_counter() - start

    error = np.abs(w.get_value() - true_w).max()
    print(f"\ntrained in {elapsed:.2f} s; max |w - true w| = {error:.4f}, "
          f"b = {float(b.get_value()):.4f} (true 0.5)")

    first = predict(X)
    first_address = first.ctypes.data
    second = predict(X)
    print(f"predict() with Out(borrow=True): second call reused the first call's buffer: "
          f"{second.ctypes.data == first_address}")
    print(f"w.get_value() is a copy the caller owns: "
          f"{not np.shares_memory(w.get_value(), w.get_value(borrow=True))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
