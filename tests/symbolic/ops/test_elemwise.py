"""Elementwise ops against NumPy: values, output dtypes (NumPy 2 promotion, weak Python
scalars), static shapes, broadcasting errors, infer_shape and memory behaviour."""

import warnings

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import scipy.special
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.graph import Variable
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise

#: the ``mode`` fixture holds no state, so sharing it across examples is fine
FIXTURE_OK = [HealthCheck.function_scoped_fixture]

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float32", "float64"]

#: name -> (tenure function, reference implementation, number of inputs)
OPS = {
    "add": (tn.add, np.add, 2),
    "sub": (tn.sub, np.subtract, 2),
    "mul": (tn.mul, np.multiply, 2),
    "true_divide": (tn.true_divide, np.true_divide, 2),
    "floor_divide": (tn.floor_divide, np.floor_divide, 2),
    "mod": (tn.mod, np.remainder, 2),
    "power": (tn.power, np.power, 2),
    "neg": (tn.neg, np.negative, 1),
    "abs": (tn.abs, np.absolute, 1),
    "sign": (tn.sign, np.sign, 1),
    "square": (tn.square, np.square, 1),
    "reciprocal": (tn.reciprocal, np.reciprocal, 1),
    "exp": (tn.exp, np.exp, 1),
    "log": (tn.log, np.log, 1),
    "log1p": (tn.log1p, np.log1p, 1),
    "expm1": (tn.expm1, np.expm1, 1),
    "sqrt": (tn.sqrt, np.sqrt, 1),
    "sin": (tn.sin, np.sin, 1),
    "cos": (tn.cos, np.cos, 1),
    "tanh": (tn.tanh, np.tanh, 1),
    "sigmoid": (tn.sigmoid, scipy.special.expit, 1),
    "softplus": (tn.softplus, scipy.special.softplus, 1),
    "relu": (tn.relu, lambda x: np.maximum(x, 0), 1),
    "erf": (tn.erf, scipy.special.erf, 1),
    "maximum": (tn.maximum, np.maximum, 2),
    "minimum": (tn.minimum, np.minimum, 2),
    "clip": (tn.clip, np.clip, 3),
    "where": (tn.where, np.where, 3),
    "less": (tn.less, np.less, 2),
    "less_equal": (tn.less_equal, np.less_equal, 2),
    "greater": (tn.greater, np.greater, 2),
    "greater_equal": (tn.greater_equal, np.greater_equal, 2),
    "equal": (tn.equal, np.equal, 2),
    "not_equal": (tn.not_equal, np.not_equal, 2),
    "logical_and": (tn.logical_and, np.logical_and, 2),
    "logical_or": (tn.logical_or, np.logical_or, 2),
    "logical_xor": (tn.logical_xor, np.logical_xor, 2),
    "logical_not": (tn.logical_not, np.logical_not, 1),
    "bitwise_and": (tn.bitwise_and, np.bitwise_and, 2),
    "bitwise_or": (tn.bitwise_or, np.bitwise_or, 2),
    "bitwise_xor": (tn.bitwise_xor, np.bitwise_xor, 2),
    "invert": (tn.invert, np.invert, 1),
    "isnan": (tn.isnan, np.isnan, 1),
    "isinf": (tn.isinf, np.isinf, 1),
    "floor": (tn.floor, np.floor, 1),
    "ceil": (tn.ceil, np.ceil, 1),
    "trunc": (tn.trunc, np.trunc, 1),
    "rint": (tn.rint, np.rint, 1),
    "round": (tn.round, np.round, 1),
    "tan": (tn.tan, np.tan, 1),
    "arcsin": (tn.arcsin, np.arcsin, 1),
    "arccos": (tn.arccos, np.arccos, 1),
    "arctan": (tn.arctan, np.arctan, 1),
    "arctan2": (tn.arctan2, np.arctan2, 2),
    "sinh": (tn.sinh, np.sinh, 1),
    "cosh": (tn.cosh, np.cosh, 1),
    "arcsinh": (tn.arcsinh, np.arcsinh, 1),
    "arccosh": (tn.arccosh, np.arccosh, 1),
    "arctanh": (tn.arctanh, np.arctanh, 1),
    "log2": (tn.log2, np.log2, 1),
    "log10": (tn.log10, np.log10, 1),
    "exp2": (tn.exp2, np.exp2, 1),
}

COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}
#: binary ops where NumPy 2 accepts a Python int out of range of an int array's dtype
#: (comparisons are special-cased; logical ops and true division use other loops)
LOGICAL = {"logical_and", "logical_or", "logical_xor"}
NO_CAST_TO_DTYPE = COMPARISONS | LOGICAL | {"true_divide"}
BINARY = [name for name, (_, _, nin) in OPS.items() if nin == 2]


def test_every_scalar_op_in_the_table_is_covered():
    assert set(ps.TABLE) == set(OPS)


# --------------------------------------------------------------------------
# Helpers


def _elements(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        info = np.iinfo(dt)
        small = st.integers(max(info.min, -20), min(info.max, 20))
        return st.one_of(small, st.sampled_from([int(info.min), int(info.max)]),
                         st.integers(int(info.min), int(info.max)))
    width = dt.itemsize * 8
    return st.one_of(
        st.floats(-10, 10, width=width, allow_subnormal=False),
        st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, np.nan, np.inf, -np.inf, 100.0]))


def _static(shape, mask):
    return tuple(d if known else None for d, known in zip(shape, mask))


def _expected_static(static_shapes):
    """NumPy broadcasting of static shapes: a length is known when some input has a
    known length other than 1 there, or every input has length 1 there."""
    ndim = max((len(s) for s in static_shapes), default=0)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in static_shapes]
    out = []
    for axis in range(ndim):
        dims = [s[axis] for s in padded]
        known = [d for d in dims if d is not None and d != 1]
        if known:
            out.append(known[0])
        elif all(d == 1 for d in dims):
            out.append(1)
        else:
            out.append(None)
    return tuple(out)


@st.composite
def elemwise_inputs(draw, nin, dtypes=DTYPES, min_side=0):
    """``nin`` arrays of mutually broadcastable shapes and random dtypes, each with a
    random mask of which lengths are static."""
    shapes = draw(hnp.mutually_broadcastable_shapes(
        num_shapes=nin, min_dims=0, max_dims=3, min_side=min_side, max_side=3))
    arrays, statics = [], []
    for shape in shapes.input_shapes:
        dtype = draw(st.sampled_from(dtypes))
        arrays.append(draw(hnp.arrays(dtype, shape, elements=_elements(dtype))))
        mask = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
        statics.append(_static(shape, mask))
    return arrays, statics


def _assert_same_values(result, expected):
    assert result.shape == expected.shape
    if expected.dtype.kind in "fc":
        rtol = {2: 2e-3, 4: 2e-6, 8: 1e-13}[expected.dtype.itemsize]
        np.testing.assert_allclose(result, expected, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(result, expected)


def _reference(np_fn, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(np_fn(*args))


def _run(f, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*args)


# --------------------------------------------------------------------------
# Every op against NumPy


@pytest.mark.parametrize("name", sorted(OPS))
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURE_OK)
@given(data=st.data())
def test_op_matches_numpy(name, data, mode):
    tn_fn, np_fn, nin = OPS[name]
    arrays, statics = data.draw(elemwise_inputs(nin))
    variables = [tn.tensor(f"x{i}", dtype=a.dtype, shape=s)
                 for i, (a, s) in enumerate(zip(arrays, statics))]
    try:
        expected = _reference(np_fn, *arrays)
    except TypeError:
        # NumPy has no loop for these dtypes: the graph is refused when it is built
        with pytest.raises(TypeError, match=ps.TABLE[name].name):
            tn_fn(*variables)
        return
    except ValueError as exc:
        # A value-dependent error (e.g. integers to negative integer powers): the
        # graph builds, and the call raises the same error.
        out = tn_fn(*variables)
        f = tn.function(variables, out, mode=mode)
        with pytest.raises(type(exc)):
            _run(f, *arrays)
        return
    out = tn_fn(*variables)
    assert isinstance(out, Variable)
    assert out.dtype == expected.dtype.name
    assert out.type.shape == _expected_static(statics)
    f = tn.function(variables, out, mode=mode)
    result = _run(f, *arrays)
    assert isinstance(result, np.ndarray)
    assert result.dtype == expected.dtype
    _assert_same_values(result, expected)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
@given(data=st.data(), target=st.sampled_from(DTYPES))
def test_cast_matches_astype(data, target, mode):
    (arr,), (static,) = data.draw(elemwise_inputs(1))
    x = tn.tensor("x", dtype=arr.dtype, shape=static)
    out = tn.cast(x, target)
    assert out.dtype == target and out.type.shape == static
    if arr.dtype == np.dtype(target):
        assert out is x  # a no-op cast adds nothing to the graph
        return
    f = tn.function([x], out, mode=mode)
    result = _run(f, arr)
    expected = _reference(lambda a: a.astype(target), arr)
    assert result.dtype == np.dtype(target)
    _assert_same_values(result, expected)


def test_astype_method_and_alias():
    x = tn.vector(dtype="int32")
    assert x.astype("float32").dtype == "float32"
    assert tn.astype(x, np.int8).dtype == "int8"
    with pytest.raises(TypeError, match="foo"):
        x.astype("foo")


def test_sigmoid_and_erf_values(mode):
    x = tn.vector("x")
    vals = np.array([-50.0, -1.0, 0.0, 0.3, 2.0, 50.0])
    f = tn.function([x], [tn.sigmoid(x), tn.erf(x), tn.softplus(x)], mode=mode)
    sig, erf, sp = f(vals)
    np.testing.assert_allclose(sig, scipy.special.expit(vals), rtol=1e-14)
    np.testing.assert_allclose(erf, scipy.special.erf(vals), rtol=1e-14)
    np.testing.assert_allclose(sp, np.log1p(np.exp(np.minimum(vals, 30))) + np.maximum(
        vals - 30, 0), rtol=1e-12)
    assert np.all(np.isfinite(tn.function([x], tn.softplus(x))(np.array([1000.0]))))


def test_wrong_number_of_inputs_is_a_type_error():
    x = tn.vector()
    with pytest.raises(TypeError, match=r"add.*2.*3"):
        tn.add(x, x, x)
    with pytest.raises(TypeError, match="exp"):
        ps_exp = Elemwise(ps.exp)
        ps_exp(x, x)


@pytest.mark.parametrize("bad", ["a", None, object()])
def test_non_numeric_operand_is_a_type_error(bad):
    x = tn.vector("x")
    with pytest.raises(TypeError):
        x + bad


# --------------------------------------------------------------------------
# Weak Python scalars (NumPy 2 promotion)


python_scalars = st.one_of(
    st.booleans(),
    st.integers(-300, 300),
    st.sampled_from([0, 1, -1, 127, 128, -129, 255, 256, 2**31, 2**40, -(2**40)]),
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
    st.sampled_from([0.5, -2.0, 1e20, float("inf"), float("nan")]),
)


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURE_OK)
@given(dtype=st.sampled_from(DTYPES), scalar=python_scalars, left=st.booleans(),
       data=st.data())
def test_weak_python_scalars_promote_like_numpy(name, dtype, scalar, left, data, mode):
    tn_fn, np_fn, _ = OPS[name]
    arr = data.draw(hnp.arrays(dtype, st.integers(0, 3), elements=_elements(dtype)))
    x = tn.vector("x", dtype=dtype)
    args_np = (scalar, arr) if left else (arr, scalar)
    args_tn = (scalar, x) if left else (x, scalar)
    try:
        expected = _reference(np_fn, *args_np)
    except OverflowError:
        # NumPy 2 refuses a Python int out of range of the array's dtype; tenure
        # refuses the graph, naming the op
        with pytest.raises(ValueError, match=name):
            tn_fn(*args_tn)
        return
    except TypeError:
        with pytest.raises(TypeError, match=name):
            tn_fn(*args_tn)
        return
    except ValueError as exc:
        f = tn.function([x], tn_fn(*args_tn), mode=mode)
        with pytest.raises(type(exc)):
            _run(f, arr)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tn_fn(*args_tn)
    assert out.dtype == expected.dtype.name
    f = tn.function([x], out, mode=mode)
    result = _run(f, arr)
    assert result.dtype == expected.dtype
    _assert_same_values(result, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rounding_takes_halves_to_even_and_keeps_zeros_signs(dtype, mode):
    """round and rint as np.round: 2.5 -> 2.0, -0.5 -> -0.0; floor, ceil and
    trunc keep -0.0, infinities and NaN (17 values: a vectorized loop and
    its tail on the C linker)."""
    x = tn.vector("x", dtype=dtype)
    fns = [tn.round, tn.rint, tn.floor, tn.ceil, tn.trunc]
    f = tn.function([x], [fn(x) for fn in fns], mode=mode)
    v = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.0, 0.4999999, -0.7, 2 ** 52 + 0.5,
                  np.inf, -np.inf, np.nan, 1e30, -3.0, 0.0], dtype=dtype)
    references = [np.round, np.rint, np.floor, np.ceil, np.trunc]
    for fn, got, reference in zip(fns, f(v), references):
        want = reference(v)
        assert got.dtype == want.dtype, fn.__name__
        np.testing.assert_array_equal(got, want, err_msg=fn.__name__)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=fn.__name__)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "bool"])
def test_rounding_an_integer_keeps_it_and_its_dtype(dtype, mode):
    """NumPy 2: floor, ceil, trunc (and round, of integers) return their
    input's dtype; rint gives floats."""
    x = tn.vector("x", dtype=dtype)
    fns = [tn.floor, tn.ceil, tn.trunc, tn.rint] + ([] if dtype == "bool" else [tn.round])
    v = np.array([0, 1, 1, 0, 1], dtype=dtype) if dtype == "bool" else \
        np.array([0, 1, 5, 100, np.iinfo(dtype).max], dtype=dtype)
    f = tn.function([x], [fn(x) for fn in fns], mode=mode)
    for fn, got in zip(fns, f(v)):
        want = np.rint(v) if fn is tn.rint else np.round(v) if fn is tn.round else \
            getattr(np, fn.__name__)(v)
        assert got.dtype == want.dtype, fn.__name__
        np.testing.assert_array_equal(got, want, err_msg=fn.__name__)


def test_switch_is_theanos_name_for_where():
    c, a, b = tn.vector("c", dtype="bool"), tn.vector("a"), tn.vector("b")
    f = tn.function([c, a, b], tn.switch(c, a, b))
    np.testing.assert_array_equal(f(np.array([True, False]), np.ones(2), np.zeros(2)), [1, 0])
    assert tn.switch is tn.where


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 17])   # a scalar tail; a vectorized loop and its tail
def test_power_one_half_is_numpys_square_root(dtype, n, mode):
    """NumPy takes an array to the scalar power 0.5 as sqrt: nan at -inf and
    -0.0 at -0.0, where pow gives inf and 0.0."""
    x = tn.vector("x", dtype=dtype)
    f = tn.function([x], [x ** 0.5, x ** 2.5], mode=mode)
    arr = np.full(n, -np.inf, dtype=dtype)
    arr[0] = -0.0
    with np.errstate(all="ignore"):
        want = [np.power(arr, 0.5), np.power(arr, 2.5)]
        got = _run(f, arr)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


def test_float32_times_python_float_stays_float32(mode):
    x = tn.vector("x", dtype="float32")
    out = x * 2.0
    assert out.dtype == "float32"
    f = tn.function([x], [out, 0.5 + x, x / 3, x ** 2], mode=mode)
    for r in f(np.array([1.5, 2.0], dtype=np.float32)):
        assert r.dtype == np.float32
    assert f(np.array([1.5], dtype=np.float32))[0][0] == 3.0


def test_int_var_true_divide_python_int_is_float64(mode):
    x = tn.vector("x", dtype="int32")
    out = x / 2
    assert out.dtype == "float64"
    f = tn.function([x], out, mode=mode)
    np.testing.assert_array_equal(f(np.array([1, 3], dtype=np.int32)), [0.5, 1.5])


def test_bool_var_plus_python_int_is_int64(mode):
    b = tn.vector("b", dtype="bool")
    out = b + 1
    assert out.dtype == "int64"
    r = tn.function([b], out, mode=mode)(np.array([True, False]))
    assert r.dtype == np.int64
    np.testing.assert_array_equal(r, [2, 1])
    assert (b + True).dtype == "bool"
    assert (b * 1.5).dtype == "float64"


def test_small_int_var_keeps_dtype_with_python_int(mode):
    x = tn.vector("x", dtype="int8")
    out = x + 100
    assert out.dtype == "int8"
    r = tn.function([x], out, mode=mode)(np.array([1, 100], dtype=np.int8))
    assert r.dtype == np.int8
    np.testing.assert_array_equal(r, np.array([1, 100], dtype=np.int8) + 100)
    assert (x + 1.5).dtype == "float64"  # a float scalar changes kind: default float


@pytest.mark.parametrize("dtype, value", [("int8", 1000), ("int8", -129), ("uint8", -1),
                                          ("uint8", 256), ("int32", 2**40)])
def test_python_int_out_of_range_is_a_value_error_naming_the_op(dtype, value):
    x = tn.vector("x", dtype=dtype)
    with pytest.raises(OverflowError):
        np.add(np.zeros(1, dtype=dtype), value)  # what NumPy 2 does
    with pytest.raises(ValueError) as info:
        x + value
    msg = str(info.value)
    assert "add" in msg and str(value) in msg and dtype in msg
    with pytest.raises(ValueError, match="mul"):
        value * x


@pytest.mark.parametrize("dtype, value, result", [
    ("int8", 1000, "int8"), ("int8", -129, "int8"), ("uint8", -1, "uint8"),
    ("uint16", 70000, "uint16"), ("int64", 2**63, "int64"), ("bool", 2**63, "int64")])
def test_where_with_a_python_int_out_of_range_is_a_value_error(dtype, value, result):
    """NumPy 2.5's rule, whichever NumPy is installed: where's result dtype is
    decided without the Python int (weakly typed), which must then fit it
    (NumPy 2.4's np.where wrapped 1000 to -24 in int8 silently)."""
    c, x = tn.vector("c", dtype="bool"), tn.vector("x", dtype=dtype)
    if np.lib.NumpyVersion(np.__version__) >= "2.5.0":   # the reference, where installed
        with pytest.raises(OverflowError):
            np.where(np.ones(2, bool), np.zeros(2, dtype), value)
    for args in [(c, x, value), (c, value, x)]:
        with pytest.raises(ValueError, match=f"where.*{value} out of bounds for {result}"):
            tn.where(*args)
    fits = np.iinfo(result).max if value > 0 else np.iinfo(result).min
    out = tn.where(c, x, fits)
    assert out.dtype == result
    got = tn.function([c, x], out)(np.array([True, False]), np.zeros(2, dtype))
    np.testing.assert_array_equal(got, np.array([0, fits], result))


@pytest.mark.parametrize("name", sorted(NO_CAST_TO_DTYPE))
@pytest.mark.parametrize("dtype, value", [("int8", 1000), ("uint8", -1)])
def test_out_of_range_python_int_where_numpy_does_not_cast_it(name, dtype, value, mode):
    tn_fn, np_fn, _ = OPS[name]
    x = tn.vector("x", dtype=dtype)
    arr = np.array([0, 5], dtype=dtype)
    expected = np_fn(arr, value)
    out = tn_fn(x, value)
    assert out.dtype == expected.dtype.name
    r = tn.function([x], out, mode=mode)(arr)
    assert r.dtype == expected.dtype
    np.testing.assert_array_equal(r, expected)


@pytest.mark.parametrize("name", sorted(LOGICAL))
def test_logical_ops_with_underflowing_python_float(name, mode):
    tn_fn, np_fn, _ = OPS[name]
    x = tn.vector("x", dtype="float32")
    arr = np.array([0.0, 1.0], dtype=np.float32)
    for value in (1e-50, -1e-300):
        expected = np_fn(arr, value)
        r = tn.function([x], tn_fn(x, value), mode=mode)(arr)
        np.testing.assert_array_equal(r, expected)


@pytest.mark.parametrize("dtype, value", [("float64", 2**70), ("uint64", 2**63)])
def test_python_int_beyond_int64_with_wider_var(dtype, value, mode):
    x = tn.vector("x", dtype=dtype)
    arr = np.array([1, 2], dtype=dtype)
    expected = arr + value
    out = x + value
    assert out.dtype == expected.dtype.name
    np.testing.assert_array_equal(tn.function([x], out, mode=mode)(arr), expected)


def test_clip_with_out_of_range_bound_like_numpy(mode):
    x = tn.vector("x", dtype="int8")
    arr = np.array([-5, 5, 127], dtype=np.int8)
    out = tn.clip(x, 0, 1000)
    expected = np.clip(arr, 0, 1000)
    assert out.dtype == expected.dtype.name
    np.testing.assert_array_equal(tn.function([x], out, mode=mode)(arr), expected)


def test_all_python_float_operands_under_floatX_float32():
    with tn.config.change_flags(floatX="float32"):
        out = tn.true_divide(1.0, 3.0)
        value = out.eval()
    assert value.dtype == np.dtype(out.dtype)
    expected = np.asarray(1.0 / 3.0, dtype=out.dtype)
    np.testing.assert_allclose(value, expected, rtol=4 * np.finfo(out.dtype).eps)


def test_all_python_scalars(mode):
    out = tn.add(1, 2.5)
    assert out.dtype == "float64"
    assert tn.function([], out, mode=mode)() == 3.5
    assert tn.add(2, 3).dtype == "int64"


def test_where_and_clip_with_python_scalars(mode):
    c = tn.vector("c", dtype="bool")
    x = tn.vector("x", dtype="float32")
    i8 = tn.vector("i", dtype="int8")
    cases = [
        (tn.where(c, x, 0.0), lambda cv, xv, iv: np.where(cv, xv, 0.0)),
        (tn.where(c, 1, 2.5), lambda cv, xv, iv: np.where(cv, 1, 2.5)),
        (tn.where(c, i8, 7), lambda cv, xv, iv: np.where(cv, iv, 7)),
        (tn.clip(x, 0, 1.5), lambda cv, xv, iv: np.clip(xv, 0, 1.5)),
        (tn.clip(i8, -3, 3), lambda cv, xv, iv: np.clip(iv, -3, 3)),
        (tn.clip(i8, 0, 1.5), lambda cv, xv, iv: np.clip(iv, 0, 1.5)),
    ]
    vals = (np.array([True, False, True]), np.array([-1.0, 0.5, 3.0], dtype=np.float32),
            np.array([-9, 2, 100], dtype=np.int8))
    f = tn.function([c, x, i8], [o for o, _ in cases], mode=mode, on_unused_input="ignore")
    for (out, ref), r in zip(cases, f(*vals)):
        e = np.asarray(ref(*vals))
        assert out.dtype == e.dtype.name and r.dtype == e.dtype
        np.testing.assert_array_equal(r, e)


# --------------------------------------------------------------------------
# Operators on variables


def test_operators_build_the_right_ops(mode):
    x, y = tn.vector("x"), tn.vector("y")
    cases = {
        "add": x + y, "sub": x - y, "mul": x * y, "true_divide": x / y,
        "floor_divide": x // y, "mod": x % y, "power": x ** y, "neg": -x, "abs": abs(x),
        "less": x < y, "less_equal": x <= y, "greater": x > y, "greater_equal": x >= y,
    }
    for name, out in cases.items():
        assert out.owner.op.scalar_op.name == name
    assert +x is x
    b = tn.vector("b", dtype="bool")
    assert (b & b).owner.op.scalar_op.name == "bitwise_and"
    assert (b | b).owner.op.scalar_op.name == "bitwise_or"
    assert (b ^ b).owner.op.scalar_op.name == "bitwise_xor"
    assert (~b).owner.op.scalar_op.name == "invert"


def test_reflected_operators(mode):
    x = tn.vector("x")
    xv = np.array([1.0, 2.0, 4.0])
    outs = [2 - x, 2 / x, 2 // x, 2 % x, 2 ** x, 3 + x, 3 * x]
    expected = [2 - xv, 2 / xv, 2 // xv, 2 % xv, 2 ** xv, 3 + xv, 3 * xv]
    assert outs[0].owner.op.scalar_op.name == "sub"
    # the Python number is the first operand
    assert outs[0].owner.inputs[1] is x
    f = tn.function([x], outs, mode=mode)
    for r, e in zip(f(xv), expected):
        np.testing.assert_allclose(r, e)
    i = tn.vector("i", dtype="int64")
    iv = np.array([1, 6])
    g = tn.function([i], [5 & i, 5 | i, 5 ^ i], mode=mode)
    for r, e in zip(g(iv), [5 & iv, 5 | iv, 5 ^ iv]):
        np.testing.assert_array_equal(r, e)


def test_ndarray_on_the_left_returns_a_variable(mode):
    x = tn.vector("x")
    arr = np.array([1.0, 2.0, 3.0])
    for out in (arr + x, arr - x, arr * x, arr / x, np.float64(2.0) * x, arr < x):
        assert isinstance(out, Variable)
    out = arr - x
    r = tn.function([x], out, mode=mode)(np.array([1.0, 1.0, 1.0]))
    np.testing.assert_array_equal(r, [0.0, 1.0, 2.0])
    # NumPy scalars are strongly typed, like arrays
    x32 = tn.vector("x32", dtype="float32")
    assert (np.float64(2.0) * x32).dtype == "float64"
    assert (np.float32(2.0) * x32).dtype == "float32"
    assert (np.ones(3, dtype=np.float32) + x32).dtype == "float32"


def test_list_operand_becomes_a_constant(mode):
    x = tn.vector("x")
    out = x + [1.0, 2.0]
    r = tn.function([x], out, mode=mode)(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(r, [2.0, 3.0])
    assert out.type.shape == (2,)


def test_eq_is_identity_not_a_graph():
    x, y = tn.vector("x"), tn.vector("y")
    assert (x == y) is False
    assert (x == x) is True
    assert (x != y) is True
    assert {x: 1, y: 2}[y] == 2
    assert x in [y, x] and x not in [y]
    e = tn.eq(x, y)
    assert isinstance(e, Variable) and e.dtype == "bool"


def test_symbolic_truth_and_len_refused():
    x = tn.vector("x")
    with pytest.raises(TypeError):
        bool(x > 0)
    with pytest.raises(TypeError):
        len(x)
    with pytest.raises(TypeError):
        iter(x)


# --------------------------------------------------------------------------
# Broadcasting


def test_static_broadcast_error_at_build_time():
    a = tn.vector("a", shape=(3,))
    b = tn.vector("b", shape=(4,))
    with pytest.raises(ValueError) as info:
        a + b
    msg = str(info.value)
    assert "(3,)" in msg and "(4,)" in msg and "add" in msg
    with pytest.raises(ValueError, match="mul"):
        tn.matrix(shape=(2, 3)) * tn.vector(shape=(2,))
    with pytest.raises(ValueError, match="where"):
        tn.where(tn.vector(dtype="bool", shape=(5,)), a, 0.0)


def test_static_broadcast_rules():
    assert (tn.vector(shape=(1,)) + tn.vector(shape=(4,))).type.shape == (4,)
    assert (tn.vector(shape=(1,)) + tn.vector()).type.shape == (None,)
    assert (tn.vector(shape=(1,)) + tn.vector(shape=(1,))).type.shape == (1,)
    assert (tn.vector(shape=(3,)) + tn.vector()).type.shape == (3,)
    assert (tn.vector(shape=(0,)) + tn.vector()).type.shape == (0,)
    assert (tn.matrix(shape=(None, 1)) + tn.vector(shape=(5,))).type.shape == (None, 5)
    assert (tn.scalar() + tn.tensor3(shape=(2, None, 1))).type.shape == (2, None, 1)


def test_runtime_broadcast_mismatch_is_a_value_error(mode):
    x, y = tn.vector("x"), tn.vector("y")
    f = tn.function([x, y], x + y, mode=mode)
    np.testing.assert_array_equal(f(np.ones(3), np.ones(1)), [2.0, 2.0, 2.0])
    with pytest.raises(ValueError):
        f(np.ones(3), np.ones(4))
    # a failed call does not break the function
    np.testing.assert_array_equal(f(np.ones(2), np.ones(2)), [2.0, 2.0])


# --------------------------------------------------------------------------
# infer_shape


def _check_inferred_shape(out, variables, arrays, mode):
    dims = tn.ops.shape_tuple(out)
    assert len(dims) == out.ndim
    symbolic = [d for d in dims if isinstance(d, Variable)]
    f = tn.function(variables, symbolic + [out], mode=mode, on_unused_input="ignore")
    *values, actual = _run(f, *arrays)
    values = iter(values)
    inferred = tuple(int(next(values)) if isinstance(d, Variable) else d for d in dims)
    assert inferred == actual.shape
    for static, got in zip(out.type.shape, dims):
        if static is not None:
            assert got == static  # known lengths stay plain ints


@pytest.mark.parametrize("name", ["add", "mul", "maximum", "less", "where", "clip", "exp"])
@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURE_OK)
@given(data=st.data())
def test_infer_shape_matches_actual_shape(name, data, mode):
    tn_fn, _, nin = OPS[name]
    arrays, statics = data.draw(elemwise_inputs(nin, dtypes=["float64"]))
    variables = [tn.tensor(f"x{i}", dtype=a.dtype, shape=s)
                 for i, (a, s) in enumerate(zip(arrays, statics))]
    out = tn_fn(*variables)
    _check_inferred_shape(out, variables, arrays, mode)


def test_infer_shape_unknown_dims_broadcasting(mode):
    x = tn.matrix("x")
    y = tn.matrix("y")
    out = x * y
    for xs, ys in [((3, 1), (1, 4)), ((1, 1), (2, 5)), ((2, 5), (2, 5)), ((1, 3), (1, 1))]:
        _check_inferred_shape(out, [x, y], [np.ones(xs), np.ones(ys)], mode)


def test_infer_shape_does_not_compute_the_output():
    x = tn.matrix("x")
    y = tn.vector("y", shape=(4,))
    out = tn.exp(x) + y
    dims = tn.ops.shape_tuple(out)
    assert dims[1] == 4
    f = tn.function([x], dims[0], on_unused_input="ignore")
    nodes = f.fgraph.toposort()
    assert not any(isinstance(n.op, Elemwise) and n.op.scalar_op.name == "exp" for n in nodes)
    assert int(f(np.ones((7, 4)))) == 7


def test_infer_shape_zero_length_with_static_broadcast(mode):
    x = tn.vector("x")
    y = tn.vector("y", shape=(1,))
    _check_inferred_shape(x + y, [x, y], [np.ones(0), np.ones(1)], mode)


@pytest.mark.parametrize("xs, ys", [(0, 1), (1, 0), (0, 0), (1, 1), (1, 5), (5, 1)])
def test_infer_shape_zero_length_broadcast_with_unknown_dims(xs, ys, mode):
    # 0 against 1 broadcasts to 0 (a max of the lengths would say 1)
    x, y = tn.vector("x"), tn.vector("y")
    _check_inferred_shape(x + y, [x, y], [np.ones(xs), np.ones(ys)], mode)
    z = tn.vector("z")
    _check_inferred_shape(tn.where(x > 0, y, z), [x, y, z],
                          [np.ones(xs), np.ones(ys), np.ones(1)], mode)


# --------------------------------------------------------------------------
# perform: buffer reuse and in-place


def test_perform_writes_into_a_matching_buffer():
    x, y = tn.vector("x"), tn.vector("y")
    node = tn.add(x, y).owner
    buf = np.full(3, -7.0)
    cell = [buf]
    node.op.perform(node, [np.ones(3), np.arange(3.0)], [cell])
    assert cell[0] is buf
    np.testing.assert_array_equal(buf, [1.0, 2.0, 3.0])


def test_perform_broadcast_into_buffer():
    x, y = tn.matrix("x"), tn.vector("y")
    node = tn.mul(x, y).owner
    buf = np.empty((2, 3))
    cell = [buf]
    node.op.perform(node, [np.full((2, 1), 2.0), np.arange(3.0)], [cell])
    assert cell[0] is buf
    np.testing.assert_array_equal(buf, [[0.0, 2.0, 4.0]] * 2)


@pytest.mark.parametrize("buf", [np.full(3, -7.0, dtype=np.float32), np.full(4, -7.0),
                                 np.full((1, 3), -7.0), np.full(3, -7, dtype=np.int64)])
def test_perform_ignores_a_mismatched_buffer(buf):
    x, y = tn.vector("x"), tn.vector("y")
    node = tn.add(x, y).owner
    before = buf.copy()
    cell = [buf]
    node.op.perform(node, [np.ones(3), np.arange(3.0)], [cell])
    assert cell[0] is not buf
    assert cell[0].dtype == np.float64 and cell[0].shape == (3,)
    np.testing.assert_array_equal(cell[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(buf, before)


@pytest.mark.parametrize("name", ["where", "clip", "softplus", "sigmoid"])
def test_perform_buffer_reuse_non_ufunc_impls(name):
    tn_fn, np_fn, nin = OPS[name]
    rng = np.random.default_rng(0)
    vals = [rng.normal(size=4) for _ in range(nin)]
    if name == "where":
        vals[0] = vals[0] > 0
    if name == "clip":
        vals[1], vals[2] = np.full(4, -0.5), np.full(4, 0.5)
    variables = [tn.vector(dtype=v.dtype) for v in vals]
    node = tn_fn(*variables).owner
    buf = np.full(4, 99.0)
    cell = [buf]
    node.op.perform(node, vals, [cell])
    assert cell[0] is buf
    np.testing.assert_allclose(buf, np_fn(*vals))


def test_perform_cast_into_buffer():
    x = tn.vector("x")
    node = x.astype("int32").owner
    buf = np.zeros(3, dtype=np.int32)
    cell = [buf]
    node.op.perform(node, [np.array([1.7, -2.2, 3.0])], [cell])
    assert cell[0] is buf
    np.testing.assert_array_equal(buf, [1, -2, 3])


def test_borrowed_output_buffer_reused_across_calls(mode):
    x, y = tn.vector("x"), tn.vector("y")
    f = tn.function([x, y], tn.Out(x * y, borrow=True), mode=mode)
    r1 = f(np.ones(3), np.full(3, 2.0))
    np.testing.assert_array_equal(r1, [2.0, 2.0, 2.0])
    r2 = f(np.ones(3), np.full(3, 5.0))
    np.testing.assert_array_equal(r2, [5.0, 5.0, 5.0])
    r3 = f(np.ones(2), np.full(2, 3.0))  # shape change: fresh buffer, right result
    np.testing.assert_array_equal(r3, [3.0, 3.0])


def test_inplace_elemwise_declares_destroy_map():
    op = Elemwise(ps.add, {0: 1})
    assert op.destroy_map == {0: [1]}
    assert Elemwise(ps.add).destroy_map == {}
    assert "inplace" in str(op)


def test_inplace_elemwise_perform_writes_into_its_input():
    op = Elemwise(ps.mul, {0: 0})
    x, y = tn.vector("x"), tn.vector("y")
    node = op.make_node(x, y)
    xv = np.array([1.0, 2.0, 3.0])
    cell = [None]
    op.perform(node, [xv, np.full(3, 2.0)], [cell])
    assert cell[0] is xv
    np.testing.assert_array_equal(xv, [2.0, 4.0, 6.0])


@pytest.mark.shares_buffers
def test_inplace_elemwise_compiled_with_mutable_input(mode):
    op = Elemwise(ps.add, {0: 0})
    a, b = tn.vector("a"), tn.vector("b")
    out = op(a, b)
    f = tn.function([tn.In(a, borrow=True, mutable=True), b], out, mode=mode)
    av = np.ones(3)
    r = f(av, np.arange(3.0))
    np.testing.assert_array_equal(r, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(av, [1.0, 2.0, 3.0])  # written in place
    # without mutable, overwriting the caller's input is refused
    with pytest.raises(ValueError, match="mutable"):
        tn.function([a, b], out, mode=mode)


def test_inplace_elemwise_input_must_hold_the_output():
    op = Elemwise(ps.add, {0: 0})
    with pytest.raises(TypeError, match="int32"):
        op(tn.vector(dtype="int32"), tn.vector())  # output is float64
    with pytest.raises(TypeError):
        op(tn.vector(shape=(1,)), tn.vector(shape=(3,)))  # output is larger


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_power_by_a_0d_exponent_as_numpy(mode, dtype):
    """NumPy takes the square root for a 0-d exponent of 0.5 (nan at -inf,
    -0.0 at -0.0) and ``pow`` for an array of exponents (inf, 0.0): a power
    node does the same on every linker (a falsifying example of
    test_op_matches_numpy once)."""
    base = np.array([-np.inf, -0.0, 4.0], dtype=dtype)
    v, w = tn.vector("v", dtype=dtype), tn.vector("w", dtype=dtype)
    a, b = tn.tensor("a", dtype=dtype, shape=()), tn.tensor("b", dtype=dtype, shape=())
    half = np.array(0.5, dtype=dtype)
    with np.errstate(invalid="ignore"):
        cases = [(tn.function([v, b], v ** b, mode=mode), (base, half)),
                 (tn.function([a, b], a ** b, mode=mode), (base[0], half)),
                 (tn.function([v, w], v ** w, mode=mode), (base, np.full(3, 0.5, dtype))),
                 (tn.function([v, b], v ** b, mode=mode), (base, np.array(2.0, dtype)))]
        for f, args in cases:
            np.testing.assert_array_equal(f(*args), np.power(*args))
            assert np.signbit(f(*args)).tolist() == np.signbit(np.power(*args)).tolist()
