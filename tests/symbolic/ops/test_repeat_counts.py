"""``repeat`` with a count per element (tenure/symbolic/ops/composed.py) and
the op computing its indices, ``RepeatIndices``
(tenure/symbolic/ops/repeat_counts.py), against NumPy on every linker."""

import numpy as np
import pytest

import tenure as tn


@pytest.mark.parametrize("shape, repeats, axis", [
    ((3,), [1, 0, 2], None), ((2, 3), [2, 1, 3], 1), ((2, 3), [0, 2], 0),
    ((2, 3), [3], 1), ((2, 3), np.arange(6) % 3, None), ((4,), [0, 0, 0, 0], 0)])
def test_repeat_with_a_count_per_element_matches_numpy(shape, repeats, axis, mode):
    """Counts given as ints (constant indices) and as a tensor (RepeatIndices)."""
    x = tn.tensor("x", shape=(None,) * len(shape))
    r = tn.vector("r", dtype="int64")
    value = np.arange(float(np.prod(shape))).reshape(shape)
    counts = np.asarray(repeats, dtype=np.int64)
    want = np.repeat(value, counts, axis=axis)
    f = tn.function([x, r], [tn.repeat(x, repeats, axis=axis), tn.repeat(x, r, axis=axis)],
                    mode=mode)
    for got in f(value, counts):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_repeat_counts_are_checked_when_the_function_runs(mode):
    x = tn.matrix("x")
    r = tn.vector("r", dtype="int64")
    f = tn.function([x, r], tn.repeat(x, r, axis=1), mode=mode)
    with pytest.raises(ValueError, match=r"repeat: repeats must hold one count per element along "
                                         r"the axis \(3\) or one for all, got shape \(2,\)"):
        f(np.ones((2, 3)), np.array([1, 2]))
    with pytest.raises(ValueError, match=r"repeat: repeats must be >= 0, got -2"):
        f(np.ones((2, 3)), np.array([1, -2, 0]))
    g = tn.function([x], tn.repeat(x, [1, 2], axis=0), mode=mode)   # length unknown until then
    with pytest.raises(ValueError, match=r"one count per element along the axis \(3\)"):
        g(np.ones((3, 2)))
