"""In-place insertion: it fires where a buffer is provably free, never where
the contract protects it, and results never change."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure import In, Out

NO_INPLACE = tn.Mode(exclude=["inplace"])


def destroyers(f):
    return [n for n in f.fgraph.apply_nodes if n.op.destroy_map]


def test_elementwise_chain_runs_in_one_buffer():
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) * 2 + tn.sin(x), mode=tn.Mode(exclude=["fusion"]))
    assert "elemwise_inplace" in f.rewrites_applied
    assert destroyers(f)
    np.testing.assert_allclose(f(np.arange(3.0)), np.exp(np.arange(3.0)) * 2 + np.sin(
        np.arange(3.0)))


def test_never_on_an_input_the_caller_keeps():
    x = tn.vector("x")
    for spec in (x, In(x, borrow=True)):
        f = tn.function([spec], tn.exp(x))
        assert not destroyers(f)
        value = np.arange(3.0)
        f(value)
        np.testing.assert_array_equal(value, np.arange(3.0))


def test_a_mutable_input_is_used_as_workspace():
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(tn.exp(x), borrow=True))
    value = np.zeros(3)
    result = f(value)
    assert np.shares_memory(result, value)
    np.testing.assert_array_equal(result, np.ones(3))


def test_never_on_a_result_the_caller_receives():
    x = tn.vector("x")
    a = tn.exp(x)
    f = tn.function([x], [a, tn.sin(a)])
    got_a, got_sin = f(np.arange(3.0))
    np.testing.assert_allclose(got_a, np.exp(np.arange(3.0)))
    np.testing.assert_allclose(got_sin, np.sin(np.exp(np.arange(3.0))))


def test_a_buffer_read_later_is_not_overwritten_too_early():
    x = tn.vector("x")
    a = tn.exp(x)
    f = tn.function([x], [tn.sin(a) + (a * 3).sum()])
    value = np.arange(3.0)
    expected = np.sin(np.exp(value)) + (np.exp(value) * 3).sum()
    np.testing.assert_allclose(f(value)[0], expected)


def test_shared_update_computed_in_its_own_buffer():
    w = tn.shared(np.ones(4), name="w", borrow=True)
    x = tn.vector("x")
    g = tn.grad(((w * x) ** 2).sum(), w)
    step = tn.function([x], [], updates=[(w, w - 0.1 * g)])
    buffer = w.get_value(borrow=True)
    step(np.ones(4))
    step(np.ones(4))
    assert w.get_value(borrow=True) is buffer
    np.testing.assert_allclose(w.get_value(), np.full(4, 0.8 ** 2))


def test_update_not_in_place_when_the_old_value_is_returned():
    w = tn.shared(np.ones(3), name="w")
    f = tn.function([], w * 1, updates=[(w, w - 1)])
    np.testing.assert_array_equal(f(), np.ones(3))
    np.testing.assert_array_equal(w.get_value(), np.zeros(3))


def test_overlapping_mutable_inputs_still_give_correct_results():
    x, y = tn.vector("x"), tn.vector("y")
    f = tn.function([In(x, borrow=True, mutable=True), In(y, borrow=True, mutable=True)],
                    [tn.exp(x) * 2, tn.sin(y) + 1])
    assert destroyers(f)
    same = np.arange(4.0)
    r1, r2 = f(same, same)
    np.testing.assert_allclose(r1, np.exp(np.arange(4.0)) * 2)
    np.testing.assert_allclose(r2, np.sin(np.arange(4.0)) + 1)


def test_gradient_of_indexing_increments_in_place():
    x = tn.vector("x")
    i = tn.vector("i", dtype="int64")
    g = tn.grad((x[i] ** 2).sum(), x)
    f = tn.function([x, i], g)
    assert "subtensor_update_inplace" in f.rewrites_applied
    np.testing.assert_allclose(f(np.arange(4.0), np.array([1, 1, 3])), [0.0, 4.0, 0.0, 6.0])


def test_excluding_inplace_by_tag_or_name():
    x = tn.vector("x")
    expr = tn.exp(x) * 2
    assert not destroyers(tn.function([x], expr, mode=NO_INPLACE))
    assert not destroyers(tn.function([x], expr, mode=tn.Mode(exclude=["elemwise_inplace"])))


# ---------------------------------------------------------------------------
# Random graphs, random In flags: same values as without rewrites, and the
# checking linker verifies every node and that protected inputs stay intact.

UNARY = [tn.exp, tn.sin, tn.tanh, tn.neg, tn.square, tn.sigmoid]
BINARY = [tn.add, tn.sub, tn.mul, tn.maximum]


@st.composite
def random_graphs(draw):
    n_inputs = draw(st.integers(1, 3))
    flags = draw(st.lists(st.sampled_from(["plain", "borrow", "mutable"]),
                          min_size=n_inputs, max_size=n_inputs))
    ops = draw(st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 2**16),
                                  st.integers(0, 2**16), st.booleans()),
                        min_size=1, max_size=8))
    n_outputs = draw(st.integers(1, 3))
    return flags, ops, n_outputs


def build(flags, ops, n_outputs):
    inputs = [tn.vector(f"x{i}") for i in range(len(flags))]
    pool = list(inputs)
    for a, b, which, unary in ops:
        if unary:
            pool.append(UNARY[which % len(UNARY)](pool[a % len(pool)]))
        else:
            pool.append(BINARY[which % len(BINARY)](pool[a % len(pool)], pool[b % len(pool)]))
    outputs = pool[-n_outputs:]
    specs = [x if f == "plain" else In(x, borrow=True, mutable=(f == "mutable"))
             for x, f in zip(inputs, flags)]
    return specs, outputs


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=random_graphs(), seed=st.integers(0, 2**16), alias=st.booleans())
def test_random_graphs_with_random_in_flags(graph, seed, alias):
    flags, ops, n_outputs = graph
    rng = np.random.default_rng(seed)
    values = [rng.uniform(-1, 1, size=4) for _ in flags]
    if alias and len(values) > 1:
        values[1] = values[0]  # the same array passed twice
    specs, outputs = build(flags, ops, n_outputs)
    reference = tn.function(specs, outputs, mode=tn.Mode(rewrites="none"),
                            on_unused_input="ignore")
    checked = tn.function(specs, outputs, mode=tn.Mode(linker="check"),
                          on_unused_input="ignore")
    expected = reference(*[v.copy() for v in values])
    originals = [v.copy() for v in values]
    got = checked(*values)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    for value, original, flag in zip(values, originals, flags):
        if flag != "mutable":
            np.testing.assert_array_equal(value, original)
