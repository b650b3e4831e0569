"""Generated C for elementwise nodes (tenure/linkers/c/elemwise.py) against the
NumPy reference (``perform``): every scalar op on every dtype it accepts, weak
Python-number inputs, fused Composite nodes from real graphs, every memory
layout (broadcast, strided, reversed, unaligned, 0-d, empty, 5-d), in place.

Compiling is the slow part, so every node is built up front into a handful of
modules (many entries each) compiled in parallel, once per test session.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.linkers.c import elemwise as ce
from tenure.linkers.c import scalar_code as sc
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps
from tests.linkers.c import harness
from tests.linkers.elemwise_cases import (EXACT, GRAPH_CASES, NO_C_CODE, OP_CASES,
                                          STRIDED_SHAPES, WEAK_CASES, array, assert_matches,
                                          call, check_any_strides, data, is_weak, layouts,
                                          name_of, reference, strided, var)


def _require_compiler():
    from tenure.linkers.c.compiler import find_compiler
    if find_compiler() is None:
        pytest.skip("no working C compiler (set tenure.config.cxx or $CC)")


# --------------------------------------------------------------------------
# Building: every node as the C linker runs it (tests/linkers/c/harness.py)


_built: dict = {}


def _build_all() -> dict:
    """Every entry of every case table, compiled once per session."""
    _require_compiler()
    if not _built:
        _built.update(harness.build({**OP_CASES, **WEAK_CASES, **GRAPH_CASES}))
    return _built


@pytest.fixture(scope="module")
def built():
    return _build_all()


# --------------------------------------------------------------------------
# Every scalar op on every dtype


@pytest.mark.parametrize("entry", sorted(OP_CASES))
def test_scalar_op_matches_numpy(built, entry):
    node = OP_CASES[entry]
    name = name_of(node)
    rng = np.random.default_rng(zlib.crc32(entry.encode()))
    inputs = data([v.dtype for v in node.inputs], rng)
    if name == "power" and node.inputs[1].dtype[0] in "iu" and node.outputs[0].dtype[0] in "iu":
        inputs[1] = np.abs(inputs[1].astype(np.int64) % 70).astype(inputs[1].dtype)
    got = built[entry](*inputs)
    assert_matches(got, reference(node, inputs), entry, exact=name in EXACT or name == "cast")


def test_every_op_and_dtype_is_covered():
    """Each table op compiles for every dtype NumPy accepts, except results in
    float16 (NumPy's own half-precision rules; no C code yet)."""
    names = {name_of(n) for n in OP_CASES.values()}
    assert names == set(ps.TABLE) | {"cast"}
    for name, dtypes, out_dtype in NO_C_CODE:
        assert out_dtype == "float16", (name, dtypes, out_dtype)


def test_no_c_code_is_reported():
    half = ew.Elemwise(ps.exp).make_node(var("float16"))
    complex_ = ew.Elemwise(ps.add).make_node(var("complex128"), var("complex128"))
    assert not ce.has_c_code(half) and not ce.has_c_code(complex_)
    with pytest.raises(NotImplementedError, match="float16"):
        ce.loop_kernel(half)
    assert sc.has_c_code(ps.exp) and not sc.has_c_code(ps.exp, [np.empty(0, np.float16)])
    assert not sc.has_c_code(ps.ScalarOp("mystery", 1, np.positive))
    with pytest.raises(NotImplementedError, match="mystery has no C code"):
        sc.c_code(ps.ScalarOp("mystery", 1, np.positive), ["x"], ["float64"], "float64")
    # an op of a table name but another implementation is not the table's op
    with pytest.raises(NotImplementedError, match="exp has no C code"):
        sc.c_code(ps.ScalarOp("exp", 1, np.positive), ["x"], ["float64"], "float64")


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_negative_integer_power_raises_like_numpy(built, dtype):
    x, y = np.array([2, 3, 4], dtype), np.array([1, -1, 2], dtype)
    with pytest.raises(ValueError, match="negative integer powers"):
        np.power(x, y)
    with pytest.raises(ValueError, match="negative integer powers"):
        built[f"power__{dtype}_{dtype}"](x, y)


def test_integer_division_by_zero_gives_zero(built):
    a = np.array([5, -5, 0, -128, -128], np.int8)
    b = np.array([0, 0, 0, -1, 0], np.int8)
    np.testing.assert_array_equal(built["floor_divide__int8_int8"](a, b), [0, 0, 0, -128, 0])
    np.testing.assert_array_equal(built["mod__int8_int8"](a, b), [0, 0, 0, 0, 0])


def test_float_to_int_cast_of_nan_and_inf_is_documented_rule(built):
    """Not defined by C; the helpers reproduce NumPy's x86-64 results."""
    x = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 2.0 ** 31, 2.0 ** 63])
    expected = {"int8": [0] * 7, "int32": [-2 ** 31] * 7,
                "int64": [-2 ** 63] * 5 + [2 ** 31, -2 ** 63],
                "uint32": [2 ** 31, 0, 2 ** 31, 0, 2 ** 31, 2 ** 31, 0],
                "uint64": [2 ** 63, 0, 2 ** 63, 0, 2 ** 63, 2 ** 31, 2 ** 63]}
    for dtype, values in expected.items():
        np.testing.assert_array_equal(built[f"cast__float64_{dtype}"](x),
                                      np.array(values, dtype=dtype), err_msg=dtype)


@pytest.mark.parametrize("entry", ["add__bool_bool", "mul__bool_bool", "logical_xor__bool_bool",
                                   "bitwise_xor__bool_bool", "maximum__bool_bool",
                                   "less__bool_bool", "equal__bool_bool", "invert__bool",
                                   "abs__bool", "cast__bool_int8", "where__bool_int8_int8"])
def test_bools_holding_other_bytes_count_as_true(built, entry):
    """A bool array viewed from other bytes (2, 255) is True there, as in NumPy."""
    node = OP_CASES[entry]
    raw = [np.array([0, 1, 2, 255, 2, 0], np.uint8), np.array([2, 2, 1, 0, 255, 0], np.uint8),
           np.array([3, 1, 0, 7, 2, 9], np.uint8)]
    inputs = [r.view(bool) if v.dtype == "bool" else r.astype(v.dtype)
              for r, v in zip(raw, node.inputs)]
    assert_matches(built[entry](*inputs), reference(node, inputs), entry)


@pytest.mark.parametrize("entry", sorted(WEAK_CASES))
def test_python_number_inputs(built, entry):
    node = WEAK_CASES[entry]
    rng = np.random.default_rng(7)
    arrays = iter(data([v.dtype for i, v in enumerate(node.inputs) if not is_weak(node, i)], rng))
    inputs = [None if is_weak(node, i) else next(arrays) for i in range(len(node.inputs))]
    got = call(built[entry], node, inputs)
    assert_matches(got, reference(node, inputs), entry, exact=True)


# --------------------------------------------------------------------------
# Fused graphs, layouts, in place



@pytest.mark.parametrize("entry,shapes", [
    ("expsin", [(40, 33), (33,)]), ("expsin", [(1, 33), (33,)]), ("expsin", [(40, 1), (33,)]),
    ("expsin", [(0, 33), (33,)]), ("expsin", [(5, 0), (0,)]), ("expsin", [(5, 1), (1,)]),
    ("expsin32", [(40, 33), (33,)]), ("leaky", [(64, 65)]), ("leaky32", [(7, 1031)]),
    ("intmix", [(30, 17), (17,)]), ("mixed", [(20, 21), (20, 21)]), ("gelu", [(50, 50)]),
    ("softmax_exp", [(30, 20), (30, 1)]), ("fma5", [(2, 3, 1, 4, 5), (6, 4, 5), (2, 1, 6, 4, 5)]),
    ("add0d", [(), ()]), ("add_f32_2d", [(3, 5), (5,)]),
])
def test_fused_and_broadcast(built, entry, shapes):
    node = (GRAPH_CASES | WEAK_CASES)[entry]
    rng = np.random.default_rng(len(shapes))
    inputs = [array(s, v.dtype, rng) for s, v in zip(shapes, node.inputs)]
    want = reference(node, inputs)
    got = built[entry](*inputs)
    assert_matches(got, want, entry, fused=True)



@pytest.mark.parametrize("entry", sorted(STRIDED_SHAPES))
def test_any_strides(built, entry):
    check_any_strides(entry, built[entry])


def test_in_place_from_a_real_graph(built):
    node = GRAPH_CASES["softmax_div_inplace"]
    rng = np.random.default_rng(0)
    x, s = rng.random((6, 7)), rng.random((6, 1)) + 1
    want = x / s
    got = built["softmax_div_inplace"](x, s)
    assert got is x                                  # written into the destroyed input
    np.testing.assert_array_equal(got, want)
    # A destroyed input that cannot hold the result (it broadcasts) is left alone.
    x1 = rng.random((1, 7))
    got = built["softmax_div_inplace"](x1, s)
    assert got is not x1 and got.shape == (6, 7)
    np.testing.assert_array_equal(got, x1 / s)
    assert node.op.destroy_map == {0: [0]}


def test_in_place_composite_and_strided_destroyed_input(built):
    assert GRAPH_CASES["expsin_inplace"].op.destroy_map == {0: [0]}
    rng = np.random.default_rng(1)
    z = rng.random(11)
    for x in (rng.random((5, 11)), rng.random((11, 5)).T, rng.random((10, 22))[::-2, ::2]):
        want = reference(GRAPH_CASES["expsin"], [x.copy(), z])
        got = built["expsin_inplace"](x, z)
        assert got is x
        assert_matches(got, want, fused=True)
    y = rng.random((4, 9))
    want = y[0] - y
    got = built["sub_inplace1"](y[0].copy(), y)         # into input 1, read broadcast input 0
    assert got is y
    np.testing.assert_array_equal(got, want)
    y = rng.random((4, 9))
    want = y[0] - y
    got = built["sub_inplace1"](y[0], y)                # input 0 is a view of the destroyed
    assert got is y                                     # input: copied first, no stale reads
    np.testing.assert_array_equal(got, want)


def test_out_overlapping_an_input_is_safe(built):
    """An ``out`` that is a shifted or reversed view of an input is copied first."""
    rng = np.random.default_rng(2)
    for make_out in (lambda a: a[::-1], lambda a: a[:, ::-1]):
        x, z = rng.random((6, 8)), rng.random(8)
        want = reference(GRAPH_CASES["expsin"], [x.copy(), z])
        out = make_out(x)
        got = built["expsin"](x, z, out=out)
        assert got is out
        assert_matches(got, want, fused=True)
    buf = rng.random(9)
    x, out = buf[1:].reshape(1, 8), buf[:-1].reshape(1, 8)  # shifted by one element
    z = rng.random(8)
    want = reference(GRAPH_CASES["expsin"], [x.copy(), z])
    assert_matches(built["expsin"](x, z, out=out), want, fused=True)


# --------------------------------------------------------------------------
# Errors


def test_bad_calls_raise_clear_errors(built):
    run = built["expsin"]
    x, z = np.ones((2, 3)), np.ones(3)
    with pytest.raises(TypeError, match="expected 2 input"):
        run(x)
    with pytest.raises(TypeError, match=r"input 1 \(z\): expected dtype float64.*got float32"):
        run(x, z.astype(np.float32))
    with pytest.raises(TypeError, match=r"input 0 \(x\): expected 2 dimension\(s\), got 1"):
        run(z, z)
    with pytest.raises(TypeError, match=r"input 0 \(x\) of .*: expected a numpy.ndarray, "
                                        r"got list"):
        run([[1.0]], z)
    with pytest.raises(ValueError, match=r"input 1 \(z\) of shape \(4,\) does not broadcast "
                                         r"to the output shape \(2, 3\)"):
        run(x, np.ones(4))
    with pytest.raises(ValueError, match=r"input 0 \(x\) of shape \(2, 3\) does not broadcast "
                                         r"to the output shape \(3, 2\)"):
        run(x, z, out=np.ones((3, 2)))
    ro = np.ones((2, 3))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        run(x, z, out=ro)
    with pytest.raises(TypeError, match=r"output 0: expected dtype float64 \(native byte order\), "
                                        r"got float32"):
        run(x, z, out=np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="kernel: out: expected a numpy.ndarray, got list"):
        run(x, z, out=[])
    with pytest.raises(TypeError, match="native byte order"):
        run(x.astype(">f8"), z)
    with pytest.raises(TypeError):
        run(x, z, bogus=1)


def test_the_kernel_checks_its_operands(built):
    """A step's kernel computes into the output it is given (here the
    destroyed input: in place) and never trusts its operands: a wrong
    shape, dtype or array is an error, not a buffer overrun or a crash."""
    run = built["expsin_inplace"]
    rng = np.random.default_rng(5)
    x, z = rng.random((6, 8)), rng.random(8)
    want = reference(GRAPH_CASES["expsin"], [x.copy(), z])
    assert run(x, z, out=x) is x
    assert_matches(x, want, fused=True)
    with pytest.raises(ValueError, match=r"input 1 \(z\) of shape \(5,\) does not "
                                         r"broadcast to the output shape \(6, 8\)"):
        run(x, np.ones(5), out=x)
    with pytest.raises(ValueError, match=r"input 0 \(x\) of shape \(6, 8\) does not broadcast "
                                         r"to the output shape \(6, 1\)"):
        run(x, z, out=np.ones((6, 1)))  # an output too small for the inputs
    with pytest.raises(TypeError, match=r"output 0: expected dtype float64"):
        run(x, z, out=np.ones((6, 8), np.float32))
    with pytest.raises(TypeError, match=r"input 0 \(x\) of .*: expected a numpy.ndarray, "
                                        r"got NoneType"):
        run(None, z, out=x)
    with pytest.raises(TypeError, match=r"got list"):
        run(x, [1.0], out=x)
    ro = np.ones((6, 8))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="output 0 is read-only"):
        run(x, z, out=ro)



@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.integers(0, 2 ** 32 - 1))
def test_random_layouts(layout, seed):
    built = _build_all()
    ndims, _, specs, out_steps = layout
    entry = "layout_" + "_".join(map(str, ndims))
    rng = np.random.default_rng(seed)
    values = [np.asarray(rng.standard_normal(s)) for s, _, _ in specs]
    inputs = [strided(v, steps, t) for v, (_, steps, t) in zip(values, specs)]
    shape = np.broadcast_shapes(*(v.shape for v in values))  # all 1 where the draw had 0
    want = reference(GRAPH_CASES[entry], values)
    out = strided(np.zeros(shape), out_steps, False)
    got = built[entry](*inputs, out=out)
    assert got is out
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(built[entry](*inputs), want)


def test_scalar_bodies_of_equal_ops_with_other_numbers_stay_apart():
    """The scalar body is worked out once per op and types: ops that compare
    equal but hold other Python numbers (2 and 3; 0.0 and -0.0) keep their own."""
    x = tn.vector("x")
    bodies = [ce.scalar_kernel(e.owner).body for e in (x + 2, x + 3, x + 0.0, x + (-0.0))]
    assert len({tuple(body) for body in bodies}) == 4
    assert ce.scalar_kernel((x + 2).owner) is ce.scalar_kernel((x + 2).owner)
