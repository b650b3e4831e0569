"""Elementwise fusion: Composite, the fuse_elemwise and fuse_reduce rewrites,
blockwise evaluation, memory, gradients, and fused == unfused on random trees."""

import contextlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.rewrites.fusion import MAX_INPUTS
from tenure.symbolic.ops import composite as cmp
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.composite import Composite, FusedReduce
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.testing import verify_grad

UNFUSED = dict(exclude=["fusion"])


def _modes(mode):
    """The mode under test and the same mode without fusion."""
    return mode, tn.Mode(linker=mode.linker, exclude=["fusion"])


def _nodes(f):
    return list(f.fgraph.toposort())


def _composites(f):
    return [n for n in f.fgraph.apply_nodes
            if isinstance(n.op, Elemwise) and isinstance(n.op.scalar_op, Composite)]


def _assert_same(got, expected, rtol=None):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    if got.dtype.kind in "fc":
        if rtol is None:
            rtol = 1e-5 if got.dtype.itemsize <= 4 or got.dtype == np.complex64 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, expected)


def _compare(inputs, outputs, values, mode, rtol=None):
    """Compile with and without fusion; same dtypes, shapes and values.

    Returns the fused function."""
    fused_mode, plain_mode = _modes(mode)
    f = tn.function(inputs, outputs, mode=fused_mode, on_unused_input="ignore")
    g = tn.function(inputs, outputs, mode=plain_mode, on_unused_input="ignore")
    with np.errstate(all="ignore"):
        got = f(*[np.copy(v) for v in values])
        expected = g(*[np.copy(v) for v in values])
    if not isinstance(got, list):
        got, expected = [got], [expected]
    for a, b in zip(got, expected):
        _assert_same(a, b, rtol)
    return f


@contextlib.contextmanager
def small_blocks(threshold=4, block=5):
    """Make the blockwise path run on tiny arrays (so tests stay fast)."""
    old = cmp.CHUNK_THRESHOLD, cmp.BLOCK_SIZE
    cmp.CHUNK_THRESHOLD, cmp.BLOCK_SIZE = threshold, block
    try:
        yield
    finally:
        cmp.CHUNK_THRESHOLD, cmp.BLOCK_SIZE = old


def _peak(f, *args):
    """tracemalloc peak (bytes) of one call, after a warm-up call."""
    f(*args)
    tracemalloc.start()
    try:
        f(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


# --------------------------------------------------------------------------
# Composite itself


def _example_composite():
    # exp(i0) * 2 + sin(i1) * i0
    return Composite(2, [(ps.exp, [("i", 0)]), (ps.mul, [("t", 0), ("c", 2)]),
                         (ps.sin, [("i", 1)]), (ps.mul, [("t", 2), ("i", 0)]),
                         (ps.add, [("t", 1), ("t", 3)])])


def test_composite_name_equality_and_hash():
    c = _example_composite()
    assert c.name == "Composite{exp(i0) * 2 + sin(i1) * i0}"
    assert c == _example_composite() and hash(c) == hash(_example_composite())
    # 2, 2.0 and True are different constants for NumPy: different composites
    as_float = Composite(1, [(ps.mul, [("i", 0), ("c", 2.0)])])
    as_int = Composite(1, [(ps.mul, [("i", 0), ("c", 2)])])
    assert as_float != as_int and as_float.name != as_int.name
    # shared steps are named once; precedence is Python's
    c2 = Composite(2, [(ps.sub, [("i", 0), ("i", 1)]), (ps.sub, [("i", 0), ("t", 0)])])
    assert c2.name == "Composite{i0 - (i0 - i1)}"
    c3 = Composite(1, [(ps.exp, [("i", 0)]), (ps.mul, [("t", 0), ("t", 0)])])
    assert c3.name == "Composite{t0 = exp(i0); t0 * t0}"
    c4 = Composite(1, [(ps.neg, [("i", 0)]), (ps.power, [("t", 0), ("c", 2)])])
    assert c4.name == "Composite{(-i0) ** 2}"


@pytest.mark.parametrize("bad", [
    [(ps.exp, [("i", 1)])],            # no input 1
    [(ps.exp, [("t", 0)])],            # a step reading itself
    [(ps.add, [("i", 0)])],            # wrong arity
    [(ps.add, [("i", 0), ("c", np.float32(1))])],  # constants are Python numbers
])
def test_composite_rejects_malformed_steps(bad):
    with pytest.raises((ValueError, TypeError)):
        Composite(1, bad)


@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("float64", "float32"),
                                    ("int8", "int8"), ("int8", "float32"), ("bool", "uint8"),
                                    ("complex64", "float32")])
def test_composite_output_dtype_is_the_chain_dtype(dtypes):
    c = _example_composite()
    probes = [np.empty((0,), d) for d in dtypes]
    chain = np.exp(probes[0]) * 2 + np.sin(probes[1]) * probes[0]
    assert c.output_dtype(probes) == chain.dtype


def test_composite_impl_matches_numpy_whole_and_blockwise():
    c = _example_composite()
    rng = np.random.default_rng(0)
    for shape_a, shape_b in [((7,), (7,)), ((3, 1), (1, 5)), ((2, 3, 4), (4,)), ((), ())]:
        a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
        expected = np.exp(a) * 2 + np.sin(b) * a
        for ctx in (contextlib.nullcontext(), small_blocks()):
            with ctx:
                got = c.impl(a, b)
                _assert_same(got, expected)
                out = np.empty(np.broadcast_shapes(a.shape, b.shape))
                assert c.impl(a, b, out=out) is out
                _assert_same(out, expected)


def test_blockwise_path_is_used_for_large_outputs(monkeypatch):
    c = _example_composite()
    calls = []
    original = Composite.eval_block

    def spy(self, *args):
        calls.append(args[2].shape)
        return original(self, *args)

    monkeypatch.setattr(Composite, "eval_block", spy)
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(300, 1000)), rng.normal(size=(1000,))
    got = c.impl(a, b)
    assert len(calls) > 1
    assert all(np.prod(s) <= cmp.BLOCK_SIZE for s in calls)
    np.testing.assert_allclose(got, np.exp(a) * 2 + np.sin(b) * a, rtol=1e-13)
    calls.clear()
    c.impl(a[:2, :3], b[:3])  # small: one whole-array pass, no blocks
    assert calls == []


@pytest.mark.parametrize("shape", [(200_000,), (3, 100_000), (2, 3, 40_000), (70_000, 1)])
def test_blockwise_matches_for_assorted_shapes(shape):
    c = _example_composite()
    rng = np.random.default_rng(2)
    a = rng.normal(size=shape)
    b = rng.normal(size=shape[-1:])
    np.testing.assert_allclose(c.impl(a, b), np.exp(a) * 2 + np.sin(b) * a, rtol=1e-13)


@pytest.mark.parametrize("size", [10, 200_000])
def test_elemwise_composite_reuses_the_output_buffer(size):
    op = Elemwise(_example_composite())
    x, z = tn.vector("x"), tn.vector("z")
    node = op.make_node(x, z)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=size), rng.normal(size=size)
    kept = np.empty(size)
    cell = [kept]
    op.perform(node, [a, b], [cell])
    assert cell[0] is kept
    np.testing.assert_allclose(kept, np.exp(a) * 2 + np.sin(b) * a, rtol=1e-13)


def test_composite_in_place_into_an_input_blockwise():
    # What the in-place rewrite creates: the output is written into input 0's buffer.
    op = Elemwise(_example_composite(), {0: 0})
    x, z = tn.vector("x"), tn.vector("z")
    node = op.make_node(x, z)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=200_000), rng.normal(size=200_000)
    expected = np.exp(a) * 2 + np.sin(b) * a
    cell = [None]
    op.perform(node, [a, b], [cell])
    assert cell[0] is a
    np.testing.assert_allclose(a, expected, rtol=1e-13)


@pytest.mark.parametrize("blocks", [False, True])
def test_composite_in_place_into_the_condition_of_a_final_where(blocks):
    # where() fills its output from `b` first: written into `cond`'s own buffer it
    # would lose the condition.  The composite gives such a step a scratch result.
    comp = Composite(2, [(ps.logical_not, [("i", 1)]),
                         (ps.where, [("i", 0), ("t", 0), ("c", True)])])
    op = Elemwise(comp, {0: 0})
    c, a = tn.vector("c", dtype="bool"), tn.vector("a", dtype="bool")
    node = op.make_node(c, a)
    rng = np.random.default_rng(5)
    cv, av = rng.random(40) < 0.5, rng.random(40) < 0.5
    expected = np.where(cv, ~av, True)
    cell = [None]
    with small_blocks() if blocks else contextlib.nullcontext():
        op.perform(node, [cv, av], [cell])
    assert cell[0] is cv
    np.testing.assert_array_equal(cv, expected)


def test_composite_where_and_cast_steps_blockwise():
    # non-ufunc steps (where uses copyto) must not write over operands they still read
    c = Composite(2, [(ps.greater, [("i", 0), ("c", 0)]), (ps.mul, [("i", 0), ("c", 0.5)]),
                      (ps.where, [("t", 0), ("i", 0), ("t", 1)]),
                      (ps.Cast("float32"), [("t", 2)]), (ps.add, [("t", 3), ("i", 1)])])
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(50, 3)), rng.normal(size=(50, 3)).astype(np.float32)
    expected = np.where(a > 0, a, a * 0.5).astype(np.float32) + b
    with small_blocks():
        _assert_same(c.impl(a, b), expected)


# --------------------------------------------------------------------------
# The rewrite fires, and only where it should


def test_fusion_fires_on_a_tree(mode):
    x, z = tn.vector("x"), tn.vector("z")
    f = tn.function([x, z], tn.exp(x) * 2 + tn.sin(z) * x, mode=mode)
    nodes = _nodes(f)
    assert len(nodes) == 1
    (node,) = nodes
    assert isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Composite)
    assert str(node.op.scalar_op) == "Composite{exp(i0) * 2 + sin(i1) * i0}"
    assert "fuse_elemwise" in f.rewrites_applied
    g = tn.function([x, z], tn.exp(x) * 2 + tn.sin(z) * x, mode=tn.Mode(**UNFUSED))
    assert len(_nodes(g)) == 5 and "fuse_elemwise" not in g.rewrites_applied


def test_single_elemwise_is_left_alone(mode):
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x), mode=mode)
    assert not _composites(f)
    assert "fuse_elemwise" not in f.rewrites_applied


def test_shared_intermediate_with_two_clients_is_not_duplicated(mode):
    x = tn.vector("x")
    t = tn.exp(x) * 2
    f = _compare([x], [t + 1, tn.sin(t)], [np.linspace(-1, 1, 11)], mode)
    # exp and * are computed once, in one fused node; its two readers stay apart
    exps = [n for n in f.fgraph.apply_nodes if "exp" in str(n.op)]
    assert len(exps) == 1
    assert "Composite{exp(i0) * 2}" in str(exps[0].op)


def _layer_norm(x, g, b):
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / tn.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + b


def test_a_cheap_intermediate_is_recomputed_by_each_reader(mode):
    """``x - mu`` read by the variance's reduction and by the output: each
    computes its own copy (reading x, which exists anyway), so no full-size
    intermediate is stored -- the layer norm is two reductions and one
    elementwise pass."""
    x, g, b = tn.matrix("x"), tn.vector("g"), tn.vector("b")
    rng = np.random.default_rng(21)
    args = [rng.normal(size=(6, 9)), rng.normal(size=9), rng.normal(size=9)]
    with small_blocks():
        f = _compare([x, g, b], _layer_norm(x, g, b), args, mode, rtol=1e-12)
    full_size = [n for n in f.fgraph.apply_nodes
                 if isinstance(n.op, Elemwise) and n.outputs[0].ndim == 2
                 and n.outputs[0].type.shape[1] != 1]
    assert len(full_size) == 1 and full_size[0].outputs[0] in f.fgraph.outputs
    assert sum(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes) == 1


def test_recomputing_stores_nothing_full_size(cc_or_skip):
    """The C loops need the output alone (the NumPy performs, block
    temporaries besides); unfused, x's deviations and their squares too."""
    x, g, b = tn.matrix("x"), tn.vector("g"), tn.vector("b")
    a = np.random.default_rng(22).normal(size=(256, 512))
    args = [a, np.ones(512), np.zeros(512)]
    for linker, bound in (("c", 1.1), ("py", 1.7)):
        f = tn.function([x, g, b], _layer_norm(x, g, b), mode=tn.Mode(linker=linker))
        unfused = tn.function([x, g, b], _layer_norm(x, g, b),
                              mode=tn.Mode(linker=linker, **UNFUSED))
        assert _peak(f, *args) <= bound * a.nbytes, linker
        assert _peak(unfused, *args) >= 2 * a.nbytes, linker


def test_what_is_not_recomputed(mode):
    """An expensive op, an op with two full-size inputs, and a cheap op whose
    full-size input would otherwise be fused into it are stored once."""
    x, y, m = tn.matrix("x"), tn.matrix("y"), tn.matrix("m", shape=(None, 1))
    rng = np.random.default_rng(23)
    args = [rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), rng.normal(size=(4, 1))]
    for t in (tn.exp(x - m), x - y, tn.exp(x) - m):
        f = _compare([x, y, m], [t.sum(axis=1), t * 3], args, mode, rtol=1e-12)
        assert not any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes), str(t)


def test_intermediate_that_is_also_an_output(mode):
    x = tn.vector("x")
    t = tn.exp(x) * 2
    f = _compare([x], [t, tn.sin(t) * t + t], [np.linspace(-1, 1, 11)], mode)
    assert len(_composites(f)) == 2
    assert sum("exp" in str(n.op) for n in f.fgraph.apply_nodes) == 1


def test_diamond_whose_readers_are_all_inside_is_fused_whole(mode):
    x = tn.vector("x")
    t = tn.exp(x)
    f = _compare([x], tn.sin(t) + tn.cos(t), [np.linspace(-1, 1, 11)], mode)
    (node,) = _nodes(f)
    assert node.op.scalar_op.name == "Composite{t0 = exp(i0); sin(t0) + cos(t0)}"


def test_non_elementwise_nodes_break_the_group(mode):
    x = tn.matrix("x")
    y = tn.exp(tn.dot(tn.exp(x) + 1, x)) * 3
    f = _compare([x], y, [np.random.default_rng(5).normal(size=(4, 4)) * 0.3], mode)
    assert len(_composites(f)) == 2


def test_input_count_is_bounded(mode):
    xs = [tn.vector(f"x{i}") for i in range(MAX_INPUTS + 8)]
    y = xs[0]
    for v in xs[1:]:
        y = tn.sin(y) + v
    values = [np.full(3, 0.01 * i) for i in range(len(xs))]
    f = _compare(xs, y, values, mode)
    comps = _composites(f)
    assert len(comps) >= 2
    assert all(len(n.inputs) <= MAX_INPUTS for n in comps)


# --------------------------------------------------------------------------
# Fused == unfused


def test_float32_with_weak_constants_stays_float32(mode):
    x = tn.vector("x", dtype="float32")
    y = tn.exp(x * 0.1) * 2.5 + 1 - x / 3
    f = _compare([x], y, [np.linspace(-2, 2, 9, dtype=np.float32)], mode)
    assert f.fgraph.outputs[0].dtype == "float32"
    assert len(_nodes(f)) == 1


def test_int_inputs(mode):
    i = tn.vector("i", dtype="int8")
    j = tn.vector("j", dtype="int32")
    y = (i * 3 + j) // 2 - (i % 3) * j
    f = _compare([i, j], y, [np.arange(-5, 5, dtype=np.int8), np.arange(10, dtype=np.int32)],
                 mode)
    assert f.fgraph.outputs[0].dtype == "int32"
    # int8 with weak ints stays int8, even when it wraps
    k = tn.vector("k", dtype="int8")
    _compare([k], k * 100 + 27, [np.arange(-5, 5, dtype=np.int8)], mode)
    # true division of ints gives float64, comparisons bools
    _compare([i, j], tn.where(i > j, i / j, j * 1.5), [np.arange(-5, 5, dtype=np.int8),
                                                        np.arange(1, 11, dtype=np.int32)],
             mode)


def test_mixed_dtypes_and_casts(mode):
    x = tn.vector("x", dtype="float32")
    i = tn.vector("i", dtype="int64")
    y = tn.cast(tn.exp(x) * i, "float16") + tn.cast(i > 2, "float16") * 0.5
    _compare([x, i], y, [np.linspace(-1, 1, 6, dtype=np.float32), np.arange(6)], mode)


def test_complex(mode):
    x = tn.vector("x", dtype="complex128")
    _compare([x], tn.exp(x) * 1j + x * x, [np.array([1 + 2j, -0.5j, 3])], mode)


def test_broadcasting(mode):
    x = tn.matrix("x", shape=(None, 1))
    y = tn.matrix("y", shape=(1, None))
    rng = np.random.default_rng(6)
    f = _compare([x, y], tn.exp(x) * y + tn.sin(y), [rng.normal(size=(4, 1)),
                                                      rng.normal(size=(1, 5))], mode)
    assert len(_nodes(f)) == 1
    # unknown lengths that turn out to be 1 at run time
    a, b = tn.matrix("a"), tn.vector("b")
    _compare([a, b], tn.tanh(a - b) * (b + 1), [rng.normal(size=(3, 1)), rng.normal(size=4)],
             mode)
    # incompatible shapes still raise
    f = tn.function([a, b], tn.tanh(a - b) * (b + 1), mode=mode)
    with pytest.raises(ValueError):
        f(rng.normal(size=(3, 2)), rng.normal(size=4))


def test_large_arrays_blockwise_match(mode):
    x = tn.matrix("x")
    z = tn.vector("z")
    rng = np.random.default_rng(7)
    _compare([x, z], tn.exp(x) * 2 + tn.sin(z) * x, [rng.normal(size=(300, 700)),
                                                      rng.normal(size=700)], mode)


def test_in_place_is_not_broken(mode):
    x, z = tn.vector("x"), tn.vector("z")
    y = tn.exp(x) * 2 + tn.sin(z) * x
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=200_000), rng.normal(size=200_000)
    expected = np.exp(a) * 2 + np.sin(b) * a
    a_copy, b_copy = a.copy(), b.copy()
    # protected inputs stay untouched
    f = tn.function([x, z], y, mode=mode)
    # atol: compiled vector math may round exp/sin an ulp away from NumPy's
    np.testing.assert_allclose(f(a, b), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(a, a_copy)
    np.testing.assert_array_equal(b, b_copy)
    # a mutable input may serve as the output buffer; the result is still right
    f = tn.function([tn.In(x, borrow=True, mutable=True), z], y, mode=mode)
    np.testing.assert_allclose(f(a, b), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(b, b_copy)
    # the same array passed twice as a mutable input and a protected one
    c = a_copy.copy()
    g = tn.function([tn.In(x, borrow=True, mutable=True), z], y, mode=mode)
    np.testing.assert_allclose(g(c, c), np.exp(a_copy) * 2 + np.sin(a_copy) * a_copy,
                               rtol=1e-12)


def test_shared_variable_update_with_fused_expression(mode):
    w = tn.shared(np.linspace(0, 1, 5), name="w")
    x = tn.vector("x")
    f = tn.function([x], (w * x).sum(), updates=[(w, w - 0.1 * tn.tanh(x) * w)], mode=mode)
    g = tn.function([x], (w * x).sum(), updates=[(w, w - 0.1 * tn.tanh(x) * w)],
                    mode=tn.Mode(linker=mode.linker, **UNFUSED))
    w0 = w.get_value()
    v = np.linspace(-1, 1, 5)
    r1 = f(v)
    w1 = w.get_value()
    w.set_value(w0)
    r2 = g(v)
    np.testing.assert_allclose(r1, r2, rtol=1e-12)
    np.testing.assert_allclose(w1, w.get_value(), rtol=1e-12)


# --------------------------------------------------------------------------
# Memory


@pytest.mark.usefixtures("freeing_intermediates")
def test_memory_fused_elementwise_needs_no_full_intermediates():
    x, z = tn.vector("x"), tn.vector("z")
    y = tn.exp(x) * 2 + tn.sin(z) * x
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=1_000_000), rng.normal(size=1_000_000)
    out_bytes = a.nbytes
    fused = _peak(tn.function([x, z], y), a, b)
    unfused = _peak(tn.function([x, z], y, mode=tn.Mode(exclude=["fusion", "inplace"])), a, b)
    assert fused <= 1.3 * out_bytes, fused / out_bytes
    assert unfused >= 3 * out_bytes, unfused / out_bytes


@pytest.mark.usefixtures("freeing_intermediates")
def test_memory_fused_reduction_needs_no_intermediate():
    x = tn.vector("x")
    s = (tn.exp(x) * 2 + 1).sum()
    a = np.random.default_rng(10).normal(size=1_000_000)
    f = tn.function([x], s)
    assert any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)
    fused = _peak(f, a)
    unfused = _peak(tn.function([x], s, mode=tn.Mode(**UNFUSED)), a)
    assert fused <= 0.25 * a.nbytes, fused / a.nbytes
    assert unfused >= a.nbytes
    np.testing.assert_allclose(f(a), np.sum(np.exp(a) * 2 + 1), rtol=1e-12)


# --------------------------------------------------------------------------
# Reductions absorbing elementwise trees


@pytest.mark.parametrize("fn_name", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), ((0, 2), False),
                                            (2, False), ((1, 2), True)])
@pytest.mark.parametrize("block", [None, 3, 5, 12, 40])
def test_fused_reduction_matches(fn_name, axis, keepdims, block, mode):
    x = tn.tensor("x", shape=(None, None, None))
    z = tn.vector("z")
    values = tn.tanh(x) * 0.5 + tn.cos(z) * 0.7
    y = getattr(tn, fn_name)(values, axis=axis, keepdims=keepdims)
    rng = np.random.default_rng(11)
    args = [rng.normal(size=(3, 4, 5)), rng.normal(size=5)]
    # block sizes cutting (3, 4, 5) along each axis, with and without a short last block
    with small_blocks(4, block) if block else contextlib.nullcontext():
        f = _compare([x, z], y, args, mode, rtol=1e-12)
    assert any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)
    assert "fuse_reduce" in f.rewrites_applied


@pytest.mark.parametrize("dtype", ["int8", "bool", "float32", "uint8"])
@pytest.mark.parametrize("fn_name", ["sum", "prod", "max"])
def test_fused_reduction_dtypes(dtype, fn_name, mode):
    x = tn.matrix("x", dtype=dtype)
    y = getattr(tn, fn_name)(x * 2 if dtype != "bool" else tn.logical_not(x), axis=1)
    rng = np.random.default_rng(12)
    value = (rng.integers(0, 3, size=(6, 7)) if dtype != "float32"
             else rng.normal(size=(6, 7))).astype(dtype)
    with small_blocks():
        f = _compare([x], y, [value], mode, rtol=1e-5)
    assert any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)


def test_softmax_style_reduction(mode):
    m = tn.matrix("m")
    y = tn.exp(m - m.max(axis=1, keepdims=True)).sum(axis=1)
    rng = np.random.default_rng(13)
    f = _compare([m], y, [rng.normal(size=(400, 300))], mode)
    assert any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)


def test_reduction_not_fused_when_intermediate_is_needed(mode):
    x = tn.vector("x")
    t = tn.exp(x) * 2
    f = _compare([x], [t.sum(), t], [np.linspace(0, 1, 7)], mode)
    assert not any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)
    f = _compare([x], [t.sum(), t.max()], [np.linspace(0, 1, 7)], mode)
    assert not any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)
    # a mean of a result needed too, and reductions of plain inputs, are left alone
    f = _compare([x], [t.mean(), t, x.sum(), x.mean()], [np.linspace(0, 1, 7)], mode)
    assert not any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_a_mean_absorbs_its_elementwise_tree(dtype, mode):
    """mean(exp(x) ...) is a FusedReduce: the sum, then the count divided in
    double precision and rounded to the output dtype, as NumPy's mean (the
    variance of a layer norm, mean((x - mu) ** 2), reads x's deviations once).
    A mean of ints (a float result) is left whole."""
    x = tn.matrix("x", dtype=dtype)
    values = (x - x.mean(axis=1, keepdims=True)) ** 2 if dtype != "int32" else x * 3
    outs = [values.mean(axis=1, keepdims=True), (x * 2).mean(), (x + 1).mean(axis=0)]
    rng = np.random.default_rng(14)
    data = (rng.normal(size=(300, 200)) * 10).astype(dtype)
    with small_blocks():
        f = _compare([x], outs, [data], mode, rtol=1e-5 if dtype == "float32" else 1e-12)
    fused = [n for n in f.fgraph.apply_nodes if isinstance(n.op, FusedReduce)]
    if dtype == "int32":
        assert not fused
    else:
        assert len(fused) == 3 and {n.op.fn_name for n in fused} == {"mean"}


def test_fused_reduction_empty_and_errors(mode):
    x = tn.matrix("x")
    _compare([x], (tn.exp(x) + 1).sum(axis=0), [np.zeros((0, 3))], mode)
    f = tn.function([x], (tn.exp(x) + 1).max(axis=0), mode=mode)
    with pytest.raises(ValueError):
        f(np.zeros((0, 3)))


def test_fused_reduction_infer_shape_and_buffer_reuse(mode):
    x = tn.matrix("x")
    z = tn.vector("z")
    op = FusedReduce(_example_composite(), "sum", (0,), keepdims=True)
    y = op(x, z)
    assert y.type.shape == (1, None)

    def evaluated(dims):
        return tuple(int(tn.function([], d)()) if isinstance(d, tn.Variable) else d
                     for d in dims)

    (dims,) = op.infer_shape(y.owner, [(3, 4), (4,)])
    assert evaluated(dims) == (1, 4)
    op_max = FusedReduce(_example_composite(), "max", (1,))
    (dims,) = op_max.infer_shape(op_max.make_node(x, z), [(3, 4), (4,)])
    assert evaluated(dims) == (3,)
    f = tn.function([x, z], [y, tn.shape_tuple(y)[1] * 1], mode=mode)
    rng = np.random.default_rng(14)
    a, b = rng.normal(size=(300, 400)), rng.normal(size=400)
    got, n = f(a, b)
    assert n == 400
    np.testing.assert_allclose(got, np.sum(np.exp(a) * 2 + np.sin(b) * a, axis=0,
                                           keepdims=True), rtol=1e-12)
    # an output buffer kept between calls is reused
    cell = [np.empty((400,))]
    kept = cell[0]
    op2 = FusedReduce(_example_composite(), "sum", (0,))
    node2 = op2.make_node(x, z)
    op2.perform(node2, [a, b], [cell])
    assert cell[0] is kept
    np.testing.assert_allclose(kept, got[0], rtol=1e-12)


# --------------------------------------------------------------------------
# Gradients


def test_verify_grad_through_fused_graphs():
    def fn(x, z):
        return tn.exp(x * 0.3) * 2 + tn.sin(z) * x - tn.tanh(x * z) / (1 + z * z)

    rng = np.random.default_rng(15)
    points = [rng.normal(size=(3, 4)), rng.normal(size=(4,))]
    verify_grad(fn, points, rng=rng)
    verify_grad(fn, points, rng=rng, mode=tn.Mode(**UNFUSED))


def test_grad_graph_fused_equals_unfused(mode):
    x, z = tn.matrix("x"), tn.vector("z")
    cost = (tn.exp(x * 0.3) * 2 + tn.sin(z) * x * tn.sigmoid(x - z)).sum()
    grads = tn.grad(cost, [x, z])
    rng = np.random.default_rng(16)
    f = _compare([x, z], grads, [rng.normal(size=(5, 4)), rng.normal(size=4)], mode)
    assert _composites(f) or any(isinstance(n.op, FusedReduce) for n in f.fgraph.apply_nodes)


def test_grad_of_elemwise_composite_directly():
    comp = _example_composite()

    def fn(x, z):
        return Elemwise(comp)(x, z)

    rng = np.random.default_rng(17)
    verify_grad(fn, [rng.normal(size=(3, 4)), rng.normal(size=(4,))], rng=rng,
                mode=tn.Mode(**UNFUSED))
    verify_grad(fn, [rng.normal(size=(3, 4)), rng.normal(size=(4,))], rng=rng)


def test_grad_of_composite_with_shared_steps_int_inputs_and_where():
    # t0 = x * i (i an int: no gradient); where(x > 0, t0 * t0, -x)
    comp = Composite(2, [(ps.mul, [("i", 0), ("i", 1)]), (ps.mul, [("t", 0), ("t", 0)]),
                         (ps.greater, [("i", 0), ("c", 0)]), (ps.neg, [("i", 0)]),
                         (ps.where, [("t", 2), ("t", 1), ("t", 3)])])
    x = tn.vector("x")
    i = tn.vector("i", dtype="int64")
    y = Elemwise(comp)(x, i)
    gx, = tn.grad(y.sum(), [x])
    a = np.array([-1.5, 0.5, 2.0])
    iv = np.array([2, 3, -1])
    got = tn.function([x, i], gx)(a, iv)
    expected = np.where(a > 0, 2 * a * iv * iv, -1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_grad_of_fused_reduction():
    op_sum = FusedReduce(_example_composite(), "sum", (1,))
    op_max = FusedReduce(_example_composite(), "max", (0,), keepdims=True)
    rng = np.random.default_rng(18)
    points = [rng.normal(size=(3, 4)), rng.normal(size=(4,))]
    verify_grad(lambda x, z: op_sum(x, z), points, rng=rng)
    verify_grad(lambda x, z: op_max(x, z), points, rng=rng)
    with small_blocks():
        verify_grad(lambda x, z: op_sum(x, z), points, rng=rng)


# --------------------------------------------------------------------------
# Property test: random elementwise trees, fused == unfused

_UNARY = [tn.exp, tn.sin, tn.tanh, tn.neg, tn.square, tn.abs, tn.sigmoid, tn.cos]
_BINARY = [tn.add, tn.sub, tn.mul, tn.maximum, tn.minimum, tn.true_divide]
_CONSTANTS = [2, 0.5, -1.5, 3]


def draw_elementwise_tree(data):
    """A random tree of elementwise ops, `where`s and keepdims reductions over
    four leaves of different dtypes and broadcast patterns: (leaves, one or two
    outputs, the leaves' values)."""
    leaves = [tn.matrix("x"), tn.matrix("y", shape=(1, None)),
              tn.matrix("z", dtype="float32", shape=(None, 1)), tn.matrix("i", dtype="int32")]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    values = [rng.normal(size=(3, 4)), rng.normal(size=(1, 4)),
              rng.normal(size=(3, 1)).astype(np.float32), rng.integers(-3, 4, size=(3, 4),
                                                                      dtype=np.int32)]
    pool = list(leaves)
    n_nodes = data.draw(st.integers(1, 12), label="nodes")
    for _ in range(n_nodes):
        kind = data.draw(st.sampled_from(["unary", "binary", "const", "where", "reduce"]))
        pick = lambda: pool[data.draw(st.integers(0, len(pool) - 1))]  # noqa: E731
        if kind == "unary":
            node = data.draw(st.sampled_from(_UNARY))(pick())
        elif kind == "binary":
            node = data.draw(st.sampled_from(_BINARY))(pick(), pick())
        elif kind == "const":
            c = data.draw(st.sampled_from(_CONSTANTS))
            op = data.draw(st.sampled_from([tn.add, tn.mul, tn.sub]))
            node = op(pick(), c) if data.draw(st.booleans()) else op(c, pick())
        elif kind == "where":
            node = tn.where(tn.greater(pick(), pick()), pick(), pick())
        else:
            node = data.draw(st.sampled_from([tn.sum, tn.max, tn.prod]))(
                pick(), axis=data.draw(st.sampled_from([None, 0, 1])), keepdims=True)
        pool.append(node)
    n_out = data.draw(st.integers(1, 2))
    outputs = [pool[-1]] + [pool[data.draw(st.integers(len(leaves), len(pool) - 1))]
                            for _ in range(n_out - 1)]
    return leaves, outputs, values


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_elementwise_trees_fused_equals_unfused(data, mode):
    leaves, outputs, values = draw_elementwise_tree(data)
    blocks = data.draw(st.booleans(), label="blocks")
    with small_blocks() if blocks else contextlib.nullcontext():
        _compare(leaves, outputs, values, mode, rtol=1e-4)
