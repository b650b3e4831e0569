"""sort and argsort against NumPy: values, dtypes, static and inferred shapes,
the gradient of sort (and of its helper op) and errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.ops import shape_tuple
from tenure.symbolic.ops.sorting import ArgSort, PermuteAlongAxis, Sort
from tenure.testing import verify_grad
from tests.helpers import DTYPES, assert_matches, eval_dims, random_values

CASES = settings(max_examples=40, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
GRADS = settings(max_examples=20, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def sort_cases(draw):
    """(static shape, axis, value): values with ties, every dtype."""
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(ndim))
    static = tuple(d if draw(st.booleans()) else None for d in shape)
    axis = draw(st.sampled_from([None] + list(range(-ndim, ndim))))
    dtype = draw(st.sampled_from(DTYPES))
    return static, axis, random_values(draw(st.integers(0, 2**16)), shape, dtype)


@CASES
@given(sort_cases())
def test_sort_and_argsort_match_numpy(mode, case):
    static, axis, value = case
    x = tn.tensor("x", dtype=value.dtype, shape=static)
    s, a = tn.sort(x, axis=axis), tn.argsort(x, axis=axis)
    assert s.dtype == value.dtype and a.dtype == "int64"
    got_s, got_a = tn.function([x], [s, a], mode=mode)(value)
    expected_s = np.sort(value, axis=axis)
    expected_a = np.argsort(value, axis=axis, kind="stable")
    assert_matches(got_s, expected_s)
    assert_matches(got_a, expected_a.astype("int64"))
    for var, expected in ((s, expected_s), (a, expected_a)):
        assert var.ndim == expected.ndim
        for known, real in zip(var.type.shape, expected.shape):
            assert known is None or known == real
        if None not in static:
            assert var.type.shape == expected.shape
        assert eval_dims(shape_tuple(var), [x], [value], mode) == expected.shape


def test_argsort_is_stable_and_nan_sorts_last(mode):
    x = tn.vector("x")
    value = np.array([2.0, np.nan, 1.0, 2.0, -np.inf, 1.0])
    s, a = tn.function([x], [tn.sort(x), tn.argsort(x)], mode=mode)(value)
    np.testing.assert_array_equal(s, [-np.inf, 1, 1, 2, 2, np.nan])
    np.testing.assert_array_equal(a, [4, 2, 5, 0, 3, 1])


def test_methods_and_defaults():
    x = tn.matrix("x", shape=(2, 3))
    assert x.sort().owner.op == Sort(1)
    assert x.argsort(axis=0).owner.op == ArgSort(0)
    assert tn.sort(x, axis=None).type.shape == (6,)
    assert tn.argsort(tn.matrix(shape=(None, 3)), axis=None).type.shape == (None,)
    assert tn.sort(tn.scalar(), axis=None).type.shape == (1,)
    assert str(Sort(None)) == "sort{axis=None}"


@pytest.mark.parametrize("build, error, match", [
    (lambda: tn.sort(tn.matrix(), axis=2), ValueError, "axis 2 is out of range"),
    (lambda: tn.argsort(tn.matrix(), axis=-3), ValueError, "axis -3 is out of range"),
    (lambda: tn.sort(tn.scalar()), ValueError, "0-d.*axis=None"),
    (lambda: tn.sort(tn.matrix(), axis=(0, 1)), TypeError, "axis must be an int or None"),
    (lambda: tn.argsort(tn.matrix(), axis=True), TypeError, "axis must be an int or None"),
])
def test_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_sort_reuses_output_buffer_and_leaves_input_alone():
    x = tn.matrix("x")
    node = tn.sort(x, axis=0).owner
    value = np.array([[3.0, 1.0], [2.0, 4.0]])
    storage = [[None]]
    node.op.perform(node, [value], storage)
    first = storage[0][0]
    node.op.perform(node, [value[::-1, ::-1]], storage)  # a non-contiguous view
    assert storage[0][0] is first
    np.testing.assert_array_equal(first, [[1, 2], [4, 3]])
    np.testing.assert_array_equal(value, [[3, 1], [2, 4]])
    flat = tn.sort(x, axis=None).owner
    storage = [[np.empty(4)]]
    flat.op.perform(flat, [value.T], storage)
    np.testing.assert_array_equal(storage[0][0], [1, 2, 3, 4])


# --------------------------------------------------------------------------
# Gradients


@GRADS
@given(data=st.data())
def test_sort_grad(mode, data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 3)) for _ in range(ndim))
    axis = data.draw(st.sampled_from([None] + list(range(-ndim, ndim))))
    # Distinct values (a permutation, scaled) keep the sort differentiable.
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    value = rng.permutation(int(np.prod(shape))).reshape(shape) * 0.5 + 0.1
    verify_grad(lambda x: tn.sort(x, axis=axis), [value], mode=mode)


def test_sort_grad_sends_each_gradient_home(mode):
    x = tn.matrix("x")
    weights = tn.constant(np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]))
    value = np.array([[5.0, -1.0, 2.0], [0.0, 9.0, 4.0]])
    g1 = tn.grad((tn.sort(x) * weights).sum(), x)
    g2 = tn.grad((tn.sort(x, axis=None) * tn.arange(6.0)).sum(), x)
    r1, r2 = tn.function([x], [g1, g2], mode=mode)(value)
    np.testing.assert_array_equal(r1, [[3, 1, 2], [10, 30, 20]])
    # Flattened order: -1, 0, 2, 4, 5, 9 get 0..5.
    np.testing.assert_array_equal(r2, [[4, 0, 2], [1, 5, 3]])


def test_sort_grad_float32(mode):
    value = np.array([[0.3, -1.2, 2.5], [1.0, 0.0, -0.5]], dtype="float32")
    verify_grad(lambda x: tn.sort(x, axis=0), [value], mode=mode)
    x = tn.matrix("x", dtype="float32")
    assert tn.grad(tn.sort(x).sum(), x).dtype == "float32"


def test_argsort_has_no_gradient(mode):
    x = tn.vector("x")
    a = tn.argsort(x)
    assert a.owner.op.grad([x], [tn.vector()]) == [None]
    # Indices are integers: the cost does not depend on x differentiably.
    with pytest.raises(tn.DisconnectedInputError):
        tn.grad(a.astype("float64").sum(), x)
    g = tn.grad(a.astype("float64").sum() + x.sum(), x)
    np.testing.assert_array_equal(tn.function([x], g, mode=mode)(np.zeros(3)), [1, 1, 1])


@pytest.mark.parametrize("axis", [0, 1])
def test_permute_along_axis_both_ways(mode, axis):
    rng = np.random.default_rng(3)
    value = rng.normal(size=(3, 4))
    perm = np.argsort(rng.normal(size=(3, 4)), axis=axis)
    g = tn.matrix("g")
    forward = PermuteAlongAxis(axis, inverse=False)(g, tn.constant(perm))
    back = PermuteAlongAxis(axis, inverse=True)(forward, tn.constant(perm))
    got_f, got_b = tn.function([g], [forward, back], mode=mode)(value)
    np.testing.assert_array_equal(got_f, np.take_along_axis(value, perm, axis=axis))
    np.testing.assert_array_equal(got_b, value)
    assert eval_dims(shape_tuple(back), [g], [value], mode) == (3, 4)
    for inverse in (False, True):
        verify_grad(lambda v: PermuteAlongAxis(axis, inverse)(v, tn.constant(perm)), [value],
                    mode=mode)


def test_permute_along_axis_errors():
    with pytest.raises(TypeError, match="perm must be an integer"):
        PermuteAlongAxis(0, True)(tn.vector(), tn.vector())
    with pytest.raises(TypeError, match="same number of dimensions"):
        PermuteAlongAxis(0, True)(tn.vector(), tn.matrix(dtype="int64"))
    node = PermuteAlongAxis(0, False)(tn.vector(), tn.vector(dtype="int64")).owner
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        node.op.perform(node, [np.zeros(3), np.zeros(2, "int64")], [[None]])


def test_sort_second_order_gradient(mode):
    value = np.array([[0.3, -1.2, 2.5], [1.0, 0.1, -0.5]])
    verify_grad(lambda x: tn.grad((tn.sort(x * x, axis=1) ** 2 * tn.arange(3.0)).sum(), x),
                [value], mode=mode)
