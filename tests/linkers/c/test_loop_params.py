"""Constants that only differ in value share their C loops (issue 41, item 10).

A node's Python numbers (weak inputs of an Elemwise, the constants of a
Composite, those of a fused reduction's composite) are parameters of its
loops, read from the node's description: compiling one graph with many
constant values builds one loop library, and every result is still NumPy's,
bit for bit.  A value stays in the code only where it changes the code
(``scalar_code.c_weak_in_code``: float powers the compiler folds, small
integer exponents, integer divisors; comparisons folded out of an integer's
range).
"""

from __future__ import annotations

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import cache
from tenure.symbolic.ops.composite import FusedReduce

C = tn.Mode(linker="c")


@pytest.fixture(autouse=True)
def _compiler(cache_with_the_runtime):
    """Every test here compiles, into a cache of its own: what a compile
    adds is counted there, where no other test (on another xdist worker)
    adds entries meanwhile."""
    with tn.config.change_flags(compiledir=str(cache_with_the_runtime)):
        yield


def _keys(f) -> set[str]:
    """The keys of the loops a compiled function asked for."""
    return {loop.key for loop in f._thunk.graph.loop_kernels}


def _same(got, want) -> None:
    """Equal dtypes, shapes and values bit for bit (a NaN matches any NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        bits = np.dtype(f"u{got.dtype.itemsize}")
        np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))
    else:
        np.testing.assert_array_equal(got, want)


def _compile_each(build, values, *inputs):
    """``(functions, cache entries added by each compile after the first)``."""
    functions, added = [], []
    for value in values:
        before = cache.info().count
        functions.append(tn.function(list(inputs), build(value), mode=C))
        added.append(cache.info().count - before)
    return functions, added[1:]


def _floats(dtype, rng):
    """Values of ``dtype``, the special ones first."""
    x = rng.standard_normal(37).astype(dtype) * 3
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(dtype).max]
    return x


# --------------------------------------------------------------------------
# Elementwise: weak inputs and composites


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fifty_weak_floats_build_one_loop_library(dtype):
    rng = np.random.default_rng(1)
    x = tn.vector("x", dtype=dtype)
    values = [float(v) for v in rng.standard_normal(50) * 10]
    functions, added = _compile_each(lambda c: x * c, values, x)
    assert added == [0] * 49
    assert len(set.union(*map(_keys, functions))) == 1
    data = _floats(dtype, rng)
    with np.errstate(all="ignore"):
        for c, f in zip(values, functions):
            _same(f(data), data * c)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_composites_with_several_constants_share_one_loop(dtype):
    rng = np.random.default_rng(2)
    x, y = tn.vector("x", dtype=dtype), tn.vector("y", dtype=dtype)
    triples = [tuple(float(v) for v in rng.standard_normal(3) * 4) for _ in range(50)]
    functions, added = _compile_each(lambda t: (x * t[0] + t[1]) * y - t[2], triples, x, y)
    assert added == [0] * 49
    assert len(set.union(*map(_keys, functions))) == 1
    a, b = _floats(dtype, rng), _floats(dtype, rng)[::-1].copy()
    with np.errstate(all="ignore"):
        for (c0, c1, c2), f in zip(triples, functions):
            _same(f(a, b), (a * c0 + c1) * b - c2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_float_values_are_passed_exactly(dtype):
    rng = np.random.default_rng(3)
    x = tn.vector("x", dtype=dtype)
    tiny = float(np.finfo(dtype).smallest_subnormal)
    values = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, tiny, -tiny,
              float(np.finfo(dtype).max), 1 / 3]
    add, _ = _compile_each(lambda c: x + c, values, x)
    mul, _ = _compile_each(lambda c: x * c, values, x)
    less, _ = _compile_each(lambda c: x < c, values, x)
    maximum, _ = _compile_each(lambda c: tn.maximum(x, c), values, x)
    assert len(set.union(*map(_keys, add))) == 1 and len(set.union(*map(_keys, mul))) == 1
    data = _floats(dtype, rng)
    with np.errstate(all="ignore"):
        for c, f, g, h, m in zip(values, add, mul, less, maximum):
            _same(f(data), data + c)      # -0.0 + -0.0 is -0.0, 0.0 + -0.0 is 0.0
            _same(g(data), data * c)
            _same(h(data), data < c)
            _same(m(data), np.maximum(data, c))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "uint64"])
def test_integer_constants_near_the_dtype_limits(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(4)
    x = tn.vector("x", dtype=dtype)
    lo, hi = int(info.min), int(info.max)
    drawn = rng.integers(lo, hi, 100, dtype=dtype, endpoint=True)
    # (x * 0, x * 1 and x * -1 are other graphs: the rewrites simplify them)
    values = [v for v in [lo, lo + 1, hi - 1, hi, 2] + [int(v) for v in drawn]
              if v not in (-1, 0, 1)][:50]
    functions, added = _compile_each(lambda c: x * c + 3, values, x)
    assert added == [0] * 49
    assert len(set.union(*map(_keys, functions))) == 1
    data = rng.integers(lo, hi, 41, dtype=dtype, endpoint=True)
    data[:2] = [lo, hi]
    for c, f in zip(values, functions):
        _same(f(data), data * c + 3)       # wraps like NumPy


def test_comparisons_share_a_loop_in_range_and_fold_outside_it():
    x = tn.vector("x", dtype="int8")
    inside = list(range(-128, 128, 5))
    functions, added = _compile_each(lambda c: x < c, inside, x)
    assert added == [0] * (len(inside) - 1)
    assert len(set.union(*map(_keys, functions))) == 1
    outside = [-129, 128, 1000, -(2 ** 70), 2 ** 70]
    folded, _ = _compile_each(lambda c: x < c, outside, x)
    data = np.arange(-128, 128, dtype=np.int8)
    for c, f in zip(inside + outside, functions + folded):
        _same(f(data), data < c)


def test_clip_and_where_convert_their_constants_as_numpy_does():
    x = tn.vector("x", dtype="int16")
    cond = tn.vector("c", dtype="bool")
    bounds = [(-40000, 40000), (-5, 7), (-(2 ** 40), 3), (100, 2 ** 40)]
    clips, added = _compile_each(lambda b: tn.clip(x, b[0], b[1]), bounds, x)
    assert added == [0] * 3
    data = np.arange(-32768, 32768, 97, dtype=np.int16)
    for (lo, hi), f in zip(bounds, clips):
        _same(f(data), np.clip(data, max(lo, -32768), min(hi, 32767)).astype(np.int16))
    others = [7, -1, 300, -32768]
    wheres, added = _compile_each(lambda v: tn.where(cond, x, v), others, cond, x)
    assert added == [0] * 3
    mask = data % 2 == 0
    for v, f in zip(others, wheres):
        with np.errstate(all="ignore"):
            want = np.where(mask, data, np.asarray(v).astype(np.int16))
        _same(f(mask, data), want)


# --------------------------------------------------------------------------
# Values that are code: each its own loop, results still NumPy's


def test_power_by_values_the_compiler_folds_keeps_them_in_the_code():
    x = tn.vector("x")
    exponents = [2.0, 0.5, -1.0, 1.0, 0.0, 4.5, 1.7, -2.5]   # (3.0 is pow_by_mul's)
    functions, _ = _compile_each(lambda e: x ** e, exponents, x)
    keys = [_keys(f) for f in functions]
    assert len({frozenset(k) for k in keys[:5]}) == 5      # x*x, sqrt, 1/x, x, 1
    assert keys[5] == keys[6] == keys[7]                   # pow(x, parameter)
    data = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e-300, 7.25])
    with np.errstate(all="ignore"):
        for e, f in zip(exponents, functions):
            if e in (2.0, 0.5, 1.0, 0.0):
                _same(f(data), np.power(data, e))
            else:
                np.testing.assert_allclose(f(data), np.power(data, e), rtol=4e-16)


def test_small_integer_exponents_stay_in_the_code_larger_ones_are_parameters():
    x = tn.vector("x", dtype="int64")
    exponents = [2, 3, 8, 9, 20, 63]
    functions, _ = _compile_each(lambda e: x ** e, exponents, x)
    keys = [frozenset(_keys(f)) for f in functions]
    assert len(set(keys[:3])) == 3 and keys[3] == keys[4] == keys[5] not in keys[:3]
    data = np.array([-3, -2, -1, 0, 1, 2, 3, 7, 2 ** 31 + 1], dtype=np.int64)
    for e, f in zip(exponents, functions):
        _same(f(data), data ** e)          # wraps like NumPy


def test_integer_divisors_stay_in_the_code():
    x = tn.vector("x", dtype="int64")
    divisors = [3, 7, -2, 2 ** 62]
    functions, _ = _compile_each(lambda d: x // d + x % d, divisors, x)
    assert len(set.union(*map(_keys, functions))) == len(divisors)
    data = np.array([-2 ** 63, -7, -1, 0, 1, 5, 2 ** 63 - 1], dtype=np.int64)
    for d, f in zip(divisors, functions):
        _same(f(data), data // d + data % d)


# --------------------------------------------------------------------------
# Fused reductions


@pytest.mark.parametrize("fn", ["sum", "max"])
def test_fused_reductions_share_their_loops_across_constants(fn):
    rng = np.random.default_rng(5)
    x = tn.matrix("x")
    pairs = [tuple(float(v) for v in rng.standard_normal(2) * 3) for _ in range(50)]
    reduce = getattr(tn, fn)
    functions, added = _compile_each(lambda p: reduce((x * p[0] + p[1]) * x, axis=1), pairs, x)
    assert any(isinstance(n.op, FusedReduce) for n in functions[0]._thunk.fgraph.toposort())
    assert added == [0] * 49
    assert len(set.union(*map(_keys, functions))) == 1
    data = rng.standard_normal((6, 100))
    data[0, :3] = [np.inf, -0.0, np.nan]
    for (c0, c1), f in zip(pairs, functions):
        # rows of 100 contiguous values: NumPy's pairwise order, so bit for bit
        _same(f(data), getattr(np, fn)((data * c0 + c1) * data, axis=1))


def test_fused_reduction_constants_over_a_kept_axis_and_strided_input():
    x = tn.matrix("x", dtype="float32")
    values = [0.25, -3.5, float("inf")]
    functions, added = _compile_each(lambda c: tn.max(x * c - 1, axis=0), values, x)
    assert added == [0] * 2
    data = np.random.default_rng(6).standard_normal((9, 14)).astype(np.float32)[:, ::2]
    with np.errstate(all="ignore"):
        for c, f in zip(values, functions):
            _same(f(data), np.max(data * np.float32(c) - np.float32(1), axis=0))
