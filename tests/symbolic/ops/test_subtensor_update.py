"""set_subtensor / inc_subtensor (IncSubtensor, AdvancedIncSubtensor) against
NumPy: values (repeated indices included), broadcasting of the value, dtypes,
static and inferred shapes, memory (a copy by default; the in-place variant
writes into its input), errors and gradients."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.ops.indexing import AdvancedSubtensor, Subtensor
from tenure.symbolic.ops.shape import shape_tuple
from tenure.symbolic.ops.subtensor_update import AdvancedIncSubtensor, IncSubtensor
from tenure.testing import verify_grad
from tests.helpers import assert_matches, eval_dims
from tests.symbolic.ops.test_indexing import advanced_cases, index_cases, symbolize_arrays

# The `mode` fixture holds no state between examples, so hypothesis may reuse it.
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
GRAD = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def numpy_update(value, index, v, set_instead_of_inc):
    """What ``x[index] = v`` / "add v at x[index], repeats accumulating" gives.

    The increment is spelled out as a loop over the flat positions the index
    selects (np.add.at itself misreads ``None`` in an index).
    """
    result = value.copy()
    if set_instead_of_inc:
        result[index] = v
        return result
    positions = np.arange(value.size).reshape(value.shape)[index]
    flat = result.reshape(-1)
    for p, item in zip(np.ravel(positions), np.broadcast_to(v, np.shape(positions)).ravel()):
        flat[p] += item
    return result


def value_shape(region_shape, data):
    """A shape that broadcasts to ``region_shape``: some leading axes dropped,
    some lengths replaced by 1."""
    drop = data.draw(st.integers(0, len(region_shape)))
    return tuple(d if data.draw(st.booleans()) else 1 for d in region_shape[drop:])


def check_update(case, data, set_instead_of_inc, advanced, mode):
    shape, index = case
    dtype = data.draw(st.sampled_from(["float64", "int32", "float32"]))
    hide = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    x = tn.tensor("x", dtype=dtype, shape=tuple(None if h else d for d, h in zip(shape, hide)))
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    value = rng.integers(-5, 5, size=shape).astype(dtype)
    region = value[index]
    v_shape = value_shape(np.shape(region), data)
    v_dtype = data.draw(st.sampled_from([dtype, "int8"]))
    v_value = rng.integers(-5, 5, size=v_shape).astype(v_dtype)
    v = tn.tensor("v", dtype=v_dtype, shape=(None,) * len(v_shape))
    expected = numpy_update(value, index, v_value.astype(dtype), set_instead_of_inc)

    if advanced:
        sym_index, variables, var_values = symbolize_arrays(index, data)
    else:
        sym_index, variables, var_values = index, [], []
    x_sub = x[sym_index]
    if data.draw(st.booleans()):
        out = (tn.set_subtensor if set_instead_of_inc else tn.inc_subtensor)(x_sub, v)
    else:
        out = x_sub.set(v) if set_instead_of_inc else x_sub.inc(v)
    op = out.owner.op
    assert isinstance(op, AdvancedIncSubtensor if advanced else IncSubtensor)
    assert op.set_instead_of_inc == set_instead_of_inc and not op.inplace
    assert op.destroy_map == {} and op.view_map == {}
    assert out.type == x.type

    inputs, values = [tn.In(x, borrow=True), v, *variables], \
        [value, v_value, *var_values]
    original = value.copy()
    result = tn.function(inputs, out, mode=mode)(*values)
    assert_matches(result, expected)
    np.testing.assert_array_equal(value, original)  # x itself is never written
    assert eval_dims(shape_tuple(out), [x, v, *variables], values, mode) == shape


@given(case=index_cases(), data=st.data(), set_instead_of_inc=st.booleans())
@SETTINGS
def test_basic_update_matches_numpy(case, data, set_instead_of_inc, mode):
    check_update(case, data, set_instead_of_inc, advanced=False, mode=mode)


@given(case=advanced_cases(), data=st.data(), set_instead_of_inc=st.booleans())
@SETTINGS
def test_advanced_update_matches_numpy(case, data, set_instead_of_inc, mode):
    check_update(case, data, set_instead_of_inc, advanced=True, mode=mode)


def test_inc_accumulates_repeats_and_set_keeps_the_last(mode):
    x = tn.vector("x")
    v = tn.vector("v")
    i = tn.vector("i", dtype="int64")
    inc = tn.inc_subtensor(x[i], v)
    put = tn.set_subtensor(x[i], v)
    fn = tn.function([x, v, i], [inc, put], mode=mode)
    got_inc, got_set = fn(np.zeros(4), np.array([1.0, 2.0, 4.0, 8.0]), np.array([0, 0, -1, 0]))
    assert_matches(got_inc, [11.0, 0.0, 0.0, 4.0])
    assert_matches(got_set, [8.0, 0.0, 0.0, 4.0])


@pytest.mark.parametrize("size, index, v, expected", [
    # A value that still needs broadcasting over a 2-d index array: NumPy 2.4's
    # np.add.at adds the wrong elements (even uninitialized memory) for these.
    (1, [[0, 0], [0, -1]], [1.0, 10.0], [22.0]),
    (2, [[0, 0], [1, 1]], [1.0, 10.0], [11.0, 11.0]),
    (3, [[0, 0], [0, 2]], [1.0, 10.0], [12.0, 0.0, 10.0]),
    (2, [[0, 1], [0, 1]], [1.0, 10.0], [2.0, 20.0]),
])
def test_inc_with_a_value_broadcast_over_an_index_array(size, index, v, expected, mode):
    x = tn.vector("x")
    vv = tn.vector("v")
    fn = tn.function([x, vv], tn.inc_subtensor(x[np.array(index)], vv), mode=mode)
    assert_matches(fn(np.zeros(size), np.array(v)), expected)
    assert_matches(np.array(expected), numpy_update(np.zeros(size), np.array(index), np.array(v),
                                                    False))


def test_symbolic_scalar_indices_and_bounds(mode):
    x = tn.matrix("x")
    i = tn.scalar("i", dtype="int8")
    n = tn.scalar("n", dtype="int64")
    out = x[i, :n].inc(10.0)
    assert out.owner.inputs[2:] == [i, n]
    value = np.zeros((2, 3))
    expected = value.copy()
    expected[-1, :2] += 10
    assert_matches(tn.function([x, i, n], out, mode=mode)(value, -1, 2), expected)


def test_scalar_region(mode):
    x = tn.matrix("x")
    out = tn.set_subtensor(x[1, 2], 7)  # a weakly typed Python int into a float matrix
    value = np.zeros((2, 3))
    expected = value.copy()
    expected[1, 2] = 7
    assert_matches(tn.function([x], out, mode=mode)(value), expected)


def test_value_broadcasts_statically_checked():
    x = tn.tensor("x", shape=(4, 3))
    assert x[1:3].set(tn.vector("v", shape=(3,))).type == x.type
    assert x[[0, 0]].inc(tn.tensor("v", shape=(2, 1))).type == x.type
    with pytest.raises(ValueError, match=r"set_subtensor: a value of shape \(2,\) cannot be "
                                         r"broadcast to the indexed region of shape \(2, 3\)"):
        x[1:3].set(tn.vector("v", shape=(2,)))
    with pytest.raises(ValueError, match=r"inc_subtensor: a value of shape \(\?, \?, \?\) "
                                         r"cannot be broadcast .* \(3, 3\)"):
        x[[0, 1, 1]].inc(tn.tensor3("v"))


def test_value_broadcast_checked_at_run_time(mode):
    x = tn.matrix("x")
    v = tn.vector("v")
    i = tn.vector("i", dtype="int64")
    fn = tn.function([x, v], x[:2].set(v), mode=mode)
    assert_matches(fn(np.zeros((3, 2)), np.ones(1)), [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"set_subtensor: a value of shape \(3,\) cannot be "
                                         r"broadcast to the indexed region of shape \(2, 2\)"):
        fn(np.zeros((3, 2)), np.ones(3))
    fn = tn.function([x, v, i], x[i].inc(v), mode=mode)
    with pytest.raises(ValueError, match=r"inc_subtensor: a value of shape \(3,\) cannot be "
                                         r"broadcast to the indexed region of shape \(1, 2\)"):
        fn(np.zeros((3, 2)), np.ones(3), np.array([0]))


def test_runtime_index_errors(mode):
    x = tn.vector("x")
    i = tn.vector("i", dtype="int64")
    j = tn.vector("j", dtype="int64")
    fn = tn.function([x, i], x[i].inc(1.0), mode=mode)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        fn(np.zeros(3), np.array([0, 3]))
    fn = tn.function([x, i], x[i].set(1.0), mode=mode)
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 0 with size 3"):
        fn(np.zeros(3), np.array([-4]))
    m = tn.matrix("m")
    fn = tn.function([m, i, j], m[i, j].inc(1.0), mode=mode)
    with pytest.raises(IndexError, match=r"shape mismatch.*\(2,\) \(3,\)"):
        fn(np.zeros((3, 3)), np.array([0, 1]), np.array([0, 1, 2]))


def test_value_dtype_rules(mode):
    x = tn.vector("x", dtype="float32")
    out = x[0].inc(tn.scalar("d", dtype="float64"))  # same kind: converted like `+=`
    assert out.dtype == "float32"
    k = tn.vector("k", dtype="int16")
    assert k[:2].set(tn.vector(dtype="int8")).dtype == "int16"
    assert k[:2].set(3).dtype == "int16"
    with pytest.raises(TypeError, match=r"set_subtensor: the value must be convertible to "
                                        r"int16 \(the dtype of k\) without changing kind, got "
                                        r"f \(float64\(\)\)"):
        k[0].set(tn.scalar("f", dtype="float64"))
    with pytest.raises(TypeError, match="inc_subtensor: .*int16.*got Python float 1.5"):
        k[[0]].inc(1.5)
    with pytest.raises(ValueError, match="inc_subtensor: the value 40000 does not fit in int16"):
        k[0].inc(40000)
    b = tn.vector("b", dtype="bool")
    with pytest.raises(TypeError, match="convertible to bool"):
        b[0].set(tn.scalar(dtype="int8"))
    fn = tn.function([k], k[1:].inc(True), mode=mode)
    assert_matches(fn(np.array([1, 2], dtype="int16")), np.array([1, 3], dtype="int16"))


def test_requires_an_indexing_result():
    x = tn.vector("x")
    with pytest.raises(TypeError, match=r"set_subtensor: expected the result of indexing a "
                                        r"tensor, as in tn.set_subtensor\(x\[idx\], v\) or "
                                        r"x\[idx\]\.set\(v\); got x .*not the result of indexing"):
        tn.set_subtensor(x, 1.0)
    with pytest.raises(TypeError, match=r"inc_subtensor: .*x\[idx\]\.inc\(v\); got .*computed "
                                        r"by exp"):
        tn.exp(x).inc(1.0)
    with pytest.raises(TypeError, match="got ndarray"):
        tn.inc_subtensor(np.zeros(3), 1.0)


def test_index_errors_come_from_the_index():
    op = IncSubtensor([("int", 0)])
    with pytest.raises(IndexError, match="index 0 is out of bounds"):
        op(tn.vector("x", shape=(0,)), 1.0)
    assert str(op) == "IncSubtensor{0}"
    op = AdvancedIncSubtensor([("array", tn.ops.indexing.In(1))], set_instead_of_inc=True,
                              inplace=True)
    assert str(op) == "AdvancedSetSubtensor_inplace{[$1]}"
    with pytest.raises(TypeError, match="input 1 must be an integer array"):
        op(tn.vector("x"), 1.0, tn.scalar(dtype="int64"))


def test_nested_indexing_updates_the_inner_base(mode):
    # x[0][1:] is indexing of x[0]: the update is of x[0], not of x.
    x = tn.matrix("x")
    out = x[0][1:].set(5.0)
    assert out.ndim == 1
    assert_matches(tn.function([x], out, mode=mode)(np.zeros((2, 3))), [0.0, 5.0, 5.0])


def test_take_result_can_be_updated(mode):
    x = tn.matrix("x")
    out = tn.take(x, [1, 1], axis=1).inc(1.0)
    expected = np.zeros((2, 3))
    expected[:, 1] = 2
    assert_matches(tn.function([x], out, mode=mode)(np.zeros((2, 3))), expected)


# --------------------------------------------------------------------------
# Memory: a copy by default; the in-place variant writes into x


def inplace_version(out):
    node = out.owner
    op = type(node.op)(node.op.pattern, node.op.set_instead_of_inc, inplace=True)
    assert op.destroy_map == {0: [0]} and op != node.op
    return op(*node.inputs)


@pytest.mark.parametrize("make, numpy", [
    (lambda x, v: x[1:, ::2].inc(v), lambda a, v: a.__setitem__(
        (slice(1, None), slice(None, None, 2)), a[1:, ::2] + v)),
    (lambda x, v: x[[2, 0, 2], 1].inc(v), lambda a, v: np.add.at(a, ([2, 0, 2], 1), v)),
    (lambda x, v: x[[2, 0, 2], None, 1].inc(v), lambda a, v: np.add.at(a, ([2, 0, 2], 1), v)),
    (lambda x, v: x[[2, 0, 2]].set(v), lambda a, v: a.__setitem__([2, 0, 2], v)),
    (lambda x, v: x[0].set(v), lambda a, v: a.__setitem__(0, v)),
])
@pytest.mark.host_buffers
def test_inplace_writes_into_the_callers_buffer(make, numpy, mode):
    x = tn.matrix("x")
    v = tn.scalar("v")
    out = inplace_version(make(x, v))
    fn = tn.function([tn.In(x, borrow=True, mutable=True), v], out, mode=mode)
    value = np.arange(12.0).reshape(3, 4)
    expected = value.copy()
    numpy(expected, 10.0)
    result = fn(value, 10.0)
    assert_matches(result, expected)
    assert np.shares_memory(result, value)
    assert_matches(value, expected)  # the caller's buffer was the workspace
    # Without mutable=True the caller's buffer is protected: refused.
    with pytest.raises(ValueError, match="would overwrite input"):
        tn.function([tn.In(x, borrow=True), v], out, mode=mode)
    # The non-inplace op leaves a mutable input alone (with the in-place
    # rewrites off: they would turn it into the in-place op).
    value = np.arange(12.0).reshape(3, 4)
    no_inplace = tn.Mode(linker=mode.linker, exclude=["inplace"])
    fn = tn.function([tn.In(x, borrow=True, mutable=True), v], make(x, v), mode=no_inplace)
    assert_matches(fn(value, 10.0), expected)
    assert_matches(value, np.arange(12.0).reshape(3, 4))


@pytest.mark.host_buffers
def test_inplace_on_a_non_contiguous_input(mode):
    x = tn.matrix("x")
    out = inplace_version(x[[0, 0], None].inc(1.0))
    fn = tn.function([tn.In(x, borrow=True, mutable=True)], out, mode=mode)
    base = np.zeros((3, 4))
    value = base.T  # not C-contiguous
    fn(value)
    assert_matches(base, [[2.0, 0, 0, 0]] * 3)


def test_inplace_value_overlapping_its_target(mode):
    # v is a view of x itself: it must be read before x is written.
    x = tn.vector("x")
    out = inplace_version(tn.inc_subtensor(x[1:], x[:-1]))
    fn = tn.function([tn.In(x, borrow=True, mutable=True)], out, mode=mode)
    value = np.arange(5.0)
    assert_matches(fn(value), [0.0, 1.0, 3.0, 5.0, 7.0])
    out = inplace_version(tn.set_subtensor(x[[1, 2, 3, 4]], x[:-1]))
    fn = tn.function([tn.In(x, borrow=True, mutable=True)], out, mode=mode)
    assert_matches(fn(np.arange(5.0)), [0.0, 0.0, 1.0, 2.0, 3.0])


def test_results_are_fresh_across_calls(mode):
    # With gc off the op may reuse last call's buffer: earlier results stay intact.
    x = tn.vector("x")
    with tn.config.change_flags(allow_gc=False):
        fn = tn.function([x], x[[0, 0]].inc(1.0) * 2, mode=mode)
    first = fn(np.zeros(2))
    second = fn(np.ones(2))
    assert_matches(first, [4.0, 0.0])
    assert_matches(second, [6.0, 2.0])


# --------------------------------------------------------------------------
# Gradients


def _grad_case(case, data):
    shape, index = case
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    x_value = rng.uniform(-1, 1, size=shape)
    v_value = rng.uniform(-1, 1, size=value_shape(np.shape(x_value[index]), data))
    return index, x_value, v_value


@given(case=st.one_of(index_cases(), advanced_cases()), data=st.data())
@GRAD
def test_inc_subtensor_grad(case, data, mode):
    index, x_value, v_value = _grad_case(case, data)
    verify_grad(lambda x, v: tn.inc_subtensor(x[index], v) ** 2, [x_value, v_value], mode=mode)


@given(case=st.one_of(index_cases(), advanced_cases()), data=st.data())
@GRAD
def test_set_subtensor_grad(case, data, mode):
    # Repeated indices included: only the value written last gets a gradient.
    index, x_value, v_value = _grad_case(case, data)
    verify_grad(lambda x, v: tn.set_subtensor(x[index], v) ** 2, [x_value, v_value], mode=mode)


def test_set_subtensor_grad_with_repeats(mode):
    x = tn.vector("x")
    v = tn.vector("v")
    i = tn.vector("i", dtype="int64")
    out = tn.set_subtensor(x[i], v)
    cost = (out * tn.constant(np.array([1.0, 10.0, 100.0]))).sum()
    gx, gv = tn.grad(cost, [x, v])
    fn = tn.function([x, v, i], [gx, gv], mode=mode)
    got_gx, got_gv = fn(np.zeros(3), np.zeros(4), np.array([0, 2, 0, -1]))
    assert_matches(got_gx, [0.0, 10.0, 0.0])
    assert_matches(got_gv, [0.0, 0.0, 1.0, 100.0])
    # A broadcast value reaches each written element once.
    s = tn.scalar("s")
    gs = tn.grad(tn.set_subtensor(x[i], s).sum(), s)
    fn = tn.function([x, s, i], gs, mode=mode, on_unused_input="ignore")
    assert float(fn(np.zeros(3), 1.0, np.array([0, 0, 2]))) == 2.0


def test_inc_subtensor_grad_formulas(mode):
    x = tn.matrix("x")
    v = tn.vector("v")
    i = tn.vector("i", dtype="int64")
    out = x[i, 0].inc(v)
    w = np.arange(6.0).reshape(3, 2)
    gx, gv = tn.grad((out * tn.constant(w)).sum(), [x, v])
    got_gx, got_gv = tn.function([x, v, i], [gx, gv], mode=mode)(
        np.zeros((3, 2)), np.zeros(3), np.array([2, 2, 0]))
    assert_matches(got_gx, w)
    assert_matches(got_gv, w[[2, 2, 0], 0])
    # Integer inputs get no gradient; the index inputs never do.
    node = out.owner
    grads = node.op.grad(node.inputs, [tn.matrix("g")])
    assert grads[2] is None
    k = tn.vector("k", dtype="int64")
    node = k[0].inc(1).owner
    assert node.op.grad(node.inputs, [tn.vector("g", dtype="int64")]) == [None, None]


def test_grad_of_integer_region_value_is_none():
    x = tn.vector("x")
    node = x[0].set(tn.scalar("n", dtype="int32")).owner
    gx, gn = node.op.grad(node.inputs, [tn.vector("g")])
    assert gx is not None and gn is None


@pytest.mark.parametrize("op_class, index_class", [(IncSubtensor, Subtensor),
                                                   (AdvancedIncSubtensor, AdvancedSubtensor)])
def test_ops_read_the_region_with_the_matching_indexing_op(op_class, index_class):
    pattern = [("slice", None, None, None)] if op_class is IncSubtensor else [
        ("array", tn.ops.indexing.In(1))]
    assert isinstance(op_class(pattern).index_op, index_class)
    assert op_class(pattern) == op_class(pattern)
    assert op_class(pattern) != op_class(pattern, set_instead_of_inc=True)
