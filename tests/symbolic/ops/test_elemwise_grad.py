"""Gradients of elementwise ops: every differentiable scalar op passes
``verify_grad``, broadcasting sums gradients back, and special points (ties,
clip boundaries, zero bases) get the documented values."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.ops import scalar as ps
from tenure.testing import verify_grad

#: scalar op name -> (tenure function, sampler of valid inputs)
POSITIVE = (0.5, 2.0)
ANY = (-2.0, 2.0)
INSIDE_ONE = (-0.9, 0.9)
UNARY = {
    "neg": (tn.neg, ANY), "abs": (tn.abs, ANY), "square": (tn.square, ANY),
    "reciprocal": (tn.reciprocal, POSITIVE), "exp": (tn.exp, ANY), "log": (tn.log, POSITIVE),
    "log1p": (tn.log1p, POSITIVE), "expm1": (tn.expm1, ANY), "sqrt": (tn.sqrt, POSITIVE),
    "sin": (tn.sin, ANY), "cos": (tn.cos, ANY), "tanh": (tn.tanh, ANY),
    "sigmoid": (tn.sigmoid, ANY), "softplus": (tn.softplus, ANY), "erf": (tn.erf, ANY),
    "relu": (tn.relu, ANY),
    "tan": (tn.tan, (-1.2, 1.2)), "arcsin": (tn.arcsin, INSIDE_ONE),
    "arccos": (tn.arccos, INSIDE_ONE), "arctan": (tn.arctan, ANY), "sinh": (tn.sinh, ANY),
    "cosh": (tn.cosh, ANY), "arcsinh": (tn.arcsinh, ANY), "arccosh": (tn.arccosh, (1.2, 3.0)),
    "arctanh": (tn.arctanh, INSIDE_ONE), "log2": (tn.log2, POSITIVE),
    "log10": (tn.log10, POSITIVE), "exp2": (tn.exp2, ANY),
}
BINARY = {
    "add": (tn.add, ANY, ANY), "sub": (tn.sub, ANY, ANY), "mul": (tn.mul, ANY, ANY),
    "true_divide": (tn.true_divide, ANY, POSITIVE), "power": (tn.power, POSITIVE, ANY),
    "maximum": (tn.maximum, ANY, ANY), "minimum": (tn.minimum, ANY, ANY),
    "mod": (tn.mod, POSITIVE, (2.5, 3.0)),
    # away from the origin and from arctan2's cut (x1 = 0, x2 < 0)
    "arctan2": (tn.arctan2, ANY, POSITIVE),
}
#: ops whose gradient is zero almost everywhere, or which carry none (bool results)
PIECEWISE_CONSTANT = {"sign", "floor_divide", "floor", "ceil", "trunc", "rint", "round"}
NO_GRADIENT = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
               "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
               "bitwise_or", "bitwise_xor", "invert", "isnan", "isinf"}


def test_every_scalar_op_is_covered():
    covered = set(UNARY) | set(BINARY) | PIECEWISE_CONSTANT | NO_GRADIENT | {"clip", "where"}
    assert covered == set(ps.TABLE)


shapes = st.sampled_from([(), (3,), (2, 3)])


@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=10, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_unary_gradients(name, shape, seed):
    fn, (lo, hi) = UNARY[name]
    rng = np.random.default_rng(seed)
    verify_grad(fn, [rng.uniform(lo, hi, size=shape)], rng=rng)


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=10, deadline=None)
@given(shapes=st.sampled_from([((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2,))]),
       seed=st.integers(0, 2**16))
def test_binary_gradients_with_broadcasting(name, shapes, seed):
    fn, (lo1, hi1), (lo2, hi2) = BINARY[name]
    rng = np.random.default_rng(seed)
    a = rng.uniform(lo1, hi1, size=shapes[0])
    b = rng.uniform(lo2, hi2, size=shapes[1])
    verify_grad(fn, [a, b], rng=rng)


def test_clip_and_where_gradients():
    rng = np.random.default_rng(0)
    verify_grad(lambda x: tn.clip(x, -0.5, 0.5), [np.array([-1.0, -0.2, 0.3, 0.9])], rng=rng)
    verify_grad(lambda x, lo, hi: tn.clip(x, lo, hi),
                [np.array([-1.0, 0.0, 1.0]), np.array([-0.5, -0.5, -0.5]), np.full(3, 0.5)],
                rng=rng)
    cond = tn.constant(np.array([True, False, True]))
    verify_grad(lambda a, b: tn.where(cond, a, b), [rng.normal(size=3), rng.normal(size=3)])


def test_cast_gradient_flows_between_float_dtypes():
    x = tn.vector("x")
    g = tn.grad(tn.cast(x, "float32").sum() * 3, x)
    assert g.dtype == "float64"
    np.testing.assert_array_equal(g.eval({x: np.ones(2)}), [3.0, 3.0])


@pytest.mark.parametrize("fn", [tn.sign, lambda x: tn.floor_divide(x, 2.0), tn.floor, tn.ceil,
                                tn.trunc, tn.rint, tn.round])
def test_piecewise_constant_ops_have_zero_gradient(fn):
    x = tn.vector("x")
    g = tn.grad(fn(x).sum(), x)
    np.testing.assert_array_equal(g.eval({x: np.array([-1.5, 0.5, 3.0])}), np.zeros(3))


def test_ties_split_the_gradient_evenly():
    x, y = tn.vector("x"), tn.vector("y")
    gx, gy = tn.grad(tn.maximum(x, y).sum(), [x, y])
    f = tn.function([x, y], [gx, gy])
    rx, ry = f(np.array([1.0, 2.0, 5.0]), np.array([1.0, 3.0, 4.0]))
    np.testing.assert_array_equal(rx, [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(ry, [0.5, 1.0, 0.0])


def test_power_gradient_at_zero_base_is_finite():
    x, y = tn.vector("x"), tn.vector("y")
    gx, gy = tn.grad((x ** y).sum(), [x, y])
    rx, ry = tn.function([x, y], [gx, gy])(np.array([0.0, 2.0]), np.array([2.0, 3.0]))
    np.testing.assert_allclose(rx, [0.0, 12.0])
    np.testing.assert_allclose(ry, [0.0, 8 * np.log(2.0)])


def test_runtime_broadcast_of_unknown_lengths_is_summed():
    # Shapes are only known at run time: (3, 1) + (4,) broadcasts to (3, 4).
    x, y = tn.matrix("x"), tn.vector("y")
    gx, gy = tn.grad((x * y).sum(), [x, y])
    rx, ry = tn.function([x, y], [gx, gy])(np.ones((3, 1)), np.arange(4.0))
    np.testing.assert_array_equal(rx, np.full((3, 1), 6.0))
    np.testing.assert_array_equal(ry, np.full(4, 3.0))


def test_python_scalars_get_no_gradient_but_do_not_break_it():
    x = tn.vector("x", dtype="float32")
    g = tn.grad((x * 2.5 + 1).sum(), x)
    assert g.dtype == "float32"
    np.testing.assert_array_equal(g.eval({x: np.ones(2, dtype="float32")}), [2.5, 2.5])


def test_power_gradient_of_float32_stays_float32():
    # The exponent 2 is a Python number: x ** (2 - 1) must not promote to float64.
    x = tn.matrix("x", dtype="float32")
    f = tn.function([x], tn.grad((x ** 2).sum(), x))
    assert not any(getattr(n.op, "scalar_op", None) is not None
                   and "float64" in str(n.outputs[0].type) for n in f.fgraph.apply_nodes)
    np.testing.assert_array_equal(f(np.full((2, 2), 3, dtype="float32")), np.full((2, 2), 6.0))
