"""``pow_by_mul``: whole powers 3 to 8 of floats as squarings and products
(tenure.rewrites.specialize)."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.patterns import is_elemwise

NONE = tn.Mode(rewrites="none")

#: values where pow's special cases show: signed zeros, infinities, NaN,
#: overflow and underflow of the result, and ordinary numbers of both signs
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, -1e-30,
           1.0, -1.0, 0.5, -3.25, 7.0, 1.0001, -2.5e10]


def _powers(f) -> int:
    return sum(is_elemwise(node, ps.power) for node in f.fgraph.apply_nodes)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", range(3, 9))
def test_whole_powers_are_products_with_pow_s_special_values(mode, dtype, n):
    x = tn.vector("x", dtype=dtype)
    f = tn.function([x], x ** n, mode=mode)
    assert "pow_by_mul" in f.rewrites_applied and _powers(f) == 0
    values = np.array(SPECIAL, dtype=dtype)
    with np.errstate(all="ignore"):
        expected = np.power(values, np.asarray(n, dtype))
    got = np.asarray(f(values))
    assert got.dtype == np.dtype(dtype)
    finite = np.isfinite(expected) & (expected != 0)
    # the special values exactly as pow gives them, signs of zeros included
    np.testing.assert_array_equal(got[~finite], expected[~finite])
    assert np.array_equal(np.signbit(got[~finite]), np.signbit(expected[~finite]))
    # the rest within the few roundings of the products (n - 1 of them at most)
    ulps = np.abs(got[finite] - expected[finite]) / np.spacing(np.abs(expected[finite]))
    assert ulps.max() <= n - 1, ulps


def test_random_values_stay_within_a_few_ulps(mode, rng):
    x = tn.vector("x", dtype="float32")
    f = tn.function([x], [x ** 3, x ** 4, x ** 7], mode=mode)
    values = rng.standard_normal(10_000).astype(np.float32) * 10
    for n, got in zip((3, 4, 7), f(values)):
        expected = np.power(values.astype(np.float64), n)
        ulps = np.abs(got - expected) / np.spacing(np.abs(expected).astype(np.float32))
        assert ulps.max() <= n - 1


def test_the_gelu_cube_fuses_into_one_loop_without_pow():
    x = tn.matrix("x", dtype="float32")
    f = tn.function([x], tn.tanh(0.8 * (x + 0.044715 * x ** 3)))
    assert _powers(f) == 0 and len(f.fgraph.apply_nodes) == 1


@pytest.mark.parametrize("build, why", [
    (lambda x, i: x ** 2, "two is pow_to_square's, exact"),
    (lambda x, i: x ** 9, "past eight the roundings add up"),
    (lambda x, i: x ** 3.5, "not a whole power"),
    (lambda x, i: x ** -3, "negative: a division"),
    (lambda x, i: x ** np.array([3.0, 4.0]), "not one exponent"),
    (lambda x, i: x ** np.full((2, 2), 3.0), "the exponent broadcasts x"),
    (lambda x, i: i ** 3, "integers: pow is exact already"),
    (lambda x, i: x ** tn.constant(np.float64(3)), "the float64 exponent makes it float64"),
])
def test_it_leaves_alone(build, why):
    x = tn.vector("x", dtype="float32")
    i = tn.vector("i", dtype="int64")
    f = tn.function([x, i], build(x, i), on_unused_input="ignore")
    assert "pow_by_mul" not in f.rewrites_applied, why


def test_excluded_by_name_it_keeps_pow():
    x = tn.vector("x")
    f = tn.function([x], x ** 3, mode=tn.Mode(exclude=["pow_by_mul"]))
    assert _powers(f) == 1
    assert tn.function([x], x ** 3, mode=NONE)(np.array([2.0]))[0] == 8.0
