"""``tn.scan`` (tenure/loops.py), the Scan op (tenure/symbolic/ops/scan.py) and
its gradient (tenure/symbolic/ops/scan_grad.py), on every linker the op suite
runs on (the ``mode`` fixture), against plain NumPy loops: states, nit-sot
outputs, taps, go_backwards, n_steps, until, shared updates and random
streams inside the loop, gradients checked by central differences, errors
that name the loop argument, pickling and the merge of identical loops."""

import pickle

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.graph import ancestors, io_toposort
from tenure.random import RandomStream
from tenure.symbolic.ops.random import initial_state, standard_normal
from tenure.symbolic.inner_graph import OpWithInnerGraphs
from tenure.symbolic.ops.scan import Scan
from tenure.symbolic.ops.scan_grad import CheckpointedScanGrad

EPS = 1e-6


def numeric_grads(cost_of, values):
    """Central differences (float64) of ``cost_of(*values)`` for each value."""
    values = [np.array(v, dtype="float64") for v in values]
    grads = []
    for i, v in enumerate(values):
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            plus = [w.copy() for w in values]
            minus = [w.copy() for w in values]
            plus[i][idx] += EPS
            minus[i][idx] -= EPS
            g[idx] = (float(cost_of(*plus)) - float(cost_of(*minus))) / (2 * EPS)
        grads.append(g)
    return grads


def check_grads(inputs, cost, values, mode, wrt=None):
    """``tn.grad(cost, wrt)`` (default: ``inputs``) compiled with ``mode``
    equals central differences of ``cost`` (``wrt`` must be among ``inputs``)."""
    wrt = list(inputs) if wrt is None else list(wrt)
    f = tn.function(inputs, cost, mode=mode)
    g = tn.function(inputs, tn.grad(cost, wrt), mode=mode)
    got = g(*values)
    positions = [inputs.index(v) for v in wrt]

    for k, pos in enumerate(positions):
        def cost_of(v, pos=pos):
            args = list(values)
            args[pos] = v
            return f(*args)

        (expected,) = numeric_grads(cost_of, [values[pos]])
        np.testing.assert_allclose(got[k], expected, rtol=1e-5, atol=1e-7,
                                   err_msg=f"gradient with respect to {wrt[k]}")
    return got


def rnn_numpy(W, xs, h0):
    hs, h = [], h0
    for x in xs:
        h = np.tanh(h @ W + x)
        hs.append(h)
    return np.array(hs)


# -- states and nit-sot outputs --------------------------------------------------------


def test_cumulative_sum(mode, rng):
    x = tn.vector("x")
    ys, updates = tn.scan(lambda xt, acc: acc + xt, sequences=x, outputs_info=tn.zeros(()))
    assert updates == {} or len(updates) == 0
    f = tn.function([x], ys, mode=mode, updates=updates)
    for n in (5, 1, 9):
        value = rng.normal(size=n)
        np.testing.assert_allclose(f(value), np.cumsum(value), rtol=1e-12)


def test_rnn_with_a_shared_weight_read_inside(mode, rng):
    Wv = rng.normal(size=(3, 3)) * 0.5
    W = tn.shared(Wv, name="W")
    xs, h0 = tn.matrix("xs"), tn.vector("h0")
    hs, updates = tn.scan(lambda x, h: tn.tanh(tn.dot(h, W) + x), sequences=xs,
                          outputs_info=h0)
    f = tn.function([xs, h0], hs, mode=mode, updates=updates)
    xv, h0v = rng.normal(size=(6, 3)), rng.normal(size=3)
    np.testing.assert_allclose(f(xv, h0v), rnn_numpy(Wv, xv, h0v), rtol=1e-12)
    # the loop reads the shared variable's current value
    W.set_value(Wv * 2)
    np.testing.assert_allclose(f(xv, h0v), rnn_numpy(Wv * 2, xv, h0v), rtol=1e-12)


def test_rnn_with_the_weight_as_a_non_sequence(mode, rng):
    W, xs, h0 = tn.matrix("W"), tn.matrix("xs"), tn.vector("h0")
    hs, _ = tn.scan(lambda x, h, w: tn.tanh(tn.dot(h, w) + x), sequences=xs,
                    outputs_info=h0, non_sequences=W)
    sharedW = tn.shared(rng.normal(size=(3, 3)), name="sharedW")
    hs_strict, _ = tn.scan(lambda x, h, w: tn.tanh(tn.dot(h, w) + x), sequences=xs,
                           outputs_info=h0, non_sequences=[sharedW], strict=True)
    f = tn.function([W, xs, h0], [hs, hs_strict], mode=mode)
    Wv, xv, h0v = rng.normal(size=(3, 3)), rng.normal(size=(4, 3)), rng.normal(size=3)
    got, got_strict = f(Wv, xv, h0v)
    np.testing.assert_allclose(got, rnn_numpy(Wv, xv, h0v), rtol=1e-12)
    np.testing.assert_allclose(got_strict, rnn_numpy(sharedW.get_value(), xv, h0v), rtol=1e-12)


def test_strict_requires_what_fn_reads_listed():
    W = tn.shared(np.eye(2), name="W_unlisted")
    with pytest.raises(ValueError, match="W_unlisted"):
        tn.scan(lambda x, h: tn.dot(h, W) + x, sequences=tn.matrix("xs"),
                outputs_info=tn.vector("h0"), strict=True)


def test_nit_sot_outputs(mode, rng):
    x, c = tn.matrix("x"), tn.scalar("c")
    ys, _ = tn.scan(lambda row, c: tn.sum(row ** 2) * c, sequences=x, non_sequences=c)
    f = tn.function([x, c], ys, mode=mode)
    xv = rng.normal(size=(5, 4))
    np.testing.assert_allclose(f(xv, 3.0), (xv ** 2).sum(1) * 3.0, rtol=1e-12)
    # outputs_info=[None] is the same
    ys2, _ = tn.scan(lambda row: row * 2, sequences=x, outputs_info=[None])
    np.testing.assert_allclose(tn.function([x], ys2, mode=mode)(xv), xv * 2, rtol=1e-12)


def test_several_outputs_state_and_nit_sot(mode, rng):
    x, h0 = tn.vector("x"), tn.scalar("h0")

    def step(xt, h):
        new = 0.5 * h + xt
        return [xt * h, new, new ** 2]

    (prods, hs, squares), _ = tn.scan(step, sequences=x, outputs_info=[None, h0, None])
    f = tn.function([x, h0], [prods, hs, squares], mode=mode)
    xv = rng.normal(size=6)
    h, e_prods, e_hs = 1.5, [], []
    for xt in xv:
        e_prods.append(xt * h)
        h = 0.5 * h + xt
        e_hs.append(h)
    got = f(xv, 1.5)
    np.testing.assert_allclose(got[0], e_prods, rtol=1e-12)
    np.testing.assert_allclose(got[1], e_hs, rtol=1e-12)
    np.testing.assert_allclose(got[2], np.square(e_hs), rtol=1e-12)


def test_return_list(mode, rng):
    x = tn.vector("x")
    ys, _ = tn.scan(lambda xt: xt * 3, sequences=x, return_list=True)
    assert isinstance(ys, list) and len(ys) == 1
    xv = rng.normal(size=4)
    (got,) = tn.function([x], ys, mode=mode)(xv)
    np.testing.assert_allclose(got, xv * 3, rtol=1e-12)
    single, _ = tn.scan(lambda xt: xt * 3, sequences=x)
    assert not isinstance(single, list)


# -- taps and go_backwards --------------------------------------------------------------


def test_sequence_taps(mode, rng):
    x = tn.vector("x")
    ys, _ = tn.scan(lambda a, b, c: a + 10 * b + 100 * c,
                    sequences=dict(input=x, taps=[-1, 0, 1]))
    f = tn.function([x], ys, mode=mode)
    xv = rng.normal(size=7)
    expected = [xv[t - 1] + 10 * xv[t] + 100 * xv[t + 1] for t in range(1, 6)]
    np.testing.assert_allclose(f(xv), expected, rtol=1e-12)


def test_state_taps_fibonacci(mode):
    x0 = tn.vector("x0", dtype="int64")
    fib, _ = tn.scan(lambda older, old: older + old,
                     outputs_info=dict(initial=x0, taps=[-2, -1]), n_steps=10)
    f = tn.function([x0], fib, mode=mode)
    expected, a, b = [], 0, 1
    for _ in range(10):
        a, b = b, a + b
        expected.append(b)
    got = f(np.array([0, 1]))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    # tap -2 reads entry 0 (the oldest), tap -1 entry 1
    y0 = tn.vector("y0")
    diff, _ = tn.scan(lambda older, old: old - older,
                      outputs_info=dict(initial=y0, taps=[-2, -1]), n_steps=3)
    g = tn.function([y0], diff, mode=mode)
    np.testing.assert_allclose(g(np.array([2.0, 7.0])), [5.0, -2.0, -7.0])


def test_go_backwards(mode, rng):
    x, h0 = tn.vector("x"), tn.scalar("h0")
    hs, _ = tn.scan(lambda xt, h: 0.5 * h + xt, sequences=x, outputs_info=h0,
                    go_backwards=True)
    f = tn.function([x, h0], hs, mode=mode)
    xv = rng.normal(size=5)
    h, expected = 2.0, []
    for xt in xv[::-1]:
        h = 0.5 * h + xt
        expected.append(h)
    np.testing.assert_allclose(f(xv, 2.0), expected, rtol=1e-12)


# -- n_steps ---------------------------------------------------------------------------


def test_n_steps_shorter_than_the_sequences(mode, rng):
    x = tn.vector("x")
    ys, _ = tn.scan(lambda xt, acc: acc + xt, sequences=x, outputs_info=tn.zeros(()),
                    n_steps=3)
    xv = rng.normal(size=7)
    np.testing.assert_allclose(tn.function([x], ys, mode=mode)(xv), np.cumsum(xv[:3]),
                               rtol=1e-12)


def test_symbolic_n_steps(mode, rng):
    n, a = tn.scalar("n", dtype="int64"), tn.scalar("a")
    powers, _ = tn.scan(lambda p, a: p * a, outputs_info=tn.ones(()), non_sequences=a,
                        n_steps=n)
    f = tn.function([n, a], powers, mode=mode)
    np.testing.assert_allclose(f(4, 2.0), [2.0, 4.0, 8.0, 16.0])
    np.testing.assert_allclose(f(2, 3.0), [3.0, 9.0])
    x = tn.vector("x")
    ys, _ = tn.scan(lambda xt: xt + 1, sequences=x, n_steps=n)
    xv = rng.normal(size=6)
    np.testing.assert_allclose(tn.function([x, n], ys, mode=mode)(xv, 4), xv[:4] + 1)


def test_zero_steps(mode):
    n, h0 = tn.scalar("n", dtype="int64"), tn.vector("h0")
    s = tn.shared(np.array([1.0, 2.0]), name="s_zero")

    def step(h):
        return h * 2 + 1, {s: s + h}

    hs, updates = tn.scan(step, outputs_info=h0, n_steps=n)
    ys, _ = tn.scan(lambda h: h * 2, non_sequences=h0, n_steps=n)
    f = tn.function([n, h0], [hs, ys], mode=mode, updates=updates)
    got_hs, got_ys = f(0, np.array([5.0, 6.0]))
    assert got_hs.shape == (0, 2)
    assert got_ys.shape[0] == 0
    np.testing.assert_array_equal(s.get_value(), [1.0, 2.0])
    got_hs, _ = f(2, np.array([5.0, 6.0]))
    np.testing.assert_allclose(got_hs, [[11.0, 13.0], [23.0, 27.0]])
    np.testing.assert_allclose(s.get_value(), [1.0 + 5.0 + 11.0, 2.0 + 6.0 + 13.0])


def test_zero_steps_int_n_steps(mode):
    s = tn.shared(np.float64(3.0), name="s_int_zero")
    x = tn.vector("x")
    _, updates = tn.scan(lambda xt: (xt * 0, {s: s + xt}), sequences=x, n_steps=0)
    f = tn.function([x], [], mode=mode, updates=updates)
    f(np.array([1.0, 2.0]))
    assert float(s.get_value()) == 3.0


# -- until -------------------------------------------------------------------------------


def test_until_stops_after_the_step_whose_condition_is_true(mode):
    y0, limit = tn.scalar("y0"), tn.scalar("limit")
    ys, _ = tn.scan(lambda y, lim: (y * 2, tn.until(y * 2 > lim)), outputs_info=y0,
                    non_sequences=limit, n_steps=100)
    f = tn.function([y0, limit], ys, mode=mode)
    np.testing.assert_allclose(f(1.0, 10.0), [2.0, 4.0, 8.0, 16.0])
    np.testing.assert_allclose(f(1.0, 0.5), [2.0])
    np.testing.assert_allclose(f(3.0, 1000.0), 3.0 * 2.0 ** np.arange(1, 10))
    # the condition never true: n_steps steps
    np.testing.assert_allclose(f(1.0, 1e40)[-1], 2.0 ** 100)
    assert len(f(1.0, 1e40)) == 100


def test_until_with_a_sequence_and_a_nit_sot(mode, rng):
    x = tn.vector("x")

    def step(xt, acc):
        new = acc + xt
        return [new, new * 10], tn.until(new > 3)

    (acc, tens), _ = tn.scan(step, sequences=x, outputs_info=[tn.zeros(()), None])
    f = tn.function([x], [acc, tens], mode=mode)
    xv = np.array([1.0, 1.0, 0.5, 1.0, 2.0, 5.0, 1.0])
    expected = np.cumsum(xv)
    stop = int(np.argmax(expected > 3)) + 1
    got_acc, got_tens = f(xv)
    np.testing.assert_allclose(got_acc, expected[:stop])
    np.testing.assert_allclose(got_tens, expected[:stop] * 10)


# -- shared updates and random streams ------------------------------------------------------


def test_shared_updates_returned_by_fn(mode, rng):
    total = tn.shared(np.zeros(3), name="total")
    count = tn.shared(np.int64(0), name="count")
    x = tn.matrix("x")

    def step(row):
        return row.sum(), {total: total + row, count: count + 1}

    sums, updates = tn.scan(step, sequences=x)
    assert set(updates) == {total, count}
    f = tn.function([x], sums, mode=mode, updates=updates)
    xv = rng.normal(size=(4, 3))
    np.testing.assert_allclose(f(xv), xv.sum(1), rtol=1e-12)
    np.testing.assert_allclose(total.get_value(), xv.sum(0), rtol=1e-12)
    assert int(count.get_value()) == 4
    x2 = rng.normal(size=(2, 3))
    f(x2)
    np.testing.assert_allclose(total.get_value(), xv.sum(0) + x2.sum(0), rtol=1e-12)
    assert int(count.get_value()) == 6


def test_shared_update_read_by_the_state_in_the_same_step(mode):
    s = tn.shared(np.float64(1.0), name="s_read")

    def step(h):
        # reads s's value before this step's update
        return h + s, {s: s * 2}

    hs, updates = tn.scan(step, outputs_info=tn.zeros(()), n_steps=4)
    f = tn.function([], hs, mode=mode, updates=updates)
    np.testing.assert_allclose(f(), [1.0, 3.0, 7.0, 15.0])
    assert float(s.get_value()) == 16.0


def _random_walk(seed, n_steps=None):
    srng = RandomStream(seed)
    n = tn.scalar("n", dtype="int64") if n_steps is None else n_steps
    hs, updates = tn.scan(lambda h: h + srng.normal(size=(3,)), outputs_info=tn.zeros(3),
                          n_steps=n)
    return srng, n, hs, updates


def test_random_draws_inside_the_loop(mode):
    srng, n, hs, updates = _random_walk(42)
    assert len(updates) == 1
    f = tn.function([n], hs, mode=mode, updates=updates)
    first = f(5)
    steps = np.diff(np.concatenate([np.zeros((1, 3)), first]), axis=0)
    # the draws differ per step
    assert len({tuple(row) for row in steps}) == 5
    # two calls differ
    second = f(5)
    assert not np.allclose(first, second)
    # the same seed gives the same numbers: a fresh stream, a second function
    _, n2, hs2, updates2 = _random_walk(42)
    g = tn.function([n2], hs2, mode=mode, updates=updates2)
    np.testing.assert_array_equal(g(5), first)
    np.testing.assert_array_equal(g(5), second)
    # which are the reference's Philox numbers, one draw per step
    expected = np.cumsum([philox_normal(42, t, 3) for t in range(5)], axis=0)
    np.testing.assert_allclose(first, expected, rtol=1e-12)
    # a different seed differs
    _, n3, hs3, updates3 = _random_walk(43)
    assert not np.allclose(tn.function([n3], hs3, mode=mode, updates=updates3)(5), first)


def test_a_stream_drawn_in_the_loop_advances_without_the_updates(mode):
    """Not passing the loop's updates still advances the stream by the steps
    run (its default update is the loop's final state), so a second call
    draws new numbers rather than the first call's shifted by one."""
    srng, n, hs, updates = _random_walk(7)
    (state,) = updates
    f = tn.function([n], hs, mode=mode)
    first = f(4)
    assert state.get_value()[2] == 4
    second = f(4)
    assert state.get_value()[2] == 8
    np.testing.assert_allclose(np.diff(second, axis=0, prepend=0),
                               [philox_normal(7, t, 3) for t in range(4, 8)], rtol=1e-12)
    first_steps = np.diff(first, axis=0, prepend=0)
    assert not np.isin(first_steps, np.diff(second, axis=0, prepend=0)).any()


def test_the_streams_updates_are_the_loops(mode):
    """``srng.updates()`` (what a function given no default updates needs)
    pairs a stream drawn in the loop with the loop's final state, as scan's
    own updates do: the stream advances by the steps run, never by one
    draw made outside the loop."""
    srng, n, hs, updates = _random_walk(7)
    (state,) = updates
    assert srng.updates() == [(state, updates[state])]
    f = tn.function([n], hs, mode=mode, updates=srng.updates(), no_default_updates=True)
    first = f(3)
    assert state.get_value()[2] == 3
    np.testing.assert_allclose(f(2), np.cumsum([philox_normal(7, t, 3) for t in (3, 4)], 0),
                               rtol=1e-12)
    np.testing.assert_allclose(first, np.cumsum([philox_normal(7, t, 3) for t in range(3)], 0),
                               rtol=1e-12)


def test_random_stream_state_advances_once_per_step(mode):
    srng, n, hs, updates = _random_walk(7)
    (state,) = updates
    f = tn.function([n], hs, mode=mode, updates=updates)
    before = np.array(state.get_value())
    assert before[2] == 0
    first = f(3)
    assert state.get_value()[2] == 3
    np.testing.assert_array_equal(state.get_value()[:2], before[:2])
    # the next call goes on from draw 3
    second = f(2)
    assert state.get_value()[2] == 5
    np.testing.assert_allclose(first, np.cumsum([philox_normal(7, t, 3) for t in range(3)], 0),
                               rtol=1e-12)
    np.testing.assert_allclose(second, np.cumsum([philox_normal(7, t, 3) for t in (3, 4)], 0),
                               rtol=1e-12)


def philox_normal(seed, draw, size):
    """The reference's standard normals at stream 0 of ``seed`` after ``draw``
    draws (tests/symbolic/ops/test_random.py checks the reference itself)."""
    state = initial_state(seed, 0)
    state[2] = draw
    return standard_normal(state, 0, size)


# -- gradients ------------------------------------------------------------------------------


def rnn_inputs():
    """W, xs, h0 with no static lengths: the gradient's loops have nit-sot
    outputs whose shapes the compile-time size model must infer without
    running the loops (it once ran them on 1024-long placeholders)."""
    return tn.matrix("W"), tn.matrix("xs"), tn.vector("h0")


def test_rnn_gradient(mode, rng):
    W, xs, h0 = rnn_inputs()
    hs, _ = tn.scan(lambda x, h, w: tn.tanh(tn.dot(h, w) + x), sequences=xs,
                    outputs_info=h0, non_sequences=W)
    weights = tn.constant(rng.normal(size=(5, 3)))
    cost = tn.sum(hs * weights)
    values = [rng.normal(size=(3, 3)) * 0.7, rng.normal(size=(5, 3)), rng.normal(size=3)]
    check_grads([W, xs, h0], cost, values, mode)


@pytest.mark.parametrize("checkpoint_every", [None, 2])
def test_a_backward_step_reads_the_forward_values_instead_of_recomputing_them(
        rng, checkpoint_every):
    """tanh's gradient reads tanh's value: the backward step takes it from the
    stored trajectory (or the recomputed segment), so it runs neither the
    tanh nor the product under it again."""
    W, xs, h0 = rnn_inputs()
    hs, _ = tn.scan(lambda x, h, w: tn.tanh(tn.dot(h, w) + x), sequences=xs,
                    outputs_info=h0, non_sequences=W, checkpoint_every=checkpoint_every)
    cost = tn.sum(hs * tn.constant(rng.normal(size=(5, 3))))
    f = tn.function([W, xs, h0], tn.grad(cost, [W, xs, h0]), mode=tn.Mode(linker="py"))
    loops = [node.op for node in f.fgraph.toposort() if isinstance(node.op, OpWithInnerGraphs)]
    backward = loops[-1].inner_graphs[-1] if checkpoint_every else loops[-1].inner
    assert not [node for node in backward.toposort() if "tanh" in str(node.op)]
    values = [rng.normal(size=(3, 3)) * 0.7, rng.normal(size=(5, 3)), rng.normal(size=3)]
    check_grads([W, xs, h0], cost, values, tn.Mode(linker="py"))


def test_rnn_gradient_with_respect_to_a_shared_weight(mode, rng):
    Wv = rng.normal(size=(2, 2)) * 0.7
    W = tn.shared(Wv, name="W_grad")
    xs, h0 = tn.matrix("xs"), tn.vector("h0")
    hs, _ = tn.scan(lambda x, h: tn.tanh(tn.dot(h, W) + x), sequences=xs, outputs_info=h0)
    cost = tn.sum(hs[-1] ** 2) + tn.sum(hs)
    xv, h0v = rng.normal(size=(4, 2)), rng.normal(size=2)
    got = tn.function([xs, h0], tn.grad(cost, W), mode=mode)(xv, h0v)
    f = tn.function([xs, h0], cost, mode=mode)

    def cost_of(w):
        W.set_value(w)
        return f(xv, h0v)

    (expected,) = numeric_grads(cost_of, [Wv])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_mit_sot_gradient(mode, rng):
    x0, a, xs = tn.vector("x0"), tn.scalar("a"), tn.vector("xs")
    ys, _ = tn.scan(lambda xt, older, old, a: tn.sin(older) * a + old * xt,
                    sequences=xs, outputs_info=dict(initial=x0, taps=[-2, -1]),
                    non_sequences=a)
    cost = tn.sum(ys * tn.constant(rng.normal(size=5)))
    check_grads([x0, a, xs], cost, [rng.normal(size=2), np.float64(0.8), rng.normal(size=5)],
                mode)


def test_mit_sot_gradient_with_a_gap_in_the_taps(mode, rng):
    x0, a = tn.vector("x0"), tn.scalar("a")
    ys, _ = tn.scan(lambda older, old: tn.tanh(older * a + old * 0.5),
                    outputs_info=dict(initial=x0, taps=[-3, -1]), n_steps=6)
    cost = tn.sum(ys ** 2)
    check_grads([x0, a], cost, [rng.normal(size=3), np.float64(1.3)], mode)


def test_nit_sot_gradient(mode, rng):
    xs, c, h0 = tn.matrix("xs"), tn.vector("c"), tn.scalar("h0")

    def step(row, h, c):
        return [h * 0.9 + tn.sum(row * c), tn.exp(row * c * h)]

    (hs, zs), _ = tn.scan(step, sequences=xs, outputs_info=[h0, None], non_sequences=c)
    # only the nit-sot enters the cost
    cost = tn.sum(zs * tn.constant(rng.normal(size=(4, 3))))
    values = [rng.normal(size=(4, 3)) * 0.5, rng.normal(size=3) * 0.5, np.float64(0.3)]
    check_grads([xs, c, h0], cost, values, mode)


def test_go_backwards_gradient(mode, rng):
    xs, h0, w = tn.vector("xs"), tn.scalar("h0"), tn.scalar("w")
    hs, _ = tn.scan(lambda xt, h, w: tn.tanh(h * w + xt), sequences=xs, outputs_info=h0,
                    non_sequences=w, go_backwards=True)
    cost = tn.sum(hs * tn.constant(rng.normal(size=5)))
    check_grads([xs, h0, w], cost, [rng.normal(size=5), np.float64(0.2), np.float64(0.9)],
                mode)


def test_sequence_taps_gradient(mode, rng):
    xs, w = tn.vector("xs"), tn.scalar("w")
    ys, _ = tn.scan(lambda a, b, c, w: tn.sin(a * w) * b + c ** 2,
                    sequences=dict(input=xs, taps=[-1, 0, 2]), non_sequences=w)
    cost = tn.sum(ys * tn.constant(rng.normal(size=4)))
    check_grads([xs, w], cost, [rng.normal(size=7), np.float64(1.1)], mode)


def test_gradient_of_a_shared_updates_final_value(mode, rng):
    s = tn.shared(rng.normal(size=2), name="s_final")
    a, xs = tn.scalar("a"), tn.matrix("xs")

    def step(xt, a):
        return tn.sum(s), {s: tn.tanh(s * a + xt)}

    _, updates = tn.scan(step, sequences=xs, non_sequences=a)
    final = updates[s]
    cost = tn.sum(final ** 2 * tn.constant([1.0, -2.0]))
    values = [np.float64(0.7), rng.normal(size=(4, 2))]
    # no update applied: each call starts from s's value
    got = check_grads([a, xs], cost, values, mode)
    assert got[0].shape == ()
    # the final value itself
    sv, expected = s.get_value(), None
    for row in values[1]:
        sv = np.tanh(sv * 0.7 + row)
    expected = sv
    np.testing.assert_allclose(tn.function([a, xs], final, mode=mode)(*values), expected,
                               rtol=1e-12)


def rnn_backprop_numpy(W, xs, h0, g_hs, k=None):
    """dL/dW, dL/dxs, dL/dh0 of an RNN (``rnn_numpy``) for ``L = sum(hs * g_hs)``,
    back through the last ``k`` steps only (PyTensor's truncate_gradient)."""
    hs = rnn_numpy(W, xs, h0)
    n = len(xs)
    start = 0 if k is None else max(n - k, 0)
    dW, dxs, carried = np.zeros_like(W), np.zeros_like(xs), np.zeros_like(h0)
    for t in range(n - 1, start - 1, -1):
        prev = hs[t - 1] if t > 0 else h0
        da = (g_hs[t] + carried) * (1 - hs[t] ** 2)
        dxs[t] = da
        dW += np.outer(prev, da)
        carried = da @ W.T
    dh0 = carried if start == 0 else np.zeros_like(h0)
    return dW, dxs, dh0


@pytest.mark.parametrize("k", [2, 5, 8])
def test_truncate_gradient(mode, rng, k):
    W, xs, h0 = rnn_inputs()
    hs, _ = tn.scan(lambda x, h, w: tn.tanh(tn.dot(h, w) + x), sequences=xs,
                    outputs_info=h0, non_sequences=W, truncate_gradient=k)
    g_hs = rng.normal(size=(5, 3))
    cost = tn.sum(hs * tn.constant(g_hs))
    Wv, xv, h0v = rng.normal(size=(3, 3)) * 0.7, rng.normal(size=(5, 3)), rng.normal(size=3)
    got = tn.function([W, xs, h0], tn.grad(cost, [W, xs, h0]), mode=mode)(Wv, xv, h0v)
    expected = rnn_backprop_numpy(Wv, xv, h0v, g_hs, k)
    for name, a, b in zip(["W", "xs", "h0"], got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)
    if k < 5:
        assert not np.any(got[1][:5 - k]) and not np.any(got[2])
    # the reference without truncation is the numeric gradient (once: k=5 and
    # k=8 draw the same values and their costs are one forward loop)
    if k == 5:
        full = rnn_backprop_numpy(Wv, xv, h0v, g_hs)
        f = tn.function([W, xs, h0], cost, mode=mode)
        numeric = numeric_grads(f, [Wv, xv, h0v])
        for a, b in zip(full, numeric):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_truncate_gradient_must_be_positive_or_minus_one():
    with pytest.raises(ValueError, match="truncate_gradient"):
        tn.scan(lambda xt: xt, sequences=tn.vector("x"), truncate_gradient=0)


def test_second_order_gradient(mode, rng):
    w, xs, h0 = tn.scalar("w"), tn.vector("xs"), tn.scalar("h0")
    hs, _ = tn.scan(lambda xt, h, w: tn.tanh(h * w + xt), sequences=xs, outputs_info=h0,
                    non_sequences=w)
    cost = tn.sum(hs ** 2)
    g = tn.grad(cost, w)
    gg = tn.grad(g, w)
    gx = tn.grad(g, xs)
    xv, h0v, wv = rng.normal(size=4), np.float64(0.4), np.float64(0.8)
    f_g = tn.function([w, xs, h0], g, mode=mode)
    got_gg, got_gx = tn.function([w, xs, h0], [gg, gx], mode=mode)(wv, xv, h0v)
    expected_gg, expected_gx = numeric_grads(lambda w_, x_: f_g(w_, x_, h0v), [wv, xv])
    np.testing.assert_allclose(got_gg, expected_gg, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got_gx, expected_gx, rtol=1e-5, atol=1e-7)


def test_gradient_with_respect_to_the_updated_shared_variable(mode):
    s = tn.shared(np.array([0.3, -0.5]), name="s_own")
    n, c = tn.scalar("n", dtype="int64"), tn.scalar("c")
    _, updates = tn.scan(lambda c: {s: tn.tanh(s * c)}, non_sequences=c, n_steps=n)
    cost = tn.sum(updates[s] ** 2)
    g = tn.function([n, c], tn.grad(cost, [s, c]), mode=mode)
    f = tn.function([n, c], cost, mode=mode)
    sv = s.get_value()

    def cost_of(value, cv, nv):
        s.set_value(value)
        try:
            return f(nv, cv)
        finally:
            s.set_value(sv)

    for nv in (0, 2):
        got_s, got_c = g(nv, 1.5)
        expected_s, expected_c = numeric_grads(lambda v, cv: cost_of(v, cv, nv),
                                               [sv, np.float64(1.5)])
        np.testing.assert_allclose(got_s, expected_s, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got_c, expected_c, rtol=1e-5, atol=1e-7)
    # no step: the final value is the initial one
    np.testing.assert_allclose(g(0, 1.5)[0], 2 * sv)


def test_until_gradient(mode):
    y0, a = tn.scalar("y0"), tn.scalar("a")
    ys, _ = tn.scan(lambda y, a: (y * a, tn.until(y * a > 10)), outputs_info=y0,
                    non_sequences=a, n_steps=50)
    got = tn.function([y0, a], tn.grad(tn.sum(ys), [y0, a]), mode=mode)(1.0, 2.0)
    # four steps: sum(ys) = y0 * (a + a**2 + a**3 + a**4)
    np.testing.assert_allclose(got, [2 + 4 + 8 + 16, 1 + 2 * 2 + 3 * 4 + 4 * 8])


# -- errors -----------------------------------------------------------------------------------


def test_negative_n_steps():
    with pytest.raises(ValueError, match="n_steps"):
        tn.scan(lambda h: h + 1, outputs_info=tn.zeros(()), n_steps=-1)


def test_negative_symbolic_n_steps_at_call_time(mode):
    n = tn.scalar("n", dtype="int64")
    hs, _ = tn.scan(lambda h: h + 1, outputs_info=tn.zeros(()), n_steps=n)
    f = tn.function([n], hs, mode=mode)
    with pytest.raises(ValueError, match="n_steps must be >= 0, got -2"):
        f(-2)
    np.testing.assert_allclose(f(2), [1.0, 2.0])


def test_sequences_of_different_lengths(mode):
    x, y = tn.vector("x"), tn.vector("y")
    zs, _ = tn.scan(lambda a, b: a + b, sequences=[x, y])
    f = tn.function([x, y], zs, mode=mode)
    with pytest.raises(ValueError, match=r"sequences\[0\] has 3 entries, sequences\[1\] has 4"):
        f(np.ones(3), np.ones(4))
    np.testing.assert_allclose(f(np.ones(3), np.ones(3)), [2.0, 2.0, 2.0])


def test_a_sequence_shorter_than_n_steps(mode):
    x, y = tn.vector("x"), tn.vector("y")
    zs, _ = tn.scan(lambda a, b: a + b, sequences=[x, y], n_steps=4)
    f = tn.function([x, y], zs, mode=mode)
    with pytest.raises(ValueError, match=r"sequences\[1\] has 2 entries, fewer than n_steps=4"):
        f(np.ones(5), np.ones(2))


def test_a_tapped_sequence_too_short(mode):
    x = tn.vector("x")
    zs, _ = tn.scan(lambda a, b: a + b, sequences=dict(input=x, taps=[-2, 0]), n_steps=3)
    f = tn.function([x], zs, mode=mode)
    np.testing.assert_allclose(f(np.arange(5.0)), [2.0, 4.0, 6.0])
    with pytest.raises(ValueError, match=r"sequences\[0\]"):
        f(np.arange(4.0))


def test_state_of_the_wrong_dtype():
    h0 = tn.scalar("h0", dtype="float32")
    with pytest.raises(TypeError, match=r"outputs_info\[0\] is float32"):
        tn.scan(lambda h: h * tn.constant(np.float64(2.0)), outputs_info=h0, n_steps=3)


def test_state_of_the_wrong_ndim():
    h0 = tn.vector("h0")
    with pytest.raises(TypeError, match=r"outputs_info\[0\]"):
        tn.scan(lambda h: tn.sum(h), outputs_info=h0, n_steps=3)
    with pytest.raises(TypeError, match=r"outputs_info\[1\]"):
        tn.scan(lambda a, b: [a + 1, tn.outer(b, b)], outputs_info=[tn.scalar("a"), h0],
                n_steps=3)


def test_state_whose_shape_changes_at_run_time(mode):
    h0 = tn.vector("h0")
    hs, _ = tn.scan(lambda h: tn.concatenate([h, h[:1]]), outputs_info=h0, n_steps=3)
    f = tn.function([h0], hs, mode=mode)
    with pytest.raises(ValueError, match=r"outputs_info\[0\] the shape \(3,\)"):
        f(np.ones(2))


def test_neither_n_steps_nor_sequences():
    with pytest.raises(ValueError, match="n_steps"):
        tn.scan(lambda h: h + 1, outputs_info=tn.zeros(()))


def test_wrong_number_of_outputs():
    with pytest.raises(ValueError, match="returns 2 outputs but outputs_info has 1"):
        tn.scan(lambda h: [h + 1, h * 2], outputs_info=[tn.zeros(())], n_steps=2)
    with pytest.raises(ValueError, match="returns 1 outputs but outputs_info has 2"):
        tn.scan(lambda h: h + 1, outputs_info=[tn.zeros(()), None], n_steps=2)


def test_a_failing_call_changes_no_shared_variable(mode):
    total = tn.shared(np.zeros(2), name="total_fail")
    srng = RandomStream(5)
    x = tn.matrix("x")

    def step(row, h):
        # h grows by one entry at the first row whose first entry is positive
        grown = tn.concatenate([h, h[:1]])[:tn.shape(h)[0] + tn.cast(row[0] > 0, "int64")]
        return [grown, srng.normal(size=(2,))], {total: total + row}

    (hs, _), updates = tn.scan(step, sequences=x, outputs_info=[tn.zeros(2), None])
    assert len(updates) == 2
    f = tn.function([x], hs, mode=mode, updates=updates)
    rng_state = [s for s in updates if s is not total][0]
    ok = np.array([[-1.0, 2.0], [-3.0, 4.0]])
    f(ok)
    np.testing.assert_allclose(total.get_value(), [-4.0, 6.0])
    total_before = np.array(total.get_value())
    state_before = np.array(rng_state.get_value())
    bad = np.array([[-1.0, 1.0], [-1.0, 1.0], [5.0, 1.0], [-1.0, 1.0]])
    with pytest.raises(ValueError, match=r"step 2 gave outputs_info\[0\] the shape \(3,\)"):
        f(bad)
    np.testing.assert_array_equal(total.get_value(), total_before)
    np.testing.assert_array_equal(rng_state.get_value(), state_before)
    f(ok)
    np.testing.assert_allclose(total.get_value(), [-8.0, 12.0])


def test_a_failing_symbolic_n_steps_changes_no_shared_variable(mode):
    srng = RandomStream(11)
    n = tn.scalar("n", dtype="int64")
    hs, updates = tn.scan(lambda h: h + srng.uniform(), outputs_info=tn.zeros(()), n_steps=n)
    (state,) = updates
    f = tn.function([n], hs, mode=mode, updates=updates)
    before = np.array(state.get_value())
    with pytest.raises(ValueError, match="n_steps"):
        f(-1)
    np.testing.assert_array_equal(state.get_value(), before)


# -- nesting, and results of earlier calls ---------------------------------------------------


def test_nested_scan(mode, rng):
    X = tn.matrix("X")

    def row_cumsum(row):
        r, _ = tn.scan(lambda xt, acc: acc + xt, sequences=row, outputs_info=tn.zeros(()))
        return r

    out, _ = tn.scan(row_cumsum, sequences=X)
    Xv = rng.normal(size=(3, 4))
    np.testing.assert_allclose(tn.function([X], out, mode=mode)(Xv), np.cumsum(Xv, 1),
                               rtol=1e-12)


def test_a_later_call_leaves_earlier_results_alone(mode):
    x = tn.vector("x")
    ys, _ = tn.scan(lambda xt, acc: acc + xt, sequences=x, outputs_info=tn.zeros(()))
    zs, _ = tn.scan(lambda xt: xt * 2, sequences=x)
    f = tn.function([x], [ys, zs], mode=mode)
    first = f(np.arange(4.0))
    kept = [v.copy() for v in first]
    f(np.ones(4))
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


# -- steps run by the C runtime --------------------------------------------------------------


def test_a_state_whose_shape_changes_after_the_first_steps(mode):
    """On the C linker steps 1 on run in the runtime's loop driver: the error
    found there is the one a step called from Python raises."""
    ks, h0 = tn.vector("ks", dtype="int32"), tn.vector("h0")
    hs, _ = tn.scan(lambda k, h: h[:k] * 2, sequences=ks, outputs_info=h0)
    f = tn.function([ks, h0], hs, mode=mode)
    np.testing.assert_array_equal(f(np.full(3, 3, "int32"), np.ones(3)),
                                  [[2] * 3, [4] * 3, [8] * 3])
    with pytest.raises(ValueError, match=r"step 3 gave outputs_info\[0\] the shape \(2,\); "
                                         r"it must keep its initial value's shape \(3,\)"):
        f(np.array([3, 3, 3, 2, 3], "int32"), np.ones(3))


def test_a_nit_sot_whose_shape_changes_after_the_first_steps(mode):
    ks, x = tn.vector("ks", dtype="int32"), tn.vector("x")
    ys, _ = tn.scan(lambda k: x[:k] + 1, sequences=ks)
    f = tn.function([ks, x], ys, mode=mode)
    np.testing.assert_array_equal(f(np.full(3, 2, "int32"), np.zeros(4)), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"step 2 gave .* the shape \(1,\), step 0 gave \(2,\)"):
        f(np.array([2, 2, 1], "int32"), np.zeros(4))


def count_step_calls(monkeypatch) -> list:
    """Every call of a compiled function from now on, as the list of the functions called."""
    calls = []
    original = tn.Function.__call__

    def counted(self, *args, **kwargs):
        calls.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(tn.Function, "__call__", counted)
    return calls


@pytest.mark.parametrize("linker, python_calls", [("c", 1 + 1), ("py", 1 + 1000)])
def test_the_c_linker_runs_a_loops_steps_without_python_between_them(
        monkeypatch, rng, linker, python_calls):
    """The C linker calls the step from Python for step 0 only (its read of the
    state before the first is the initial value, not a row of the trajectory);
    the Python executor once per step."""
    x = tn.vector("x")
    hs, _ = tn.scan(lambda xt, acc: acc * 0.5 + xt, sequences=x, outputs_info=tn.zeros(()))
    f = tn.function([x], hs, mode=tn.Mode(linker=linker))
    xv = rng.normal(size=1000)
    expected = np.empty(1000)
    acc = 0.0
    for t, v in enumerate(xv):
        acc = acc * 0.5 + v
        expected[t] = acc
    calls = count_step_calls(monkeypatch)
    np.testing.assert_allclose(f(xv), expected, rtol=1e-12)
    assert len(calls) == python_calls


def test_a_ring_of_two_taps_wraps_under_the_loop_driver(monkeypatch):
    x0 = tn.vector("x0")
    fib, _ = tn.scan(lambda a, b: a + b, outputs_info=dict(initial=x0, taps=[-2, -1]),
                     n_steps=30)
    f = tn.function([x0], fib[-1], mode=tn.Mode(linker="c"))
    calls = count_step_calls(monkeypatch)
    assert f(np.array([0.0, 1.0])) == 1346269.0   # F(31)
    assert len(calls) == 1


def test_a_checkpointed_loop_and_its_gradient_under_the_loop_driver(monkeypatch, rng):
    """The forward loop runs each segment between checkpoints in the driver;
    its gradient recomputes each segment there, then runs the segment's
    backward steps there too, last step first (rows read through reversed
    views), the carried gradient window written whole after each step."""
    xs = tn.tensor("xs", dtype="float64", shape=(None, 3))
    h0 = tn.tensor("h0", dtype="float64", shape=(3,))
    hs, _ = tn.scan(lambda xt, h: tn.tanh(h * 0.5 + xt), sequences=xs, outputs_info=h0,
                    checkpoint_every=4)
    cost = tn.sum(hs[-1]) + tn.sum(hs[3] ** 2)
    wrt = tn.grad(cost, [h0, xs])
    g = tn.function([xs, h0], [hs] + wrt, mode=tn.Mode(linker="c"))
    reference = tn.function([xs, h0], [hs] + wrt, mode=tn.Mode(linker="py"))
    xv, h0v = rng.normal(size=(10, 3)), rng.normal(size=3)
    expected = reference(xv, h0v)
    calls = count_step_calls(monkeypatch)
    for got, want in zip(g(xv, h0v), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # the function, and the forward loop's step 0 (its read of the state
    # before it is the initial value): nothing else is called from Python
    assert len(calls) == 2


def test_a_gradient_step_of_the_wrong_shape_names_the_step_the_output_and_both_shapes():
    """What a checkpointed gradient raises when its driver finds a step result
    of the wrong shape (a fault in the gradient, not in the user's loop)."""
    from tenure.symbolic.ops.scan_grad import _ran
    writes = ((0, np.zeros((5, 3)), 0, 0),)
    assert _ran((5, False, -1, None), writes, "backward") is True
    assert _ran(None, writes, "backward") is False
    with pytest.raises(ValueError, match=r"backward step 2 gave its output 0 the shape \(2,\); "
                                         r"it must have the shape \(3,\)"):
        _ran((2, False, 0, np.zeros(2)), writes, "backward")


# -- pickling and merging -------------------------------------------------------------------


def test_pickled_function_gives_the_same_results(mode, rng):
    W = tn.shared(rng.normal(size=(3, 3)) * 0.5, name="W_pickle")
    xs, h0 = tn.matrix("xs"), tn.vector("h0")
    hs, _ = tn.scan(lambda x, h: tn.tanh(tn.dot(h, W) + x), sequences=xs, outputs_info=h0)
    grad = tn.grad(tn.sum(hs), h0)
    f = tn.function([xs, h0], [hs, grad], mode=mode)
    xv, h0v = rng.normal(size=(4, 3)), rng.normal(size=3)
    expected = f(xv, h0v)
    g = pickle.loads(pickle.dumps(f))
    for a, b in zip(g(xv, h0v), expected):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(expected[0], rnn_numpy(W.get_value(), xv, h0v), rtol=1e-12)


def test_identical_scans_are_merged(mode, rng):
    x = tn.vector("x")

    def build():
        ys, _ = tn.scan(lambda xt, acc: acc * 0.5 + xt, sequences=x, outputs_info=tn.zeros(()))
        return ys

    a, b = build(), build()
    assert isinstance(a.owner.op, Scan)
    assert a.owner.op == b.owner.op and hash(a.owner.op) == hash(b.owner.op)
    other, _ = tn.scan(lambda xt, acc: acc * 0.25 + xt, sequences=x, outputs_info=tn.zeros(()))
    assert other.owner.op != a.owner.op
    f = tn.function([x], [a, b], mode=mode)
    scans = [node for node in f.fgraph.toposort() if isinstance(node.op, Scan)]
    assert len(scans) == 1
    xv = rng.normal(size=5)
    got_a, got_b = f(xv)
    np.testing.assert_array_equal(got_a, got_b)


def test_the_shapes_of_a_gradient_loop_need_no_run():
    """A nit-sot output's per-step shape is inferred through the step (the
    backward loop's sequence gradients), so asking for it builds no graph
    that runs a loop."""
    W, xs, h0 = rnn_inputs()
    hs, _ = tn.scan(lambda x, h: tn.tanh(tn.dot(h, W) + x), sequences=xs, outputs_info=h0)
    gx = tn.grad(hs.sum(), xs)
    loops = [node for node in io_toposort([], [gx])
             if isinstance(node.op, Scan)]
    backward = loops[-1]
    nit_sot = backward.outputs[backward.op.parts.n_states]
    dims = tn.shape_tuple(nit_sot)
    feeding = ancestors([d for d in dims if isinstance(d, tn.Variable)])
    assert not any(v.owner is not None and isinstance(v.owner.op, Scan) for v in feeding)


# -- checkpointed gradients ------------------------------------------------------------------


def _gradients_with_and_without_checkpoints(build, inputs, values, mode, every):
    """The gradients of ``build(checkpoint_every)`` -> (cost, wrt) with and
    without checkpoints, both compiled with ``mode``."""
    results = []
    for checkpoint in (None, every):
        cost, wrt = build(checkpoint)
        results.append(tn.function(inputs, tn.grad(cost, wrt), mode=mode)(*values))
    return results


@pytest.mark.parametrize("n, every", [(10, 3), (10, 5), (4, 10), (7, 1), (0, 3)])
def test_checkpointed_rnn_gradient(mode, rng, n, every):
    """Recomputing segments from checkpoints gives the stored loop's gradient:
    a segment length that divides n, one that does not, one longer than the
    loop, one step per segment, no step at all."""
    W, xs, h0 = rnn_inputs()
    weights = tn.matrix("weights")

    def build(checkpoint):
        hs, _ = tn.scan(lambda x, h: tn.tanh(tn.dot(h, W) + x), sequences=xs, outputs_info=h0,
                        checkpoint_every=checkpoint)
        return tn.sum(hs * weights) + tn.sum(hs[-1] ** 2) if n else tn.sum(hs * weights), \
            [W, xs, h0]

    values = [rng.normal(size=(3, 3)) * 0.7, rng.normal(size=(n, 3)), rng.normal(size=3),
              rng.normal(size=(n, 3))]
    plain, checkpointed = _gradients_with_and_without_checkpoints(
        build, [W, xs, h0, weights], values, mode, every)
    for a, b in zip(plain, checkpointed):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_checkpointed_gradient_of_taps_nit_sots_and_non_sequences(mode, rng):
    """Taps [-3, -1] (a window of three checkpointed), a nit-sot output read
    by the cost, a non-sequence and truncation."""
    xs, a0, w = tn.matrix("xs"), tn.matrix("a0"), tn.vector("w")

    def build(checkpoint):
        def step(x, a3, a1, w):
            new = tn.tanh(a1 * w + 0.5 * a3 + x)
            return new, tn.sum(new * x)
        (states, dots), _ = tn.scan(step, sequences=xs,
                                    outputs_info=[dict(initial=a0, taps=[-3, -1]), None],
                                    non_sequences=w, checkpoint_every=checkpoint,
                                    truncate_gradient=6)
        return tn.sum(states ** 2) + tn.sum(dots), [xs, a0, w]

    values = [rng.normal(size=(9, 2)), rng.normal(size=(3, 2)), rng.normal(size=2)]
    plain, checkpointed = _gradients_with_and_without_checkpoints(
        build, [xs, a0, w], values, mode, 4)
    for a, b in zip(plain, checkpointed):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("budget, schedule", [(0.5, (14, 2)), (0.2, (40, 0))])
def test_a_budget_reverses_segments_by_the_binomial_schedule(mode, rng, budget, schedule):
    """Under a budget no even spacing fits, each segment is reversed from a
    few snapshots (rings of the three taps' values, turned by each segment's
    start) or, with none, every step reached from its checkpoint: the
    gradient without a budget, with a nit-sot, a non-sequence and truncation."""
    xs, a0, w = tn.tensor("xs", shape=(40, 2)), tn.tensor("a0", shape=(3, 2)), tn.vector("w")

    def step(x, a3, a1, w):
        new = tn.tanh(a1 * w + 0.5 * a3 + x)
        return new, tn.sum(new * x)
    (states, dots), _ = tn.scan(step, sequences=xs,
                                outputs_info=[dict(initial=a0, taps=[-3, -1]), None],
                                non_sequences=w, truncate_gradient=30)
    grads = tn.grad(tn.sum(states[-1] ** 2) + tn.sum(dots), [xs, a0, w])
    values = [rng.normal(size=(40, 2)), rng.normal(size=(3, 2)), rng.normal(size=2)]
    plain = tn.function([xs, a0, w], grads, mode=mode)
    budgeted = tn.function([xs, a0, w], grads, mode=tn.Mode(
        linker=mode.linker, activation_memory_budget=budget, cuda_emulation=mode.cuda_emulation,
        compute=mode.compute, chunk_linker=mode.chunk_linker))
    (backward,) = [node.op for node in budgeted.fgraph.apply_nodes
                   if isinstance(node.op, CheckpointedScanGrad)]
    assert (backward.every, backward.snapshots) == schedule
    for a, b in zip(plain(*values), budgeted(*values)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_checkpointed_gradient_redraws_the_same_random_numbers(mode):
    """A draw inside the loop is recomputed from the checkpointed generator
    state: the gradient sees the forward pass's numbers."""
    scale = tn.scalar("scale")
    grads = []
    for checkpoint in (None, 2):
        srng = RandomStream(11)
        hs, updates = tn.scan(lambda h: h + scale * srng.normal(size=(3,)) * h,
                              outputs_info=tn.ones(3), n_steps=5, checkpoint_every=checkpoint)
        f = tn.function([scale], tn.grad(tn.sum(hs), scale), mode=mode, updates=updates)
        grads.append(f(0.3))
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


def test_checkpoint_every_must_be_a_positive_number_of_steps():
    h0 = tn.vector("h0")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="checkpoint_every must be a positive number"):
            tn.scan(lambda h: h * 2, outputs_info=h0, n_steps=3, checkpoint_every=bad)
    with pytest.raises(ValueError, match="not available for a until loop"):
        tn.scan(lambda h: (h * 2, tn.until(tn.sum(h) > 5)), outputs_info=h0, n_steps=3,
                checkpoint_every=2)


def test_a_checkpointed_gradient_has_no_gradient_of_its_own():
    w = tn.scalar("w")
    hs, _ = tn.scan(lambda h: h * w, outputs_info=tn.ones(()), n_steps=4, checkpoint_every=2)
    g = tn.grad(hs[-1], w)
    with pytest.raises(NotImplementedError, match="without checkpoint_every"):
        tn.grad(g, w)


def test_a_long_step_is_no_recursion():
    """A step of more chained ops than Python's recursion limit."""
    import sys
    w = tn.scalar("w")

    def step(h):
        for _ in range(sys.getrecursionlimit() + 100):
            h = h * w + 1.0
        return h
    hs, _ = tn.scan(step, outputs_info=tn.constant(0.0), n_steps=1)
    assert hs.owner.op.parts.n_nonseqs == 1      # w, found through every op
