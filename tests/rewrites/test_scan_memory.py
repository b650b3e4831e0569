"""A loop keeps only what is read (scan_save_memory, scan_last_entry), its
step compiles with the compiling linker's inner mode, and the memory plan
counts its buffers."""

import numpy as np
import pytest

import tenure as tn
from tenure.rewrites.sizes import SizeModel
from tenure.symbolic.ops.scan import Scan


def _loops(f) -> list:
    return [node.op for node in f.fgraph.toposort() if isinstance(node.op, Scan)]


def _rnn(n_hidden=100):
    x = tn.matrix("x")
    h0 = tn.vector("h0")
    W = tn.shared(np.eye(n_hidden) * 0.5, name="W")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(h, W) + xt), sequences=[x],
                    outputs_info=[h0])
    return x, h0, W, hs


def _rnn_reference(X, H, W):
    h = H
    for row in X:
        h = np.tanh(h @ W + row)
    return h


@pytest.mark.parametrize("linker", ["py", "c"])
def test_an_unread_trajectory_becomes_a_ring(linker):
    x, h0, W, hs = _rnn()
    X, H = np.full((50, 100), 0.01), np.linspace(-1, 1, 100)
    f = tn.function([x, h0], hs[-1], mode=tn.Mode(linker=linker))
    (loop,) = _loops(f)
    assert loop.stored == (False,)
    assert "scan_save_memory" in f.rewrites_applied
    np.testing.assert_allclose(f(X, H), _rnn_reference(X, H, W.get_value()))
    kept = tn.function([x, h0], hs[-1],
                       mode=tn.Mode(linker=linker, exclude=["scan_save_memory"]))
    assert _loops(kept)[0].stored == (True,)
    np.testing.assert_allclose(kept(X, H), f(X, H))
    ring = f.memory_report(X, H, print_report=False)
    whole = kept.memory_report(X, H, print_report=False)
    # The ring holds one state (800 bytes), the trajectory all 50 (40,000).
    assert ring.predicted_peak < 10_000 <= 40_000 <= whole.predicted_peak


def test_a_read_trajectory_stays_whole():
    x, h0, W, hs = _rnn(4)
    f = tn.function([x, h0], [hs, hs[-1]])
    (loop,) = _loops(f)
    assert loop.stored == (True,)
    X, H = np.full((3, 4), 0.1), np.ones(4)
    trajectory, last = f(X, H)
    np.testing.assert_array_equal(trajectory[-1], last)


def test_a_shared_update_keeps_only_its_final_value():
    total = tn.shared(np.zeros(3), name="total")
    a = tn.matrix("a")
    doubled, updates = tn.scan(lambda row: (row * 2, {total: total + row}), sequences=[a])
    f = tn.function([a], [], updates=updates)
    (loop,) = _loops(f)
    assert loop.stored == (False,)
    assert loop.n_nitsot == 0     # the unread output is dropped from the step
    f(np.arange(12.0).reshape(4, 3))
    np.testing.assert_array_equal(total.get_value(), np.arange(12.0).reshape(4, 3).sum(0))


@pytest.mark.parametrize("linker", ["py", "c"])
def test_the_last_entry_of_an_empty_loop_raises_as_numpy_does(linker):
    """hs[-1] read from the loop's final value still raises when no step ran
    (the final value alone would be the initial one)."""
    h0 = tn.vector("h0")
    n = tn.scalar("n", dtype="int64")
    hs, updates = tn.scan(lambda h: h + 1, outputs_info=[h0], n_steps=n)
    f = tn.function([h0, n], hs[-1], mode=tn.Mode(linker=linker))
    assert _loops(f)[0].stored == (False,)
    np.testing.assert_array_equal(f(np.ones(2), 3), np.full(2, 4.0))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
        f(np.ones(2), 0)
    whole = tn.function([h0, n], hs, mode=tn.Mode(linker=linker))
    assert whole(np.ones(2), 0).shape == (0, 2)   # no last entry read: nothing raises


@pytest.mark.parametrize("linker, inner", [("py", "py"), ("c", "c"), ("check", "check")])
def test_the_step_compiles_with_the_linkers_inner_mode(linker, inner):
    x, h0, W, hs = _rnn(3)
    f = tn.function([x, h0], hs, mode=tn.Mode(linker=linker))
    (loop,) = _loops(f)
    assert loop.inner_mode.linker == inner
    f(np.zeros((2, 3)), np.ones(3))
    assert loop._step.mode.linker == inner
    # the user's graph keeps its own op, bound to nothing
    assert hs.owner.op.inner_mode is None


def test_the_plan_counts_the_step_of_a_gradient_loop():
    """The backward loop's rings and its step's peak are in the prediction:
    within 15% of what the C linker's call measures."""
    x, h0, W, hs = _rnn()
    g = tn.function([x, h0], tn.grad(hs[-1].sum(), W), mode=tn.Mode(linker="c"))
    X, H = np.full((50, 100), 0.01), np.linspace(-1, 1, 100)
    report = g.memory_report(X, H, print_report=False)
    assert report.predicted_peak == pytest.approx(report.measured_peak, rel=0.15)


def test_the_size_model_knows_every_output_of_a_loop():
    x, h0, W, hs = _rnn(3)
    loop = hs.owner
    fg = tn.function([x, h0], [hs], mode=tn.Mode(rewrites="none")).fgraph
    (node,) = [n for n in fg.toposort() if isinstance(n.op, Scan)]
    shapes = SizeModel(fg).shapes([np.zeros((5, 3)), np.zeros(3), W.get_value()])
    assert [shapes[v] for v in node.outputs] == [(5, 3), (3,)]
    assert len(loop.outputs) == 2


def test_checkpoints_keep_a_fraction_of_the_trajectory():
    """An RNN whose loss reads the last state: the stored gradient keeps all
    n states, checkpoints every 10 of 100 steps keep 10 windows and one
    segment; the forward loop then keeps no trajectory.  Both compute the
    same gradient."""
    x = tn.tensor("x", shape=(None, 8, 4))
    h0 = tn.matrix("h0")
    rng = np.random.default_rng(0)
    Wx = tn.shared(rng.normal(size=(4, 64)) * 0.3, name="Wx")
    Wh = tn.shared(rng.normal(size=(64, 64)) * 0.1, name="Wh")
    X, H = rng.normal(size=(100, 8, 4)), np.zeros((8, 64))
    peaks, results = [], []
    for every in (None, 10):
        hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh)), sequences=[x],
                        outputs_info=[h0], checkpoint_every=every)
        cost = (hs[-1] ** 2).mean()
        f = tn.function([x, h0], tn.grad(cost, [Wx, Wh]), mode=tn.Mode(linker="c"))
        peaks.append(f.memory_report(X, H, print_report=False))
        results.append(f(X, H))
        if every:
            (forward,) = _loops(f)
            assert forward.stored == (False,) and forward.checkpoint_every == 10
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-12)
    stored, checkpointed = peaks
    trajectory = 100 * 8 * 64 * 8
    assert stored.measured_peak > trajectory
    # 10 checkpoints and a segment of 11 states: 0.21 of the trajectory
    assert stored.measured_peak - checkpointed.measured_peak > 0.6 * trajectory
    assert checkpointed.predicted_peak == pytest.approx(checkpointed.measured_peak, rel=0.15)
