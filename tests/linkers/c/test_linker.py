"""The C linker (tenure/linkers/c/linker.py, module.py): whole graphs compiled
into one module, results equal to the Python executor's, the memory contract
(borrowed outputs reuse their buffer, fresh outputs stay fresh, inputs are
written only when given away), errors, the on-disk cache, the fallback.

Every test compiles into a private cache directory (one per module of tests),
so each graph is compiled once per run.
"""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.c import cache, compiler
from tenure.linkers.c.linker import CLinkerWarning, CThunk
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise

C = tn.Mode(linker="c")
PY = tn.Mode(linker="py")


@pytest.fixture(autouse=True, scope="module")
def compiledir(tmp_path_factory):
    if compiler.find_compiler() is None:
        pytest.skip("no working C compiler (set tenure.config.cxx or $CC)")
    path = tmp_path_factory.mktemp("c_linker_cache")
    with tn.config.change_flags(compiledir=str(path)):
        yield path


def both(inputs, outputs, **kwargs):
    """The same graph compiled by the py and the c linker (the c one checked to
    run at least one C step)."""
    f_py = tn.function(inputs, outputs, mode=PY, **kwargs)
    f_c = tn.function(inputs, outputs, mode=C, **kwargs)
    assert isinstance(f_c._thunk, CThunk)
    return f_py, f_c


def c_kinds(f) -> list[str]:
    return f._thunk.graph.kinds


def assert_same(a, b, rtol=1e-12):
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, rtol)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12)


def inplace(scalar_op, *inputs, into=0):
    return Elemwise(scalar_op, {0: into})(*inputs)


# --------------------------------------------------------------------------
# Results equal the Python executor's


def test_fused_elemwise(rng):
    x, y = tn.matrix("x"), tn.vector("y")
    f_py, f_c = both([x, y], [tn.exp(x) * 2 + y, tn.tanh(x - y) ** 2, x > y])
    assert "elemwise" in c_kinds(f_c)
    for shape in [(3, 4), (1, 4), (0, 4), (5, 4)]:
        args = rng.normal(size=shape), rng.normal(size=shape[1])
        assert_same(f_c(*args), f_py(*args))


def test_matmul_and_gemm(rng):
    a, b, z = tn.matrix("a"), tn.matrix("b"), tn.matrix("z")
    v = tn.vector("v")
    f_py, f_c = both([a, b, z, v], [tn.relu(a @ b + 1), z + 0.5 * (a @ b), a @ v])
    assert "blas" in c_kinds(f_c)
    for n in (2, 7):
        args = (rng.normal(size=(n, 3)), rng.normal(size=(3, 5)), rng.normal(size=(n, 5)),
                rng.normal(size=3))
        assert_same(f_c(*args), f_py(*args))


def test_reductions(rng):
    from tenure.linkers.c.module import _reduce
    if _reduce is None:
        pytest.skip("no C code for reductions")
    x = tn.tensor3("x")
    outs = [x.sum(axis=1), tn.exp(x).sum(), x.max(axis=(0, 2), keepdims=True), x.mean(axis=2),
            (x * x).sum(axis=0)]
    f_py, f_c = both([x], outs)
    assert "reduce" in c_kinds(f_c)
    for shape in [(2, 3, 4), (5, 1, 2)]:
        arg = rng.normal(size=shape)
        assert_same(f_c(arg), f_py(arg))


def test_ops_without_c_code_mixed_with_c_ones(rng):
    x, i = tn.vector("x"), tn.vector("i", dtype="int64")
    y = tn.sort(tn.exp(x) * 2)
    z = tn.concatenate([y, x[i] + 1, y[::-1]])
    f_py, f_c = both([x, i], [z * 3, (z - 1).sum()])
    kinds = c_kinds(f_c)
    assert "py" in kinds and "elemwise" in kinds
    for n in (4, 9):
        args = rng.normal(size=n), rng.integers(0, n, size=3)
        assert_same(f_c(*args), f_py(*args))


def test_demo_training_step():
    from tenure.demo import build_model, make_spirals
    results = {}
    for mode in (PY, C):
        rng = np.random.default_rng(0)
        X, y = make_spirals(rng, 40)
        params, train, predict = build_model(rng, X.shape[1], 16, 3, 0.5, mode=mode)
        losses = [float(train(X, y.astype("int32"))) for _ in range(5)]
        results[mode.linker] = (losses, [p.get_value() for p in params], predict(X).copy())
    assert isinstance(train._thunk, CThunk)
    losses_py, params_py, pred_py = results["py"]
    losses_c, params_c, pred_c = results["c"]
    np.testing.assert_allclose(losses_c, losses_py, rtol=1e-10)
    for a, b in zip(params_c, params_py):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(pred_c, pred_py)


@pytest.mark.usefixtures("freeing_intermediates")
@pytest.mark.parametrize("budget", [None, 0.5])
def test_training_step_peak_matches_the_python_executor(budget):
    """The module runs one schedule fixed when compiling; it must be the
    memory-lowering one (for the sizes known then), or a training step holds
    every layer's gradient at once (1.44x the executor's peak before), and
    an activation budget would lower nothing."""
    rng = np.random.default_rng(0)
    layers = (32, 256, 256, 256, 256, 32)
    peaks = {}
    for mode in (PY, C):
        params = [tn.shared((rng.standard_normal((a, b)) * 0.1).astype("float32"))
                  for a, b in zip(layers[:-1], layers[1:])]
        x, t = tn.matrix("x", dtype="float32"), tn.matrix("t", dtype="float32")
        h = x
        for i, w in enumerate(params):
            h = h @ w if i == len(params) - 1 else tn.relu(h @ w)
        loss = tn.mean((h - t) ** 2)
        grads = tn.grad(loss, params)
        f = tn.function([x, t], loss, updates=[(p, p - 0.01 * g) for p, g in zip(params, grads)],
                        mode=tn.Mode(linker=mode.linker, activation_memory_budget=budget))
        xv = rng.standard_normal((512, layers[0])).astype("float32")
        tv = rng.standard_normal((512, layers[-1])).astype("float32")
        f(xv, tv)
        tracemalloc.start()
        try:
            f(xv, tv)
            peaks[mode.linker] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert isinstance(f._thunk, CThunk)
    assert peaks["c"] <= 1.05 * peaks["py"] + 65536, peaks


def test_shared_variable_updated_in_place():
    w = tn.shared(np.ones(3), name="w", borrow=True)
    buffer = w.get_value(borrow=True)
    f = tn.function([], [], updates=[(w, inplace(ps.add, w, 1.0))], mode=C)
    assert c_kinds(f) == ["elemwise"]
    f()
    f()
    np.testing.assert_array_equal(w.get_value(), np.full(3, 3.0))
    assert w.get_value(borrow=True) is buffer


def test_shared_updates_swap_and_accumulate(rng):
    a = tn.shared(rng.normal(size=4), name="a")
    b = tn.shared(rng.normal(size=4), name="b")
    x = tn.vector("x")
    a0, b0 = a.get_value(), b.get_value()
    f = tn.function([x], (a * x).sum(), updates=[(a, b), (b, a + x)], mode=C)
    arg = rng.normal(size=4)
    out = f(arg)
    np.testing.assert_allclose(out, (a0 * arg).sum())
    np.testing.assert_array_equal(a.get_value(), b0)
    np.testing.assert_allclose(b.get_value(), a0 + arg)


# --------------------------------------------------------------------------
# The memory contract


def test_borrowed_output_reuses_its_buffer_and_allocates_nothing():
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], Out(tn.exp(x) * 2 + 1, borrow=True), mode=C)
    assert c_kinds(f) == ["elemwise"]
    arg = np.ones(100_000)
    r1 = f(arg)
    r2 = f(arg * 2)
    assert r2 is r1
    np.testing.assert_allclose(r1, np.exp(arg * 2) * 2 + 1)
    for _ in range(3):
        f(arg)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(10):
            f(arg)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 4096
    assert peak - before < 4096   # tiny objects only: the 800 kB output is never reallocated


def test_fresh_outputs_are_never_written_by_a_later_call():
    x = tn.vector("x")
    y = tn.exp(x)
    f = tn.function([x], [y * 2, Out(y + 1, borrow=True), y[::-1]], mode=C)
    a1, k1, r1 = f(np.zeros(3))
    a2, k2, r2 = f(np.ones(3))
    np.testing.assert_array_equal(a1, np.full(3, 2.0))
    np.testing.assert_array_equal(r1, np.ones(3))
    assert not np.shares_memory(a1, a2) and not np.shares_memory(r1, r2)
    assert k2 is k1   # the borrowed one is last call's buffer


def test_without_allow_gc_results_stay_fresh():
    x = tn.vector("x")
    with tn.config.change_flags(allow_gc=False):
        f = tn.function([x], [tn.exp(x) * 2, tn.sort(tn.exp(x) + 1)], mode=C)
    r1 = f(np.zeros(3))
    f(np.ones(3))
    assert_same(r1, [np.full(3, 2.0), np.full(3, 2.0)])


def test_non_mutable_input_is_never_written():
    x = tn.vector("x")
    for spec in (In(x), In(x, borrow=True)):
        f = tn.function([spec], Out(tn.exp(x) + x, borrow=True), mode=C)
        arg = np.arange(3.0)
        f(arg)
        f(arg)
        np.testing.assert_array_equal(arg, np.arange(3.0))


def test_passing_a_borrowed_result_back_in_is_safe():
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], Out(tn.exp(x) * 2, borrow=True), mode=C)
    r = f(np.zeros(3))
    r2 = f(r)   # the kept buffer is the input now: a new one is used
    np.testing.assert_array_equal(r, np.full(3, 2.0))
    np.testing.assert_allclose(r2, np.exp(np.full(3, 2.0)) * 2)


def test_mutable_input_is_used_as_workspace():
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(inplace(ps.exp, x), borrow=True),
                    mode=C)
    assert c_kinds(f) == ["elemwise"]
    arg = np.zeros(3)
    assert f(arg) is arg
    np.testing.assert_array_equal(arg, np.ones(3))


def test_free_drops_kept_buffers():
    x = tn.vector("x")
    f = tn.function([x], Out(tn.exp(x), borrow=True), mode=C)
    f(np.zeros(4))
    assert f._thunk.kept_buffers()
    f.free()
    assert not f._thunk.kept_buffers()
    np.testing.assert_array_equal(f(np.zeros(4)), np.ones(4))


@pytest.mark.usefixtures("freeing_intermediates")
def test_intermediates_are_dropped_after_the_call():
    x = tn.vector("x")
    f = tn.function([x], tn.sort(tn.exp(x)) * 2, mode=C)
    f(np.zeros(4))
    held = [v for i, v in enumerate(f._thunk.storage) if i not in f._thunk.plan.constants]
    assert all(v is None for v in held)


# --------------------------------------------------------------------------
# Errors, cache, fallback


def test_bad_shape_raises_like_the_py_linker_and_the_thunk_recovers():
    x, y = tn.matrix("x"), tn.matrix("y")
    f_py, f_c = both([x, y], [tn.exp(x) + y, x @ y])
    bad = np.ones((2, 3)), np.ones((4, 3))
    with pytest.raises(Exception) as py_err:
        f_py(*bad)
    with pytest.raises(type(py_err.value)) as c_err:
        f_c(*bad)
    assert any("tenure: raised while computing" in note
               for note in getattr(c_err.value, "__notes__", []))
    assert all(v is None for i, v in enumerate(f_c._thunk.storage)
               if i not in f_c._thunk.plan.constants)
    good = np.ones((3, 3)), np.full((3, 3), 2.0)
    assert_same(f_c(*good), f_py(*good))


def test_error_in_a_python_perform_gets_the_note():
    x = tn.vector("x")
    i = tn.vector("i", dtype="int64")
    f = tn.function([x, i], tn.exp(x)[i] * 2, mode=C)
    with pytest.raises(IndexError) as err:
        f(np.zeros(3), np.array([7]))
    assert any("tenure: raised while computing" in n for n in err.value.__notes__)
    np.testing.assert_array_equal(f(np.zeros(3), np.array([1])), [2.0])


def test_second_compile_of_the_same_graph_loads_from_the_cache(monkeypatch, tmp_path):
    def build():
        x = tn.vector("x")
        return tn.function([x], (tn.exp(x) * 2 + 1 + tn.sort(x)).sum() * x, mode=C)

    with tn.config.change_flags(compiledir=str(tmp_path)):
        first = build()
        cache._forget_loaded()   # as if in a new process: read the disk

        def no_compile(*args, **kwargs):
            raise AssertionError("the compiler ran for a cached graph")

        monkeypatch.setattr(compiler, "compile_shared_library", no_compile)
        second = build()
    assert second._thunk.graph.name == first._thunk.graph.name
    arg = np.arange(3.0)
    assert_same(second(arg), first(arg))


def test_no_compiler_falls_back_to_python_with_one_warning(monkeypatch):
    from tenure.linkers.c import linker
    monkeypatch.setattr(compiler, "find_compiler", lambda: None)
    monkeypatch.setattr(linker, "_warned_no_compiler", False)
    x = tn.vector("x")
    with pytest.warns(CLinkerWarning, match="falls back to the Python executor") as record:
        f = tn.function([x], tn.exp(x), mode=C)
        g = tn.function([x], tn.exp(x) + 1, mode=C)
    assert len(record) == 1
    assert not isinstance(f._thunk, CThunk) and not isinstance(g._thunk, CThunk)
    np.testing.assert_array_equal(f(np.zeros(2)), np.ones(2))


def test_c_is_the_default_linker():
    assert "c" in tn.config.LINKERS
    assert tn.config._FLAGS["linker"].default == "c"
    with tn.config.change_flags(linker=tn.config._FLAGS["linker"].default):
        x = tn.vector("x")
        f = tn.function([x], tn.exp(x) * 2)
        assert isinstance(f._thunk, CThunk) and f._fast_call is not None
        np.testing.assert_allclose(f(np.ones(3)), np.exp(np.ones(3)) * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tn.Mode(linker="c").linker == "c"


# --------------------------------------------------------------------------
# The plan's buffer hand-on between steps (Step.reuse), observed with the
# plan tests' Probe op (a step without C code that logs the buffers it is
# offered and writes)


C_NO_REWRITES = tn.Mode(linker="c", rewrites="none")


@pytest.mark.usefixtures("freeing_intermediates")
def test_python_step_takes_a_dead_buffer():
    from tests.linkers.test_plan import LOG, calls, probe
    LOG.clear()
    x = tn.vector("x")
    c = probe("c", probe("b", probe("a", x)))
    f = tn.function([x], c.sum(), mode=C_NO_REWRITES)
    assert "reduce" in c_kinds(f) or "py" in c_kinds(f)
    f._thunk.min_reuse_bytes = 0
    f(np.zeros(100))
    assert calls("a")[0][0] is None and calls("b")[0][0] is None
    assert calls("c")[0][0] == calls("a")[0][1]   # a's dead buffer, offered to c
    LOG.clear()


@pytest.mark.usefixtures("freeing_intermediates")
def test_c_step_takes_a_dead_buffer():
    from tests.linkers.test_plan import LOG, address, calls, probe
    LOG.clear()
    x = tn.vector("x")
    d = tn.exp(probe("q", probe("p", tn.exp(x))))
    f = tn.function([x], d, mode=C_NO_REWRITES)
    assert c_kinds(f) == ["elemwise", "py", "py", "elemwise"]
    f._thunk.min_reuse_bytes = 0
    arg = np.linspace(0, 1, 100)
    out = f(arg)
    np.testing.assert_allclose(out, np.exp(np.exp(arg) * 4))
    assert address(out) == calls("p")[0][1]   # p's dead buffer: the last one to die
    out2 = f(arg)   # and again next call: out is the caller's, so a new buffer
    assert not np.shares_memory(out, out2)
    np.testing.assert_allclose(out, out2)
    LOG.clear()


def test_a_dead_buffer_held_elsewhere_is_not_handed_on():
    from tests.linkers.test_plan import LOG, Probe, calls, probe

    held = []

    class Leak(Probe):
        """A Probe whose result is also kept by someone else."""

        def perform(self, node, inputs, output_storage):
            super().perform(node, inputs, output_storage)
            held.append(output_storage[0][0])

    LOG.clear()
    x = tn.vector("x")
    d = tn.exp(probe("c", probe("b", Leak("a")(x))))
    f = tn.function([x], d, mode=C_NO_REWRITES)
    f._thunk.min_reuse_bytes = 0
    f(np.zeros(50))
    assert calls("c")[0][0] is None     # a's buffer is still held: refused
    assert held and held[0].sum() == 0  # and left untouched
    LOG.clear()


def test_memory_report_runs_on_a_c_function():
    x = tn.vector("x")
    f = tn.function([x], tn.sort(tn.exp(x)) * 2, mode=C)
    report = f.memory_report(np.zeros(1000), print_report=False)
    assert "in place" in str(report)
    np.testing.assert_array_equal(f(np.zeros(3)), np.full(3, 2.0))


def test_softmax_logsumexp_runs_in_c(rng):
    from tenure.linkers.c.module import _nnet
    if _nnet is None:
        pytest.skip("no C code for softmax / logsumexp")
    x = tn.matrix("x", dtype="float32")
    y = tn.tensor3("y")
    outs = [tn.exp(x - tn.log(tn.sum(tn.exp(x), axis=1, keepdims=True)))]
    f_py, f_c = both([x], outs)
    assert "nnet" in c_kinds(f_c)
    assert "py" not in c_kinds(f_c)
    for shape in [(4, 37), (1, 300), (0, 5), (3, 0)]:
        arg = rng.normal(size=shape).astype("float32") * 5
        assert_same(f_c(arg), f_py(arg), rtol=1e-5)
    g_py, g_c = both([y], [tn.softmax(y, axis=0), tn.log_softmax(y, axis=(0, 2)),
                           tn.logsumexp(y, axis=1), tn.logsumexp(y, axis=(0, 2), keepdims=True)])
    assert c_kinds(g_c).count("nnet") >= 3
    for shape in [(2, 3, 4), (5, 1, 2), (0, 2, 3)]:
        arg = rng.normal(size=shape)
        assert_same(g_c(arg), g_py(arg))


@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("float64", "int8"),
                                    ("int32", "float64")])
def test_rows_with_a_repeated_operand(rng, dtypes):
    """An (n, 1) operand against (n, m) rows: the kernel copies the repeated
    element out into a row buffer and runs its typed loop (the path softmax's
    exp(x - max) takes); the results must be the executor's on every layout."""
    x = tn.matrix("x", dtype=dtypes[0])
    c = tn.matrix("c", dtype=dtypes[1], shape=(None, 1))
    f_py, f_c = both([x, c], [tn.exp(x - c) * 2, x * c + c])
    assert c_kinds(f_c) == ["elemwise"] * len(c_kinds(f_c))
    xv = (rng.standard_normal((6, 9)) * 3).astype(dtypes[0])
    cv = (rng.standard_normal((6, 1)) * 3).astype(dtypes[1])
    for xs in (xv, xv[:, ::2], xv[::-1], np.asfortranarray(xv)):
        assert_same(f_c(xs, cv), f_py(xs, cv), rtol=1e-6)


def test_in_place_ops_in_the_dims_graph_change_no_planned_shape():
    # The gradient of set_subtensor with an empty slice computes a length in
    # place from Shape(x)[2]; the size model once evaluated that in place too,
    # zeroing a length the plan then gave a C step (which computed nothing).
    x, v = tn.tensor3("x"), tn.tensor3("v")
    index = (np.array([0]), np.array([[0]]), slice(7, None))
    grads = tn.grad((tn.set_subtensor(x[index], v) ** 2).sum(), [x, v])
    f_py, f_c = both([x, v], grads)
    values = np.full((1, 1, 1), 0.5), np.zeros((1, 1, 0))
    assert_same(f_c(*values), f_py(*values))
    np.testing.assert_array_equal(f_c(*values)[0], np.ones((1, 1, 1)))


@pytest.mark.usefixtures("freeing_intermediates")
def test_a_random_draw_takes_a_dead_buffer():
    """The C runtime's draw step (it writes two outputs) takes the draw's
    buffer from the plan as any C step does."""
    from tenure.random import RandomStream
    from tests.linkers.test_plan import LOG, address, calls, probe
    LOG.clear()
    x = tn.vector("x")
    q = probe("q", probe("p", tn.exp(x)))
    draw = RandomStream(3).normal(tn.sum(q) * 0.0, size=(x.shape[0],))   # drawn after q
    f = tn.function([x], [draw, q], mode=C_NO_REWRITES)
    assert "random" in c_kinds(f)
    f._thunk.min_reuse_bytes = 0
    got, _ = f(np.zeros(100))
    assert address(got) == calls("p")[0][1]     # p's dead buffer
    np.testing.assert_array_equal(
        got, tn.function([], RandomStream(3).normal(size=100), mode=tn.Mode(linker="py"))())
    LOG.clear()
