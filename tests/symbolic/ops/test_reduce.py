"""Reductions (sum, prod, mean, max, min, all, any, argmax, argmin) against NumPy.

NumPy is the reference for values, output dtypes, shapes and run-time errors;
the tests draw shapes (including empty axes), static shapes, axes, keepdims
and dtypes, and check both the op's ``perform`` and compiled functions.
"""

import re
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tenure as tn
from tests.helpers import COMPILED, DTYPES, assert_matches, random_values
from tenure.symbolic.ops import shape_tuple
from tenure.symbolic.ops.reduce import ArgReduce, CumProd, CumSum, Reduce, normalize_axes
from tenure.testing import verify_grad

REDUCTIONS = ["sum", "prod", "mean", "max", "min", "all", "any"]
ARG_REDUCTIONS = ["argmax", "argmin"]
ALL_FUNCTIONS = REDUCTIONS + ARG_REDUCTIONS



# --------------------------------------------------------------------------
# Helpers




def numpy_result(fn_name, value, axis, keepdims):
    """NumPy's answer, or the ValueError it raises (reductions over empty axes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty slice
        try:
            return getattr(np, fn_name)(value, axis=axis, keepdims=keepdims), None
        except ValueError as exc:
            return None, exc


def run_perform(node, values, storage=None):
    storage = [[None]] if storage is None else storage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        node.op.perform(node, values, storage)
    return storage[0][0]


@st.composite
def axis_spellings(draw, ndim: int):
    """An ``axis`` argument for an ``ndim``-d input: None, one int, or a tuple of
    distinct axes in any order with any mix of negative spellings."""
    kind = draw(st.sampled_from(["none", "int", "tuple"] if ndim else ["none", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)
                if ndim else st.just([]))
    return tuple(a - ndim if draw(st.booleans()) else a for a in axes)


@st.composite
def reduce_cases(draw, fn_names=tuple(ALL_FUNCTIONS)):
    """(function name, shape, static shape, axis, keepdims, dtype, seed)."""
    fn_name = draw(st.sampled_from(fn_names))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    # Each length is known when the graph is built, or not.
    static = tuple(d if draw(st.booleans()) else None for d in shape)
    ndim = len(shape)
    if fn_name in ARG_REDUCTIONS:
        choices = [None] + ([draw(st.integers(-ndim, ndim - 1))] if ndim else [])
        axis = draw(st.sampled_from(choices))
    else:
        axis = draw(axis_spellings(ndim))
    keepdims = draw(st.booleans())
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**32 - 1))
    return fn_name, shape, static, axis, keepdims, dtype, seed


def resolve(dims, symbolic_values):
    """A ``shape_tuple`` with its symbolic entries replaced by computed values."""
    values = iter(symbolic_values)
    return tuple(d if isinstance(d, int) else int(next(values)) for d in dims)


# --------------------------------------------------------------------------
# Values, dtypes and shapes against NumPy


@settings(max_examples=150, deadline=None)
@given(reduce_cases())
def test_perform_matches_numpy(case):
    fn_name, shape, static, axis, keepdims, dtype, seed = case
    value = random_values(seed, shape, dtype)
    x = tn.tensor("x", dtype=dtype, shape=static)
    out = getattr(tn, fn_name)(x, axis=axis, keepdims=keepdims)
    expected, error = numpy_result(fn_name, value, axis, keepdims)

    # The dtype is NumPy's whatever the values (known before anything runs).
    probe = getattr(np, fn_name)(np.ones(shape, dtype) if 0 not in shape
                                 else np.ones((1,) * len(shape), dtype),
                                 axis=axis, keepdims=keepdims)
    assert out.dtype == np.asarray(probe).dtype

    if error is not None:
        with pytest.raises(ValueError):
            run_perform(out.owner, [value])
        return
    got = run_perform(out.owner, [value])
    assert_matches(got, expected)
    # No view_map: the result never shares the input's memory (even for axis=()).
    assert not np.shares_memory(got, value)
    # Static lengths are never wrong, and are all known when the input's are.
    assert out.ndim == got.ndim
    for want, actual in zip(out.type.shape, got.shape):
        assert want is None or want == actual
    if None not in static:
        assert out.type.shape == got.shape


@COMPILED
@given(reduce_cases())
def test_compiled_matches_numpy_and_infers_shape(mode, case):
    fn_name, shape, static, axis, keepdims, dtype, seed = case
    value = random_values(seed, shape, dtype)
    x = tn.tensor("x", dtype=dtype, shape=static)
    out = getattr(tn, fn_name)(x, axis=axis, keepdims=keepdims)
    expected, error = numpy_result(fn_name, value, axis, keepdims)
    f = tn.function([x], out, mode=mode)
    if error is not None:
        with pytest.raises(ValueError):
            f(value)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = f(value)
    assert_matches(got, expected)

    # The inferred shape is computed from x's shape, not from the reduction.
    dims = shape_tuple(out)
    assert len(dims) == got.ndim
    symbolic = [d for d in dims if not isinstance(d, int)]
    values = tn.function([x], symbolic, mode=mode)(value) if symbolic else []
    assert resolve(dims, values) == got.shape


@pytest.mark.parametrize("dtype, fn_name, expected", [
    ("int8", "sum", "int64"), ("uint8", "sum", "uint64"), ("bool", "sum", "int64"),
    ("int32", "prod", "int64"), ("float32", "sum", "float32"), ("int8", "mean", "float64"),
    ("bool", "mean", "float64"), ("float32", "mean", "float32"), ("int8", "max", "int8"),
    ("bool", "min", "bool"), ("float64", "all", "bool"), ("int32", "any", "bool"),
    ("float32", "argmax", "int64"), ("bool", "argmin", "int64"),
])
def test_output_dtype_examples(dtype, fn_name, expected):
    x = tn.matrix("x", dtype=dtype)
    assert getattr(tn, fn_name)(x, axis=0).dtype == expected
    assert getattr(tn, fn_name)(x).dtype == expected


@pytest.mark.parametrize("axis, keepdims, expected", [
    (None, False, ()),
    (None, True, (1, 1, 1)),
    (0, False, (None, 4)),
    (-1, True, (2, None, 1)),
    ((0, 2), False, (None,)),
    ((2, 0), True, (1, None, 1)),
    ((), False, (2, None, 4)),
])
def test_static_shape_examples(axis, keepdims, expected):
    x = tn.tensor("x", shape=(2, None, 4))
    assert tn.sum(x, axis=axis, keepdims=keepdims).type.shape == expected


@pytest.mark.parametrize("axis, keepdims, expected", [
    (None, False, ()),
    (None, True, (1, 1, 1)),
    (1, False, (2, 4)),
    (-3, True, (1, None, 4)),
])
def test_arg_static_shape_examples(axis, keepdims, expected):
    x = tn.tensor("x", shape=(2, None, 4))
    assert tn.argmax(x, axis=axis, keepdims=keepdims).type.shape == expected


def test_full_reductions_are_arrays(mode):
    x = tn.matrix("x", dtype="int8")
    outs = [getattr(tn, name)(x) for name in ALL_FUNCTIONS]
    value = np.array([[1, -2], [3, 0]], dtype="int8")
    for name, got in zip(ALL_FUNCTIONS, tn.function([x], outs, mode=mode)(value)):
        assert_matches(got, getattr(np, name)(value))
        assert got.shape == ()


def test_python_numbers_reduce_like_numpy():
    assert tn.sum(3).dtype == np.sum(3).dtype.name
    assert tn.mean(True).dtype == np.mean(True).dtype.name
    assert tn.argmax(2.5).dtype == "int64"


def test_tensor_methods_build_the_same_ops():
    x = tn.tensor3("x")
    assert x.sum(axis=(0, -1)).owner.op == tn.sum(x, axis=(2, 0)).owner.op
    assert x.max(axis=1, keepdims=True).owner.op == tn.max(x, axis=-2, keepdims=True).owner.op
    assert x.argmin(axis=2).owner.op == tn.argmin(x, axis=-1).owner.op


# --------------------------------------------------------------------------
# infer_shape, called directly


def test_infer_shape_keeps_symbolic_and_static_entries():
    x = tn.tensor("x", shape=(None, 5, None))
    d0, d1, d2 = (tn.scalar(f"d{i}", dtype="int64") for i in range(3))
    in_shapes = [(d0, 5, d2)]

    node = tn.sum(x, axis=1).owner
    [shape] = node.op.infer_shape(node, in_shapes)
    assert shape[0] is d0 and shape[1] is d2 and len(shape) == 2

    node = tn.mean(x, axis=(0, 1), keepdims=True).owner
    [shape] = node.op.infer_shape(node, in_shapes)
    assert shape[:2] == (1, 1) and shape[2] is d2

    node = tn.argmax(x, keepdims=True).owner
    assert node.op.infer_shape(node, in_shapes) == [(1, 1, 1)]

    node = tn.argmin(x, axis=2).owner
    [shape] = node.op.infer_shape(node, in_shapes)
    assert shape[0] is d0 and shape[1] == 5 and len(shape) == 2

    # A length the output type knows is given as an int even when the input's
    # shape entry is symbolic.
    node = tn.any(tn.tensor("y", shape=(3, None)), axis=1).owner
    [shape] = node.op.infer_shape(node, [(d1, d2)])
    assert shape == (3,)


def test_infer_shape_of_full_reduction_is_empty():
    x = tn.tensor3("x")
    node = tn.prod(x).owner
    d = tn.scalar("d", dtype="int64")
    assert node.op.infer_shape(node, [(d, d, d)]) == [()]


# --------------------------------------------------------------------------
# Output buffers


BUFFER_CASES = [
    ("sum", (0, 2), False, "int8"),
    ("prod", 1, True, "float32"),
    ("mean", None, False, "int32"),      # a 0-d buffer
    ("mean", (0, 1, 2), True, "float64"),
    ("max", -1, False, "float64"),
    ("min", (), False, "int64"),         # no axis reduced: still a new array per call
    ("all", 0, False, "float64"),
    ("any", None, True, "bool"),
    ("argmax", 1, False, "float64"),
    ("argmax", None, False, "int8"),     # flattened, 0-d buffer
    ("argmin", None, True, "float32"),
    ("argmin", -1, True, "bool"),
]


def _op_case(fn_name, axis, keepdims, dtype):
    x = tn.tensor("x", dtype=dtype, shape=(None, None, None))
    node = getattr(tn, fn_name)(x, axis=axis, keepdims=keepdims).owner
    values = [random_values(seed, (2, 3, 4), dtype) for seed in (1, 2)]
    expected = [getattr(np, fn_name)(v, axis=axis, keepdims=keepdims) for v in values]
    return node, values, expected


@pytest.mark.parametrize("fn_name, axis, keepdims, dtype", BUFFER_CASES)
def test_perform_reuses_a_matching_buffer(fn_name, axis, keepdims, dtype):
    node, values, expected = _op_case(fn_name, axis, keepdims, dtype)
    storage = [[None]]
    node.op.perform(node, [values[0]], storage)
    first = storage[0][0]
    assert_matches(first, expected[0])
    node.op.perform(node, [values[1]], storage)
    assert storage[0][0] is first
    assert_matches(first, expected[1])


@pytest.mark.parametrize("fn_name, axis, keepdims, dtype", BUFFER_CASES)
def test_perform_writes_into_a_prefilled_buffer(fn_name, axis, keepdims, dtype):
    node, values, expected = _op_case(fn_name, axis, keepdims, dtype)
    want = np.asarray(expected[1])
    buffer = np.full(want.shape, 7, dtype=want.dtype)
    storage = [[buffer]]
    node.op.perform(node, [values[1]], storage)
    assert storage[0][0] is buffer
    assert_matches(buffer, want)


@pytest.mark.parametrize("fn_name, axis, keepdims, dtype", BUFFER_CASES)
def test_perform_ignores_a_misfit_buffer(fn_name, axis, keepdims, dtype):
    node, values, expected = _op_case(fn_name, axis, keepdims, dtype)
    want = np.asarray(expected[0])
    other_dtype = "float32" if want.dtype != np.float32 else "float64"
    readonly = np.zeros(want.shape, want.dtype)
    readonly.setflags(write=False)
    misfits = [np.zeros(want.shape + (1,), want.dtype),    # wrong shape
               np.zeros(want.shape, other_dtype),          # wrong dtype
               readonly,                                   # not writeable
               want.tolist()]                              # not an array
    for misfit in misfits:
        before = np.array(misfit, copy=True)
        storage = [[misfit]]
        node.op.perform(node, [values[0]], storage)
        assert storage[0][0] is not misfit
        assert_matches(storage[0][0], want)
        np.testing.assert_array_equal(np.asarray(misfit), before)


def test_sum_with_a_buffer_accumulates_in_the_output_dtype():
    # int8 values whose sum overflows int8 but not int64.
    x = tn.vector("x", dtype="int8")
    node = tn.sum(x).owner
    value = np.full(10, 100, dtype="int8")
    buffer = np.zeros((), dtype="int64")
    node.op.perform(node, [value], [[buffer]])
    assert buffer == 1000


# --------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("fn_name", ALL_FUNCTIONS)
@pytest.mark.parametrize("axis", [2, -3, 7])
def test_axis_out_of_range(fn_name, axis):
    x = tn.matrix("x")
    with pytest.raises(ValueError, match=rf"axis {axis}\b.*ndim=2"):
        getattr(tn, fn_name)(x, axis=axis)


@pytest.mark.parametrize("fn_name", REDUCTIONS)
def test_axis_out_of_range_in_a_tuple(fn_name):
    with pytest.raises(ValueError, match=r"axis 3\b.*ndim=3"):
        getattr(tn, fn_name)(tn.tensor3("x"), axis=(0, 3))


@pytest.mark.parametrize("fn_name", REDUCTIONS)
@pytest.mark.parametrize("axis", [(0, 0), (1, -2)])
def test_duplicate_axes(fn_name, axis):
    with pytest.raises(ValueError, match=re.escape(f"axis {axis!r}") + r".*twice.*ndim=3"):
        getattr(tn, fn_name)(tn.tensor3("x"), axis=axis)


@pytest.mark.parametrize("fn_name", ALL_FUNCTIONS)
def test_zero_dim_input_has_no_axis_zero(fn_name):
    # NumPy tolerates axis=0 on 0-d arrays in some functions; tenure is strict.
    with pytest.raises(ValueError, match=r"axis 0\b.*ndim=0"):
        getattr(tn, fn_name)(tn.scalar("x"), axis=0)


@pytest.mark.parametrize("fn_name", ARG_REDUCTIONS)
@pytest.mark.parametrize("axis", [(0,), (0, 1), [0]])
def test_arg_reductions_take_one_axis(fn_name, axis):
    with pytest.raises(TypeError, match="None or an int"):
        getattr(tn, fn_name)(tn.matrix("x"), axis=axis)


@pytest.mark.parametrize("fn_name", ALL_FUNCTIONS)
@pytest.mark.parametrize("axis", [1.0, "0", True])
def test_axis_must_be_an_int(fn_name, axis):
    with pytest.raises(TypeError, match="axis must be"):
        getattr(tn, fn_name)(tn.matrix("x"), axis=axis)


@pytest.mark.parametrize("fn_name", REDUCTIONS)
def test_axis_list_is_refused_with_a_hint(fn_name):
    with pytest.raises(TypeError, match="use a tuple"):
        getattr(tn, fn_name)(tn.matrix("x"), axis=[0, 1])


@pytest.mark.parametrize("fn_name", ALL_FUNCTIONS)
def test_keepdims_must_be_a_bool(fn_name):
    with pytest.raises(TypeError, match="keepdims must be a bool"):
        getattr(tn, fn_name)(tn.matrix("x"), keepdims="yes")


@pytest.mark.parametrize("fn_name, axis", [
    ("max", None), ("min", 0), ("argmax", None), ("argmin", 0), ("max", (0, 1))])
def test_empty_reduction_raises_when_run(mode, fn_name, axis):
    x = tn.matrix("x")
    f = tn.function([x], getattr(tn, fn_name)(x, axis=axis), mode=mode)
    with pytest.raises(ValueError):
        f(np.zeros((0, 3)))
    # Reducing a non-empty axis of an empty array is fine.
    np.testing.assert_array_equal(
        tn.function([x], getattr(tn, fn_name)(x, axis=1), mode=mode)(np.zeros((0, 3))),
        getattr(np, fn_name)(np.zeros((0, 3)), axis=1))


def test_mean_of_empty_axis_is_nan(mode):
    x = tn.matrix("x")
    f = tn.function([x], tn.mean(x, axis=0), mode=mode)
    with pytest.warns(RuntimeWarning):
        got = f(np.zeros((0, 2)))
    assert got.shape == (2,) and np.isnan(got).all()


def test_op_constructors_check_their_arguments():
    with pytest.raises(ValueError, match="unknown reduction 'median'"):
        Reduce("median", (0,))
    with pytest.raises(ValueError, match="sorted, distinct and non-negative"):
        Reduce("sum", (1, 0))
    with pytest.raises(ValueError, match="sorted, distinct and non-negative"):
        Reduce("sum", (-1,))
    with pytest.raises(TypeError, match="tuple of ints"):
        Reduce("sum", 0)
    with pytest.raises(ValueError, match="unknown reduction 'sum'"):
        ArgReduce("sum", 0)
    with pytest.raises(ValueError, match="non-negative"):
        ArgReduce("argmax", -1)


def test_make_node_checks_axes_against_the_input():
    with pytest.raises(ValueError, match=r"axis 2\b.*ndim=2"):
        Reduce("sum", (0, 2)).make_node(tn.matrix("x"))
    with pytest.raises(ValueError, match=r"axis 1\b.*ndim=1"):
        ArgReduce("argmax", 1).make_node(tn.vector("x"))


# --------------------------------------------------------------------------
# Op identity


def test_equal_ops_compare_and_hash_equal():
    x = tn.tensor3("x")
    a = tn.sum(x, axis=(-1, 0)).owner.op
    b = tn.sum(x, axis=(0, 2)).owner.op
    assert a == b and hash(a) == hash(b)
    assert a != tn.sum(x, axis=(0, 2), keepdims=True).owner.op
    assert a != tn.prod(x, axis=(0, 2)).owner.op
    assert tn.sum(x).owner.op == Reduce("sum", (0, 1, 2))
    assert tn.argmax(x, axis=-1).owner.op == ArgReduce("argmax", 2)
    assert tn.argmax(x).owner.op != ArgReduce("argmax", 0)
    assert str(a) == "sum{axis=(0, 2)}"
    assert str(tn.argmax(x, keepdims=True).owner.op) == "argmax{axis=None, keepdims}"


def test_normalize_axes():
    assert normalize_axes(None, 3) == (0, 1, 2)
    assert normalize_axes(-1, 3) == (2,)
    assert normalize_axes((2, -3), 3) == (0, 2)
    assert normalize_axes((), 3) == ()
    assert normalize_axes(np.int64(1), 2) == (1,)


# --------------------------------------------------------------------------
# var, std and cumsum against NumPy


def numpy_moment(fn_name, value, axis, ddof, keepdims):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # ddof >= n, empty axes
        return getattr(np, fn_name)(value, axis=axis, ddof=ddof, keepdims=keepdims)


@st.composite
def moment_cases(draw):
    """(var or std, shape, static shape, axis, ddof, keepdims, dtype, seed)."""
    fn_name, shape, static, axis, keepdims, dtype, seed = draw(reduce_cases(("sum",)))
    fn_name = draw(st.sampled_from(["var", "std"]))
    ddof = draw(st.sampled_from([0, 1, 2, 0.5]))
    return fn_name, shape, static, axis, ddof, keepdims, dtype, seed


@pytest.mark.parametrize("fn_name", ["var", "std"])
@pytest.mark.parametrize("value, ddof, axis", [
    (np.array([False, True]), 2, None),           # n - ddof = 0: NumPy's x / 0 is inf
    (np.array([1.0, 1.0], dtype="float32"), 2, None),   # 0 / 0: NaN
    (np.array([[1.0, 2.0], [3.0, 3.0]]), 3, 0),   # n - ddof < 0 counts as 0
    (np.array([[1.0, 2.0], [3.0, 3.0]]), 2, 1),   # inf, then NaN (3 - 3 = 0)
])
def test_var_where_n_minus_ddof_is_not_positive(mode, fn_name, value, ddof, axis):
    """CuPy's var answers NaN wherever ``n - ddof <= 0``; the H100 gave NaN
    for ``var([False, True], ddof=2)``, where NumPy gives inf."""
    x = tn.tensor("x", dtype=value.dtype.name, shape=(None,) * value.ndim)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        got = tn.function([x], getattr(tn, fn_name)(x, axis=axis, ddof=ddof), mode=mode)(value)
        expected = getattr(np, fn_name)(value, axis=axis, ddof=ddof)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


@COMPILED
@given(moment_cases())
def test_var_and_std_match_numpy(mode, case):
    fn_name, shape, static, axis, ddof, keepdims, dtype, seed = case
    value = random_values(seed, shape, dtype)
    x = tn.tensor("x", dtype=dtype, shape=static)
    out = getattr(tn, fn_name)(x, axis=axis, ddof=ddof, keepdims=keepdims)
    expected = np.asarray(numpy_moment(fn_name, value, axis, ddof, keepdims))
    assert out.dtype == expected.dtype.name
    for want, actual in zip(out.type.shape, expected.shape):
        assert want is None or want == actual
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        got = tn.function([x], out, mode=mode)(value)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype in ("float32",) else 1e-12,
                               atol=1e-6, equal_nan=True)
    dims = shape_tuple(out)
    symbolic = [d for d in dims if not isinstance(d, int)]
    values = tn.function([x], symbolic, mode=mode)(value) if symbolic else []
    assert resolve(dims, values) == got.shape


@st.composite
def cumsum_cases(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    static = tuple(d if draw(st.booleans()) else None for d in shape)
    ndim = len(shape)
    axis = draw(st.sampled_from([None] + list(range(-ndim, ndim))))
    return shape, static, axis, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**32 - 1))


@pytest.mark.parametrize("fn_name", ["cumsum", "cumprod"])
@COMPILED
@given(cumsum_cases())
def test_running_sums_and_products_match_numpy(mode, fn_name, case):
    shape, static, axis, dtype, seed = case
    value = random_values(seed, shape, dtype)
    x = tn.tensor("x", dtype=dtype, shape=static)
    out = getattr(tn, fn_name)(x, axis=axis)
    expected = getattr(np, fn_name)(value, axis=axis)
    assert out.dtype == expected.dtype.name
    for want, actual in zip(out.type.shape, expected.shape):
        assert want is None or want == actual
    if None not in static:
        assert out.type.shape == expected.shape
    got = tn.function([x], out, mode=mode)(value)
    assert_matches(got, expected)
    dims = shape_tuple(out)
    symbolic = [d for d in dims if not isinstance(d, int)]
    values = tn.function([x], symbolic, mode=mode)(value) if symbolic else []
    assert resolve(dims, values) == got.shape


@pytest.mark.parametrize("dtype, fn_name, expected", [
    ("int8", "var", "float64"), ("bool", "std", "float64"), ("float32", "var", "float32"),
    ("float16", "std", "float16"), ("complex64", "var", "float32"),
    ("complex128", "std", "float64"), ("int8", "cumsum", "int64"),
    ("uint8", "cumsum", "uint64"), ("bool", "cumsum", "int64"), ("float32", "cumsum", "float32"),
    ("int8", "cumprod", "int64"), ("uint8", "cumprod", "uint64"), ("bool", "cumprod", "int64"),
    ("float32", "cumprod", "float32"),
])
def test_new_reductions_output_dtypes(dtype, fn_name, expected):
    x = tn.matrix("x", dtype=dtype)
    assert getattr(tn, fn_name)(x, axis=0).dtype == expected
    assert getattr(tn, fn_name)(x).dtype == expected


def test_var_std_cumsum_static_shapes_and_methods():
    x = tn.tensor("x", shape=(2, None, 4))
    assert tn.var(x, axis=1).type.shape == (2, 4)
    assert tn.std(x, axis=(0, 2), keepdims=True).type.shape == (1, None, 1)
    assert tn.cumsum(x).type.shape == (None,)
    assert tn.cumsum(x, axis=-1).type.shape == (2, None, 4)
    assert tn.cumsum(tn.tensor("y", shape=(2, 3))).type.shape == (6,)
    assert tn.cumsum(tn.scalar("s")).type.shape == (1,)
    assert x.var(axis=1, ddof=1).owner.op == tn.var(x, axis=-2, ddof=1).owner.op
    assert x.std().owner.inputs[0].owner.op == tn.var(x).owner.op
    assert x.cumsum(axis=-1).owner.op == tn.cumsum(x, axis=2).owner.op
    assert str(tn.var(x, axis=1, ddof=1).owner.op) == "var{axis=(1,), ddof=1}"


def test_var_with_ddof_at_least_n_is_nan_or_inf_like_numpy(mode):
    x = tn.vector("x")
    f = tn.function([x], [tn.var(x, ddof=1), tn.var(x, ddof=2)], mode=mode)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        got = f(np.array([1.0]))
        expected = [np.var(np.array([1.0]), ddof=1), np.var(np.array([1.0]), ddof=2)]
    np.testing.assert_array_equal(got, expected)


def test_var_std_cumsum_errors():
    x = tn.matrix("x")
    for fn in (tn.var, tn.std):
        with pytest.raises(TypeError, match=r"ddof must be a number.*'1'"):
            fn(x, ddof="1")
        with pytest.raises(ValueError, match=r"axis 2\b.*ndim=2"):
            fn(x, axis=2)
        with pytest.raises(TypeError, match="keepdims must be a bool"):
            fn(x, keepdims=1)
    with pytest.raises(ValueError, match=r"cumsum: axis -3\b.*ndim=2"):
        tn.cumsum(x, axis=-3)
    with pytest.raises(ValueError, match=r"cumsum: axis 0\b.*ndim=0"):
        tn.cumsum(tn.scalar("s"), axis=0)
    with pytest.raises(TypeError, match="axis must be an int"):
        tn.cumsum(x, axis=(0,))


def test_reverse_cumsum_op():
    x = tn.tensor3("x")
    value = np.arange(24.0).reshape(2, 3, 4)
    for axis in (0, 1, 2):
        node = CumSum(axis, reverse=True).make_node(x)
        got = run_perform(node, [value])
        np.testing.assert_array_equal(got, np.flip(np.cumsum(np.flip(value, axis), axis), axis))
        assert got.flags.c_contiguous
    node = CumSum(None, reverse=True).make_node(x)
    np.testing.assert_array_equal(run_perform(node, [value]),
                                  np.cumsum(value.ravel()[::-1])[::-1])
    assert CumSum(1) != CumSum(1, reverse=True)
    with pytest.raises(ValueError, match="non-negative"):
        CumSum(-1)


def test_reverse_cumprod_op_and_its_gradient(mode):
    x = tn.tensor3("x")
    value = np.arange(1.0, 25.0).reshape(2, 3, 4) / 10
    for axis in (0, 2, None):
        node = CumProd(axis, reverse=True).make_node(x)
        flat = value if axis is not None else value.ravel()
        np.testing.assert_allclose(run_perform(node, [value]),
                                   np.flip(np.cumprod(np.flip(flat, axis or 0), axis or 0),
                                           axis or 0), rtol=1e-15)
    assert str(CumProd(1, reverse=True)) == "cumprod_reverse{axis=1}" and CumProd(1) != CumSum(1)
    rng = np.random.default_rng(5)
    signs = rng.choice([-1, 1], size=(2, 3, 4))
    for axis in (1, None):
        verify_grad(lambda v: tn.cumprod(v, axis=axis), [rng.uniform(0.5, 1.5, (2, 3, 4)) * signs],
                    rng=rng, mode=mode)
    verify_grad(lambda v: CumProd(0, reverse=True)(v), [rng.uniform(0.5, 1.5, (4, 2))], rng=rng,
                mode=mode)
    assert x.cumprod(axis=-1).owner.op == CumProd(2)


# --------------------------------------------------------------------------
# Gradients


@st.composite
def grad_cases(draw, min_len=1):
    """(shape, axis, keepdims, seed): small shapes, every axis spelling."""
    shape = tuple(draw(st.lists(st.integers(min_len, 3), max_size=3)))
    ndim = len(shape)
    axis = draw(axis_spellings(ndim))
    return shape, axis, draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


def reduced_count(shape, axis):
    axes = normalize_axes(axis, len(shape))
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


GRAD = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize("fn_name", ["sum", "mean", "prod", "max", "min"])
@GRAD
@given(case=grad_cases())
def test_reduction_gradients(fn_name, case):
    shape, axis, keepdims, seed = case
    rng = np.random.default_rng(seed)
    # Magnitudes away from 0 keep products well scaled; signs are random.
    value = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1, 1], size=shape)
    verify_grad(lambda x: getattr(tn, fn_name)(x, axis=axis, keepdims=keepdims), [value],
                rng=rng)


@GRAD
@given(case=grad_cases(), data=st.data())
def test_prod_gradient_with_a_zero(case, data):
    shape, axis, keepdims, seed = case
    rng = np.random.default_rng(seed)
    value = rng.uniform(0.5, 1.5, size=shape)
    value[tuple(data.draw(st.integers(0, n - 1)) for n in shape)] = 0.0
    verify_grad(lambda x: tn.prod(x, axis=axis, keepdims=keepdims), [value], rng=rng)


def prod_gradient_reference(value, axis):
    """d sum(prod(x, axis)) / dx as the product of the other elements, by brute force."""
    value = np.moveaxis(value, axis, -1)
    out = np.empty_like(value)
    for i in range(value.shape[-1]):
        out[..., i] = np.prod(np.delete(value, i, axis=-1), axis=-1)
    return np.moveaxis(out, -1, axis)


def test_prod_gradient_values_with_zeros(mode):
    x = tn.matrix("x")
    g = tn.function([x], tn.grad(tn.prod(x, axis=1).sum(), x), mode=mode)
    value = np.array([[0.0, 2, 0, 3],      # two zeros: nothing flows
                      [0.0, 2, 5, 3],      # one zero: it gets the product of the others
                      [1.0, 2, 5, 3],      # no zero
                      [0.0, 0, 0, 0]])
    expected = np.array([[0.0, 0, 0, 0], [30, 0, 0, 0], [30, 15, 6, 10], [0, 0, 0, 0]])
    np.testing.assert_array_equal(g(value), expected)
    np.testing.assert_array_equal(expected, prod_gradient_reference(value, 1))
    # Over every axis, with two zeros in the whole array.
    g_all = tn.function([x], tn.grad(tn.prod(x), x), mode=mode)
    np.testing.assert_array_equal(g_all(value[:2]), np.zeros((2, 4)))
    one_zero = np.array([[1.0, 2], [0, 4]])
    np.testing.assert_array_equal(g_all(one_zero), [[0, 0], [8, 0]])


@pytest.mark.parametrize("fn_name", ["max", "min"])
def test_extremum_gradient_splits_ties_evenly(mode, fn_name):
    x = tn.matrix("x")
    value = np.array([[3.0, 1, 3, 3], [2, 5, 5, 1], [7, 7, 7, 7]])
    if fn_name == "min":
        value = -value
    gz = np.array([1.0, 2.0, 4.0])
    out = getattr(tn, fn_name)(x, axis=1)
    cost = (out * tn.constant(gz)).sum()
    got = tn.function([x], tn.grad(cost, x), mode=mode)(value)
    expected = np.array([[1 / 3, 0, 1 / 3, 1 / 3], [0, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_allclose(got, expected)
    # Over every axis: the four 7s of the last row share the gradient.
    cost_all = getattr(tn, fn_name)(x, keepdims=True).sum()
    got = tn.function([x], tn.grad(cost_all, x), mode=mode)(value)
    np.testing.assert_allclose(got, np.where(value == getattr(np, fn_name)(value), 0.25, 0))


@pytest.mark.parametrize("fn_name", ["var", "std"])
@GRAD
@given(case=grad_cases(), ddof=st.sampled_from([0, 1, 0.5]))
def test_var_std_gradients(fn_name, case, ddof):
    shape, axis, keepdims, seed = case
    count = reduced_count(shape, axis)
    # std of one element is 0, where sqrt is not differentiable.
    assume(fn_name == "var" or count >= 2)
    if count - ddof <= 0:
        ddof = 0  # n - ddof <= 0 gives inf/NaN (see the test above)
    rng = np.random.default_rng(seed)
    value = rng.normal(size=shape)
    verify_grad(lambda x: getattr(tn, fn_name)(x, axis=axis, ddof=ddof, keepdims=keepdims),
                [value], rng=rng)


@GRAD
@given(case=cumsum_cases())
def test_cumsum_gradients(case):
    shape, _, axis, _, seed = case
    rng = np.random.default_rng(seed)
    verify_grad(lambda x: tn.cumsum(x, axis=axis), [rng.normal(size=shape)], rng=rng)


def test_cumsum_gradient_values(mode):
    x = tn.matrix("x")
    w = np.arange(1.0, 7.0).reshape(2, 3)
    for axis in (None, 0, 1):
        out = tn.cumsum(x, axis=axis)
        weights = w.ravel() if axis is None else w
        got = tn.function([x], tn.grad((out * tn.constant(weights)).sum(), x),
                          mode=mode)(np.zeros((2, 3)))
        # d/dx_j sum_i w_i cumsum_i = sum over i >= j of w_i: the reversed running sum.
        flat_axis = 0 if axis is None else axis
        rev = np.flip(np.cumsum(np.flip(weights, flat_axis), flat_axis), flat_axis)
        np.testing.assert_array_equal(got, rev.reshape(2, 3))


@pytest.mark.parametrize("fn, points", [
    (lambda x: tn.prod(x, axis=0), [[[0.5, -1.2], [0.0, 1.1], [1.3, 0.7]]]),
    (lambda x: tn.max(x, axis=1, keepdims=True), [[[0.5, -1.2], [0.3, 1.1]]]),
    (lambda x: tn.min(x), [[[0.5, -1.2], [0.3, 1.1]]]),
    (lambda x: tn.mean(x, axis=-1), [[[0.5, -1.2], [0.3, 1.1]]]),
    (lambda x: tn.var(x, axis=0, ddof=1), [[[0.5, -1.2], [0.3, 1.1], [1.0, 0.2]]]),
    (lambda x: tn.std(x, axis=1), [[[0.5, -1.2], [0.3, 1.1]]]),
    (lambda x: tn.cumsum(x, axis=0), [[[0.5, -1.2], [0.3, 1.1]]]),
    (lambda x: tn.cumsum(x), [[[0.5, -1.2], [0.3, 1.1]]]),
])
def test_float32_gradients(fn, points):
    points = [np.array(p, dtype="float32") for p in points]
    verify_grad(fn, points)
    x = tn.matrix("x", dtype="float32")
    assert tn.grad(fn(x).sum(), x).dtype == "float32"


def test_gradients_with_static_shapes_match_unknown_shapes(mode):
    value = np.random.default_rng(0).normal(size=(2, 3, 4))
    known = tn.tensor("k", shape=(2, 3, 4))
    unknown = tn.tensor3("u")
    for make in (lambda x: tn.prod(x, axis=(0, 2)), lambda x: tn.max(x, axis=1),
                 lambda x: tn.var(x, axis=(1, 2), keepdims=True), lambda x: tn.std(x),
                 lambda x: tn.mean(x, axis=0), lambda x: tn.cumsum(x)):
        grads = [tn.function([v], tn.grad((make(v) ** 2).sum(), v), mode=mode)(value)
                 for v in (known, unknown)]
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda x: tn.argmax(x, axis=0), lambda x: tn.argmin(x),
    lambda x: tn.all(x > 0, axis=1), lambda x: tn.any(x, axis=0)])
def test_index_and_boolean_reductions_carry_no_gradient(fn):
    x = tn.matrix("x")
    cost = tn.sum(fn(x)).astype("float64")
    with pytest.raises(tn.DisconnectedInputError):
        tn.grad(cost, x)
    node = fn(x).owner
    assert node.op.grad(node.inputs, [tn.zeros_like(node.outputs[0])]) == [None]


def test_reduction_over_no_axes_passes_the_gradient_through(mode):
    x = tn.matrix("x")
    value = np.array([[1.0, -2.0], [0.0, 3.0]])
    for fn_name in ("sum", "mean", "prod", "max", "min"):
        out = getattr(tn, fn_name)(x, axis=())
        weights = tn.constant(np.array([[1.0, 2.0], [3.0, 4.0]]))
        got = tn.function([x], tn.grad((out * weights).sum(), x), mode=mode)(value)
        np.testing.assert_array_equal(got, [[1.0, 2.0], [3.0, 4.0]])
