"""A call is a transaction: when it raises -- a shape that does not fit, an
index out of bounds, an error inside an op, Ctrl-C -- no shared variable has
changed, and the function keeps working; in-place updates stay in place in
the calls that succeed.  Calls are atomic with respect to the shared
variables they touch, from any number of threads.  Every test runs on every
linker (``mode``)."""

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.commit import commit_point
from tenure.linkers.cuda.device_ops import register_device_op
from tenure.symbolic.device import cuda_runtime
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.variable import as_tensor_variable


class Trip(Op):
    """The identity (a copy), running ``action()`` first while ``armed``: an
    error inside an op, or a Ctrl-C arriving while it runs.  It has no
    ``check_shapes``: like any op that may fail on values."""

    __props__ = ("tag",)

    def __init__(self, tag, action):
        self.tag = tag
        self.action = action
        self.armed = False

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = inputs[0].copy()
        if self.armed:
            # Last: a Ctrl-C simulated here is noticed after the step, not in it.
            self.armed = False
            self.action()

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]


# Its perform is written for any array: it runs on the device too.
register_device_op(Trip)


def _raise_runtime_error():
    raise RuntimeError("boom inside an op")


def _raise_keyboard_interrupt():
    raise KeyboardInterrupt


def _ctrl_c():
    """What a SIGINT arriving now does: Python's handler runs at its next check."""
    _thread.interrupt_main(signal.SIGINT)


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler (Ctrl-C raises KeyboardInterrupt) for the
    test, whatever the process started with: pytest run in the background,
    under ``nohup`` or by some CI runners starts with SIGINT ignored, and
    then no Ctrl-C reaches Python at all.  The handler before is put back."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _users_handler(signum, frame):
    raise RuntimeError("the user's own SIGINT handler")


#: the SIGINT handlers a process may have when it calls a function: Python's
#: default, ignored (started in the background), the OS default, its own
HANDLERS = {"python": signal.default_int_handler, "ignored": signal.SIG_IGN,
            "os_default": signal.SIG_DFL, "users": _users_handler}


def _two_updates(mode, between):
    """``a <- a + 1`` (in place into ``a``'s buffer), then ``b <- b + sum(between(a + 1))``:
    the second update reads the first one's in-place result, so it runs after
    shared storage was written."""
    a = tn.shared(np.zeros(3), name="a")
    b = tn.shared(np.zeros(()), name="b")
    x = tn.vector("x")
    a1 = a + 1
    f = tn.function([x], [], updates=[(a, a1), (b, b + between(a1, x).sum())], mode=mode)
    return f, a, b


def _assert_unchanged_then_working(f, a, b, good_args, expect_b):
    np.testing.assert_array_equal(a.get_value(), np.zeros(3))
    assert b.get_value() == 0
    storage = a.get_value(borrow=True, return_internal_type=True)
    f(*good_args)
    np.testing.assert_array_equal(a.get_value(), np.ones(3))
    assert b.get_value() == expect_b
    # In place where it was before: the update landed in a's own buffer.
    now = a.get_value(borrow=True, return_internal_type=True)
    assert now is storage or np.shares_memory(now, storage)


def test_a_shape_error_after_an_in_place_update_changes_nothing(mode):
    f, a, b = _two_updates(mode, lambda a1, x: tn.dot(x.reshape((1, -1)), a1))
    with pytest.raises(ValueError):
        f(np.ones(4))
    _assert_unchanged_then_working(f, a, b, (np.ones(3),), 3.0)


def test_a_shape_error_in_the_second_in_place_update_changes_nothing(mode):
    a = tn.shared(np.zeros(3), name="a")
    b = tn.shared(np.zeros(3), name="b")
    x = tn.vector("x")
    f = tn.function([x], [], updates=[(a, a + 1), (b, b + x)], mode=mode)
    with pytest.raises(ValueError):
        f(np.ones(4))
    np.testing.assert_array_equal(a.get_value(), np.zeros(3))
    np.testing.assert_array_equal(b.get_value(), np.zeros(3))
    f(np.ones(3))
    np.testing.assert_array_equal(a.get_value(), np.ones(3))
    np.testing.assert_array_equal(b.get_value(), np.ones(3))


def test_an_index_out_of_bounds_after_an_in_place_update_changes_nothing(mode):
    a = tn.shared(np.zeros(3), name="a")
    b = tn.shared(np.zeros(()), name="b")
    i = tn.scalar("i", dtype="int64")
    a1 = a + 1
    f = tn.function([i], [], updates=[(a, a1), (b, b + a1[i])], mode=mode)
    with pytest.raises(IndexError):
        f(7)
    _assert_unchanged_then_working(f, a, b, (2,), 1.0)


@pytest.mark.parametrize("action, error", [(_raise_runtime_error, RuntimeError),
                                           (_raise_keyboard_interrupt, KeyboardInterrupt)])
def test_an_error_inside_an_op_after_an_in_place_update_changes_nothing(mode, action, error):
    trip = Trip("after", action)
    f, a, b = _two_updates(mode, lambda a1, x: trip(a1) * x)
    trip.armed = True
    with pytest.raises(error):
        f(np.ones(3))
    _assert_unchanged_then_working(f, a, b, (np.ones(3),), 3.0)


def test_ctrl_c_before_any_shared_write_stops_the_call(mode, ctrl_c_raises):
    trip = Trip("before", _ctrl_c)
    a = tn.shared(np.zeros(3), name="a")
    x = tn.vector("x")
    f = tn.function([x], [], updates=[(a, a + trip(x))], mode=mode)
    trip.armed = True
    with pytest.raises(KeyboardInterrupt):
        f(np.ones(3))
    np.testing.assert_array_equal(a.get_value(), np.zeros(3))
    f(np.ones(3))
    np.testing.assert_array_equal(a.get_value(), np.ones(3))


def test_ctrl_c_after_a_shared_write_lets_the_call_complete(mode, ctrl_c_raises):
    """The call completes (every update assigned) and the KeyboardInterrupt
    arrives in the caller right after it returned."""
    trip = Trip("after", _ctrl_c)
    f, a, b = _two_updates(mode, lambda a1, x: trip(a1) * x)
    trip.armed = True
    returned = []
    with pytest.raises(KeyboardInterrupt):
        returned.append(f(np.ones(3)))
        time.sleep(2)   # the interrupt arrives here, after the call returned
    assert returned == [[]]
    np.testing.assert_array_equal(a.get_value(), np.ones(3))
    assert b.get_value() == 3.0


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_the_sigint_handler_before_a_call_is_back_after_it(mode, handler):
    """Whatever handled SIGINT before a call handles it after the call,
    returned or failed; one that is not Python's default (which a call
    replaces until it ends, to hold a Ctrl-C after its commit point) is
    left in place during the call too."""
    during = []
    trip = Trip("after", lambda: during.append(signal.getsignal(signal.SIGINT)))
    f, a, b = _two_updates(mode, lambda a1, x: trip(a1) * x)
    failing = Trip("after", _raise_runtime_error)
    g, _, _ = _two_updates(mode, lambda a1, x: failing(a1) * x)
    before = signal.signal(signal.SIGINT, HANDLERS[handler])
    try:
        trip.armed = True
        f(np.ones(3))
        after_a_call = signal.getsignal(signal.SIGINT)
        failing.armed = True
        with pytest.raises(RuntimeError, match="boom"):
            g(np.ones(3))
        after_a_failed_call = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    assert after_a_call is HANDLERS[handler]
    assert after_a_failed_call is HANDLERS[handler]
    assert len(during) == 1
    if handler != "python":
        assert during[0] is HANDLERS[handler]


def _peak_bytes(mode, call) -> int:
    """The most memory ``call()`` held: on the device for the cuda linker
    (the emulated device, as the suites run it), else host memory."""
    if mode.linker == "cuda":
        with cuda_runtime(emulated=True).track() as usage:
            call()
        return usage.peak_bytes
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_validated_training_step_takes_no_backup_copy(mode):
    """A training step's ops after its first in-place update are all checked
    from the shapes: no copy of the weights is made to undo it."""
    if mode.linker == "check":
        pytest.skip("the check linker snapshots every input to verify the ops")
    rng = np.random.default_rng(0)
    W = tn.shared(rng.standard_normal((400, 300)), name="W")
    V = tn.shared(rng.standard_normal((300, 10)), name="V")
    x, t = tn.matrix("x"), tn.matrix("t")
    loss = ((tn.relu(x @ W) @ V - t) ** 2).mean()
    gW, gV = tn.grad(loss, [W, V])
    f = tn.function([tn.In(x, borrow=True), tn.In(t, borrow=True)], loss,
                    updates=[(W, W - 0.01 * gW), (V, V - 0.01 * gV)], mode=mode)
    xv, tv = rng.standard_normal((8, 400)), rng.standard_normal((8, 10))
    f(xv, tv)
    w_storage = W.get_value(borrow=True, return_internal_type=True)
    peak = _peak_bytes(mode, lambda: f(xv, tv))
    assert np.shares_memory(W.get_value(borrow=True, return_internal_type=True),
                            w_storage)   # in place
    # The gradient of W (the size of W) is needed; a backup would be a second one.
    assert peak < 1.5 * w_storage.nbytes


@pytest.mark.usefixtures("freeing_intermediates")
def test_a_budgeted_training_step_takes_no_backup_copy(mode):
    """With an activation-memory budget, shape arithmetic (Shape, constant
    Subtensor, Alloc) runs after the first in-place update: those ops are
    checked from the shapes too, so no copy of the weights is taken."""
    if mode.linker == "check":
        pytest.skip("the check linker snapshots every input to verify the ops")
    rng = np.random.default_rng(0)
    W = tn.shared(rng.standard_normal((64, 256)), name="W")
    V = tn.shared(rng.standard_normal((256, 4)), name="V")
    b = tn.shared(rng.standard_normal(256), name="b")
    x, t = tn.matrix("x"), tn.matrix("t")
    # (the bias, which may broadcast, keeps the gradient's sum_to and its shapes)
    loss = ((tn.relu(x @ W + b) @ V - t) ** 2).mean()
    gW, gV = tn.grad(loss, [W, V])
    f = tn.function([x, t], loss, updates=[(W, W - 0.01 * gW), (V, V - 0.01 * gV)],
                    mode=tn.Mode(linker=mode.linker, activation_memory_budget=0.0))
    args = rng.standard_normal((512, 64)), rng.standard_normal((512, 4))
    report = f.memory_report(*args, print_report=False)
    commit = commit_point(report.plan, f.fgraph)
    after = {type(node.op).__name__ for node in commit.nodes}
    assert {"Shape", "Subtensor", "Alloc"} & after, f"no shape arithmetic after the commit: {after}"
    assert report.backups[1] == {}
    assert abs(report.measured_peak - report.predicted_peak) <= 0.015 * report.predicted_peak


def test_a_backup_copy_is_predicted(mode):
    """A graph indexing by a value after its in-place update keeps a copy of
    the shared storage: the report's prediction counts it."""
    if mode.linker == "check":
        pytest.skip("the check linker snapshots every input to verify the ops")
    a = tn.shared(np.zeros(1_000_000), name="a")
    b = tn.shared(np.zeros(()), name="b")
    i = tn.scalar("i", dtype="int64")
    a1 = a + 1
    f = tn.function([i], [], updates=[(a, a1), (b, b + a1[i])], mode=mode)
    report = f.memory_report(3, print_report=False)
    step, copies = report.backups
    assert sorted(copies.values()) == [b.get_value(borrow=True).nbytes,
                                       a.get_value(borrow=True).nbytes]
    assert report.predicted_peak >= 8_000_000
    assert abs(report.measured_peak - report.predicted_peak) <= 0.015 * report.predicted_peak


def test_a_shape_error_is_raised_before_any_step_runs(mode):
    """Validation works out every planned shape from the input shapes: the
    error names the node and the shapes."""
    W = tn.shared(np.ones((3, 2)), name="W")
    x = tn.matrix("x")
    f = tn.function([x], [], updates=[(W, W - tn.dot(x.T, tn.dot(x, W)))], mode=mode)
    with pytest.raises(ValueError, match="cannot be broadcast|not aligned") as info:
        f(np.ones((2, 4)))
    assert "refused before the call ran any step" in " ".join(info.value.__notes__)
    np.testing.assert_array_equal(W.get_value(), np.ones((3, 2)))


# ----------------------------------------------------------------------------
# Threads


@pytest.fixture
def frequent_thread_switches():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run_threads(n_threads, work):
    errors = []

    def target(k):
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_concurrent_calls_lose_no_update(mode, frequent_thread_switches):
    """The issue's test: two functions that both update ``w <- w + 1``, from
    four threads (a perform in each call gives other threads a chance to run
    in the middle of it on every linker)."""
    w = tn.shared(np.zeros(()), name="w")
    slow = Trip("slow", lambda: None)
    inc = tn.function([], [], updates=[(w, slow(w) + 1)], mode=mode)
    inc_and_read = tn.function([], slow(w) * 1, updates=[(w, w + 1)], mode=mode)
    calls = 300

    def work(k):
        f = inc if k % 2 else inc_and_read
        for _ in range(calls):
            slow.armed = True
            f()

    _run_threads(4, work)
    assert w.get_value() == 4 * calls


def test_one_function_called_from_several_threads_at_once(mode, frequent_thread_switches):
    x = tn.matrix("x")
    f = tn.function([x], [(tn.exp(x) * 2).sum(axis=0), (x @ x.T).sum()], mode=mode)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((5, 5)) for _ in range(4)]
    expected = [[(np.exp(v) * 2).sum(axis=0), (v @ v.T).sum()] for v in inputs]

    def work(k):
        for _ in range(200):
            got = f(inputs[k])
            np.testing.assert_allclose(got[0], expected[k][0])
            np.testing.assert_allclose(got[1], expected[k][1])

    _run_threads(4, work)


def test_get_value_waits_for_a_call_in_progress(mode):
    """A call holds its shared variables: ``get_value`` from another thread
    sees the value before or after the call, never a half-updated one."""
    w = tn.shared(np.zeros(1000), name="w")
    started, release = threading.Event(), threading.Event()

    def pause():
        started.set()
        release.wait(5)

    trip = Trip("pause", pause)
    f = tn.function([], [], updates=[(w, trip(w) + 1)], mode=mode)
    trip.armed = True
    caller = threading.Thread(target=f)
    caller.start()
    assert started.wait(5)
    seen = []
    reader = threading.Thread(target=lambda: seen.append(w.get_value()))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive()   # waiting for the call to end
    release.set()
    caller.join()
    reader.join()
    np.testing.assert_array_equal(seen[0], np.ones(1000))


@pytest.mark.host_buffers
def test_ctrl_c_stops_the_call_at_the_next_step(mode, ctrl_c_raises):
    """A SIGINT arriving during a step is acted on before the next one runs:
    here the next step would overwrite a buffer the caller gave away."""
    trip = Trip("before", _ctrl_c)
    x, m = tn.vector("x"), tn.vector("m")
    f = tn.function([x, tn.In(m, borrow=True, mutable=True)], trip(x).sum() + m, mode=mode)
    workspace = np.zeros(3)
    assert np.shares_memory(f(np.ones(3), workspace), workspace)   # written in place
    workspace[:] = 0
    trip.armed = True
    with pytest.raises(KeyboardInterrupt):
        f(np.ones(3), workspace)
    np.testing.assert_array_equal(workspace, np.zeros(3))


def test_ctrl_c_stops_a_long_compiled_loop_part_way(mode, ctrl_c_raises):
    """A SIGINT during one long elementwise loop stops it at a coarse grain
    (every 64 blocks): the loop, writing in place into a buffer the
    caller gave away, is left part-way done."""
    if mode.linker != "c":
        pytest.skip("the compiled loops' own checks (NumPy's loops have none)")
    m = tn.vector("m", dtype="float32")
    f = tn.function([tn.In(m, borrow=True, mutable=True)],
                    tn.Out(tn.exp(tn.sin(m) * tn.cos(m)) + tn.sqrt(m), borrow=True), mode=mode)
    small = np.ones(10, dtype=np.float32)
    assert np.shares_memory(f(small), small)   # computed in place
    assert any(_interrupted_part_way(f) for _ in range(4))


def _interrupted_part_way(f) -> bool:
    """Whether a SIGINT during calls of ``f`` left its in-place result part
    done.  (Not always: while the last blocks run on the other thread, the
    caller's thread has no block left to check on, and the check after the
    step raises.)"""
    work = np.ones(30_000_000, dtype=np.float32)
    # From another process, as a terminal's Ctrl-C: a thread of this one
    # would wait for the GIL, which the compiled call holds.
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -INT {os.getpid()}"])
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in range(100):   # each call takes a while; the signal comes in one
                f(work)
    finally:
        killer.wait()
    # Each call maps equal elements to equal ones: two values left means one
    # call stopped part-way.
    return len(np.unique(work[::997])) == 2


def test_ctrl_c_works_as_usual_after_a_memory_report(mode, ctrl_c_raises):
    """A report runs the thunk on its own, outside any call: it must leave no
    call's Ctrl-C handling behind."""
    f, a, b = _two_updates(mode, lambda a1, x: a1 * x)
    before = signal.getsignal(signal.SIGINT)
    f.memory_report(np.ones(3), print_report=False)
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c()
        time.sleep(1)
    f(np.ones(3))
    np.testing.assert_array_equal(a.get_value(), np.ones(3))


def test_an_update_keeps_the_static_shape_of_its_shared_variable(mode):
    """A shared variable of static shape (1, 1) updated from a value of any
    shape: a call whose value has another shape raises and changes nothing."""
    s = tn.shared(np.zeros((1, 1)), name="s", shape=(1, 1))
    a = tn.shared(np.zeros(3), name="a")
    x = tn.matrix("x")
    f = tn.function([x], [], updates=[(a, a + 1), (s, x * 2)], mode=mode)
    with pytest.raises(ValueError, match=r"expected shape \(1, 1\)"):
        f(np.ones((2, 2)))
    assert s.get_value().shape == (1, 1) and s.get_value()[0, 0] == 0
    np.testing.assert_array_equal(a.get_value(), np.zeros(3))
    f(np.ones((1, 1)))
    assert s.get_value()[0, 0] == 2
    np.testing.assert_array_equal(a.get_value(), np.ones(3))


def test_ctrl_c_stops_a_long_compiled_reduction_part_way(mode, ctrl_c_raises):
    """The same for a reduction, which checks every 64 rows: stopped, it has
    written part of its borrowed output (last call's buffer, which the test
    still holds) and not the rest."""
    if mode.linker != "c":
        pytest.skip("the compiled loops' own checks (NumPy's loops have none)")
    X = tn.matrix("X", dtype="float32")
    f = tn.function([tn.In(X, borrow=True)],
                    tn.Out(tn.exp(tn.sin(X) * tn.cos(X)).sum(axis=1), borrow=True), mode=mode)
    assert any(_reduction_interrupted_part_way(f) for _ in range(4))


def _reduction_interrupted_part_way(f) -> bool:
    zeros, ones = np.zeros((25_000, 1_000), np.float32), np.ones((25_000, 1_000), np.float32)
    held = f(zeros)   # every element 1000.0; the next calls write into this buffer
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -INT {os.getpid()}"])
    try:
        with pytest.raises(KeyboardInterrupt):
            for k in range(200):
                f(ones if k % 2 == 0 else zeros)
    finally:
        killer.wait()
    return len(np.unique(held)) == 2
