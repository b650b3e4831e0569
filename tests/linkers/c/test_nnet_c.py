"""Generated C for softmax, log_softmax and logsumexp (tenure/linkers/c/nnet.py)
against the NumPy reference (``perform``): both float dtypes, axes (one,
several, none, all) with and without keepdims, 0-d and empty inputs, strided /
reversed / transposed / Fortran inputs and outputs, the output being the input,
rows of -inf, +inf, NaN and huge values, and the errors.

Every node is compiled into one module (many entries), once per test session.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tenure.linkers.c import nnet as cn
from tests.linkers.c import harness
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.types import TensorType

DTYPES = ("float32", "float64")
RTOL = {"float32": 1e-6, "float64": 1e-13}
#: axes of a 3-d input
AXES = [(2,), (0,), (1,), (0, 2), (), (0, 1, 2)]


def _var(dtype, ndim):
    return TensorType(dtype, (None,) * ndim)()


def _cases() -> dict:
    cases = {}
    for dtype in DTYPES:
        for axes in AXES:
            tag = "".join(map(str, axes)) or "none"
            cases[f"sm_{dtype}_{tag}"] = Softmax(axes)(_var(dtype, 3)).owner
            cases[f"ls_{dtype}_{tag}"] = LogSoftmax(axes)(_var(dtype, 3)).owner
            for keep in (False, True):
                cases[f"lse_{dtype}_{tag}_{int(keep)}"] = LogSumExp(axes, keep)(
                    _var(dtype, 3)).owner
        # 1-d and 0-d inputs
        cases[f"sm_{dtype}_vec"] = Softmax((0,))(_var(dtype, 1)).owner
        cases[f"lse_{dtype}_vec"] = LogSumExp((0,), False)(_var(dtype, 1)).owner
        cases[f"ls_{dtype}_scalar"] = LogSoftmax(())(_var(dtype, 0)).owner
        cases[f"lse_{dtype}_scalar"] = LogSumExp((), False)(_var(dtype, 0)).owner
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def mod(cc):
    return harness.build(CASES)


def _reference(node, x):
    if isinstance(node.op, LogSumExp) and x.ndim == 0:
        # perform fails on 0-d inputs (np.exp(out=) of a NumPy scalar): the same on (1,)
        one = LogSumExp((), False)(_var(x.dtype.name, 1)).owner
        return _reference(one, x.reshape(1)).reshape(())
    storage = [[None]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        node.op.perform(node, [x], storage)
    return storage[0][0]


def _check(mod, name, x, out=None):
    node = CASES[name]
    want = _reference(node, x)
    got = getattr(mod, name)(x) if out is None else getattr(mod, name)(x, out=out)
    if out is not None:
        assert got is out
    dtype = node.outputs[0].dtype
    assert got.dtype == want.dtype == np.dtype(dtype)
    assert got.shape == want.shape
    rtol = RTOL[dtype]
    atol = rtol * 1e-3
    finite = np.abs(want[np.isfinite(want)])
    if not name.startswith("sm") and finite.size:
        # (x - m) - log(s) and log(s) + m cancel: an ulp of log(s) or m is the scale
        atol = 4 * rtol * float(finite.max())
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    # NaN and infinities exactly where perform has them
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    return got


def _layouts(a):
    """The same values in several memory layouts."""
    yield a
    yield a[::-1, :, ::-1]                                  # negative strides
    yield np.asfortranarray(a)                              # Fortran order
    yield np.ascontiguousarray(a.transpose(2, 1, 0)).transpose(2, 1, 0)
    big = np.zeros((a.shape[0], 2 * a.shape[1], a.shape[2] + 1), a.dtype)
    big[:, ::2, :-1] = a
    yield big[:, ::2, :-1]                                  # strided view


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["sm", "ls", "lse"])
def test_axes_and_layouts(mod, rng, kind, dtype):
    a = (rng.normal(size=(3, 5, 70)) * 4).astype(dtype)
    for axes in AXES:
        tag = "".join(map(str, axes)) or "none"
        names = [f"{kind}_{dtype}_{tag}"] if kind != "lse" else [
            f"lse_{dtype}_{tag}_0", f"lse_{dtype}_{tag}_1"]
        for name in names:
            for x in _layouts(a):
                _check(mod, name, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_fast_path(mod, rng, dtype):
    # rows longer than the block and not a multiple of the lanes
    for n in (1, 15, 16, 17, 255, 256, 257, 1000, 4099):
        a = rng.normal(size=(2, 3, n)).astype(dtype) * 3
        for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"lse_{dtype}_2_0", f"lse_{dtype}_2_1"):
            _check(mod, name, a)
    v = rng.normal(size=5000).astype(dtype)
    _check(mod, f"sm_{dtype}_vec", v)
    _check(mod, f"lse_{dtype}_vec", v)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_outputs(mod, rng, dtype):
    a = rng.normal(size=(3, 4, 6)).astype(dtype)
    for name, shape in [(f"sm_{dtype}_2", (3, 4, 6)), (f"ls_{dtype}_02", (3, 4, 6)),
                        (f"lse_{dtype}_2_1", (3, 4, 1)), (f"lse_{dtype}_1_0", (3, 6))]:
        out = np.full(shape[::-1], 7, dtype).T                  # Fortran-ordered
        _check(mod, name, a, out=out)
        big = np.zeros(tuple(2 * d for d in shape), dtype)
        out = big[tuple(slice(None, None, -2) for _ in shape)]  # reversed, strided
        _check(mod, name, a, out=out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_values(mod, dtype):
    inf, nan = np.inf, np.nan
    rows = [[-inf, -inf, -inf, -inf], [inf, 1.0, 2.0, -inf], [inf, inf, 0.0, 0.0],
            [nan, 1.0, 2.0, 3.0], [nan, nan, nan, nan], [1000.0, 1000.0, -1000.0, 3.0],
            [-1000.0, -1001.0, -1002.0, -1e30], [80.0, 90.0, 100.0, 0.0],
            [0.0, 0.0, 0.0, 0.0], [-inf, 0.0, -inf, 1.0], [nan, inf, -inf, 0.0],
            [1e30, -1e30, 3e38, 0.0]]
    a = np.array(rows, dtype=dtype).reshape(12, 1, 4)
    for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"lse_{dtype}_2_0", f"lse_{dtype}_2_1",
                 f"sm_{dtype}_none", f"ls_{dtype}_none", f"lse_{dtype}_none_0",
                 f"sm_{dtype}_02", f"lse_{dtype}_012_0"):
        _check(mod, name, a)
        _check(mod, name, a[::-1, :, ::-1])
    for value in (-inf, inf, nan, 2.5, -1e30):
        s = np.array(value, dtype=dtype)
        _check(mod, f"ls_{dtype}_scalar", s)
        _check(mod, f"lse_{dtype}_scalar", s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty(mod, dtype):
    for shape in [(0, 3, 4), (2, 0, 4), (2, 3, 0), (0, 0, 0)]:
        a = np.zeros(shape, dtype)
        for axes in AXES:
            tag = "".join(map(str, axes)) or "none"
            for name in (f"sm_{dtype}_{tag}", f"ls_{dtype}_{tag}", f"lse_{dtype}_{tag}_0",
                         f"lse_{dtype}_{tag}_1"):
                _check(mod, name, a)
    _check(mod, f"lse_{dtype}_vec", np.zeros(0, dtype))       # -inf, like perform


@pytest.mark.parametrize("dtype", DTYPES)
def test_output_is_input(mod, rng, dtype):
    for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"sm_{dtype}_0", f"ls_{dtype}_02"):
        a = rng.normal(size=(3, 4, 300)).astype(dtype)
        want = _reference(CASES[name], a)
        got = getattr(mod, name)(a, out=a)
        assert got is a
        np.testing.assert_allclose(a, want, rtol=RTOL[dtype], atol=RTOL[dtype] * 1e-3)


def test_partial_overlap_goes_through_a_copy(mod, rng):
    base = rng.normal(size=(5, 64))
    node = Softmax((1,))(_var("float64", 2)).owner
    m = harness.build(node)
    want = _reference(node, base[:4].copy())
    got = m.run(base[:4], out=base[1:])
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_errors(mod):
    a = np.zeros((2, 3, 4), "float32")
    with pytest.raises(TypeError, match="dtype"):
        mod.sm_float32_2(a.astype("float64"))
    with pytest.raises(TypeError):
        mod.sm_float32_2(a[0])
    with pytest.raises(ValueError, match="shape"):
        mod.sm_float32_2(a, out=np.zeros((2, 3, 5), "float32"))
    with pytest.raises(ValueError, match="shape"):
        mod.lse_float32_2_1(a, out=np.zeros((2, 3, 4), "float32"))
    with pytest.raises(TypeError, match="dimension"):
        mod.lse_float32_2_0(a, out=np.zeros((2, 3, 1), "float32"))
    ro = np.zeros((2, 3), "float32")
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mod.lse_float32_2_0(a, out=ro)


def test_has_c_code():
    for dtype in DTYPES:
        assert cn.has_c_code(Softmax((0,))(_var(dtype, 2)).owner)
        assert cn.has_c_code(LogSumExp((0, 1), True)(_var(dtype, 2)).owner)
    for dtype in ("int32", "bool", "float16"):     # ints give float64: perform converts
        assert not cn.has_c_code(Softmax((0,))(_var(dtype, 2)).owner)
        assert not cn.has_c_code(LogSumExp((0,))(_var(dtype, 2)).owner)
    with pytest.raises(NotImplementedError):
        cn.spec(Softmax((0,))(_var("int64", 2)).owner)


def test_softmax_compiles_nothing(mod):
    """Its loops are the C runtime's: the schedule describes the step."""
    assert mod["sm_float32_2"].thunk.graph.source is None
