"""Indexing against NumPy: basic (Subtensor, a view) and advanced (AdvancedSubtensor,
a copy) indexing, take, set_subtensor / inc_subtensor, and their gradients:
results, static shapes, inferred shapes, memory and errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.graph import ancestors
from tenure.symbolic.ops.indexing import AdvancedSubtensor, In, Subtensor, getitem, slice_length
from tenure.symbolic.ops.shape import shape_tuple
from tenure.testing import verify_grad
from tests.helpers import assert_matches, eval_dims

SETTINGS = settings(max_examples=80, deadline=None)
# For tests that take the (stateless, function-scoped) `mode` fixture.
COMPILED = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
GRAD = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def perform(var, x_value, *scalar_values):
    """Run ``var``'s Subtensor node directly."""
    node = var.owner
    storage = [[None]]
    node.op.perform(node, [x_value, *scalar_values], storage)
    return storage[0][0]


# --------------------------------------------------------------------------
# Random basic indices


bounds = st.one_of(st.none(), st.integers(-8, 8))
steps = st.one_of(st.none(), st.sampled_from([-3, -2, -1, 1, 2, 3]))


@st.composite
def index_cases(draw):
    """A shape and a valid basic index for it (ints in range)."""
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    n_consumed = draw(st.integers(0, len(shape)))
    # Which axes the Ellipsis (if any) stands for: a contiguous run of them.
    use_ellipsis = draw(st.booleans())
    skip_at = draw(st.integers(0, n_consumed)) if use_ellipsis else n_consumed
    consumed_axes = list(range(skip_at)) + list(
        range(len(shape) - (n_consumed - skip_at), len(shape)))
    items = []
    for axis in consumed_axes:
        length = shape[axis]
        if length > 0 and draw(st.booleans()):
            items.append(draw(st.integers(-length, length - 1)))
        else:
            items.append(slice(draw(bounds), draw(bounds), draw(steps)))
    if use_ellipsis:
        items.insert(skip_at, Ellipsis)
    # Sprinkle new axes anywhere.
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return shape, tuple(items)


def symbolize(index, data):
    """The index with some ints and slice bounds replaced by symbolic scalars:
    returns (symbolic index, scalar variables, their values)."""
    scalars, values = [], []

    def maybe(v):
        if v is None or not data.draw(st.booleans()):
            return v
        dtype = data.draw(st.sampled_from(["int64", "int32", "int8", "uint8"]))
        if dtype == "uint8" and v < 0:
            dtype = "int16"
        var = tn.scalar(f"i{len(scalars)}", dtype=dtype)
        scalars.append(var)
        values.append(np.array(v, dtype=dtype))
        return var

    items = []
    for item in index:
        if isinstance(item, slice):
            items.append(slice(maybe(item.start), maybe(item.stop), maybe(item.step)))
        elif isinstance(item, int):
            items.append(maybe(item))
        else:
            items.append(item)
    return tuple(items), scalars, values


@given(case=index_cases(), data=st.data())
@SETTINGS
def test_getitem_matches_numpy(case, data):
    mode = tn.Mode(linker="py")
    shape, index = case
    hide = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    dtype = data.draw(st.sampled_from(["float64", "int16", "bool", "complex128"]))
    x = tn.tensor("x", dtype=dtype, shape=tuple(None if h else d for d, h in zip(shape, hide)))
    value = np.asarray(np.random.default_rng(1).integers(0, 9, size=shape)).astype(dtype)
    expected = np.asarray(value[index])

    sym_index, scalars, scalar_values = symbolize(index, data)
    # A bare item (not a tuple) is a one-item index.
    out = x[sym_index] if len(sym_index) != 1 or data.draw(st.booleans()) else x[sym_index[0]]
    assert isinstance(out.owner.op, Subtensor)
    assert out.dtype == dtype and out.ndim == expected.ndim

    inputs, values = [x, *scalars], [value, *scalar_values]
    result = tn.function(inputs, out, mode=mode)(*values)
    np.testing.assert_array_equal(result, expected)
    assert result.shape == expected.shape

    # Static lengths agree with the result; known ones are computed.
    for k, (static, real) in enumerate(zip(out.type.shape, expected.shape)):
        assert static is None or static == real, (out.type, expected.shape)
    if not scalars and None not in x.type.shape:
        assert out.type.shape == expected.shape

    # Inferred shapes, without computing the result.
    dims = shape_tuple(out)
    assert out not in ancestors([d for d in dims if not isinstance(d, int)])
    assert eval_dims(dims, inputs, values, mode) == expected.shape

    # The result is a view (a 0-d array rather than a scalar copy for full ints).
    direct = perform(out, value, *[int(v) for v in scalar_values])
    assert isinstance(direct, np.ndarray)
    assert direct.base is not None
    if expected.size:
        assert np.shares_memory(direct, value)


@given(n=st.integers(0, 12), start=bounds, stop=bounds,
       step=st.one_of(st.none(), st.sampled_from([-4, -3, -2, -1, 1, 2, 3, 4])),
       symbolic=st.lists(st.booleans(), min_size=4, max_size=4))
@settings(max_examples=100, deadline=None)
def test_slice_length_formula(n, start, stop, step, symbolic):
    # Every mix of known and symbolic n/start/stop/step, including large bounds.
    mode = tn.Mode(linker="py")
    expected = len(range(*slice(start, stop, step).indices(n)))
    args, inputs, values = [], [], []
    for value, sym in zip((n, start, stop, step), symbolic):
        if sym and value is not None:
            var = tn.scalar(dtype="int64")
            args.append(var)
            inputs.append(var)
            values.append(value)
        else:
            args.append(value)
    result = slice_length(*args)
    if not inputs:
        assert result == expected
    else:
        assert int(tn.function(inputs, result, mode=mode)(*values)) == expected


@pytest.mark.parametrize("n, sl", [
    (5, slice(-100, 100)), (5, slice(100, -100, -1)), (5, slice(None, None, -2)),
    (0, slice(None, None, -1)), (7, slice(-2, None, -3)), (3, slice(10**12, None, -1)),
    (3, slice(-10**12, 10**12, 2)),
])
def test_slice_length_edge_cases(n, sl, mode):
    # Every given bound symbolic: nothing can be decided when the graph is built.
    x = tn.vector("x")
    value = np.arange(float(n))
    inputs, values = [x], [value]

    def sym(bound):
        if bound is None:
            return None
        var = tn.scalar(dtype="int64")
        inputs.append(var)
        values.append(bound)
        return var

    out = x[sym(sl.start):sym(sl.stop):sym(sl.step)]
    assert out.type.shape == (None,)
    expected = value[sl]
    assert eval_dims(shape_tuple(out), inputs, values, mode) == expected.shape
    np.testing.assert_array_equal(tn.function(inputs, out, mode=mode)(*values), expected)


# --------------------------------------------------------------------------
# Structure and static shapes


def test_pattern_and_inputs():
    x = tn.tensor3("x")
    i = tn.scalar("i", dtype="int32")
    out = x[i, 1:tn.constant(4), None]
    op = out.owner.op
    assert op.pattern == (("int", In(1)), ("slice", 1, 4, None), ("newaxis",),
                          ("slice", None, None, None))
    assert out.owner.inputs == [x, i]  # the constant folded into the pattern
    assert str(op) == "Subtensor{$1, 1:4, None, :}"
    # Equal indexings give equal ops (so they can merge).
    assert x[tn.scalar(dtype="int64"), 1:4, None].owner.op == op
    assert op.view_map == {0: [0]}


@pytest.mark.parametrize("static, index, expected", [
    ((5, 4), (1,), (4,)),
    ((5, 4), (slice(1, None), None), (4, 1, 4)),
    ((5, None), (slice(None, None, -2), slice(2, 3)), (3, None)),
    ((5, 4), (Ellipsis, 0), (5,)),
    ((5, 4), (Ellipsis, None), (5, 4, 1)),
    ((None, 4), (slice(1, 3), Ellipsis, slice(-10, 10)), (None, 4)),
    ((), (None, Ellipsis, None), (1, 1)),
    ((), (), ()),
    ((3,), (slice(5, 1),), (0,)),
])
def test_static_shapes(static, index, expected):
    x = tn.tensor("x", shape=static)
    assert getitem(x, index).type.shape == expected


def test_symbolic_bounds_make_unknown_lengths():
    x = tn.tensor("x", shape=(5, 4))
    n = tn.scalar("n", dtype="int64")
    assert x[:n, n].type.shape == (None,)
    assert x[n].type.shape == (4,)


def test_shape_vector_indexing(mode):
    # shape_tuple's fallback is basic indexing of the shape vector.
    x = tn.matrix("x")
    d = x.shape[1]
    assert d.type == tn.TensorType("int64", ())
    assert int(tn.function([x], d, mode=mode)(np.zeros((2, 7)))) == 7


def test_scalar_result_is_a_zero_d_view():
    x = tn.matrix("x")
    out = x[1, 2]
    value = np.arange(6.0).reshape(2, 3)
    result = perform(out, value)
    assert isinstance(result, np.ndarray) and result.shape == () and result == 5.0
    assert np.shares_memory(result, value)


def test_runtime_out_of_range(mode):
    x = tn.vector("x")
    i = tn.scalar("i", dtype="int64")
    fn = tn.function([x, i], x[i], mode=mode)
    assert fn(np.arange(3.0), -3) == 0.0
    with pytest.raises(IndexError, match="out of bounds"):
        fn(np.arange(3.0), 3)
    fn = tn.function([x], x[4], mode=mode)  # length unknown when built
    with pytest.raises(IndexError, match="out of bounds"):
        fn(np.arange(3.0))


def test_runtime_zero_step(mode):
    x = tn.vector("x")
    s = tn.scalar("s", dtype="int64")
    fn = tn.function([x, s], x[::s], mode=mode)
    with pytest.raises(ValueError, match="step cannot be zero"):
        fn(np.arange(3.0), 0)


# --------------------------------------------------------------------------
# Errors when the graph is built


def test_too_many_indices():
    x = tn.matrix("x")
    with pytest.raises(IndexError, match="too many indices .* 2-dimensional .* 3 were"):
        x[0, 1, 2]
    with pytest.raises(IndexError, match="too many indices .* 0-dimensional"):
        tn.scalar("s")[0]
    x[None, 0, None, 1, None, ...]  # new axes and ... do not count


def test_two_ellipses():
    with pytest.raises(IndexError, match="single ellipsis"):
        tn.matrix("x")[..., 0, ...]


@pytest.mark.parametrize("index, message", [
    (1.0, "invalid index float 1.0.*floats are not indices"),
    (np.float32(2), "invalid index float32"),
    ("a", "invalid index str"),
    ([0.5, 1.0], "array indices must be integers, got list"),
    (np.array([0.0, 1.0]), "array indices must be integers, got an array of float64"),
    ([[0, 1], [2]], "rectangular array of integers"),
    (True, "boolean indices are not supported here.*bool True"),
    (np.bool_(False), "boolean indices are not supported here"),
    ((0, True), "boolean indices are not supported here"),
    (slice(0.5, None), "slice bounds must be ints"),
    (slice(None, None, tn.scalar("f", dtype="float64")), "slice bounds must be ints"),
])
def test_unsupported_indices(index, message):
    x = tn.tensor("x", shape=(3, 4))
    with pytest.raises(TypeError, match=message):
        x[index]


def test_unsupported_symbolic_indices():
    x = tn.matrix("x")
    with pytest.raises(TypeError, match="boolean indices are not supported here.*0-d bool"):
        x[tn.scalar("b", dtype="bool")]
    with pytest.raises(TypeError, match="indices must be ints or 0-d integer tensors.*float"):
        x[tn.scalar("f", dtype="float32")]
    with pytest.raises(TypeError, match="array indices must be integer tensors, got v "
                                        r"\(float64\(\?,\)\)"):
        x[tn.vector("v", dtype="float64")]
    with pytest.raises(TypeError, match="slice bounds must be ints or 0-d integer tensors"):
        x[:tn.vector("v", dtype="int64")]


@pytest.mark.parametrize("index", [3, -4, (0, 7), (Ellipsis, -5), (None, 3)])
def test_constant_out_of_range(index):
    x = tn.tensor("x", shape=(3, 4))
    with pytest.raises(IndexError, match="out of bounds for axis"):
        x[index]


def test_constant_index_out_of_range_of_a_constant_tensor_variable():
    x = tn.tensor("x", shape=(3,))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 .* length 3"):
        x[tn.constant(3)]


def test_zero_step():
    x = tn.vector("x")
    with pytest.raises(ValueError, match="step cannot be zero"):
        x[::0]
    with pytest.raises(ValueError, match="step cannot be zero"):
        x[::tn.constant(np.int8(0))]


def test_make_node_checks_inputs():
    op = Subtensor([("int", In(1)), ("slice", None, None, None)])
    with pytest.raises(TypeError, match="expected a 2-d input"):
        op(tn.vector("v"), tn.scalar(dtype="int64"))
    with pytest.raises(TypeError, match="expected 1 scalar input"):
        op(tn.matrix("m"))
    with pytest.raises(TypeError, match="input 1 must be a 0-d integer tensor"):
        op(tn.matrix("m"), tn.scalar(dtype="float64"))


def test_make_node_checks_more_inputs():
    op = Subtensor([("int", In(1))])
    with pytest.raises(TypeError, match="input 1 must be a 0-d integer tensor"):
        op(tn.vector("m"), tn.vector(dtype="int64"))
    with pytest.raises(ValueError, match="basic patterns hold ints, slices and new axes"):
        Subtensor([("array", In(1))])


# --------------------------------------------------------------------------
# Gradient of basic indexing


@given(case=index_cases())
@GRAD
def test_subtensor_grad(case, mode):
    shape, index = case
    value = np.random.default_rng(2).uniform(-1, 1, size=shape)
    verify_grad(lambda x: x[index], [value], mode=mode)


def test_subtensor_grad_symbolic_index(mode):
    x = tn.matrix("x")
    i = tn.scalar("i", dtype="int32")
    n = tn.scalar("n", dtype="int64")
    cost = (x[i, :n] ** 2).sum()
    gx, = tn.grad(cost, [x])
    value = np.arange(12.0).reshape(3, 4)
    expected = np.zeros_like(value)
    expected[-1, :2] = 2 * value[-1, :2]
    np.testing.assert_allclose(tn.function([x, i, n], gx, mode=mode)(value, -1, 2), expected)
    # The index inputs get no gradient (they are integers).
    assert x[i].owner.op.grad([x, i], [tn.vector("g")])[1] is None


def test_subtensor_grad_of_integer_input_is_none():
    x = tn.vector("x", dtype="int64")
    assert x[0].owner.op.grad(x[0].owner.inputs, [tn.scalar("g")]) == [None]


# --------------------------------------------------------------------------
# Advanced (integer array) indexing


@st.composite
def advanced_cases(draw, min_len=1):
    """A shape and a valid NumPy index for it holding at least one integer
    array (in range, with negative and repeated entries), maybe mixed with ints,
    slices, None and an Ellipsis."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(min_len, 4)) for _ in range(ndim))
    n_consumed = draw(st.integers(1, ndim))
    use_ellipsis = draw(st.booleans())
    skip_at = draw(st.integers(0, n_consumed)) if use_ellipsis else n_consumed
    consumed_axes = list(range(skip_at)) + list(range(ndim - (n_consumed - skip_at), ndim))
    kinds = draw(st.lists(st.sampled_from(["array", "array", "int", "slice"]),
                          min_size=n_consumed, max_size=n_consumed))
    if "array" not in kinds:
        kinds[draw(st.integers(0, n_consumed - 1))] = "array"
    bshape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    items = []
    for axis, kind in zip(consumed_axes, kinds):
        length = shape[axis]
        if kind == "array":
            k = draw(st.integers(1, len(bshape)))
            sub = tuple(d if draw(st.booleans()) else 1 for d in bshape[len(bshape) - k:])
            items.append(rng.integers(-length, length, size=sub))
        elif kind == "int":
            items.append(draw(st.integers(-length, length - 1)))
        else:
            items.append(slice(draw(bounds), draw(bounds), draw(steps)))
    if use_ellipsis:
        items.insert(skip_at, Ellipsis)
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return shape, tuple(items)


def symbolize_arrays(index, data):
    """The index with each array given as an integer tensor (some of unknown
    shape), a list or an ndarray: (index, variables, values)."""
    variables, values, items = [], [], []
    for item in index:
        if isinstance(item, np.ndarray):
            how = data.draw(st.sampled_from(["tensor", "static tensor", "list", "array"]))
            if how == "list":
                item = item.tolist()
            elif how != "array":
                dtype = data.draw(st.sampled_from(["int64", "int32", "int8"]))
                shape_ = item.shape if how == "static tensor" else (None,) * item.ndim
                var = tn.tensor(f"idx{len(variables)}", dtype=dtype, shape=shape_)
                variables.append(var)
                values.append(item.astype(dtype))
                item = var
        items.append(item)
    return tuple(items), variables, values


@given(case=advanced_cases(), data=st.data())
@COMPILED
def test_advanced_getitem_matches_numpy(case, data, mode):
    shape, index = case
    hide = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    dtype = data.draw(st.sampled_from(["float64", "int16", "bool", "complex64"]))
    x = tn.tensor("x", dtype=dtype, shape=tuple(None if h else d for d, h in zip(shape, hide)))
    value = np.random.default_rng(1).integers(0, 9, size=shape).astype(dtype)
    expected = value[index]

    sym_index, variables, var_values = symbolize_arrays(index, data)
    out = x[sym_index] if len(sym_index) != 1 or data.draw(st.booleans()) else x[sym_index[0]]
    assert isinstance(out.owner.op, AdvancedSubtensor)
    assert out.owner.op.view_map == {}
    assert out.dtype == dtype and out.ndim == expected.ndim

    inputs, values = [x, *variables], [value, *var_values]
    result = tn.function(inputs, out, mode=mode)(*values)
    assert_matches(result, expected)
    assert not np.shares_memory(result, value)  # a copy, as in NumPy

    for static, real in zip(out.type.shape, expected.shape):
        assert static is None or static == real, (out.type, expected.shape)
    if None not in x.type.shape and all(None not in v.type.shape for v in variables):
        assert out.type.shape == expected.shape

    dims = shape_tuple(out)
    assert out not in ancestors([d for d in dims if not isinstance(d, int)])
    assert eval_dims(dims, inputs, values, mode) == expected.shape


@pytest.mark.parametrize("shape, index", [
    ((2, 3, 4), (slice(None), [0], Ellipsis, [0])),      # empty Ellipsis separates
    ((2, 3, 4), (slice(None), [0], [0], Ellipsis)),
    ((2, 3, 4, 5), (slice(None), [0], Ellipsis, [0])),
    ((2, 3, 4), (0, slice(None), [1, 2])),                # the int counts as an array
    ((2, 3, 4), (slice(None), 0, [1, 2])),
    ((2, 3, 4), ([0], None, [0])),
    ((2, 3, 4), ([[0], [1]], slice(None), [0, 1, 2])),
    ((3, 4), ([],)),
    ((3, 4), (slice(None), np.zeros((2, 0), dtype=np.int64))),
    ((3, 4), (np.array([1], dtype=np.uint8), np.array([[3], [-4]]))),
])
def test_advanced_layout_cases(shape, index, mode):
    x = tn.tensor("x", shape=shape)
    value = np.arange(float(np.prod(shape))).reshape(shape)
    out = x[index]
    expected = value[index]
    assert out.type.shape == expected.shape
    assert_matches(tn.function([x], out, mode=mode)(value), expected)
    # Hidden lengths: inferred shapes must agree too.
    y = tn.tensor("y", ndim=len(shape))
    out = y[index]
    assert eval_dims(shape_tuple(out), [y], [value], mode) == expected.shape


def test_rows_cols(mode):
    x = tn.matrix("x")
    rows = tn.vector("rows", dtype="int64")
    cols = tn.vector("cols", dtype="int32")
    out = x[rows, cols]
    assert out.type.shape == (None,)
    value = np.arange(12.0).reshape(3, 4)
    r, c = np.array([0, -1, 2, 0]), np.array([3, 0, -2, 3], dtype="int32")
    assert_matches(tn.function([x, rows, cols], out, mode=mode)(value, r, c), value[r, c])
    # Broadcasting index arrays: an outer product of rows and columns.
    out = x[rows[:, None], cols]
    result = tn.function([x, rows, cols], out, mode=mode)(value, r, c)
    assert_matches(result, value[r[:, None], c])


def test_advanced_pattern_and_str():
    x = tn.matrix("x")
    i = tn.vector("i", dtype="int64")
    n = tn.scalar("n", dtype="int64")
    out = x[i, :n]
    op = out.owner.op
    assert op.pattern == (("array", In(1)), ("slice", None, In(2), None))
    assert out.owner.inputs == [x, i, n]
    assert str(op) == "AdvancedSubtensor{[$1], :$2}"
    assert x[tn.vector(dtype="int32"), :tn.scalar(dtype="int8")].owner.op == op
    # Constant arrays are inputs too (as constants); their values stay visible.
    out = x[[1, 2]]
    assert isinstance(out.owner.inputs[1], tn.TensorConstant)
    assert out.type.shape == (2, None)
    with pytest.raises(ValueError, match="holds no array index"):
        AdvancedSubtensor([("int", 0)])


def test_zero_d_integer_arrays_are_ints():
    x = tn.matrix("x")
    assert isinstance(x[np.array(1)].owner.op, Subtensor)
    assert isinstance(x[np.int8(1), [0]].owner.op, AdvancedSubtensor)
    assert x[np.array(1), [0]].owner.op.pattern[0] == ("int", 1)


def test_list_of_symbolic_scalars_is_an_array(mode):
    x = tn.vector("x")
    i = tn.scalar("i", dtype="int64")
    out = x[[i, 0, i]]
    assert isinstance(out.owner.op, AdvancedSubtensor)
    value = np.arange(5.0)
    assert_matches(tn.function([x, i], out, mode=mode)(value, -2), value[[-2, 0, -2]])


def test_advanced_runtime_out_of_range(mode):
    x = tn.matrix("x")
    i = tn.vector("i", dtype="int64")
    fn = tn.function([x, i], x[:, i], mode=mode)
    value = np.zeros((2, 3))
    assert fn(value, np.array([-3, 2])).shape == (2, 2)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 1 with size 3"):
        fn(value, np.array([0, 3]))
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 1 with size 3"):
        fn(value, np.array([-4]))
    fn = tn.function([x], x[[0, 5]], mode=mode)  # length unknown when built
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 2"):
        fn(value)


def test_advanced_constant_out_of_range():
    x = tn.tensor("x", shape=(3, 4))
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 of x .* length 4"):
        x[:, [0, 4]]
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 0 .* length 3"):
        x[np.array([[-4]]), 0]
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0"):
        x[7, [0]]


def test_advanced_shape_mismatch(mode):
    x = tn.tensor("x", shape=(3, 4))
    with pytest.raises(IndexError, match=r"shape mismatch.*\(2,\), \(3,\)"):
        x[[0, 1], [0, 1, 2]]
    i = tn.vector("i", dtype="int64")
    j = tn.vector("j", dtype="int64")
    fn = tn.function([x, i, j], x[i, j], mode=mode)
    with pytest.raises(IndexError, match="shape mismatch"):
        fn(np.zeros((3, 4)), np.array([0, 1]), np.array([0, 1, 2]))


def test_advanced_make_node_checks_inputs():
    op = AdvancedSubtensor([("array", In(1)), ("slice", None, In(2), None)])
    with pytest.raises(TypeError, match="expected a 2-d input"):
        op(tn.vector("v"), tn.vector(dtype="int64"), tn.scalar(dtype="int64"))
    with pytest.raises(TypeError, match="expected 2 index input"):
        op(tn.matrix("m"), tn.vector(dtype="int64"))
    with pytest.raises(TypeError, match="input 1 must be an integer array of at least 1 dim"):
        op(tn.matrix("m"), tn.scalar(dtype="int64"), tn.scalar(dtype="int64"))
    with pytest.raises(TypeError, match="input 1 must be an integer array"):
        op(tn.matrix("m"), tn.vector(dtype="float64"), tn.scalar(dtype="int64"))
    with pytest.raises(TypeError, match="boolean indices are not supported here"):
        op(tn.matrix("m"), tn.vector(dtype="bool"), tn.scalar(dtype="int64"))
    with pytest.raises(TypeError, match="input 2 must be a 0-d integer tensor"):
        op(tn.matrix("m"), tn.vector(dtype="int64"), tn.vector(dtype="int64"))
    with pytest.raises(ValueError, match="step cannot be zero"):
        tn.matrix("m")[[0], ::0]


def test_too_many_indices_with_arrays():
    with pytest.raises(IndexError, match="too many indices .* 1-dimensional .* 2 were"):
        tn.vector("v")[[0], [0]]


@given(case=advanced_cases())
@GRAD
def test_advanced_getitem_grad(case, mode):
    shape, index = case
    value = np.random.default_rng(3).uniform(-1, 1, size=shape)
    verify_grad(lambda x: x[index], [value], mode=mode)


def test_advanced_grad_accumulates_duplicates(mode):
    x = tn.vector("x")
    g = tn.grad(x[[0, 0, 1]].sum(), x)
    assert_matches(tn.function([x], g, mode=mode)(np.zeros(4)), [2.0, 1.0, 0.0, 0.0])
    m = tn.matrix("m")
    i = tn.vector("i", dtype="int64")
    g = tn.grad((m[i, -1] * 3).sum(), m)
    result = tn.function([m, i], g, mode=mode)(np.zeros((3, 2)), np.array([2, -1, 0]))
    assert_matches(result, [[0.0, 3.0], [0.0, 0.0], [0.0, 6.0]])


def test_negative_log_likelihood_pattern(mode):
    # -log_probs[arange(n), y].mean(), the classic classification loss.
    logits = tn.matrix("logits")
    y = tn.vector("y", dtype="int32")
    picked = logits[tn.arange(y.shape[0]), y]
    loss = -picked.mean()
    grad = tn.grad(loss, logits)
    fn = tn.function([logits, y], [picked, loss, grad], mode=mode)
    rng = np.random.default_rng(0)
    lv = rng.normal(size=(5, 3))
    yv = np.array([2, 0, 2, 1, 2], dtype="int32")
    got_picked, got_loss, got_grad = fn(lv, yv)
    expected_picked = lv[np.arange(5), yv]
    expected_grad = np.zeros_like(lv)
    np.add.at(expected_grad, (np.arange(5), yv), -1 / 5)
    assert_matches(got_picked, expected_picked)
    assert_matches(got_loss, -expected_picked.mean())
    assert_matches(got_grad, expected_grad)


def test_negative_log_likelihood_with_log_softmax(mode):
    if not hasattr(tn, "log_softmax"):
        pytest.skip("log_softmax is not available")
    logits = tn.matrix("logits")
    y = tn.vector("y", dtype="int32")
    loss = -tn.log_softmax(logits, axis=1)[tn.arange(y.shape[0]), y].mean()
    grad = tn.grad(loss, logits)
    rng = np.random.default_rng(1)
    lv = rng.normal(size=(4, 3))
    yv = np.array([0, 2, 2, 1], dtype="int32")
    got_loss, got_grad = tn.function([logits, y], [loss, grad], mode=mode)(lv, yv)
    shifted = lv - lv.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected_grad = np.exp(log_probs) / 4
    np.add.at(expected_grad, (np.arange(4), yv), -1 / 4)
    np.testing.assert_allclose(got_loss, -log_probs[np.arange(4), yv].mean(), rtol=1e-12)
    np.testing.assert_allclose(got_grad, expected_grad, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------
# take


@given(data=st.data())
@COMPILED
def test_take_matches_numpy(data, mode):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    length = int(np.prod(shape)) if axis is None else shape[axis]
    take_mode = data.draw(st.sampled_from(["raise", "wrap", "clip"]))
    span = 3 * length if take_mode != "raise" else length
    idx_shape = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    idx = rng.integers(-span, span, size=idx_shape)
    value = rng.normal(size=shape)
    expected = np.take(value, idx, axis=axis, mode=take_mode)
    x = tn.tensor("x", shape=shape if data.draw(st.booleans()) else (None,) * len(shape))
    if idx.ndim == 0:
        hows = ["tensor", "constant", "int"]
    else:  # an empty nested list loses its shape: only lists that keep it
        hows = ["tensor", "constant"] + (["list"] if idx.size or idx.ndim == 1 else [])
    how = data.draw(st.sampled_from(hows))
    inputs, values = [x], [value]
    if how == "tensor":
        i = tn.tensor("i", dtype="int64", shape=(None,) * idx.ndim)
        inputs.append(i)
        values.append(idx)
    else:
        i = int(idx) if how == "int" else idx.tolist() if how == "list" else idx
    out = tn.take(x, i, axis=axis, mode=take_mode) if take_mode != "raise" or \
        data.draw(st.booleans()) else x.take(i, axis=axis)
    result = tn.function(inputs, out, mode=mode)(*values)
    np.testing.assert_array_equal(result, expected)
    assert result.shape == expected.shape
    for static, real in zip(out.type.shape, expected.shape):
        assert static is None or static == real
    assert eval_dims(shape_tuple(out), inputs, values, mode) == expected.shape


def test_take_grad(mode):
    verify_grad(lambda x: tn.take(x, [[0, 2], [2, -1]], axis=1), [np.arange(6.0).reshape(2, 3)],
                mode=mode)
    verify_grad(lambda x: tn.take(x, np.array([5, 0, 5])), [np.arange(6.0).reshape(2, 3)],
                mode=mode)
    x = tn.matrix("x")
    g = tn.grad(tn.take(x, [1, 1, 0], axis=0).sum(), x)
    assert_matches(tn.function([x], g, mode=mode)(np.zeros((2, 2))), [[1.0, 1.0], [2.0, 2.0]])


def test_take_errors(mode):
    x = tn.matrix("x")
    with pytest.raises(np.exceptions.AxisError, match="take: axis 2 is out of range"):
        tn.take(x, [0], axis=2)
    with pytest.raises(ValueError, match="mode must be 'raise', 'wrap' or 'clip', got 'nope'"):
        tn.take(x, [0], mode="nope")
    with pytest.raises(TypeError, match="boolean indices are not supported here"):
        tn.take(x, np.array([True, False]))
    with pytest.raises(TypeError, match="take: indices must be integers"):
        tn.take(x, [0.5], mode="wrap")
    with pytest.raises(TypeError, match="array indices must be integers"):
        tn.take(x, [0.5])
    fn = tn.function([x], tn.take(x, [0, 6]), mode=mode)
    with pytest.raises(IndexError, match="index 6 is out of bounds for axis 0 with size 6"):
        fn(np.zeros((2, 3)))
