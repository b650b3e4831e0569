"""A loop's gradient is one node until compiling expands it (loop_gradient):
inline without a budget, over checkpoints when the function's
activation-memory budget is smaller than the trajectories."""

import pickle

import numpy as np
import pytest

import tenure as tn
from tenure.rewrites.remat import _op_recomputable
from tenure.rewrites.scan_checkpoint import Schedule, recomputed_steps, schedule_for
from tenure.symbolic.graph import io_toposort
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.join import Join
from tenure.symbolic.ops.scan import Scan
from tenure.symbolic.ops.scan_grad import CheckpointedScanGrad, LoopGradient

RNG = np.random.default_rng(0)
WX = RNG.normal(size=(4, 64)) * 0.3
WH = RNG.normal(size=(64, 64)) * 0.1
X, H = RNG.normal(size=(100, 8, 4)), RNG.normal(size=(8, 64)) * 0.1


def _ops(f, kind) -> list:
    return [node.op for node in f.fgraph.toposort() if isinstance(node.op, kind)]


def _rnn_gradient(reads_every_state=False):
    """An RNN of 100 steps (static length: the budget sees its size) and the
    gradient of its loss with respect to both weights."""
    x = tn.tensor("x", shape=(100, 8, 4))
    h0 = tn.matrix("h0")
    Wx, Wh = tn.shared(WX, name="Wx"), tn.shared(WH, name="Wh")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh)), sequences=[x],
                    outputs_info=[h0])
    cost = (hs ** 2).mean() if reads_every_state else (hs[-1] ** 2).mean()
    return [x, h0], tn.grad(cost, [Wx, Wh, h0])


def _numpy_gradient():
    """The same gradients by hand (backpropagation through time)."""
    hs, h = [], H
    for xt in X:
        h = np.tanh(xt @ WX + h @ WH)
        hs.append(h)
    g_h = 2 * hs[-1] / hs[-1].size
    g_wx, g_wh = np.zeros_like(WX), np.zeros_like(WH)
    for t in range(len(X) - 1, -1, -1):
        g_pre = g_h * (1 - hs[t] ** 2)
        previous = hs[t - 1] if t else H
        g_wx += X[t].T @ g_pre
        g_wh += previous.T @ g_pre
        g_h = g_pre @ WH.T
    return g_wx, g_wh, g_h


def test_the_choice_of_the_schedule():
    one = [(1, 100)]            # one state, one tap, 100 bytes a value
    assert schedule_for(100, one, 100 * 100) == Schedule()      # the trajectory fits
    assert schedule_for(1, one, 0) == Schedule()                # nothing to save
    # k = 4 keeps 25 checkpoints and a segment of 1 + 4: 30 values <= 30
    assert schedule_for(100, one, 30 * 100) == Schedule(4)
    assert schedule_for(100, one, 29 * 100) == Schedule(5)      # 20 + 6 = 26 values
    # Two taps: checkpoints hold two values each
    assert schedule_for(100, [(2, 100)], 60 * 100) == Schedule(4)   # 50 + 2 + 4 = 56
    # No k fits 10 values (k = 10 keeps 10 + 11): the binomial schedule.  Of
    # its (k, s) keeping ceil(100 / k) + s + 2 <= 10, four segments of 25
    # with 4 snapshots run the fewest forward steps: 100 + 4 * 47.
    assert schedule_for(100, one, 10 * 100) == Schedule(25, 4)
    assert recomputed_steps(100, Schedule(25, 4)) == 100 + 4 * 47
    assert recomputed_steps(100, Schedule(4)) == 100
    # Nothing fits 2 values: the least kept (1 checkpoint, a scratch value
    # and a step's output: 3), every step reached from the start
    assert schedule_for(100, one, 2 * 100) == Schedule(100, 0)
    assert recomputed_steps(100, Schedule(100, 0)) == 100 + 100 * 99 // 2


def test_the_gradient_is_one_node_until_compiled():
    inputs, grads = _rnn_gradient()
    nodes = [n for n in io_toposort([], grads) if isinstance(n.op, LoopGradient)]
    assert len(nodes) == 1
    f = tn.function(inputs, grads)
    assert not _ops(f, LoopGradient) and not _ops(f, CheckpointedScanGrad)
    assert "loop_gradient" in f.rewrites_applied
    forward, backward = _ops(f, Scan)
    for got, expected in zip(f(X, H), _numpy_gradient()):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    # The backward loop reads the states before each step as views of the
    # forward loop's trajectory, which starts with the initial state: no
    # joined copy of the trajectory (as the inline form builds it).
    assert forward.keeps_initial == (True,) and backward.keeps_initial == (False, False, False)
    assert not _ops(f, Join)
    inline = tn.function(inputs, grads, mode=tn.Mode(exclude=["loop_gradient"]))
    trajectory = 100 * 8 * 64 * 8
    lean = f.memory_report(X, H, print_report=False).measured_peak
    joined = inline.memory_report(X, H, print_report=False).measured_peak
    assert joined - lean > 0.8 * trajectory       # the copy, saved


@pytest.mark.parametrize("linker", ["py", "c", "dask"])
def test_the_node_runs_when_no_rewrite_expands_it(linker):
    inputs, grads = _rnn_gradient()
    f = tn.function(inputs, grads, mode=tn.Mode(linker=linker, exclude=["loop_gradient"]))
    assert len(_ops(f, LoopGradient)) == 1
    for got, expected in zip(f(X, H), _numpy_gradient()):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    if linker != "dask":    # the plan counts the inline form's run (workspace_bytes)
        report = f.memory_report(X, H, print_report=False)
        assert report.predicted_peak == pytest.approx(report.measured_peak, rel=0.15)


def test_the_unexpanded_gradient_pickles():
    inputs, grads = _rnn_gradient()
    (op,) = [n.op for n in io_toposort([], grads) if isinstance(n.op, LoopGradient)]
    x, h0, *again = pickle.loads(pickle.dumps(inputs + grads))
    (loaded,) = [n.op for n in io_toposort([], again) if isinstance(n.op, LoopGradient)]
    assert loaded == op and loaded is not op
    f = tn.function([x, h0], again, mode=tn.Mode(exclude=["loop_gradient"]))
    for got, expected in zip(f(X, H), _numpy_gradient()):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("linker", ["py", "c"])
def test_a_budget_checkpoints_the_loop(linker):
    """A budget of 0.3 of the trajectory: checkpoints every 4 of 100 steps
    (25 + 1 + 4 values of 100); the same gradient, saving most of the
    trajectory's memory."""
    inputs, grads = _rnn_gradient()
    stored = tn.function(inputs, grads, mode=tn.Mode(linker=linker))
    budgeted = tn.function(inputs, grads,
                           mode=tn.Mode(linker=linker, activation_memory_budget=0.3))
    (forward,) = _ops(budgeted, Scan)
    (backward,) = _ops(budgeted, CheckpointedScanGrad)
    assert forward.checkpoint_every == backward.every == 4
    assert forward.stored == (False,)        # the loss reads hs[-1] only
    (choice,) = budgeted.fgraph.loop_checkpoints
    assert (choice.steps, choice.every) == (100, 4)
    assert choice.kept_bytes <= choice.allowed_bytes < choice.stored_bytes
    assert "checkpoint every 4 steps" in str(budgeted.fgraph.remat_report)
    for got, expected in zip(budgeted(X, H), stored(X, H)):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    whole = stored.memory_report(X, H, print_report=False).measured_peak
    part = budgeted.memory_report(X, H, print_report=False).measured_peak
    trajectory = 100 * 8 * 64 * 8
    assert whole - part > 0.6 * trajectory


@pytest.mark.parametrize("linker", ["py", "c", "dask"])
def test_a_budget_below_every_segment_reverses_each_binomially(linker):
    """A budget of 0.1 of the trajectory (10 values of 100): no even spacing
    fits (k = 10 keeps 10 + 11), so the backward pass reverses four segments
    of 25 steps by the binomial schedule with 4 snapshots (4 + 5 + 1 values),
    running 188 forward steps more than the stored gradient's 100; the same
    gradient, in less memory than the 0.3 budget's segments."""
    inputs, grads = _rnn_gradient()
    stored = tn.function(inputs, grads, mode=tn.Mode(linker=linker))
    budgeted = tn.function(inputs, grads,
                           mode=tn.Mode(linker=linker, activation_memory_budget=0.1))
    (backward,) = _ops(budgeted, CheckpointedScanGrad)
    assert (backward.every, backward.snapshots) == (25, 4)
    (choice,) = budgeted.fgraph.loop_checkpoints
    assert (choice.every, choice.snapshots, choice.recomputed) == (25, 4, 288)
    assert choice.kept_bytes <= choice.allowed_bytes
    assert "4 snapshot(s) (binomial schedule)" in str(budgeted.fgraph.remat_report)
    for got, expected in zip(budgeted(X, H), stored(X, H)):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    if linker == "dask":
        return
    segments = tn.function(inputs, grads,
                           mode=tn.Mode(linker=linker, activation_memory_budget=0.3))
    state = 8 * 64 * 8
    tight = budgeted.memory_report(X, H, print_report=False)
    loose = segments.memory_report(X, H, print_report=False)
    assert loose.measured_peak - tight.measured_peak > 15 * state     # 30 values against 10
    assert tight.measured_peak <= tight.predicted_peak * 1.05    # the plan counts them


@pytest.mark.parametrize("linker", ["py", "c"])
def test_the_binomial_schedule_with_two_taps_a_sequences_gradient_and_truncation(linker):
    """A state of two taps (its snapshots hold two values, in rings whose
    rows turn as they advance: a segment starting at an odd step starts
    them half a turn round), the gradient of a sequence and of the initial
    values, the backward pass truncated: as without a budget.  Budgets of
    0.25 and 0.1 of the 45 values: segments of 23 with 2 snapshots, and one
    of 45 with none (every step reached from the checkpoint)."""
    x = tn.tensor("x", shape=(45, 8, 4))
    h0 = tn.tensor("h0", shape=(2, 8, 64))
    Wx, Wh = tn.shared(WX, name="Wx"), tn.shared(WH, name="Wh")
    xv, hv = RNG.normal(size=(45, 8, 4)), RNG.normal(size=(2, 8, 64)) * 0.1

    def step(xt, h2, h1):
        return tn.tanh(tn.dot(xt, Wx) + tn.dot(h1, Wh) + 0.5 * h2)
    for truncate, budget, schedule in [(-1, 0.25, (23, 2)), (37, 0.25, (23, 2)),
                                       (-1, 0.1, (45, 0))]:
        hs, _ = tn.scan(step, sequences=[x], outputs_info=[dict(initial=h0, taps=[-2, -1])],
                        truncate_gradient=truncate)
        grads = tn.grad((hs[-1] ** 2).mean(), [Wx, Wh, x, h0])
        stored = tn.function([x, h0], grads, mode=tn.Mode(linker=linker))
        budgeted = tn.function([x, h0], grads,
                               mode=tn.Mode(linker=linker, activation_memory_budget=budget))
        (backward,) = _ops(budgeted, CheckpointedScanGrad)
        assert (backward.every, backward.snapshots) == schedule
        for got, expected in zip(budgeted(xv, hv), stored(xv, hv)):
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-14)


def test_the_checkpointed_gradients_sums_start_at_zeros_of_its_own():
    """The weights' gradient sums start at zeros the node allocates: no
    zeros input alive beside its copy (one buffer per weight, not two)."""
    inputs, grads = _rnn_gradient()
    f = tn.function(inputs, grads, mode=tn.Mode(linker="c", activation_memory_budget=0.3))
    (node,) = [n for n in f.fgraph.toposort() if isinstance(n.op, CheckpointedScanGrad)]
    weight_shapes = {WX.shape, WH.shape}
    assert not any(v.owner is not None and isinstance(v.owner.op, Alloc)
                   and v.type.shape in weight_shapes for v in node.inputs)
    report = f.memory_report(X, H, print_report=False)
    assert report.measured_peak <= report.predicted_peak * 1.05     # the plan counts them
    for got, expected in zip(f(X, H), _numpy_gradient()):
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_a_budget_the_trajectories_fit_changes_nothing():
    inputs, grads = _rnn_gradient()
    f = tn.function(inputs, grads, mode=tn.Mode(activation_memory_budget=1.0))
    assert not _ops(f, CheckpointedScanGrad)
    (choice,) = f.fgraph.loop_checkpoints
    assert choice.every == 0
    assert "trajectories stored" in str(f.fgraph.remat_report)


def test_a_budget_in_bytes_is_shared_by_the_loops():
    """Two loops storing 100 and 50 states of 8 x 64 float64 (4,096 bytes):
    a budget of 30% of their total gives each 30% of its own."""
    x = tn.tensor("x", shape=(100, 8, 4))
    h0 = tn.matrix("h0", shape=(8, 64))
    Wx, Wh = tn.shared(WX, name="Wx"), tn.shared(WH, name="Wh")

    def step(xt, h):
        return tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh))
    long, _ = tn.scan(step, sequences=[x], outputs_info=[h0])
    short, _ = tn.scan(step, sequences=[x[:50]], outputs_info=[h0])
    cost = (long[-1] ** 2).mean() + (short[-1] ** 2).mean()
    grads = tn.grad(cost, [Wx, Wh])
    total = 150 * 8 * 64 * 8
    f = tn.function([x, h0], grads, mode=tn.Mode(activation_memory_budget=int(0.3 * total)))
    choices = {c.steps: c for c in f.fgraph.loop_checkpoints}
    assert choices[100].every == 4 and choices[50].every > 1
    assert choices[100].allowed_bytes == pytest.approx(0.3 * 100 * 4096, abs=1)
    reference = tn.function([x, h0], grads)
    for got, expected in zip(f(X, H), reference(X, H)):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_a_users_checkpoints_and_until_loops_stay_as_built():
    x = tn.tensor("x", shape=(100, 8, 4))
    h0 = tn.matrix("h0")
    Wx, Wh = tn.shared(WX, name="Wx"), tn.shared(WH, name="Wh")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh)), sequences=[x],
                    outputs_info=[h0], checkpoint_every=20)
    f = tn.function([x, h0], tn.grad((hs[-1] ** 2).mean(), Wh),
                    mode=tn.Mode(activation_memory_budget=0.1))
    (forward,) = _ops(f, Scan)
    assert forward.checkpoint_every == 20

    a = tn.scalar("a")
    xs, _ = tn.scan(lambda v: (v * a, tn.until(v > 1e6)), outputs_info=[tn.constant(1.0)],
                    n_steps=50)
    g = tn.function([a], tn.grad(xs.sum(), a), mode=tn.Mode(activation_memory_budget=0.1))
    assert not _ops(g, CheckpointedScanGrad)
    assert g(1.5) == tn.function([a], tn.grad(xs.sum(), a))(1.5)


def test_a_budget_in_bytes_needs_the_loops_length():
    inputs, grads = _rnn_gradient()          # h0's shape is not static
    with pytest.raises(ValueError, match="h0"):
        tn.function(inputs, grads, mode=tn.Mode(activation_memory_budget=10_000))


def test_a_second_order_gradient_goes_through_the_node():
    """d/dw of (d/dw of a loop's loss): LoopGradient's own gradient."""
    w, xs, h0 = tn.scalar("w"), tn.vector("xs"), tn.scalar("h0")
    hs, _ = tn.scan(lambda xt, h, w: tn.tanh(h * w + xt), sequences=xs, outputs_info=h0,
                    non_sequences=w)
    g = tn.grad(tn.sum(hs ** 2), w)
    gg = tn.function([w, xs, h0], tn.grad(g, w), mode=tn.Mode(exclude=["loop_gradient"]))
    f_g = tn.function([w, xs, h0], g)
    xv, step = np.array([0.3, -0.2, 0.5]), 1e-6
    numeric = (f_g(0.8 + step, xv, 0.4) - f_g(0.8 - step, xv, 0.4)) / (2 * step)
    assert gg(0.8, xv, 0.4) == pytest.approx(numeric, rel=1e-6)


def test_the_budget_never_runs_a_loop_twice():
    """A loss on every state keeps the trajectory alive into the backward
    pass: a saved activation, which remat leaves to the loop (a loop costs
    its step times its length, which remat's cost model does not see) rather
    than recompute the whole forward loop.  The loop keeps its trajectory:
    the loss's own backward pass reads it, so checkpoints would save nothing."""
    xs = tn.tensor("xs", shape=(None, 64, 32), dtype="float32")
    h0 = tn.matrix("h0", dtype="float32")
    Wx = tn.shared(np.zeros((32, 256), "float32"), name="Wx")
    Wh = tn.shared(np.zeros((256, 256), "float32"), name="Wh")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh)), sequences=[xs],
                    outputs_info=[h0])
    cost = (hs ** 2).mean()
    f = tn.function([xs, h0], tn.grad(cost, [Wx, Wh]),
                    mode=tn.Mode(activation_memory_budget=0.3))
    assert len(_ops(f, Scan)) == 2 and not _ops(f, CheckpointedScanGrad)
    (choice,) = f.fgraph.loop_checkpoints
    assert choice.every == 0 and "read whole by more than its gradient" in str(choice)
    assert not [c for c in f.fgraph.remat_report.candidates if not c.kept]
    # what remat says of any op running inner graphs (a loop, its gradient)
    loop = hs.owner.op
    gradient = [n.op for n in io_toposort([], tn.grad(cost, [Wx]))
                if isinstance(n.op, LoopGradient)][0]
    for op in (loop, gradient):
        assert "runs inner graphs" in _op_recomputable(op)
    assert _op_recomputable(tn.exp(xs).owner.op) == ""


def test_rings_are_made_before_the_budget_is_applied():
    """A state no one reads whole becomes a ring before remat looks for
    saved activations: remat never counts a trajectory that will not exist."""
    from tenure.rewrites.engine import registered_rewrites
    memory = [r.name for r in registered_rewrites().values() if r.phase == "memory"]
    assert memory.index("scan_save_memory") < memory.index("remat")


def test_a_loop_that_keeps_its_initial_entries():
    """What compiling rewrites a loop into (for its gradient): the trajectory
    starts with the L initial entries.  Only compiling builds it, so it has
    no gradient of its own; a until loop cannot keep them."""
    x0, a = tn.vector("x0"), tn.scalar("a")
    xs, _ = tn.scan(lambda x2, x1: x1 + a * x2, outputs_info=[dict(initial=x0, taps=[-2, -1])],
                    n_steps=4)
    loop = xs.owner
    kept = loop.op.replaced(keeps_initial=(True,)).make_node(*loop.inputs)
    f = tn.function([x0, a], [xs, kept.outputs[0], kept.outputs[1]])
    trajectory, history, final = f(np.array([1.0, 2.0]), 0.5)
    np.testing.assert_array_equal(history, np.concatenate([[1.0, 2.0], trajectory]))
    assert final == trajectory[-1]
    assert f(np.array([1.0, 2.0]), 0.5)[1].shape == (6,)
    with pytest.raises(NotImplementedError, match="keep its initial entries"):
        tn.grad(kept.outputs[0].sum(), a)
    until = tn.scan(lambda v: (v * a, tn.until(v > 10)), outputs_info=[tn.constant(1.0)],
                    n_steps=5)[0].owner.op
    with pytest.raises(ValueError, match="keeps_initial"):
        until.replaced(keeps_initial=(True,))


def test_two_threads_running_one_loop_at_once_get_its_results():
    """Dask's workers may compute one loop twice, at once: the op runs its
    compiled step, which lends its results in buffers it reuses, so the two
    runs must not interleave (a run copied the other's step results: wrong
    weight gradients about one call in 15 of Dask's, before)."""
    import threading
    x, h0 = tn.tensor("x", shape=(100, 8, 4)), tn.matrix("h0")
    Wx, Wh = tn.shared(WX, name="Wx"), tn.shared(WH, name="Wh")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(tn.dot(xt, Wx) + tn.dot(h, Wh)), sequences=[x],
                    outputs_info=[h0])
    node = hs.owner
    values = tn.function([x, h0], list(node.inputs), on_unused_input="ignore")(X, H)
    node.op.inner_mode = tn.Mode(linker="c")
    expected = [np.array(v) for v in _run(node, values)]
    results, errors = [], []

    def worker():
        try:
            for _ in range(30):
                results.append(_run(node, values))
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(results) == 120
    for got in results:
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)


def _run(node, values) -> list:
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, list(values), storage)
    return [cell[0] for cell in storage]
