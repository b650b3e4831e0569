"""Long C loops and BLAS products run without the GIL: another Python thread
runs while a call on a worker thread is inside one (Dask's threads overlap).

How it is seen without a timing assertion on the call itself: while a call
runs on a worker thread, the main thread spins in a Python loop and notes
the longest stretch between two of its iterations.  With the GIL held
through the call's loop, the main thread could not run at all meanwhile (the
interpreter switches threads only between bytecodes): the longest stretch
would be most of the call.  With it released, the stretches are the OS's
scheduling slices, far shorter."""

import threading
import time

import numpy as np
import pytest

import tenure as tn

pytestmark = pytest.mark.usefixtures("cc_or_skip")


def _runs_beside(f, *args) -> bool:
    """Whether the main thread kept running Python while ``f(*args)`` (one
    call) ran on another thread."""
    f(*args)   # compiled and warm
    returned = threading.Event()
    span = {}

    def call():
        span["start"] = time.perf_counter()
        f(*args)
        span["end"] = time.perf_counter()
        returned.set()

    worker = threading.Thread(target=call)
    longest, last = 0.0, time.perf_counter()
    worker.start()
    while not returned.is_set():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    took = span["end"] - span["start"]
    assert took > 0.05, f"the call took {took:.3f} s: too short to tell (make it bigger)"
    return longest < took / 2


def _same_everywhere(value, shape):
    """A big argument that takes no memory (every element the same one)."""
    return np.broadcast_to(np.asarray(value), shape)


def test_elementwise_loop():
    x = tn.vector("x")
    f = tn.function([x], tn.exp(tn.sin(x)) * tn.cos(x) + tn.log1p(x * x), mode="c")
    assert _runs_beside(f, np.linspace(0, 1, 2**24))


def test_fused_reduction_loop():
    x = tn.vector("x")
    f = tn.function([x], tn.sum(tn.exp(tn.sin(x)) * tn.cos(x)), mode="c")
    assert _runs_beside(f, _same_everywhere(0.5, (2**24,)))


def test_reduction_loop():
    x = tn.matrix("x")
    f = tn.function([x], tn.sum(x, axis=0), mode="c")
    assert _runs_beside(f, _same_everywhere(0.5, (2**16, 2**14)))


def test_blas_product():
    x, y = tn.matrix("x"), tn.matrix("y")
    f = tn.function([x, y], x @ y, mode="c")
    a = np.random.default_rng(0).standard_normal((2000, 2000))
    assert _runs_beside(f, a, a)


def test_softmax_rows():
    x = tn.matrix("x", dtype="float32")
    f = tn.function([x], tn.softmax(x, axis=-1), mode="c")
    assert _runs_beside(f, np.random.default_rng(0).random((4096, 16384), dtype=np.float32))


def test_main_thread_keeps_ctrl_c():
    """On the main thread a loop before the commit point may stop for Ctrl-C,
    which needs the GIL: the loop there keeps it (the others do not wait for
    a signal check that only the main thread runs)."""
    x = tn.vector("x")
    f = tn.function([x], tn.exp(tn.sin(x)) * tn.cos(x) + tn.log1p(x * x), mode="c")
    value = np.linspace(0, 1, 2**24)
    progress = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            progress.append(None)
            time.sleep(0)

    f(value)
    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.01)
    before = len(progress)
    start = time.perf_counter()
    f(value)                      # on the main thread: the GIL is held throughout
    took = time.perf_counter() - start
    during = len(progress) - before
    before = len(progress)
    time.sleep(took)              # the same time with the GIL free: the counter's pace
    free = len(progress) - before
    stop.set()
    counter.join()
    # A loop that let the GIL go would let the counter run at its free pace
    # (thousands of appends); the call's Python around the loop may hand it
    # over a few times, more on a loaded machine (4, then 53 seen in CI), where
    # the free pace drops as well: compared with it, not with a fixed count.
    assert during * 10 < free, (during, free)
