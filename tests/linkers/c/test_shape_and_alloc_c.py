"""``Shape``, ``Alloc`` and integer ``Arange`` as C steps (issue 33, item 1:
the shape ops and the allocations of a gradient graph leave the Python
path): the same values and errors as their perform, every dtype and any
number of dimensions, and a training step's gradient with them in C."""

import itertools


import numpy as np
import pytest

import tenure as tn

PY = tn.Mode(linker="py", rewrites="none")
C = tn.Mode(linker="c", rewrites="none")

pytestmark = [
    pytest.mark.usefixtures("cc"),
    # an arange's length, ceil((stop - start) / step), is evaluated by the
    # plan's size model on zeros for a symbolic step, and by the plan of a
    # zero step before the op refuses it: NumPy warns of the division
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
]


def kinds(f) -> dict:
    """Op class name -> the step kinds the C module runs it as."""
    found: dict = {}
    for node, kind in zip(f._thunk.plan.steps, f._thunk.graph.kinds):
        found.setdefault(type(node.node.op).__name__, set()).add(kind)
    return found


def both(inputs, outputs):
    return tn.function(inputs, outputs, mode=PY), tn.function(inputs, outputs, mode=C)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "uint16", "int64", "bool"])
def test_alloc_broadcasts_a_value_of_any_dtype(dtype):
    v = tn.tensor("v", dtype=dtype, shape=(None,))
    s = tn.tensor("s", dtype=dtype, shape=())
    n, m = tn.scalar("n", dtype="int64"), tn.scalar("m", dtype="int32")
    outs = [tn.alloc(v, n, v.shape[0]), tn.alloc(s, n, m, 2), tn.alloc(v, 0, v.shape[0]),
            tn.alloc(s)]
    f_py, f_c = both([v, s, n, m], outs)
    assert kinds(f_c)["Alloc"] == {"creation"}
    args = [np.arange(3).astype(dtype), np.array(1, dtype=dtype), 4, 2]
    for got, want in zip(f_c(*args), f_py(*args)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_shape_of_any_number_of_dimensions():
    xs = [tn.tensor(f"x{nd}", shape=(None,) * nd) for nd in (0, 1, 2, 5)]
    f_py, f_c = both(xs, [x.shape for x in xs] + [xs[2].shape[1] * 2])
    assert kinds(f_c)["Shape"] == {"shape"}
    args = [np.ones(()), np.ones(7), np.ones((3, 0)), np.ones((1, 2, 3, 4, 5))]
    for got, want in zip(f_c(*args), f_py(*args)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("value, lengths, match", [
    (np.arange(3.0), (2, -1), "negative dimensions are not allowed"),
    (np.arange(3.0), (2, 4), "cannot be broadcast"),
    (np.ones((2, 3)), (4, 3), "cannot be broadcast"),
])
def test_alloc_refuses_what_perform_refuses(value, lengths, match):
    v = tn.tensor("v", shape=(None,) * value.ndim)
    dims = [tn.scalar(f"d{i}", dtype="int64") for i in range(len(lengths))]
    f_py, f_c = both([v, *dims], tn.alloc(v, *dims))
    for f in (f_py, f_c):
        with pytest.raises(ValueError, match=match):
            f(value, *lengths)


BOUNDS = list(itertools.product([-5, 0, 3, 17], [-7, 0, 4, 10, 101], [1, 2, -1, -3, 7, 1000]))


@pytest.mark.parametrize("dtype", ["int64", "int8", "uint16"])
def test_integer_arange_gives_numpys_values_and_lengths(dtype):
    """Empty ranges, negative steps, steps past the stop; small integer
    bounds give int64 as NumPy's arange does."""
    a, b, c = (tn.scalar(n, dtype="int64") for n in "abc")
    f_py, f_c = both([a, b, c], tn.arange(a, b, c))
    assert kinds(f_c)["Arange"] == {"creation"}
    for start, stop, step in BOUNDS:
        want = np.arange(start, stop, step)
        got = f_c(start, stop, step)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(f_py(start, stop, step), want)
    small = tn.scalar("n", dtype=dtype)
    f = tn.function([small], tn.arange(small), mode=C)
    assert kinds(f)["Arange"] == {"creation"}
    np.testing.assert_array_equal(f(5), np.arange(np.array(5, dtype=dtype)))


def test_arange_with_a_zero_step_is_refused_by_both():
    a, b, c = (tn.scalar(n, dtype="int64") for n in "abc")
    for f in both([a, b, c], tn.arange(a, b, c)):
        with pytest.raises(ValueError, match="arange: step must not be 0"):
            f(0, 5, 0)


def test_a_training_steps_gradient_has_shape_and_alloc_in_c():
    """The gradient of an MLP's sum and mean losses: the shapes it reads and
    the arrays it allocates are C steps, to the Python linker's numbers."""
    x, t = tn.matrix("x"), tn.matrix("t")
    w = tn.shared(np.linspace(-1, 1, 12).reshape(3, 4), name="w")
    h = tn.tanh(x @ w)
    losses = [tn.sum((h - t) ** 2), tn.mean((h - t) ** 2)]
    grads = [tn.grad(loss, w) for loss in losses]
    f_py, f_c = (tn.function([x, t], grads, mode=tn.Mode(linker=linker))
                 for linker in ("py", "c"))
    found = kinds(f_c)
    assert all(found[op] != {"py"} for op in ("Shape", "Alloc") if op in found)
    assert "Shape" in found or "Alloc" in found
    args = [np.linspace(0, 1, 6).reshape(2, 3), np.ones((2, 4))]
    for got, want in zip(f_c(*args), f_py(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
