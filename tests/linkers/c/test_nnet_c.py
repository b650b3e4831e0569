"""Generated C for softmax, log_softmax and logsumexp (tenure/linkers/c/nnet.py)
against the NumPy reference (``perform``): both float dtypes, axes (one,
several, none, all) with and without keepdims, 0-d and empty inputs, strided /
reversed / transposed / Fortran inputs and outputs, the output being the input,
rows of -inf, +inf, NaN and huge values, and the errors.

Every node is compiled into one module (many entries), once per test session.
"""

from __future__ import annotations

import numpy as np
import pytest

from tenure.linkers.c import nnet as cn
from tenure.symbolic.ops.nnet import LogSumExp, Softmax
from tests.linkers.c import harness
from tests.linkers.nnet_cases import (CASES, DTYPES, RTOL, check, check_axes_and_layouts,
                                      check_edge_values, check_empty, reference, var)


@pytest.fixture(scope="module")
def mod(cc):
    return harness.build(CASES)



@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["sm", "ls", "lse"])
def test_axes_and_layouts(mod, rng, kind, dtype):
    check_axes_and_layouts(mod, kind, dtype, rng)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_fast_path(mod, rng, dtype):
    # rows longer than the block and not a multiple of the lanes
    for n in (1, 15, 16, 17, 255, 256, 257, 1000, 4099):
        a = rng.normal(size=(2, 3, n)).astype(dtype) * 3
        for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"lse_{dtype}_2_0", f"lse_{dtype}_2_1"):
            check(mod, name, a)
    v = rng.normal(size=5000).astype(dtype)
    check(mod, f"sm_{dtype}_vec", v)
    check(mod, f"lse_{dtype}_vec", v)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_outputs(mod, rng, dtype):
    a = rng.normal(size=(3, 4, 6)).astype(dtype)
    for name, shape in [(f"sm_{dtype}_2", (3, 4, 6)), (f"ls_{dtype}_02", (3, 4, 6)),
                        (f"lse_{dtype}_2_1", (3, 4, 1)), (f"lse_{dtype}_1_0", (3, 6))]:
        out = np.full(shape[::-1], 7, dtype).T                  # Fortran-ordered
        check(mod, name, a, out=out)
        big = np.zeros(tuple(2 * d for d in shape), dtype)
        out = big[tuple(slice(None, None, -2) for _ in shape)]  # reversed, strided
        check(mod, name, a, out=out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_values(mod, dtype):
    check_edge_values(mod, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty(mod, dtype):
    check_empty(mod, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_output_is_input(mod, rng, dtype):
    for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"sm_{dtype}_0", f"ls_{dtype}_02"):
        a = rng.normal(size=(3, 4, 300)).astype(dtype)
        want = reference(CASES[name], a)
        got = getattr(mod, name)(a, out=a)
        assert got is a
        np.testing.assert_allclose(a, want, rtol=RTOL[dtype], atol=RTOL[dtype] * 1e-3)


def test_partial_overlap_goes_through_a_copy(mod, rng):
    base = rng.normal(size=(5, 64))
    node = Softmax((1,))(var("float64", 2)).owner
    m = harness.build(node)
    want = reference(node, base[:4].copy())
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
        assert cn.has_c_code(Softmax((0,))(var(dtype, 2)).owner)
        assert cn.has_c_code(LogSumExp((0, 1), True)(var(dtype, 2)).owner)
    for dtype in ("int32", "bool", "float16"):     # ints give float64: perform converts
        assert not cn.has_c_code(Softmax((0,))(var(dtype, 2)).owner)
        assert not cn.has_c_code(LogSumExp((0,))(var(dtype, 2)).owner)
    with pytest.raises(NotImplementedError):
        cn.spec(Softmax((0,))(var("int64", 2)).owner)


def test_softmax_compiles_nothing(mod):
    """Its loops are the C runtime's: the schedule describes the step."""
    assert mod["sm_float32_2"].thunk.graph.source is None
