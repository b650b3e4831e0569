"""Generated C for elementwise nodes (tenure/linkers/c/elemwise.py) against the
NumPy reference (``perform``): every scalar op on every dtype it accepts, weak
Python-number inputs, fused Composite nodes from real graphs, every memory
layout (broadcast, strided, reversed, unaligned, 0-d, empty, 5-d), in place.

Compiling is the slow part, so every node is built up front into a handful of
modules (many entries each) compiled in parallel, once per test session.
"""

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.linkers.c import elemwise as ce
from tenure.linkers.c import scalar_code as sc
from tests.linkers.c import harness
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.composite import Composite
from tenure.symbolic.types import TensorType

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float32", "float64"]

#: mixed-dtype pairs: promotion (the inputs are converted before the op) and
#: NumPy's exact int64/uint64 comparison loops
MIXED = [("int8", "uint8"), ("int64", "uint64"), ("uint64", "int64"), ("uint64", "int8"),
         ("int32", "float32"), ("bool", "float64"), ("float32", "float64"), ("uint16", "int8"),
         ("bool", "int8"), ("uint8", "float32")]
MIXED_OPS = {"add", "true_divide", "floor_divide", "power", "maximum", "less", "equal",
             "logical_and", "bitwise_and"}
COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}

#: float results that must equal NumPy's bit for bit: IEEE-exact operations.  The
#: others call exp, sin, ... which NumPy takes from its own SIMD code and the C
#: code from libm or, vectorized, glibc's libmvec: equal within a few ulps.
EXACT = {"add", "sub", "mul", "true_divide", "floor_divide", "mod", "neg", "abs", "sign",
         "square", "reciprocal", "maximum", "minimum", "clip", "sqrt", "relu", "where"}
#: where NumPy's SIMD loops pick either zero when comparing -0.0 with 0.0
ZERO_SIGN_FREE = {"maximum", "minimum", "clip", "relu"}
RTOL = {np.dtype("float64"): 1e-15, np.dtype("float32"): 1e-6}


def _require_compiler():
    from tenure.linkers.c.compiler import find_compiler
    if find_compiler() is None:
        pytest.skip("no working C compiler (set tenure.config.cxx or $CC)")


# --------------------------------------------------------------------------
# The nodes


def _var(dtype, ndim=1):
    return TensorType(dtype, (None,) * ndim)()


def _node(op: ps.ScalarOp, dtypes):
    try:
        node = ew.Elemwise(op).make_node(*[_var(d) for d in dtypes])
    except (TypeError, ValueError):
        return None  # NumPy rejects these dtypes too
    return node


def _dtype_combos(op: ps.ScalarOp):
    if op.nin == 1:
        return [(d,) for d in DTYPES]
    if op.nin == 2:
        mixed = (MIXED if op.name in MIXED_OPS else
                 MIXED[1:4] if op.name in COMPARISONS else [])  # the qQ / Qq loops
        return [(d, d) for d in DTYPES] + mixed
    if op.name == "where":
        return [("bool", d, d) for d in DTYPES] + [("int8", "float32", "int16"),
                                                    ("float64", "uint8", "bool")]
    return [(d, d, d) for d in DTYPES] + [("int8", "int16", "float32"), ("uint8", "int8", "int8")]


def _op_cases() -> dict:
    """``{entry: node}`` for every scalar op with C code on every dtype combination."""
    cases, no_c = {}, []
    for name, op in ps.TABLE.items():
        for dtypes in _dtype_combos(op):
            node = _node(op, dtypes)
            if node is None:
                continue
            if ce.has_c_code(node):
                cases[f"{name}__{'_'.join(dtypes)}"] = node
            else:
                no_c.append((name, dtypes, node.outputs[0].dtype))
    for src in DTYPES:
        for dst in DTYPES:
            cases[f"cast__{src}_{dst}"] = ew.Elemwise(ps.Cast(dst)).make_node(_var(src))
    return cases, no_c


OP_CASES, NO_C_CODE = _op_cases()


def _weak_cases() -> dict:
    """Python-number inputs, converted as NumPy converts them for each op."""
    i8, u8, i64, u64 = _var("int8"), _var("uint8"), _var("int64"), _var("uint64")
    f32, f64, b = _var("float32"), _var("float64"), _var("bool")
    exprs = {
        "add_i8_2": ew.add(i8, 2), "mul_f32_tenth": ew.mul(f32, 0.1),
        "rsub_f64": ew.sub(1.5, f64), "div_i8_by_2": ew.true_divide(i8, 2),
        "mul_i8_half": ew.mul(i8, 0.5), "floordiv_i8_m3": ew.floor_divide(i8, -3),
        "mod_7_u8": ew.mod(7, u8), "pow_i64_3": ew.power(i64, 3), "pow_f32_2": ew.power(f32, 2),
        "lt_i8_1000": ew.less(i8, 1000), "ge_u8_m1": ew.greater_equal(u8, -1),
        "eq_i64_big": ew.equal(i64, 2 ** 64 - 1), "ne_u64_m1": ew.not_equal(u64, -1),
        "gt_i8_2p70": ew.greater(i8, 2 ** 70), "lt_m5_u8": ew.less(-5, u8),
        "lt_i8_5": ew.less(i8, 5), "le_f32_third": ew.less_equal(f32, 1 / 3),
        "where_i8_1000": ew.where(b, i8, 1000), "where_f32_tenth": ew.where(b, 0.1, f32),
        "where_cond_int": ew.where(1, f64, 2.0),
        "clip_i8_wide": ew.clip(i8, -1000, 5), "clip_u8_neg": ew.clip(u8, -5, 300),
        "clip_f32": ew.clip(f32, -0.5, 0.25), "max_f64_ninf": ew.maximum(f64, -np.inf),
        "mul_f64_nan": ew.mul(f64, float("nan")), "add_f32_inf": ew.add(f32, float("-inf")),
        "add_i8_true": ew.add(i8, True), "and_b_true": ew.logical_and(b, True),
        "add_i64_min": ew.add(i64, -2 ** 63), "add_f32_bigint": ew.add(f32, 2 ** 70 + 2 ** 45),
        "sub_f64_negzero": ew.sub(f64, -0.0), "xor_u8_255": ew.bitwise_xor(u8, 255),
        "relu_b": tn.relu(b), "cast_weak": ew.cast(-2.5, "uint8"),
    }
    return {k: v.owner for k, v in exprs.items()}


WEAK_CASES = _weak_cases()


def _composite_node(fn, *inputs):
    """The (single) Composite node of ``fn`` compiled with the default rewrites."""
    f = tn.function(list(inputs), fn(*inputs))
    nodes = [n for n in f.fgraph.toposort()
             if isinstance(n.op, ew.Elemwise) and isinstance(n.op.scalar_op, Composite)]
    assert len(nodes) == 1, [str(n.op) for n in f.fgraph.toposort()]
    return nodes[0]


def _graph_cases() -> dict:
    """Fused nodes and in-place nodes taken from real compiled graphs."""
    x, z = tn.matrix("x"), tn.vector("z")
    x32, z32 = TensorType("float32", (None, None))("x32"), TensorType("float32", (None,))("z32")
    a, c = TensorType("int8", (None, None))("a"), TensorType("int8", (None,))("c")
    cases = {
        "expsin": _composite_node(lambda x, z: tn.exp(x) * 2 + tn.sin(z) * x, x, z),
        "expsin32": _composite_node(lambda x, z: tn.exp(x) * 2 + tn.sin(z) * x, x32, z32),
        "leaky": _composite_node(lambda x: tn.where(x > 0, x, 0.1 * x), x),
        "leaky32": _composite_node(lambda x: tn.where(x > 0, x, 0.1 * x), x32),
        "intmix": _composite_node(lambda a, c: (a // c) % 3 + a * c - (a > c), a, c),
        "mixed": _composite_node(lambda x, a: tn.sqrt(tn.abs(x)) / (a + 1) + tn.sigmoid(x), x, a),
        "gelu": _composite_node(lambda x: tn.gelu(x) + tn.softplus(x) * tn.tanh(x), x),
    }
    s = tn.exp(x - tn.max(x, axis=1, keepdims=True))
    f = tn.function([x], s / tn.sum(s, axis=1, keepdims=True))
    for node in f.fgraph.toposort():
        if isinstance(node.op, ew.Elemwise):
            is_comp = isinstance(node.op.scalar_op, Composite)
            cases["softmax_exp" if is_comp else "softmax_div_inplace"] = node
    assert dict(cases["softmax_div_inplace"].op.inplace_pattern) == {0: 0}
    # In place by hand: into a broadcasting operand position and into a Composite.
    y = _var("float64", 2)
    cases["sub_inplace1"] = ew.Elemwise(ps.sub, {0: 1}).make_node(_var("float64", 1).type(), y)
    comp = cases["expsin"].op.scalar_op
    cases["expsin_inplace"] = ew.Elemwise(comp, {0: 0}).make_node(*cases["expsin"].inputs)
    # Many dimensions; 0-d.
    cases["fma5"] = ew.Elemwise(Composite(3, [(ps.mul, [("i", 0), ("i", 1)]),
                                              (ps.add, [("t", 0), ("i", 2)])])).make_node(
        _var("float64", 5), _var("float64", 3), _var("float64", 5))
    cases["add0d"] = ew.Elemwise(ps.add).make_node(_var("float64", 0), _var("float64", 0))
    cases["add_f32_2d"] = ew.Elemwise(ps.add).make_node(_var("float32", 2), _var("float32", 1))
    return cases


GRAPH_CASES = _graph_cases()


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
# Data and comparison


def _edges(dtype) -> np.ndarray:
    """Values where implementations disagree when they are wrong."""
    d = np.dtype(dtype)
    if d.kind == "b":
        return np.array([False, True])
    if d.kind in "iu":
        info = np.iinfo(d)
        values = {0, 1, 2, 3, 7, int(info.max), int(info.max) - 1, int(info.max) // 2 + 1}
        if d.kind == "i":
            values |= {-1, -2, -3, -7, int(info.min), int(info.min) + 1, int(info.min) // 2}
        return np.array(sorted(values), d)
    fi = np.finfo(d)
    values = [0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.0, 3.0,
              -3.0, 7.0, 1e-3, -1e-3, 10.5, -20.0, 100.0, 1e10, -1e10, 300.5, -300.7, 2.0 ** 31,
              -2.0 ** 31 - 1, 2.0 ** 32 + 5, 2.0 ** 63, 2.0 ** 64 + 4096, -2.0 ** 63, 1e20,
              float(fi.max), -float(fi.max), float(fi.tiny), -float(fi.tiny),
              float(fi.tiny) / 4]
    with np.errstate(over="ignore"):
        return np.array(values, d)


def _random(dtype, n: int, rng) -> np.ndarray:
    d = np.dtype(dtype)
    if d.kind == "b":
        return rng.random(n) < 0.5
    if d.kind in "iu":
        info = np.iinfo(d)
        wide = rng.integers(int(info.min), int(info.max), n, dtype=d, endpoint=True)
        small = rng.integers(max(int(info.min), -12), 13, n).astype(d)
        return np.where(rng.random(n) < 0.5, wide, small)
    scale = 10.0 ** rng.uniform(-3, 3, n)
    return (rng.standard_normal(n) * scale).astype(d)


def _data(dtypes, rng, n_random=600) -> list[np.ndarray]:
    """Every combination of edge values (a smaller set for three inputs), then random."""
    edges = [_edges(d) for d in dtypes]
    if len(dtypes) == 3:
        edges = [e[:: max(1, len(e) // 9)] for e in edges]
    grids = np.meshgrid(*[np.arange(len(e)) for e in edges], indexing="ij")
    return [np.concatenate([e[g.ravel()], _random(d, n_random, rng)])
            for e, g, d in zip(edges, grids, dtypes)]


def _reference(node, inputs):
    storage = [[None]]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node.op.perform(node, list(inputs), storage)
    return np.asarray(storage[0][0])


def _name_of(node) -> str:
    op = node.op.scalar_op
    return "cast" if isinstance(op, ps.Cast) else op.name


def _assert_matches(got, want, name: str = "", exact: bool = False, fused: bool = False):
    """Ints and bools: equal.  Floats: the same NaNs, infinities and (for
    ``exact``) bits — up to the sign of zero for ops where NumPy itself is not
    consistent; else within RTOL.  ``fused``: an expression where terms may
    cancel, so an ulp of exp or sin is measured against the largest value."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                  got.shape, want.shape)
    if want.dtype.kind != "f":
        if want.dtype == bool:  # the bytes: a bool result must be 0 or 1
            got, want = got.view(np.uint8), want.view(np.uint8)
        mismatch = got != want
        assert not mismatch.any(), f"{name}: {np.count_nonzero(mismatch)} differences, " \
                                   f"e.g. got {got[mismatch][:5]} want {want[mismatch][:5]}"
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaNs")
    ok = ~np.isnan(want)
    if exact:
        np.testing.assert_array_equal(got[ok], want[ok], err_msg=name)
        if name not in ZERO_SIGN_FREE:
            np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]),
                                          err_msg=f"{name}: sign of zero")
        return
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"{name}: infinities")
    finite = ok & np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ok], want[~finite & ok], err_msg=name)
    atol = float(np.finfo(want.dtype).tiny)
    if fused and finite.any():
        atol = 8 * RTOL[want.dtype] * max(1.0, float(np.abs(want[finite]).max()))
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL[want.dtype], atol=atol,
                               err_msg=name)


def _call(fn, node, inputs, **kw):
    args = [None if _is_weak(node, i) else a for i, a in enumerate(inputs)]
    return fn(*args, **kw)


def _is_weak(node, i) -> bool:
    return any(pos == i for pos, _, _ in node.op.weak_inputs)


# --------------------------------------------------------------------------
# Every scalar op on every dtype


@pytest.mark.parametrize("entry", sorted(OP_CASES))
def test_scalar_op_matches_numpy(built, entry):
    node = OP_CASES[entry]
    name = _name_of(node)
    rng = np.random.default_rng(zlib.crc32(entry.encode()))
    inputs = _data([v.dtype for v in node.inputs], rng)
    if name == "power" and node.inputs[1].dtype[0] in "iu" and node.outputs[0].dtype[0] in "iu":
        inputs[1] = np.abs(inputs[1].astype(np.int64) % 70).astype(inputs[1].dtype)
    got = built[entry](*inputs)
    _assert_matches(got, _reference(node, inputs), entry, exact=name in EXACT or name == "cast")


def test_every_op_and_dtype_is_covered():
    """Each table op compiles for every dtype NumPy accepts, except results in
    float16 (NumPy's own half-precision rules; no C code yet)."""
    names = {_name_of(n) for n in OP_CASES.values()}
    assert names == set(ps.TABLE) | {"cast"}
    for name, dtypes, out_dtype in NO_C_CODE:
        assert out_dtype == "float16", (name, dtypes, out_dtype)


def test_no_c_code_is_reported():
    half = ew.Elemwise(ps.exp).make_node(_var("float16"))
    complex_ = ew.Elemwise(ps.add).make_node(_var("complex128"), _var("complex128"))
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
    _assert_matches(built[entry](*inputs), _reference(node, inputs), entry)


@pytest.mark.parametrize("entry", sorted(WEAK_CASES))
def test_python_number_inputs(built, entry):
    node = WEAK_CASES[entry]
    rng = np.random.default_rng(7)
    arrays = iter(_data([v.dtype for i, v in enumerate(node.inputs) if not _is_weak(node, i)], rng))
    inputs = [None if _is_weak(node, i) else next(arrays) for i in range(len(node.inputs))]
    got = _call(built[entry], node, inputs)
    _assert_matches(got, _reference(node, inputs), entry, exact=True)


# --------------------------------------------------------------------------
# Fused graphs, layouts, in place


def _array(shape, dtype, rng) -> np.ndarray:
    """Moderate values (the scalar tests cover the extremes)."""
    d = np.dtype(dtype)
    if d.kind == "f":
        return rng.standard_normal(shape).astype(d)
    return _random(dtype, math.prod(shape), rng).reshape(shape)


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
    inputs = [_array(s, v.dtype, rng) for s, v in zip(shapes, node.inputs)]
    want = _reference(node, inputs)
    got = built[entry](*inputs)
    _assert_matches(got, want, entry, fused=True)


def _views(a: np.ndarray):
    """The same values as ``a`` in other layouts: strided, negative strides,
    Fortran order, unaligned, read-only."""
    yield np.repeat(a[..., None], 3, axis=-1)[..., 1]                # stride of 3 items
    flipped = (slice(None, None, -1),) * a.ndim
    yield np.ascontiguousarray(a[flipped])[flipped]                 # negative strides
    yield np.asfortranarray(a)
    raw = np.zeros(a.nbytes + a.itemsize + 1, np.uint8)
    unaligned = raw[1:1 + a.nbytes].view(a.dtype).reshape(a.shape)
    unaligned[...] = a
    yield unaligned
    ro = a.copy()
    ro.flags.writeable = False
    yield ro


@pytest.mark.parametrize("entry", ["expsin", "intmix", "mixed", "leaky32"])
def test_any_strides(built, entry):
    node = GRAPH_CASES[entry]
    rng = np.random.default_rng(3)
    shapes = {"expsin": [(9, 13), (13,)], "intmix": [(9, 13), (13,)],
              "mixed": [(9, 13), (9, 13)], "leaky32": [(9, 13)]}[entry]
    base = [_array(s, v.dtype, rng) for s, v in zip(shapes, node.inputs)]
    want = _reference(node, base)
    for k in range(len(base)):
        for view in _views(base[k]):
            inputs = list(base)
            inputs[k] = view
            _assert_matches(built[entry](*inputs), want, entry, fused=True)
    out = np.zeros((13, 9), want.dtype).T  # a transposed output
    assert built[entry](*base, out=out) is out
    _assert_matches(out, want, entry, fused=True)
    out = np.zeros((18, 26), want.dtype)[::-2, 1::2]
    assert built[entry](*base, out=out) is out
    _assert_matches(out, want, entry, fused=True)


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
        want = _reference(GRAPH_CASES["expsin"], [x.copy(), z])
        got = built["expsin_inplace"](x, z)
        assert got is x
        _assert_matches(got, want, fused=True)
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
        want = _reference(GRAPH_CASES["expsin"], [x.copy(), z])
        out = make_out(x)
        got = built["expsin"](x, z, out=out)
        assert got is out
        _assert_matches(got, want, fused=True)
    buf = rng.random(9)
    x, out = buf[1:].reshape(1, 8), buf[:-1].reshape(1, 8)  # shifted by one element
    z = rng.random(8)
    want = _reference(GRAPH_CASES["expsin"], [x.copy(), z])
    _assert_matches(built["expsin"](x, z, out=out), want, fused=True)


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
    want = _reference(GRAPH_CASES["expsin"], [x.copy(), z])
    assert run(x, z, out=x) is x
    _assert_matches(x, want, fused=True)
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


# --------------------------------------------------------------------------
# Random shapes, broadcast patterns and strides


#: input ndims of the nodes the random layouts run on (right-aligned broadcasting)
LAYOUT_NDIMS = [(4, 4, 4), (4, 2, 0), (1, 4, 3), (0, 0, 0), (2, 2, 1)]


def _layout_node(ndims):
    # maximum with a NaN-free constant: a layout mistake shows as a wrong value
    comp = Composite(3, [(ps.mul, [("i", 0), ("i", 1)]), (ps.sub, [("t", 0), ("i", 2)]),
                         (ps.maximum, [("t", 1), ("c", -0.5)])])
    return ew.Elemwise(comp).make_node(*[_var("float64", n) for n in ndims])


GRAPH_CASES.update({"layout_" + "_".join(map(str, n)): _layout_node(n) for n in LAYOUT_NDIMS})


@st.composite
def _layouts(draw):
    ndims = draw(st.sampled_from(LAYOUT_NDIMS))
    ndim = max(ndims)
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    inputs = []
    for nd in ndims:
        # Each axis of an input is the output's length or (sometimes) 1.
        s = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in shape[ndim - nd:])
        steps = tuple(draw(st.sampled_from([1, 2, -1, -3])) for _ in s)
        inputs.append((s, steps, draw(st.booleans())))
    out_steps = tuple(draw(st.sampled_from([1, -1, 2])) for _ in shape)
    return ndims, shape, inputs, out_steps


def _strided(values: np.ndarray, steps, transpose: bool) -> np.ndarray:
    """A view holding ``values`` with the given steps per axis, its memory in C
    or (``transpose``) reversed axis order."""
    if values.ndim == 0:
        return values.copy()
    big_shape = tuple(max(1, n * abs(s)) for n, s in zip(values.shape, steps))
    order = list(range(values.ndim))[::-1] if transpose else list(range(values.ndim))
    base = np.zeros(tuple(big_shape[a] for a in order), values.dtype).transpose(np.argsort(order))
    view = base[tuple(slice(None, None, s) for s in steps)]
    view = view[tuple(slice(0, n) for n in values.shape)]
    view[...] = values
    return view


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_layouts(), st.integers(0, 2 ** 32 - 1))
def test_random_layouts(layout, seed):
    built = _build_all()
    ndims, _, specs, out_steps = layout
    entry = "layout_" + "_".join(map(str, ndims))
    rng = np.random.default_rng(seed)
    values = [np.asarray(rng.standard_normal(s)) for s, _, _ in specs]
    inputs = [_strided(v, steps, t) for v, (_, steps, t) in zip(values, specs)]
    shape = np.broadcast_shapes(*(v.shape for v in values))  # all 1 where the draw had 0
    want = _reference(GRAPH_CASES[entry], values)
    out = _strided(np.zeros(shape), out_steps, False)
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
