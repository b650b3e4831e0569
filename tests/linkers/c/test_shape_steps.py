"""Shape steps in the C runtime (tenure/linkers/c/shapes.py, src/shapes.c):
``Shape``, ``SumTo``, ``ExpandTo``, ``Alloc``, ``MakeVector`` and
``SpecifyShape`` (and ``Arange``: test_advanced_steps.py) run as interpreter
steps, not performs, with perform's values, dtypes and errors."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.creation import Alloc, ExpandTo
from tenure.symbolic.ops.reduce import SumTo
from tenure.symbolic.ops.shape import MakeVector, Shape, SpecifyShape
from tests.linkers.c.pairs import assert_identical, kinds_by_op

pytestmark = pytest.mark.usefixtures("cc_or_skip")

#: no rewrites: the ops stay as written, whatever their inputs prove
C = tn.Mode(linker="c", rewrites="none")
PY = tn.Mode(linker="py", rewrites="none")
SHAPE_OPS = (Shape, SumTo, ExpandTo, Alloc)


def compile_both(inputs, outputs):
    return (tn.function(inputs, outputs, mode=C, on_unused_input="ignore"),
            tn.function(inputs, outputs, mode=PY, on_unused_input="ignore"))


def test_the_shape_ops_are_c_steps():
    x = tn.tensor("x", shape=(None, None, None))
    n = tn.scalar("n", dtype="int64")
    dims = x.shape[0], x.shape[1], x.shape[2]
    outs = [x.shape, SumTo()(x, x.shape[1], 1), ExpandTo()(x, n, *dims),
            Alloc()(x.sum(axis=0), n, x.shape[1], x.shape[2])]
    f, ref = compile_both([x, n], outs)
    kinds = kinds_by_op(f)
    for op in SHAPE_OPS:
        assert kinds[op] == {"shape"}, (op, kinds)
    args = np.arange(24.0).reshape(2, 3, 4), np.array(5)
    for got, want in zip(f(*args), ref(*args)):
        assert_identical(got, want)


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 5), (1, 2, 3, 4)])
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "complex128"])
def test_shape_of_any_array(shape, dtype):
    x = tn.tensor("x", dtype=dtype, shape=(None,) * len(shape))
    f, ref = compile_both([x], x.shape)
    value = np.zeros(shape, dtype=dtype)
    assert_identical(f(value), ref(value))


SUM_TO_CASES = [
    ((3, 4), (3, 4)),          # nothing to sum: g itself
    ((3, 4), (1, 4)),          # a keepdims sum
    ((3, 4), (3, 1)),
    ((2, 3, 4), (3, 4)),       # leading axes
    ((2, 3, 4), (1, 1)),
    ((2, 1, 4), (4,)),
    ((0, 4), (1, 4)),          # an empty sum
]


@pytest.mark.parametrize("g_shape, target", SUM_TO_CASES)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int8"])
def test_sum_to_sums_as_perform(g_shape, target, dtype):
    g = tn.tensor("g", dtype=dtype, shape=(None,) * len(g_shape))
    dims = [tn.scalar(f"d{i}", dtype="int64") for i in range(len(target))]
    f, ref = compile_both([g, *dims], SumTo()(g, *dims))
    rng = np.random.default_rng(0)
    value = (rng.standard_normal(g_shape) * 50).astype(dtype)   # int8 sums wrap back as perform's
    args = [value, *(np.array(d) for d in target)]
    assert_identical(f(*args), ref(*args))


def test_sum_to_of_its_own_shape_is_its_input_not_a_copy():
    g = tn.matrix("g")
    f = tn.function([tn.In(g, borrow=True)], tn.Out(SumTo()(g, g.shape[0], g.shape[1]),
                                                    borrow=True), mode=C)
    value = np.ones((3, 4))
    assert f(value) is value


@pytest.mark.parametrize("value_shape, target", [
    ((3, 4), (3, 4)), ((3, 4), (1, 1, 3, 4)), ((1, 4), (3, 4)), ((4,), (2, 3, 4)),
    ((), (2, 2)), ((3, 1), (3, 0))])
def test_expand_to_and_alloc_broadcast_as_perform(value_shape, target):
    v = tn.tensor("v", dtype="float32", shape=(None,) * len(value_shape))
    dims = [tn.scalar(f"d{i}", dtype="int32") for i in range(len(target))]   # any int dtype
    f, ref = compile_both([v, *dims], [ExpandTo()(v, *dims), Alloc()(v, *dims)])
    value = np.arange(np.prod(value_shape), dtype="float32").reshape(value_shape)
    args = [value, *(np.array(d, dtype="int32") for d in target)]
    got, want = f(*args), ref(*args)
    for g, w in zip(got, want):
        assert_identical(g, w)
    assert got[1].flags.writeable and not np.shares_memory(got[1], value)


@pytest.mark.parametrize("op", [ExpandTo(), Alloc()])
@pytest.mark.parametrize("value_shape, target", [((3, 4), (2, 4)), ((3,), (3, 2)),
                                                 ((3,), (-1, 3))])
def test_bad_shapes_raise_perform_s_errors(op, value_shape, target):
    v = tn.tensor("v", shape=(None,) * len(value_shape))
    dims = [tn.scalar(f"d{i}", dtype="int64") for i in range(len(target))]
    args = [np.ones(value_shape), *(np.array(d) for d in target)]
    messages = []
    for mode in (C, PY):
        f = tn.function([v, *dims], op(v, *dims), mode=mode)
        with pytest.raises(ValueError) as info:
            f(*args)
        messages.append(str(info.value).splitlines()[0])
    assert messages[0] == messages[1]
    assert op.what in messages[0]


def test_a_sum_to_that_cannot_sum_raises_perform_s_error():
    g = tn.matrix("g")
    d0, d1 = tn.scalar("d0", dtype="int64"), tn.scalar("d1", dtype="int64")
    messages = []
    for mode in (C, PY):
        f = tn.function([g, d0, d1], SumTo()(g, d0, d1), mode=mode)
        with pytest.raises(ValueError, match="sum_to") as info:
            f(np.ones((3, 4)), np.array(2), np.array(4))
        messages.append(str(info.value).splitlines()[0])
    assert messages[0] == messages[1]


def test_an_alloc_writes_into_the_dead_buffer_the_plan_hands_on():
    """The fill of a gradient takes a dead buffer of its shape, as a perform
    step would: the memory report's prediction is what the call measures."""
    x = tn.matrix("x")
    y = tn.exp(x) * 2.0
    z = Alloc()(y.sum(axis=1, keepdims=True), x.shape[0], x.shape[1]) + x
    f = tn.function([x], z, mode=C)
    assert kinds_by_op(f)[Alloc] == {"shape"}
    value = np.random.default_rng(0).standard_normal((300, 200))
    report = f.memory_report(value, print_report=False)
    assert abs(report.measured_peak - report.predicted_peak) <= 0.015 * report.predicted_peak
    # (the C sum adds in another order than NumPy's)
    np.testing.assert_allclose(f(value), tn.function([x], z, mode=PY)(value), rtol=1e-14)


def test_an_mlp_training_step_has_no_python_steps():
    """Issue 33: an MLP's training step, its loss a mean or a sum, runs every
    step in C -- the shapes of its gradient included."""
    rng = np.random.default_rng(0)
    for reduce in (tn.mean, tn.sum):
        w1 = tn.shared(rng.standard_normal((4, 8)))
        b1 = tn.shared(np.zeros(8))
        w2 = tn.shared(rng.standard_normal((8, 2)))
        x, t = tn.matrix("x"), tn.matrix("t")
        loss = reduce((tn.relu(x @ w1 + b1) @ w2 - t) ** 2)
        params = [w1, b1, w2]
        f = tn.function([x, t], loss, updates=[(p, p - 0.1 * g)
                                               for p, g in zip(params, tn.grad(loss, params))],
                        mode=tn.Mode(linker="c"))
        assert "py" not in f._thunk.graph.kinds, kinds_by_op(f)
        f(rng.standard_normal((5, 4)), rng.standard_normal((5, 2)))


@pytest.mark.parametrize("dtype, items", [
    ("int64", [np.array(3, "int8"), np.array(-4, "int32"), np.array(2 ** 40)]),
    ("float32", [np.array(0.1), np.array(2.5, "float32")]),   # float64 to float32: cast
    ("int64", []),
])
def test_make_vector_is_numpy_s_array(dtype, items):
    inputs = [tn.scalar(f"s{i}", dtype=v.dtype.name) for i, v in enumerate(items)]
    f, ref = compile_both(inputs, MakeVector(dtype)(*inputs))
    assert kinds_by_op(f)[MakeVector] == {"shape"}
    assert_identical(f(*items), ref(*items))


def test_specify_shape_is_a_view_once_the_shape_is_right():
    x = tn.tensor("x", shape=(None, None, None))
    n = tn.scalar("n", dtype="int64")
    spec = SpecifyShape((None, "?", 4))
    f = tn.function([tn.In(x, borrow=True), n], tn.Out(spec(x, n), borrow=True), mode=C)
    assert kinds_by_op(f)[SpecifyShape] == {"shape"}
    value = np.zeros((2, 3, 4))
    out = f(value, np.array(3))
    assert out.shape == (2, 3, 4) and np.shares_memory(out, value)


@pytest.mark.parametrize("shape, n", [((2, 5, 4), 3), ((2, 3, 5), 3), ((2, 3, 4), 2)])
def test_specify_shape_raises_perform_s_error(shape, n):
    x = tn.tensor("x", shape=(None, None, None))
    d = tn.scalar("n", dtype="int64")
    spec = SpecifyShape((None, "?", 4))
    messages = []
    for mode in (C, PY):
        f = tn.function([x, d], spec(x, d), mode=mode)
        with pytest.raises(ValueError, match="specify_shape") as info:
            f(np.zeros(shape), np.array(n))
        messages.append(str(info.value).splitlines()[0])
    assert messages[0] == messages[1]
