"""``python -m tenure.demo rnn``: train a small recurrent network with ``tn.scan``.

The task is generated here (no download): each example is a sequence of
``steps`` random values +1 or -1, and the label says whether their sum is
positive -- the network must count.  The cell is
``h_t = tanh(x_t @ Wx + h_{t-1} @ Wh + b)`` from ``h_0 = 0``, written as one
:func:`tenure.scan` over the time axis; the last state goes through a linear
layer to two logits.  The parameters are shared variables created with
``borrow=True``, the gradient runs back through the loop with
:func:`tenure.grad`, one training step is a compiled function whose
``updates`` apply SGD with momentum (velocities are shared variables too), and
mini-batches are lent with ``In(..., borrow=True)``.

At the end it prints the test loss before and after training and the test
accuracy next to the trivial baseline's (always answering the test set's
majority class).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tqdm import tqdm

import tenure as tn
from tenure import In


def make_sign_sequences(rng: np.random.Generator, n: int, steps: int, dtype=None):
    """``n`` sequences of ``steps`` values +-1, shaped (n, steps, 1), and int32
    labels: 1 where the sequence's sum is positive (a tie is 0)."""
    dtype = dtype or tn.config.floatX
    X = rng.choice(np.array([-1.0, 1.0], dtype=dtype), size=(n, steps, 1))
    return X, (X.sum(axis=(1, 2)) > 0).astype(np.int32)


def init_params(rng: np.random.Generator, n_in: int, hidden: int, n_classes: int):
    """``[Wx, Wh, b, Wy, by]`` as shared variables tenure may keep (``borrow=True``)."""
    dtype = tn.config.floatX

    def shared(value, name):
        return tn.shared(np.asarray(value, dtype=dtype), name=name, borrow=True)

    return [shared(rng.normal(scale=1.0 / np.sqrt(n_in), size=(n_in, hidden)), "Wx"),
            shared(rng.normal(scale=1.0 / np.sqrt(hidden), size=(hidden, hidden)), "Wh"),
            shared(np.zeros(hidden), "b"),
            shared(rng.normal(scale=1.0 / np.sqrt(hidden), size=(hidden, n_classes)), "Wy"),
            shared(np.zeros(n_classes), "by")]


def rnn_step(x_t, h_prev, Wx, Wh, b):
    """One step of the cell: ``x_t`` (batch, features), ``h_prev`` (batch, hidden)."""
    return tn.tanh(x_t @ Wx + h_prev @ Wh + b)


def build_model(rng: np.random.Generator, n_in: int, hidden: int, n_classes: int, lr: float,
                momentum: float = 0.5, mode=None):
    """``(params, train, evaluate)``.

    ``train(X, y)`` takes a batch (X: (batch, steps, n_in), y: int32 labels),
    applies one SGD-with-momentum step and returns the batch's loss;
    ``evaluate(X, y)`` returns ``[loss, predicted labels]``.  ``mode`` (a
    :class:`tenure.Mode`) is used for both.
    """
    params = init_params(rng, n_in, hidden, n_classes)
    Wx, Wh, b, Wy, by = params
    X = tn.tensor3("X")
    y = tn.vector("y", dtype="int32")
    h0 = tn.zeros((X.shape[0], hidden), dtype=tn.config.floatX)
    # scan iterates over the first axis: time first, (steps, batch, n_in)
    states, scan_updates = tn.scan(rnn_step, sequences=X.transpose(1, 0, 2), outputs_info=h0,
                                   non_sequences=[Wx, Wh, b], name="rnn_step")
    logits = states[-1] @ Wy + by
    loss = -tn.log_softmax(logits, axis=1)[tn.arange(y.shape[0]), y].mean()
    grads = tn.grad(loss, params)
    updates = list(scan_updates.items())   # none here: the step updates no shared variable
    for p, g in zip(params, grads):
        velocity = tn.shared(np.zeros_like(p.get_value(borrow=True)), name=f"v_{p.name}",
                             borrow=True)
        v_new = momentum * velocity - lr * g
        updates += [(velocity, v_new), (p, p + v_new)]
    train = tn.function([In(X, borrow=True), In(y, borrow=True)], loss, updates=updates,
                        name="train_rnn", mode=mode)
    evaluate = tn.function([In(X, borrow=True), In(y, borrow=True)],
                           [loss, logits.argmax(axis=1)], name="evaluate_rnn", mode=mode)
    return params, train, evaluate


def loss_and_accuracy(evaluate, X, y) -> tuple[float, float]:
    loss, predicted = evaluate(X, y)
    return float(loss), float(np.mean(predicted == y))


#: ``--help``'s description: plain text (no reST), for a terminal
DESCRIPTION = """\
Train a small recurrent network with tenure's scan: each example is a
sequence of --steps random values +1 or -1 generated here (no download), and
the network says whether their sum is positive.  The cell is
h_t = tanh(x_t Wx + h_(t-1) Wh + b), one scan over the time axis; the last
state goes through a linear layer to two classes.  The gradient runs back
through the loop (tn.grad), and one compiled training step applies SGD with
momentum to the parameters (shared variables) on mini-batches.  At the end
it prints the test loss before and after training and the test accuracy
next to the majority-class baseline's.

On a terminal each epoch shows a progress bar; when the output goes to a
file or a pipe, each epoch prints one line instead.
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tenure.demo rnn``."""
    parser = argparse.ArgumentParser(
        prog="python -m tenure.demo rnn", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=10,
                        help="passes over the training set (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="training sequences per SGD step (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=16,
                        help="units in the recurrent state h_t (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=15,
                        help="length of each sequence: steps of the loop (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.05,
                        help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--momentum", type=float, default=0.5,
                        help="momentum of SGD, in [0, 1); 0: plain SGD (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data and of the initial weights (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=2000,
                        help="training sequences; the test set has a quarter as many "
                             "(default: %(default)s)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "hidden", "steps", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    if not args.lr > 0:
        parser.error("--lr must be positive")
    if not 0 <= args.momentum < 1:
        parser.error("--momentum must be in [0, 1)")

    rng = np.random.default_rng(args.seed)
    X_train, y_train = make_sign_sequences(rng, args.samples, args.steps)
    X_test, y_test = make_sign_sequences(rng, max(args.samples // 4, 1), args.steps)
    start = time.perf_counter()
    params, train, evaluate = build_model(rng, X_train.shape[2], args.hidden, 2, args.lr,
                                          args.momentum)
    compile_s = time.perf_counter() - start
    n_params = sum(p.get_value(borrow=True).size for p in params)
    print(f"tenure {tn.__version__}: RNN h_t = tanh(x_t Wx + h_(t-1) Wh + b), 1-{args.hidden}-2 "
          f"({n_params} parameters), scan over {args.steps} steps, on {len(X_train)} "
          f"sequences of +-1 (is the sum positive?), linker {train.mode.linker!r}; "
          f"compiled in {compile_s:.2f} s")

    initial_loss, initial_acc = loss_and_accuracy(evaluate, X_test, y_test)
    start = time.perf_counter()
    n_batches = max(len(X_train) // args.batch_size, 1)
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(X_train))
        batches = np.array_split(order, n_batches)
        losses = []
        # disable=None: tqdm draws the bar only on a terminal; to a file or a
        # pipe it writes nothing, and the epoch's line below stands for it.
        with tqdm(batches, desc=f"epoch {epoch:3d}/{args.epochs}", unit="batch", leave=False,
                  dynamic_ncols=True, disable=None) as bar:
            drawn = not bar.disable   # (closing the bar disables it)
            for idx in bar:
                losses.append(float(train(X_train[idx], y_train[idx])))
                bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
        if not drawn or epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            _, train_acc = loss_and_accuracy(evaluate, X_train, y_train)
            tqdm.write(f"epoch {epoch:3d}/{args.epochs}  loss {np.mean(losses):.4f}  "
                       f"train accuracy {train_acc:.3f}")
    elapsed = time.perf_counter() - start

    test_loss, test_acc = loss_and_accuracy(evaluate, X_test, y_test)
    baseline = max(float(np.mean(y_test)), 1.0 - float(np.mean(y_test)))
    print(f"trained {args.epochs} epochs in {elapsed:.1f} s; test loss {initial_loss:.4f} "
          f"before training, {test_loss:.4f} after; final test accuracy {test_acc:.3f}")
    verdict = "beats" if test_acc > baseline else "does not beat"
    print(f"the RNN {verdict} the majority-class baseline: test accuracy {test_acc:.3f} vs "
          f"{baseline:.3f} (always answering the test set's majority class; the untrained "
          f"RNN: {initial_acc:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
