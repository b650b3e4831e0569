"""Whole-function CUDA graphs (:mod:`tenure.linkers.cuda.graphs`).

The emulated device's capture API first (CUDA's rules, without a GPU), then
functions: capture and replay, what invalidates a graph, the memory
contract under replay (fresh and borrowed outputs, in-place and copied
updates, swaps), and the reasons a function is not captured.  Function
tests take ``device`` (tests/linkers/cuda/conftest.py): the emulated device
always, the real one where there is a GPU.  Results are compared with the
Python linker's or with NumPy.
"""

import gc

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.c import compiler
from tenure.linkers.cuda.graphs import COPY_BYTES_PER_LAUNCH, MAX_GRAPHS, graph_status
from tenure.linkers.cuda.emulated_device import (EmulatedCaptureUnsupported,
                                                 EmulatedIllegalAddress, emulated_device)
from tests.linkers.cuda.conftest import host

pytestmark = pytest.mark.skipif(compiler.find_compiler() is None,
                                reason="no working C compiler to emulate kernels with")


def cuda(**kwargs):
    return tn.Mode(linker="cuda", **kwargs)


def storage(shared):
    return shared.get_value(borrow=True, return_internal_type=True)


# -- the emulated device's capture API ---------------------------------------------------


@pytest.fixture
def emulated():
    device = emulated_device()
    yield device
    device.synchronize()      # nothing left queued for the next test


def _add_one(device, array):
    """Queue ``array += 1`` as a kernel launch."""
    memory = array._mem
    device.launch(lambda: np.add(memory, 1, out=memory), [array], name="add_one")


def test_a_capture_records_launches_and_each_graph_launch_runs_them_again(emulated):
    a = emulated.from_host(np.zeros(3))
    stream = emulated.stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        assert stream.is_capturing()
        _add_one(emulated, a)
        _add_one(emulated, a)
        graph = stream.end_capture()
    np.testing.assert_array_equal(a.get(), 0.0)      # captured, not run
    assert len(graph) == 2
    graph.launch(stream)
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(a.get(), 4.0)


def test_the_null_stream_cannot_be_captured(emulated):
    with pytest.raises(EmulatedCaptureUnsupported, match="null"):
        emulated.null_stream.begin_capture()


@pytest.mark.parametrize("what, operation", [
    ("allocation", lambda device, a: device.empty(4, np.float64)),
    ("synchronisation", lambda device, a: a.get()),
    ("allocation", lambda device, a: device.from_host(np.ones(3))),
    ("synchronisation", lambda device, a: a.set(np.ones(3))),
    ("synchronisation", lambda device, a: np.exp(a, out=a)),
])
def test_what_a_capture_cannot_hold_raises_and_invalidates_it(emulated, what, operation):
    a = emulated.from_host(np.zeros(3))
    stream = emulated.stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with pytest.raises(EmulatedCaptureUnsupported, match=f"capturing: an? .*{what}"):
            operation(emulated, a)
        with pytest.raises(EmulatedCaptureUnsupported, match="Invalidated"):
            stream.end_capture()
    assert not stream.is_capturing()


def test_views_need_no_synchronisation_during_a_capture(emulated):
    a = emulated.from_host(np.arange(6.0))
    emulated.synchronize()        # (the copy to the device is not ordered with `stream`)
    stream = emulated.stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        view = a.reshape(2, 3).T[1:]
        _add_one(emulated, view)
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(a.get(), [0, 2, 3, 3, 5, 6])


def test_a_graph_launched_after_its_memory_was_freed_is_an_illegal_address(emulated):
    a = emulated.from_host(np.zeros(3))
    stream = emulated.stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        _add_one(emulated, a)
        graph = stream.end_capture()
    del a
    gc.collect()
    graph.launch(stream)
    with pytest.raises(EmulatedIllegalAddress, match="after the graph was captured"):
        stream.synchronize()


# -- functions: capture and replay --------------------------------------------------------


def test_a_function_is_captured_once_and_replayed(device):
    x = tn.vector("x")
    w = tn.shared(device.from_host(np.arange(5.0)), name="w")
    y = tn.exp(x) * 2 + tn.sin(x) * w - x / 3
    f = tn.function([x], y, mode=cuda())
    rng = np.random.default_rng(0)
    w_host = tn.shared(np.arange(5.0), name="w_host")
    reference = tn.function([x], tn.exp(x) * 2 + tn.sin(x) * w_host - x / 3,
                            mode=tn.Mode(linker="py"))
    for _ in range(4):
        value = rng.standard_normal(5)
        np.testing.assert_allclose(host(f(value)), reference(value), rtol=1e-12)
    status = graph_status(f)
    assert (status.captures, status.replays, status.reason) == (1, 3, None), status


def test_graphs_off_by_config(device):
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) + 1, mode=cuda())
    with tn.config.change_flags(cuda_graphs=False):
        for _ in range(3):
            np.testing.assert_allclose(host(f(np.zeros(3))), 2.0)
        status = graph_status(f)
    assert (status.enabled, status.captures, status.replays) == (False, 0, 0)
    assert "off" in status.reason


def test_a_new_signature_gets_its_own_graph_and_the_old_one_stays(device):
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) * 2, mode=cuda())
    for n in (3, 4, 3, 4, 3):
        np.testing.assert_allclose(host(f(np.ones(n))), 2 * np.e)
    status = graph_status(f)
    assert (status.captures, status.replays) == (2, 3)
    assert len(status.captured) == 2


def test_at_most_max_graphs_signatures_keep_a_graph(device):
    x = tn.vector("x")
    f = tn.function([x], x * 2, mode=cuda())
    for n in range(1, MAX_GRAPHS + 3):
        f(np.ones(n))
    assert len(graph_status(f).captured) == MAX_GRAPHS


def test_arguments_are_copied_in_so_new_arrays_need_no_new_capture(device):
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], x * x, mode=cuda())
    for k in range(4):
        arg = device.from_host(np.full(3, float(k)))
        np.testing.assert_array_equal(host(f(arg)), k * k)
    assert graph_status(f).captures == 1


def test_non_contiguous_arguments_are_copied_into_the_graphs_buffers(device):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True)], x + 1, mode=cuda())
    base = np.arange(12.0).reshape(3, 4)
    f(device.from_host(base))
    got = f(device.from_host(base.T.copy()).T)       # the same shape, other strides
    np.testing.assert_array_equal(host(got), base + 1)
    assert graph_status(f).replays == 1


# -- what invalidates a graph ----------------------------------------------------------


def test_set_value_of_the_same_shape_keeps_the_graph_and_is_read(device):
    w = tn.shared(device.from_host(np.ones(3)), name="w")
    f = tn.function([], w * 10, mode=cuda())
    f()
    w.set_value(np.full(3, 2.0))
    np.testing.assert_array_equal(host(f()), 20.0)
    status = graph_status(f)
    assert (status.replays, status.invalidations) == (1, 0)


def test_set_value_with_borrow_adopting_a_new_array_invalidates_the_graph(device):
    w = tn.shared(device.from_host(np.ones(3)), name="w")
    f = tn.function([], w * 10, mode=cuda())
    f()
    f()
    w.set_value(device.from_host(np.full(3, 3.0)), borrow=True)
    np.testing.assert_array_equal(host(f()), 30.0)
    np.testing.assert_array_equal(host(f()), 30.0)
    status = graph_status(f)
    assert (status.captures, status.invalidations, status.replays) == (2, 1, 2)


def test_storage_replaced_by_an_uncaptured_call_invalidates_the_graph(device):
    w = tn.shared(device.from_host(np.ones(3)), name="w")
    f = tn.function([], w * 10, mode=cuda())
    grow = tn.function([], [], updates=[(w, w + 1)], mode=cuda(exclude=["inplace"]))
    f()
    with tn.config.change_flags(cuda_graphs=False):
        grow()                                        # a new buffer for w
    np.testing.assert_array_equal(host(f()), 20.0)
    assert graph_status(f).invalidations == 1


# -- the memory contract under replay --------------------------------------------------


def test_unborrowed_outputs_are_fresh_every_replay(device):
    x = tn.vector("x")
    f = tn.function([x], Out(tn.exp(x), borrow=False), mode=cuda())
    results = [f(np.full(3, float(k))) for k in range(3)]
    for k, r in enumerate(results):
        np.testing.assert_allclose(host(r), np.exp(float(k)))
    assert not device.may_share_memory(results[1], results[2])
    assert graph_status(f).replays == 2


def test_borrowed_outputs_are_the_graphs_buffer_and_allocate_nothing(device):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True)], Out(tn.exp(x) * 2 + tn.sin(x), borrow=True),
                    mode=cuda())
    arg = device.from_host(np.ones((16, 8)))
    f(arg)
    first = f(arg)
    with device.track() as usage:
        again = f(arg)
    assert again is first
    assert usage.n_allocations == 0, usage
    assert graph_status(f).replays == 2
    assert any(b is again for b in f.lent_buffers())


def test_a_lent_graph_buffer_is_copied_by_shared_not_adopted(device):
    x = tn.vector("x")
    f = tn.function([x], Out(x * 2, borrow=True), mode=cuda())
    f(np.ones(3))
    lent = f(np.ones(3))
    s = tn.shared(lent, borrow=True)
    assert storage(s) is not lent
    f(np.full(3, 5.0))
    np.testing.assert_array_equal(host(s.get_value()), 2.0)


def test_a_borrowed_output_passed_back_in(device):
    h = tn.vector("h")
    f = tn.function([In(h, borrow=True)], Out(h * 2 + 1, borrow=True), mode=cuda())
    value = device.from_host(np.zeros(3))
    for _ in range(4):
        value = f(value)
    np.testing.assert_array_equal(host(value), 15.0)     # 0 -> 1 -> 3 -> 7 -> 15
    assert graph_status(f).replays == 3


def test_in_place_updates_under_replay_keep_the_storage(device):
    w = tn.shared(device.from_host(np.ones(4)), name="w")
    before = storage(w)
    step = tn.function([], [], updates=[(w, w * 2 + 1)], mode=cuda())
    for _ in range(4):
        step()
    assert storage(w) is before
    np.testing.assert_array_equal(host(w.get_value()), 31.0)
    assert graph_status(step).replays == 3


def test_updates_not_in_place_are_copied_into_the_storage(device):
    # Outputs hold the values from before the call; the storage keeps its
    # buffer, so the graph stays valid.
    w = tn.shared(device.from_host(np.ones(4)), name="w")
    before = storage(w)
    x = tn.vector("x")
    f = tn.function([x], [w * 1, w + x], updates=[(w, w + x)],
                    mode=cuda(exclude=["inplace"]))
    seen = []
    for k in range(4):
        old, new = f(np.full(4, 1.0))
        seen.append((host(old)[0], host(new)[0]))
    assert seen == [(1, 2), (2, 3), (3, 4), (4, 5)]
    assert storage(w) is before
    status = graph_status(f)
    assert (status.replays, status.invalidations) == (3, 0)


def test_borrowed_output_of_storage_an_update_overwrites_holds_the_old_value(device):
    w = tn.shared(device.from_host(np.ones(3)), name="w")
    f = tn.function([], Out(w, borrow=True), updates=[(w, w + 1)],
                    mode=cuda(exclude=["inplace"]))
    got = [host(f())[0] for _ in range(3)]
    assert got == [1, 2, 3]
    assert graph_status(f).replays == 2


def test_a_swap_under_replay(device):
    a = tn.shared(device.from_host(np.zeros(2)), name="a")
    b = tn.shared(device.from_host(np.ones(2)), name="b")
    swap = tn.function([], [], updates=[(a, b), (b, a)], mode=cuda())
    for k in range(5):
        swap()
        expected = (1, 0) if k % 2 == 0 else (0, 1)
        assert (host(a.get_value())[0], host(b.get_value())[0]) == expected


def test_graphs_agree_with_node_by_node_calls_on_an_update_step(device):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((6, 4))

    def run(graphs: bool):
        w = tn.shared(device.from_host(np.linspace(-1, 1, 4)), name="w")
        x = tn.matrix("x")
        h = tn.tanh(x * w)
        loss = tn.sum(h ** 2) / 6
        step = tn.function([x], loss, updates=[(w, w - 0.1 * tn.sum(h * x, axis=0))],
                           mode=cuda())
        with tn.config.change_flags(cuda_graphs=graphs):
            losses = [float(host(step(data))) for _ in range(4)]
        return losses, host(w.get_value()), graph_status(step)

    with_graphs, without = run(True), run(False)
    np.testing.assert_allclose(with_graphs[0], without[0], rtol=1e-12)
    np.testing.assert_allclose(with_graphs[1], without[1], rtol=1e-12)
    assert with_graphs[2].replays == 3, with_graphs[2]


def test_replays_on_another_stream_are_ordered_after_earlier_calls(device):
    w = tn.shared(device.from_host(np.zeros(3)), name="w")
    step = tn.function([], [], updates=[(w, w + 1)], mode=cuda())
    step()
    step()
    with device.stream(non_blocking=True):
        step()
        got = host(w.get_value())
    np.testing.assert_array_equal(got, 3.0)
    assert graph_status(step).replays == 2


def test_a_dropped_graph_outlives_its_launch_pending_on_another_stream(device):
    # The arena was allocated on the stream of the first call; a replay is
    # queued on another one (a borrowed output: no copy waits for it), and
    # the graph dropped before it ran: its
    # buffers must not go back to the pool (the emulated device poisons them
    # and the launch raises EmulatedIllegalAddress).
    x = tn.vector("x")
    f = tn.function([x], Out(tn.exp(x) * 2 + 1, borrow=True), mode=cuda())
    f(np.zeros(3))
    device.synchronize()
    stream = device.stream(non_blocking=True)
    with stream:
        got = f(np.zeros(3))
        f.free()
        gc.collect()
        np.testing.assert_array_equal(host(got), 3.0)
    assert graph_status(f).replays == 1


def test_free_drops_the_graphs(device):
    x = tn.vector("x")
    f = tn.function([x], Out(x + 1, borrow=True), mode=cuda())
    f(np.ones(2))
    f.free()
    assert graph_status(f).captured == []
    np.testing.assert_array_equal(host(f(np.ones(2))), 2.0)


def test_memory_report_neither_uses_nor_changes_the_graphs(device):
    x = tn.matrix("x")
    f = tn.function([x], tn.exp(x) * 2, mode=cuda())
    f(np.ones((4, 4)))
    before = graph_status(f)
    report = f.memory_report(np.ones((4, 4)), print_report=False)
    assert report.measured_peak <= report.predicted_peak
    assert graph_status(f) == before


def test_large_arguments_run_uncaptured(device):
    """A replay copies its arguments into the graph's buffers: above
    COPY_BYTES_PER_LAUNCH per launch saved that costs more than the launches
    (on the H100, 64M-element elemwise: 702 us replayed, 373 us uncaptured).
    Such a signature runs uncaptured, saying why; a small one is captured."""
    x = tn.vector("x", dtype="float32")
    f = tn.function([In(x, borrow=True)], Out(tn.exp(x) * 2, borrow=True), mode=cuda())
    launches = len(f._thunk.plan.steps)
    n = launches * COPY_BYTES_PER_LAUNCH // 4       # the argument alone is the whole allowance
    big = device.from_host(np.full(n, 0.5, dtype="float32"))
    for _ in range(2):
        np.testing.assert_allclose(host(f(big))[[0, -1]], np.exp(np.float32(0.5)) * 2, rtol=1e-6)
    status = graph_status(f)
    assert status.captured == [] and status.replays == 0
    assert "CopiesOutweighLaunches" in status.reason and "MiB" in status.reason
    small = device.from_host(np.full(1000, 0.5, dtype="float32"))
    f(small), f(small)
    assert graph_status(f).captured == [(((1000,), np.dtype("float32")),)]
    assert graph_status(f).replays == 1


def test_a_call_that_fails_keeps_no_graph(device):
    x, y = tn.vector("x"), tn.vector("y")
    f = tn.function([x, y], x + y, mode=cuda())
    with pytest.raises(ValueError):
        f(np.ones(3), np.ones(4))
    assert graph_status(f).captured == []
    np.testing.assert_array_equal(host(f(np.ones(3), np.ones(3))), 2.0)


# -- functions that are not captured, and why --------------------------------------------


def test_a_kernel_whose_error_bits_are_read_back_is_not_captured(device):
    x, p = tn.vector("x", dtype="int64"), tn.scalar("p", dtype="int64")
    f = tn.function([x, p], x ** p, mode=cuda())
    for _ in range(3):
        np.testing.assert_array_equal(host(f(np.arange(3), 2)), np.arange(3) ** 2)
    status = graph_status(f)
    assert status.captures == 0 and status.replays == 0
    (reason,) = status.refused.values()
    assert status.reason == reason
    assert "captur" in reason and "pow" in reason.lower(), reason


def test_an_index_checked_on_the_host_is_not_captured(device):
    x, i = tn.vector("x"), tn.vector("i", dtype="int64")
    f = tn.function([x, i], x[i] * 2, mode=cuda())
    for _ in range(2):
        np.testing.assert_array_equal(host(f(np.arange(4.0), np.array([3, 1]))), [6.0, 2.0])
    with pytest.raises(IndexError):
        f(np.arange(4.0), np.array([7]))        # still checked on every call
    assert graph_status(f).replays == 0
    assert graph_status(f).refused


def test_graph_status_of_a_function_on_another_linker():
    x = tn.vector("x")
    f = tn.function([x], x + 1, mode=tn.Mode(linker="py"))
    assert "Mode(linker='cuda')" in graph_status(f).reason
