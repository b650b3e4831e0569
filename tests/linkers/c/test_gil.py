"""Long C loops and BLAS products run without the GIL: another Python thread
runs while a call on a worker thread is inside one (Dask's threads overlap).

How it is seen without timing anything: a worker thread starts a call that
takes about a second; the main thread sleeps a tenth of that, then runs a
line of Python and looks whether the call has returned.  With the GIL held
through the loop the main thread cannot run that line before the loop ends
(the interpreter only switches threads between bytecodes), so it would
find the call returned."""

import threading
import time

import numpy as np
import pytest

import tenure as tn

pytestmark = pytest.mark.usefixtures("cc_or_skip")


def _runs_beside(f, *args) -> bool:
    """Whether the main thread ran Python while ``f(*args)`` (one call) ran
    on another thread."""
    started, returned = threading.Event(), threading.Event()
    start = time.perf_counter()
    f(*args)
    took = time.perf_counter() - start
    assert took > 0.05, f"the call took {took:.3f} s: too short to tell (make it bigger)"

    def call():
        started.set()
        f(*args)
        returned.set()

    worker = threading.Thread(target=call)
    worker.start()
    started.wait()
    time.sleep(took / 5)
    ran_while_inside = not returned.is_set()
    worker.join()
    return ran_while_inside


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
    f(value)                      # on the main thread: the GIL is held throughout
    during = len(progress) - before
    stop.set()
    counter.join()
    assert during <= 2
