"""softmax, log_softmax, logsumexp, relu, gelu and one_hot against SciPy/NumPy:
values (also where the naive formulas overflow), dtypes, shapes, gradients
and errors."""

import warnings

import numpy as np
import pytest
import scipy.special
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.ops import shape_tuple
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, OneHot, Softmax
from tenure.testing import verify_grad
from tests.helpers import eval_dims

CASES = settings(max_examples=30, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
GRADS = settings(max_examples=15, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])

EXTREME = np.array([[1000.0, -1000.0, 0.0], [-1000.0, -1000.0, -1001.0],
                    [1000.0, 1000.0, 999.0], [3.0, 1.0, 0.5]])


def scipy_axis(axis):
    return axis if not isinstance(axis, list) else tuple(axis)


@st.composite
def axis_cases(draw, min_side=0):
    """(shape, static shape, axis, dtype, value) with large values (up to 1e3)."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(min_side, 3)) for _ in range(ndim))
    static = tuple(d if draw(st.booleans()) else None for d in shape)
    kind = draw(st.sampled_from(["int", "tuple", "none"]))
    if kind == "int":
        axis = draw(st.integers(-ndim, ndim - 1))
    elif kind == "tuple":
        axis = tuple(draw(st.lists(st.integers(0, ndim - 1), min_size=1, unique=True)))
    else:
        axis = None
    dtype = draw(st.sampled_from(["float32", "float64", "int32"]))
    scale = draw(st.sampled_from([1.0, 30.0, 1000.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    value = (rng.uniform(-scale, scale, size=shape)).astype(dtype)
    return shape, static, axis, dtype, value


def expected_dtype(dtype):
    return dtype if dtype.startswith("float") else "float64"


def assert_close(got, expected, dtype):
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


# --------------------------------------------------------------------------
# softmax, log_softmax, logsumexp: values


@CASES
@given(axis_cases(min_side=1), st.sampled_from(["softmax", "log_softmax"]))
def test_softmax_matches_scipy(mode, case, fn_name):
    shape, static, axis, dtype, value = case
    x = tn.tensor("x", dtype=dtype, shape=static)
    out = getattr(tn, fn_name)(x, axis=axis)
    assert out.dtype == expected_dtype(dtype)
    assert out.type.shape == static
    got = tn.function([x], out, mode=mode)(value)
    expected = getattr(scipy.special, fn_name)(value.astype("float64"), axis=axis)
    assert got.dtype == expected_dtype(dtype) and got.shape == shape
    assert np.all(np.isfinite(got))
    assert_close(got, expected, dtype)
    assert eval_dims(shape_tuple(out), [x], [value], mode) == shape


@CASES
@given(axis_cases(), st.booleans())
def test_logsumexp_matches_scipy(mode, case, keepdims):
    shape, static, axis, dtype, value = case
    x = tn.tensor("x", dtype=dtype, shape=static)
    out = tn.logsumexp(x, axis=axis, keepdims=keepdims)
    assert out.dtype == expected_dtype(dtype)
    got = tn.function([x], out, mode=mode)(value)
    if value.size == 0:
        # Either the result is empty or it sums no exponentials: log(0) = -inf.
        # (SciPy 1.17 raises IndexError on some empty reductions.)
        expected = np.full(np.sum(value, axis=axis, keepdims=keepdims).shape, -np.inf)
    else:
        expected = scipy.special.logsumexp(value.astype("float64"), axis=axis,
                                           keepdims=keepdims)
    expected = np.asarray(expected)
    assert got.dtype == expected_dtype(dtype) and got.shape == expected.shape
    assert_close(got, expected, dtype)
    for s, real in zip(out.type.shape, got.shape):
        assert s is None or s == real
    assert eval_dims(shape_tuple(out), [x], [value], mode) == expected.shape


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_extreme_values_stay_finite(mode, dtype):
    value = EXTREME.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(value) / np.exp(value).sum(axis=-1, keepdims=True)
    assert not np.all(np.isfinite(naive))  # what the stable forms avoid
    x = tn.matrix("x", dtype=dtype)
    f = tn.function([x], [tn.softmax(x), tn.log_softmax(x), tn.logsumexp(x, axis=-1)],
                    mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning
        s, ls, lse = f(value)
    reference = EXTREME.astype("float64")
    for got, expected in ((s, scipy.special.softmax(reference, axis=-1)),
                          (ls, scipy.special.log_softmax(reference, axis=-1)),
                          (lse, scipy.special.logsumexp(reference, axis=-1))):
        assert got.dtype == dtype
        assert np.all(np.isfinite(got))
        assert_close(got, expected, dtype)
    np.testing.assert_allclose(lse, [1000, -1000 + np.log(2 + np.exp(-1.0)),
                                     1000 + np.log(2 + np.exp(-1.0)),
                                     scipy.special.logsumexp([3.0, 1.0, 0.5])], rtol=1e-6)


def test_logsumexp_infinities_and_empty_axes(mode):
    x = tn.matrix("x")
    f = tn.function([x], tn.logsumexp(x, axis=1), mode=mode)
    got = f(np.array([[-np.inf, -np.inf], [np.inf, 0.0], [-np.inf, 2.0]]))
    np.testing.assert_array_equal(got, [-np.inf, np.inf, 2.0])
    np.testing.assert_array_equal(f(np.zeros((2, 0))), [-np.inf, -np.inf])
    assert f(np.zeros((0, 3))).shape == (0,)
    assert tn.function([x], tn.logsumexp(x), mode=mode)(np.zeros((0, 2))) == -np.inf


def test_softmax_of_empty_tensors(mode):
    x = tn.matrix("x")
    f = tn.function([x], [tn.softmax(x, axis=0), tn.log_softmax(x)], mode=mode)
    for got in f(np.zeros((0, 3))):
        assert got.shape == (0, 3) and got.dtype == "float64"


def test_default_axes_and_op_props():
    x = tn.tensor3("x")
    assert tn.softmax(x).owner.op == Softmax((2,))
    assert tn.log_softmax(x, axis=(0, -1)).owner.op == LogSoftmax((0, 2))
    assert tn.logsumexp(x).owner.op == LogSumExp((0, 1, 2), False)
    assert tn.logsumexp(x, axis=1, keepdims=True).type.shape == (None, 1, None)
    assert str(tn.softmax(x).owner.op) == "softmax{axis=(2,)}"


def test_softmax_reuses_output_buffer():
    x = tn.matrix("x")
    node = tn.softmax(x).owner
    storage = [[None]]
    node.op.perform(node, [np.zeros((2, 2))], storage)
    first = storage[0][0]
    node.op.perform(node, [np.array([[0.0, np.log(3.0)], [1.0, 1.0]])], storage)
    assert storage[0][0] is first
    np.testing.assert_allclose(first, [[0.25, 0.75], [0.5, 0.5]])


@pytest.mark.parametrize("build, error, match", [
    (lambda: tn.softmax(tn.matrix(), axis=2), ValueError, "axis 2 is out of range"),
    (lambda: tn.log_softmax(tn.vector(), axis=(0, 0)), ValueError, "same axis twice"),
    (lambda: tn.logsumexp(tn.matrix(), axis=1.5), TypeError, "axis must be an int"),
    (lambda: tn.logsumexp(tn.matrix(), keepdims=1), TypeError, "keepdims must be a bool"),
    (lambda: tn.softmax(tn.vector(dtype="complex128")), TypeError, "complex128"),
    (lambda: tn.gelu(tn.vector(), approximate="tanh"), TypeError, "approximate"),
])
def test_softmax_family_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


# --------------------------------------------------------------------------
# softmax, log_softmax, logsumexp: gradients


@st.composite
def grad_cases(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1),
                          st.lists(st.integers(0, ndim - 1), min_size=1,
                                   unique=True).map(tuple)))
    return shape, axis, draw(st.integers(0, 2**16))


@GRADS
@given(grad_cases(), st.sampled_from(["softmax", "log_softmax", "logsumexp", "logsumexp_keep"]))
def test_gradients(mode, case, fn_name):
    shape, axis, seed = case
    value = np.random.default_rng(seed).normal(size=shape) * 3
    if fn_name == "logsumexp_keep":
        def fn(x):
            return tn.logsumexp(x, axis=axis, keepdims=True)
    else:
        def fn(x):
            return getattr(tn, fn_name)(x, axis=axis)
    verify_grad(fn, [value], mode=mode)


def test_gradients_at_extreme_values(mode):
    # The stable forms keep the gradients finite (and right) where exp overflows.
    for fn in (tn.softmax, tn.log_softmax, lambda x: tn.logsumexp(x, axis=-1)):
        verify_grad(fn, [EXTREME], mode=mode)
        x = tn.matrix("x")
        g = tn.function([x], tn.grad(fn(x).sum(), x), mode=mode)(EXTREME)
        assert np.all(np.isfinite(g))


def test_gradient_formulas(mode):
    # softmax: s * (gz - sum(gz * s)); log_softmax: gz - s * sum(gz); logsumexp: gz * s.
    value = np.array([[0.5, -1.0, 2.0]])
    weights = np.array([[1.0, 2.0, -3.0]])
    s = scipy.special.softmax(value, axis=-1)
    x = tn.matrix("x")
    w = tn.constant(weights)
    grads = [tn.grad((tn.softmax(x) * w).sum(), x),
             tn.grad((tn.log_softmax(x) * w).sum(), x),
             tn.grad((tn.logsumexp(x, axis=1) * w[:, 0]).sum(), x)]
    g_s, g_ls, g_lse = tn.function([x], grads, mode=mode)(value)
    np.testing.assert_allclose(g_s, s * (weights - (weights * s).sum()))
    np.testing.assert_allclose(g_ls, weights - s * weights.sum())
    np.testing.assert_allclose(g_lse, weights[:, :1] * s)


def test_float32_gradients(mode):
    value = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    for fn in (tn.softmax, tn.log_softmax, tn.logsumexp):
        verify_grad(fn, [value], mode=mode)
        x = tn.matrix("x", dtype="float32")
        assert tn.grad(fn(x).sum(), x).dtype == "float32"


def test_integer_inputs_have_no_gradient():
    k = tn.vector("k", dtype="int32")
    gz = tn.vector("gz")
    for out in (tn.softmax(k), tn.log_softmax(k), tn.logsumexp(k, keepdims=True)):
        assert out.owner.op.grad([k], [gz]) == [None]


# --------------------------------------------------------------------------
# relu and gelu


@CASES
@given(st.sampled_from(["float32", "float64", "int8", "int64"]), st.integers(0, 2**16))
def test_relu_values(mode, dtype, seed):
    value = (np.random.default_rng(seed).normal(size=(3, 4)) * 5).astype(dtype)
    value[0, 0] = 0
    x = tn.matrix("x", dtype=dtype)
    out = tn.relu(x)
    assert out.dtype == dtype
    got = tn.function([x], out, mode=mode)(value)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.maximum(value, 0))


def test_relu_nan_and_infinities(mode):
    x = tn.vector("x")
    got = tn.function([x], tn.relu(x), mode=mode)(np.array([np.nan, -np.inf, np.inf, -0.0]))
    np.testing.assert_array_equal(got, [np.nan, 0, np.inf, 0])


def test_relu_gradient_is_zero_at_zero(mode):
    x = tn.vector("x")
    g = tn.function([x], tn.grad(tn.relu(x).sum(), x), mode=mode)
    np.testing.assert_array_equal(g(np.array([-2.0, -1e-300, 0.0, -0.0, 1e-300, 3.0])),
                                  [0, 0, 0, 0, 1, 1])
    value = np.array([-1.5, -0.3, 0.4, 2.0])  # away from the kink
    verify_grad(tn.relu, [value], mode=mode)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_values(mode, dtype):
    value = np.linspace(-8, 8, 41).astype(dtype)
    x = tn.vector("x", dtype=dtype)
    exact, approx = tn.function([x], [tn.gelu(x), tn.gelu(x, approximate=True)],
                                mode=mode)(value)
    v = value.astype("float64")
    assert exact.dtype == approx.dtype == dtype
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(exact, v * scipy.special.ndtr(v), rtol=tol, atol=tol)
    tanh_form = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))
    np.testing.assert_allclose(approx, tanh_form, rtol=tol, atol=tol)
    # The two forms agree closely.
    np.testing.assert_allclose(exact, approx, atol=1e-3)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_gradients(mode, approximate):
    value = np.linspace(-4, 4, 9) + 0.1
    verify_grad(lambda x: tn.gelu(x, approximate=approximate), [value], mode=mode)
    x = tn.vector("x")
    g = tn.function([x], tn.grad(tn.gelu(x).sum(), x), mode=mode)(value)
    # d/dx x Phi(x) = Phi(x) + x phi(x)
    expected = scipy.special.ndtr(value) + value * np.exp(-value ** 2 / 2) / np.sqrt(2 * np.pi)
    if not approximate:
        np.testing.assert_allclose(g, expected, rtol=1e-12)


# --------------------------------------------------------------------------
# one_hot


@CASES
@given(shape=st.lists(st.integers(0, 3), max_size=3).map(tuple), n=st.integers(1, 5),
       idx_dtype=st.sampled_from(["int8", "int32", "int64", "uint8"]),
       dtype=st.sampled_from([None, "float32", "int64", "bool"]),
       symbolic_n=st.booleans(), seed=st.integers(0, 2**16))
def test_one_hot_matches_numpy(mode, shape, n, idx_dtype, dtype, symbolic_n, seed):
    value = np.random.default_rng(seed).integers(0, n, size=shape).astype(idx_dtype)
    indices = tn.tensor("i", dtype=idx_dtype, shape=shape)
    inputs, values = [indices], [value]
    if symbolic_n:
        num = tn.scalar("n", dtype="int32")
        inputs.append(num)
        values.append(np.int32(n))
    else:
        num = n
    out = tn.one_hot(indices, num, dtype=dtype)
    want_dtype = tn.config.floatX if dtype is None else dtype
    assert out.dtype == want_dtype
    assert out.type.shape == shape + ((None,) if symbolic_n else (n,))
    got = tn.function(inputs, out, mode=mode)(*values)
    expected = np.eye(n, dtype=want_dtype)[value]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert eval_dims(shape_tuple(out), inputs, values, mode) == expected.shape


def test_one_hot_default_dtype_follows_floatx():
    with tn.config.change_flags(floatX="float32"):
        assert tn.one_hot(tn.vector(dtype="int64"), 3).dtype == "float32"
    assert tn.one_hot(tn.vector(dtype="int64"), 3, dtype="floatX").dtype == tn.config.floatX


@pytest.mark.parametrize("bad", [5, 7, -1])
def test_one_hot_out_of_range_index_at_run_time(mode, bad):
    i = tn.vector("i", dtype="int64")
    f = tn.function([i], tn.one_hot(i, 5), mode=mode)
    with pytest.raises(ValueError, match=rf"index {bad} .*position \(1,\).*num_classes=5"):
        f(np.array([0, bad, 2]))


def test_one_hot_symbolic_num_classes_checked_at_run_time(mode):
    i = tn.vector("i", dtype="int64")
    n = tn.scalar("n", dtype="int64")
    f = tn.function([i, n], tn.one_hot(i, n), mode=mode)
    assert f(np.array([], "int64"), 0).shape == (0, 0)
    with pytest.raises(ValueError, match="index 3 .*num_classes=3"):
        f(np.array([3]), 3)
    with pytest.raises(ValueError, match="non-negative"):
        f(np.array([], "int64"), -1)


@pytest.mark.parametrize("build, error, match", [
    (lambda: tn.one_hot(tn.vector(), 3), TypeError, "indices must be an integer"),
    (lambda: tn.one_hot(tn.vector(dtype="bool"), 3), TypeError, "indices must be an integer"),
    (lambda: tn.one_hot(tn.vector(dtype="int64"), 2.0), TypeError, "num_classes"),
    (lambda: tn.one_hot(tn.vector(dtype="int64"), tn.vector(dtype="int64")), TypeError,
     "num_classes"),
    (lambda: tn.one_hot(tn.vector(dtype="int64"), -2), ValueError, "non-negative"),
    (lambda: tn.one_hot(tn.vector(dtype="int64"), 3, dtype="float128x"), TypeError, "dtype"),
])
def test_one_hot_build_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_one_hot_has_no_gradient_and_reuses_its_buffer():
    i = tn.vector("i", dtype="int64")
    out = tn.one_hot(i, 3)
    assert out.owner.op.grad(out.owner.inputs, [tn.matrix()]) == [None, None]
    assert out.owner.op == OneHot(tn.config.floatX)
    storage = [[None]]
    out.owner.op.perform(out.owner, [np.array([0, 1]), np.int64(3)], storage)
    first = storage[0][0]
    out.owner.op.perform(out.owner, [np.array([2, 2]), np.int64(3)], storage)
    assert storage[0][0] is first
    np.testing.assert_array_equal(first, [[0, 0, 1], [0, 0, 1]])


@pytest.mark.parametrize("fn", [tn.softmax, tn.log_softmax,
                                lambda x: tn.logsumexp(x, axis=1, keepdims=True)])
def test_second_order_gradients(mode, fn):
    value = np.random.default_rng(5).normal(size=(2, 3))
    verify_grad(lambda x: tn.grad((fn(x) ** 2).sum(), x), [value], mode=mode)


def test_logsumexp_of_a_scalar_is_the_scalar(mode):
    # perform once raised TypeError here (np.exp with out= a NumPy scalar).
    x = tn.scalar("x")
    f = tn.function([x], tn.logsumexp(x), mode=mode)
    got = f(np.float64(2.5))
    assert isinstance(got, np.ndarray) and got.shape == () and got == 2.5
