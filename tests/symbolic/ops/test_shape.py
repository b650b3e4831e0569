"""Shape ops: shape, shape_tuple, stack_scalars, reshape, DimShuffle (transpose,
expand_dims, squeeze) and flatten, checked against NumPy, and their gradients."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.linkers.cuda.device_ops import register_device_op
from tenure.symbolic.graph import Apply, Op, ancestors
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.shape import (
    DimShuffle, MakeVector, Reshape, Shape, expand_dims, flatten, reshape, shape, shape_tuple,
    squeeze, stack_scalars, transpose)
from tenure.testing import verify_grad
from tests.helpers import eval_dims

SETTINGS = settings(max_examples=60, deadline=None)


def perform(var, *values):
    """Run ``var``'s op directly on ``values`` (the node's inputs, constants filled in)."""
    node = var.owner
    it = iter(values)
    inputs = [i.data if isinstance(i, tn.Constant) else next(it) for i in node.inputs]
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, inputs, storage)
    return storage[var.index][0]


def check_static(var, actual_shape):
    """Every static length of ``var`` matches the shape it has at run time."""
    assert var.ndim == len(actual_shape)
    for static, real in zip(var.type.shape, actual_shape):
        assert static is None or static == real, (var.type, actual_shape)


def maybe_static(shape_, data):
    """The shape with some lengths hidden (None), chosen by hypothesis."""
    hide = data.draw(st.lists(st.booleans(), min_size=len(shape_), max_size=len(shape_)))
    return tuple(None if h else d for d, h in zip(shape_, hide))


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)
dtypes = st.sampled_from(["float64", "float32", "int32", "int64", "bool", "complex64"])


def array_of(shape_, dtype, rng=np.random.default_rng(0)):
    return np.asarray(rng.standard_normal(shape_) * 10).astype(dtype)


# --------------------------------------------------------------------------
# shape


def test_shape_type_and_value(mode):
    x = tn.tensor3("x", dtype="int32")
    s = shape(x)
    assert isinstance(s.owner.op, Shape)
    assert s.type == tn.TensorType("int64", (3,))
    value = tn.function([x], s, mode=mode)(np.zeros((2, 0, 5), "int32"))
    assert value.dtype == np.int64 and value.tolist() == [2, 0, 5]
    assert x.shape.owner.op == Shape()  # the variable property uses it


def test_shape_of_scalar_is_empty_vector(mode):
    x = tn.scalar("x")
    s = shape(x)
    assert s.type.shape == (0,)
    assert tn.function([x], s, mode=mode)(3.0).shape == (0,)
    assert shape_tuple(x) == ()


# --------------------------------------------------------------------------
# shape_tuple


def test_shape_tuple_static_lengths_are_ints():
    x = tn.tensor("x", shape=(2, None, 3))
    dims = shape_tuple(x)
    assert dims[0] == 2 and dims[2] == 3
    assert isinstance(dims[1], tn.Variable) and dims[1].type == tn.TensorType("int64", ())


def test_shape_tuple_of_root_indexes_the_shape_vector(mode):
    x = tn.matrix("x")
    d0, d1 = shape_tuple(x)
    # Both dims read one Shape node.
    shape_nodes = {v.owner for v in ancestors([d0, d1])
                   if v.owner and isinstance(v.owner.op, Shape)}
    assert len(shape_nodes) == 1
    assert eval_dims((d0, d1), [x], [np.zeros((4, 7))], mode) == (4, 7)


def test_shape_tuple_does_not_compute_the_tensor(mode):
    x = tn.matrix("x")
    y = tn.vector("y")
    z = (tn.exp(x) + y).T[1:, None]
    dims = shape_tuple(z)
    graph = ancestors([d for d in dims if not isinstance(d, int)])
    # The shapes come from x's and y's shape vectors, not from exp(x) or z.
    assert not any(v.owner is not None and isinstance(v.owner.op, Elemwise)
                   and v.owner.op.scalar_op.name == "exp" for v in graph)
    assert z not in graph
    xv, yv = np.zeros((3, 5)), np.zeros(5)
    real = tn.function([x, y], z, mode=mode)(xv, yv).shape
    assert eval_dims(dims, [x, y], [xv, yv], mode) == real == (4, 1, 3)


class _NoShapeOp(Op):
    """An op without infer_shape: shape_tuple must fall back on its output."""

    def make_node(self, x):
        x = tn.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = inputs[0].copy()


class _RefusingOp(_NoShapeOp):
    def infer_shape(self, node, input_shapes):
        raise NotImplementedError("not this time")


# Their perform is written for any array: they run on the device too.
register_device_op(_NoShapeOp)
register_device_op(_RefusingOp)


@pytest.mark.parametrize("op", [_NoShapeOp(), _RefusingOp()])
def test_shape_tuple_falls_back_on_the_output(op, mode):
    x = tn.tensor("x", shape=(None, 2))
    out = op(x)
    d0, d1 = shape_tuple(out)
    assert d1 == 2
    assert out in ancestors([d0])
    assert eval_dims((d0, d1), [x], [np.zeros((6, 2))], mode) == (6, 2)


def test_shape_tuple_deep_graph_is_linear():
    x = tn.vector("x")
    y = x
    for _ in range(3000):  # deeper than the recursion limit
        y = tn.exp(y) + x
    dims = shape_tuple(y)
    # Memoization: one shape node, not one per path.
    graph = ancestors(dims)
    assert sum(1 for v in graph if v.owner and isinstance(v.owner.op, Shape)) == 1


def test_shape_tuple_of_a_python_value():
    assert shape_tuple([[1, 2, 3], [4, 5, 6]]) == (2, 3)


# --------------------------------------------------------------------------
# stack_scalars


@pytest.mark.parametrize("items, expected", [
    (lambda: [tn.scalar(dtype="int32"), 2], "int32"),
    (lambda: [tn.scalar(dtype="int32"), 2.5], "float64"),
    (lambda: [tn.scalar(dtype="float32"), 2, 3.5], "float32"),
    (lambda: [tn.scalar(dtype="int8"), tn.scalar(dtype="int16")], "int16"),
    (lambda: [tn.scalar(dtype="bool"), True], "bool"),
    (lambda: [1, 2], "int64"),
    (lambda: [], "float64"),
])
def test_stack_scalars_dtype(items, expected):
    v = stack_scalars(items())
    assert isinstance(v.owner.op, MakeVector)
    assert v.dtype == expected
    assert v.type.shape == (len(items()),)


def test_stack_scalars_values(mode):
    a = tn.scalar("a", dtype="int32")
    b = tn.scalar("b", dtype="int64")
    v = stack_scalars([a, 7, b])
    assert v.dtype == "int64"
    out = tn.function([a, b], v, mode=mode)(np.int32(-3), 4)
    np.testing.assert_array_equal(out, [-3, 7, 4])
    assert out.dtype == np.int64
    empty = stack_scalars([])
    assert tn.function([], empty, mode=mode)().shape == (0,)


def test_as_tensor_variable_stacks_lists_with_variables(mode):
    n = tn.scalar("n", dtype="int64")
    v = tn.as_tensor_variable([n, 3])
    assert isinstance(v.owner.op, MakeVector)
    np.testing.assert_array_equal(tn.function([n], v, mode=mode)(5), [5, 3])


def test_stack_scalars_errors():
    n = tn.scalar("n", dtype="int64")
    with pytest.raises(TypeError, match="nested list"):
        stack_scalars([[n, 1], [2, 3]])
    with pytest.raises(TypeError, match="item 1 must be 0-d"):
        stack_scalars([n, tn.vector("v")])
    with pytest.raises(TypeError, match="expected a list"):
        stack_scalars(n)
    with pytest.raises(TypeError, match="cannot be cast to int64"):
        stack_scalars([n, 1.5], dtype="int64")


def test_stack_scalars_infer_shape(mode):
    n = tn.scalar("n", dtype="int64")
    v = stack_scalars([n, n, 1])
    assert shape_tuple(v) == (3,)
    assert v.owner.op.infer_shape(v.owner, [(), (), ()]) == [(3,)]


# --------------------------------------------------------------------------
# reshape


@st.composite
def reshape_cases(draw):
    """An input shape and a NumPy-valid new shape (maybe with one -1)."""
    factors = draw(st.lists(st.sampled_from([1, 2, 3, 2, 0]), min_size=0, max_size=4))
    in_shape = tuple(draw(st.permutations(factors)))
    # Regroup the factors into a random number of new axes.
    cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    bounds = [0, *cuts, len(factors)]
    new = [int(np.prod(factors[a:b])) for a, b in zip(bounds, bounds[1:])]
    size = int(np.prod(in_shape))
    if new and draw(st.booleans()):
        i = draw(st.integers(0, len(new) - 1))
        others = int(np.prod(new[:i] + new[i + 1:]))
        if others != 0:  # NumPy cannot infer a -1 beside a zero length
            new[i] = -1
    assert size == int(np.prod([d for d in new if d != -1])) or -1 in new
    return in_shape, tuple(new)


@given(case=reshape_cases(), dtype=dtypes, data=st.data())
@SETTINGS
def test_reshape_matches_numpy(case, dtype, data):
    in_shape, new = case
    mode = tn.Mode(linker="py")
    x = tn.tensor("x", dtype=dtype, shape=maybe_static(in_shape, data))
    value = array_of(in_shape, dtype)
    expected = value.reshape(new)
    # Each entry given as an int or as a symbolic scalar.
    symbolic = data.draw(st.lists(st.booleans(), min_size=len(new), max_size=len(new)))
    scalars = [tn.scalar(f"s{i}", dtype="int32") if s else None
               for i, s in enumerate(symbolic)]
    entries = [s if s is not None else d for s, d in zip(scalars, new)]
    inputs = [x] + [s for s in scalars if s is not None]
    values = [value] + [np.int32(d) for s, d in zip(scalars, new) if s is not None]
    out = reshape(x, entries)
    assert isinstance(out.owner.op, Reshape) and out.dtype == dtype
    result = tn.function(inputs, out, mode=mode)(*values)
    np.testing.assert_array_equal(result, expected)
    assert result.shape == expected.shape
    check_static(out, expected.shape)
    # Fully known input and int entries: the static shape is complete.
    if None not in x.type.shape and not any(symbolic):
        assert out.type.shape == expected.shape
    assert eval_dims(shape_tuple(out), inputs, values, mode) == expected.shape


def test_reshape_static_shapes():
    x = tn.tensor("x", shape=(2, 3, 4))
    assert reshape(x, (6, -1)).type.shape == (6, 4)
    assert reshape(x, (-1,)).type.shape == (24,)
    with pytest.raises(ValueError, match=r"shape \(2, 3, 4\) into shape \(\)"):
        reshape(x, ())  # size 24 cannot be 0-d
    y = tn.tensor("y", shape=(None, 3))
    assert reshape(y, (3, -1)).type.shape == (3, None)
    assert reshape(y, (5, 7)).type.shape == (5, 7)
    n = tn.scalar("n", dtype="int64")
    assert reshape(x, (n, 4)).type.shape == (None, 4)
    assert reshape(tn.tensor("z", shape=(1, 1)), ()).type.shape == ()


def test_reshape_spellings(mode):
    x = tn.matrix("x")
    value = np.arange(12.0).reshape(3, 4)
    n = tn.scalar("n", dtype="int64")
    vec = tn.vector("v", dtype="int32", shape=(2,))
    outs = [x.reshape(2, 6), x.reshape((2, 6)), x.reshape([2, 6]), x.reshape(12),
            x.reshape(np.array([6, 2])), reshape(x, (n, -1)), x.reshape(vec),
            x.reshape(tn.constant(np.array([4, 3], dtype="int32")))]
    results = tn.function([x, n, vec], outs, mode=mode)(value, 4, np.array([1, 12], "int32"))
    expected = [(2, 6), (2, 6), (2, 6), (12,), (6, 2), (4, 3), (1, 12), (4, 3)]
    for result, shp in zip(results, expected):
        np.testing.assert_array_equal(result, value.reshape(shp))
    assert outs[-1].type.shape == (4, 3)  # constant entries stay visible after the cast


def test_reshape_symbolic_minus_one_infers_shape(mode):
    # A -1 known only at run time still gets a correct inferred length.
    x = tn.tensor3("x")
    a = tn.scalar("a", dtype="int64")
    b = tn.scalar("b", dtype="int64")
    out = reshape(x, (a, b, 2))
    assert out.type.shape == (None, None, 2)
    value = np.zeros((2, 3, 4))
    for av, bv in [(-1, 6), (2, -1), (12, 1)]:
        expected = value.reshape(av, bv, 2).shape
        assert eval_dims(shape_tuple(out), [x, a, b], [value, av, bv], mode) == expected


def test_reshape_of_a_shape_vector_keeps_static_lengths():
    y = tn.tensor("y", shape=(None, 5))
    x = tn.matrix("x")
    out = reshape(x, y.shape)
    assert out.type.shape == (None, 5)


def test_reshape_is_a_view_when_numpy_can():
    x = tn.matrix("x")
    out = reshape(x, (-1,))
    assert out.owner.op.view_map == {0: [0]}
    value = np.arange(6.0).reshape(2, 3)
    result = perform(out, value)
    assert np.shares_memory(result, value)
    # A transposed input cannot be flattened in place: NumPy copies, still correct.
    result = perform(out, value.T)
    np.testing.assert_array_equal(result, value.T.reshape(-1))


def test_reshape_errors():
    x = tn.tensor("x", shape=(2, 3))
    with pytest.raises(ValueError, match=r"one unknown dimension \(-1\)"):
        reshape(x, (-1, -1))
    with pytest.raises(ValueError, match="negative length -2"):
        reshape(x, (-2, 3))
    with pytest.raises(ValueError, match=r"shape \(2, 3\) into shape \(4, 2\)"):
        reshape(x, (4, 2))
    with pytest.raises(ValueError, match=r"shape \(2, 3\) into shape \(4, -1\)"):
        reshape(x, (4, -1))
    with pytest.raises(TypeError, match="shape entry 0"):
        reshape(x, (2.0, 3))
    with pytest.raises(TypeError, match="shape entry 1"):
        reshape(x, (2, tn.scalar("f", dtype="float64")))
    with pytest.raises(TypeError, match="unknown length"):
        reshape(x, tn.vector("v", dtype="int64"))
    with pytest.raises(TypeError, match="1-d integer tensor"):
        reshape(x, tn.vector("v", dtype="float64", shape=(2,)))


def test_reshape_runtime_errors_name_the_shapes(mode):
    x = tn.matrix("x")
    n = tn.scalar("n", dtype="int64")
    fn = tn.function([x, n], reshape(x, (n, 5)), mode=mode)
    with pytest.raises(ValueError, match=r"shape \(2, 3\).*into shape \(4, 5\)"):
        fn(np.zeros((2, 3)), 4)
    with pytest.raises(ValueError, match=r"invalid shape \(-3, 5\)"):
        fn(np.zeros((3, 5)), -3)
    m = tn.scalar("m", dtype="int64")
    fn = tn.function([x, n, m], reshape(x, (n, m)), mode=mode)
    with pytest.raises(ValueError, match="at most one -1"):
        fn(np.zeros((2, 3)), -1, -1)


# --------------------------------------------------------------------------
# DimShuffle, transpose, expand_dims, squeeze


@given(shape_=shapes, dtype=dtypes, data=st.data())
@SETTINGS
def test_transpose_matches_numpy(shape_, dtype, data):
    mode = tn.Mode(linker="py")
    x = tn.tensor("x", dtype=dtype, shape=maybe_static(shape_, data))
    value = array_of(shape_, dtype)
    if data.draw(st.booleans()):
        axes, expected = None, value.T
        out = transpose(x)
    else:
        axes = data.draw(st.permutations(range(len(shape_))))
        # Also spell some axes negatively.
        axes = [a - len(shape_) if data.draw(st.booleans()) else a for a in axes]
        expected = np.transpose(value, axes)
        out = transpose(x, axes)
    result = tn.function([x], out, mode=mode)(value)
    np.testing.assert_array_equal(result, expected)
    check_static(out, expected.shape)
    assert eval_dims(shape_tuple(out), [x], [value], mode) == expected.shape
    assert np.shares_memory(perform(out, value), value) or value.size == 0


def test_transpose_spellings(mode):
    x = tn.tensor3("x")
    value = np.arange(24).reshape(2, 3, 4).astype("float64")
    outs = [x.T, x.transpose(), x.transpose(1, 0, 2), x.transpose((2, 0, 1)),
            transpose(x, [-1, 0, 1])]
    results = tn.function([x], outs, mode=mode)(value)
    for result, exp in zip(results, [value.T, value.T, value.transpose(1, 0, 2),
                                     value.transpose(2, 0, 1), value.transpose(2, 0, 1)]):
        np.testing.assert_array_equal(result, exp)


def test_transpose_errors():
    x = tn.matrix("x")
    with pytest.raises(ValueError, match="repeated axis"):
        transpose(x, (0, 0))
    with pytest.raises(ValueError, match="permutation of 2 axes"):
        transpose(x, (0,))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        transpose(x, (0, 2))
    with pytest.raises(TypeError, match="axis must be an int"):
        transpose(x, (0, 1.0))


@given(shape_=shapes, data=st.data())
@SETTINGS
def test_expand_dims_matches_numpy(shape_, data):
    mode = tn.Mode(linker="py")
    x = tn.tensor("x", shape=maybe_static(shape_, data))
    value = array_of(shape_, "float64")
    n_new = data.draw(st.integers(1, 3))
    out_ndim = len(shape_) + n_new
    axes = data.draw(st.lists(st.integers(-out_ndim, out_ndim - 1), min_size=n_new,
                              max_size=n_new, unique_by=lambda a: a % out_ndim))
    axis = axes[0] if len(axes) == 1 and data.draw(st.booleans()) else tuple(axes)
    expected = np.expand_dims(value, axis)
    out = expand_dims(x, axis)
    result = tn.function([x], out, mode=mode)(value)
    np.testing.assert_array_equal(result, expected)
    check_static(out, expected.shape)
    for a in axes:
        assert out.type.shape[a] == 1
    assert eval_dims(shape_tuple(out), [x], [value], mode) == expected.shape


def test_expand_dims_errors():
    x = tn.matrix("x")
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        expand_dims(x, 3)
    with pytest.raises(ValueError, match="axis -4 is out of range"):
        expand_dims(x, -4)
    with pytest.raises(ValueError, match="repeated axis"):
        expand_dims(x, (0, -4))


@given(shape_=st.lists(st.integers(0, 3), max_size=4).map(tuple), data=st.data())
@SETTINGS
def test_squeeze_matches_numpy(shape_, data):
    mode = tn.Mode(linker="py")
    static = maybe_static(shape_, data)
    x = tn.tensor("x", shape=static)
    value = array_of(shape_, "float64")
    ones = [a for a, d in enumerate(shape_) if d == 1]
    if data.draw(st.booleans()):
        # axis=None drops what is statically 1.
        out = squeeze(x)
        expected = value.reshape([d for d, s in zip(shape_, static) if s != 1])
    else:
        chosen = data.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
        axis = tuple(a - len(shape_) if data.draw(st.booleans()) else a for a in chosen)
        out = squeeze(x, axis)
        expected = np.squeeze(value, axis)
    result = tn.function([x], out, mode=mode)(value)
    np.testing.assert_array_equal(result, expected)
    assert result.shape == expected.shape
    check_static(out, expected.shape)
    assert eval_dims(shape_tuple(out), [x], [value], mode) == expected.shape
    assert np.shares_memory(perform(out, value), value) or value.size == 0


def test_squeeze_errors(mode):
    x = tn.tensor("x", shape=(3, None, 1))
    with pytest.raises(ValueError, match="cannot squeeze axis 0 .* length is 3"):
        squeeze(x, 0)
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        squeeze(x, 3)
    with pytest.raises(TypeError, match="axis must be an int"):
        squeeze(x, True)
    # An unknown length named explicitly is checked at run time.
    out = squeeze(x, (1, -1))
    assert out.type.shape == (3,)
    fn = tn.function([x], out, mode=mode)
    np.testing.assert_array_equal(fn(np.ones((3, 1, 1))), np.ones(3))
    with pytest.raises(ValueError, match=r"cannot drop axis 1 .* shape \(3, 2, 1\).*length 2"):
        fn(np.ones((3, 2, 1)))


def test_dimshuffle_general_order(mode):
    x = tn.tensor("x", shape=(None, 1, None))
    op = DimShuffle(3, (2, "x", 0))  # drops axis 1, adds one
    out = op(x)
    assert out.type.shape == (None, 1, None)
    assert out.owner.op.view_map == {0: [0]}
    value = np.arange(8.0).reshape(4, 1, 2)
    expected = value[:, 0, :].T[:, None, :]
    result = perform(out, value)
    np.testing.assert_array_equal(result, expected)
    assert np.shares_memory(result, value)
    assert str(op) == "DimShuffle{2,x,0}"
    assert op == DimShuffle(3, [2, "x", 0]) and hash(op) == hash(DimShuffle(3, (2, "x", 0)))
    assert eval_dims(shape_tuple(out), [x], [value], mode) == (2, 1, 4)


def test_dimshuffle_scalar_results_stay_views():
    x = tn.tensor("x", shape=(1, 1))
    out = squeeze(x)
    assert out.type.shape == ()
    value = np.array([[5.0]])
    result = perform(out, value)
    assert isinstance(result, np.ndarray) and result.shape == ()
    assert np.shares_memory(result, value)
    s = tn.scalar("s")
    out = expand_dims(s, (0, 1))
    result = perform(out, np.array(2.0))
    assert result.shape == (1, 1)


def test_dimshuffle_errors():
    with pytest.raises(ValueError, match="out of range"):
        DimShuffle(2, (0, 2))
    with pytest.raises(ValueError, match="repeats an input axis"):
        DimShuffle(2, (0, 0))
    with pytest.raises(TypeError, match="expected a 2-d input"):
        DimShuffle(2, (1, 0))(tn.vector("v"))
    with pytest.raises(ValueError, match="cannot drop axis 0 .* length 3"):
        DimShuffle(2, (1,))(tn.tensor("x", shape=(3, None)))


# --------------------------------------------------------------------------
# flatten


@given(shape_=shapes, data=st.data())
@SETTINGS
def test_flatten_matches_numpy(shape_, data):
    mode = tn.Mode(linker="py")
    x = tn.tensor("x", shape=maybe_static(shape_, data))
    value = array_of(shape_, "float64")
    ndim = data.draw(st.integers(1, max(len(shape_), 1)))
    expected = value.reshape(shape_[:ndim - 1] + (int(np.prod(shape_[ndim - 1:])),))
    out = flatten(x, ndim) if data.draw(st.booleans()) else x.flatten(ndim)
    result = tn.function([x], out, mode=mode)(value)
    np.testing.assert_array_equal(result, expected)
    assert result.shape == expected.shape
    check_static(out, expected.shape)
    if None not in x.type.shape:
        assert out.type.shape == expected.shape
    assert eval_dims(shape_tuple(out), [x], [value], mode) == expected.shape


def test_flatten_with_zero_lengths(mode):
    # (0, 0, 3) -> (0, -1) would be ambiguous for NumPy; flatten computes the length.
    x = tn.tensor3("x")
    out = flatten(x, 2)
    assert tn.function([x], out, mode=mode)(np.zeros((0, 0, 3))).shape == (0, 0)


def test_flatten_errors():
    x = tn.matrix("x")
    with pytest.raises(ValueError, match="ndim must be between 1 and 2"):
        flatten(x, 3)
    with pytest.raises(ValueError, match="ndim must be between 1 and 2"):
        flatten(x, 0)


# --------------------------------------------------------------------------
# Gradients


GRAD_SETTINGS = settings(max_examples=30, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])
small_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


def test_shape_grad_is_none():
    x = tn.matrix("x")
    assert shape(x).owner.op.grad([x], [tn.vector("g", dtype="int64")]) == [None]
    # A cost that only depends on the shape is disconnected from the values.
    with pytest.raises(tn.DisconnectedInputError):
        tn.grad(tn.cast(x.shape[0], "float64"), x)


def test_make_vector_grad(mode):
    a = tn.scalar("a")
    b = tn.scalar("b", dtype="float32")
    n = tn.scalar("n", dtype="int64")
    v = stack_scalars([a, b, n, 2.0])
    assert v.dtype == "float64"
    ga, gb = tn.grad((v * tn.constant(np.array([1.0, 10.0, 100.0, 1000.0]))).sum(), [a, b])
    assert gb.dtype == "float32"
    fn = tn.function([a, b], [ga, gb], mode=mode, on_unused_input="ignore")
    got_a, got_b = fn(0.5, np.float32(2.0))
    assert float(got_a) == 1.0 and float(got_b) == 10.0
    # Integer items get no gradient.
    grads = v.owner.op.grad(v.owner.inputs, [tn.vector("g")])
    assert grads[2] is None and grads[0] is not None
    verify_grad(lambda x, y: stack_scalars([x * y, x, y ** 2]),
                [np.array(0.3), np.array(-1.2)], mode=mode)


@given(case=reshape_cases())
@GRAD_SETTINGS
def test_reshape_grad(case, mode):
    in_shape, new = case
    value = np.random.default_rng(0).uniform(-1, 1, size=in_shape)
    verify_grad(lambda x: reshape(x, new) ** 2, [value], mode=mode)


def test_reshape_grad_with_symbolic_shape(mode):
    x = tn.matrix("x")
    n = tn.scalar("n", dtype="int64")
    out = reshape(x, (n, -1))
    w = np.arange(6.0).reshape(3, 2)
    g = tn.grad((out * tn.constant(w)).sum(), x)
    result = tn.function([x, n], g, mode=mode)(np.zeros((2, 3)), 3)
    assert result.shape == (2, 3)
    np.testing.assert_array_equal(result, w.reshape(2, 3))
    assert out.owner.op.grad(out.owner.inputs, [tn.matrix("g")])[1] is None


@given(shape_=small_shapes, data=st.data())
@GRAD_SETTINGS
def test_transpose_grad(shape_, data, mode):
    axes = data.draw(st.permutations(range(len(shape_))))
    value = np.random.default_rng(1).uniform(-1, 1, size=shape_)
    verify_grad(lambda x: transpose(x, axes), [value], mode=mode)


@given(shape_=small_shapes, data=st.data())
@GRAD_SETTINGS
def test_expand_dims_and_squeeze_grad(shape_, data, mode):
    n_new = data.draw(st.integers(1, 2))
    out_ndim = len(shape_) + n_new
    axes = tuple(data.draw(st.lists(st.integers(0, out_ndim - 1), min_size=n_new,
                                    max_size=n_new, unique=True)))
    value = np.random.default_rng(2).uniform(-1, 1, size=shape_)
    verify_grad(lambda x: expand_dims(x, axes), [value], mode=mode)
    verify_grad(lambda x: squeeze(expand_dims(x, axes), axes) * 2, [value], mode=mode)


def test_dimshuffle_grad_general_order(mode):
    # Drops axis 1 (length 1), adds a new axis and swaps the others.
    op = DimShuffle(3, (2, "x", 0))
    value = np.random.default_rng(3).uniform(-1, 1, size=(4, 1, 2))
    verify_grad(lambda x: op(x), [value], mode=mode)
    x = tn.tensor("x", shape=(None, 1, None))
    g = tn.grad((op(x) * tn.constant(np.arange(8.0).reshape(2, 1, 4))).sum(), x)
    assert g.type.shape[1] in (1, None)
    result = tn.function([x], g, mode=mode)(value)
    np.testing.assert_array_equal(result, np.arange(8.0).reshape(2, 4).T[:, None, :])


def test_flatten_grad(mode):
    verify_grad(lambda x: flatten(x, 2) ** 2,
                [np.random.default_rng(4).uniform(-1, 1, size=(2, 3, 2))], mode=mode)
