"""Canonicalization: each rewrite fires where it should (same values as without
rewrites), not where it must not, can be excluded by name or tag; and random
elementwise/reduction trees compute the same with and without rewrites."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.rewrites import canonicalize as canon
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Constant, Op
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.creation import Alloc, ExpandTo
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import Reduce, SumTo
from tenure.symbolic.ops.scan_grad import LoopGradient
from tenure.symbolic.ops.shape import DimShuffle, MakeVector, Reshape, Shape
from tenure.symbolic.types import TensorType

NONE = tn.Mode(rewrites="none")
#: for looking at the graph: fusion and in-place rewrites would hide the nodes
PLAIN = tn.Mode(exclude=["fusion", "inplace"])


def plain_without(*names):
    return tn.Mode(exclude=["fusion", "inplace", *names])


def nodes(f, cls=None, scalar_op=None):
    """The nodes of ``f``'s graph with an op of class ``cls`` (or an Elemwise of ``scalar_op``)."""
    found = []
    for node in f.fgraph.apply_nodes:
        if scalar_op is not None:
            if isinstance(node.op, Elemwise) and node.op.scalar_op == scalar_op:
                found.append(node)
        elif isinstance(node.op, cls):
            found.append(node)
    return found


def call(f, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*[np.copy(a) for a in args])


def assert_identical(got, expected):
    """Same dtype, shape and bits (NaN where NaN; the sign of zeros too)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    np.testing.assert_array_equal(got, expected)


def tolerance(dtype, rtol: float) -> float:
    """``rtol`` for float64 (and ints), widened to the precision of smaller floats."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc" and dtype.itemsize <= 4:
        return max(rtol, {2: 1e-2, 4: 1e-5}.get(dtype.itemsize, 1e-5))
    return rtol


def assert_close(got, expected, rtol=1e-12):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=tolerance(got.dtype, rtol), atol=1e-300,
                               equal_nan=True)


# --------------------------------------------------------------------------
# One case per rewrite: (inputs, output, arguments, "the pattern is still there")

R = np.random.default_rng(7)
V3 = R.uniform(-2, 2, 3)
M23 = R.uniform(-2, 2, (2, 3))


def _merge():
    x = tn.vector("x")
    return [x], tn.exp(x) + tn.exp(x), [V3], lambda f: len(nodes(f, scalar_op=ps.exp)) == 2


def _constant_folding():
    x = tn.vector("x")
    out = x + tn.constant(np.arange(3.0)) * 2.0
    return [x], out, [V3], lambda f: bool(nodes(f, scalar_op=ps.mul))


def _mul_by_one():
    x = tn.vector("x")
    return [x], 1 * (x * 1), [V3], lambda f: bool(nodes(f, scalar_op=ps.mul))


def _mul_by_filled_ones():
    x, n = tn.matrix("x"), tn.scalar("n", dtype="int64")
    return [x, n], tn.ones((n, 3)) * tn.exp(x), [M23, np.int64(2)], \
        lambda f: bool(nodes(f, Alloc))


def _div_by_one():
    x = tn.vector("x")
    return [x], tn.exp(x) / 1, [V3], lambda f: bool(nodes(f, scalar_op=ps.true_divide))


def _add_zero():
    x = tn.vector("x", dtype="int32")
    return ([x], 0 + (x + 0), [np.array([-1, 0, 5], dtype="int32")],
            lambda f: bool(nodes(f, scalar_op=ps.add)))


def _sub_zero():
    x = tn.vector("x")
    return ([x], tn.exp(x) - 0.0, [np.array([-0.0, 1.0, -np.inf])],
            lambda f: bool(nodes(f, scalar_op=ps.sub)))


def _double_negation():
    x = tn.vector("x")
    return ([x], tn.exp(-(-x)), [np.array([-0.0, np.nan, 2.0])],
            lambda f: bool(nodes(f, scalar_op=ps.neg)))


def _pow_to_square():
    x = tn.vector("x")
    return [x], x ** 2, [V3], lambda f: bool(nodes(f, scalar_op=ps.power))


def _pow_one():
    x = tn.vector("x")
    return [x], tn.exp(x ** 1), [V3], lambda f: bool(nodes(f, scalar_op=ps.power))


def _exp_of_log():
    x = tn.vector("x")
    out = tn.exp(tn.log(tn.exp(x))) + tn.exp(tn.log(tn.sigmoid(x))) + tn.exp(tn.log(tn.softplus(x)))
    return ([x], out, [np.array([-800.0, 0.0, 3.0])],
            lambda f: bool(nodes(f, scalar_op=ps.log)))


def _where_same_branches():
    x, c = tn.vector("x"), tn.scalar("c", dtype="bool")
    return ([x, c], tn.where(c, tn.exp(x), tn.exp(x)), [V3, np.array(True)],
            lambda f: bool(nodes(f, scalar_op=ps.where)))


def _useless_cast():
    x = tn.vector("x")
    out = Elemwise(ps.Cast("float64"))(tn.exp(x))
    return [x], out, [V3], lambda f: any(isinstance(n.op.scalar_op, ps.Cast)
                                         for n in nodes(f, Elemwise))


def _useless_alloc():
    t = tn.tensor("t", shape=(2, 3))
    return [t], tn.broadcast_to(tn.exp(t), (2, 3)), [M23], lambda f: bool(nodes(f, Alloc))


def _useless_sum_to():
    t = tn.tensor("t", shape=(2, 3))
    return [t], SumTo()(tn.exp(t), 2, 3), [M23], lambda f: bool(nodes(f, SumTo))


def _sum_to_leading_axes():
    t = tn.tensor("t", shape=(None, None, None))
    return ([t], SumTo()(tn.exp(t), 3), [R.uniform(-2, 2, (4, 2, 3))],
            lambda f: any(n.inputs[0].ndim > n.outputs[0].ndim for n in nodes(f, SumTo)))


def _sum_to_static_ones():
    m = tn.matrix("m")
    return ([m], SumTo()(tn.exp(m), m.shape[0], 1), [M23],
            lambda f: any(n.outputs[0].type.shape[1] == 1 and n.inputs[0].type.shape[1] != 1
                          for n in nodes(f, SumTo)))


def _dimshuffle_chain():
    m = tn.matrix("m")
    return ([m], tn.expand_dims(tn.exp(m).T, 0), [M23],
            lambda f: len(nodes(f, DimShuffle)) == 2)


def _useless_dimshuffle():
    v = tn.vector("v")
    return [v], tn.exp(v).T, [V3], lambda f: bool(nodes(f, DimShuffle))


def _reshape_chain():
    v = tn.vector("v")
    out = tn.exp(v).reshape((2, 6)).reshape((3, 4))
    return [v], out, [np.arange(12.0)], lambda f: len(nodes(f, Reshape)) == 2


def _useless_reshape():
    t = tn.tensor("t", shape=(2, 3))
    return [t], tn.exp(t).reshape((2, 3)), [M23], lambda f: bool(nodes(f, Reshape))


def _reduce_of_reduce():
    m = tn.matrix("m")
    return [m], m.sum(axis=0).sum(), [M23], lambda f: len(nodes(f, Reduce)) == 2


def _shape_lift():
    x = tn.vector("x")
    return [x], tn.exp(x).shape, [V3], lambda f: bool(nodes(f, scalar_op=ps.exp))


def _shape_index_lift():
    x = tn.vector("x")
    return [x], tn.exp(x).shape[0], [V3], lambda f: bool(nodes(f, scalar_op=ps.exp))


def _make_vector_index():
    a, b = tn.scalar("a"), tn.scalar("b")
    return ([a, b], tn.stack_scalars([tn.exp(a), tn.exp(b)])[1], [np.array(1.0), np.array(2.0)],
            lambda f: bool(nodes(f, MakeVector)))


def _loop_gradient():
    w, xs = tn.scalar("w"), tn.vector("xs")
    hs, _ = tn.scan(lambda xt, h: tn.tanh(h * w + xt), sequences=xs,
                    outputs_info=tn.constant(0.5))
    return ([w, xs], tn.grad(tn.sum(hs ** 2), w), [np.array(0.7), np.array([0.1, -0.2, 0.3])],
            lambda f: bool(nodes(f, LoopGradient)))


def _make_vector_of_shape():
    m = tn.matrix("m")
    v = tn.stack_scalars([m.shape[0], m.shape[1]])
    return [m], v, [M23], lambda f: bool(nodes(f, MakeVector))


CASES = {
    "merge": _merge,
    "loop_gradient": _loop_gradient,
    "constant_folding": _constant_folding,
    "mul_by_one": _mul_by_one,
    "mul_by_filled_ones": _mul_by_filled_ones,
    "div_by_one": _div_by_one,
    "add_zero": _add_zero,
    "sub_zero": _sub_zero,
    "double_negation": _double_negation,
    "pow_to_square": _pow_to_square,
    "pow_one": _pow_one,
    "exp_of_log": _exp_of_log,
    "where_same_branches": _where_same_branches,
    "useless_cast": _useless_cast,
    "useless_alloc": _useless_alloc,
    "useless_sum_to": _useless_sum_to,
    "sum_to_leading_axes": _sum_to_leading_axes,
    "sum_to_static_ones": _sum_to_static_ones,
    "dimshuffle_chain": _dimshuffle_chain,
    "useless_dimshuffle": _useless_dimshuffle,
    "reshape_chain": _reshape_chain,
    "useless_reshape": _useless_reshape,
    "reduce_of_reduce": _reduce_of_reduce,
    "shape_lift": _shape_lift,
    "shape_index_lift": _shape_index_lift,
    "make_vector_index": _make_vector_index,
    "make_vector_of_shape": _make_vector_of_shape,
}

#: rewrites whose result may differ from the original in the last bits (documented)
NOT_BITWISE = {"exp_of_log", "reduce_of_reduce", "sum_to_leading_axes", "sum_to_static_ones"}


def test_every_canonicalize_rewrite_has_a_case():
    from tenure.rewrites.engine import registered_rewrites
    names = {r.name for r in registered_rewrites().values() if r.phase == "canonicalize"}
    assert names == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrite_fires_and_keeps_values(name):
    inputs, out, args, present = CASES[name]()
    f = tn.function(inputs, out)
    assert name in f.rewrites_applied
    plain = tn.function(inputs, out, mode=PLAIN)
    assert not present(plain), [str(n) for n in plain.fgraph.apply_nodes]
    reference = tn.function(inputs, out, mode=NONE)
    assert present(reference)
    check = assert_close if name in NOT_BITWISE else assert_identical
    for g in (f, plain):
        check(call(g, *args), call(reference, *args))


@pytest.mark.parametrize("name", sorted(CASES))
def test_excluding_a_rewrite_by_name_leaves_its_node(name):
    inputs, out, args, present = CASES[name]()
    f = tn.function(inputs, out, mode=plain_without(name))
    assert name not in f.rewrites_applied
    assert present(f)
    reference = tn.function(inputs, out, mode=NONE)
    assert_close(call(f, *args), call(reference, *args))


@pytest.mark.parametrize("tag, name", [
    ("algebra", "mul_by_one"), ("fold", "constant_folding"), ("cse", "merge"),
    ("shape_ops", "useless_dimshuffle"), ("shape", "shape_index_lift"),
    ("reduce", "reduce_of_reduce"), ("canonicalize", "pow_to_square")])
def test_excluding_by_tag(tag, name):
    inputs, out, args, present = CASES[name]()
    f = tn.function(inputs, out, mode=plain_without(tag))
    assert name not in f.rewrites_applied
    assert present(f)


# --------------------------------------------------------------------------
# Where the rewrites must not fire


def _fires(name, inputs, out, *args):
    """Compile by default; compare with no rewrites; return whether ``name`` fired."""
    f = tn.function(inputs, out)
    ref = tn.function(inputs, out, mode=NONE)
    if args:
        assert_identical(call(f, *args), call(ref, *args))
    return name in f.rewrites_applied


def test_mul_by_one_keeps_dtype_and_broadcasting():
    # a weak Python 1 takes x's dtype: x * 1 is x
    x32 = tn.vector("x32", dtype="float32")
    f = tn.function([x32], x32 * 1)
    assert "mul_by_one" in f.rewrites_applied and f.fgraph.outputs[0].dtype == "float32"
    assert call(f, np.array([1.5], dtype="float32")).dtype == np.float32
    # ...a float64 array of ones does not
    assert not _fires("mul_by_one", [x32], x32 * np.ones(1), np.array([1.5], dtype="float32"))
    x8 = tn.vector("x8", dtype="int8")
    assert not _fires("mul_by_one", [x8], x8 * 1.0, np.array([1, -2, 3], dtype="int8"))
    b = tn.vector("b", dtype="bool")
    assert not _fires("mul_by_one", [b], b * 1, np.array([True, False]))
    assert _fires("mul_by_one", [b], b * True, np.array([True, False]))
    # ones of length 3 broadcast a length-1 x: x alone would have the wrong shape
    x = tn.vector("x")
    assert not _fires("mul_by_one", [x], x * np.ones(3), np.array([5.0]))
    assert call(tn.function([x], x * np.ones(3)), np.array([5.0])).shape == (3,)
    # ...but not a statically long-enough x
    x3 = tn.vector("x3", shape=(3,))
    assert _fires("mul_by_one", [x3], x3 * np.ones(3), V3)
    # ones of a different value do nothing
    assert not _fires("mul_by_one", [x], x * np.array([1.0, 1.0 + 1e-15]), V3[:2])


def test_mul_by_one_leaves_complex_alone():
    z = tn.vector("z", dtype="complex128")
    value = np.array([complex(np.inf, 1.0)])
    assert not _fires("mul_by_one", [z], z * 1)
    # NumPy's complex product gives inf+nanj here, not z
    with np.errstate(invalid="ignore"):
        expected = value * 1
    np.testing.assert_equal(call(tn.function([z], z * 1), value), expected)


def test_add_zero_respects_the_sign_of_zero():
    x = tn.vector("x")
    neg_zero = np.array([-0.0, 1.0])
    # x + 0.0 turns -0.0 into +0.0: not the identity
    assert not _fires("add_zero", [x], x + 0.0, neg_zero)
    assert not np.signbit(call(tn.function([x], x + 0.0), neg_zero)[0])
    assert not _fires("add_zero", [x], x + 0, neg_zero)
    # x + -0.0 is
    assert _fires("add_zero", [x], x + -0.0, neg_zero)
    assert np.signbit(call(tn.function([x], -0.0 + x), neg_zero)[0])
    # an int8 plus a float zero is a float: never x
    x8 = tn.vector("x8", dtype="int8")
    assert not _fires("add_zero", [x8], x8 + 0.0, np.array([1, 2], dtype="int8"))
    assert tn.function([x8], x8 + 0.0).fgraph.outputs[0].dtype != "int8"
    assert _fires("add_zero", [x8], x8 + 0, np.array([1, 2], dtype="int8"))


def test_sub_zero_respects_the_sign_of_zero():
    x = tn.vector("x")
    neg_zero = np.array([-0.0, 1.0])
    assert _fires("sub_zero", [x], x - 0.0, neg_zero)
    assert not _fires("sub_zero", [x], x - -0.0, neg_zero)
    assert not _fires("sub_zero", [x], 0.0 - x, neg_zero)


def test_double_negation_only_for_real_dtypes():
    z = tn.vector("z", dtype="complex128")
    assert not _fires("double_negation", [z], -(-z), np.array([1 + 2j]))
    x8 = tn.vector("x8", dtype="int8")
    assert _fires("double_negation", [x8], -(-x8), np.array([-128, 127, 0], dtype="int8"))


def test_pow_rewrites_keep_dtype():
    b = tn.vector("b", dtype="bool")
    assert not _fires("pow_to_square", [b], b ** 2, np.array([True, False]))
    x8 = tn.vector("x8", dtype="int8")
    assert _fires("pow_to_square", [x8], x8 ** 2, np.array([100, -3], dtype="int8"))
    assert not _fires("pow_to_square", [x8], x8 ** 2.0, np.array([100, -3], dtype="int8"))
    assert not _fires("pow_one", [x8], x8 ** 1.0, np.array([100, -3], dtype="int8"))
    x = tn.vector("x")
    assert not _fires("pow_to_square", [x], x ** 3)   # (pow_by_mul rounds it otherwise)
    # an exponent vector that broadcasts x is not x's shape
    assert not _fires("pow_one", [x], x ** np.ones(2), np.array([4.0]))


def test_exp_of_log_only_where_x_is_provably_non_negative():
    x = tn.vector("x")
    neg = np.array([-1.0, -0.0, 2.0])
    f = tn.function([x], tn.exp(tn.log(x)))
    assert "exp_of_log" not in f.rewrites_applied
    got = call(f, neg)
    assert np.isnan(got[0]) and not np.signbit(got[1])  # NaN and +0: not x
    assert not _fires("exp_of_log", [x], tn.exp(tn.log(tn.sqrt(x))), neg)
    assert not _fires("exp_of_log", [x], tn.exp(tn.log(-tn.exp(x))), neg)
    # an int input: log gives floats, x is an int: never x
    i = tn.vector("i", dtype="int64")
    assert not _fires("exp_of_log", [i], tn.exp(tn.log(tn.abs(i))), np.array([1, 2]))
    # constants: positive ones only (folding off, or it folds the pair first)
    mode = tn.Mode(exclude=["constant_folding"])
    f = tn.function([x], x + tn.exp(tn.log(tn.constant([2.0, 3.0]))), mode=mode)
    assert "exp_of_log" in f.rewrites_applied
    f = tn.function([x], x + tn.exp(tn.log(tn.constant([2.0, -3.0]))), mode=mode)
    assert "exp_of_log" not in f.rewrites_applied


def test_where_same_branches_not_when_the_condition_broadcasts():
    x, c = tn.vector("x"), tn.vector("c", dtype="bool")
    out = tn.where(c, x, x)
    assert not _fires("where_same_branches", [x, c], out, np.array([2.0]),
                      np.array([True, False]))
    assert call(tn.function([x, c], out), np.array([2.0]), np.array([True, False])).shape == (2,)


def test_useless_cast_only_to_the_same_dtype():
    x = tn.vector("x")
    assert not _fires("useless_cast", [x], tn.cast(x, "float32"), V3)
    assert not _fires("useless_cast", [x], Elemwise(ps.Cast("int64"))(x), V3)


def test_useless_alloc_and_sum_to_need_static_proof():
    m = tn.matrix("m", shape=(None, 3))
    one_row = np.ones((1, 3))
    assert not _fires("useless_alloc", [m], tn.broadcast_to(m, (2, 3)), one_row)
    t = tn.tensor("t", shape=(2, 3))
    assert not _fires("useless_alloc", [t], tn.broadcast_to(t, (4, 2, 3)), M23)
    summed = tn.function([t], SumTo()(t, 1, 3), mode=tn.Mode(exclude=["sum_to_static_ones"]))
    assert "useless_sum_to" not in summed.rewrites_applied
    # (sum_to_static_ones makes it a keepdims sum, after which the sum_to is useless)
    assert _fires("useless_sum_to", [t], SumTo()(t, 1, 3), M23)
    # a broadcast whose dims are only known at run time stays
    n = tn.scalar("n", dtype="int64")
    assert not _fires("useless_alloc", [t, n], tn.broadcast_to(t, (n, 3)), M23, np.array(2))


def test_dimshuffle_chain_keeps_the_length_one_check():
    m = tn.matrix("m")
    out = tn.expand_dims(tn.squeeze(m, axis=0), 1)  # drops axis 0: it must be 1
    for mode in (PLAIN, NONE):
        f = tn.function([m], out, mode=mode)
        assert call(f, np.ones((1, 3))).shape == (3, 1)
        with pytest.raises(ValueError):
            f(np.ones((2, 3)))
    assert len(nodes(tn.function([m], out, mode=PLAIN), DimShuffle)) == 1


def test_transpose_of_transpose_is_the_input():
    m = tn.matrix("m")
    f = tn.function([m], tn.exp(m).T.T, mode=PLAIN)
    assert not nodes(f, DimShuffle)
    assert_identical(call(f, M23), np.exp(M23))
    t3 = tn.tensor3("t3")
    f = tn.function([t3], tn.transpose(tn.transpose(t3, (1, 2, 0)), (2, 0, 1)), mode=PLAIN)
    assert not nodes(f, DimShuffle)


def test_reshape_rewrites_do_not_fire_where_wrong():
    t = tn.tensor("t", shape=(2, 3))
    assert not _fires("useless_reshape", [t], t.reshape((3, 2)), M23)
    # a transpose between two reshapes changes the element order
    v = tn.vector("v")
    out = v.reshape((2, 3)).T.reshape((6,))
    assert not _fires("reshape_chain", [v], out, np.arange(6.0))
    assert list(call(tn.function([v], out), np.arange(6.0))) == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("axes1, keep1, axes2, keep2", [
    ((0,), False, None, False), ((0,), True, (1,), False), ((1,), False, (0,), True),
    ((0, 2), True, (0, 1), True), ((1,), True, (1,), False), ((0,), False, (1,), False),
    ((), False, (0,), False), ((2,), False, (0,), True)])
@pytest.mark.parametrize("fn", ["sum", "max", "prod", "any"])
def test_reduce_of_reduce_axes_and_keepdims(fn, axes1, keep1, axes2, keep2):
    t = tn.tensor3("t", dtype="int8")
    value = R.integers(-3, 4, (2, 3, 4)).astype("int8")
    method = getattr(tn, fn)
    out = method(method(t, axis=axes1, keepdims=keep1), axis=axes2, keepdims=keep2)
    f = tn.function([t], out, mode=PLAIN)
    assert "reduce_of_reduce" in f.rewrites_applied
    assert len(nodes(f, Reduce)) == 1
    expected = getattr(np, fn)(getattr(np, fn)(value, axis=axes1, keepdims=keep1),
                               axis=axes2, keepdims=keep2)
    assert_identical(f(value), expected)


def test_reduce_of_reduce_needs_the_same_reduction():
    m = tn.matrix("m")
    assert not _fires("reduce_of_reduce", [m], m.max(axis=0).sum(), M23)
    assert not _fires("reduce_of_reduce", [m], m.mean(axis=0).mean(), M23)


def test_reduce_of_reduce_not_when_the_inner_result_is_needed_anyway():
    m = tn.matrix("m")
    inner = m.sum(axis=0)
    f = tn.function([m], [inner, inner.sum()])
    assert "reduce_of_reduce" not in f.rewrites_applied
    got = f(M23)
    assert_close(got[1], M23.sum(axis=0).sum())


def test_shape_of_exp_does_not_compute_exp():
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x).shape[0])
    assert not nodes(f, scalar_op=ps.exp)
    assert int(f(np.ones(5))) == 5
    m, v = tn.matrix("m"), tn.vector("v")
    out = (tn.exp(m) * v).sum(axis=1, keepdims=True).T.shape
    f = tn.function([m, v], out)
    assert not [n for n in f.fgraph.apply_nodes if not isinstance(n.op, (Shape, MakeVector))
                and not (isinstance(n.op, Elemwise) or type(n.op).__name__ == "Subtensor")]
    assert not nodes(f, scalar_op=ps.exp) and not nodes(f, Reduce)
    assert list(f(np.ones((2, 3)), np.ones(3))) == [1, 2]
    assert list(f(np.ones((2, 1)), np.ones(4))) == [1, 2]  # broadcast lengths


def test_static_shapes_become_constants():
    t = tn.tensor("t", shape=(2, 3))
    f = tn.function([t], tn.exp(t).shape)
    assert not f.fgraph.apply_nodes
    assert isinstance(f.fgraph.outputs[0], Constant)
    assert list(f(M23)) == [2, 3]


class _NoInferShape(Op):
    """exp without infer_shape: its shape needs its value."""

    def make_node(self, x):
        x = tn.as_tensor_variable(x)
        return Apply(self, [x], [TensorType(x.dtype, x.type.shape)()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.exp(inputs[0])


def test_shape_lift_needs_infer_shape():
    x = tn.vector("x")
    y = _NoInferShape()(x)
    for out in (y.shape, y.shape[0]):
        f = tn.function([x], out, mode=PLAIN)
        assert nodes(f, _NoInferShape)
        assert "shape_lift" not in f.rewrites_applied
        assert "shape_index_lift" not in f.rewrites_applied
        assert int(np.asarray(f(V3)).ravel()[0]) == 3
    # the shape of a root stays a Shape node
    assert nodes(tn.function([x], x.shape), Shape)


def test_make_vector_index_needs_a_constant_index():
    a, b = tn.scalar("a"), tn.scalar("b")
    i = tn.scalar("i", dtype="int64")
    out = tn.stack_scalars([a, b])[i]
    assert not _fires("make_vector_index", [a, b, i], out, np.array(1.0), np.array(2.0),
                      np.array(1))
    # the item is cast to the vector's dtype, as make_vector does
    k = tn.scalar("k", dtype="int32")
    out = tn.stack_scalars([a, k])[1]
    f = tn.function([a, k], out)
    assert "make_vector_index" in f.rewrites_applied
    assert_identical(call(f, np.array(1.5), np.array(7, dtype="int32")), np.array(7.0))


# --------------------------------------------------------------------------
# Constant folding and merging


def test_constant_folding_limits_the_size():
    x = tn.matrix("x")
    big = tn.zeros((200, 200))  # 40,000 elements: not folded
    f = tn.function([x], x + big, mode=PLAIN)
    assert nodes(f, Alloc)
    small = tn.zeros((20, 20))
    f = tn.function([x], x + small, mode=PLAIN)
    assert not nodes(f, Alloc)
    assert canon.FOLD_MAX_ELEMENTS == 10_000


def test_constant_folding_leaves_run_time_errors_to_run_time():
    x = tn.scalar("x")
    empty_max = tn.max(tn.constant(np.zeros((0,))))
    f = tn.function([x], x + empty_max, mode=PLAIN)
    assert nodes(f, Reduce)
    with pytest.raises(ValueError):
        f(1.0)


def test_constant_folding_never_folds_a_destroyer():
    c = tn.constant(np.ones(3))
    inplace_add = Elemwise(ps.add, {0: 0})
    out = inplace_add(c, 1.0)
    fg = FunctionGraph([], [out])
    assert canon.constant_folding(fg, out.owner) is None
    plain = tn.add(c, 1.0)
    folded = canon.constant_folding(FunctionGraph([], [plain]), plain.owner)
    np.testing.assert_array_equal(folded[0].data, [2.0, 2.0, 2.0])
    assert c.data.tolist() == [1.0, 1.0, 1.0]


def test_constant_folding_keeps_weak_constants_weak_in_the_result_dtype():
    x8 = tn.vector("x8", dtype="int8")
    out = x8 + (tn.as_tensor_variable(2) * 3)  # a weak 2 times a weak 3: int64 0-d
    f = tn.function([x8], out)
    ref = tn.function([x8], out, mode=NONE)
    assert_identical(call(f, np.array([1], dtype="int8")), call(ref, np.array([1], dtype="int8")))


def test_constant_folding_a_multi_output_node_with_an_unread_output():
    x = tn.vector("x")
    first, _ = tn.split(tn.constant(np.arange(4.0)), [2])
    f = tn.function([x], x + first, mode=PLAIN)
    assert "constant_folding" in f.rewrites_applied
    assert not [n for n in f.fgraph.apply_nodes if type(n.op).__name__ == "Split"]
    assert_identical(f(np.ones(2)), np.array([1.0, 2.0]))


def test_merge_identical_constants_and_nodes():
    x = tn.vector("x")
    out = (x + np.array([1.0, 2.0])) * (x + np.array([1.0, 2.0]))
    f = tn.function([x], out, mode=PLAIN)
    assert "merge" in f.rewrites_applied
    assert len(nodes(f, scalar_op=ps.add)) == 1
    consts = {i for n in f.fgraph.apply_nodes for i in n.inputs if isinstance(i, Constant)}
    assert len(consts) == 1
    assert_identical(call(f, V3[:2]), (V3[:2] + [1, 2]) ** 2)


def test_merge_keeps_weak_and_strong_constants_apart():
    x8 = tn.vector("x8", dtype="int8")
    weak = x8 + 1                     # int8
    strong = x8 + tn.constant(1)      # int64: the constant is a 0-d int64 array
    f = tn.function([x8], [weak, strong], mode=PLAIN)
    adds = nodes(f, scalar_op=ps.add)
    assert len(adds) == 2
    assert adds[0].inputs[1] is not adds[1].inputs[1]
    got = call(f, np.array([127], dtype="int8"))
    assert got[0].dtype == np.int8 and got[0][0] == -128
    assert got[1].dtype == np.int64 and got[1][0] == 128


def test_merge_never_merges_destroyers():
    x = tn.vector("x")
    inplace_exp = Elemwise(ps.exp, {0: 0})
    a, b = inplace_exp(x), inplace_exp(x)
    fg = FunctionGraph([x], [a, b])
    canon.merge(fg)
    assert len(fg.apply_nodes) == 2


def test_merge_multi_output_nodes():
    v = tn.vector("v")
    first = tn.split(v, [2])
    second = tn.split(v, [2])
    f = tn.function([v], first[0] + second[0], mode=PLAIN)
    assert len([n for n in f.fgraph.apply_nodes if type(n.op).__name__ == "Split"]) == 1
    assert_identical(f(np.arange(4.0)), np.array([0.0, 2.0]))


# --------------------------------------------------------------------------
# Random trees: the rewrites never change a result


LEAVES = ["x", "y", "i32", "zero", "negzero", "one", "two", "ones_row"]
UNARY = ["neg", "exp", "log", "sigmoid", "softplus", "square", "abs", "tanh", "sqrt",
         "sum0", "sum1", "max1", "TT", "expand_squeeze", "shape_mul", "cast_self", "reshape",
         # the shapes the rewrites look for
         "times_one", "plus_negzero", "negneg", "exp_log_exp", "log_one_plus", "exp_minus_one",
         "log_sum_exp", "log_sigmoid", "log_softmax"]
BINARY = ["add", "sub", "mul", "div", "pow", "where"]

# int32, not a smaller int: exp/log/sqrt of int8 are float16, too coarse to compare
# a stabilized graph with its unstable form at a useful tolerance.
VARIABLES = ["x", "y", "i32"]


@st.composite
def trees(draw, depth=None):
    """A random expression: leaves are mostly inputs, sometimes constants."""
    if depth is None:
        depth = draw(st.integers(1, 5))
    if depth == 0 or draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(VARIABLES * 3 + LEAVES))
    if draw(st.booleans()):
        return (draw(st.sampled_from(UNARY)), draw(trees(depth - 1)))
    return (draw(st.sampled_from(BINARY)), draw(trees(depth - 1)), draw(trees(depth - 1)))


def _build(tree, env):
    if isinstance(tree, str):
        return {"zero": 0, "negzero": -0.0, "one": 1, "two": 2,
                "ones_row": tn.constant(np.ones((1, 3)))}.get(tree, env.get(tree))
    op, *args = tree
    vals = [_build(a, env) for a in args]
    if all(not isinstance(v, tn.Variable) for v in vals):
        vals[0] = tn.as_tensor_variable(vals[0])  # an op on Python numbers alone
    a = vals[0]
    if op in BINARY:
        b = vals[1]
        if op == "where":
            return tn.where(tn.greater(a, 0.5), a, b)
        return {"add": tn.add, "sub": tn.sub, "mul": tn.mul, "div": tn.true_divide,
                "pow": lambda p, q: tn.power(p, 2) if isinstance(q, tn.Variable) else
                tn.power(p, q)}[op](a, b)
    a = tn.as_tensor_variable(a)
    if op in ("sum0", "sum1", "max1"):
        if a.ndim < 2:
            return a
        fn = tn.max if op == "max1" else tn.sum
        return fn(a, axis=int(op[-1]), keepdims=True)
    if op == "TT":
        return a.T.T
    if op == "expand_squeeze":
        return tn.squeeze(tn.expand_dims(a, 0), 0)
    if op == "shape_mul":
        return a * a.shape[-1] if a.ndim else a
    if op == "times_one":
        return 1 * a * 1
    if op == "plus_negzero":
        return a + -0.0
    if op == "negneg":
        return -(-a)
    if op == "exp_log_exp":
        return tn.exp(tn.log(tn.exp(a)))
    if op == "log_one_plus":
        return tn.log(1 + a)
    if op == "exp_minus_one":
        return tn.exp(a) - 1
    if op == "log_sum_exp":
        return tn.log(tn.sum(tn.exp(a), axis=-1, keepdims=True)) if a.ndim else a
    if op == "log_sigmoid":
        return tn.log(tn.sigmoid(a))
    if op == "log_softmax":
        return tn.log(tn.softmax(a)) if a.ndim else a
    if op == "cast_self":
        return Elemwise(ps.Cast(a.dtype))(a)
    if op == "reshape":
        return a.reshape((-1,)).reshape(tn.shape(a)) if a.ndim == 2 else a
    return getattr(tn, {"neg": "neg", "abs": "abs"}.get(op, op))(a)


def _compare_loose(got, ref):
    """Where the reference is finite, the rewritten graph is close to it."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    finite = np.isfinite(ref) if ref.dtype.kind in "fc" else np.ones(ref.shape, bool)
    rtol = tolerance(ref.dtype, 1e-7)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=1e-9)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), final=st.sampled_from(["none", "sum", "sum_sum", "max_keep", "shape0"]),
       seed=st.integers(0, 2**16))
def test_random_trees_same_with_and_without_rewrites(tree, final, seed):
    env = {"x": tn.matrix("x"), "y": tn.matrix("y"), "i32": tn.matrix("i32", dtype="int32")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = tn.as_tensor_variable(_build(tree, env))
            if final == "sum":
                out = tn.sum(out)
            elif final == "sum_sum" and out.ndim == 2:
                out = tn.sum(tn.sum(out, axis=1), axis=0)
            elif final == "max_keep" and out.ndim == 2:
                out = tn.max(tn.max(out, axis=0, keepdims=True), axis=1)
            elif final == "shape0" and out.ndim:
                out = out.shape[0] + out.sum(axis=0)
    except TypeError:
        event("not buildable")
        return  # e.g. a bitwise-only dtype combination NumPy refuses
    rng = np.random.default_rng(seed)
    values = [rng.uniform(-2, 2, (2, 3)), rng.uniform(-2, 2, (2, 3)),
              rng.integers(-3, 4, (2, 3)).astype("int32")]
    values[0][0, 0] = -0.0  # signed zeros must survive
    inputs = [env["x"], env["y"], env["i32"]]
    ref = call(tn.function(inputs, out, mode=NONE, on_unused_input="ignore"), *values)
    # Canonicalization alone changes no value (up to the documented reassociation).
    canon_only = tn.function(inputs, out, mode=tn.Mode(exclude=["stabilize"]),
                             on_unused_input="ignore")
    assert_close(call(canon_only, *values), ref, rtol=1e-9)
    # Stabilization may make a non-finite reference finite, never the reverse.
    full = tn.function(inputs, out, on_unused_input="ignore")
    for name in set(full.rewrites_applied):
        event(name)
    _compare_loose(call(full, *values), ref)


# --------------------------------------------------------------------------
# Products with ones: the gradient of sum(f(x) * w)


@pytest.mark.parametrize("x_shape, w_shape", [
    ((4, 3), (4, 3)),      # same shape: expand_to is w itself
    ((4, 3), (3,)),        # w broadcast along rows: a copy of the broadcast w
    ((1, 3), (4, 3)),      # the product broadcast by x: the gradient sums rows
    ((4, 1), (1, 3)),      # both broadcast
])
def test_gradient_of_a_weighted_sum_needs_no_product_with_ones(x_shape, w_shape, mode):
    x = tn.tensor("x", shape=(None,) * len(x_shape))
    w = tn.tensor("w", shape=(None,) * len(w_shape))
    g = tn.grad(tn.sum(tn.exp(x) * w), x)
    f = tn.function([x, w], g, mode=mode)
    assert "mul_by_filled_ones" in f.rewrites_applied
    assert not nodes(f, Alloc) and nodes(f, ExpandTo)
    xv, wv = R.uniform(-1, 1, x_shape), R.uniform(-1, 1, w_shape)
    reference = tn.function([x, w], g, mode=tn.Mode(linker="py", rewrites="none"))
    assert_close(call(f, xv, wv), call(reference, xv, wv))


def test_mul_by_filled_ones_keeps_dtype_and_refuses_other_fills():
    x32 = tn.matrix("x32", dtype="float32")
    n = tn.scalar("n", dtype="int64")
    xv = M23.astype("float32")
    # ones of the product's dtype: fires, and the result stays float32
    assert _fires("mul_by_filled_ones", [x32, n], tn.ones((n, 3), dtype="float32") * x32,
                  xv, np.int64(2))
    # float64 ones make a float64 product: x32 alone would have the wrong dtype
    assert not _fires("mul_by_filled_ones", [x32, n], tn.ones((n, 3)) * x32, xv, np.int64(2))
    # a fill of twos is no identity
    assert not _fires("mul_by_filled_ones", [x32, n],
                      tn.full((n, 3), 2, dtype="float32") * x32, xv, np.int64(2))


def test_mul_by_filled_ones_keeps_the_broadcast_error():
    x, n = tn.matrix("x"), tn.scalar("n", dtype="int64")
    f = tn.function([x, n], tn.ones((n, 3)) * tn.exp(x))
    assert "mul_by_filled_ones" in f.rewrites_applied
    with pytest.raises(ValueError, match=r"cannot be broadcast to \(4, 3\)"):
        f(M23, np.int64(4))


def test_an_in_place_write_into_an_expanded_value_keeps_every_reader_right(mode):
    """``ones * t`` is ``t``'s own memory when nothing broadcasts: an op that
    overwrites it then overwrites ``t``, and must wait for ``t``'s other readers;
    when it broadcasts, the copy is overwritten and ``t`` stays as it was."""
    a, n = tn.matrix("a"), tn.scalar("n", dtype="int64")
    t = tn.exp(a)
    total = tn.sum(t * 2.0)         # another reader of t, run before the write
    outs = [tn.sin(tn.ones((n, 3)) * t) + total, total]
    f = tn.function([a, n], outs, mode=mode)
    if mode.linker in ("py", "c"):  # the in-place rewrite writes through the expanded value
        writer = f.fgraph.outputs[0].owner
        assert writer.op.destroy_map and isinstance(writer.inputs[0].owner.op, ExpandTo)
    reference = tn.function([a, n], outs, mode=tn.Mode(linker="py", rewrites="none"))
    for av, nv in ((M23, 2), (M23[:1], 2), (M23[:1], 5)):
        for got, want in zip(call(f, av, np.int64(nv)), call(reference, av, np.int64(nv))):
            assert_close(got, want)


def test_softmax_gradient_holds_one_array_at_its_peak(mode):
    """The benchmark's softmax_grad: without the product with ones its peak is
    the softmax alone (the last op writes into it), where the product's copy
    of ``w`` made it two arrays (JAX's figure is one)."""
    x, w = tn.matrix("x", dtype="float32"), tn.matrix("w", dtype="float32")
    g = tn.grad(tn.sum(tn.softmax(x, axis=1) * w), x)
    f = tn.function([tn.In(x, borrow=True), tn.In(w, borrow=True)], tn.Out(g, borrow=True),
                    mode=mode)
    xv = R.standard_normal((256, 512)).astype("float32")
    wv = R.standard_normal((256, 512)).astype("float32")
    f(xv, wv)
    report = f.memory_report(xv, wv, print_report=False)
    one_array = xv.nbytes      # the Python executor's NumPy temporaries add about 0.3
    assert report.predicted_peak <= 1.5 * one_array, report.predicted_peak / one_array
    if mode.linker != "check":  # which runs every perform again on copies, by design
        assert report.measured_peak <= 1.5 * one_array, report.measured_peak / one_array
    s = np.exp(xv - xv.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(f(xv, wv), s * (wv - (s * wv).sum(axis=1, keepdims=True)),
                               rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------
# The checks a rewrite removes must be redundant: on every linker


#: every linker a rewritten graph runs on (not only the file's usual py and check)
EVERY_LINKER = ["py", "check", "c", "dask", "cuda"]


def _linker_mode(name: str) -> tn.Mode:
    from tenure.linkers.c import compiler
    from tests.conftest import mode_for
    if name in ("c", "cuda") and compiler.find_compiler() is None:
        pytest.skip("no working C compiler")
    if name == "dask":
        pytest.importorskip("dask")
    return mode_for(name)


def _to_host(value):
    return value.get() if hasattr(value, "get") else value


def _reshape_to_a_static_shape_then_minus_one():
    v = tn.vector("v")  # (1, 2, 1) has 2 elements: 8 must not pass as (4, 2, 1)
    out = tn.reshape(tn.reshape(v, (1, 2, 1)), (-1, 2, 1))
    assert out.type.shape == (1, 2, 1)
    return [v], out, [np.arange(2.0)], [np.arange(8.0)], "reshape", ["(8,)", "(1,2,1)"]


def _reshape_to_a_symbolic_shape_then_a_static_one():
    v, n = tn.vector("v"), tn.scalar("n", dtype="int64")
    out = tn.reshape(tn.reshape(v, (n, -1)), (6,))  # 6 elements do not fill rows of 4
    return ([v, n], out, [np.arange(6.0), np.int64(2)], [np.arange(6.0), np.int64(4)],
            "reshape", ["(6,)", "(4,-1)"])


def _product_with_ones_of_another_length():
    x, n = tn.matrix("x"), tn.scalar("n", dtype="int64")
    out = tn.exp(x) * tn.ones((n, 3))  # x first: its length decided the result's
    return ([x, n], out, [M23, np.int64(2)], [M23, np.int64(4)], "broadcast",
            ["(2,3)", "(4,3)"])


def _ones_of_another_length_times_a_static_shape():
    t, n = tn.tensor("t", shape=(2, 3)), tn.scalar("n", dtype="int64")
    out = tn.ones((n, 3)) * tn.exp(t)  # the result's static (2, 3) came from t alone
    assert out.type.shape == (2, 3)
    return ([t, n], out, [M23, np.int64(1)], [M23, np.int64(4)], "broadcast",
            ["(2,3)", "(4,3)"])


def _squeeze_then_expand():
    m = tn.matrix("m")
    out = tn.expand_dims(tn.squeeze(m, axis=0), 1)  # dimshuffle_chain: axis 0 must be 1
    return [m], out, [np.ones((1, 3))], [np.ones((2, 3))], "DimShuffle", ["(2,3)"]


CHECKED_BY_THE_REMOVED_NODE = {
    "reshape_chain, static": _reshape_to_a_static_shape_then_minus_one,
    "reshape_chain, symbolic": _reshape_to_a_symbolic_shape_then_a_static_one,
    "mul_by_filled_ones, x first": _product_with_ones_of_another_length,
    "mul_by_filled_ones, static x": _ones_of_another_length_times_a_static_shape,
    "dimshuffle_chain": _squeeze_then_expand,
}


@pytest.mark.parametrize("linker", EVERY_LINKER)
@pytest.mark.parametrize("case", sorted(CHECKED_BY_THE_REMOVED_NODE))
def test_rewrites_keep_the_shape_checks_the_static_shapes_rely_on(case, linker, request):
    """What raises without rewrites raises with them, on every linker, with a
    ValueError naming the op and the shapes; what runs gives the same result."""
    inputs, out, good, bad, op_word, shapes = CHECKED_BY_THE_REMOVED_NODE[case]()
    reference = tn.function(inputs, out, mode=tn.Mode(linker="py", rewrites="none"))
    f = tn.function(inputs, out, mode=_linker_mode(linker))
    assert_close(_to_host(call(f, *good)), call(reference, *good))
    with pytest.raises(ValueError) as expected:
        call(reference, *bad)
    with pytest.raises(ValueError) as got:
        call(f, *bad)
    message = str(got.value)
    assert op_word.lower() in message.lower(), (message, str(expected.value))
    for shape in shapes:
        assert shape in message.replace(" ", ""), (message, shape)


def test_reshape_chain_still_fires_where_the_first_check_is_redundant():
    v, m = tn.vector("v"), tn.matrix("m")
    n = tn.scalar("n", dtype="int64")
    # a flattening cannot fail; reshaping back to the shape it came from is m itself
    f = tn.function([m], m.reshape((-1,)).reshape(tn.shape(m)), mode=PLAIN)
    assert "reshape_chain" in f.rewrites_applied and not nodes(f, Reshape)
    assert_identical(call(f, M23), M23)
    # fully static middle and final shapes: one reshape to the final constant shape
    f = tn.function([v], v.reshape((2, 6)).reshape((-1, 4)), mode=PLAIN)
    assert "reshape_chain" in f.rewrites_applied and len(nodes(f, Reshape)) == 1
    assert f.fgraph.outputs[0].type.shape == (3, 4)
    # a symbolic first shape checks what the second need not: both stay
    f = tn.function([v, n], v.reshape((n, -1)).reshape((6,)), mode=PLAIN)
    assert "reshape_chain" not in f.rewrites_applied and len(nodes(f, Reshape)) == 2
