"""The dask linker's own rewrites and lowering choices have names
(tenure/rewrites/dask_specialize.py): each is applied by default, a mode
switches it off by name like any other rewrite, and the results are the
same either way (checked against the py linker)."""

import numpy as np
import pytest

import tenure as tn
from tenure import In
from tenure.rewrites import dask_specialize as ds
from tenure.rewrites.engine import registered_rewrites

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from tenure.linkers.dask.regions import Region, _Grouping, lazy_variables  # noqa: E402

NAMES = [ds.SUM_TO_IDENTITY, ds.SPREAD_ALLOC, ds.PARTIAL_REDUCTIONS, ds.REGIONS]
PY = tn.Mode(linker="py")


def dask_mode(*exclude, **options) -> tn.Mode:
    return tn.Mode(linker="dask", exclude=list(exclude), **options)


def close(got, want):
    """Equal to the py linker's result but for the last bits (the chunk
    kernels are C loops, whose math library may round otherwise)."""
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def count(graph, op_name: str) -> int:
    return sum(type(n.op).__name__ == op_name for n in graph.apply_nodes)


def layers(results) -> list[str]:
    graph = da.core.HighLevelGraph.merge(*[r.__dask_graph__() for r in results])
    return list(graph.layers)


def call_graph(f, values):
    """The graph ``f``'s dask thunk lowers for a call with ``values``."""
    thunk = f._thunk
    lazy = [thunk._lazy_input(i, np.asarray(v), None) for i, v in enumerate(values)]
    return thunk.graphs.for_values(lazy)


# ----------------------------------------------------------------------------
# graphs: (inputs, outputs, chunks, values)


def gradient_with_sum_to(rng):
    """A data-parallel gradient: ``x * b`` broadcasts ``b`` over the rows, so
    the gradient of ``x`` is a ``sum_to`` that sums nothing and that of
    ``b`` one that sums over the rows; the loss's mean spreads an ``alloc``."""
    x, y, b = tn.matrix("x"), tn.vector("y"), tn.vector("b")
    p = tn.sigmoid(tn.sum(tn.tanh(x * b), axis=1))
    loss = tn.mean((p - y) ** 2)
    return ([x, y, b], [loss, *tn.grad(loss, [x, b])], [(10, 6), 10, None],
            [rng.standard_normal((37, 6)), rng.random(37), rng.standard_normal(6)])


def alloc_broadcast(rng):
    """An ``alloc`` read by two elementwise ops that ``x`` gives its shape.
    The alloc takes ``y``'s lengths, which only a call shows to be ``x``'s
    (with ``x``'s own, the fuse phase's ``alloc_read_as_broadcast`` drops it
    when compiling)."""
    x, y, c = tn.matrix("x"), tn.matrix("y"), tn.scalar("c")
    a = tn.alloc(c, y.shape[0], y.shape[1])
    return ([x, y, c], [x + a, tn.exp(x) * a], [(10, 5), (10, 5), None],
            [rng.standard_normal((37, 23)), rng.standard_normal((37, 23)), np.array(2.5)])


def chunked_reductions(rng):
    """Reductions over chunked axes: plain, fused, keepdims, a mean, all axes."""
    x, y = tn.matrix("x"), tn.matrix("y")
    outs = [tn.sum(x, axis=0), tn.max(x, axis=1, keepdims=True), tn.mean(x),
            tn.sum(tn.exp(x) * y, axis=1), tn.mean(x * y + 1, axis=0, keepdims=True),
            tn.min(x * 2, axis=(0, 1))]
    return ([x, y], outs, [(10, 5), (10, 5)],
            [rng.standard_normal((37, 23)), rng.standard_normal((37, 23))])


def length_one_at_run_time(rng):
    """``y`` of length 1 broadcasts at run time: its gradient's ``sum_to``
    sums, the region's shapes differ."""
    x, y = tn.matrix("x"), tn.vector("y")
    loss = tn.sum(tn.exp(x * y))
    return ([x, y], [loss, tn.grad(loss, y), tn.grad(loss, x)], [(4, 3), None],
            [rng.standard_normal((10, 6)), rng.standard_normal(1)])


GRAPHS = [gradient_with_sum_to, alloc_broadcast, chunked_reductions, length_one_at_run_time]


def compile_both(case, mode):
    inputs, outputs, chunks, values = case
    f = tn.function([In(v, chunks=c) for v, c in zip(inputs, chunks)], outputs, mode=mode)
    return f, tn.function(inputs, outputs, mode=PY), values


# ----------------------------------------------------------------------------
# names


def test_each_is_a_registered_rewrite_of_the_dask_linker_only():
    rewrites = registered_rewrites()
    for name in NAMES:
        rewrite = rewrites[name]
        assert "dask" in rewrite.tags and "default" not in rewrite.tags
        tn.Mode(linker="dask", exclude=[name])     # a known name: no error
        tn.Mode(linker="py", exclude=[name])
    with pytest.raises(ValueError, match="unknown rewrite name or tag 'dask_sum_to_identiy'"):
        tn.Mode(linker="dask", exclude=["dask_sum_to_identiy"])
    # The compile-time pipeline never runs them, even when a mode includes
    # them: without a call's shapes they change nothing.
    x, b = tn.matrix("x"), tn.vector("b")
    loss = tn.sum(tn.exp(x * b))
    outs = tn.grad(loss, [x, b])
    sum_tos = []
    for mode in (PY, tn.Mode(linker="py", include=["dask"])):
        f = tn.function([x, b], outs, mode=mode)
        assert not [n for n in f.rewrites_applied if n.startswith("dask")]
        sum_tos.append(count(f.fgraph, "SumTo"))
    assert sum_tos[0] == sum_tos[1] > 0


def test_what_a_mode_selects():
    every = frozenset(NAMES)
    assert ds.selected(dask_mode().query) == every
    for name in NAMES:
        assert ds.selected(dask_mode(name).query) == every - {name}
    assert ds.selected(dask_mode("dask").query) == frozenset()
    assert ds.selected(dask_mode("dask_call").query) == {ds.PARTIAL_REDUCTIONS, ds.REGIONS}
    call = {ds.SUM_TO_IDENTITY, ds.SPREAD_ALLOC}
    assert ds.selected(dask_mode("dask_lowering").query) == call
    # no rewrite runs with rewrites="none" unless included; lowering
    # choices are not rewrites of the graph: only excluding them counts
    assert ds.selected(dask_mode(rewrites="none").query) == {ds.PARTIAL_REDUCTIONS, ds.REGIONS}
    included = tn.Mode(linker="dask", rewrites="none", include=[ds.SUM_TO_IDENTITY]).query
    assert ds.selected(included) == {ds.SUM_TO_IDENTITY, ds.PARTIAL_REDUCTIONS, ds.REGIONS}


# ----------------------------------------------------------------------------
# each is applied by default, and not when excluded


def test_sum_to_identity(rng):
    case = gradient_with_sum_to(rng)
    on, ref, values = compile_both(case, dask_mode())
    graph = call_graph(on, values)
    assert count(graph, "SumTo") < count(on._thunk.graphs.fgraph, "SumTo")
    assert ds.SUM_TO_IDENTITY in on._thunk.graphs.rewrites_applied[graph]
    off, _, _ = compile_both(case, dask_mode(ds.SUM_TO_IDENTITY))
    graph = call_graph(off, values)
    assert count(graph, "SumTo") == count(off._thunk.graphs.fgraph, "SumTo") > 0
    assert ds.SUM_TO_IDENTITY not in off._thunk.graphs.rewrites_applied.get(graph, [])
    for f in (on, off):
        for got, want in zip(dask.compute(*f(*values)), ref(*values)):
            close(got, want)


def test_sum_to_identity_is_off_with_no_rewrites_unless_included(rng):
    inputs, outputs, chunks, values = gradient_with_sum_to(rng)
    specs = [In(v, chunks=c) for v, c in zip(inputs, chunks)]
    plain = tn.function(specs, outputs, mode=dask_mode(rewrites="none"))
    assert call_graph(plain, values) is plain._thunk.graphs.fgraph
    named = tn.function(specs, outputs, mode=tn.Mode(linker="dask", rewrites="none",
                                                     include=[ds.SUM_TO_IDENTITY]))
    graph = call_graph(named, values)
    assert named._thunk.graphs.rewrites_applied[graph][0] == ds.SUM_TO_IDENTITY
    assert count(graph, "SumTo") < count(named._thunk.graphs.fgraph, "SumTo")
    ref = tn.function(inputs, outputs, mode=PY)
    for f in (plain, named):
        for got, want in zip(dask.compute(*f(*values)), ref(*values)):
            close(got, want)


def test_spread_alloc(rng):
    case = alloc_broadcast(rng)
    on, ref, values = compile_both(case, dask_mode())
    assert count(on._thunk.graphs.fgraph, "Alloc") == 1
    graph = call_graph(on, values)
    assert count(graph, "Alloc") == 0
    assert on._thunk.graphs.rewrites_applied[graph] == [ds.SPREAD_ALLOC]
    got = on(*values)
    assert not [name for name in layers(got) if name.startswith("broadcast_to")]
    off, _, _ = compile_both(case, dask_mode(ds.SPREAD_ALLOC))
    assert call_graph(off, values) is off._thunk.graphs.fgraph
    got_off = off(*values)
    assert [name for name in layers(got_off) if name.startswith("broadcast_to")]
    for results in (got, got_off):
        for g, want in zip(dask.compute(*results), ref(*values)):
            close(g, want)


def test_an_alloc_whose_shape_only_another_alloc_gives_stays(rng):
    """Whether an alloc is spread never depends on another that may be: two
    allocs read together, with nothing else of their shape, both stay."""
    x, c, d = tn.matrix("x"), tn.scalar("c"), tn.scalar("d")
    a1 = tn.alloc(c, x.shape[0], x.shape[1])
    a2 = tn.alloc(d, x.shape[0], x.shape[1])
    outs = [a1 * a2 + 1, tn.exp(a1 * a2), x]
    values = [rng.standard_normal((12, 5)), np.array(2.0), np.array(3.0)]
    f = tn.function([In(x, chunks=(5, 5)), c, d], outs, mode=dask_mode())
    graph = call_graph(f, values)
    assert count(graph, "Alloc") == count(f._thunk.graphs.fgraph, "Alloc") == 2
    ref = tn.function([x, c, d], outs, mode=PY)
    for g, want in zip(dask.compute(*f(*values)), ref(*values)):
        close(g, want)


def test_partial_reductions(rng):
    case = chunked_reductions(rng)
    on, ref, values = compile_both(case, dask_mode())
    got = on(*values)
    names = layers(got)
    assert [n for n in names if n.startswith("sum-aggregate")]   # Dask's tree over partials
    assert not [n for n in names if n.startswith("rechunk")]
    off, _, _ = compile_both(case, dask_mode(ds.PARTIAL_REDUCTIONS))
    got_off = off(*values)
    names = layers(got_off)
    assert not [n for n in names if n.endswith("-aggregate") or "-aggregate-" in n]
    assert [n for n in names if n.startswith("rechunk")]
    for results in (got, got_off):
        for g, want, r in zip(dask.compute(*results), ref(*values), results):
            assert g.shape == want.shape == r.shape
            close(g, want)


def test_regions(rng):
    case = gradient_with_sum_to(rng)
    on, ref, values = compile_both(case, dask_mode())
    graph = call_graph(on, values)
    assert [u for u in on._thunk.context.lowering_order(graph) if isinstance(u, Region)]
    off, _, _ = compile_both(case, dask_mode(ds.REGIONS))
    graph = call_graph(off, values)
    order = off._thunk.context.lowering_order(graph)
    assert order and not [u for u in order if isinstance(u, Region)]
    results = {mode: f(*values) for mode, f in (("on", on), ("off", off))}
    # a kernel per region, against one per node (a kernel of several outputs
    # has a layer for each besides its own, whose names end in "-<output>")
    kernels = {mode: len([n for n in layers(r) if n.startswith("ChunkKernel")
                          and len(n.rsplit("-", 1)[-1]) == 32])
               for mode, r in results.items()}
    assert kernels["on"] < kernels["off"]
    for r in results.values():
        for g, want in zip(dask.compute(*r), ref(*values)):
            close(g, want)


# ----------------------------------------------------------------------------
# the same results on and off


@pytest.mark.parametrize("exclude", [(), *[(name,) for name in NAMES], ("dask",)],
                         ids=["all_on", *NAMES, "all_off"])
@pytest.mark.parametrize("make", GRAPHS, ids=[g.__name__ for g in GRAPHS])
def test_same_results_as_the_py_linker(rng, make, exclude):
    f, ref, values = compile_both(make(rng), dask_mode(*exclude, compute=True))
    for _ in range(2):   # the second call reuses the graph made for these shapes
        for got, want in zip(f(*values), ref(*values)):
            assert got.dtype == want.dtype and got.shape == want.shape
            close(got, want)


def test_regions_keep_their_nodes_after_a_merge(rng):
    """A region made after two others merged took the merged one's id and
    wiped its nodes: its units then read each other, and lowering them
    looped for ever.  Here (the graph as written: ``rewrites="none"``, its
    ``sum_to`` nodes kept) every node is lowered exactly once."""
    inputs, outputs, chunks, values = gradient_with_sum_to(rng)
    mode = tn.Mode(linker="dask", rewrites="none", exclude=[ds.SUM_TO_IDENTITY])
    f = tn.function([In(v, chunks=c) for v, c in zip(inputs, chunks)], outputs, mode=mode)
    graph = f._thunk.graphs.fgraph
    # (first the grouping itself, so that the old bug fails here, not hangs below)
    grouping, lazy = _Grouping(graph), lazy_variables(graph)
    for node in graph.toposort():
        grouping.place(node, lazy)
    assert all(node in grouping.nodes_of(region) for node, region in grouping.region_of.items())
    order = f._thunk.context.lowering_order(graph)
    assert [u for u in order if isinstance(u, Region)]
    lowered = [n for u in order for n in (u.all_nodes if isinstance(u, Region) else (u,))]
    assert len(lowered) == len(set(lowered)) == len(graph.apply_nodes)
    ref = tn.function(inputs, outputs, mode=PY)
    for got, want in zip(dask.compute(*f(*values)), ref(*values)):
        close(got, want)
