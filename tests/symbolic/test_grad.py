"""The reverse-mode engine ``tn.grad`` and the ``verify_grad`` checker.

The op files test each op's gradient; this file tests what the engine does
with them: result structure, argument checking, disconnected and
non-differentiable paths, blocking flow, accumulation over several uses,
broadcasting, shared variables driving updates, deep graphs, and a small
model that actually trains.
"""

import warnings

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.graph import Apply, Op
from tenure.testing import GradientError, verify_grad


def compile_grads(inputs, cost, wrt, mode, **kwargs):
    return tn.function(inputs, tn.grad(cost, wrt, **kwargs), mode=mode,
                       on_unused_input="ignore")


# --------------------------------------------------------------------------
# Structure of the result


def test_result_has_the_structure_of_wrt():
    x, y = tn.vector("x"), tn.matrix("y")
    cost = (x ** 2).sum() + y.sum()
    single = tn.grad(cost, x)
    assert isinstance(single, tn.Variable)
    as_list = tn.grad(cost, [x, y])
    assert isinstance(as_list, list) and len(as_list) == 2
    as_tuple = tn.grad(cost, (y, x))
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2
    assert [g.ndim for g in as_tuple] == [2, 1]
    assert tn.grad(cost, []) == []


def test_gradients_have_the_shape_and_dtype_of_their_variable(mode):
    x = tn.matrix("x", dtype="float32")
    y = tn.vector("y", dtype="float64")
    cost = (x * y).sum()      # float64 cost
    gx, gy = tn.grad(cost, [x, y])
    assert (gx.dtype, gy.dtype) == ("float32", "float64")
    vx, vy = np.ones((2, 3), "float32"), np.arange(3.0)
    got = tn.function([x, y], [gx, gy], mode=mode)(vx, vy)
    assert got[0].shape == (2, 3) and got[0].dtype == np.float32
    np.testing.assert_array_equal(got[0], np.broadcast_to(vy, (2, 3)))
    np.testing.assert_array_equal(got[1], [2.0, 2.0, 2.0])


def test_gradient_with_respect_to_an_intermediate_variable(mode):
    x = tn.vector("x")
    y = x * 3
    cost = (y ** 2).sum()
    got = compile_grads([x], cost, y, mode)(np.array([1.0, 2.0]))
    np.testing.assert_allclose(got, [6.0, 12.0])      # 2y


def test_gradient_with_respect_to_a_variable_and_its_ancestor(mode):
    x = tn.vector("x")
    y = x * 3
    cost = (y ** 2).sum()
    got = compile_grads([x], cost, [y, x], mode)(np.array([1.0, 2.0]))
    np.testing.assert_allclose(got[0], [6.0, 12.0])      # 2y
    np.testing.assert_allclose(got[1], [18.0, 36.0])     # 2y * 3


# --------------------------------------------------------------------------
# Bad arguments


def test_cost_must_be_0d_with_a_hint():
    x = tn.vector("x")
    cost = x ** 2
    cost.name = "squares"
    with pytest.raises(TypeError, match=r"cost must be a scalar \(0-d\), got squares.*"
                                        r"cost\.sum\(\)"):
        tn.grad(cost, x)


def test_cost_must_be_float():
    x = tn.vector("x")
    cost = (x > 0).sum()
    cost.name = "positives"
    with pytest.raises(TypeError, match="cost must be a float scalar, got positives.*int64"):
        tn.grad(cost, x)


def test_cost_must_be_a_variable():
    with pytest.raises(TypeError, match="cost must be a symbolic variable, got float"):
        tn.grad(1.0, tn.vector("x"))


def test_wrt_must_be_variables():
    x = tn.vector("x")
    cost = x.sum()
    with pytest.raises(TypeError, match=r"wrt\[1\] must be a symbolic variable, got ndarray"):
        tn.grad(cost, [x, np.ones(3)])
    with pytest.raises(TypeError, match="wrt must be a variable or a list of variables, got "
                                        "dict"):
        tn.grad(cost, {"x": x})


def test_wrt_must_be_float():
    n = tn.vector("n", dtype="int64")
    cost = n.sum().astype("float64")
    with pytest.raises(TypeError, match="cannot differentiate with respect to n of type "
                                        "int64.*only float"):
        tn.grad(cost, n)
    b = tn.vector("b", dtype="bool")
    with pytest.raises(TypeError, match="cannot differentiate with respect to b"):
        tn.grad(tn.sum(b).astype("float64"), [b])


def test_unknown_disconnected_policy():
    x = tn.vector("x")
    with pytest.raises(ValueError, match="disconnected_inputs.*'raise'.*got 'skip'"):
        tn.grad(x.sum(), x, disconnected_inputs="skip")


# --------------------------------------------------------------------------
# Disconnected inputs


def test_disconnected_input_raises_naming_it():
    x, unused = tn.vector("x"), tn.matrix("unused")
    with pytest.raises(tn.DisconnectedInputError, match="does not depend on unused"):
        tn.grad(x.sum(), [x, unused])
    assert issubclass(tn.DisconnectedInputError, ValueError)


@pytest.mark.parametrize("policy", ["ignore", "zero"])
def test_disconnected_input_gives_zeros(mode, policy):
    x, unused = tn.vector("x"), tn.matrix("unused", dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gx, gu = tn.grad(x.sum(), [x, unused], disconnected_inputs=policy)
    assert gu.dtype == "float32"
    got = tn.function([x, unused], [gx, gu], mode=mode)(np.ones(2), np.ones((2, 3), "float32"))
    np.testing.assert_array_equal(got[0], [1.0, 1.0])
    assert got[1].shape == (2, 3) and got[1].dtype == np.float32 and not got[1].any()


def test_disconnected_input_warns(mode):
    x, unused = tn.vector("x"), tn.vector("unused")
    with pytest.warns(UserWarning, match="does not depend on unused"):
        gu = tn.grad(x.sum(), unused, disconnected_inputs="warn")
    got = tn.function([unused], gu, mode=mode)(np.ones(4))
    np.testing.assert_array_equal(got, np.zeros(4))


@pytest.mark.parametrize("make_cost", [
    lambda x: ((x > 0).astype("float64") * 2.0).sum(),      # through a bool
    lambda x: x.astype("int64").sum().astype("float64"),    # through an int
    lambda x: tn.argmax(x).astype("float64"),               # through an index
    lambda x: tn.floor_divide(x.astype("int32"), 2).sum().astype("float64"),
])
def test_integer_and_boolean_paths_carry_no_gradient(make_cost):
    x = tn.vector("x")
    with pytest.raises(tn.DisconnectedInputError, match="does not depend on x"):
        tn.grad(make_cost(x), x)


def test_only_the_float_path_contributes(mode):
    x = tn.vector("x")
    cost = (x ** 2 + (x > 0).astype("float64") * 100 + x.astype("int64")).sum()
    got = compile_grads([x], cost, x, mode)(np.array([-1.5, 2.5]))
    np.testing.assert_allclose(got, [-3.0, 5.0])


# --------------------------------------------------------------------------
# Blocking the flow


def test_consider_constant_blocks_flow(mode):
    x = tn.vector("x")
    y = x ** 2
    cost = (y * x).sum()                          # x**3
    value = np.array([1.0, -2.0, 3.0])
    full = compile_grads([x], cost, x, mode)(value)
    np.testing.assert_allclose(full, 3 * value ** 2)
    blocked = compile_grads([x], cost, x, mode, consider_constant=[y])(value)
    np.testing.assert_allclose(blocked, value ** 2)   # y treated as a constant


def test_stop_gradient_blocks_flow(mode):
    x = tn.vector("x")
    cost = (tn.stop_gradient(x) ** 2 * x).sum()
    value = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(compile_grads([x], cost, x, mode)(value), value ** 2)
    # Forward, it is the identity.
    np.testing.assert_allclose(tn.function([x], cost, mode=mode)(value), np.sum(value ** 3))
    # Only path blocked: disconnected.
    with pytest.raises(tn.DisconnectedInputError):
        tn.grad(tn.stop_gradient(x).sum(), x)


def test_stop_gradient_of_an_expression_blocks_flow(mode):
    x = tn.vector("x")
    cost = (tn.stop_gradient(x ** 2) * x).sum()
    value = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(compile_grads([x], cost, x, mode)(value), value ** 2)


def test_blocking_one_of_two_paths(mode):
    x = tn.vector("x")
    y = tn.exp(x)
    cost = (y + tn.sin(x)).sum()
    got = compile_grads([x], cost, x, mode, consider_constant=[y])(np.array([0.3, 1.2]))
    np.testing.assert_allclose(got, np.cos([0.3, 1.2]))


# --------------------------------------------------------------------------
# Accumulation and broadcasting


def test_a_variable_used_several_times_accumulates(mode):
    x = tn.vector("x")
    cost = (x * x + x + tn.sin(x) * x).sum()
    value = np.array([0.5, -1.0, 2.0])
    got = compile_grads([x], cost, x, mode)(value)
    np.testing.assert_allclose(got, 2 * value + 1 + np.cos(value) * value + np.sin(value))


def test_a_shared_subexpression_is_differentiated_once_per_use(mode):
    x = tn.scalar("x")
    y = x * 3
    cost = y * y * y                              # 27 x**3
    got = compile_grads([x], cost, x, mode)(np.float64(2.0))
    np.testing.assert_allclose(got, 81 * 4.0)


def test_broadcasting_gradients_are_summed(mode):
    x = tn.tensor("x", shape=(3, 1))
    y = tn.tensor("y", shape=(4,))
    weights = np.arange(12.0).reshape(3, 4)
    cost = ((x + y) * tn.constant(weights)).sum()
    gx, gy = compile_grads([x, y], cost, [x, y], mode)(np.ones((3, 1)), np.ones(4))
    np.testing.assert_array_equal(gx, weights.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(gy, weights.sum(axis=0))


def test_broadcasting_known_only_when_run_is_summed(mode):
    x = tn.tensor("x", shape=(None, None))       # passed (3, 1)
    y = tn.tensor("y", shape=(None,))            # passed (4,)
    w = tn.matrix("w")
    cost = ((x * y) * w).sum()
    vx, vy = np.arange(1.0, 4.0).reshape(3, 1), np.arange(1.0, 5.0)
    vw = np.arange(12.0).reshape(3, 4)
    gx, gy = tn.function([x, y, w], tn.grad(cost, [x, y]), mode=mode)(vx, vy, vw)
    assert gx.shape == (3, 1) and gy.shape == (4,)
    np.testing.assert_allclose(gx, (vw * vy).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(gy, (vw * vx).sum(axis=0))
    # The same graph with a full-size x: nothing is summed.
    gx_full, _ = tn.function([x, y, w], tn.grad(cost, [x, y]), mode=mode)(
        np.ones((3, 4)), vy, vw)
    np.testing.assert_allclose(gx_full, vw * vy)


# --------------------------------------------------------------------------
# Shared variables


def test_gradient_of_a_shared_variable_drives_updates(mode):
    target = np.array([1.0, -2.0, 3.0])
    w = tn.shared(np.zeros(3), name="w")
    loss = ((w - tn.constant(target)) ** 2).sum()
    g = tn.grad(loss, w)
    step = tn.function([], loss, updates=[(w, w - 0.1 * g)], mode=mode)
    before = float(step())
    np.testing.assert_allclose(w.get_value(), 0.2 * target)   # w - 0.1 * 2 (w - t)
    after = float(tn.function([], loss, mode=mode)())
    assert after < before
    np.testing.assert_allclose(after, np.sum((0.8 * target) ** 2))


def test_shared_and_input_gradients_together(mode):
    w = tn.shared(np.array([[1.0, 2.0], [3.0, 4.0]]), name="w")
    x = tn.vector("x")
    cost = tn.dot(x, w).sum()
    gw, gx = tn.function([x], tn.grad(cost, [w, x]), mode=mode)(np.array([1.0, -1.0]))
    np.testing.assert_array_equal(gw, [[1.0, 1.0], [-1.0, -1.0]])
    np.testing.assert_array_equal(gx, [3.0, 7.0])


# --------------------------------------------------------------------------
# Deep graphs


def test_gradient_of_a_long_chain(mode):
    # Static shapes: with unknown lengths every broadcast check re-derives the
    # shape through the whole chain (quadratic; see shape_tuple).
    x = tn.tensor("x", shape=(2,))
    y = x
    for i in range(2000):
        y = tn.tanh(y) if i % 2 else y * 1.001
    g = tn.grad(y.sum(), x)
    got = tn.function([x], g, mode=mode)(np.array([0.1, -0.2]))
    # Reference by the chain rule, step by step.
    value, deriv = np.array([0.1, -0.2]), np.ones(2)
    for i in range(2000):
        if i % 2:
            value = np.tanh(value)
            deriv = deriv * (1 - value ** 2)
        else:
            value, deriv = value * 1.001, deriv * 1.001
    np.testing.assert_allclose(got, deriv, rtol=1e-10)


# --------------------------------------------------------------------------
# A model that trains


def test_logistic_regression_trains(mode):
    rng = np.random.default_rng(0)
    n_classes, n_features, per_class = 3, 4, 40
    centers = rng.normal(scale=4.0, size=(n_classes, n_features))
    X_data = np.concatenate([c + rng.normal(size=(per_class, n_features)) for c in centers])
    labels = np.repeat(np.arange(n_classes), per_class)
    Y_data = np.eye(n_classes)[labels]

    X, Y = tn.matrix("X"), tn.matrix("Y")
    W = tn.shared(np.zeros((n_features, n_classes)), name="W")
    b = tn.shared(np.zeros(n_classes), name="b")
    z = X @ W + b
    m = tn.max(z, axis=1, keepdims=True)
    log_probs = z - tn.log(tn.sum(tn.exp(z - m), axis=1, keepdims=True)) - m
    loss = -tn.mean(tn.sum(log_probs * Y, axis=1))     # one-hot "indexing" by a mask
    gW, gb = tn.grad(loss, [W, b])
    lr = 0.05
    train = tn.function([X, Y], loss, updates=[(W, W - lr * gW), (b, b - lr * gb)], mode=mode)
    predict = tn.function([X], tn.argmax(z, axis=1), mode=mode)

    losses = [float(train(X_data, Y_data)) for _ in range(50)]
    np.testing.assert_allclose(losses[0], np.log(n_classes))   # all-zero weights
    assert all(later <= earlier + 1e-12 for earlier, later in zip(losses, losses[1:]))
    assert losses[-1] < 0.5 * losses[0]
    accuracy = np.mean(predict(X_data) == labels)
    assert accuracy > 0.9


# --------------------------------------------------------------------------
# verify_grad itself


class ScaledProduct(Op):
    """``x * y`` with a gradient for ``y`` that is off by ``factor`` (1: right)."""

    __props__ = ("factor",)

    def __init__(self, factor):
        self.factor = factor

    def make_node(self, x, y):
        x, y = tn.as_tensor_variable(x), tn.as_tensor_variable(y)
        return Apply(self, [x, y], [tn.TensorType(x.dtype, x.type.shape)()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.asarray(inputs[0] * inputs[1])

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]

    def grad(self, inputs, output_grads):
        x, y = inputs
        (gz,) = output_grads
        return [gz * y, gz * x * self.factor]


def test_verify_grad_catches_a_wrong_gradient_and_names_the_input():
    rng = np.random.default_rng(3)
    points = [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))]
    with pytest.raises(GradientError, match="input #1") as info:
        verify_grad(lambda x, y: ScaledProduct(1.5)(x, y), points)
    assert info.value.input_index == 1
    assert isinstance(info.value, AssertionError)


def test_verify_grad_passes_a_right_gradient():
    rng = np.random.default_rng(3)
    points = [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))]
    verify_grad(lambda x, y: ScaledProduct(1)(x, y), points)


def test_verify_grad_with_float32_points_and_default_tolerances():
    rng = np.random.default_rng(4)
    points = [rng.normal(size=(3, 4)).astype("float32"), rng.uniform(1, 2, 4).astype("float32")]
    verify_grad(lambda x, y: tn.tanh(x) / y + tn.exp(x * 0.1), points)
    verify_grad(lambda x, y: tn.matmul(x, y).sum() * tn.max(x, axis=0), points)
    same_shape = [rng.normal(size=(3, 4)).astype("float32") for _ in range(2)]
    verify_grad(lambda x, y: ScaledProduct(1)(x, y), same_shape)
    with pytest.raises(GradientError, match="input #1"):
        verify_grad(lambda x, y: ScaledProduct(1.5)(x, y), same_shape)


def test_verify_grad_refuses_integer_points():
    with pytest.raises(TypeError, match="point #0 must be a float array, got dtype int64"):
        verify_grad(tn.exp, [np.arange(3)])
