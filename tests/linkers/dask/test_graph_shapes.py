"""Graph shapes a data-parallel user runs first (issue 31): gradients whose
contractions ``x.T @ delta`` sum over the chunked rows, reductions over
chunked axes feeding further ops, vector/matrix mixes, on inputs chunked
along rows, columns or both, with uneven last chunks.  Each against the C
linker, computed with Dask's threaded scheduler (the default)."""

import numpy as np
import pytest

import tenure as tn
from tenure import In

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

LAZY = tn.Mode(linker="dask")
C = tn.Mode(linker="c")

#: chunkings of a (300, 12) matrix: rows, columns, both, uneven last chunks
CHUNKINGS = {"rows": (100, 12), "columns": (300, 5), "both": (70, 5), "one": (300, 12),
             "uneven": ((128, 128, 44), (7, 5))}


def compare(inputs, outputs, args, chunks, updates=(), rtol=1e-10):
    """The dask linker (its lazy outputs computed) against the C linker."""
    lazy = tn.function([In(v, chunks=c) for v, c in zip(inputs, chunks)], outputs, mode=LAZY)
    reference = tn.function(inputs, outputs, mode=C)
    got, want = dask.compute(*lazy(*args)), reference(*args)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12 * max(1, np.abs(w).max()),
                                   err_msg=f"output {k}")


@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS.keys())
def test_gradient_of_a_nonlinear_model_over_chunked_rows(rng, chunks):
    """The issue's example: ``(tanh(x @ w) ** 2).sum()`` and its gradient,
    whose contraction over the rows had an index in common with a new axis
    of its per-chunk partial (AxisError in every task)."""
    w = tn.shared(rng.standard_normal(12), name="w")
    x = tn.matrix("x")
    loss = (tn.tanh(x @ w) ** 2).sum()
    compare([x], [loss, tn.grad(loss, w)], [rng.standard_normal((300, 12))], [chunks])


def test_the_issue_example_on_a_dask_array(rng):
    w = tn.shared(rng.standard_normal(32), name="w")
    x = tn.matrix("x")
    loss = (tn.tanh(x @ w) ** 2).sum()
    f = tn.function([x], [loss, tn.grad(loss, w)], mode=tn.Mode(linker="dask", compute=True))
    data = da.random.default_rng(1).standard_normal((2_000, 32), chunks=(300, 32))
    got = f(data)
    want = tn.function([x], [loss, tn.grad(loss, w)], mode=C)(data.compute())
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-10)


@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS.keys())
def test_gradients_of_an_mlp(rng, chunks):
    """A hidden layer: matrix-matrix products, a matrix delta contracted
    over the rows, a bias summed over them."""
    x, y = tn.matrix("x"), tn.vector("y")
    w1, b1 = tn.shared(rng.standard_normal((12, 6)) / 3, name="w1"), tn.shared(np.zeros(6))
    w2 = tn.shared(rng.standard_normal(6), name="w2")
    h = tn.tanh(x @ w1 + b1)
    loss = tn.mean((h @ w2 - y) ** 2) + 0.01 * (w1 ** 2).sum()
    rows = (chunks[0],)
    compare([x, y], [loss, *tn.grad(loss, [w1, b1, w2])],
            [rng.standard_normal((300, 12)), rng.standard_normal(300)], [chunks, rows])


@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS.keys())
def test_reductions_over_chunked_axes_feed_further_ops(rng, chunks):
    x, v = tn.matrix("x"), tn.vector("v")
    centred = x - x.mean(axis=0)
    scaled = centred / tn.sqrt((centred ** 2).mean(axis=0) + 1.0)
    outs = [scaled, (x.sum(axis=1) * (x @ v)).sum(), x.T @ (x @ v), tn.softmax(x @ v),
            (x.max(axis=0) - x.min(axis=1).sum()) @ v, x.sum(axis=0) @ (x.T @ x.sum(axis=1))]
    compare([x, v], outs, [rng.standard_normal((300, 12)), rng.standard_normal(12)],
            [chunks, (chunks[1],)])


@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS.keys())
def test_gradients_with_respect_to_the_chunked_input(rng, chunks):
    """Gradients flowing back into the data (the shape of the rows) and a
    vector/matrix mix: ``v @ x.T``, outer products, a column broadcast."""
    x, v = tn.matrix("x"), tn.vector("v")
    u = x @ v
    loss = (tn.sigmoid(u)[:, None] * x).sum() + (v @ x.T).mean() + tn.outer(u, v).max()
    compare([x, v], [loss, *tn.grad(loss, [x, v])],
            [rng.standard_normal((300, 12)), rng.standard_normal(12)], [chunks, (chunks[1],)])


def test_a_product_with_a_constant_matrix(rng):
    """A rows product whose matrix is a constant (the gradient of a vector
    product writes one): the kernel holds the constant, its task must not
    pass it as well (it took the constant for the other operand)."""
    x, v = tn.matrix("x"), tn.vector("v")
    outs = [tn.constant(np.ones((1, 1))) @ v[None, :],
            tn.grad(tn.logsumexp(x, axis=1) @ v, x)]
    compare([x, v], outs, [rng.standard_normal((1, 1)), rng.standard_normal(1)],
            [(1, 1), (1,)])


@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS.keys())
def test_gradients_of_indexing_and_joins(rng, chunks):
    """Their gradients write into a region (``IncSubtensor``) and cut a
    gradient into pieces (``Split``): both were refused at compile time."""
    x, v = tn.matrix("x"), tn.vector("v")
    joined = tn.concatenate([x[1:], x[::-2]], axis=0)
    loss = ((joined @ v) ** 2).sum() + tn.tanh(x[:, -1]).sum() + (x[0] * v).sum() \
        + (x[:, None] * v).mean()
    compare([x, v], [loss, *tn.grad(loss, [x, v])],
            [rng.standard_normal((300, 12)), rng.standard_normal(12)], [chunks, (chunks[1],)])


@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS.keys())
def test_product_of_a_matrix_the_region_computes(rng, chunks):
    """``tanh(x) @ W * x`` with a square ``W``: one kernel computes ``tanh(x)``
    chunk by chunk along the columns, but the product needs its whole inner
    axis (the kernel multiplied a block of columns by rows of ``W`` that did
    not fit)."""
    x, w = tn.matrix("x"), tn.matrix("w")
    out = tn.tanh(x) @ w * x
    loss = tn.softmax(out).sum() + out.sum()
    compare([x, w], [out, loss, *tn.grad(loss, [x, w])],
            [rng.standard_normal((300, 12)), rng.standard_normal((12, 12))],
            [chunks, (chunks[1], chunks[1])])
