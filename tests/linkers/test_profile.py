"""``function(..., profile=True)``: time per node beside the planned memory
(:mod:`tenure.linkers.profile`).  No assertion on how long anything took:
the checks are on structure and consistency (every node present, counts,
fractions adding up to 1, the memory columns agreeing with the report)."""

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.profile import Profile, ProfileUnsupported


def _graph():
    """A graph with C steps and a step without C code (sort), and an update."""
    x = tn.vector("x")
    w = tn.shared(np.ones(40), name="w")
    y = tn.sort(tn.exp(x) * w) * 2.0
    return x, w, [y, (y - 1.0).sum()], [(w, w * 0.5)]


def _compile(linker, profile=True, name="step"):
    x, w, outs, updates = _graph()
    f = tn.function([x], outs, updates=updates, mode=tn.Mode(linker=linker),
                    profile=profile, name=name)
    return f, w


def _check_consistent(profile: Profile, f, n_calls: int):
    assert profile.calls == n_calls
    nodes = {n.node for n in profile.nodes}
    assert nodes == set(f.fgraph.apply_nodes)            # every node, once
    assert len(profile.nodes) == len(f.fgraph.apply_nodes)
    for n in profile.nodes:
        assert n.calls == n_calls
        assert n.op == str(n.node.op)
    rows = profile.rows()
    fractions = [r["fraction"] for r in rows if r["fraction"] is not None]
    assert sum(fractions) == pytest.approx(1.0, abs=1e-9)
    assert all(0.0 <= fr <= 1.0 for fr in fractions)
    timed = sum(r["seconds"] for r in rows if r["seconds"] is not None)
    assert timed == pytest.approx(profile.total_seconds, rel=1e-9)
    assert 0.0 < profile.python_fraction <= 1.0
    assert profile.python_seconds <= profile.run_seconds <= profile.total_seconds
    data = profile.to_dict()
    assert data["calls"] == n_calls and data["rows"] == rows
    assert data["python_fraction"] == profile.python_fraction
    # the node rows come slowest first
    node_seconds = [r["seconds"] or 0.0 for r in rows if r["kind"] in ("python", "c")]
    assert node_seconds == sorted(node_seconds, reverse=True)
    text = str(profile)
    assert f"{n_calls} calls" in text and "in Python steps" in text
    assert f"({profile.linker} linker)" in text and "'step'" in text
    assert text.count("\n") == len(rows) + 2      # title, header, rows, peak line
    for n in profile.nodes:
        assert n.op[:34] in text
    assert "call overhead" in text


def test_py_profiles_every_step(rng):
    f, w = _compile("py")
    ref, _ = _compile("py", profile=False)
    for _ in range(3):
        arg = rng.normal(size=40)
        out = f(arg)
        np.testing.assert_allclose(out[0], ref(arg)[0])
    np.testing.assert_allclose(w.get_value(), np.full(40, 0.5 ** 3))
    p = f.profile
    assert p.linker == "py"
    _check_consistent(p, f, 3)
    # every step of the Python executor is a Python step, timed on its own
    assert all(n.python and n.seconds is not None for n in p.nodes)
    assert [r["kind"] for r in p.rows()][-1] == "overhead"
    assert "c steps" not in [r["kind"] for r in p.rows()]
    assert p.c_seconds == 0.0


def test_c_profiles_python_steps_and_c_steps_together(cc_or_skip, rng):
    f, w = _compile("c")
    assert f.profile.linker == "c"
    kinds = f._thunk.graph.kinds
    assert "py" in kinds and any(k != "py" for k in kinds)
    for _ in range(4):
        f(rng.normal(size=40))
    np.testing.assert_allclose(w.get_value(), np.full(40, 0.5 ** 4))
    p = f.profile
    _check_consistent(p, f, 4)
    by_node = {n.node: n for n in p.nodes}
    for step, kind in zip(f._thunk.plan.steps, kinds):
        n = by_node[step.node]
        assert n.python == (kind == "py")
        assert (n.seconds is None) == (kind != "py")   # C steps: not timed one by one
    sort_rows = [r for r in p.rows() if "Sort" in r["op"] or "sort" in r["op"]]
    assert sort_rows and all(r["kind"] == "python" for r in sort_rows)
    c_rows = [r for r in p.rows() if r["kind"] == "c steps"]
    assert len(c_rows) == 1
    n_c = sum(k != "py" for k in kinds)
    assert c_rows[0]["op"] == f"C steps ({n_c} nodes)" and c_rows[0]["calls"] == 4
    assert p.python_fraction < 1.0


@pytest.mark.parametrize("linker", ["py", "c"])
def test_memory_columns_match_the_memory_report(linker, rng):
    if linker == "c":
        from tenure.linkers.c import compiler
        if compiler.find_compiler() is None:
            pytest.skip("no working C compiler")
    x = tn.matrix("x")
    y = tn.tanh(tn.exp(x) * 2.0 + 1.0).sum(axis=0)
    f = tn.function([x], y, mode=tn.Mode(linker=linker, rewrites="none"), profile=True)
    arg = rng.normal(size=(30, 20))
    f(arg)
    report = f.memory_report(arg, print_report=False)
    p = f.profile
    assert p.predicted_peak == report.predicted_peak > 0
    live = [n.live_bytes for n in sorted(p.nodes, key=lambda n: n.index)]
    assert all(b is not None for b in live)
    assert max(live) == report.predicted_peak
    # each step's allocation is what the report saw as new or reused memory, at most
    allocated = sum(n.allocated_bytes for n in p.nodes)
    assert 0 < allocated <= sum(r.nbytes for r in report.records)
    assert f"{report.predicted_peak:,} bytes" in str(p)
    # the report's own runs are not profiled calls
    assert p.calls == 1 and all(n.calls == 1 for n in p.nodes)


def test_new_shapes_update_the_memory_columns(rng):
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) * 2.0, mode=tn.Mode(linker="py", rewrites="none"),
                    profile=True)
    f(np.ones(10))
    small = f.profile.predicted_peak
    f(np.ones(1000))
    assert f.profile.predicted_peak > small
    assert f.profile.calls == 2


def test_reset_forgets_the_calls(rng):
    f, _ = _compile("py")
    f(rng.normal(size=40))
    f.profile.reset()
    assert f.profile.calls == 0 and f.profile.total_seconds == 0.0
    assert all(n.calls == 0 for n in f.profile.nodes)
    f(rng.normal(size=40))
    _check_consistent(f.profile, f, 1)


@pytest.mark.parametrize("linker", ["py", "c"])
def test_a_loop_over_minibatches_makes_two_plans_in_a_thousand_calls(linker):
    """Issue 39: the profile counts the memory plans made and found.  A
    training step over a shared data set sliced by an index,
    X[i * 20:(i + 1) * 20], called for 1,000 indices (121 minibatches, the
    last of 10 rows, cycled): one plan for the full batches, one for the
    short one, and none after the first epoch."""
    X = tn.shared(np.random.default_rng(0).random((2410, 8)), name="X")
    W = tn.shared(np.zeros((8, 3)), name="W")
    i = tn.scalar("i", dtype="int64")
    cost = tn.tanh(X[i * 20:(i + 1) * 20] @ W + 0.1).sum()
    f = tn.function([i], cost, updates=[(W, W - 0.01 * tn.grad(cost, W))],
                    mode=tn.Mode(linker=linker), profile=True)
    for k in range(121):
        f(k)
    assert (f.profile.plans_made, f.profile.plan_hits) == (2, 119)
    for k in range(121, 1000):
        f(k % 121)
    assert (f.profile.plans_made, f.profile.plan_hits) == (2, 998)
    assert f.profile.to_dict()["plans_made"] == 2
    assert "memory plans: 2 made, 998 reused" in str(f.profile)
    X.set_value(np.ones((100, 8)))                   # new shapes: a new plan
    f(0)
    assert (f.profile.plans_made, f.profile.plan_hits) == (3, 998)
    f.profile.reset()
    assert (f.profile.plans_made, f.profile.plan_hits) == (0, 0)


def test_a_failing_call_counts_the_steps_that_ran():
    x = tn.vector("x")
    y = tn.vector("y")
    f = tn.function([x, y], tn.exp(x) + y, mode=tn.Mode(linker="py"), profile=True)
    with pytest.raises(ValueError):
        f(np.ones(3), np.ones(4))
    p = f.profile
    assert p.calls == 1
    assert sum(r["fraction"] for r in p.rows() if r["fraction"] is not None) == \
        pytest.approx(1.0)


@pytest.mark.parametrize("linker", ["py", "c"])
def test_without_profile_nothing_is_wrapped(linker):
    if linker == "c":
        from tenure.linkers.c import compiler
        if compiler.find_compiler() is None:
            pytest.skip("no working C compiler")
    f, _ = _compile(linker, profile=False)
    assert f.profile is None
    assert "_call" not in vars(f)                    # the class's method, no wrapper
    assert type(f._thunk).__name__ != "ProfiledThunk"
    if linker == "c":
        g, _ = _compile(linker, profile=True)
        x = tn.vector("x")
        plain = tn.function([x], tn.exp(x) * 2.0, mode=tn.Mode(linker="c"))
        assert plain._fast_call is not None         # the compiled call path, untouched
        assert g._fast_call is None                  # profiled: the timed Python path


@pytest.mark.parametrize("linker", ["check", "cuda_host", "dask", "cuda"])
def test_other_linkers_refuse_with_their_name(linker):
    x = tn.vector("x")
    with tn.config.change_flags(cuda_emulation=True):
        mode = tn.Mode(linker=linker)
    with pytest.raises(ProfileUnsupported, match=f"the '{linker}' linker cannot be profiled"):
        tn.function([x], x * 2.0, mode=mode, profile=True)
    assert issubclass(ProfileUnsupported, ValueError)


def test_profile_must_be_a_bool():
    x = tn.vector("x")
    with pytest.raises(TypeError, match="profile must be True or False"):
        tn.function([x], x * 2.0, profile="yes")


@pytest.mark.parametrize("linker", ["py", "c"])
def test_calls_from_several_threads_all_count(linker):
    import threading
    if linker == "c":
        from tenure.linkers.c import compiler
        if compiler.find_compiler() is None:
            pytest.skip("no working C compiler")
    f, _ = _compile(linker)
    arg = np.linspace(-1.0, 1.0, 40)

    def work():
        for _ in range(10):
            f(arg)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _check_consistent(f.profile, f, 40)


def test_the_stand_in_thunk_delegates_and_copies():
    import copy
    f, _ = _compile("py")
    stand_in = f._thunk
    assert type(stand_in).__name__ == "ProfiledThunk"
    assert stand_in.kept_slots == stand_in._thunk.kept_slots
    assert copy.copy(stand_in)._thunk is stand_in._thunk
    f.free()
    assert f.lent_buffers() == []


def test_copies_and_pickles_compile_without_a_profile():
    import pickle
    f, _ = _compile("py")
    assert f.copy().profile is None
    assert pickle.loads(pickle.dumps(f)).profile is None
