"""Stabilization: each rewrite turns a formula that overflows or underflows
into a finite, correct one; it fires only where it should and can be
excluded by name (or all at once with ``exclude=["stabilize"]``)."""

import warnings

import numpy as np
import pytest
import scipy.special

import tenure as tn
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax

UNSTABLE = tn.Mode(exclude=["stabilize"])
NONE = tn.Mode(rewrites="none")
PLAIN = tn.Mode(exclude=["fusion", "inplace"])


def call(f, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*args)


def has(f, cls=None, scalar_op=None):
    for node in f.fgraph.apply_nodes:
        if scalar_op is not None:
            if isinstance(node.op, Elemwise) and node.op.scalar_op == scalar_op:
                return True
        elif isinstance(node.op, cls):
            return True
    return False


def check(inputs, out, args, name, reference, rtol=1e-13):
    """``out`` without stabilization is not finite where ``reference`` is (or
    flushes it to 0); stabilized it fires ``name`` and matches ``reference``."""
    unstable = call(tn.function(inputs, out, mode=UNSTABLE), *args)
    none = call(tn.function(inputs, out, mode=NONE), *args)
    np.testing.assert_array_equal(unstable, none)
    reference = np.asarray(reference)
    assert np.all(np.isfinite(reference))
    broken = ~np.isfinite(unstable) | ((unstable == 0) & (reference != 0))
    assert np.any(broken), unstable
    f = tn.function(inputs, out)
    assert name in f.rewrites_applied
    got = call(f, *args)
    assert got.dtype == unstable.dtype and got.shape == unstable.shape
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, reference, rtol=rtol, atol=0)
    return f


# --------------------------------------------------------------------------
# The five rewrites, each on values where the formula as written breaks


def test_log_softmax():
    x = tn.matrix("x")
    value = np.array([[0.0, -1000.0, 5.0], [1e3, 0.0, -2e3]])
    check([x], tn.log(tn.softmax(x, axis=1)), [value], "log_softmax",
          scipy.special.log_softmax(value, axis=1))
    assert has(tn.function([x], tn.log(tn.softmax(x, axis=1)), mode=PLAIN), LogSoftmax)
    # another axis, kept by the rewrite
    check([x], tn.log(tn.softmax(x, axis=0)), [value.T.copy()], "log_softmax",
          scipy.special.log_softmax(value.T, axis=0))


@pytest.mark.parametrize("form", ["one_plus_x", "x_plus_one", "ones_array", "float32"])
def test_log1p(form):
    dtype = "float32" if form == "float32" else "float64"
    x = tn.vector("x", dtype=dtype, shape=(3,))
    value = np.array([1e-20, -3e-17, 2.5e-10], dtype=dtype)
    if form == "one_plus_x" or form == "float32":
        out = tn.log(1 + x)
    elif form == "x_plus_one":
        out = tn.log(x + 1.0)
    else:
        out = tn.log(np.ones(3, dtype=dtype) + x)
    check([x], out, [value], "log1p", np.log1p(value.astype("float64")).astype(dtype),
          rtol=1e-6 if dtype == "float32" else 1e-15)
    assert has(tn.function([x], out, mode=PLAIN), scalar_op=ps.log1p)


@pytest.mark.parametrize("form", ["exp_minus_one", "exp_plus_minus_one", "minus_one_plus_exp"])
def test_expm1(form):
    x = tn.vector("x")
    value = np.array([1e-20, -4e-18, 3e-12])
    out = {"exp_minus_one": lambda: tn.exp(x) - 1,
           "exp_plus_minus_one": lambda: tn.exp(x) + -1,
           "minus_one_plus_exp": lambda: -1.0 + tn.exp(x)}[form]()
    check([x], out, [value], "expm1", np.expm1(value), rtol=1e-15)
    assert has(tn.function([x], out, mode=PLAIN), scalar_op=ps.expm1)


@pytest.mark.parametrize("build", [lambda x: tn.log(1 + x), lambda x: tn.exp(x) - 1],
                         ids=["log1p", "expm1"])
def test_a_negative_zero_keeps_the_formula_s_sign(build):
    """``log1p(-0.0)`` and ``expm1(-0.0)`` are ``-0.0``; the formulas give
    ``+0.0``, and a division by the result must give the formula's infinity
    (hypothesis found ``y / (x - log(1 + x))`` turning ``-inf`` into ``+inf``)."""
    x = tn.vector("x")
    value = np.array([-0.0, 0.0, 1e-20, -0.5])
    for out in (build(x), 1.0 / build(x)):
        stable, reference = tn.function([x], out), tn.function([x], out, mode=NONE)
        got, want = call(stable, value), call(reference, value)
        np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(want[:2]))
        np.testing.assert_array_equal(got[:2], want[:2])


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, False), (1, True), (0, True)])
def test_logsumexp(axis, keepdims):
    x = tn.matrix("x")
    value = np.array([[1000.0, 1000.0, 0.0], [-1000.0, -1001.0, -2000.0]])
    out = tn.log(tn.sum(tn.exp(x), axis=axis, keepdims=keepdims))
    reference = scipy.special.logsumexp(value, axis=axis, keepdims=keepdims)
    f = check([x], out, [value], "logsumexp", reference)
    assert call(f, value).shape == np.shape(reference)
    assert has(tn.function([x], out, mode=PLAIN), LogSumExp)


def test_log_sigmoid():
    x = tn.vector("x")
    value = np.array([-1000.0, -750.0, -30.0, 0.0, 40.0])
    # log(sigmoid(x)) = -log(1 + exp(-x)), computed in high precision
    reference = -np.logaddexp(0, -value)
    check([x], tn.log(tn.sigmoid(x)), [value], "log_sigmoid", reference)
    assert not has(tn.function([x], tn.log(tn.sigmoid(x)), mode=PLAIN), scalar_op=ps.sigmoid)


def test_log_sigmoid_against_high_precision():
    import mpmath
    x = tn.vector("x")
    value = np.array([-745.5, -36.7, -1e-3, 17.25, 36.8])
    with mpmath.workdps(60):
        expected = [float(-mpmath.log(1 + mpmath.exp(-mpmath.mpf(v)))) for v in value]
    got = call(tn.function([x], tn.log(tn.sigmoid(x))), value)
    np.testing.assert_allclose(got, expected, rtol=1e-15)


SOFTPLUS_FORMS = [
    # (formula, reference in float64 from np.logaddexp)
    (lambda x: tn.log(1 - tn.sigmoid(x)), lambda v: -np.logaddexp(0, v)),
    (lambda x: tn.log1p(-tn.sigmoid(x)), lambda v: -np.logaddexp(0, v)),
    (lambda x: tn.log(1 / (1 + tn.exp(-x))), lambda v: -np.logaddexp(0, -v)),
    (lambda x: tn.log(1 + tn.exp(x)), lambda v: np.logaddexp(0, v)),
    (lambda x: tn.log1p(tn.exp(x)), lambda v: np.logaddexp(0, v)),
]


@pytest.mark.parametrize("k", range(len(SOFTPLUS_FORMS)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log_sigmoid_forms_become_softplus(k, dtype):
    """``log(1 - sigmoid(x))`` at ``x = 50`` is ``-inf`` as written (the sigmoid
    rounds to 1) and ``-50`` exactly; the other spellings likewise."""
    build, reference = SOFTPLUS_FORMS[k]
    x = tn.vector("x", dtype=dtype)
    value = np.array([-1000.0, -50.0, -1.0, 0.0, 1e-3, 30.0, 50.0, 1000.0], dtype=dtype)
    rtol = 1e-6 if dtype == "float32" else 1e-13
    check([x], build(x), [value], "log_sigmoid", reference(value.astype(np.float64)),
          rtol=rtol)
    f = tn.function([x], build(x), mode=PLAIN)
    assert not has(f, scalar_op=ps.sigmoid) and not has(f, scalar_op=ps.exp)
    assert has(f, scalar_op=ps.softplus)


def test_a_sigmoid_written_out_with_another_constant_is_left_alone():
    x = tn.vector("x")
    v = np.array([0.5, -3.0])
    assert not _fired("log_sigmoid", [x], tn.log(2 / (1 + tn.exp(-x))), v)
    assert not _fired("log_sigmoid", [x], tn.log(1 / (2 + tn.exp(-x))), v)
    assert not _fired("log_sigmoid", [x], tn.log(1 / (1 + tn.exp(x))), v)
    assert not _fired("log_sigmoid", [x], tn.log(2 - tn.sigmoid(x)), v)


# --------------------------------------------------------------------------
# Where they must not fire


def _fired(name, inputs, out, *args):
    f = tn.function(inputs, out)
    if args:
        ref = tn.function(inputs, out, mode=NONE)
        np.testing.assert_array_equal(call(f, *args), call(ref, *args))
    return name in f.rewrites_applied


def test_not_on_integer_inputs():
    i8 = tn.vector("i8", dtype="int8")
    big = np.array([127, -128], dtype="int8")
    # 1 + int8(127) wraps to -128: log1p(127) would change the value
    assert not _fired("log1p", [i8], tn.log(1 + i8), big)
    assert not _fired("expm1", [i8], tn.exp(i8) - 1)
    assert not _fired("logsumexp", [i8], tn.log(tn.sum(tn.exp(i8))))
    # -(-128) wraps in int8: -softplus(-x) would be wrong
    assert not _fired("log_sigmoid", [i8], tn.log(tn.sigmoid(i8)), big)
    assert not _fired("log_softmax", [i8], tn.log(tn.softmax(i8)), big)


def test_not_on_other_constants_or_shapes():
    x = tn.vector("x")
    v = np.array([0.5])
    assert not _fired("log1p", [x], tn.log(2 + x), v)
    assert not _fired("log1p", [x], tn.log(1 - x), v)
    assert not _fired("expm1", [x], tn.exp(x) - 2, v)
    assert not _fired("expm1", [x], 1 - tn.exp(x), v)
    # ones of length 3 would broadcast a length-1 x: log1p(x) has the wrong shape
    assert not _fired("log1p", [x], tn.log(np.ones(3) + x), v)
    assert call(tn.function([x], tn.log(np.ones(3) + x)), v).shape == (3,)
    assert not _fired("logsumexp", [x], tn.log(tn.mean(tn.exp(x))), v)
    assert not _fired("logsumexp", [x], tn.log(tn.sum(tn.sigmoid(x))), v)
    assert not _fired("log_sigmoid", [x], tn.log(tn.softplus(x)), v)
    # a dtype-changing 1: float32 x plus a float64 array of ones is float64
    x32 = tn.vector("x32", dtype="float32", shape=(1,))
    assert not _fired("log1p", [x32], tn.log(np.ones(1) + x32), v.astype("float32"))


#: softmax and log-softmax written out by hand: (build, the op it is, axis,
#: whether the form as written breaks where exp overflows)
BY_HAND = [
    (lambda x: tn.exp(x) / tn.exp(x).sum(axis=1, keepdims=True), Softmax, 1, True),
    (lambda x: tn.exp(x - x.max(axis=1, keepdims=True))
     / tn.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True), Softmax, 1, False),
    (lambda x: tn.exp(x - tn.log(tn.exp(x).sum(axis=0, keepdims=True))), Softmax, 0, True),
    (lambda x: tn.exp(tn.log_softmax(x, axis=1)), Softmax, 1, False),
    (lambda x: x - tn.log(tn.exp(x).sum(axis=1, keepdims=True)), LogSoftmax, 1, True),
    (lambda x: x - tn.logsumexp(x, axis=1, keepdims=True), LogSoftmax, 1, False),
    (lambda x: (x - x.max(axis=(0, 1), keepdims=True))
     - tn.log(tn.exp(x - x.max(axis=(0, 1), keepdims=True)).sum(axis=1, keepdims=True)),
     LogSoftmax, 1, False),
]


@pytest.mark.parametrize("k", range(len(BY_HAND)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_written_out_by_hand_becomes_the_op(k, dtype):
    """Rewritten, each form is the op, to the bit; where exp overflows (x of
    100 in float32, 1000 in float64) the naive forms as written give NaN,
    infinities or zeros for nonzero values."""
    build, op, axis, naive = BY_HAND[k]
    x = tn.matrix("x", dtype=dtype)
    big = 100.0 if dtype == "float32" else 1000.0
    value = np.array([[0.0, big, -big], [1.0, 2.0, big]], dtype=dtype)
    f = tn.function([x], build(x), mode=PLAIN)
    assert "softmax_by_hand" in f.rewrites_applied and has(f, op)
    assert not has(f, scalar_op=ps.exp)
    reference = tn.function([x], op((axis,))(x), mode=PLAIN)
    expected = call(reference, value)
    np.testing.assert_array_equal(call(f, value), expected)
    as_written = call(tn.function([x], build(x), mode=UNSTABLE), value)
    broken = ~np.isfinite(as_written) | ((as_written == 0) & (expected != 0))
    assert np.any(broken) == naive, as_written


@pytest.mark.parametrize("build, fires", [
    # summed over another axis than the exp's row: not a softmax
    (lambda x: tn.exp(x) / tn.exp(x.T).sum(axis=0, keepdims=True).T, False),
    # without keepdims the division broadcasts the sums along the wrong axis
    (lambda x: tn.exp(x) / tn.exp(x).sum(axis=0), False),
    # two different exponents
    (lambda x: tn.exp(x) / tn.exp(2 * x).sum(axis=1, keepdims=True), False),
    # a shift that varies along the softmax's axis is kept: the softmax of x - c
    (lambda x: tn.exp(x - x.max(axis=0, keepdims=True))
     / tn.exp(x - x.max(axis=0, keepdims=True)).sum(axis=1, keepdims=True), True),
])
def test_look_alikes_of_softmax_keep_their_values(build, fires):
    x = tn.matrix("x")
    value = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5], [0.25, 0.75, 1.5]])
    f = tn.function([x], build(x), mode=PLAIN)
    assert ("softmax_by_hand" in f.rewrites_applied) == fires == has(f, Softmax)
    np.testing.assert_allclose(f(value), tn.function([x], build(x), mode=NONE)(value),
                               rtol=1e-12)


@pytest.mark.parametrize("name, build", [
    ("log_softmax", lambda x: tn.log(tn.softmax(x))),
    ("log1p", lambda x: tn.log(1 + x)),
    ("expm1", lambda x: tn.exp(x) - 1),
    ("logsumexp", lambda x: tn.log(tn.sum(tn.exp(x)))),
    ("log_sigmoid", lambda x: tn.log(tn.sigmoid(x))),
    ("softmax_by_hand", lambda x: tn.exp(x) / tn.exp(x).sum(keepdims=True)),
])
@pytest.mark.parametrize("exclude", ["name", "tag", "phase"])
def test_excluding_leaves_the_formula(name, build, exclude):
    x = tn.vector("x")
    label = {"name": name, "tag": "stable", "phase": "stabilize"}[exclude]
    f = tn.function([x], build(x), mode=tn.Mode(exclude=["fusion", "inplace", label]))
    assert name not in f.rewrites_applied
    assert has(f, scalar_op=ps.log) or has(f, scalar_op=ps.exp)
    v = np.array([0.25, -1.5])
    np.testing.assert_array_equal(call(f, v), call(tn.function([x], build(x), mode=NONE), v))
