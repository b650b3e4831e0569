"""nonzero and boolean-mask indexing (issue 35, item 3) against NumPy on
every linker: results whose length is known only at run time, their
gradients, set/inc_subtensor through a mask, and NumPy's errors."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.nonzero import nonzero


def test_nonzero_matches_numpy(mode):
    x = tn.tensor("x", dtype="int16", shape=(None, None, None))
    f = tn.function([x], list(nonzero(x)), mode=mode)
    value = (np.arange(24).reshape(2, 3, 4) % 5 == 0).astype("int16")
    got = f(value)
    for g, want in zip(got, np.nonzero(value)):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, want)
    np.testing.assert_array_equal(f(np.zeros((2, 0, 3), "int16"))[0], np.zeros(0, np.int64))


def test_a_mask_indexes_as_numpy_does(mode):
    x = tn.tensor3("x")
    mask2 = tn.tensor("mask2", dtype="bool", shape=(None, None))
    mask1 = tn.vector("mask1", dtype="bool")
    outs = [x[x > 0], x[mask2], x[:, mask1], x[..., mask1[:2]], x[mask1[:2], 1:],
            x[np.array([True, False]), 0]]
    f = tn.function([x, mask2, mask1], outs, mode=mode)
    value = np.arange(-6.0, 6.0).reshape(2, 3, 2)
    m2, m1 = np.array([[True, False, True], [False, False, True]]), np.array([False, True, True])
    wants = [value[value > 0], value[m2], value[:, m1], value[..., m1[:2]], value[m1[:2], 1:],
             value[np.array([True, False]), 0]]
    for k, (got, want) in enumerate(zip(f(value, m2, m1), wants)):
        assert got.shape == want.shape, k
        np.testing.assert_array_equal(got, want, err_msg=f"output {k}")
    assert outs[0].type.shape == (None,)


def test_updates_and_gradients_through_a_mask(mode):
    x = tn.matrix("x")
    negative = x < 0
    outs = [tn.set_subtensor(x[negative], 0.0), tn.inc_subtensor(x[negative], 10.0),
            tn.grad(tn.sum(x[negative] ** 2), x)]
    f = tn.function([x], outs, mode=mode)
    value = np.array([[1.0, -2.0], [-3.0, 4.0]])
    clipped, raised, grad = f(value)
    np.testing.assert_array_equal(clipped, np.where(value < 0, 0.0, value))
    np.testing.assert_array_equal(raised, np.where(value < 0, value + 10.0, value))
    np.testing.assert_array_equal(grad, np.where(value < 0, 2 * value, 0.0))


def test_a_mask_of_another_shape_raises_numpys_index_error(mode):
    x, mask = tn.matrix("x"), tn.vector("mask", dtype="bool")
    f = tn.function([x, mask], x[:, mask], mode=mode)
    with pytest.raises(IndexError, match=r"boolean index did not match indexed array along "
                                         r"axis 1; size of axis is 3 but size of corresponding "
                                         r"boolean axis is 2"):
        f(np.ones((2, 3)), np.array([True, False]))


def test_errors_when_building():
    x = tn.matrix("x")
    with pytest.raises(TypeError, match="boolean indices are not supported here"):
        x[True]
    with pytest.raises(IndexError, match="too many indices"):
        x[tn.tensor("m", dtype="bool", shape=(None, None, None))]
    with pytest.raises(ValueError, match="nonzero: .* is 0-d"):
        nonzero(tn.scalar("s"))
