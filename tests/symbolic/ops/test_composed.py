"""tril, triu, tile, repeat, pad and linspace against NumPy on every linker, their
gradients, and the errors their static arguments get."""

import numpy as np
import pytest

import tenure as tn
from tenure.testing import verify_grad


def _check(mode, inputs, values, build, reference):
    f = tn.function(inputs, build(*inputs), mode=mode)
    got, want = f(*values), reference(*values)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float64", "bool"])
@pytest.mark.parametrize("k", [-2, 1, 5])
@pytest.mark.parametrize("shape", [(4, 2), (2, 3, 3)])
def test_tril_and_triu_match_numpy(shape, k, dtype, mode):
    x = tn.tensor("x", dtype=dtype, shape=(None,) * len(shape))
    value = (np.arange(np.prod(shape)).reshape(shape) % 3 + 1).astype(dtype)
    _check(mode, [x], [value], lambda x: tn.tril(x, k), lambda v: np.tril(v, k))
    _check(mode, [x], [value], lambda x: tn.triu(x, k), lambda v: np.triu(v, k))


@pytest.mark.parametrize("shape, reps", [((3,), 2), ((3,), (2, 2)), ((2, 3), (3, 1)),
                                         ((2, 3), 2), ((2, 1, 3), (2, 2, 2)), ((2, 3), (1, 1)),
                                         ((2, 3), (0, 2)), ((), (3,))])
def test_tile_matches_numpy(shape, reps, mode):
    x = tn.tensor("x", shape=(None,) * len(shape))
    value = np.arange(float(np.prod(shape))).reshape(shape)
    _check(mode, [x], [value], lambda x: tn.tile(x, reps), lambda v: np.tile(v, reps))


@pytest.mark.parametrize("shape, repeats, axis", [((3,), 2, None), ((2, 3), 3, None),
                                                  ((2, 3), 2, 0), ((2, 3), 2, 1),
                                                  ((2, 3), 2, -1), ((2, 3), 0, 1),
                                                  ((2, 2, 2), 1, 1)])
def test_repeat_matches_numpy(shape, repeats, axis, mode):
    x = tn.tensor("x", dtype="int64", shape=(None,) * len(shape))
    value = np.arange(np.prod(shape)).reshape(shape)
    _check(mode, [x], [value], lambda x: tn.repeat(x, repeats, axis=axis),
           lambda v: np.repeat(v, repeats, axis=axis))


PAD_CASES = [((3,), 2, 0), ((3,), (1, 4), -2.5), ((2, 3), ((1, 0), (2, 3)), 7),
             ((2, 3), ((1, 2),), 1), ((2, 0), 1, 3), ((2, 3), 0, 0),
             ((2, 3), np.array([[0, 1], [2, 0]]), 5)]


@pytest.mark.parametrize("shape, pad_width, value", PAD_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int16"])
def test_pad_matches_numpy(shape, pad_width, value, dtype, mode):
    x = tn.tensor("x", dtype=dtype, shape=(None,) * len(shape))
    data = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    _check(mode, [x], [data], lambda x: tn.pad(x, pad_width, constant_values=value),
           lambda v: np.pad(v, pad_width, constant_values=value))


COPY_CASES = [((3, 4), ((1, 2), (0, 3))), ((3, 4), ((5, 7), (2, 0))), ((1, 2), 3),
              ((2, 1), ((0, 0), (9, 4))), ((4,), 6)]


@pytest.mark.parametrize("pad_mode", ["edge", "wrap", "reflect", "symmetric"])
def test_pad_copying_modes_match_numpy(pad_mode, mode):
    """Every case in one function: widths past the axis's length (NumPy's
    repeated reflections and wraps) and axes of one element included."""
    inputs = [tn.tensor(f"x{k}", dtype="int32", shape=(None,) * len(shape))
              for k, (shape, _) in enumerate(COPY_CASES)]
    f = tn.function(inputs, [tn.pad(x, width, mode=pad_mode)
                             for x, (_, width) in zip(inputs, COPY_CASES)], mode=mode)
    values = [np.arange(np.prod(shape), dtype="int32").reshape(shape) for shape, _ in COPY_CASES]
    for got, value, (_, width) in zip(f(*values), values, COPY_CASES):
        want = np.pad(value, width, mode=pad_mode)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_pad_copying_modes_gradient(mode):
    """Each element's gradient sums over the copies made of it."""
    verify_grad(lambda x: tn.pad(x, ((2, 1), (0, 3)), mode="reflect"),
                [np.random.default_rng(1).normal(size=(3, 4))], mode=mode)
    x = tn.vector("x")
    g = tn.grad(tn.sum(tn.pad(x, (2, 1), mode="edge")), x)
    np.testing.assert_array_equal(tn.function([x], g, mode=mode)(np.ones(3)), [3.0, 1.0, 2.0])


@pytest.mark.parametrize("num", [0, 1, 7])
@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("dtype", [None, "int32"])
def test_linspace_matches_numpy_bit_for_bit(num, endpoint, dtype, mode):
    start, stop = tn.scalar("start"), tn.scalar("stop")
    _check(mode, [start, stop], [np.float64(-1.3), np.float64(2.9)],
           lambda a, b: tn.linspace(a, b, num, endpoint=endpoint, dtype=dtype),
           lambda a, b: np.linspace(a, b, num, endpoint=endpoint, dtype=dtype))


def test_linspace_of_float32_bounds_and_python_numbers(mode):
    start = tn.scalar("start", dtype="float32")
    f = tn.function([start], [tn.linspace(start, 1.0, 9), tn.linspace(0, 3, 4)], mode=mode)
    got32, got_int_bounds = f(np.float32(0.1))
    want32 = np.linspace(np.float32(0.1), 1.0, 9)
    assert got32.dtype == want32.dtype == np.float32
    np.testing.assert_array_equal(got32, want32)
    np.testing.assert_array_equal(got_int_bounds, np.linspace(0, 3, 4))


@pytest.mark.parametrize("dtype", ["float64", "int32", "float32"])
@pytest.mark.parametrize("mode_name, pad_width, stat_length", [
    ("maximum", ((1, 2), (2, 1)), None), ("minimum", 2, 1), ("mean", ((1, 2), (2, 1)), None),
    ("mean", ((0, 3), (1, 1)), ((1, 2), (3, 1))), ("maximum", (0, 2), ((1, 1), (2, 9))),
    ("median", ((1, 2), (2, 1)), None), ("median", 2, ((2, 3), (4, 1)))])
def test_pad_statistic_modes_match_numpy(mode_name, pad_width, stat_length, dtype, mode):
    """Each axis in turn (the later ones see the earlier ones' padding), the
    statistic of the stat_length elements nearest each side; an integer
    mean rounded to even."""
    x = tn.tensor("x", dtype=dtype, shape=(None, None))
    value = np.array([[1, 5, 2, 8], [7, 3, 4, 0], [2, 2, 9, 1]], dtype=dtype)
    f = tn.function([x], tn.pad(x, pad_width, mode_name, stat_length=stat_length), mode=mode)
    want = np.pad(value, pad_width, mode_name, stat_length=stat_length)
    got = f(value)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("dtype", ["float64", "int32", "float32"])
@pytest.mark.parametrize("pad_width, end_values", [
    (((1, 2), (3, 1)), ((5, -3), (0, 10))), (2, 0), ((0, 3), 2.5), ((2, 0), ((1, 1), (4, 4)))])
def test_pad_linear_ramp_matches_numpy(pad_width, end_values, dtype, mode):
    """NumPy's ramps bit for bit: linspace without its end, in x's float
    dtype (float64 for integers, then floored), its zero-step form when any
    step is zero (an end value equal to an edge)."""
    x = tn.tensor("x", dtype=dtype, shape=(None, None))
    value = np.array([[1, 5, 2, 8], [7, 3, 4, 0], [2, 2, 9, 1]], dtype=dtype)
    f = tn.function([x], tn.pad(x, pad_width, "linear_ramp", end_values=end_values), mode=mode)
    want = np.pad(value, pad_width, "linear_ramp", end_values=end_values)
    got = f(value)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_pad_statistic_errors():
    m = tn.matrix("m")
    with pytest.raises(ValueError, match=r"pad: stat_length is for the modes maximum, minimum, "
                                         r"mean, median, not 'edge'"):
        tn.pad(m, 1, "edge", stat_length=2)
    with pytest.raises(ValueError, match=r"pad: stat_length\[0\] must be >= 1, got 0"):
        tn.pad(m, 1, "mean", stat_length=0)
    with pytest.raises(ValueError, match=r"pad: cannot extend the empty axis 0 .* 'maximum'"):
        tn.pad(tn.tensor("e", shape=(0, 2)), 1, "maximum")
    with pytest.raises(TypeError, match=r"pad: end_values must hold numbers, got 'a'"):
        tn.pad(m, 1, "linear_ramp", end_values="a")
    with pytest.raises(ValueError, match=r"pad: end_values must be a number, \(before, after\)"):
        tn.pad(m, 1, "linear_ramp", end_values=(1, 2, 3))


def test_gradients_flow_through_them():
    rng = np.random.default_rng(0)
    verify_grad(lambda x: tn.tril(x, 1) * tn.triu(x), [rng.standard_normal((3, 4))], rng=rng)
    verify_grad(lambda x: tn.tile(x, (2, 3)), [rng.standard_normal((2, 2))], rng=rng)
    verify_grad(lambda x: tn.repeat(x, 3, axis=0), [rng.standard_normal((2, 3))], rng=rng)
    verify_grad(lambda x: tn.repeat(x, [2, 0, 1], axis=1), [rng.standard_normal((2, 3))], rng=rng)
    verify_grad(lambda x: tn.pad(x, ((1, 2), (0, 1)), "mean", stat_length=2),
                [rng.standard_normal((3, 3))], rng=rng)
    verify_grad(lambda x: tn.pad(x, 2, "maximum"), [rng.standard_normal((3, 3))], rng=rng)
    verify_grad(lambda x: tn.pad(x, ((1, 2), (2, 0)), "median"), [rng.standard_normal((3, 4))],
                rng=rng)
    verify_grad(lambda x: tn.pad(x, ((2, 1), (1, 3)), "linear_ramp", end_values=1.5),
                [rng.standard_normal((3, 3))], rng=rng)
    verify_grad(lambda a, b: tn.linspace(a, b, 5), [np.array(0.5), np.array(2.0)], rng=rng)
    verify_grad(lambda x: tn.pad(x, ((1, 0), (2, 1)), constant_values=3.0),
                [rng.standard_normal((2, 3))], rng=rng)


def test_static_arguments_and_shapes_are_checked_when_the_graph_is_built():
    v, m = tn.vector("v"), tn.matrix("m")
    with pytest.raises(ValueError, match="tril: x must have at least 2 dimensions"):
        tn.tril(v)
    with pytest.raises(TypeError, match=r"triu: k must be a Python integer.*0\.5"):
        tn.triu(m, 0.5)
    with pytest.raises(TypeError, match=r"tile: reps\[1\] must be a Python integer"):
        tn.tile(m, (2, tn.scalar("r", dtype="int64")))
    with pytest.raises(ValueError, match=r"tile: reps\[0\] must be >= 0, got -1"):
        tn.tile(m, -1)
    with pytest.raises(ValueError, match=r"repeat: repeats must hold one count per element "
                                         r"along the axis \(3\) or one for all, got shape \(2,\)"):
        tn.repeat(tn.tensor("s", shape=(3,)), [1, 2])
    with pytest.raises(ValueError, match=r"repeat: repeats must be >= 0, got -1"):
        tn.repeat(tn.tensor("s", shape=(2,)), [1, -1])
    with pytest.raises(TypeError, match=r"repeat: repeats must be ints, got float64"):
        tn.repeat(v, [1.5, 2.0])
    with pytest.raises(TypeError, match=r"repeat: repeats must be an int or a vector of ints"):
        tn.repeat(v, m)
    with pytest.raises(ValueError, match=r"repeat: axis must be an int in \[-2, 2\)"):
        tn.repeat(m, 2, axis=2)
    with pytest.raises(ValueError, match=r"pad: pad_width must be an int, \(before, after\)"):
        tn.pad(m, ((1, 2, 3),))
    with pytest.raises(TypeError, match="pad: pad_width must hold Python integers"):
        tn.pad(m, (tn.scalar("w", dtype="int64"), 1))
    with pytest.raises(ValueError, match=r"pad: pad_width\[1\] must be >= 0, got -1"):
        tn.pad(m, ((0, 0), (1, -1)))
    with pytest.raises(ValueError, match="pad: mode must be 'constant' or one of edge, wrap, "
                                         "reflect, symmetric, maximum, minimum, mean, median, "
                                         "linear_ramp, got 'empty'"):
        tn.pad(m, 1, mode="empty")
    with pytest.raises(ValueError, match="pad: cannot extend the empty axis 0"):
        tn.pad(tn.tensor("e", shape=(0, 3)), 1, mode="wrap")
    with pytest.raises(ValueError, match="pad: constant_values must be a scalar"):
        tn.pad(m, 1, constant_values=v)
    with pytest.raises(ValueError, match="linspace: num must be >= 0, got -1"):
        tn.linspace(0, 1, -1)
    with pytest.raises(ValueError, match="linspace: stop must be a scalar"):
        tn.linspace(0, v, 3)
