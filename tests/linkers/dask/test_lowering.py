"""The dask linker on Dask's local (threaded) scheduler: every op family it
lowers against the C linker on the same data, the input gate for Dask
arrays, compile-time errors, and the memory contract for lazy and computed
results.  The cluster tests are in test_cluster.py."""

import pickle

import numpy as np
import pytest

import tenure as tn
from tenure import In

da = pytest.importorskip("dask.array")

LAZY = tn.Mode(linker="dask")
COMPUTED = tn.Mode(linker="dask", compute=True)
C = tn.Mode(linker="c")


def check_against_c(inputs, outputs, *args, chunks=None, rtol=1e-12, atol=0.0):
    """Compile ``outputs`` on the dask and C linkers and compare them on ``args``
    (NumPy arrays; the dask function cuts them into ``chunks``)."""
    chunks = chunks or [None] * len(inputs)
    lazy = tn.function([In(v, chunks=c) for v, c in zip(inputs, chunks)], outputs, mode=LAZY)
    reference = tn.function(inputs, outputs, mode=C)
    got, want = lazy(*args), reference(*args)
    for g, w in zip(got, want):
        assert isinstance(g, da.Array)
        g = g.compute()
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


@pytest.fixture
def data(rng):
    return {"a": rng.standard_normal((37, 23)), "b": rng.standard_normal((37, 23)),
            "row": rng.standard_normal(23), "col": rng.standard_normal((37, 1)),
            "i": rng.integers(-5, 5, (37, 23)).astype(np.int32)}


# ----------------------------------------------------------------------------
# op families


def test_fused_elementwise_with_broadcasting(data):
    x, y, r, c = tn.matrix("x"), tn.matrix("y"), tn.vector("r"), tn.matrix("c", shape=(None, 1))
    out = tn.exp(x) * 2 + tn.sin(y) * r - c / (1 + x * x)
    got = check_against_c([x, y, r, c], [out], data["a"], data["b"], data["row"], data["col"],
                          chunks=[(10, 7), (5, 23), 9, (10, 1)])
    assert min(got[0].numblocks) > 1   # chunked as the inputs were, broadcast


def test_weak_constants_keep_dtype(rng):
    x = tn.matrix("x", dtype="float32")
    check_against_c([x], [x * 2 + 1.5], rng.random((10, 6), dtype=np.float32),
                    chunks=[(3, 6)], rtol=1e-6)


@pytest.mark.parametrize("fn", ["sum", "mean", "prod", "max", "min", "any", "all"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_reductions(data, fn, axis):
    x = tn.matrix("x")
    value = data["a"] if fn != "prod" else 1 + data["a"] / 10
    if fn in ("any", "all"):
        x, value = tn.matrix("x", dtype="bool"), data["a"] > -1.5
    out = getattr(tn, fn)(x, axis=axis)
    check_against_c([x], [out], value, chunks=[(10, 5)])


def test_reductions_keepdims_and_ints(data):
    x = tn.matrix("x", dtype="int32")
    check_against_c([x], [tn.sum(x, axis=0, keepdims=True), tn.mean(x, axis=1),
                          tn.max(x, axis=1, keepdims=True)], data["i"], chunks=[(8, 9)])


def test_fused_reduction(data):
    x, y = tn.matrix("x"), tn.matrix("y")
    out = tn.sum(tn.exp(x) * y, axis=1)
    f = tn.function([x, y], out, mode=LAZY)
    assert "FusedReduce" in {type(n.op).__name__ for n in f.fgraph.apply_nodes}
    check_against_c([x, y], [out, tn.mean((x - y) ** 2)], data["a"], data["b"],
                    chunks=[(10, 6), (9, 23)])


@pytest.mark.parametrize("make", [
    lambda x: tn.softmax(x, axis=1), lambda x: tn.log_softmax(x, axis=0),
    lambda x: tn.logsumexp(x, axis=1), lambda x: x.cumsum(axis=0), lambda x: x.sort(axis=1),
    lambda x: x.argmax(axis=1), lambda x: x.var(axis=0), lambda x: tn.softmax(x, axis=None)],
    ids=["softmax", "log_softmax", "logsumexp", "cumsum", "sort", "argmax", "var",
         "softmax_all"])
def test_ops_along_axes(data, make):
    x = tn.matrix("x")
    check_against_c([x], [make(x)], data["a"], chunks=[(10, 6)])


@pytest.mark.parametrize("make", [
    lambda x: x.var(axis=1, keepdims=True), lambda x: x.argmax(axis=0, keepdims=True),
    lambda x: x - x.var(axis=(0, 1), keepdims=True)], ids=["var", "argmax", "broadcast"])
def test_ops_along_axes_that_keep_them_as_length_one(data, make):
    """The lazy array says the kept axes have length 1 (it said the input's
    lengths, and a later broadcast or expand_to went wrong)."""
    x = tn.matrix("x")
    got = check_against_c([x], [make(x)], data["a"], chunks=[(10, 6)])
    assert got[0].shape == got[0].compute().shape


def test_op_over_every_axis_of_a_matrix_flattens_it(data):
    """``cumsum`` without an axis returns the running sum of the flattened
    matrix: one chunk of the flattened array, as NumPy does."""
    x = tn.matrix("x")
    got = check_against_c([x], [tn.cumsum(x), tn.cumsum(x, axis=1)], data["a"], chunks=[(10, 6)])
    assert got[0].shape == (37 * 23,)


def test_products(data, rng):
    x, y, v, z = tn.matrix("x"), tn.matrix("y"), tn.vector("v"), tn.matrix("z")
    outs = [tn.dot(x, y.T), x @ v, tn.tensordot(x, y, axes=([0], [0])), tn.outer(v, v),
            z * 0.5 + 2.0 * tn.dot(x.T, y)]
    got = check_against_c([x, y, v, z], outs, data["a"], data["b"], data["row"],
                          rng.standard_normal((23, 23)), chunks=[(10, 10), (12, 23), 5, None])
    assert got[0].numblocks == (4, 4)


def test_gemm_is_lowered(data, rng):
    x, y, z = tn.matrix("x"), tn.matrix("y"), tn.matrix("z")
    out = z * 0.5 + 2.0 * tn.dot(x.T, y)
    f = tn.function([x, y, z], out, mode=LAZY)
    assert "Gemm" in {type(n.op).__name__ for n in f.fgraph.apply_nodes}
    check_against_c([x, y, z], [out], data["a"], data["b"], rng.standard_normal((23, 23)))


def test_shape_ops_and_indexing(data):
    x, i = tn.matrix("x"), tn.scalar("i", dtype="int64")
    outs = [x.T, x.reshape((23, 37)), x[3:30:2, i], x[:, None, 1:], x.dimshuffle(1, "x", 0),
            tn.concatenate([x, x * 2], axis=1), tn.stack([x, -x], axis=0),
            x[np.array([0, 5, 3])], x.sum(axis=0).reshape((1, 23))]
    check_against_c([x, i], outs, data["a"], np.int64(4), chunks=[(10, 7), None])


def test_gradient_graph(data):
    x, w = tn.matrix("x"), tn.vector("w")
    loss = tn.mean(tn.log(1 + tn.exp(-(x @ w))))
    check_against_c([x, w], [loss, tn.grad(loss, w)], data["a"], data["row"],
                    chunks=[(10, 23), None])


# ----------------------------------------------------------------------------
# arguments, outputs and errors


def test_dask_array_arguments_and_gate(data):
    x = tn.matrix("x")
    f = tn.function([x], tn.exp(x).sum(axis=0), mode=COMPUTED)
    arr = da.from_array(data["a"], chunks=(7, 23))
    np.testing.assert_allclose(f(arr), np.exp(data["a"]).sum(axis=0), rtol=1e-12)
    with pytest.raises(TypeError, match="input 'x'.*2-d.*got a 1-d dask array"):
        f(da.ones(4))
    y = tn.matrix("y", dtype="float32")
    narrow = tn.function([y], y.sum(), mode=COMPUTED)
    with pytest.raises(TypeError, match="input 'y'.*int64 cannot be cast safely to float32"):
        narrow(da.ones((3, 3), dtype="int64"))
    g = tn.function([y], y * 2, mode=COMPUTED, allow_input_downcast=True)
    assert g(da.ones((3, 3), dtype="float64")).dtype == np.float32
    z = tn.matrix("z", shape=(None, 4))
    static = tn.function([z], z + 1, mode=COMPUTED)
    with pytest.raises(ValueError, match="input 'z': expected length 4 on axis 1"):
        static(da.ones((3, 5)))


def test_outputs_lazy_or_computed(data):
    x = tn.matrix("x")
    lazy = tn.function([In(x, chunks=(10, 23))], [x * 2, x.sum()], mode=LAZY)
    computed = tn.function([In(x, chunks=(10, 23))], [x * 2, x.sum()], mode=COMPUTED)
    assert all(isinstance(o, da.Array) for o in lazy(data["a"]))
    out = computed(data["a"])
    assert all(isinstance(o, np.ndarray) for o in out)
    np.testing.assert_allclose(out[0], data["a"] * 2)


def test_unsupported_op_named_at_compile_time():
    x, v = tn.matrix("x"), tn.vector("v")
    # (a basic inc_subtensor is lowered, as Dask's index assignment; repeated
    # integer indices that add up are not)
    with pytest.raises(TypeError, match="dask linker: no lowering for .*AdvancedIncSubtensor"):
        tn.function([x, v], tn.inc_subtensor(x[np.array([0, 0])], v), mode=LAZY)


def test_no_in_place_rewrites(data):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True, mutable=True)], tn.exp(x) + 1, mode=COMPUTED)
    assert not any(getattr(n.op, "destroy_map", None) for n in f.fgraph.apply_nodes)
    before = data["a"].copy()
    f(data["a"])
    np.testing.assert_array_equal(data["a"], before)


def test_chunk_hints_are_checked_naming_the_input(data):
    x = tn.matrix("x")
    with pytest.raises(ValueError, match=r"input x: In\(chunks=\(3,\)\) names 1 axes; the "
                                         r"input has 2"):
        tn.function([In(x, chunks=(3,))], x * 2, mode=COMPUTED)
    f = tn.function([In(x, chunks="banana")], x * 2, mode=COMPUTED)
    with pytest.raises(ValueError, match=r"input x: In\(chunks='banana'\) does not cut an "
                                         r"array of shape \(37, 23\)"):
        f(data["a"])


def test_a_kernel_error_names_the_task():
    x, y = tn.vector("x", dtype="int64"), tn.vector("y", dtype="int64")
    f = tn.function([In(x, chunks=2), In(y, chunks=2)], x ** y, mode=COMPUTED)
    with pytest.raises(ValueError, match="negative integer powers") as info:
        f(np.arange(1, 5), np.array([1, 2, -1, 3]))
    assert "raised in a Dask task running ChunkKernel(power)" in "".join(info.value.__notes__)


def test_options_are_checked():
    with pytest.raises(ValueError, match="options of the dask linker"):
        tn.Mode(linker="c", compute=True)
    with pytest.raises(ValueError, match="chunk_linker must be one of py, c, got 'cuda'"):
        tn.Mode(linker="dask", chunk_linker="cuda")
    with pytest.raises(TypeError, match="compute must be a bool"):
        tn.Mode(linker="dask", compute="yes")
    x = tn.matrix("x")
    with pytest.raises(ValueError, match=r"In\(chunks=...\) is a hint for the dask linker.*x"):
        tn.function([In(x, chunks=10)], x * 2, mode=C)
    assert "compute=True" in repr(COMPUTED)


def test_python_chunk_linker(data):
    x = tn.matrix("x")
    f = tn.function([In(x, chunks=(10, 5))], tn.exp(x).sum(axis=1),
                    mode=tn.Mode(linker="dask", compute=True, chunk_linker="py"))
    np.testing.assert_allclose(f(data["a"]), np.exp(data["a"]).sum(axis=1), rtol=1e-12)


# ----------------------------------------------------------------------------
# the memory contract


def test_lazy_output_does_not_see_later_writes(data):
    """A non-borrowed input and the shared values are read as they were at
    the call, whenever the lazy result is computed."""
    x = tn.matrix("x")
    s = tn.shared(np.ones(23), name="s")
    f = tn.function([x], x * s, mode=LAZY)
    a = data["a"].copy()
    out = f(a)
    a[:] = 0
    s.get_value(borrow=True)[:] = 5   # as an in-place update would write it
    np.testing.assert_allclose(out.compute(), data["a"])


def test_borrowed_input_is_read_when_computed(data):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True)], x * 1.0, mode=LAZY)
    a = data["a"].copy()
    out = f(a)
    a[:] = 0
    np.testing.assert_array_equal(out.compute(), 0)


def test_computed_results_alias_nothing(data):
    x = tn.matrix("x")
    s = tn.shared(data["b"].copy(), name="s")
    f = tn.function([x], [x, s, x[1:]], updates=[(s, x)], mode=COMPUTED)
    a = data["a"].copy()
    out = f(a)
    held = [a, s.get_value(borrow=True)] + list(out)
    for k, result in enumerate(out):
        others = [h for h in held if h is not result]
        assert not any(np.may_share_memory(result, h) for h in others), k
    np.testing.assert_array_equal(s.get_value(), data["a"])


def test_updates_from_reductions(data):
    x = tn.matrix("x")
    total = tn.shared(np.zeros(23), name="total")
    count = tn.shared(np.int64(0), name="count")
    f = tn.function([In(x, chunks=(10, 23))], [], mode=LAZY,
                    updates=[(total, total + x.sum(axis=0)), (count, count + x.shape[0])])
    f(data["a"])
    f(data["b"])
    np.testing.assert_allclose(total.get_value(), data["a"].sum(0) + data["b"].sum(0),
                               rtol=1e-12)
    assert count.get_value() == 74


def test_failed_call_changes_no_shared_variable(data):
    x = tn.matrix("x")
    s = tn.shared(np.zeros(23), name="s")
    f = tn.function([x], x.reshape((7, -1)).sum(), updates=[(s, s + 1)], mode=COMPUTED)
    with pytest.raises(ValueError):
        f(data["a"])   # 37 * 23 elements do not make rows of 7
    np.testing.assert_array_equal(s.get_value(), 0)


def test_pickles(data):
    x = tn.matrix("x")
    s = tn.shared(np.ones(23), name="s")
    f = tn.function([In(x, chunks=(10, 23))], (x * s).sum(axis=1), mode=COMPUTED)
    g = pickle.loads(pickle.dumps(f))
    assert g.mode.linker == "dask" and g.mode.compute
    np.testing.assert_allclose(g(data["a"]), f(data["a"]), rtol=1e-12)


def test_lazy_index_is_refused_with_a_clear_error(data):
    x, i = tn.matrix("x"), tn.scalar("i", dtype="int64")
    f = tn.function([x, i], x[i], mode=COMPUTED)
    np.testing.assert_array_equal(f(data["a"], np.int64(3)), data["a"][3])
    with pytest.raises(TypeError, match="needs the value of a lazy input.*NumPy value"):
        f(data["a"], da.from_array(np.int64(3)))


def test_alloc_stays_lazy_and_chunked(data):
    """A value broadcast to the data's shape (the gradient of a mean) is made
    on the workers, chunked, not on the client and shipped in the graph."""
    x = tn.matrix("x")
    f = tn.function([In(x, chunks=(10, 23))], [tn.alloc(1.5, x.shape[0], 3), tn.grad(x.mean(), x)],
                    mode=LAZY)
    ones, grad = f(data["a"])
    assert ones.numblocks == (1, 1) and isinstance(ones, da.Array)
    np.testing.assert_array_equal(ones.compute(), np.full((37, 3), 1.5))
    np.testing.assert_allclose(grad.compute(), np.full((37, 23), 1 / (37 * 23)))
    big = tn.function([x], tn.alloc(2.0, 40_000, 1_000), mode=LAZY,
                      on_unused_input="ignore")(data["a"])
    assert big.numblocks[0] > 1   # "auto" chunks, not one 320 MB block


def test_lazy_output_does_not_see_later_writes_of_a_0d_argument(data):
    x, scale = tn.matrix("x"), tn.scalar("scale")
    f = tn.function([x, scale], x * scale, mode=LAZY)
    factor = np.array(2.0)
    out = f(data["a"], factor)
    factor[...] = 100.0
    np.testing.assert_allclose(out.compute(), data["a"] * 2)


def test_reshape_errors_name_both_shapes(data):
    x = tn.matrix("x")
    f = tn.function([x], x.reshape((7, -1)), mode=LAZY)
    with pytest.raises(ValueError, match=r"cannot reshape an array of shape \(37, 23\) "
                                         r"\(size 851\) into shape \(7, -1\)"):
        f(data["a"])
    g = tn.function([In(x, chunks=(10, 7))], x.reshape((-1,)), mode=COMPUTED)
    np.testing.assert_array_equal(g(data["a"]), data["a"].ravel())


@pytest.mark.parametrize("borrow", [(False, False), (True, False), (False, True)])
def test_an_output_twice_is_two_arrays_unless_both_are_borrowed(data, borrow):
    """``[Out(x), Out(x)]`` of a borrowed input: one output may be the
    caller's array, but not both (writing one would change the other), as on
    the py and C linkers; so for any two results that are views of one another."""
    x = tn.matrix("x")
    s = tn.shared(np.zeros(23), name="s")
    outs = [tn.Out(x, borrow=borrow[0]), tn.Out(x, borrow=borrow[1]), x[1:], x[:2]]
    f = tn.function([In(x, borrow=True, mutable=True)], outs, updates=[(s, x[0])],
                    mode=COMPUTED)
    a = data["a"].copy()
    got = f(a) + [s.get_value(borrow=True)]
    for k, j in [(k, j) for k in range(len(got)) for j in range(k)]:
        assert not np.may_share_memory(got[k], got[j]), (k, j)
    got[0][:] = 7
    np.testing.assert_array_equal(got[1], data["a"])


def test_lazy_output_twice_is_two_dask_arrays(data):
    """Lazily, ``[x * 2, x * 2]`` are two Dask array objects: a ``__setitem__``
    on one (which rewrites that object's graph) leaves the other alone."""
    x = tn.matrix("x")
    y = x * 2
    first, second = tn.function([x], [y, y], mode=LAZY)(data["a"])
    assert first is not second
    first[0, 0] = 100.0
    np.testing.assert_allclose(second.compute(), data["a"] * 2)


def test_a_loop_and_its_gradient_run_once_per_call(monkeypatch, rng):
    """A loop is one task.  Its lazy inputs reach it by their chunks' own keys:
    a loop whose trajectory is also read by another loop's task (its
    gradient) runs once per call, not once for each reader (Dask would
    embed a renamed copy of a lazy argument's graph in the reading task,
    and compute the copy beside the original, in two threads at once).
    The sequence comes in three chunks, joined for the loop."""
    from tenure.symbolic.ops.scan import Scan
    runs = []
    perform = Scan.perform

    def counted(self, node, inputs, storage):
        runs.append(len(node.outputs))
        return perform(self, node, inputs, storage)

    monkeypatch.setattr(Scan, "perform", counted)
    xs, h0, w = tn.matrix("xs"), tn.vector("h0"), tn.vector("w")
    hs, _ = tn.scan(lambda x, h: tn.tanh(h * w + x), sequences=xs, outputs_info=h0)
    outputs = [hs[-1]] + tn.grad(tn.sum(hs[-1] ** 2), [xs, w])
    f = tn.function([In(xs, chunks=(4, 3)), h0, w], outputs, mode=COMPUTED)
    reference = tn.function([xs, h0, w], outputs, mode=C)
    values = [rng.standard_normal((10, 3)), rng.standard_normal(3), rng.standard_normal(3)]
    want = reference(*values)
    runs.clear()
    got = f(*values)
    assert len(runs) == 2, runs      # the loop, then its gradient's loop
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-12)
