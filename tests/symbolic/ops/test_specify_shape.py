"""PyTensor's symbolic idioms: ``tn.specify_shape`` and ``x.dimshuffle(...)``."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.shape import DimShuffle, SpecifyShape, shape_tuple
from tenure.testing import verify_grad
from tests.helpers import eval_dims

# ---------------------------------------------------------------------------
# specify_shape


def test_specify_shape_refines_the_static_shape():
    x = tn.tensor("x", shape=(None, None, 4))
    y = tn.specify_shape(x, (2, None, 4))
    assert isinstance(y.owner.op, SpecifyShape)
    assert y.type.shape == (2, None, 4) and y.dtype == x.dtype
    # the static shape already says it all: nothing to add
    assert tn.specify_shape(x, (None, None, 4)) is x
    assert tn.specify_shape(y, (2, None, None)) is y
    # a bare entry for a vector, and a symbolic length keeps the axis unknown
    v = tn.vector("v")
    assert tn.specify_shape(v, 3).type.shape == (3,)
    n = tn.scalar("n", dtype="int32")
    assert tn.specify_shape(v, (n,)).type.shape == (None,)
    assert tn.specify_shape(v, (tn.constant(5),)).type.shape == (5,)
    assert tn.specify_shape(v, np.int64(5)).type.shape == (5,)


def test_specify_shape_build_errors():
    x = tn.matrix("x", shape=(2, None))
    with pytest.raises(ValueError, match=r"2 dimension\(s\).*shape of length 3"):
        tn.specify_shape(x, (2, 3, 4))
    with pytest.raises(ValueError, match=r"static shape \(2, \?\).*length 3 of axis 0"):
        tn.specify_shape(x, (3, None))
    with pytest.raises(ValueError, match="must be >= 0"):
        tn.specify_shape(x, (2, -1))
    with pytest.raises(TypeError, match="shape entry 1"):
        tn.specify_shape(x, (2, 1.5))
    with pytest.raises(TypeError, match="shape entry 1"):
        tn.specify_shape(x, (2, tn.scalar("f")))  # a float tensor is no length


def test_specify_shape_runs_and_checks(mode):
    x = tn.matrix("x")
    n = tn.scalar("n", dtype="int64")
    y = tn.specify_shape(x, (n, 3))
    f = tn.function([x, n], [y * 2, y.sum()], mode=mode)
    value = np.arange(6.0).reshape(2, 3)
    doubled, total = f(value, 2)
    np.testing.assert_array_equal(doubled, value * 2)
    assert total == 15.0
    with pytest.raises(ValueError, match=r"expected shape \(2, 3\), got an array of shape "
                                         r"\(2, 4\)"):
        f(np.zeros((2, 4)), 2)
    with pytest.raises(ValueError, match=r"expected shape \(5, 3\), got an array of shape "
                                         r"\(2, 3\)"):
        f(value, 5)


def test_specify_shape_output_is_a_view_and_protected(mode):
    x = tn.vector("x")
    f = tn.function([x], tn.specify_shape(x, 3), mode=mode)
    value = np.arange(3.0)
    out = f(value)
    np.testing.assert_array_equal(out, value)
    assert not np.shares_memory(out, value)  # not borrowed: the contract copies
    node = tn.specify_shape(x, 3).owner
    storage = [[None]]
    node.op.perform(node, [value], storage)
    assert np.shares_memory(storage[0][0], value) and node.op.view_map == {0: [0]}


def test_specify_shape_infer_shape(mode):
    x = tn.matrix("x")
    n = tn.scalar("n", dtype="int64")
    y = tn.specify_shape(x, (None, n))
    dims = shape_tuple(y)
    assert dims[1] is not None
    assert eval_dims(dims, [x, n], [np.zeros((4, 2)), 2], mode=mode) == (4, 2)
    assert shape_tuple(tn.specify_shape(x, (3, None)))[0] == 3


def test_specify_shape_grad(mode):
    verify_grad(lambda x: tn.specify_shape(x, (2, None)) ** 2,
                [np.random.default_rng(0).uniform(-1, 1, size=(2, 3))], mode=mode)
    x = tn.matrix("x")
    n = tn.scalar("n", dtype="int64")
    y = tn.specify_shape(x, (n, None))
    assert y.owner.op.grad(y.owner.inputs, [tn.matrix("g")])[1] is None


def test_specify_shape_is_exported():
    assert tn.specify_shape is tn.ops.specify_shape


# ---------------------------------------------------------------------------
# x.dimshuffle(...)


def test_dimshuffle_method(mode):
    x = tn.tensor("x", shape=(None, 1, None))
    value = np.arange(6.0).reshape(3, 1, 2)
    cases = {
        (2, "x", 0): value[:, 0, :].T[:, None, :],
        ("x", 0, 1, 2): value[None],
        (0, 2): value[:, 0, :],
        (2, 1, 0): value.transpose(2, 1, 0),
    }
    outs = [x.dimshuffle(*pattern) for pattern in cases]
    assert x.dimshuffle((2, "x", 0)).owner.op == outs[0].owner.op  # one tuple
    assert x.dimshuffle([0, 2]).owner.op == outs[2].owner.op       # or one list
    assert outs[0].type.shape == (None, 1, None)
    f = tn.function([x], outs, mode=mode)
    for got, want in zip(f(value), cases.values()):
        np.testing.assert_array_equal(got, want)
    assert all(isinstance(o.owner.op, DimShuffle) for o in outs)


def test_dimshuffle_drops_only_static_length_one_axes():
    x = tn.matrix("x")
    with pytest.raises(ValueError, match=r"cannot drop a non-broadcastable dimension: axis 1 "
                                         r"of x \(float64\(\?, \?\)\) has unknown length"):
        x.dimshuffle(0)
    with pytest.raises(ValueError, match="axis 0 .* has length 3"):
        tn.matrix("m", shape=(3, 1)).dimshuffle(1)
    # specify_shape makes the length static, and the axis can go
    assert tn.specify_shape(x, (None, 1)).dimshuffle(0).type.shape == (None,)


def test_dimshuffle_errors():
    x = tn.matrix("x")
    with pytest.raises(ValueError, match="entry 1 \\(2\\) is not an axis"):
        x.dimshuffle(0, 2)
    with pytest.raises(ValueError, match="entry 0 \\(-1\\) is not an axis"):
        x.dimshuffle(-1, 0)
    with pytest.raises(ValueError, match="more than once"):
        x.dimshuffle(0, 0, 1)
    with pytest.raises(TypeError, match="entry 1 must be an axis .* or 'x', got 'y'"):
        x.dimshuffle(0, "y", 1)
    with pytest.raises(TypeError, match="entry 0 must be an axis"):
        x.dimshuffle(1.0, 0)
