"""The C runtime (real C sources compiled once), its template mechanism, and
the loop libraries that share compiled loops across graphs."""

import configparser
import fnmatch
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import cache, compiler, ctemplate, kernels, module, runtime, scalar_code
from tenure.linkers.c import views as cviews
from tenure.linkers.c.cgen import C_DTYPES, HEADERS
from tenure.symbolic.ops import scalar as ps

C = tn.Mode(linker="c")


# --------------------------------------------------------------------------
# the sources


@pytest.mark.parametrize("openmp", [False, True], ids=["serial", "openmp"])
def test_runtime_sources_compile_without_warnings(cc, tmp_path, openmp):
    """Every runtime file, as the runtime build sees them, under -Wall -Wextra -Werror."""
    if openmp and not compiler.supports_openmp(cc):
        pytest.skip("no OpenMP")
    source = tmp_path / "runtime.c"
    source.write_text(runtime.runtime_source())
    flags = ["-Wall", "-Wextra", "-Werror", *runtime.COMPILE_FLAGS[:-1]]
    recipe = compiler.make_recipe(tuple(flags), openmp=openmp)
    compiler.compile_shared_library(source, tmp_path / "runtime.so", recipe)
    assert (tmp_path / "runtime.so").is_file()


def test_scalar_helpers_compile_without_warnings(cc, tmp_path):
    """The scalar ops' helpers (include/scalar_ops.h.src), expanded, with an
    expression of every op on every dtype using them, under -Wall -Wextra
    -Werror, as a loop library includes them."""
    body = []
    for name, op in ps.TABLE.items():
        for dtype in C_DTYPES:
            probes = [np.empty(0, dtype)] * op.nin
            if not scalar_code.has_c_code(op, probes):
                continue
            dtypes = scalar_code.c_input_dtypes(op, probes)
            out = op.output_dtype(probes)
            args = ", ".join(f"{scalar_code.c_type(d)} a{k}" for k, d in enumerate(dtypes))
            expr = scalar_code.c_code(op, [f"a{k}" for k in range(op.nin)], dtypes, out)
            unused = "".join(f"(void)a{k}; " for k in range(op.nin))   # isnan of an int ...
            body.append(f"{scalar_code.c_type(out)} tn_use_{name}_{dtype}({args})\n"
                        f"{{ int tn_status = 0; {scalar_code.c_type(out)} r = {expr}; "
                        f"{unused}(void)tn_status; return r; }}\n")
    body.append("int (*tn_use_import)(void) = tn_import_runtime;\n")
    assert len(body) > 300
    source = tmp_path / "scalar.c"
    source.write_text(HEADERS + runtime.header() + scalar_code.support_code() + "".join(body))
    recipe = compiler.make_recipe(("-Wall", "-Wextra", "-Werror", "-fno-math-errno"), openmp=False)
    compiler.compile_shared_library(source, tmp_path / "scalar.so", recipe)
    assert (tmp_path / "scalar.so").is_file()


def test_every_runtime_file_is_used():
    """A file in include/ or src/ that no build includes would be dead code."""
    text = runtime.runtime_source() + runtime.header()
    for path in runtime.source_files():
        assert f'"{path}"' in text or path.read_text()[:200] in text, path.name


def test_every_runtime_file_is_shipped_in_the_package():
    """setup.cfg's package data must name every C file, or an installed wheel
    (not the editable checkout the tests run from) has no runtime to build."""
    config = configparser.ConfigParser()
    config.read(Path(tn.__file__).parent.parent / "setup.cfg")
    patterns = config["options.package_data"]["tenure.linkers.c"].split(",")
    package = Path(runtime.__file__).parent
    for path in [*runtime.source_files(), scalar_code.SUPPORT_HEADER]:
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatchcase(relative, p.strip()) for p in patterns), relative


def test_digest_follows_the_sources(monkeypatch, tmp_path):
    before = runtime.digest()
    for path in runtime.source_files():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "runtime.c").write_text((tmp_path / "runtime.c").read_text() + "\n/* changed */\n")
    try:
        with monkeypatch.context() as patch:
            patch.setattr(runtime, "INCLUDE_DIR", tmp_path)
            patch.setattr(runtime, "SOURCE_DIR", tmp_path)
            runtime.digest.cache_clear()
            assert runtime.digest() != before
            assert runtime.runtime_name() != f"tenure_runtime_{before}"
    finally:
        runtime.digest.cache_clear()
    assert runtime.digest() == before


def test_runtime_is_loaded_once_and_hands_out_its_table(cc):
    module = runtime.load_runtime()
    assert runtime.load_runtime() is module
    assert module.__name__.endswith(runtime.runtime_name())
    assert type(runtime.capsule()).__name__ == "PyCapsule"
    assert module.FastCall is not None


def test_a_module_built_for_another_runtime_refuses_to_load(cc, tmp_path):
    name = "tn_test_other_runtime"
    source = (HEADERS + runtime.header().replace(runtime.digest(), "0" * 20) + f"""
static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit_{name}(void)
{{
    import_array();
    if (tn_import_runtime() < 0)
        return NULL;
    return PyModule_Create(&def);
}}
""")
    with pytest.raises(ImportError, match=r"generated for the C runtime 0{20}.*but the runtime "
                                          r"loaded is " + runtime.digest()):
        cache.load_module(name, source, compiledir=tmp_path)


# --------------------------------------------------------------------------
# the template mechanism


def test_repeat_blocks_expand_once_per_column():
    text = textwrap.dedent("""\
        int before;
        /**begin repeat
         * #name = a, b#
         * #T = int, double#
         */
        static @T@ twice_@name@(@T@ x) { return x + x; }
        /**end repeat**/
        int after;
        """)
    out = ctemplate.expand(text, "t.c.src")
    assert "static int twice_a(int x)" in out and "static double twice_b(double x)" in out
    assert out.count('#line 6 "t.c.src"') == 2       # each copy names its line
    lines = out.splitlines()
    marker = max(i for i, line in enumerate(lines) if line.startswith("#line"))
    assert lines[marker] == '#line 8 "t.c.src"' and lines[marker + 1] == "int after;"
    assert "@" not in ctemplate.expand(text, None) and "#line" not in ctemplate.expand(text, None)


@pytest.mark.parametrize("head, message", [
    (" * #name = a, b#\n * #T = int#\n", "different numbers of values"),
    (" * nothing here\n", "without variables"),
])
def test_bad_repeat_blocks_are_named(head, message):
    text = f"x\n/**begin repeat\n{head} */\nint @name@;\n/**end repeat**/\n"
    with pytest.raises(ctemplate.TemplateError, match=rf"t\.c\.src:2: .*{message}"):
        ctemplate.expand(text, "t.c.src")


def test_unknown_template_variable_is_named():
    text = "/**begin repeat\n * #name = a#\n */\nint @nmae@;\n/**end repeat**/\n"
    with pytest.raises(ctemplate.TemplateError, match="@nmae@ is not a variable"):
        ctemplate.expand(text, "t.c.src")


# --------------------------------------------------------------------------
# loops shared across graphs


def _loop_keys(f) -> list[str]:
    return [loop.key for loop in f._thunk.graph.loop_kernels]


def test_graphs_share_their_loops(cc):
    x, y = tn.matrix("x"), tn.matrix("y")
    f = tn.function([x, y], [tn.exp(x) * 2 + y, (x * y).sum(axis=1)], mode=C)
    a, b = tn.matrix("a"), tn.matrix("b")   # other names, other graph, same arithmetic
    g = tn.function([a, b], [(a * b).sum(axis=1), tn.exp(a) * 2 + b, a - b], mode=C)
    assert len(_loop_keys(f)) == 2 and set(_loop_keys(f)) < set(_loop_keys(g))
    futures = [kernels._libraries[key] for key in _loop_keys(f)]
    assert all(kernels._libraries[key] is future for key, future in zip(_loop_keys(f), futures))
    u, v = np.random.default_rng(0).random((2, 3, 4))
    for got, want in zip(g(u, v), [(u * v).sum(axis=1), np.exp(u) * 2 + v, u - v]):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _run(code: str, compiledir) -> subprocess.CompletedProcess:
    env = dict(os.environ, TENURE_FLAGS=f"compiledir={compiledir}")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


_GRAPH = """
    import json, numpy as np, tenure as tn
    from tenure.linkers.c import cache
    x, y = tn.matrix("x"), tn.matrix("y")
    f = tn.function([x, y], {expr}, mode=tn.Mode(linker="c"))
    u = np.arange(6.0).reshape(2, 3)
    out = f(u, u + 1)
    out = out if isinstance(out, list) else [out]
    print(json.dumps({{"result": [np.asarray(r).tolist() for r in out],
                      "names": sorted(e.name for e in cache.info().entries)}}))
"""


def test_another_process_finds_the_loops_through_the_index(cache_with_the_runtime):
    tmp_path = cache_with_the_runtime
    first = _run(_GRAPH.format(expr="tn.tanh(x) * y + 1"), tmp_path)
    assert first.returncode == 0, first.stderr
    libraries = [n for n in json.loads(first.stdout)["names"] if n.startswith("tn_loops_")]
    assert len(libraries) == 1
    assert len(os.listdir(kernels.index_dir(tmp_path))) == 1
    # Nothing else was compiled: the schedule is data for the runtime.
    assert not [n for n in json.loads(first.stdout)["names"] if n.startswith("tn_graph_")]
    # Another graph (another output, a view) with the same loop: no new
    # library, and again nothing else compiled.
    second = _run(_GRAPH.format(expr="[tn.tanh(x) * y + 1, x.T]"), tmp_path)
    assert second.returncode == 0, second.stderr
    names = json.loads(second.stdout)["names"]
    assert [n for n in names if n.startswith("tn_loops_")] == libraries
    assert not [n for n in names if n.startswith("tn_graph_")]


def test_a_stale_index_entry_is_built_again(cache_with_the_runtime):
    tmp_path = cache_with_the_runtime
    assert _run(_GRAPH.format(expr="tn.sqrt(x) * 3 - y"), tmp_path).returncode == 0
    for entry in cache.info(tmp_path).entries:   # the library goes, its index stays
        if entry.name.startswith("tn_loops_"):
            cache._discard(cache.entries_dir(tmp_path), entry.path, entry.key)
    (key,) = os.listdir(kernels.index_dir(tmp_path))
    again = _run(_GRAPH.format(expr="[tn.sqrt(x) * 3 - y, x + 0]"), tmp_path)
    assert again.returncode == 0, again.stderr
    u = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(json.loads(again.stdout)["result"][0], np.sqrt(u) * 3 - (u + 1),
                               rtol=1e-12)
    assert any(n.startswith("tn_loops_") for n in json.loads(again.stdout)["names"])


def test_a_schedule_refuses_what_does_not_fit_its_description(cc):
    """The interpreter reads a description and capsules: a wrong one is an
    exception when the schedule is made, never a crash when it runs."""
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) + 1, mode=C)
    graph = f._thunk.graph
    Schedule = runtime.load_runtime().Schedule
    loops = kernels.loops(_loop_keys(f))
    with pytest.raises(ValueError, match="loop 0 of 0"):
        Schedule(graph.description, (), None)
    with pytest.raises(ValueError):   # a capsule of another kind is refused by its name
        Schedule(graph.description, (runtime.capsule(),), None)
    bad_slot = graph.description._replace(outputs=(graph.description.n_slots,))
    with pytest.raises(ValueError, match="slot .* out of range"):
        Schedule(bad_slot, loops, None)
    step = graph.description.steps[0]
    bad_step = graph.description._replace(steps=(step._replace(kind=99),))
    with pytest.raises(ValueError, match="unknown step kind 99"):
        Schedule(bad_step, loops, None)
    with pytest.raises(TypeError):
        Schedule(graph.description[:-1], loops, None)
    run = Schedule(graph.description, loops, None)
    n_slots, n_steps = f._thunk.plan.n_slots, len(f._thunk.plan.steps)
    args = ([None] * n_slots, [np.ones(3)], None, (None,) * (n_steps + 1), np.zeros(1, np.intp))
    np.testing.assert_allclose(run(*args)[0], np.exp(1.0) + 1)
    with pytest.raises(ValueError, match=rf"lengths {n_slots}, 1 and {n_steps + 1}, got 1, 1"):
        run([None], [np.ones(3)], None, (None,) * (n_steps + 1), np.zeros(1, np.intp))
    with pytest.raises(TypeError, match="expected"):
        run(*args[:4])
    # Schedule.kernel: one step's kernel, its errors named
    with pytest.raises(IndexError, match="no step 5"):
        run.kernel(5, (np.ones(3),), np.ones(3))
    with pytest.raises(TypeError, match=r"expected 1 input\(s\), got 2"):
        run.kernel(0, (np.ones(3), np.ones(3)), np.ones(3))
    with pytest.raises(TypeError, match="kernel: out: expected a numpy.ndarray, got list"):
        run.kernel(0, (np.ones(3),), [])


def _step_of(graph, kind):
    return next(k for k, step in enumerate(graph.description.steps) if step.kind == kind)


def _with_step(description, k, step):
    steps = list(description.steps)
    steps[k] = step
    return description._replace(steps=tuple(steps))


def test_a_schedule_checks_what_its_drivers_would_read(cc):
    """Lengths the drivers index by (a reduction's axis flags, a product's
    batch axes, a view's axes) are checked against the ndims they go with."""
    x = tn.matrix("x")
    f = tn.function([x], [x.sum(axis=0), x @ x.T, x.dimshuffle(1, "x", 0), x[1:, 0],
                          tn.softmax(x, axis=1)], mode=C)
    graph, Schedule = f._thunk.graph, runtime.load_runtime().Schedule
    loops = kernels.loops(_loop_keys(f))
    desc = graph.description
    Schedule(desc, loops, None)   # the real one is fine

    k = _step_of(graph, module.REDUCE)
    step = desc.steps[k]
    bad = step._replace(params=step.params._replace(reduced=(1,)))
    with pytest.raises(ValueError, match=r"reduced: expected 2 item\(s\)"):
        Schedule(_with_step(desc, k, bad), loops, None)
    bad = step._replace(params=step.params._replace(shape_src=(5,)))
    with pytest.raises(ValueError, match="output axis 0 comes from axis 5 of 2"):
        Schedule(_with_step(desc, k, bad), loops, None)

    k = _step_of(graph, module.PRODUCT)
    step = desc.steps[k]
    bad = step._replace(params=step.params._replace(
        axes=step.params.axes._replace(nb=2)))
    with pytest.raises(ValueError, match=r"ba: expected 2 item\(s\)"):
        Schedule(_with_step(desc, k, bad), loops, None)

    views = [k for k, s in enumerate(desc.steps) if s.kind == module.VIEW]
    for k in views:
        step = desc.steps[k]
        if step.params.kind == cviews.DIMSHUFFLE:
            order = step.params.order
            bad = step._replace(params=step.params._replace(order=order + (0,)))
            with pytest.raises(ValueError, match=f"view kind 0 .* {len(order) + 1} axes in"):
                Schedule(_with_step(desc, k, bad), loops, None)
            bad = step._replace(params=step.params._replace(order=order[:-1] + (7,)))
            with pytest.raises(ValueError,
                               match=f"output axis {len(order) - 1} is input axis 7 of 2"):
                Schedule(_with_step(desc, k, bad), loops, None)
        else:
            bad = step._replace(params=step.params._replace(out_nd=2))
            with pytest.raises(ValueError, match="the index makes 1 output axes, not 2"):
                Schedule(_with_step(desc, k, bad), loops, None)

    k = _step_of(graph, module.NNET)
    step = desc.steps[k]
    bad = step._replace(ins=step.ins * 2, head=step.head._replace(
        whats=step.head.whats * 2, weak=step.head.weak * 2))
    with pytest.raises(ValueError, match="expected 1 input, got 2"):
        Schedule(_with_step(desc, k, bad), loops, None)
    bad = step._replace(head=step.head._replace(destroyed=-5))
    with pytest.raises(ValueError, match="destroyed input -5 of 1"):
        Schedule(_with_step(desc, k, bad), loops, None)


def test_a_graph_of_known_loops_compiles_nothing(cc, tmp_path):
    """Its steps are data for the runtime's interpreter; its loops are built."""
    with tn.config.change_flags(compiledir=str(tmp_path)):
        x, y = tn.matrix("x"), tn.matrix("y")
        first = tn.function([x, y], [tn.exp(x) * y, (x @ y).sum(axis=0)], mode=C)
        before = {e.name for e in cache.info(tmp_path).entries}
        a, b = tn.matrix("a"), tn.matrix("b")
        second = tn.function([a, b], [(a @ b).sum(axis=0), tn.exp(b) * a], mode=C)
        assert {e.name for e in cache.info(tmp_path).entries} == before
    assert second._thunk.graph.source is None
    u = np.arange(4.0).reshape(2, 2)
    np.testing.assert_allclose(second(u, u + 1)[1], first(u + 1, u)[0])


def test_a_forked_child_builds_loops_of_its_own(cache_with_the_runtime):
    """The background builds run on threads, which a forked child does not
    inherit: it must build new loops itself instead of waiting forever."""
    code = """
        import multiprocessing, numpy as np, tenure as tn
        x = tn.vector("x")
        f = tn.function([x], tn.exp(x) + 1, mode=tn.Mode(linker="c"))   # the pool's threads start

        def child(queue):
            y = tn.vector("y")
            g = tn.function([y], tn.cos(y) * 7 - 2, mode=tn.Mode(linker="c"))   # new loops
            queue.put(float(g(np.zeros(1))[0]))

        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        p = ctx.Process(target=child, args=(queue,))
        p.start()
        print(queue.get(timeout=120))
        p.join(30)
    """
    result = _run(code, cache_with_the_runtime)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.split()[-1]) == 5.0
