"""The elementwise nodes every linker's kernel tests run, and how their
results are compared with NumPy: every scalar op on every dtype it accepts
(``OP_CASES``), Python-number inputs (``WEAK_CASES``), fused and in-place
nodes from real graphs and nodes for random layouts (``GRAPH_CASES``), the
values that find mistakes (``data``), and the comparison (``assert_matches``).
Used by the C linker's tests (tests/linkers/c/test_elemwise_c.py) and the
CUDA kernels' (tests/linkers/cuda/test_elemwise_cuda.py)."""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import strategies as st

import tenure as tn
from tenure.linkers.c import elemwise as ce
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
         "square", "reciprocal", "maximum", "minimum", "clip", "sqrt", "relu", "where",
         "floor", "ceil", "trunc", "rint", "round"}
#: where NumPy's SIMD loops pick either zero when comparing -0.0 with 0.0
ZERO_SIGN_FREE = {"maximum", "minimum", "clip", "relu"}
RTOL = {np.dtype("float64"): 1e-15, np.dtype("float32"): 1e-6}


# --------------------------------------------------------------------------
# The nodes


def var(dtype, ndim=1):
    return TensorType(dtype, (None,) * ndim)()


def op_node(op: ps.ScalarOp, dtypes):
    try:
        node = ew.Elemwise(op).make_node(*[var(d) for d in dtypes])
    except (TypeError, ValueError):
        return None  # NumPy rejects these dtypes too
    return node


def dtype_combos(op: ps.ScalarOp):
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
        for dtypes in dtype_combos(op):
            node = op_node(op, dtypes)
            if node is None:
                continue
            if ce.has_c_code(node):
                cases[f"{name}__{'_'.join(dtypes)}"] = node
            else:
                no_c.append((name, dtypes, node.outputs[0].dtype))
    for src in DTYPES:
        for dst in DTYPES:
            cases[f"cast__{src}_{dst}"] = ew.Elemwise(ps.Cast(dst)).make_node(var(src))
    return cases, no_c


OP_CASES, NO_C_CODE = _op_cases()


def _weak_cases() -> dict:
    """Python-number inputs, converted as NumPy converts them for each op."""
    i8, u8, i64, u64 = var("int8"), var("uint8"), var("int64"), var("uint64")
    f32, f64, b = var("float32"), var("float64"), var("bool")
    exprs = {
        "add_i8_2": ew.add(i8, 2), "mul_f32_tenth": ew.mul(f32, 0.1),
        "rsub_f64": ew.sub(1.5, f64), "div_i8_by_2": ew.true_divide(i8, 2),
        "mul_i8_half": ew.mul(i8, 0.5), "floordiv_i8_m3": ew.floor_divide(i8, -3),
        "mod_7_u8": ew.mod(7, u8), "pow_i64_3": ew.power(i64, 3), "pow_f32_2": ew.power(f32, 2),
        "lt_i8_1000": ew.less(i8, 1000), "ge_u8_m1": ew.greater_equal(u8, -1),
        "eq_i64_big": ew.equal(i64, 2 ** 64 - 1), "ne_u64_m1": ew.not_equal(u64, -1),
        "gt_i8_2p70": ew.greater(i8, 2 ** 70), "lt_m5_u8": ew.less(-5, u8),
        "lt_i8_5": ew.less(i8, 5), "le_f32_third": ew.less_equal(f32, 1 / 3),
        # (a Python int out of the range of where's integer result is an
        # error, as in NumPy 2.5: tests/symbolic/ops/test_elemwise.py)
        "where_i8_m100": ew.where(b, i8, -100), "where_255_u8": ew.where(b, 255, u8),
        "where_f32_tenth": ew.where(b, 0.1, f32),
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


def composite_node(fn, *inputs):
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
        "expsin": composite_node(lambda x, z: tn.exp(x) * 2 + tn.sin(z) * x, x, z),
        "expsin32": composite_node(lambda x, z: tn.exp(x) * 2 + tn.sin(z) * x, x32, z32),
        "leaky": composite_node(lambda x: tn.where(x > 0, x, 0.1 * x), x),
        "leaky32": composite_node(lambda x: tn.where(x > 0, x, 0.1 * x), x32),
        "intmix": composite_node(lambda a, c: (a // c) % 3 + a * c - (a > c), a, c),
        "mixed": composite_node(lambda x, a: tn.sqrt(tn.abs(x)) / (a + 1) + tn.sigmoid(x), x, a),
        "gelu": composite_node(lambda x: tn.gelu(x) + tn.softplus(x) * tn.tanh(x), x),
    }
    # (the softmax written out, kept as written: its loops are the cases)
    s = tn.exp(x - tn.max(x, axis=1, keepdims=True))
    f = tn.function([x], s / tn.sum(s, axis=1, keepdims=True),
                    mode=tn.Mode(exclude=["softmax_by_hand", "fuse_rows"]))
    for node in f.fgraph.toposort():
        if isinstance(node.op, ew.Elemwise):
            is_comp = isinstance(node.op.scalar_op, Composite)
            cases["softmax_exp" if is_comp else "softmax_div_inplace"] = node
    assert dict(cases["softmax_div_inplace"].op.inplace_pattern) == {0: 0}
    # In place by hand: into a broadcasting operand position and into a Composite.
    y = var("float64", 2)
    cases["sub_inplace1"] = ew.Elemwise(ps.sub, {0: 1}).make_node(var("float64", 1).type(), y)
    comp = cases["expsin"].op.scalar_op
    cases["expsin_inplace"] = ew.Elemwise(comp, {0: 0}).make_node(*cases["expsin"].inputs)
    # Many dimensions; 0-d.
    cases["fma5"] = ew.Elemwise(Composite(3, [(ps.mul, [("i", 0), ("i", 1)]),
                                              (ps.add, [("t", 0), ("i", 2)])])).make_node(
        var("float64", 5), var("float64", 3), var("float64", 5))
    cases["add0d"] = ew.Elemwise(ps.add).make_node(var("float64", 0), var("float64", 0))
    cases["add_f32_2d"] = ew.Elemwise(ps.add).make_node(var("float32", 2), var("float32", 1))
    return cases


GRAPH_CASES = _graph_cases()


# --------------------------------------------------------------------------
# Data and comparison


def edge_values(dtype) -> np.ndarray:
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


def random_values(dtype, n: int, rng) -> np.ndarray:
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


def data(dtypes, rng, n_random=600) -> list[np.ndarray]:
    """Every combination of edge values (a smaller set for three inputs), then random."""
    edges = [edge_values(d) for d in dtypes]
    if len(dtypes) == 3:
        edges = [e[:: max(1, len(e) // 9)] for e in edges]
    grids = np.meshgrid(*[np.arange(len(e)) for e in edges], indexing="ij")
    return [np.concatenate([e[g.ravel()], random_values(d, n_random, rng)])
            for e, g, d in zip(edges, grids, dtypes)]


def reference(node, inputs):
    storage = [[None]]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node.op.perform(node, list(inputs), storage)
    return np.asarray(storage[0][0])


def name_of(node) -> str:
    op = node.op.scalar_op
    return "cast" if isinstance(op, ps.Cast) else op.name


def assert_matches(got, want, name: str = "", exact: bool = False, fused: bool = False):
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


def call(fn, node, inputs, **kw):
    args = [None if is_weak(node, i) else a for i, a in enumerate(inputs)]
    return fn(*args, **kw)


def is_weak(node, i) -> bool:
    return any(pos == i for pos, _, _ in node.op.weak_inputs)



def array(shape, dtype, rng) -> np.ndarray:
    """Moderate values (the scalar tests cover the extremes)."""
    d = np.dtype(dtype)
    if d.kind == "f":
        return rng.standard_normal(shape).astype(d)
    return random_values(dtype, math.prod(shape), rng).reshape(shape)


def views(a: np.ndarray):
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


# --------------------------------------------------------------------------
# Random shapes, broadcast patterns and strides


#: input ndims of the nodes the random layouts run on (right-aligned broadcasting)
LAYOUT_NDIMS = [(4, 4, 4), (4, 2, 0), (1, 4, 3), (0, 0, 0), (2, 2, 1)]


def layout_node(ndims):
    # maximum with a NaN-free constant: a layout mistake shows as a wrong value
    comp = Composite(3, [(ps.mul, [("i", 0), ("i", 1)]), (ps.sub, [("t", 0), ("i", 2)]),
                         (ps.maximum, [("t", 1), ("c", -0.5)])])
    return ew.Elemwise(comp).make_node(*[var("float64", n) for n in ndims])


GRAPH_CASES.update({"layout_" + "_".join(map(str, n)): layout_node(n) for n in LAYOUT_NDIMS})


@st.composite
def layouts(draw):
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


def strided(values: np.ndarray, steps, transpose: bool) -> np.ndarray:
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


#: the inputs' shapes of the nodes :func:`check_any_strides` runs
STRIDED_SHAPES = {"expsin": [(9, 13), (13,)], "intmix": [(9, 13), (13,)],
                  "mixed": [(9, 13), (9, 13)], "leaky32": [(9, 13)]}


def check_any_strides(entry: str, run) -> None:
    """GRAPH_CASES[entry] (one of :data:`STRIDED_SHAPES`) on each input in
    every layout of :func:`views`, and into a transposed and a reversed,
    strided output; ``run(*inputs, out=None)`` computes the node."""
    node = GRAPH_CASES[entry]
    rng = np.random.default_rng(3)
    base = [array(s, v.dtype, rng) for s, v in zip(STRIDED_SHAPES[entry], node.inputs)]
    want = reference(node, base)
    for k in range(len(base)):
        for view in views(base[k]):
            inputs = list(base)
            inputs[k] = view
            assert_matches(run(*inputs), want, entry, fused=True)
    for out in (np.zeros((13, 9), want.dtype).T, np.zeros((18, 26), want.dtype)[::-2, 1::2]):
        assert run(*base, out=out) is out
        assert_matches(out, want, entry, fused=True)
