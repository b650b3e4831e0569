"""The softmax, log_softmax and logsumexp nodes every linker's kernel tests
run (``CASES``: both float dtypes, axes of a 3-d input with and without
keepdims, 1-d and 0-d inputs), the same values in several layouts
(``layouts``) and the comparison with ``perform`` (``check``: NaN and
infinities exactly where perform has them, values within an ulp-scale
tolerance).  ``check(mod, name, x)`` calls ``getattr(mod, name)``: a module of
compiled entries, or any object that runs a case by name.  Used by
tests/linkers/c/test_nnet_c.py and tests/linkers/cuda/test_nnet_cuda.py."""

from __future__ import annotations

import warnings

import numpy as np

from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.types import TensorType

DTYPES = ("float32", "float64")
RTOL = {"float32": 1e-6, "float64": 1e-13}
#: axes of a 3-d input
AXES = [(2,), (0,), (1,), (0, 2), (), (0, 1, 2)]


def var(dtype, ndim):
    return TensorType(dtype, (None,) * ndim)()


def _cases() -> dict:
    cases = {}
    for dtype in DTYPES:
        for axes in AXES:
            tag = "".join(map(str, axes)) or "none"
            cases[f"sm_{dtype}_{tag}"] = Softmax(axes)(var(dtype, 3)).owner
            cases[f"ls_{dtype}_{tag}"] = LogSoftmax(axes)(var(dtype, 3)).owner
            for keep in (False, True):
                cases[f"lse_{dtype}_{tag}_{int(keep)}"] = LogSumExp(axes, keep)(
                    var(dtype, 3)).owner
        # 1-d and 0-d inputs
        cases[f"sm_{dtype}_vec"] = Softmax((0,))(var(dtype, 1)).owner
        cases[f"lse_{dtype}_vec"] = LogSumExp((0,), False)(var(dtype, 1)).owner
        cases[f"ls_{dtype}_scalar"] = LogSoftmax(())(var(dtype, 0)).owner
        cases[f"lse_{dtype}_scalar"] = LogSumExp((), False)(var(dtype, 0)).owner
    return cases


CASES = _cases()


def reference(node, x):
    if isinstance(node.op, LogSumExp) and x.ndim == 0:
        # perform fails on 0-d inputs (np.exp(out=) of a NumPy scalar): the same on (1,)
        one = LogSumExp((), False)(var(x.dtype.name, 1)).owner
        return reference(one, x.reshape(1)).reshape(())
    storage = [[None]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        node.op.perform(node, [x], storage)
    return storage[0][0]


def check(mod, name, x, out=None):
    node = CASES[name]
    want = reference(node, x)
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


def layouts(a):
    """The same values in several memory layouts."""
    yield a
    yield a[::-1, :, ::-1]                                  # negative strides
    yield np.asfortranarray(a)                              # Fortran order
    yield np.ascontiguousarray(a.transpose(2, 1, 0)).transpose(2, 1, 0)
    big = np.zeros((a.shape[0], 2 * a.shape[1], a.shape[2] + 1), a.dtype)
    big[:, ::2, :-1] = a
    yield big[:, ::2, :-1]                                  # strided view


def check_edge_values(mod, dtype: str) -> None:
    """Rows of -inf, +inf, NaN, huge and tiny values (and their reversal),
    over one, several and all axes; 0-d inputs of each."""
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
        check(mod, name, a)
        check(mod, name, a[::-1, :, ::-1])
    for value in (-inf, inf, nan, 2.5, -1e30):
        s = np.array(value, dtype=dtype)
        check(mod, f"ls_{dtype}_scalar", s)
        check(mod, f"lse_{dtype}_scalar", s)


def check_empty(mod, dtype: str) -> None:
    """Empty inputs on every axis variant: empty outputs, or -inf for the
    logsumexp of nothing, as perform gives."""
    for shape in [(0, 3, 4), (2, 0, 4), (2, 3, 0), (0, 0, 0)]:
        a = np.zeros(shape, dtype)
        for axes in AXES:
            tag = "".join(map(str, axes)) or "none"
            for name in (f"sm_{dtype}_{tag}", f"ls_{dtype}_{tag}", f"lse_{dtype}_{tag}_0",
                         f"lse_{dtype}_{tag}_1"):
                check(mod, name, a)
    check(mod, f"lse_{dtype}_vec", np.zeros(0, dtype))


def check_axes_and_layouts(mod, kind: str, dtype: str, rng) -> None:
    """Every axis variant of ``kind`` (``"sm"``, ``"ls"``, ``"lse"``: both
    keepdims) on a 3-d input in every layout of :func:`layouts`."""
    a = (rng.normal(size=(3, 5, 70)) * 4).astype(dtype)
    for axes in AXES:
        tag = "".join(map(str, axes)) or "none"
        names = [f"{kind}_{dtype}_{tag}"] if kind != "lse" else [
            f"lse_{dtype}_{tag}_0", f"lse_{dtype}_{tag}_1"]
        for name in names:
            for x in layouts(a):
                check(mod, name, x)
