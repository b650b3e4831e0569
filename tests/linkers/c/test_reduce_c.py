"""Generated C for reductions (tenure/linkers/c/reduce.py) against the NumPy
reference (``perform``): every reduction kind on every dtype, axes (None, one,
several, negative, none at all) with and without keepdims, 0-d and empty
inputs, strided / reversed / transposed inputs and outputs, NaN and inf, and
FusedReduce nodes taken from real compiled graphs.

Compiling is the slow part: every node is built up front into a few modules
(many entries each), compiled in parallel once per test session.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.linkers.c import reduce as cr
from tenure.symbolic.types import TensorType
from tests.linkers.c import harness
from tests.linkers.reduce_cases import (GRAPH_CASES, KINDS, REDUCE_CASES, check,
                                        check_every_dtype_and_axes, graph_inputs,
                                        permuted_view, values, var)


def _require_compiler():
    from tenure.linkers.c.compiler import find_compiler
    if find_compiler() is None:
        pytest.skip("no working C compiler (set tenure.config.cxx or $CC)")


# --------------------------------------------------------------------------
# Building: a few modules with many entries each, in parallel


_built: dict = {}


def _build_all():
    if not _built:
        _built.update(harness.build({**REDUCE_CASES, **GRAPH_CASES}))
    return _built


@pytest.fixture(scope="module")
def built():
    _require_compiler()
    return _build_all()



# --------------------------------------------------------------------------
# Reduce


@pytest.mark.parametrize("kind", KINDS)
def test_reduce_every_dtype_and_axes(built, kind):
    check_every_dtype_and_axes(kind, built.__getitem__, np.random.default_rng(sum(map(ord, kind))))


def test_dtypes_are_numpys():
    cases = {("sum", "int8"): "int64", ("sum", "bool"): "int64", ("sum", "uint8"): "uint64",
             ("prod", "int32"): "int64", ("mean", "int8"): "float64",
             ("mean", "float32"): "float32", ("max", "uint8"): "uint8", ("any", "float32"): "bool"}
    for (fn, dtype), want in cases.items():
        node = REDUCE_CASES[f"{fn}__{dtype}__a1"]
        assert node.outputs[0].dtype == want
        assert cr.has_c_code(node)


def test_empty_max_raises_valueerror(built):
    x = np.zeros((0, 3, 2))
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        built["max__float64__all"](x)
    with pytest.raises(ValueError, match="minimum"):
        built["min__int8__a1"](np.zeros((2, 0, 3), np.int8))
    # Not reducing an empty axis: an empty output, no error; reducing one: an
    # error even when the output is empty (NumPy's rule).
    assert built["max__float64__a1"](np.zeros((0, 3, 2))).shape == (0, 2)
    with pytest.raises(ValueError, match="zero-size"):
        built["max__float64__a1"](np.zeros((0, 0, 2)))
    assert built["sum__int8__all"](np.zeros((0, 3, 2), np.int8)) == 0
    assert built["prod__float32__all"](np.zeros((2, 0, 1), np.float32)) == 1
    assert built["all__bool__all"](np.zeros((0, 1, 1), bool))
    assert not built["any__bool__all"](np.zeros((0, 1, 1), bool))
    with pytest.warns(RuntimeWarning, match="empty"):
        assert np.isnan(built["mean__float64__all"](np.zeros((0, 1, 1))))


def test_nan_propagates_and_inf(built):
    x = np.array([[[1.0, np.nan, 3.0], [np.inf, 2.0, -np.inf]]])
    np.testing.assert_array_equal(built["max__float64__neg"](x), [[np.nan, np.inf]])
    np.testing.assert_array_equal(built["min__float64__neg"](x), [[np.nan, -np.inf]])
    np.testing.assert_array_equal(built["sum__float64__neg"](x), [[np.nan, np.nan]])
    assert np.isnan(built["max__float32__all"](x.astype(np.float32)))
    y = np.full((1, 1, 9), np.nan, np.float32)
    y[0, 0, 8] = 5
    assert np.isnan(built["max__float32__neg"](y))  # NaN first, then a number
    assert built["any__float64__all"](np.array([[[0.0, np.nan]]]))


def test_integer_sums_wrap_like_numpy(built):
    x = np.full((2, 3, 4), np.iinfo(np.int64).max, np.int64)
    np.testing.assert_array_equal(built["sum__int64__a1"](x), x.sum(axis=1))
    np.testing.assert_array_equal(built["prod__int64__a1"](x), x.prod(axis=1))
    u = np.full((2, 3, 4), 255, np.uint8)
    np.testing.assert_array_equal(built["prod__uint8__all"](u), u.prod())


def test_float_sums_equal_numpys_pairwise(built):
    """Contiguous rows are summed exactly as NumPy sums them (bit for bit)."""
    rng = np.random.default_rng(7)
    for dtype in ("float32", "float64"):
        x = rng.standard_normal((3, 5, 5000)).astype(dtype)
        for key, axis in (("neg", -1), ("all", None), ("a1", 1)):
            got = built[f"sum__{dtype}__{key}"](x)
            np.testing.assert_array_equal(got, x.sum(axis=axis))
        np.testing.assert_array_equal(built[f"mean__{dtype}__neg"](x), x.mean(axis=-1))


def test_out_argument_any_layout(built):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 5))
    node = REDUCE_CASES["sum__float64__a1"]
    big = np.full((8, 15), -7.0)
    for out in (big[::2, ::3], big[::-2, ::-3], np.empty((5, 4)).T):
        check(node, built["sum__float64__a1"], [x], out=out)
    node = REDUCE_CASES["max__int32__a02k"]
    xi = rng.integers(-50, 50, (4, 6, 5)).astype(np.int32)
    check(node, built["max__int32__a02k"], [xi], out=np.empty((1, 12, 1), np.int32)[:, ::2])


def test_bad_arguments_raise(built):
    fn = built["sum__float64__a1"]
    with pytest.raises(TypeError, match="dtype"):
        fn(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(TypeError):
        fn(np.zeros((2, 3)))
    with pytest.raises(TypeError):
        fn([[[1.0]]])
    with pytest.raises(ValueError, match="shape"):
        fn(np.zeros((2, 3, 4)), out=np.zeros((2, 5)))
    with pytest.raises(TypeError, match="dtype"):
        fn(np.zeros((2, 3, 4)), out=np.zeros((2, 4), np.float32))
    ro = np.zeros((2, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fn(np.zeros((2, 3, 4)), out=ro)
    with pytest.raises(ValueError, match="stride 0"):
        fn(np.zeros((2, 3, 4)), out=np.lib.stride_tricks.as_strided(np.zeros(4), (2, 4),
                                                                     (0, 8)))


def test_has_c_code():
    x = var("float64", 2)
    assert cr.has_c_code(tn.sum(x, axis=0).owner)
    assert not cr.has_c_code(tn.argmax(x, axis=0).owner)
    assert not cr.has_c_code(tn.var(x, axis=0).owner)
    assert not cr.has_c_code(tn.exp(x).owner)
    assert not cr.has_c_code(tn.sum(TensorType("complex128", (None,))(), axis=0).owner)
    with pytest.raises(NotImplementedError):
        cr.description(tn.cumsum(x, axis=0).owner)
    with pytest.raises(NotImplementedError):
        cr.loop_kernel(tn.cumsum(x, axis=0).owner)


# --------------------------------------------------------------------------
# FusedReduce (and the plain reductions of the same graphs)



@pytest.mark.parametrize("key", sorted(GRAPH_CASES))
def test_fused_graph_nodes(built, key):
    node = GRAPH_CASES[key]
    assert cr.has_c_code(node)
    rng = np.random.default_rng(len(key))
    # small (perform: unfused), big (perform: block by block), empty, one row
    for shape in [(5, 7), (300, 400), (129, 1000), (0, 6), (6, 0), (1, 1)]:
        for special in (False, True):
            inputs = graph_inputs(rng, node, shape, special)
            if key == "pow_i64":
                inputs = [np.abs(a) % 5 for a in inputs]
            check(node, built[key], inputs)
            if all(a.ndim == 2 for a in inputs) and all(a.size for a in inputs):
                check(node, built[key], [a.T.copy().T for a in inputs])       # Fortran order
                check(node, built[key], [a[::-1, ::-1] for a in inputs])      # reversed
                if node.op.fn_name != "prod":  # (a value to the 1000th: over/underflows
                    # early or late with the order)
                    check(node, built[key], [np.broadcast_to(a[..., :1], a.shape)  # stride 0
                                              for a in inputs])


def test_fused_negative_power_raises(built):
    with pytest.raises(ValueError, match="negative integer powers"):
        built["pow_i64"](np.array([2, -1], np.int64))


def test_fused_sum_exp_matches_numpy(built):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 4096)).astype(np.float32)
    got = built["sumexp_float32"](x)
    ref = np.exp(x).sum(axis=1)
    np.testing.assert_allclose(got, ref, rtol=2e-6)
    y = rng.standard_normal((64, 4096)).astype(np.float32)
    np.testing.assert_allclose(built["expmul_float32"](x, y), (np.exp(x) * y).sum(axis=1),
                               rtol=1e-4, atol=1e-5 * np.abs(np.exp(x) * y).sum(axis=1).max())


def test_fused_broadcast_mismatch_raises(built):
    with pytest.raises(ValueError, match="broadcast"):
        built["expmul_float64"](np.zeros((3, 4)), np.zeros((3, 5)))


# --------------------------------------------------------------------------
# Random shapes, axes and layouts


_HYP_KEYS = sorted(k for k, n in REDUCE_CASES.items() if n.inputs[0].ndim == 3)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(_HYP_KEYS),
       shape=st.tuples(*[st.sampled_from([0, 1, 2, 3, 5, 9, 17, 130]) for _ in range(3)]),
       perm=st.permutations([0, 1, 2]),
       steps=st.tuples(*[st.sampled_from([1, 2, -1, -3]) for _ in range(3)]),
       seed=st.integers(0, 2 ** 16), special=st.booleans())
def test_random_shapes_axes_layouts(built, key, shape, perm, steps, seed, special):
    node = REDUCE_CASES[key]
    rng = np.random.default_rng(seed)
    if np.prod(shape) > 5000:
        shape = (shape[0], shape[1], 1)
    x = values(rng, node.inputs[0].dtype, shape, special, node.op.fn_name)
    check(node, built[key], [permuted_view(x, perm, steps)])
