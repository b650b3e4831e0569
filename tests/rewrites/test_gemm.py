"""Gemm: ``z + alpha * dot(x, y)`` accumulated into ``z`` by BLAS.

The ``gemm`` rewrite fires where it should and nowhere else, results match
the unrewritten graph on every layout and linker, the in-place variant writes
only into buffers the caller gave away (or shared storage being updated), and
an update ``W - lr * (A @ B)`` costs no full temporary per call.
"""

import tracemalloc

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.rewrites.destroy import view_root
from tenure.symbolic.ops.gemm import Gemm, accumulate
from tenure.testing import verify_grad

NO_GEMM = tn.Mode(exclude=["gemm"])
CHECK = tn.Mode(linker="check")
FLOATS = ["float32", "float64"]
RTOL = {"float32": 1e-5, "float64": 1e-12}


def gemm_nodes(f):
    return [n for n in f.fgraph.apply_nodes if isinstance(n.op, Gemm)]


def matrices(rng, dtype, *shapes):
    return [rng.normal(size=shape).astype(dtype) for shape in shapes]


def assert_close(got, expected, dtype):
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, expected, rtol=RTOL[dtype], atol=RTOL[dtype])


def layouts(value):
    """``value`` as C-ordered, F-ordered and non-contiguous arrays (equal values)."""
    big = np.zeros((value.shape[0], 2 * value.shape[1]), dtype=value.dtype)
    big[:, ::2] = value
    strided = big[:, ::2]
    assert not strided.flags.c_contiguous and not strided.flags.f_contiguous
    return {"C": np.ascontiguousarray(value), "F": np.asfortranarray(value),
            "strided": strided}


# --------------------------------------------------------------------------
# Which expressions become a Gemm


PATTERNS = {
    "z + x@y": lambda z, x, y, a: z + x @ y,
    "x@y + z": lambda z, x, y, a: x @ y + z,
    "z + dot": lambda z, x, y, a: z + tn.dot(x, y),
    "z + 0.5*dot": lambda z, x, y, a: z + 0.5 * tn.dot(x, y),
    "z + (x@y)*a": lambda z, x, y, a: z + (x @ y) * a,
    "z + a*(x@y)": lambda z, x, y, a: z + a * (x @ y),
    "z - x@y": lambda z, x, y, a: z - x @ y,
    "z - a*(x@y)": lambda z, x, y, a: z - a * (x @ y),
    "z + -(x@y)": lambda z, x, y, a: z + -(x @ y),
    "2*(x@y) - z": lambda z, x, y, a: 2 * (x @ y) - z,
    "3*z - a*(x@y)": lambda z, x, y, a: 3 * z - a * (x @ y),
    "a*z + x@y": lambda z, x, y, a: a * z + x @ y,
    "z + x.T@y.T": lambda z, x, y, a: z + x.T @ y.T,
    "z + (y@x).T": lambda z, x, y, a: z + (y @ x).T,
    "z + tensordot": lambda z, x, y, a: z + tn.tensordot(x.T, y, axes=[[0], [0]]),
    "z + tensordot(.., (1, 1))": lambda z, x, y, a: z + tn.tensordot(x, y.T, axes=[[1], [1]]),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_each_pattern_becomes_one_gemm_with_the_same_values(pattern, dtype, mode, rng):
    z, x, y = (tn.matrix(n, dtype=dtype) for n in "zxy")
    a = tn.scalar("a", dtype=dtype)
    expr = PATTERNS[pattern](z, x, y, a)
    f = tn.function([z, x, y, a], expr, mode=mode, on_unused_input="ignore")
    g = tn.function([z, x, y, a], expr, mode=NO_GEMM, on_unused_input="ignore")
    assert "gemm" in f.rewrites_applied
    assert len(gemm_nodes(f)) == 1
    assert not gemm_nodes(g) and "gemm" not in g.rewrites_applied
    # Neither the product nor the scaled product is left in the graph.
    assert not [n for n in f.fgraph.apply_nodes if type(n.op).__name__ in
                ("Dot", "MatMul", "TensorDot")]
    zv, xv, yv = matrices(rng, dtype, (4, 5), (4, 3), (3, 5))
    if pattern in ("z + x.T@y.T", "z + (y@x).T"):
        xv, yv = np.ascontiguousarray(xv.T), np.ascontiguousarray(yv.T)
    av = np.asarray(0.75, dtype=dtype)
    assert_close(f(zv, xv, yv, av), g(zv, xv, yv, av), dtype)


def test_weak_python_scale_keeps_float32(rng):
    z, x, y = (tn.matrix(n, dtype="float32") for n in "zxy")
    f = tn.function([z, x, y], z - 0.1 * (x @ y), mode=CHECK)
    (node,) = gemm_nodes(f)
    assert node.outputs[0].dtype == "float32"
    assert node.inputs[1].dtype == "float32" and node.inputs[4].dtype == "float32"
    zv, xv, yv = matrices(rng, "float32", (3, 3), (3, 2), (2, 3))
    expected = zv - np.float32(0.1) * (xv @ yv)
    assert_close(f(zv, xv, yv), expected, "float32")


def test_mixed_float_operands_are_cast_like_numpy(rng):
    z, y = tn.matrix("z"), tn.matrix("y")
    x = tn.matrix("x", dtype="float32")
    f = tn.function([z, x, y], z + x @ y, mode=CHECK)
    assert gemm_nodes(f)
    zv, yv = matrices(rng, "float64", (3, 3), (2, 3))
    (xv,) = matrices(rng, "float32", (3, 2))
    assert_close(f(zv, xv, yv), zv + xv @ yv, "float64")


def test_a_chain_of_products_accumulates_into_one_buffer(rng):
    z, a, b, c, d = (tn.matrix(n) for n in "zabcd")
    f = tn.function([z, a, b, c, d], z + a @ b + c @ d, mode=CHECK)
    nodes = gemm_nodes(f)
    assert len(nodes) == 2
    # The outer one writes into the inner one's result (an intermediate).
    outer = f.fgraph.outputs[0].owner
    assert outer.op.inplace and view_root(f.fgraph.outputs[0]) is not z
    zv, av, bv, cv, dv = matrices(rng, "float64", (3, 4), (3, 2), (2, 4), (3, 5), (5, 4))
    assert_close(f(zv, av, bv, cv, dv), zv + av @ bv + cv @ dv, "float64")


def test_gemm_runs_before_fusion_swallows_the_add(rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    f = tn.function([z, x, y], tn.tanh(z + x @ y) * 2, mode=CHECK)
    assert gemm_nodes(f)
    zv, xv, yv = matrices(rng, "float64", (3, 3), (3, 4), (4, 3))
    assert_close(f(zv, xv, yv), np.tanh(zv + xv @ yv) * 2, "float64")


NOT_FIRING = {
    # z broadcast: a vector, a static (1, n) row, a 0-d number
    "vector z": lambda: (tn.vector("z"), tn.matrix("x"), tn.matrix("y"),
                         lambda z, x, y: z + x @ y),
    "row z": lambda: (tn.matrix("z", shape=(1, None)), tn.matrix("x"), tn.matrix("y"),
                      lambda z, x, y: z + x @ y),
    "scalar z": lambda: (tn.scalar("z"), tn.matrix("x"), tn.matrix("y"),
                         lambda z, x, y: z + x @ y),
    # the product broadcast against z
    "row product": lambda: (tn.matrix("z"), tn.matrix("x", shape=(1, None)), tn.matrix("y"),
                            lambda z, x, y: z + x @ y),
    # integer dtypes
    "int64": lambda: (tn.matrix("z", dtype="int64"), tn.matrix("x", dtype="int64"),
                      tn.matrix("y", dtype="int64"), lambda z, x, y: z + x @ y),
    "int32": lambda: (tn.matrix("z", dtype="int32"), tn.matrix("x", dtype="int32"),
                      tn.matrix("y", dtype="int32"), lambda z, x, y: z - x @ y),
    # z of another dtype than the product (the sum is float64, z float32)
    "float32 z": lambda: (tn.matrix("z", dtype="float32"), tn.matrix("x"), tn.matrix("y"),
                          lambda z, x, y: z + x @ y),
    # complex
    "complex": lambda: (tn.matrix("z", dtype="complex128"), tn.matrix("x", dtype="complex128"),
                        tn.matrix("y", dtype="complex128"), lambda z, x, y: z + x @ y),
    # not a matrix product
    "matrix-vector": lambda: (tn.vector("z"), tn.matrix("x"), tn.vector("y"),
                              lambda z, x, y: z + x @ y),
    "batched": lambda: (tn.tensor3("z"), tn.tensor3("x"), tn.tensor3("y"),
                        lambda z, x, y: z + x @ y),
    # elementwise product, not a matrix product
    "x*y": lambda: (tn.matrix("z"), tn.matrix("x"), tn.matrix("y"),
                    lambda z, x, y: z + x * y),
    # a scale that is not 0-d
    "matrix scale": lambda: (tn.matrix("z"), tn.matrix("x"), tn.matrix("y"),
                             lambda z, x, y: z + z * (x @ y)),
}


@pytest.mark.parametrize("case", sorted(NOT_FIRING))
def test_does_not_fire(case, rng):
    z, x, y, build = NOT_FIRING[case]()
    expr = build(z, x, y)
    f = tn.function([z, x, y], expr, mode=CHECK)
    assert "gemm" not in f.rewrites_applied
    assert not gemm_nodes(f)


def test_not_when_the_product_has_other_readers(rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    p = x @ y
    zv, xv, yv = matrices(rng, "float64", (3, 3), (3, 2), (2, 3))
    # returned as well
    f = tn.function([z, x, y], [z + p, p], mode=CHECK)
    assert not gemm_nodes(f)
    got_sum, got_p = f(zv, xv, yv)
    assert_close(got_sum, zv + xv @ yv, "float64")
    assert_close(got_p, xv @ yv, "float64")
    # read by another node
    f = tn.function([z, x, y], (z + p) * p, mode=CHECK)
    assert not gemm_nodes(f)
    assert_close(f(zv, xv, yv), (zv + xv @ yv) * (xv @ yv), "float64")
    # the scaled product read elsewhere
    q = 2 * p
    f = tn.function([z, x, y], [z + q, q.sum()], mode=CHECK)
    assert not gemm_nodes(f)
    # added to itself
    f = tn.function([x, y], p + p, mode=CHECK)
    assert not gemm_nodes(f)
    assert_close(f(xv, yv), 2 * (xv @ yv), "float64")


def test_excluding_gemm_by_name_or_phase():
    z, x, y = (tn.matrix(n) for n in "zxy")
    for exclude in (["gemm"], ["specialize"]):
        f = tn.function([z, x, y], z + x @ y, mode=tn.Mode(exclude=exclude))
        assert not gemm_nodes(f)
    f = tn.function([In(z, borrow=True, mutable=True), x, y], z + x @ y,
                    mode=tn.Mode(exclude=["gemm_inplace"]))
    (node,) = gemm_nodes(f)
    assert not node.op.inplace


# --------------------------------------------------------------------------
# Layouts, linkers, dtypes


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("z_layout", ["C", "F", "strided"])
@pytest.mark.parametrize("xy_layout", ["C", "F", "strided"])
def test_layouts_match_the_unrewritten_graph(z_layout, xy_layout, dtype, mode, rng):
    z, x, y = (tn.matrix(n, dtype=dtype) for n in "zxy")
    expr = z - 0.25 * (x @ y)
    f = tn.function([z, x, y], expr, mode=mode)
    g = tn.function([z, x, y], expr, mode=NO_GEMM)
    zv, xv, yv = matrices(rng, dtype, (5, 4), (5, 3), (3, 4))
    zl, xl, yl = layouts(zv)[z_layout], layouts(xv)[xy_layout], layouts(yv)[xy_layout]
    got = f(zl, xl, yl)
    assert_close(got, g(zv, xv, yv), dtype)
    # The caller's arrays are untouched and the result is the caller's own.
    np.testing.assert_array_equal(zl, zv)
    assert not np.shares_memory(got, zl)


@pytest.mark.host_buffers
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("z_layout", ["C", "F", "strided"])
def test_mutable_input_is_accumulated_into(z_layout, dtype, mode, rng):
    z, x, y = (tn.matrix(n, dtype=dtype) for n in "zxy")
    f = tn.function([In(z, borrow=True, mutable=True), x, y], Out(z + 1.5 * (x @ y)),
                    mode=mode)
    (node,) = gemm_nodes(f)
    assert node.op.inplace and node.op.destroy_map == {0: [0]}
    assert "gemm_inplace" in f.rewrites_applied
    zv, xv, yv = matrices(rng, dtype, (4, 6), (4, 3), (3, 6))
    expected = zv + np.asarray(1.5, dtype) * (xv @ yv)
    value = layouts(zv)[z_layout]
    got = f(value, xv, yv)
    assert_close(got, expected, dtype)
    assert np.shares_memory(got, value)     # the caller's buffer was the workspace
    assert_close(value, expected, dtype)


@pytest.mark.parametrize("spec", ["plain", "borrow"])
def test_protected_input_is_copied_not_overwritten(spec, mode, rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    z_in = z if spec == "plain" else In(z, borrow=True)
    f = tn.function([z_in, x, y], z + x @ y, mode=mode)
    (node,) = gemm_nodes(f)
    assert not node.op.inplace and not node.op.destroy_map
    zv, xv, yv = matrices(rng, "float64", (3, 3), (3, 2), (2, 3))
    before = zv.copy()
    for _ in range(2):
        got = f(zv, xv, yv)
        np.testing.assert_array_equal(zv, before)
        assert not np.shares_memory(got, zv)
        assert_close(got, before + xv @ yv, "float64")


def test_never_into_a_buffer_read_through_another_input(mode, rng):
    z, y = tn.matrix("z"), tn.matrix("y")
    zv, yv = matrices(rng, "float64", (3, 3), (3, 3))
    for expr in (z + z @ y, z + y @ z, z + z.T @ y, z + z[0, 0] * (y @ y)):
        f = tn.function([In(z, borrow=True, mutable=True), y], expr, mode=mode)
        assert gemm_nodes(f)
        assert not [n for n in gemm_nodes(f) if n.op.inplace]
        g = tn.function([z, y], expr, mode=NO_GEMM)
        assert_close(f(zv.copy(), yv), g(zv, yv), "float64")


def test_mutable_inputs_that_alias_each_other(mode, rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    f = tn.function([In(z, borrow=True, mutable=True), In(x, borrow=True, mutable=True), y],
                    z + x @ y, mode=mode)
    (zv,) = matrices(rng, "float64", (3, 3))
    yv = matrices(rng, "float64", (3, 3))[0]
    expected = zv + zv @ yv
    shared_buffer = zv.copy()
    assert_close(f(shared_buffer, shared_buffer, yv), expected, "float64")


def test_not_in_place_when_z_is_also_returned_or_read_later(mode, rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    zv, xv, yv = matrices(rng, "float64", (3, 3), (3, 2), (2, 3))
    f = tn.function([In(z, borrow=True, mutable=True), x, y], [z, z + x @ y], mode=mode)
    got_z, got_sum = f(zv.copy(), xv, yv)
    np.testing.assert_array_equal(got_z, zv)
    assert_close(got_sum, zv + xv @ yv, "float64")
    f = tn.function([In(z, borrow=True, mutable=True), x, y],
                    [(z + x @ y) * z.sum(), tn.exp(z)], mode=mode)
    got_a, got_b = f(zv.copy(), xv, yv)
    assert_close(got_a, (zv + xv @ yv) * zv.sum(), "float64")
    assert_close(got_b, np.exp(zv), "float64")


# --------------------------------------------------------------------------
# Shared-variable updates


@pytest.mark.parametrize("dtype", FLOATS)
def test_update_accumulates_into_the_shared_buffer(dtype, mode, rng):
    w0, xv, gv = matrices(rng, dtype, (4, 3), (6, 4), (6, 3))
    W = tn.shared(w0.copy(), name="W", borrow=True)
    X, G = tn.matrix("X", dtype=dtype), tn.matrix("G", dtype=dtype)
    lr = tn.scalar("lr", dtype=dtype)
    step = tn.function([X, G, lr], [], updates=[(W, W - lr * (X.T @ G))], mode=mode)
    assert "gemm" in step.rewrites_applied and "gemm_inplace" in step.rewrites_applied
    (update,) = step.fgraph.outputs
    assert isinstance(update.owner.op, Gemm) and update.owner.op.inplace
    assert view_root(update) is step.fgraph.inputs[-1]     # W's own storage
    buffer = W.get_value(borrow=True, return_internal_type=True)
    expected = w0.copy()
    for _ in range(3):
        step(xv, gv, np.asarray(0.1, dtype))
        expected = expected - np.asarray(0.1, dtype) * (xv.T @ gv)
        assert W.get_value(borrow=True, return_internal_type=True) is buffer
    assert_close(W.get_value(), expected, dtype)


def test_update_with_python_learning_rate(mode, rng):
    w0, av, bv = matrices(rng, "float64", (3, 3), (3, 5), (5, 3))
    W = tn.shared(w0.copy(), borrow=True)
    A, B = tn.matrix("A"), tn.matrix("B")
    step = tn.function([A, B], [], updates=[(W, W - 0.01 * (A @ B))], mode=mode)
    buffer = W.get_value(borrow=True, return_internal_type=True)
    step(av, bv)
    step(av, bv)
    assert W.get_value(borrow=True, return_internal_type=True) is buffer
    assert_close(W.get_value(), w0 - 0.02 * (av @ bv), "float64")


def test_shared_variable_not_updated_is_protected(mode, rng):
    w0, xv, gv = matrices(rng, "float64", (4, 3), (6, 4), (6, 3))
    W = tn.shared(w0.copy(), borrow=True)
    X, G = tn.matrix("X"), tn.matrix("G")
    f = tn.function([X, G], W - 0.5 * (X.T @ G), mode=mode)
    (node,) = gemm_nodes(f)
    assert not node.op.inplace
    got = f(xv, gv)
    np.testing.assert_array_equal(W.get_value(borrow=True), w0)
    assert_close(got, w0 - 0.5 * (xv.T @ gv), "float64")


def test_update_not_in_place_when_the_old_value_is_returned(mode, rng):
    w0, av, bv = matrices(rng, "float64", (3, 3), (3, 2), (2, 3))
    W = tn.shared(w0.copy())
    A, B = tn.matrix("A"), tn.matrix("B")
    f = tn.function([A, B], W * 1, updates=[(W, W - A @ B)], mode=mode)
    np.testing.assert_array_equal(f(av, bv), w0)
    assert_close(W.get_value(), w0 - av @ bv, "float64")


def test_update_from_the_gradient_of_dot_is_in_place(mode, rng):
    w0, xv = matrices(rng, "float64", (4, 3), (6, 4))
    results = []
    for m in (mode, NO_GEMM):
        # (each mode's linker computes where its storage is)
        W = tn.shared(w0.copy(), name="W", borrow=True,
                      device="cuda" if m.linker == "cuda" else "cpu")
        X = tn.matrix("X")
        cost = (tn.tanh(tn.dot(X, W)) ** 2).sum()
        step = tn.function([X], cost, updates=[(W, W - 0.1 * tn.grad(cost, W))], mode=m)
        buffer = W.get_value(borrow=True, return_internal_type=True)
        costs = [step(xv) for _ in range(3)]
        results.append((costs, W.get_value()))
        if m is mode:
            # The gradient is a tensordot of X and the back-propagated error:
            # it is accumulated straight into W's storage.
            (update,) = step.fgraph.outputs[1:]
            assert isinstance(update.owner.op, Gemm) and update.owner.op.inplace
            assert W.get_value(borrow=True, return_internal_type=True) is buffer
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)


@pytest.mark.usefixtures("freeing_intermediates")
@pytest.mark.parametrize("product", ["A @ B", "A.T @ B", "A @ B.T", "(A @ B).T"])
def test_inplace_update_allocates_no_full_matrix_per_call(product):
    n = 1000
    rng = np.random.default_rng(0)
    A, B = tn.matrix("A"), tn.matrix("B")
    av, bv = rng.normal(size=(n, n)), rng.normal(size=(n, n))
    matrix_bytes = n * n * 8
    build = {"A @ B": lambda: A @ B, "A.T @ B": lambda: A.T @ B,
             "A @ B.T": lambda: A @ B.T, "(A @ B).T": lambda: (A @ B).T}[product]

    def peak(mode):
        W = tn.shared(np.zeros((n, n)), borrow=True)
        step = tn.function([A, B], [], updates=[(W, W - 0.01 * build())], mode=mode)
        step(av, bv)            # steady state: whatever is allocated once is allocated
        tracemalloc.start()
        try:
            step(av, bv)
            step(av, bv)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    with_gemm = peak(tn.Mode())
    without = peak(NO_GEMM)
    assert with_gemm < 0.05 * matrix_bytes, with_gemm
    assert without >= matrix_bytes    # the product is a full temporary without gemm


# --------------------------------------------------------------------------
# The op itself


def perform(op, z, alpha, x, y, beta, buffer=None):
    node = op.make_node(tn.matrix("z", dtype=z.dtype), np.asarray(alpha, z.dtype),
                        tn.matrix("x", dtype=x.dtype), tn.matrix("y", dtype=y.dtype),
                        np.asarray(beta, z.dtype))
    cell = [buffer]
    op.perform(node, [z, np.asarray(alpha, z.dtype), x, y, np.asarray(beta, z.dtype)], [cell])
    return cell[0]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_inplace_perform_writes_into_z_for_every_layout(layout, dtype, rng):
    zv, xv, yv = matrices(rng, dtype, (5, 4), (5, 7), (7, 4))
    expected = np.asarray(0.5, dtype) * zv + np.asarray(-2, dtype) * (xv @ yv)
    for x_layout in ("C", "F", "strided"):
        z = layouts(zv.copy())[layout]
        out = perform(Gemm(inplace=True), z, -2, layouts(xv)[x_layout], yv, 0.5)
        assert out is z
        assert_close(z, expected, dtype)


def test_non_inplace_perform_reuses_its_output_buffer(rng):
    zv, xv, yv = matrices(rng, "float64", (3, 4), (3, 2), (2, 4))
    buffer = np.empty((3, 4))
    out = perform(Gemm(), zv, 1, xv, yv, 1, buffer=buffer)
    assert out is buffer
    assert_close(out, zv + xv @ yv, "float64")
    # A buffer that aliases an input is not reused.
    out = perform(Gemm(), zv, 1, xv, yv, 1, buffer=zv)
    assert out is not zv
    assert_close(out, zv + xv @ yv, "float64")


def test_read_only_z_falls_back_to_a_copy(rng):
    zv, xv, yv = matrices(rng, "float64", (3, 3), (3, 3), (3, 3))
    expected = zv + xv @ yv
    zv.setflags(write=False)
    out = perform(Gemm(inplace=True), zv, 1, xv, yv, 1)
    assert not np.shares_memory(out, zv)
    assert_close(out, expected, "float64")


def test_x_aliasing_z_inside_perform(rng):
    zv, yv = matrices(rng, "float64", (3, 3), (3, 3))
    expected = zv + zv.T @ yv
    out = perform(Gemm(inplace=True), zv, 1, zv.T, yv, 1)
    assert out is zv
    assert_close(zv, expected, "float64")


def test_run_time_broadcasting_matches_add(mode, rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    out = Gemm()(z, 2.0, x, y, 0.5)
    f = tn.function([z, x, y], out, mode=mode)
    xv, yv = matrices(rng, "float64", (3, 2), (2, 4))
    for zv in matrices(rng, "float64", (1, 4), (3, 1), (1, 1), (3, 4)):
        assert_close(f(zv, xv, yv), 0.5 * zv + 2 * (xv @ yv), "float64")
    # the product broadcast against z
    xv1, zv = matrices(rng, "float64", (1, 2), (3, 4))
    assert_close(f(zv, xv1, yv), 0.5 * zv + 2 * (xv1 @ yv), "float64")
    # and in place, where z cannot hold the result
    target = np.ones((1, 4))
    got = perform(Gemm(inplace=True), target, 2, xv, yv, 0.5)
    assert_close(got, 0.5 + 2 * (xv @ yv), "float64")
    np.testing.assert_array_equal(target, np.ones((1, 4)))


def test_zero_scales_propagate_nan_like_the_expression():
    x = np.array([[np.inf, 1.0]])
    y = np.ones((2, 1))
    with np.errstate(invalid="ignore"):
        got = perform(Gemm(), np.zeros((1, 1)), 0, x, y, 1)
        assert np.isnan(got).all()          # 0 * inf
        got = perform(Gemm(), np.full((1, 1), np.nan), 1, np.ones((1, 2)), y, 0)
        assert np.isnan(got).all()          # 0 * nan


@pytest.mark.parametrize("shape", [((0, 3), (3, 4)), ((2, 0), (0, 4)), ((2, 3), (3, 0))])
def test_empty_operands(shape, rng):
    x = np.ones(shape[0])
    y = np.ones(shape[1])
    z = np.full((x.shape[0], y.shape[1]), 2.0)
    got = perform(Gemm(inplace=True), z, 3, x, y, 1)
    np.testing.assert_array_equal(got, 2.0 + 3 * (x @ y))


def test_accumulate_on_plain_arrays(rng):
    zv, xv, yv = matrices(rng, "float32", (4, 4), (4, 3), (3, 4))
    target = zv.copy()
    accumulate(target, np.float32(2), xv, yv, np.float32(1))
    assert_close(target, zv + 2 * (xv @ yv), "float32")


def test_make_node_checks_types_and_shapes():
    m, v = tn.matrix("m"), tn.vector("v")
    with pytest.raises(TypeError, match="z must be a matrix"):
        Gemm()(v, 1.0, m, m)
    with pytest.raises(TypeError, match="y must be a matrix"):
        Gemm()(m, 1.0, m, v)
    with pytest.raises(TypeError, match="float32 or float64"):
        i = tn.matrix("i", dtype="int64")
        Gemm()(i, 1, i, i)
    with pytest.raises(TypeError, match="x must have the dtype of z"):
        Gemm()(m, 1.0, tn.matrix("f", dtype="float32"), m)
    with pytest.raises(TypeError, match="alpha must be a 0-d"):
        Gemm()(m, v, m, m)
    with pytest.raises(TypeError, match="beta must have the dtype of z"):
        Gemm()(m, 1.0, m, m, tn.scalar("b", dtype="float32"))
    with pytest.raises(TypeError, match="alpha must be a real number"):
        Gemm()(m, "2", m, m)
    with pytest.raises(ValueError, match="not aligned"):
        Gemm()(m, 1.0, tn.matrix("a", shape=(2, 3)), tn.matrix("b", shape=(4, 5)))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        Gemm()(tn.matrix("c", shape=(3, 5)), 1.0, tn.matrix("a", shape=(2, 3)),
               tn.matrix("b", shape=(3, 5)))
    # Python numbers take z's dtype.
    out = Gemm()(tn.matrix("s", dtype="float32"), 0.1, tn.matrix("a", dtype="float32"),
                 tn.matrix("b", dtype="float32"), 2)
    assert out.dtype == "float32"
    assert out.owner.inputs[1].dtype == "float32"


def test_static_shape_and_infer_shape(rng):
    z = tn.matrix("z")
    x, y = tn.matrix("x", shape=(3, None)), tn.matrix("y", shape=(None, 4))
    out = Gemm()(z, 1.0, x, y)
    assert out.type.shape == (3, 4)
    zv, xv, yv = matrices(rng, "float64", (1, 5), (2, 3), (3, 5))
    z2, x2, y2 = tn.matrix("z2"), tn.matrix("x2"), tn.matrix("y2")
    f = tn.function([z2, x2, y2], Gemm()(z2, 1.0, x2, y2).shape)
    assert not gemm_nodes(f)    # the shape comes from infer_shape, without the product
    np.testing.assert_array_equal(f(zv, xv, yv), (2, 5))


def test_runtime_errors_are_clear(mode, rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    f = tn.function([z, x, y], z + x @ y, mode=mode)
    zv, xv, yv = matrices(rng, "float64", (3, 3), (3, 2), (4, 3))
    with pytest.raises(ValueError, match="not aligned"):
        f(zv, xv, yv)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        f(np.ones((2, 5)), xv, np.ones((2, 3)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_gradient(dtype, rng):
    points = matrices(rng, dtype, (3, 4), (3, 2), (2, 4)) + [np.asarray(0.7, dtype),
                                                             np.asarray(-1.3, dtype)]
    verify_grad(lambda z, x, y, a, b: Gemm()(z, a, x, y, b), points, rng=rng)


def test_gradient_through_the_rewrite_matches_the_unfused_expression(rng):
    z, x, y = (tn.matrix(n) for n in "zxy")
    a = tn.scalar("a")
    cost = (tn.tanh(Gemm()(z, a, x, y, 2.0)) ** 2).sum()
    reference = (tn.tanh(2.0 * z + a * (x @ y)) ** 2).sum()
    f = tn.function([z, x, y, a], tn.grad(cost, [z, x, y, a]))
    g = tn.function([z, x, y, a], tn.grad(reference, [z, x, y, a]), mode=NO_GEMM)
    zv, xv, yv = matrices(rng, "float64", (3, 4), (3, 2), (2, 4))
    for got, want in zip(f(zv, xv, yv, 0.3), g(zv, xv, yv, 0.3)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_str_and_equality():
    assert str(Gemm()) == "gemm" and str(Gemm(inplace=True)) == "gemm_inplace"
    assert Gemm() == Gemm(False) and Gemm() != Gemm(True)
    assert hash(Gemm(True)) == hash(Gemm(inplace=True))
