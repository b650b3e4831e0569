"""``python -m tenure.demo``: train a small MLP classifier with tenure.

``python -m tenure.demo rnn [options]`` trains a small recurrent network with
``tn.scan`` instead (:mod:`tenure.demo_rnn`); without the ``rnn`` subcommand
the demo is the MLP.

The data set is generated here (three interleaved spirals, no download).  The
model's parameters are shared variables created with ``borrow=True`` (tenure
keeps the arrays without copying), one training step is a compiled function
whose ``updates`` apply SGD to every parameter, mini-batches are lent with
``In(..., borrow=True)``, and predictions come back through
``Out(..., borrow=True)`` so that steady-state calls reuse one buffer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from tqdm import tqdm

import tenure as tn
from tenure import In, Out, demo_rnn
from tenure.memory_plot import picture_format, require_matplotlib


def make_spirals(rng: np.random.Generator, n_per_class: int, n_classes: int = 3,
                 noise: float = 0.3):
    """Points on ``n_classes`` interleaved spiral arms: (features, int32 labels)."""
    radius = np.tile(np.linspace(0.05, 1.0, n_per_class), n_classes)
    labels = np.repeat(np.arange(n_classes), n_per_class)
    angle = (labels * 2 * np.pi / n_classes + radius * 5.0
             + rng.normal(scale=noise, size=radius.shape))
    X = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1)
    return X, labels.astype(np.int32)


def init_layer(rng: np.random.Generator, n_in: int, n_out: int, name: str):
    """He-initialised weights and zero biases, as shared variables tenure may keep."""
    W = tn.shared(rng.normal(scale=np.sqrt(2.0 / n_in), size=(n_in, n_out)), name=f"W{name}",
                  borrow=True)
    b = tn.shared(np.zeros(n_out), name=f"b{name}", borrow=True)
    return W, b


def build_model(rng: np.random.Generator, n_features: int, hidden: int, n_classes: int,
                lr: float, mode=None):
    """The compiled training step and prediction function, and the parameters.

    ``mode`` (a :class:`tenure.Mode`) is used for both functions.
    """
    params = [*init_layer(rng, n_features, hidden, "1"), *init_layer(rng, hidden, hidden, "2"),
              *init_layer(rng, hidden, n_classes, "3")]
    W1, b1, W2, b2, W3, b3 = params
    X = tn.matrix("X")
    y = tn.vector("y", dtype="int32")
    h = tn.relu(X @ W1 + b1)
    h = tn.relu(h @ W2 + b2)
    logits = h @ W3 + b3
    loss = -tn.log_softmax(logits, axis=1)[tn.arange(y.shape[0]), y].mean()
    grads = tn.grad(loss, params)
    train = tn.function([In(X, borrow=True), In(y, borrow=True)], loss,
                        updates=[(p, p - lr * g) for p, g in zip(params, grads)], name="train",
                        mode=mode)
    predict = tn.function([In(X, borrow=True)], Out(logits.argmax(axis=1), borrow=True),
                          name="predict", mode=mode)
    return params, train, predict


def accuracy(predict, X, y) -> float:
    return float(np.mean(predict(X) == y))


#: ``--help``'s description: plain text (no reST), for a terminal
DESCRIPTION = """\
Train a small MLP classifier with tenure: a 2-H-H-3 ReLU network (H is
--hidden) on three interleaved spirals generated here (no download), by SGD
on mini-batches, then print the test accuracy.  The parameters are shared
variables, one training step is a compiled function whose updates apply SGD,
and predictions come back in a borrowed output buffer.

On a terminal each epoch shows a progress bar; when the output goes to a
file or a pipe, each epoch prints one line instead.
"""

#: ``--help``'s epilog: the other demo
EPILOG = """python -m tenure.demo rnn [options] trains a small recurrent network (a loop
written with tenure's scan) instead; python -m tenure.demo rnn --help lists
its options.
"""

#: the subcommand that picks the RNN demo (the first argument)
RNN_COMMAND = "rnn"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tenure.demo``."""
    parser = argparse.ArgumentParser(
        prog="python -m tenure.demo", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=40,
                        help="passes over the training set (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="training points per SGD step (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=64,
                        help="units in each of the two hidden layers (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.1,
                        help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data and of the initial weights (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=1000,
                        help="training points per class; the test set has a quarter as many "
                             "(default: %(default)s)")
    parser.add_argument("--memory-picture", metavar="PATH",
                        help="after training, draw the memory timeline of one training step "
                             "to PATH (.png, .svg or .pdf with matplotlib; .html: an "
                             "interactive page) (default: none, no picture)")
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [RNN_COMMAND]:
        return demo_rnn.main(argv[1:])
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if RNN_COMMAND in extra:
        parser.error(f"the subcommand {RNN_COMMAND} comes first: "
                     f"python -m tenure.demo {RNN_COMMAND} [options]")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    for name in ("epochs", "batch_size", "hidden", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    if not args.lr > 0:
        parser.error("--lr must be positive")
    if args.memory_picture:
        problem = picture_problem(args.memory_picture)
        if problem:
            parser.error(f"--memory-picture {args.memory_picture}: {problem}")

    rng = np.random.default_rng(args.seed)
    X_train, y_train = make_spirals(rng, args.samples)
    X_test, y_test = make_spirals(rng, max(args.samples // 4, 1))
    start = time.perf_counter()
    params, train, predict = build_model(rng, X_train.shape[1], args.hidden, 3, args.lr)
    compile_s = time.perf_counter() - start
    n_params = sum(p.get_value(borrow=True).size for p in params)
    print(f"tenure {tn.__version__}: MLP 2-{args.hidden}-{args.hidden}-3 ({n_params} parameters) "
          f"on {len(X_train)} spiral points, linker {train.mode.linker!r}; "
          f"compiled in {compile_s:.2f} s")

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
            tqdm.write(f"epoch {epoch:3d}/{args.epochs}  loss {np.mean(losses):.4f}  "
                       f"train accuracy {accuracy(predict, X_train, y_train):.3f}")
    elapsed = time.perf_counter() - start

    test_acc = accuracy(predict, X_test, y_test)
    print(f"trained {args.epochs} epochs in {elapsed:.1f} s; final test accuracy {test_acc:.3f}")
    first = predict(X_test)
    again = predict(X_test)
    print(f"predict() returns Out(borrow=True): the second call reused the first's buffer: "
          f"{first.ctypes.data == again.ctypes.data}")
    if args.memory_picture:
        draw_step_memory(train, X_train[:args.batch_size], y_train[:args.batch_size],
                         args.memory_picture)
    return 0


def is_page(path: str) -> bool:
    """Whether ``path`` names the interactive page (else a matplotlib picture)."""
    return path.lower().endswith((".html", ".htm"))


def picture_problem(path: str) -> str | None:
    """Why the picture could not be drawn to ``path`` after training (so the
    demo says it before training), or None."""
    if is_page(path):
        return None
    try:
        picture_format(path)
        require_matplotlib()
    except (ValueError, ImportError) as exc:
        return f"{exc} (or write an .html page)"
    return None


def draw_step_memory(train, X, y, path: str) -> None:
    """The memory timeline of one training step on this batch, to ``path``."""
    if is_page(path):
        tn.memory_html(train, [X, y], path, title="tenure demo: one training step")
    else:
        tn.plot_memory(train, [X, y], path, labels=["tenure demo: one training step"])
    print(f"memory timeline of one training step (predicted peak "
          f"{train.memory_timeline(X, y).predicted_peak:,} bytes) written to {path}")


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BrokenPipeError:
        # The reader left (python -m tenure.demo | head): no traceback, and
        # none either when Python flushes stdout on its way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1)
