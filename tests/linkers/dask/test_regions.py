"""What the dask linker runs together: regions of elementwise nodes and the
products and reductions around them as one kernel per chunk (regions.py),
the graph specialised to a call's shapes (specialize.py), and the kernels
themselves (chunks.py).  Every result is checked against the C linker."""

import pickle

import numpy as np
import pytest

import tenure as tn
from tenure import In

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from tenure.linkers.dask.chunks import ChunkKernel, joined  # noqa: E402  (needs dask)
from tenure.linkers.dask.regions import Region, lowering_order  # noqa: E402
from tenure.linkers.dask.specialize import CallGraphs  # noqa: E402

LAZY = tn.Mode(linker="dask")
C = tn.Mode(linker="c")


def lazy_and_reference(inputs, outputs, chunks):
    return (tn.function([In(v, chunks=c) for v, c in zip(inputs, chunks)], outputs, mode=LAZY),
            tn.function(inputs, outputs, mode=C))


def region_tasks(arrays, op_name: str) -> int:
    """How many tasks run a region kernel that computes ``op_name`` in the
    optimised graph of ``arrays`` (not counting the small tasks that take
    one output out of a kernel's tuple)."""
    graph = da.core.HighLevelGraph.merge(*[a.__dask_graph__() for a in arrays])
    optimised = dict(da.optimization.optimize(graph, [a.__dask_keys__() for a in arrays]))
    names = [key[0] if isinstance(key, tuple) else key for key in optimised]
    return sum(1 for name in names
               if name.startswith("ChunkKernel") and op_name in name
               and len(name.rsplit("-", 1)[-1]) == 32)


def logistic(x, y, w, b):
    p = tn.sigmoid(x @ w + b)
    loss = -tn.mean(y * tn.log(p) + (1 - y) * tn.log(1 - p))
    return [loss, *tn.grad(loss, [w, b])]


@pytest.fixture
def data(rng):
    return {"x": rng.standard_normal((400, 8)), "y": (rng.random(400) > 0.5).astype(float),
            "w": rng.standard_normal(8), "b": np.array(0.3)}


def test_a_gradient_step_is_one_kernel_per_chunk(data):
    x, y, w, b = tn.matrix("x"), tn.vector("y"), tn.vector("w"), tn.scalar("b")
    outs = logistic(x, y, w, b)
    f, ref = lazy_and_reference([x, y, w, b], outs, [(100, 8), 100, None, None])
    got = f(data["x"], data["y"], data["w"], data["b"])
    for g, want in zip(dask.compute(*got), ref(data["x"], data["y"], data["w"], data["b"])):
        np.testing.assert_allclose(g, want, rtol=1e-12)
    # x @ w, the loss terms (stabilized into softplus forms, each adding b
    # itself: fusion recomputes the cheap x @ w + b), their mean's partial,
    # the error term and its partial product x.T @ err for the gradient all
    # run in one kernel: one task per chunk (4 chunks), not one per node;
    # Dask's own blocked product (its chunk_sum tasks) is not needed.
    assert region_tasks(got, "matmul") == 4
    graph = da.core.HighLevelGraph.merge(*[a.__dask_graph__() for a in got])
    assert not [name for name in graph.layers if name.startswith(("matmul", "chunk_sum"))]


def test_lowering_order_keeps_regions_acyclic():
    """``exp(x)`` feeds a sum that feeds ``exp(x) * s``: the product cannot
    join the region of ``exp`` (it would have to run before and after the
    sum), and the lowering order puts the sum between them."""
    x = tn.matrix("x")
    e = tn.exp(x)
    out = e * tn.sum(e, axis=1, keepdims=True) + 1
    f = tn.function([In(x, chunks=(5, 7))], out, mode=LAZY)
    order = lowering_order(f._thunk.graphs.fgraph)
    seen = set()
    for unit in order:
        nodes = unit.nodes + unit.sinks if isinstance(unit, Region) else (unit,)
        produced_inside = {o for n in nodes for o in n.outputs}
        for node in nodes:
            for var in node.inputs:
                if var.owner is not None and var not in produced_inside:
                    assert var.owner in seen, f"{node} is lowered before {var.owner}"
        seen.update(nodes)
    value = np.random.default_rng(1).standard_normal((12, 7))
    np.testing.assert_allclose(f(value).compute(), tn.function([x], out, mode=C)(value),
                               rtol=1e-12)


def test_a_length_one_axis_found_at_run_time_is_summed(rng):
    """``y`` is declared of any length; given length 1 it broadcasts, and its
    gradient sums: the call's graph keeps that sum_to (it is not one that
    sums nothing), and the region falls back where shapes differ."""
    x, y = tn.matrix("x"), tn.vector("y")
    loss = tn.sum(tn.exp(x * y))
    outs = [loss, tn.grad(loss, y)]
    f, ref = lazy_and_reference([x, y], outs, [(4, 3), None])
    value = rng.standard_normal((10, 6))
    for y_value in (rng.standard_normal(6), rng.standard_normal(1)):
        for g, want in zip(dask.compute(*f(value, y_value)), ref(value, y_value)):
            assert g.shape == want.shape
            np.testing.assert_allclose(g, want, rtol=1e-12)


def test_a_region_lowered_whole_then_node_by_node(rng):
    """The same region (``y + 1`` read twice, so not fused into one loop, and
    a sum over ``x * (y + 1)``) runs as one kernel when ``y`` has ``x``'s
    length and node by node when it has length 1 (its nodes' shapes differ):
    what each way keeps for the sum must not be taken for the other's."""
    x, y = tn.vector("x"), tn.vector("y")
    a = y + 1
    z = x * a
    f, ref = lazy_and_reference([x, y], [a, z, tn.sum(z)], [4, None])
    value = rng.standard_normal(10)
    for y_value in (rng.standard_normal(10), rng.standard_normal(1), rng.standard_normal(10)):
        for g, want in zip(dask.compute(*f(value, y_value)), ref(value, y_value)):
            np.testing.assert_allclose(g, want, rtol=1e-12)


def test_sum_to_that_sums_nothing_is_dropped(data):
    x, y, w, b = tn.matrix("x"), tn.vector("y"), tn.vector("w"), tn.scalar("b")
    f = tn.function([x, y, w, b], logistic(x, y, w, b), mode=LAZY)
    graphs = CallGraphs(f._thunk.graphs.fgraph)
    values = [da.from_array(data["x"], chunks=(100, 8)), da.from_array(data["y"], chunks=100),
              data["w"], data["b"]]
    call_graph = graphs.for_values(values)

    def count(graph, name):
        return sum(type(n.op).__name__ == name for n in graph.apply_nodes)

    assert count(graphs.fgraph, "SumTo") > count(call_graph, "SumTo")
    assert count(call_graph, "Alloc") == 0          # read only by broadcasting ops
    assert graphs.for_values(values) is call_graph  # kept for the next call


def test_products_over_the_rows_of_a_region(rng):
    """``x.T @ e`` sums over the rows a region computes ``e`` on: each chunk's
    kernel gives its partial product (also with ``x``'s columns in blocks,
    which the kernel joins; and as ``x.T @ e.dimshuffle(0, "x")``, as gradients
    write it)."""
    x, w = tn.matrix("x"), tn.vector("w")
    e = tn.tanh(x @ w) * 2
    value, wv = rng.standard_normal((30, 12)), rng.standard_normal(12)
    for product in (tn.dot(x.T, e), (x.T @ e.dimshuffle(0, "x")).dimshuffle(0) + 1):
        for chunks in ([(7, 12), None], [(7, 5), 5]):
            f, ref = lazy_and_reference([x, w], [product, tn.sum(e)], chunks)
            got = f(value, wv)
            graph = da.core.HighLevelGraph.merge(*[a.__dask_graph__() for a in got])
            assert not [name for name in graph.layers if name.startswith("chunk_sum")]
            for g, want in zip(dask.compute(*got), ref(value, wv)):
                np.testing.assert_allclose(g, want, rtol=1e-12)


def test_products_by_row_blocks(rng):
    x, w, m = tn.matrix("x"), tn.vector("w"), tn.matrix("m")
    alone = lazy_and_reference([x, m], [x @ m], [(7, 12), None])[0]
    # a product read by no elementwise node: a kernel per block of rows, not
    # Dask's blocked product (its layers are named matmul)
    layers = alone(np.ones((30, 12)), np.ones((12, 5)))[0].__dask_graph__().layers
    assert [n for n in layers if n.startswith("ChunkKernel_matmul")]
    assert not [n for n in layers if n.startswith("matmul")]
    outs = [tn.tanh(x @ w + 1), tn.exp(tn.dot(x, m)) * 2]
    value, wv, mv = rng.standard_normal((30, 12)), rng.standard_normal(12), \
        rng.standard_normal((12, 5))
    # whole shared axis; then the shared axis in blocks (joined by the kernel)
    for chunks in ([(7, 12), None, None], [(7, 5), 5, (5, 5)]):
        f, ref = lazy_and_reference([x, w, m], outs, chunks)
        for g, want in zip(dask.compute(*f(value, wv, mv)), ref(value, wv, mv)):
            np.testing.assert_allclose(g, want, rtol=1e-12)


def test_kernels_pickle_and_join_blocks(rng):
    x, v = tn.matrix("x"), tn.vector("v")
    p = x @ v
    e = tn.exp(p)
    out = e + p
    kernel, arguments = ChunkKernel.of_nodes([p.owner, e.owner, out.owner], [out, p],
                                             whole_axes={x: (1,), v: (0,)})
    assert arguments == [x, v]
    again = pickle.loads(pickle.dumps(kernel))
    assert again.key == kernel.key
    a, b = rng.standard_normal((4, 6)), rng.standard_normal(6)
    got_out, got_p = again([a[:, :2], a[:, 2:]], [b[:2], b[2:]])   # blocks along the shared axis
    np.testing.assert_allclose(got_p, a @ b, rtol=1e-12)
    np.testing.assert_allclose(got_out, np.exp(a @ b) + a @ b, rtol=1e-12)
    single = np.arange(3.0)
    assert joined([single], (0,)) is single   # one block: no copy
