"""Generated C for the products (tenure/linkers/c/blas.py) against the NumPy
reference (``perform``): Dot, MatMul (batched, broadcasting), Outer and Gemm
(in place or not) on float32 / float64 through SciPy's BLAS and on integers and
bool through plain loops, over every memory layout (transposed, strided,
reversed, broadcast, unaligned, empty), and bad input.

Every node is compiled into one module (many entries), once per module run.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import blas as cb
from tests.linkers.c import harness
from tenure.symbolic.ops import blas as ob
from tenure.symbolic.ops.gemm import Gemm
from tenure.symbolic.types import TensorType

FLOATS = ["float32", "float64"]
INTS = ["int8", "int64", "uint16", "bool"]
RTOL = {"float32": 1e-5, "float64": 1e-12}


def _var(dtype, ndim, name=None):
    return TensorType(dtype, (None,) * ndim)(name)


def _product_cases() -> dict:
    """``{entry: node}``: Dot and MatMul over ndim pairs and dtypes, Outer, Gemm."""
    cases = {}
    pairs = {"dot": [(1, 1), (1, 2), (2, 1), (2, 2), (3, 2), (2, 3), (3, 3)],
             "matmul": [(1, 1), (1, 2), (2, 1), (2, 2), (3, 2), (2, 3), (1, 3), (3, 1), (4, 3),
                        (3, 4)]}
    fns = {"dot": ob.dot, "matmul": ob.matmul}
    for kind, combos in pairs.items():
        for dtype in FLOATS + INTS:
            for na, nb in combos:
                if dtype in INTS and (na, nb) not in {(1, 1), (2, 1), (2, 2), (3, 2), (3, 4)}:
                    continue
                node = fns[kind](_var(dtype, na, "a"), _var(dtype, nb, "b")).owner
                cases[f"{kind}_{na}{nb}_{dtype}"] = node
    for dtype in FLOATS + ["int8", "bool"]:
        cases[f"outer_11_{dtype}"] = ob.outer(_var(dtype, 1), _var(dtype, 1)).owner
        cases[f"outer_21_{dtype}"] = ob.outer(_var(dtype, 2), _var(dtype, 1)).owner
    for dtype in FLOATS:
        for inplace in (False, True):
            cases[f"gemm_{int(inplace)}_{dtype}"] = Gemm(inplace).make_node(
                _var(dtype, 2, "z"), _var(dtype, 0, "alpha"), _var(dtype, 2, "x"),
                _var(dtype, 2, "y"), _var(dtype, 0, "beta"))
    return cases


CASES = _product_cases()


def _graph_nodes() -> tuple[dict, dict]:
    """Nodes from real compiled graphs: ``x @ w`` and the gemm_inplace of an
    SGD-like update ``w - 0.1 * (x.T @ g)``; also the functions."""
    nodes, fns = {}, {}
    for dtype in FLOATS:
        x, g = tn.matrix("x", dtype=dtype), tn.matrix("g", dtype=dtype)
        w = tn.shared(np.ones((3, 4), dtype=dtype), name="w")
        f = tn.function([x], x @ w)
        (mm,) = [n for n in f.fgraph.toposort() if isinstance(n.op, ob.MatMul)]
        nodes[f"graph_mm_{dtype}"] = mm
        upd = tn.function([x, g], [], updates=[(w, w - 0.1 * (x.T @ g))])
        (gemm,) = [n for n in upd.fgraph.toposort() if isinstance(n.op, Gemm)]
        nodes[f"graph_gemm_{dtype}"] = gemm
        fns[dtype] = (f, upd, w)
    return nodes, fns


GRAPH_NODES, GRAPH_FNS = _graph_nodes()


@pytest.fixture(scope="module")
def mod():
    from tenure.linkers.c.compiler import find_compiler
    if find_compiler() is None:
        pytest.skip("no working C compiler (set tenure.config.cxx or $CC)")
    pytest.importorskip("scipy.linalg.cython_blas")
    return harness.build({**CASES, **GRAPH_NODES})


# --------------------------------------------------------------------------
# Helpers


def _perform(node, *inputs):
    storage = [[None]]
    node.op.perform(node, list(inputs), storage)
    return np.asarray(storage[0][0])


def _values(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.3
    if dtype in FLOATS:
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -120), min(info.max, 120), shape, endpoint=True).astype(dtype)


def _layout(arr, how, rng):
    """``arr``'s values in another memory layout (same shape and values)."""
    if how == "c":
        return np.ascontiguousarray(arr)
    if how == "f":
        return np.asfortranarray(arr)
    if how == "reversed":  # negative strides on every axis
        idx = tuple(slice(None, None, -1) for _ in range(arr.ndim))
        return np.ascontiguousarray(arr[idx])[idx]
    if how == "strided":  # every other element on every axis
        big = np.zeros(tuple(2 * n for n in arr.shape), arr.dtype)
        view = big[tuple(slice(None, None, 2) for _ in range(arr.ndim))]
        view[...] = arr
        return view
    if how == "unaligned":
        raw = np.zeros(arr.nbytes + 1, np.uint8)
        view = raw[1:].view(arr.dtype).reshape(arr.shape)
        view[...] = arr
        return view
    if how == "transposed":  # a C-contiguous transpose, transposed back
        return np.ascontiguousarray(arr.T).T
    raise ValueError(how)


LAYOUTS = ["c", "f", "transposed", "reversed", "strided", "unaligned"]


def _shapes(kind, na, nb, k=5):
    """Operand shapes with summed length ``k`` (batch axes broadcasting)."""
    lead_a = {3: (3,), 4: (2, 1)}.get(na, ())
    lead_b = {3: (1,) if na == 4 else (2,), 4: (2, 3)}.get(nb, ())
    if kind == "dot":
        lead_b = {3: (2,)}.get(nb, ())
    a = lead_a + ((4, k) if na >= 2 else (k,))
    b = lead_b + ((k, 3) if nb >= 2 else (k,))
    return a, b


def _check(got, want, dtype, mag=None):
    assert got.shape == want.shape and got.dtype == want.dtype
    if dtype in FLOATS:
        scale = np.abs(want) if mag is None else mag
        np.testing.assert_array_less(np.abs(got.astype("f8") - want.astype("f8")),
                                     RTOL[dtype] * (scale.astype("f8") + 1e-30) + 1e-300)
    else:
        np.testing.assert_array_equal(got, want)


def _product_check(mod, entry, a, b, out=None):
    node = CASES.get(entry) or GRAPH_NODES[entry]
    want = _perform(node, np.array(a), np.array(b))
    got = getattr(mod, entry)(a, b, out=out)
    if out is not None:
        assert got is out
    dtype = node.outputs[0].dtype
    mag = (_perform(node, np.abs(a.astype("f8")), np.abs(b.astype("f8")))
           if dtype in FLOATS else None)
    _check(got, want, dtype, mag)


# --------------------------------------------------------------------------
# Dot / MatMul


def test_cases_have_c_code():
    for node in [*CASES.values(), *GRAPH_NODES.values()]:
        assert cb.has_c_code(node)


@pytest.mark.parametrize("entry", [e for e in CASES if e.startswith(("dot", "matmul"))])
def test_products_match_perform(mod, entry):
    kind, pair, dtype = entry.split("_", 2)
    rng = np.random.default_rng(zlib.crc32(entry.encode()))
    a_shape, b_shape = _shapes(kind, int(pair[0]), int(pair[1]))
    a, b = _values(rng, a_shape, dtype), _values(rng, b_shape, dtype)
    for la, lb in [("c", "c"), ("f", "transposed"), ("reversed", "strided"),
                   ("unaligned", "f"), ("strided", "reversed")]:
        _product_check(mod, entry, _layout(a, la, rng), _layout(b, lb, rng))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("la,lb", list(itertools.product(LAYOUTS, LAYOUTS)))
def test_gemm_sized_layouts(mod, dtype, la, lb):
    """Big enough for BLAS's blocking; every operand layout pair."""
    rng = np.random.default_rng(7)
    a, b = _values(rng, (33, 47), dtype), _values(rng, (47, 29), dtype)
    _product_check(mod, f"matmul_22_{dtype}", _layout(a, la, rng), _layout(b, lb, rng))
    _product_check(mod, f"matmul_21_{dtype}", _layout(a, la, rng), _layout(b[:, 0], lb, rng))
    _product_check(mod, f"dot_11_{dtype}", _layout(a[0], la, rng), _layout(b[:, 1], lb, rng))


@pytest.mark.parametrize("dtype", FLOATS + ["int64"])
@pytest.mark.parametrize("out_layout", ["f", "reversed", "strided", "unaligned"])
def test_output_layouts(mod, dtype, out_layout):
    rng = np.random.default_rng(3)
    a, b = _values(rng, (3, 6, 5), dtype), _values(rng, (5, 4), dtype)
    out = _layout(np.zeros((3, 6, 4), dtype), out_layout, rng)
    _product_check(mod, f"matmul_32_{dtype}", a, b, out=out)
    v = _layout(np.zeros((6,), dtype), out_layout, rng)
    _product_check(mod, f"matmul_21_{dtype}", a[0], _values(rng, (5,), dtype), out=v)


@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcast_operands(mod, dtype):
    """Stride-0 operands (np.broadcast_to) are staged, never passed to BLAS."""
    rng = np.random.default_rng(4)
    a = np.broadcast_to(_values(rng, (1, 5), dtype), (4, 5))
    b = np.broadcast_to(_values(rng, (5, 1), dtype), (5, 3))
    _product_check(mod, f"matmul_22_{dtype}", a, b)
    _product_check(mod, f"matmul_11_{dtype}", np.broadcast_to(a[0, :1], (5,)), b[:, 0])
    # batch axes broadcast: (2, 1, 4, 5) @ (3, 5, 6) and a stride-0 batch axis
    a4, b3 = _values(rng, (2, 1, 4, 5), dtype), _values(rng, (3, 5, 6), dtype)
    _product_check(mod, f"matmul_43_{dtype}", a4, b3)
    _product_check(mod, f"matmul_43_{dtype}", np.broadcast_to(a4, (2, 3, 4, 5)), b3)
    _product_check(mod, f"matmul_34_{dtype}", b3.transpose(0, 2, 1)[:1], a4.transpose(1, 0, 3, 2))


ZERO_SIZE = [
    ("matmul_22", (0, 3), (3, 4)), ("matmul_22", (3, 0), (0, 4)), ("matmul_22", (3, 4), (4, 0)),
    ("matmul_11", (0,), (0,)), ("matmul_21", (4, 0), (0,)), ("matmul_12", (0,), (0, 5)),
    ("matmul_43", (2, 1, 4, 5), (0, 5, 6)), ("matmul_43", (2, 1, 4, 0), (3, 0, 6)),
    ("dot_32", (0, 4, 5), (5, 3)), ("dot_23", (4, 0), (2, 0, 3)),
]


@pytest.mark.parametrize("name,a_shape,b_shape", [
    (f"{entry}_{dtype}", a, b) for entry, a, b in ZERO_SIZE
    for dtype in ["float32", "float64", "int8", "bool"] if f"{entry}_{dtype}" in CASES])
def test_zero_size(mod, name, a_shape, b_shape):
    dtype = name.split("_", 2)[2]
    rng = np.random.default_rng(5)
    _product_check(mod, name, _values(rng, a_shape, dtype), _values(rng, b_shape, dtype))
    # An output full of NaN must come back as zeros when k == 0 (nothing read from it).
    if dtype in FLOATS and 0 not in ob.matmul_static_shape(a_shape, b_shape) and "matmul" in name:
        out = np.full(ob.matmul_static_shape(a_shape, b_shape), np.nan, dtype)
        _product_check(mod, name, _values(rng, a_shape, dtype), _values(rng, b_shape, dtype),
                       out=out)


@pytest.mark.parametrize("dtype", FLOATS)
def test_uninitialised_output_is_not_read(mod, dtype):
    """beta == 0: whatever the output held (NaN, inf) does not leak in."""
    rng = np.random.default_rng(6)
    a, b = _values(rng, (6, 5), dtype), _values(rng, (5, 4), dtype)
    for entry, x, y, shape in [("matmul_22", a, b, (6, 4)), ("matmul_21", a, b[:, 0], (6,)),
                               ("matmul_12", a[0], b, (4,))]:
        _product_check(mod, f"{entry}_{dtype}", x, y, out=np.full(shape, np.nan, dtype))


def test_integer_wraparound_and_bool(mod):
    a = np.full((2, 3), 100, np.int8)
    b = np.full((3, 2), 100, np.int8)
    np.testing.assert_array_equal(mod.matmul_22_int8(a, b), a @ b)      # wraps like NumPy
    a64 = np.full((2, 2), 2**62, np.int64)
    np.testing.assert_array_equal(mod.matmul_22_int64(a64, a64), a64 @ a64)
    bools = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(mod.matmul_22_bool(bools, bools), bools @ bools)
    odd = np.array([2, 0, 7], np.uint8).view(np.bool_)                  # non-0/1 bytes
    np.testing.assert_array_equal(mod.dot_11_bool(odd, odd), np.dot(odd, odd))


def test_output_aliasing_an_input(mod):
    rng = np.random.default_rng(8)
    a, b = _values(rng, (4, 4), "float64"), _values(rng, (4, 4), "float64")
    want = a @ b
    out = mod.matmul_22_float64(a, b, out=a)
    assert out is a
    np.testing.assert_allclose(out, want, rtol=1e-12)
    c = _values(rng, (4, 4), "float64")
    want = c @ c.T
    np.testing.assert_allclose(mod.matmul_22_float64(c, c.T, out=c.T), want, rtol=1e-12)


# --------------------------------------------------------------------------
# Outer


@pytest.mark.parametrize("dtype", FLOATS + ["int8", "bool"])
def test_outer(mod, dtype):
    rng = np.random.default_rng(9)
    x, y, m = _values(rng, (5,), dtype), _values(rng, (3,), dtype), _values(rng, (2, 3), dtype)
    for lx, ly in [("c", "c"), ("reversed", "strided"), ("unaligned", "reversed")]:
        x2, y2, m2 = _layout(x, lx, rng), _layout(y, ly, rng), _layout(m, lx, rng)
        np.testing.assert_array_equal(getattr(mod, f"outer_11_{dtype}")(x2, y2),
                                      _perform(CASES[f"outer_11_{dtype}"], x, y))
        np.testing.assert_array_equal(getattr(mod, f"outer_21_{dtype}")(m2, y2),
                                      _perform(CASES[f"outer_21_{dtype}"], m, y))
    np.testing.assert_array_equal(getattr(mod, f"outer_11_{dtype}")(x[:0], y).shape, (0, 3))


# --------------------------------------------------------------------------
# Gemm


def _gemm(mod, dtype, inplace, z, alpha, x, y, beta, out=None):
    node = CASES[f"gemm_{int(inplace)}_{dtype}"]
    args = [np.asarray(alpha, dtype), np.asarray(beta, dtype)]
    with np.errstate(invalid="ignore"):  # 0 * inf, as the expression gives it
        want = _perform(node, np.array(z), args[0], np.array(x), np.array(y), args[1])
    with np.errstate(invalid="ignore"):
        mag = _perform(node, np.abs(z.astype("f8")), np.abs(args[0].astype("f8")),
                       np.abs(x.astype("f8")), np.abs(y.astype("f8")),
                       np.abs(args[1].astype("f8")))
    got = getattr(mod, f"gemm_{int(inplace)}_{dtype}")(z, args[0], x, y, args[1], out=out)
    if np.isfinite(want).all():
        _check(got, want, dtype, mag)
    else:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL[dtype])
    return got


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lz,lx", [("c", "c"), ("f", "transposed"), ("reversed", "strided"),
                                   ("strided", "unaligned"), ("unaligned", "f")])
def test_gemm_inplace_overwrites_z(mod, dtype, lz, lx):
    rng = np.random.default_rng(10)
    z, x, y = (_values(rng, s, dtype) for s in [(9, 7), (9, 11), (11, 7)])
    zl = _layout(z.copy(), lz, rng)
    got = _gemm(mod, dtype, True, zl, 0.5, _layout(x, lx, rng), _layout(y, lx, rng), -1.5)
    if lz != "unaligned":   # the linker writes in place into aligned arrays only
        assert got is zl                               # the destroyed input is the output
    got2 = _gemm(mod, dtype, False, z, 0.5, x, y, -1.5)
    assert got2 is not z
    np.testing.assert_array_equal(z, _values(np.random.default_rng(10), (9, 7), dtype))  # kept


@pytest.mark.parametrize("dtype", FLOATS)
def test_gemm_vector_shapes_and_special_scalars(mod, dtype):
    rng = np.random.default_rng(11)
    x, y = _values(rng, (6, 5), dtype), _values(rng, (5, 4), dtype)
    for zs, xx, yy in [((6, 4), x, y), ((1, 4), x[:1], y), ((6, 1), x, y[:, :1]),
                       ((1, 1), x[:1], y[:, :1]), ((6, 4), x[:, :0], y[:0])]:
        for alpha, beta in [(1, 1), (0.5, 2), (0, 1), (1, 0), (0, 0), (-1, 1)]:
            z = _values(rng, zs, dtype)
            _gemm(mod, dtype, True, z, alpha, xx, yy, beta)
    # 0 * inf is NaN as in beta * z + alpha * (x @ y)
    z = _values(rng, (6, 4), dtype)
    z[0, 0] = np.inf
    _gemm(mod, dtype, True, z.copy(), 1, x, y, 0)
    xi = x.copy()
    xi[1, 1] = np.inf
    _gemm(mod, dtype, True, z.copy(), 0, xi, y, 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gemm_broadcasting(mod, dtype):
    rng = np.random.default_rng(12)
    x, y = _values(rng, (6, 5), dtype), _values(rng, (5, 4), dtype)
    for z in [_values(rng, (1, 4), dtype), _values(rng, (6, 1), dtype),
              _values(rng, (1, 1), dtype)]:
        got = _gemm(mod, dtype, True, z, 0.5, x, y, 2)     # z broadcasts: a new output
        assert got.shape == (6, 4) and got is not z
    z = _values(rng, (6, 4), dtype)
    got = _gemm(mod, dtype, True, z, 0.5, x[:1], y, 2)     # the product broadcasts
    assert got is z
    _gemm(mod, dtype, False, z, 0.5, x, y[:, :1], 2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gemm_inputs_overlapping_z(mod, dtype):
    rng = np.random.default_rng(13)
    z = _values(rng, (5, 5), dtype)
    want = _perform(CASES[f"gemm_1_{dtype}"], z.copy(), np.asarray(0.5, dtype), z.copy(),
                    z.T.copy(), np.asarray(2, dtype))
    got = mod.__getattribute__(f"gemm_1_{dtype}")(z, np.asarray(0.5, dtype), z, z.T,
                                                  np.asarray(2, dtype))
    assert got is z
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype] * 10, atol=RTOL[dtype] * 10)
    # alpha and beta as views into z's buffer are read before z is written
    z = _values(rng, (3, 3), dtype)
    want = _perform(CASES[f"gemm_1_{dtype}"], z.copy(), z[0, 0].copy(), z.copy(), z.copy(),
                    z[1, 1].copy())
    got = mod.__getattribute__(f"gemm_1_{dtype}")(z, z[0, 0, ...], z.copy(), z.copy(),
                                                  z[1, 1, ...])
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype] * 10, atol=RTOL[dtype] * 10)
    # a read-only z: the in-place entry writes a new array
    z = _values(rng, (5, 5), dtype)
    z.flags.writeable = False
    got = _gemm(mod, dtype, True, z, 1, z, z, 1)
    assert got is not z


# --------------------------------------------------------------------------
# Nodes from real graphs


@pytest.mark.parametrize("dtype", FLOATS)
def test_graph_nodes(mod, dtype):
    f, upd, w = GRAPH_FNS[dtype]
    rng = np.random.default_rng(14)
    x = _values(rng, (6, 3), dtype)
    w_value = w.get_value()
    _product_check(mod, f"graph_mm_{dtype}", x, w_value)
    _check(mod.__getattribute__(f"graph_mm_{dtype}")(x, w_value), np.asarray(f(x)), dtype,
           np.abs(x) @ np.abs(w_value))
    node = GRAPH_NODES[f"graph_gemm_{dtype}"]
    assert node.op.inplace and node.op.destroy_map == {0: [0]}
    # gemm_inplace(w, alpha, x.T, g, beta): inputs as the graph feeds them
    g = _values(rng, (6, 4), dtype)
    consts = [np.asarray(v.data if hasattr(v, "data") else None) for v in node.inputs]
    alpha, beta = consts[1], consts[4]
    assert alpha.dtype == dtype and beta.dtype == dtype
    z = w_value.copy()
    want = _perform(node, z.copy(), alpha, x.T, g, beta)
    got = mod.__getattribute__(f"graph_gemm_{dtype}")(z, alpha, x.T, g, beta)
    assert got is z
    _check(got, want, dtype, np.abs(w_value) + 0.1 * (np.abs(x.T) @ np.abs(g)))
    upd(x, g)
    _check(got, w.get_value(), dtype, np.abs(w_value) + 0.1 * (np.abs(x.T) @ np.abs(g)))


# --------------------------------------------------------------------------
# Bad input raises, never crashes


def test_bad_input_raises(mod):
    f64 = np.ones((3, 4))
    run = mod.matmul_22_float64
    with pytest.raises(TypeError, match="dtype float64"):
        run(f64.astype("f4"), f64.T)
    with pytest.raises(TypeError, match="dtype float64"):
        run(f64.astype(">f8"), f64.T)
    with pytest.raises(TypeError, match="dimension"):
        run(f64[0], f64.T)
    with pytest.raises(TypeError, match="ndarray"):
        run([[1.0]], f64.T)
    with pytest.raises(TypeError, match="2 input"):
        run(f64)
    with pytest.raises(ValueError, match="not aligned"):
        run(f64, f64)
    with pytest.raises(ValueError, match="wrong shape"):
        run(f64, f64.T, out=np.empty((4, 4)))
    ro = np.empty((3, 3))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        run(f64, f64.T, out=ro)
    with pytest.raises(TypeError, match="dtype float64"):
        run(f64, f64.T, out=np.empty((3, 3), "f4"))
    with pytest.raises(ValueError, match="broadcast"):
        mod.matmul_43_float64(np.ones((2, 2, 4, 5)), np.ones((3, 5, 6)))
    with pytest.raises(ValueError, match="not aligned"):
        mod.matmul_22_int8(np.ones((2, 3), "i1"), np.ones((2, 3), "i1"))
    gemm = mod.gemm_1_float64
    one = np.ones(())
    with pytest.raises(ValueError, match="broadcast"):
        gemm(np.ones((2, 3)), one, np.ones((4, 5)), np.ones((5, 6)), one)
    with pytest.raises(ValueError, match="not aligned"):
        gemm(np.ones((4, 6)), one, np.ones((4, 5)), np.ones((4, 6)), one)
    with pytest.raises(TypeError, match="dimension"):
        gemm(np.ones((4, 6)), np.ones(1), np.ones((4, 5)), np.ones((5, 6)), one)


def test_has_c_code_declines():
    assert not cb.has_c_code(ob.matmul(_var("float32", 2), _var("float64", 2)).owner)
    assert not cb.has_c_code(ob.matmul(_var("complex128", 2), _var("complex128", 2)).owner)
    assert not cb.has_c_code(ob.dot(_var("float64", 0), _var("float64", 2)).owner)
    assert not cb.has_c_code(ob.tensordot(_var("float64", 2), _var("float64", 2), 1).owner)
    assert not cb.has_c_code(tn.exp(_var("float64", 2)).owner)
    with pytest.raises(NotImplementedError):
        cb.c_function(ob.matmul(_var("float32", 2), _var("float64", 2)).owner, "f")
    with pytest.raises(ValueError):
        cb.c_function(CASES["matmul_22_float64"], "not an identifier")


# --------------------------------------------------------------------------
# TensorDot (tenure/linkers/c/tensordot.py): the operands as matrices, the
# runtime's product driver


TENSORDOT = {   # name: (a's shape, b's shape, axes)
    "matrices": ((4, 5), (5, 3), 1),
    "pairs": ((2, 3, 4), (4, 3, 2), ([1, 2], [1, 0])),
    "first_axes": ((5, 2), (5, 3), ([0], [0])),
    "outer": ((2, 3), (4,), 0),
    "everything": ((2, 3), (3, 2), ([0, 1], [1, 0])),
    "empty": ((0, 4), (4, 2), 1),
}


@pytest.fixture(scope="module")
def tensordot_mod():
    from tenure.linkers.c.compiler import find_compiler
    if find_compiler() is None:
        pytest.skip("no working C compiler (set tenure.config.cxx or $CC)")
    pytest.importorskip("scipy.linalg.cython_blas")
    nodes = {}
    for dtype in FLOATS + INTS:
        for name, (a_shape, b_shape, axes) in TENSORDOT.items():
            a, b = _var(dtype, len(a_shape), "a"), _var(dtype, len(b_shape), "b")
            nodes[f"{name}_{dtype}"] = ob.tensordot(a, b, axes).owner
    return harness.build(nodes)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_tensordot_over_layouts(tensordot_mod, dtype):
    """np.tensordot's numbers over every operand layout (a view where the
    axes allow it, a copy where not)."""
    rng = np.random.default_rng(11)
    for name, (a_shape, b_shape, axes) in TENSORDOT.items():
        a, b = _values(rng, a_shape, dtype), _values(rng, b_shape, dtype)
        want = np.tensordot(a, b, axes)
        run = tensordot_mod[f"{name}_{dtype}"]
        for la, lb in zip(LAYOUTS, LAYOUTS[1:] + LAYOUTS[:1]):
            got = run(_layout(a, la, rng), _layout(b, lb, rng))
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=RTOL.get(dtype, 0))


def test_tensordot_refuses_what_perform_refuses(tensordot_mod):
    run = tensordot_mod["pairs_float64"]
    with pytest.raises(ValueError, match=r"tensordot: shapes \(2, 3, 4\) and \(4, 2, 2\) are "
                                         r"not aligned: axis 1 of the first \(length 3\) is "
                                         r"summed against axis 1 of the second \(length 2\)"):
        run(np.ones((2, 3, 4)), np.ones((4, 2, 2)))
    with pytest.raises(TypeError, match="float64"):
        run(np.ones((2, 3, 4), "float32"), np.ones((4, 3, 2)))
