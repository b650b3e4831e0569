"""Basic indexing (Subtensor) against NumPy: results, static shapes, inferred
shapes, views and errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.graph import ancestors
from tenure.symbolic.ops.indexing import In, Subtensor, getitem, slice_length
from tenure.symbolic.ops.shape import shape_tuple

SETTINGS = settings(max_examples=80, deadline=None)


def perform(var, x_value, *scalar_values):
    """Run ``var``'s Subtensor node directly."""
    node = var.owner
    storage = [[None]]
    node.op.perform(node, [x_value, *scalar_values], storage)
    return storage[0][0]


def eval_dims(dims, inputs, values, mode):
    symbolic = [d for d in dims if not isinstance(d, int)]
    fn = tn.function(inputs, symbolic, mode=mode, on_unused_input="ignore")
    results = iter(fn(*values) if symbolic else [])
    return tuple(d if isinstance(d, int) else int(next(results)) for d in dims)


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
    ([0, 1], "advanced indexing is not supported yet.*list"),
    (np.array([0, 1]), "advanced indexing is not supported yet.*array of int64 with shape"),
    (np.array([True, False, True]), "advanced indexing is not supported yet.*bool"),
    (True, "advanced indexing is not supported yet.*bool True"),
    ((0, [1]), "advanced indexing is not supported yet"),
    (slice(0.5, None), "slice bounds must be ints"),
    (slice(None, None, tn.scalar("f", dtype="float64")), "slice bounds must be ints"),
])
def test_unsupported_indices(index, message):
    x = tn.tensor("x", shape=(3, 4))
    with pytest.raises(TypeError, match=message):
        x[index]


def test_unsupported_symbolic_indices():
    x = tn.matrix("x")
    with pytest.raises(TypeError, match="advanced indexing is not supported yet.*1-d int64"):
        x[tn.vector("v", dtype="int64")]
    with pytest.raises(TypeError, match="advanced indexing is not supported yet.*0-d bool"):
        x[tn.scalar("b", dtype="bool")]
    with pytest.raises(TypeError, match="indices must be ints or 0-d integer tensors.*float"):
        x[tn.scalar("f", dtype="float32")]
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
