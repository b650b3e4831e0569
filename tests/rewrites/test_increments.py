"""add_of_increments: a gradient's sum of increments into zeros becomes one
chain of increments, run in one buffer (tenure/rewrites/increments.py)."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.subtensor_update import IncSubtensor


def _increments(f) -> list:
    return [node.op for node in f.fgraph.toposort() if isinstance(node.op, IncSubtensor)]


@pytest.mark.parametrize("linker", ["py", "c"])
def test_the_gradient_of_several_slices_increments_one_buffer(linker):
    """Five slices of x (as im2col reads them): their gradients go into one
    buffer, the same numbers as the sum of five, at a lower planned peak."""
    x = tn.vector("x")
    parts = tn.stack([x[k:k + 6] for k in range(5)])
    cost = tn.sum(parts ** 3)
    g = tn.grad(cost, x)
    f = tn.function([x], g, mode=tn.Mode(linker=linker))
    plain = tn.function([x], g, mode=tn.Mode(linker=linker, exclude=["add_of_increments"]))
    assert "add_of_increments" in f.rewrites_applied
    ops = _increments(f)
    assert len(ops) == 5 and all(op.inplace for op in ops)   # the first into the zeros
    value = np.linspace(-1.0, 1.0, 10)
    np.testing.assert_array_equal(f(value), plain(value))
    np.testing.assert_allclose(f(value), [3 * v ** 2 * min(k + 1, 5, 10 - k)
                                          for k, v in enumerate(value)])
    big = np.ones(100_000)
    assert f.memory_report(big).predicted_peak < plain.memory_report(big).predicted_peak / 2


def test_not_where_the_sum_broadcasts_or_the_increment_is_read_elsewhere():
    x, row = tn.matrix("x"), tn.vector("row")
    into_zeros = tn.inc_subtensor(tn.zeros_like(x)[1:], x[:1] * 2)
    broadcast = into_zeros + row                    # row broadcasts: not x's shape
    other = tn.inc_subtensor(tn.zeros_like(x)[:1], x[1:2])
    twice = into_zeros + other                      # both increments are results too
    f = tn.function([x, row], [broadcast, twice, into_zeros, other])
    assert "add_of_increments" not in f.rewrites_applied
    value, r = np.arange(6.0).reshape(3, 2), np.array([10.0, 20.0])
    got_broadcast, got_twice, _, _ = f(value, r)
    expected = np.zeros((3, 2))
    expected[1:] += value[:1] * 2
    np.testing.assert_array_equal(got_broadcast, expected + r)
    expected_twice = expected.copy()
    expected_twice[:1] += value[1:2]
    np.testing.assert_array_equal(got_twice, expected_twice)
