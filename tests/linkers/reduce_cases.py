"""The reduction nodes every linker's kernel tests run, and how their results
are compared with NumPy: every kind on every dtype over several axes
(``REDUCE_CASES``), FusedReduce and plain reductions from real compiled graphs
(``GRAPH_CASES``), the values (``values``, ``graph_inputs``), layouts of the
same values (``layouts``) and the comparison (``check``: exact where NumPy's
result does not depend on the order of summation, else within both orders'
error bounds).  Used by tests/linkers/c/test_reduce_c.py and
tests/linkers/cuda/test_reduce_cuda.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.reduce import Reduce
from tenure.symbolic.types import TensorType

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float32", "float64"]
KINDS = ["sum", "prod", "mean", "max", "min", "any", "all"]
FUNCS = {"sum": tn.sum, "prod": tn.prod, "mean": tn.mean, "max": tn.max, "min": tn.min,
         "any": tn.any, "all": tn.all}
#: (label, axis as the user writes it, keepdims), on a 3-d input
AXES = [("all", None, False), ("a1", 1, False), ("a02k", (0, 2), True), ("neg", -1, False),
        ("none", (), False), ("a0k", (0,), True)]


def var(dtype, ndim):
    return TensorType(dtype, (None,) * ndim)()


# --------------------------------------------------------------------------
# The nodes


#: the dtypes every axis variant is compiled for (the others: the first three)
FULL_DTYPES = ("bool", "int8", "float32", "float64")


def _reduce_cases() -> dict:
    """Every kind x dtype; every axis variant for FULL_DTYPES (fewer compiles)."""
    cases = {}
    for fn in KINDS:
        for dtype in DTYPES:
            for label, axis, keepdims in AXES if dtype in FULL_DTYPES else AXES[:3]:
                node = FUNCS[fn](var(dtype, 3), axis=axis, keepdims=keepdims).owner
                assert isinstance(node.op, Reduce)
                cases[f"{fn}__{dtype}__{label}"] = node
            small = ((0, None, False), (0, (), True), (1, 0, True))
            for ndim, axis, keepdims in small if dtype in ("int8", "float64") else small[:1]:
                node = FUNCS[fn](var(dtype, ndim), axis=axis, keepdims=keepdims).owner
                cases[f"{fn}__{dtype}__{ndim}d{int(keepdims)}"] = node
    return cases


def fused_nodes(outputs, *inputs) -> list:
    """The reductions (FusedReduce / Reduce) of a graph compiled with the default rewrites
    (but softmax_by_hand)."""
    # (a softmax written out is kept as written: its reductions are the cases)
    f = tn.function(list(inputs), outputs, mode=tn.Mode(exclude=["softmax_by_hand"]))
    return [n for n in f.fgraph.toposort() if isinstance(n.op, (FusedReduce, Reduce))]


def _graph_cases() -> dict:
    cases = {}
    for dtype in ("float32", "float64"):
        x, y = TensorType(dtype, (None, None))("x"), TensorType(dtype, (None, None))("y")
        z = TensorType(dtype, (None,))("z")
        (node,) = fused_nodes((tn.exp(x) * y).sum(axis=1), x, y)
        assert isinstance(node.op, FusedReduce)
        cases[f"expmul_{dtype}"] = node
        # The brief's softmax: stabilize turns log(sum(exp(x))) into a LogSumExp
        # node (no C code here), so its reductions, if any, and those of the
        # max-shifted softmax are taken.
        m = tn.max(x, axis=1, keepdims=True)
        nodes = (fused_nodes(tn.exp(x - tn.log(tn.sum(tn.exp(x), axis=1, keepdims=True))), x)
                 + fused_nodes(tn.exp(x - m) / tn.sum(tn.exp(x - m), axis=1, keepdims=True), x))
        assert len(nodes) >= 2, [str(n.op) for n in nodes]
        for i, n in enumerate(nodes):
            cases[f"softmax{i}_{dtype}"] = n
        c = TensorType(dtype, (None, 1))("c")
        (node,) = fused_nodes(tn.sum(tn.exp(x - c), axis=1, keepdims=True), x, c)
        assert isinstance(node.op, FusedReduce)
        cases[f"sumexpshift_{dtype}"] = node
        (node,) = fused_nodes(tn.sum(tn.exp(x), axis=1), x)
        cases[f"sumexp_{dtype}"] = node
        (node,) = fused_nodes(tn.max(tn.abs(x - z), axis=0, keepdims=True), x, z)
        assert isinstance(node.op, FusedReduce)
        cases[f"maxabs_{dtype}"] = node
        (node,) = fused_nodes(tn.prod(x * 0.5 + 1, axis=(0, 1)), x)
        cases[f"prod_{dtype}"] = node
        (node,) = fused_nodes(tn.min(tn.sqrt(x) + z, axis=1), x, z)
        cases[f"minsqrt_{dtype}"] = node
    a = TensorType("int8", (None, None))("a")
    (node,) = fused_nodes(tn.sum(a > 0, axis=1), a)  # bool values, summed as int64
    cases["countpos"] = node
    (node,) = fused_nodes(tn.sum(a * a, axis=0), a)  # int8 wraps, then widens
    cases["sumsq_i8"] = node
    i64 = TensorType("int64", (None,))("i")
    (node,) = fused_nodes(tn.sum(i64 ** i64, axis=0), i64)  # negative power: ValueError
    cases["pow_i64"] = node
    return cases


REDUCE_CASES = _reduce_cases()
GRAPH_CASES = _graph_cases()
FUSED = {k: n for k, n in GRAPH_CASES.items() if isinstance(n.op, FusedReduce)}


# --------------------------------------------------------------------------
# Comparing with perform


def perform(node, inputs):
    cell = [None]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        node.op.perform(node, list(inputs), [cell])
    return cell[0]


def abs_sum(node, inputs):
    """Per output element, the sum of |values| reduced into it (the scale of a
    float sum's rounding error)."""
    op = node.op
    values = inputs[0] if isinstance(op, Reduce) else elem_values(node, inputs)
    with np.errstate(all="ignore"):
        mags = np.abs(np.asarray(values, dtype=np.float64))
        mags = np.where(np.isfinite(mags), mags, 0)
        return np.sum(mags, axis=op.axis, keepdims=op.keepdims)


def elem_values(node, inputs):
    elem = node.op.elemwise_op.make_node(*node.inputs)
    cell = [None]
    with np.errstate(all="ignore"):
        elem.op.perform(elem, list(inputs), [cell])
    return cell[0]


def check(node, fn, inputs, out=None):
    """The compiled entry ``fn`` gives what ``perform`` gives (or raises the same)."""
    try:
        ref = perform(node, inputs)
    except ValueError:
        with pytest.raises(ValueError, match="zero-size array"):
            fn(*inputs) if out is None else fn(*inputs, out=out)
        return
    with warnings.catch_warnings():
        # NumPy's warning for an empty mean (test_empty_max_raises_valueerror checks it)
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        got = fn(*inputs) if out is None else fn(*inputs, out=out)
    if out is not None:
        assert got is out
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype,
                                                               ref.shape)
    kind = node.op.fn_name
    if ref.dtype.kind != "f" or kind in ("max", "min"):
        np.testing.assert_array_equal(got, ref)
        return
    eps = np.finfo(ref.dtype).eps
    # Both sides round: pairwise summation within ~log2(n) eps of sum|x|, plain
    # accumulation (either side, NumPy's too: along outer axes, and products)
    # within n eps, typically sqrt(n) eps; exp & co. within a few ulps.
    full = np.broadcast_shapes(*(np.shape(a) for a in inputs))
    count = max(1, int(np.prod([full[a] for a in node.op.axis])))
    if kind == "prod":
        # Each of the n - 1 multiplications rounds once (relative u = eps/2),
        # whatever the order: each side is within gamma(n-1) = (n-1)u/(1-(n-1)u)
        # of the exact product, so the two within about (n - 1) eps of each
        # other.  Not sqrt(n): repeated values (the broadcast layouts) make the
        # roundings equal, and a tree adds equal roundings up (a device's
        # 256-thread block, float32, 2 x 300 repeated values: 116 eps).
        # (A product that underflows does so earlier or later with the order.)
        bound = 2 * (count - 1) * (eps / 2) / (1 - (count - 1) * eps / 2)
        np.testing.assert_allclose(got, ref, rtol=16 * eps + bound,
                                   atol=np.finfo(ref.dtype).tiny, equal_nan=True)
        return
    scale = abs_sum(node, inputs)
    if kind == "mean":
        scale = scale / count
    both_nan = np.isnan(got) & np.isnan(ref)
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - ref)
    ok = both_nan | (got == ref) | (err <= (16 + 4 * np.sqrt(count)) * eps * scale)
    assert np.all(ok), (got, ref)


def values(rng, dtype, shape, special=False, kind=None):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < (0.9 if kind == "all" else 0.2))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -100), min(int(info.max), 100)
        if kind == "prod":
            lo, hi = max(lo, -3), 3
        return np.asarray(rng.integers(lo, hi + 1, shape)).astype(dtype)
    if kind == "prod":
        x = rng.uniform(0.5, 1.5, shape)
    else:
        x = rng.standard_normal(shape) * 10
    x = np.asarray(x).astype(dtype)
    if special and x.size:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, 3)
        flat[picks[0]] = np.nan
        flat[picks[1]] = np.inf
        flat[picks[2]] = -np.inf
    return x


def layouts(rng, x):
    """``x`` itself and views of the same values in other layouts."""
    yield x
    if x.ndim == 0:
        return
    big = np.empty(tuple(2 * n for n in x.shape), x.dtype)
    view = big[tuple(slice(None, None, 2) for _ in x.shape)]
    view[...] = x
    yield view                                           # strided
    yield x[tuple(slice(None, None, -1) for _ in x.shape)].copy()[
        tuple(slice(None, None, -1) for _ in x.shape)]   # negative strides
    yield np.asfortranarray(x)                            # transposed memory order
    if x.ndim >= 2:
        yield np.broadcast_to(x[:1], x.shape)             # stride 0 (broadcast view)
    yield np.broadcast_to(x[..., :1], x.shape)            # stride 0 innermost


SHAPES = [(3, 4, 5), (2, 1, 300), (0, 4, 5), (3, 0, 2), (1, 1, 1)]


def graph_inputs(rng, node, shape, special=False):
    inputs = []
    for v in node.inputs:
        s = shape[-v.ndim:] if v.ndim else ()
        x = values(rng, v.dtype, s, special)
        if node.op.fn_name == "prod":  # x * 0.5 + 1 near 1: no overflow, whatever the order
            x[np.isfinite(x)] /= 500
        if v.dtype.startswith("float") and "sqrt" in str(node.op):
            x = np.abs(x)
        inputs.append(x)
    return inputs


def check_every_dtype_and_axes(kind: str, runner_of, rng) -> None:
    """Every case of ``kind`` (every dtype, axis variant, 0-d and 1-d input)
    on every shape of ``SHAPES``, plain and with NaN/inf, in every layout;
    ``runner_of(key)``: the callable computing case ``key``."""
    for key, node in REDUCE_CASES.items():
        if not key.startswith(kind + "__"):
            continue
        fn = runner_of(key)
        dtype, ndim = node.inputs[0].dtype, node.inputs[0].ndim
        shapes = SHAPES if ndim == 3 else [()] if ndim == 0 else [(7,), (0,), (1000,)]
        for shape in shapes:
            for special in (False, True):
                x = values(rng, dtype, shape, special, kind)
                for layout in layouts(rng, x):
                    check(node, fn, [layout])


def permuted_view(x: np.ndarray, perm, steps) -> np.ndarray:
    """The values of ``x`` seen through a base whose axes are laid out in
    the order ``perm``, stepped by ``steps`` (a negative step: reversed)."""
    shape = x.shape
    base_shape = [shape[p] * abs(steps[p]) for p in perm]
    base = np.zeros(base_shape, x.dtype).transpose(np.argsort(perm))
    view = base[tuple(slice(None, None, s) for s in steps)]
    view = view[tuple(slice(0, n) for n in shape)]
    view[...] = x
    return view
