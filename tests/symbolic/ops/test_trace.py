"""trace against NumPy on every linker the op suites run on (the ``mode``
fixture: py, check, c, cuda on the emulated device), and on the Dask linker
explicitly: values, dtypes, the static shape, the gradient, and errors that
name the input."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.trace import Trace
from tenure.testing import verify_grad
from tests.helpers import DTYPES, assert_matches, random_values

SHAPES = [(3, 4), (4, 3), (1, 1), (5, 5), (0, 3), (3, 0), (0, 0), (7, 2)]
OFFSETS = [0, 1, -1, 2, -3, 6, -6]


def _cases(seed=0):
    """(shape, offset) pairs: every shape, random offsets, empty ones included."""
    rng = np.random.default_rng(seed)
    random_offsets = [(shape, int(rng.choice(OFFSETS))) for shape in SHAPES]
    return random_offsets + [((3, 4), k) for k in OFFSETS]


@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_matches_numpy(mode, dtype):
    x = tn.tensor("x", dtype=dtype, shape=(None, None))
    for i, (shape, k) in enumerate(_cases()):
        y = tn.trace(x, offset=k)
        assert y.type.shape == () and y.dtype == np.trace(np.zeros((1, 1), dtype)).dtype
        value = random_values(i, shape, dtype)
        f = tn.function([x], y, mode=mode)
        assert_matches(f(value), np.trace(value, k))
        # a strided, reversed view of the same values
        big = random_values(i, (2 * shape[0] + 1, shape[1]), dtype)[::-2]
        assert_matches(f(big), np.trace(big, k))


def test_trace_with_a_static_shape_and_in_a_larger_graph(mode, rng):
    x = tn.tensor("x", shape=(3, 5))
    y = tn.trace(tn.exp(x), 1) * 2.0 + tn.trace(x.T, -2)
    value = rng.normal(size=(3, 5))
    assert_matches(tn.function([x], y, mode=mode)(value),
                   np.trace(np.exp(value), 1) * 2.0 + np.trace(value.T, -2))


@pytest.mark.parametrize("offset", [0, 1, -2, 4])
@pytest.mark.parametrize("shape", [(3, 4), (4, 2), (1, 1)])
def test_trace_gradient(mode, rng, shape, offset):
    verify_grad(lambda x: tn.trace(x, offset), [rng.normal(size=shape)], mode=mode)
    x = tn.matrix("x")
    g = tn.grad(tn.trace(x, offset), x)
    got = tn.function([x], g, mode=mode)(np.ones(shape))
    np.testing.assert_array_equal(got, np.eye(*shape, offset))


def test_trace_of_integers_has_no_gradient():
    x = tn.tensor("x", dtype="int32", shape=(None, None))
    y = tn.trace(x)
    assert y.owner.op.grad([x], [tn.scalar("g", dtype=y.dtype)]) == [None]


def test_trace_names_a_bad_input():
    with pytest.raises(ValueError, match=r"trace: v \(.*\) is 1-d; trace takes a matrix"):
        tn.trace(tn.vector("v"))
    with pytest.raises(ValueError, match=r"is 3-d"):
        tn.trace(tn.tensor3("t"))
    with pytest.raises(TypeError, match="offset must be an int, got 1.5"):
        tn.trace(tn.matrix("x"), 1.5)
    assert str(Trace(2)) == "trace{offset=2}" and Trace(0) == Trace() != Trace(1)


def test_trace_runs_as_a_compiled_c_step(cc_or_skip, rng):
    x = tn.matrix("x")
    f = tn.function([x], tn.trace(x, -1), mode=tn.Mode(linker="c"))
    assert f._thunk.graph.kinds == ["trace"]      # C of its own, not its perform
    value = rng.normal(size=(4, 3))
    assert_matches(f(value), np.trace(value, -1))
    y = tn.tensor("y", dtype="float16", shape=(None, None))   # no C for float16: perform
    f16 = tn.function([y], tn.trace(y), mode=tn.Mode(linker="c"))
    assert f16._thunk.graph.kinds == ["py"]
    assert_matches(f16(value.astype("float16")), np.trace(value.astype("float16")))


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "bool"])
def test_trace_on_the_dask_linker(rng, dtype):
    """The Dask suite table does not run this file: the Dask linker here."""
    pytest.importorskip("dask")
    dask_mode = tn.Mode(linker="dask", compute=True)
    x = tn.tensor("x", dtype=dtype, shape=(None, None))
    for i, (shape, k) in enumerate(_cases(1)):
        value = random_values(i, shape, dtype)
        assert_matches(tn.function([x], tn.trace(x, k), mode=dask_mode)(value),
                       np.trace(value, k))
    if dtype == "float64":
        verify_grad(lambda x: tn.trace(x, 1), [rng.normal(size=(4, 5))], mode=dask_mode)
