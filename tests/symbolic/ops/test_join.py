"""concatenate, stack and split against NumPy: values, dtypes, static and
inferred shapes, gradients and errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.graph import ancestors
from tenure.symbolic.ops import shape_tuple
from tenure.symbolic.ops.join import Join, Split, SplitGrad, Stack
from tenure.testing import verify_grad
from tests.helpers import assert_matches, eval_dims, random_values

JOIN_DTYPES = ["bool", "int8", "int64", "uint8", "float32", "float64"]

CASES = settings(max_examples=30, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
GRADS = settings(max_examples=15, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_static(var, actual_shape):
    assert var.ndim == len(actual_shape)
    for static, real in zip(var.type.shape, actual_shape):
        assert static is None or static == real, (var.type, actual_shape)


def symbolic_tensor(draw, name, shape, dtype):
    """A variable for a value of ``shape``: each length known statically or not."""
    static = tuple(d if draw(st.booleans()) else None for d in shape)
    return tn.tensor(name, dtype=dtype, shape=static)


# --------------------------------------------------------------------------
# concatenate


@st.composite
def concat_cases(draw):
    ndim = draw(st.integers(1, 3))
    base = [draw(st.integers(0, 3)) for _ in range(ndim)]
    axis = draw(st.integers(-ndim, ndim - 1))
    n = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n):
        shape = list(base)
        shape[axis] = draw(st.integers(0, 3))
        shapes.append(tuple(shape))
    dtypes = [draw(st.sampled_from(JOIN_DTYPES)) for _ in range(n)]
    variables = [symbolic_tensor(draw, f"x{i}", s, d)
                 for i, (s, d) in enumerate(zip(shapes, dtypes))]
    values = [random_values(draw(st.integers(0, 2**16)), s, d) for s, d in zip(shapes, dtypes)]
    return variables, values, axis


@CASES
@given(concat_cases())
def test_concatenate_matches_numpy(mode, case):
    variables, values, axis = case
    out = tn.concatenate(variables, axis=axis)
    expected = np.concatenate(values, axis=axis)
    assert out.dtype == expected.dtype == np.result_type(*values)
    got = tn.function(variables, out, mode=mode)(*values)
    assert_matches(got, expected)
    check_static(out, expected.shape)
    if all(None not in v.type.shape for v in variables):
        assert out.type.shape == expected.shape
    dims = shape_tuple(out)
    assert out not in ancestors([d for d in dims if not isinstance(d, int)])
    assert eval_dims(dims, variables, values, mode) == expected.shape


@CASES
@given(concat_cases())
def test_concatenate_axis_none_flattens(mode, case):
    variables, values, _ = case
    out = tn.concatenate(variables, axis=None)
    expected = np.concatenate(values, axis=None)
    got = tn.function(variables, out, mode=mode)(*values)
    assert_matches(got, expected)
    check_static(out, expected.shape)
    assert eval_dims(shape_tuple(out), variables, values, mode) == expected.shape


def test_concatenate_static_shape():
    a = tn.matrix("a", shape=(2, 3))
    b = tn.matrix("b", shape=(None, 4))
    c = tn.matrix("c", shape=(2, 5))
    d = tn.matrix("d", shape=(None, None))
    assert tn.concatenate([a, c], axis=1).type.shape == (2, 8)
    # The other axis is known from any input that knows it.
    assert tn.concatenate([b, a, c], axis=1).type.shape == (2, 12)
    # One unknown length on the axis: the sum is unknown.
    assert tn.concatenate([a, d, c], axis=1).type.shape == (2, None)
    assert tn.concatenate([a, a], axis=-2).type.shape == (4, 3)
    assert tn.concatenate([a, c], axis=None).type.shape == (16,)
    assert tn.concatenate([a, b], axis=None).type.shape == (None,)


def test_concatenate_dtype_is_result_type(mode):
    a = tn.vector("a", dtype="int8")
    b = tn.vector("b", dtype="float32")
    out = tn.concatenate([a, b])
    assert out.dtype == "float32"
    got = tn.function([a, b], out, mode=mode)(np.array([1, 2], "int8"),
                                              np.array([0.5], "float32"))
    assert_matches(got, np.array([1, 2, 0.5], "float32"))


def test_concatenate_mismatch_at_build_names_both_shapes():
    a = tn.matrix("a", shape=(2, 3))
    b = tn.matrix("b", shape=(4, 5))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\).*axis 0: 2 != 4"):
        tn.concatenate([a, b], axis=1)
    # Along the concatenation axis lengths may differ.
    assert tn.concatenate([a, tn.matrix(shape=(2, 5))], axis=1).type.shape == (2, 8)


def test_concatenate_mismatch_at_run_time(mode):
    a, b = tn.matrix("a"), tn.matrix("b")
    f = tn.function([a, b], tn.concatenate([a, b], axis=0), mode=mode)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(1, 4\)"):
        f(np.zeros((2, 3)), np.zeros((1, 4)))


@pytest.mark.parametrize("build, error, match", [
    (lambda: tn.concatenate([tn.matrix(), tn.vector()]), TypeError, "same number of dim"),
    (lambda: tn.concatenate([tn.scalar(), tn.scalar()]), TypeError, "0-d"),
    (lambda: tn.concatenate([]), ValueError, "at least one"),
    (lambda: tn.concatenate(tn.matrix()), TypeError, "list or tuple"),
    (lambda: tn.concatenate([tn.matrix()], axis=2), ValueError, "axis 2 is out of range"),
    (lambda: tn.concatenate([tn.matrix()], axis=1.0), TypeError, "axis must be an int"),
    (lambda: tn.stack([tn.matrix(), tn.vector()]), TypeError, "same number of dim"),
    (lambda: tn.stack([tn.vector()], axis=2), ValueError, "axis 2 is out of range"),
    (lambda: tn.stack([tn.vector(shape=(2,)), tn.vector(shape=(3,))]), ValueError,
     r"\(2,\).*\(3,\)"),
    (lambda: tn.split(tn.scalar(), 2), TypeError, "at least one dimension"),
    (lambda: tn.split(tn.vector(), 0), ValueError, "at least 1"),
    (lambda: tn.split(tn.vector(shape=(7,)), 3), ValueError, "length 7.*3 equal"),
    (lambda: tn.split(tn.vector(), [1.5]), TypeError, "split point 0"),
    (lambda: tn.split(tn.vector(), "2"), TypeError, "indices_or_sections"),
    (lambda: tn.split(tn.matrix(), 2, axis=-3), ValueError, "out of range"),
])
def test_build_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_concatenate_reuses_output_buffer():
    a, b = tn.vector("a"), tn.vector("b")
    node = tn.concatenate([a, b]).owner
    storage = [[None]]
    node.op.perform(node, [np.ones(2), np.zeros(1)], storage)
    first = storage[0][0]
    node.op.perform(node, [np.zeros(1), np.full(2, 3.0)], storage)
    assert storage[0][0] is first
    np.testing.assert_array_equal(first, [0, 3, 3])
    node.op.perform(node, [np.zeros(2), np.zeros(2)], storage)  # another shape: new buffer
    assert storage[0][0] is not first and storage[0][0].shape == (4,)


@GRADS
@given(data=st.data())
def test_concatenate_grad(mode, data):
    ndim = data.draw(st.integers(1, 3))
    axis = data.draw(st.sampled_from([None] + list(range(-ndim, ndim))))
    base = [data.draw(st.integers(1, 3)) for _ in range(ndim)]
    points = []
    for i in range(data.draw(st.integers(1, 3))):
        shape = list(base)
        if axis is not None:
            shape[axis] = data.draw(st.integers(0, 3))
        else:
            shape = [data.draw(st.integers(0, 3)) for _ in range(ndim)]
        points.append(np.random.default_rng(i).normal(size=shape))
    verify_grad(lambda *xs: tn.concatenate(list(xs), axis=axis), points, mode=mode)


def test_concatenate_grad_skips_integer_inputs(mode):
    x = tn.vector("x")
    k = tn.vector("k", dtype="int64")
    out = tn.concatenate([k, x, k])
    gx = tn.grad((out * tn.arange(7.0)).sum(), x)
    np.testing.assert_array_equal(
        tn.function([x, k], gx, mode=mode)(np.zeros(3), np.zeros(2, "int64")), [2, 3, 4])
    assert Join(0).grad([k, x], [tn.vector()])[0] is None


# --------------------------------------------------------------------------
# stack


@CASES
@given(data=st.data())
def test_stack_matches_numpy(mode, data):
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.integers(0, 3)) for _ in range(ndim))
    axis = data.draw(st.integers(-ndim - 1, ndim))
    n = data.draw(st.integers(1, 3))
    dtypes = [data.draw(st.sampled_from(JOIN_DTYPES)) for _ in range(n)]
    variables = [symbolic_tensor(data.draw, f"x{i}", shape, d) for i, d in enumerate(dtypes)]
    values = [random_values(i, shape, d) for i, d in enumerate(dtypes)]
    out = tn.stack(variables, axis=axis)
    expected = np.stack(values, axis=axis)
    assert out.dtype == expected.dtype
    got = tn.function(variables, out, mode=mode)(*values)
    assert_matches(got, expected)
    check_static(out, expected.shape)
    assert out.type.shape[axis] == n
    dims = shape_tuple(out)
    assert eval_dims(dims, variables, values, mode) == expected.shape


def test_stack_static_shape_merges_inputs():
    a = tn.matrix("a", shape=(2, None))
    b = tn.matrix("b", shape=(None, 3))
    assert tn.stack([a, b]).type.shape == (2, 2, 3)
    assert tn.stack([a, b], axis=-1).type.shape == (2, 3, 2)
    assert tn.stack([tn.scalar(), tn.scalar(), tn.scalar()]).type.shape == (3,)


def test_stack_mismatch_at_run_time(mode):
    a, b = tn.vector("a"), tn.vector("b")
    f = tn.function([a, b], tn.stack([a, b]), mode=mode)
    with pytest.raises(ValueError, match=r"shape \(2,\).*shape \(3,\)"):
        f(np.zeros(2), np.zeros(3))


def test_stack_reuses_output_buffer():
    a, b = tn.vector("a"), tn.vector("b")
    node = tn.stack([a, b], axis=1).owner
    storage = [[None]]
    node.op.perform(node, [np.ones(2), np.zeros(2)], storage)
    first = storage[0][0]
    node.op.perform(node, [np.arange(2.0), np.ones(2)], storage)
    assert storage[0][0] is first
    np.testing.assert_array_equal(first, [[0, 1], [1, 1]])


@GRADS
@given(ndim=st.integers(0, 2), n=st.integers(1, 3), data=st.data())
def test_stack_grad(mode, ndim, n, data):
    shape = tuple(data.draw(st.integers(1, 3)) for _ in range(ndim))
    axis = data.draw(st.integers(-ndim - 1, ndim))
    points = [np.random.default_rng(i).normal(size=shape) for i in range(n)]
    verify_grad(lambda *xs: tn.stack(list(xs), axis=axis), points, mode=mode)


def test_stack_op_props():
    assert tn.stack([tn.matrix(), tn.matrix()], axis=-1).owner.op == Stack(2)
    assert str(Stack(1)) == "Stack{axis=1}"


# --------------------------------------------------------------------------
# split


@st.composite
def split_cases(draw):
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.integers(0, 4)) for _ in range(ndim)]
    axis = draw(st.integers(-ndim, ndim - 1))
    if draw(st.booleans()):
        sections = draw(st.integers(1, 3))
        shape[axis] = sections * draw(st.integers(0, 2))
        how = sections
    else:
        # Split points cut like slices: negative, out of range or decreasing too.
        how = draw(st.lists(st.integers(-6, 6), max_size=3))
    dtype = draw(st.sampled_from(JOIN_DTYPES))
    x = symbolic_tensor(draw, "x", tuple(shape), dtype)
    return x, random_values(draw(st.integers(0, 2**16)), tuple(shape), dtype), how, axis


@CASES
@given(split_cases(), st.booleans())
def test_split_matches_numpy(mode, case, symbolic_points):
    x, value, how, axis = case
    inputs, values = [x], [value]
    if symbolic_points and isinstance(how, list):
        scalars = [tn.scalar(f"p{i}", dtype="int32") for i in range(len(how))]
        inputs += scalars
        values += [np.int32(p) for p in how]
        pieces = tn.split(x, scalars, axis=axis)
    else:
        pieces = tn.split(x, how, axis=axis)
    expected = np.split(value, how, axis=axis)
    assert isinstance(pieces, list) and len(pieces) == len(expected)
    got = tn.function(inputs, pieces, mode=mode)(*values)
    for piece, g, e in zip(pieces, got, expected):
        assert_matches(g, e)
        check_static(piece, e.shape)
        assert eval_dims(shape_tuple(piece), inputs, values, mode) == e.shape
    if None not in x.type.shape and not symbolic_points:
        assert [p.type.shape for p in pieces] == [e.shape for e in expected]


@pytest.mark.parametrize("shape, points", [((0,), [-1]), ((2,), [-6]), ((3, 2), [-9, 1]),
                                           ((4,), [3, -7, 2])])
def test_split_at_points_below_minus_the_length(mode, shape, points):
    """A point below ``-length`` clamps to 0, as a slice does.  CuPy's own
    ``split`` wraps it once and makes a view that starts before the array:
    on the H100 that was a wrong shape, then an illegal memory access (the
    emulated device raises where CuPy would make that view)."""
    value = np.arange(np.prod(shape), dtype="float64").reshape(shape)
    x = tn.tensor("x", dtype="float64", shape=(None,) * len(shape))
    got = tn.function([x], tn.split(x, points, axis=0), mode=mode)(value)
    for g, e in zip(got, np.split(value, points, axis=0)):
        assert_matches(g, e)


def test_split_outputs_are_views():
    x = tn.matrix("x")
    pieces = tn.split(x, [1], axis=1)
    node = pieces[0].owner
    assert node.op.view_map == {0: [0], 1: [0]}
    value = np.arange(6.0).reshape(2, 3)
    storage = [[None], [None]]
    node.op.perform(node, [value, np.int64(1)], storage)
    assert all(np.shares_memory(cell[0], value) for cell in storage)


def test_split_results_follow_the_memory_contract(mode):
    # Pieces are views of x inside the graph, but a caller's array is never
    # aliased by default, and overlapping pieces come back as separate arrays.
    x = tn.vector("x")
    value = np.arange(4.0)
    pieces = tn.function([x], tn.split(x, [3, 1]), mode=mode)(value)
    assert not any(np.shares_memory(p, value) for p in pieces)
    assert not np.shares_memory(pieces[0], pieces[2])
    pieces[0][:] = -1
    np.testing.assert_array_equal(value, [0, 1, 2, 3])
    np.testing.assert_array_equal(pieces[2], [1, 2, 3])


def test_split_equal_sections_checked_at_run_time(mode):
    x = tn.vector("x")
    f = tn.function([x], tn.split(x, 3), mode=mode)
    assert [p.tolist() for p in f(np.arange(6.0))] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="length 7.*3 equal sections"):
        f(np.arange(7.0))


def test_split_static_shapes():
    x = tn.matrix("x", shape=(2, 6))
    assert [p.type.shape for p in tn.split(x, 3, axis=1)] == [(2, 2)] * 3
    assert [p.type.shape for p in tn.split(x, [1, 4, 2])] == [(1, 6), (1, 6), (0, 6), (0, 6)]
    assert [p.type.shape for p in tn.split(x, [-2], axis=-1)] == [(2, 4), (2, 2)]
    y = tn.matrix("y", shape=(None, 3))
    assert [p.type.shape for p in tn.split(y, 2)] == [(None, 3)] * 2
    assert [p.type.shape for p in tn.split(y, tn.constant(np.array([1, 2])), 1)] == \
        [(None, 1), (None, 1), (None, 1)]
    assert tn.split(x, [])[0].type.shape == (2, 6)


def test_split_points_from_a_vector(mode):
    x = tn.vector("x")
    p = tn.vector("p", dtype="int64", shape=(2,))
    pieces = tn.split(x, p)
    got = tn.function([x, p], pieces, mode=mode)(np.arange(5.0), np.array([1, 3]))
    assert [g.tolist() for g in got] == [[0], [1, 2], [3, 4]]
    with pytest.raises(TypeError, match="known length"):
        tn.split(x, tn.vector(dtype="int64"))


@GRADS
@given(data=st.data())
def test_split_grad(mode, data):
    ndim = data.draw(st.integers(1, 2))
    shape = [data.draw(st.integers(1, 4)) for _ in range(ndim)]
    axis = data.draw(st.integers(-ndim, ndim - 1))
    if data.draw(st.booleans()):
        how = data.draw(st.integers(1, 3))
        shape[axis] = how * data.draw(st.integers(1, 2))
        n = how
    else:
        how = data.draw(st.lists(st.integers(-5, 5), max_size=3))
        n = len(how) + 1
    # Some pieces reach the cost (weighted differently), the others have no gradient.
    used = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))

    def fn(v):
        pieces = tn.split(v, how, axis=axis)
        total = None
        for k in used:
            term = (pieces[k] * (k + 1.0)).sum()
            total = term if total is None else total + term
        return total

    verify_grad(fn, [np.random.default_rng(1).normal(size=shape)], mode=mode)


def test_split_grad_of_unused_pieces_is_zero(mode):
    x = tn.vector("x")
    for how in (2, [2], [2, -1], [3, 1]):
        first = tn.split(x, how)[0]
        g = tn.function([x], tn.grad((first * 2).sum(), x), mode=mode)(np.arange(4.0))
        expected = np.zeros(4)
        expected[np.split(np.arange(4), how)[0]] = 2
        np.testing.assert_array_equal(g, expected)


def test_split_grad_where_pieces_overlap(mode):
    # [3, 1] gives x[:3], x[3:1] (empty) and x[1:]: x[1] and x[2] are in two pieces.
    x = tn.vector("x")
    a, b, c = tn.split(x, [3, 1])
    cost = a.sum() + (c * 10).sum()
    g = tn.function([x], tn.grad(cost, x), mode=mode)(np.zeros(4))
    np.testing.assert_array_equal(g, [1, 11, 11, 10])
    assert isinstance(tn.grad(cost, x).owner.op, SplitGrad)
    verify_grad(lambda v: tn.split(v, [3, 1])[2] * 2 + tn.split(v, [3, 1])[0].sum(),
                [np.arange(4.0)], mode=mode)


def test_split_grad_with_symbolic_points(mode):
    x = tn.vector("x")
    p = tn.scalar("p", dtype="int64")
    a, b = tn.split(x, [p])
    g = tn.grad((b * 3).sum(), x)
    f = tn.function([x, p], g, mode=mode)
    np.testing.assert_array_equal(f(np.zeros(4), 1), [0, 3, 3, 3])
    np.testing.assert_array_equal(f(np.zeros(4), -1), [0, 0, 0, 3])


def test_split_grad_second_order(mode):
    # SplitGrad's gradient is a Split again: d/dv of <grad, v> through both.
    x = tn.vector("x")
    p = tn.scalar("p", dtype="int64")
    a, b = tn.split(x, [p])
    g = tn.grad((b ** 2).sum(), x)
    gg = tn.grad((g * x).sum(), x)  # = 2 * d/dx sum(b^2) = 4 b on b's part
    f = tn.function([x, p], gg, mode=mode)
    np.testing.assert_allclose(f(np.arange(4.0), 2), [0, 0, 8, 12])


def test_split_op_props():
    x = tn.matrix()
    assert tn.split(x, 2, axis=-1)[0].owner.op == Split(1, 2, True)
    assert str(Split(0, 3, False)) == "Split{axis=0, 3 points}"


def test_concatenate_second_order_gradient(mode):
    # Join's gradient is a Split, whose gradient is a Join again.
    value = np.random.default_rng(2).normal(size=(2, 3))
    verify_grad(lambda x: tn.grad((tn.concatenate([x, x * x], axis=1) ** 2).sum(), x),
                [value], mode=mode)
