"""OpenMP in the C linker's loops (elemwise.py, reduce.py; ``config.openmp``).

With OpenMP on and a minimum size of one element, every elementwise loop and
every reduction with a kept axis runs on several threads: the results must be
the serial build's bit for bit (whatever the thread count: the work is cut the
same way, and no output element's summation order changes) and close to the
Python executor's.  With OpenMP off the source has no OpenMP in it.

Each group of graphs is one function with many outputs, so each setting
compiles one module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import compiler, module
from tenure.linkers.c import elemwise as ce
from tenure.linkers.c.linker import CThunk
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.types import TensorType

C = tn.Mode(linker="c")
PY = tn.Mode(linker="py")
ROOT = Path(tn.__file__).resolve().parents[1]

#: serial, then parallel with OpenMP's thread count, then with more threads
#: than this machine may have cores (so several threads run even on one core)
SETTINGS = [dict(openmp=False),
            dict(openmp=True, openmp_elemwise_minsize=1),
            dict(openmp=True, openmp_elemwise_minsize=1, openmp_threads=3)]


@pytest.fixture(scope="module")
def omp(cc):
    if not compiler.supports_openmp(cc):
        pytest.skip(f"the C compiler {cc!r} cannot build OpenMP code (-fopenmp)")
    return cc


def _var(dtype, shape, name):
    return TensorType(dtype, shape)(name)


def _compile(inputs, outputs, **flags):
    with tn.config.change_flags(**flags):
        f = tn.function(inputs, outputs, mode=C)
    assert isinstance(f._thunk, CThunk)
    return f


def _graph_thread_settings(graph) -> set[tuple[int, int]]:
    """The (minsize, threads) of every elementwise kernel and reduction of a
    compiled graph's schedule."""
    return {(step.params.minsize, step.params.threads) for step in graph.description.steps
            if step.kind in (module.ELEMWISE, module.REDUCE)}


def _runs_threads(graph) -> bool:
    """Whether some loop of a compiled graph may run on threads: a kernel
    whose description allows them (the runtime's drivers run the threads)."""
    return any(m >= 0 for m, _ in _graph_thread_settings(graph))


def _check_all_settings(inputs, outputs, values, rtol):
    """Every setting gives the serial results exactly, and the Python
    executor's within ``rtol``; only the parallel builds have OpenMP code."""
    serial = _compile(inputs, outputs, **SETTINGS[0])
    want = serial(*values)
    with np.errstate(all="ignore"):  # NumPy warns of sin(inf); the C code does not
        reference = tn.function(inputs, outputs, mode=PY)(*values)
    for got, ref in zip(want, reference):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)
    assert not _runs_threads(serial._thunk.graph)
    for flags in SETTINGS[1:]:
        f = _compile(inputs, outputs, **flags)
        assert _runs_threads(f._thunk.graph)
        for i, got in enumerate(f(*values)):
            np.testing.assert_array_equal(got, want[i], err_msg=f"output {i} with {flags}")


def _layouts(a: np.ndarray) -> dict:
    """``a`` as C-ordered, Fortran-ordered, reversed and every-other-column views."""
    wide = np.repeat(a, 2, axis=-1)
    return {"c": a, "f": np.asfortranarray(a), "reversed": a[..., ::-1].copy()[..., ::-1],
            "strided": wide[..., ::2]}


# --------------------------------------------------------------------------
# elementwise


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 1e-5)])
@pytest.mark.parametrize("layout", ["c", "f", "reversed", "strided"])
def test_elementwise_float_matches_serial_exactly(omp, dtype, rtol, layout):
    rng = np.random.default_rng(1)
    x, z = _var(dtype, (None, None), "x"), _var(dtype, (None, None), "z")
    c, v = _var(dtype, (None, 1), "c"), _var(dtype, (None,), "v")
    outputs = [tn.exp(x) * 2 + tn.sin(z) * x,       # the flat loop
               tn.exp(x - c) + tn.log1p(tn.abs(z)),  # a repeated column: the row buffer
               x * v - c,                            # broadcast rows
               tn.maximum(x, z) / (1 + tn.abs(c))]
    shape = (37, 9001)  # rows of several blocks, not a multiple of any vector width
    xs, zs = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    cs = rng.standard_normal((shape[0], 1)).astype(dtype)
    vs = rng.standard_normal(shape[1]).astype(dtype)
    xs[3, 5], zs[7, 100] = np.nan, np.inf
    values = [_layouts(xs)[layout], _layouts(zs)[layout], cs, vs]
    _check_all_settings([x, z, c, v], outputs, values, rtol)


def test_elementwise_flat_vector(omp):
    rng = np.random.default_rng(2)
    x, z = _var("float64", (None,), "x"), _var("float64", (None,), "z")
    values = [rng.standard_normal(300_007), rng.standard_normal(300_007)]
    _check_all_settings([x, z], [tn.exp(x) * 2 + tn.sin(z) * x], values, 1e-12)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_elementwise_integers(omp, dtype):
    rng = np.random.default_rng(3)
    x, y = _var(dtype, (None, None), "x"), _var(dtype, (None, None), "y")
    outputs = [x * 3 + y // 2, tn.maximum(x, y) - x % 7, (x > y) | (y == 0)]
    xs = rng.integers(0, 100, (50, 6000)).astype(dtype)
    ys = rng.integers(0, 100, (50, 6000)).astype(dtype)
    _check_all_settings([x, y], outputs, [xs, ys.T.copy().T], 0)


def test_elementwise_error_raised_from_threads(omp):
    x, y = _var("int64", (None,), "x"), _var("int64", (None,), "y")
    f = _compile([x, y], [x ** y], openmp=True, openmp_elemwise_minsize=1, openmp_threads=3)
    ys = np.ones(100_000, dtype=np.int64)
    ys[77_777] = -1  # in the middle of one thread's part
    with pytest.raises(ValueError, match="negative integer power"):
        f(np.full(100_000, 2, dtype=np.int64), ys)


# --------------------------------------------------------------------------
# reductions


def _reductions(x, c, fused):
    outs = [tn.sum(x, axis=0), tn.sum(x, axis=1), tn.sum(x, axis=2, keepdims=True),
            tn.sum(x, axis=(0, 2)), tn.sum(x),
            tn.max(x, axis=0), tn.max(x, axis=2), tn.min(x, axis=(0, 1), keepdims=True),
            tn.mean(x, axis=1), tn.mean(x, axis=(0, 2), keepdims=True),
            tn.prod(x[:, :2], axis=2)]
    if fused:
        outs += [tn.sum(tn.exp(x - c), axis=2), tn.max(tn.sin(x) * c, axis=0),
                 tn.sum(x * x + c, axis=1)]
    return outs


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-9), ("float32", 1e-4)])
@pytest.mark.parametrize("layout", ["c", "f", "reversed", "strided"])
def test_reductions_match_serial_bit_for_bit(omp, dtype, rtol, layout):
    rng = np.random.default_rng(4)
    x, c = _var(dtype, (None, None, None), "x"), _var(dtype, (None, None, 1), "c")
    outputs = _reductions(x, c, fused=True)
    xs = (rng.standard_normal((6, 40, 1300)) * 0.5).astype(dtype)
    cs = rng.standard_normal((6, 40, 1)).astype(dtype)
    _check_all_settings([x, c], outputs, [_layouts(xs)[layout], cs], rtol)
    if layout == "c":
        f = _compile([x, c], outputs, openmp=False)
        assert any(isinstance(n.op, FusedReduce) for n in f.fgraph.toposort())


def test_reductions_with_nan(omp):
    rng = np.random.default_rng(5)
    x = _var("float64", (None, None, None), "x")
    xs = rng.standard_normal((6, 40, 1300))
    xs[2, 3, 4] = xs[5, 39, 1299] = np.nan
    _check_all_settings([x], _reductions(x, None, fused=False), [xs], 1e-9)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_reductions_integers(omp, dtype):
    rng = np.random.default_rng(6)
    x = _var(dtype, (None, None, None), "x")
    xs = rng.integers(0, 50, (6, 40, 1300)).astype(dtype)
    _check_all_settings([x], _reductions(x, None, fused=False), [xs], 1e-9)


def test_reduction_of_broadcast_inputs(omp):
    rng = np.random.default_rng(7)
    r, k = _var("float32", (None, 1), "r"), _var("float32", (None,), "k")
    outputs = [tn.sum(tn.exp(r - k), axis=1), tn.sum(r * k, axis=0), tn.max(r + k, axis=1)]
    values = [rng.standard_normal((700, 1)).astype("float32"),
              rng.standard_normal(3000).astype("float32")]
    _check_all_settings([r, k], outputs, values, 1e-4)


# --------------------------------------------------------------------------
# the source and the config


def _node():
    x, z = _var("float64", (None,), "x"), _var("float64", (None,), "z")
    f = tn.function([x, z], tn.exp(x) * 2 + tn.sin(z) * x, mode=PY)
    return f.fgraph.toposort()[-1]


def _mentions_openmp(kernel: str) -> bool:
    return any(word in kernel for word in ("_OPENMP", "pragma omp", "omp_", "tn_omp"))


def _loop_settings(node) -> tuple[int, int]:
    """(minsize, threads) of an elementwise node's description."""
    desc = ce.description(node)
    return desc.minsize, desc.threads


def test_serial_graphs_run_no_threads(cc):
    x = _var("float64", (None, None), "x")
    f = _compile([x], [tn.exp(x) + 1, tn.sum(x, axis=1)], openmp=False)
    assert f._thunk.graph.source is None   # nothing but loops and their descriptions
    assert _graph_thread_settings(f._thunk.graph) == {(-1, 0)}   # the drivers: never threads
    with tn.config.change_flags(openmp=False):
        assert _loop_settings(_node()) == (-1, 0)
        # the loops themselves never mention OpenMP: the runtime's drivers run the threads
        assert not _mentions_openmp(ce.loop_code(_node(), "k"))


def test_settings_go_into_the_description(omp):
    node = _node()
    with tn.config.change_flags(openmp=True, openmp_elemwise_minsize=12345, openmp_threads=0):
        default = _loop_settings(node)
    with tn.config.change_flags(openmp=True, openmp_elemwise_minsize=999, openmp_threads=5):
        changed = _loop_settings(node)
    # (0 threads: OpenMP's default.)
    assert default == (12345, 0)
    assert changed == (999, 5)


def test_openmp_enabled_follows_the_config(omp):
    with tn.config.change_flags(openmp=False):
        assert compiler.openmp_enabled() is False
        assert ce.parallel_settings() is None
    with tn.config.change_flags(openmp=None, openmp_elemwise_minsize=7, openmp_threads=2):
        assert compiler.openmp_enabled() is True
        assert ce.parallel_settings() == ce.Parallel(minsize=7, threads=2)


def test_compiler_without_openmp_gives_serial_code(cc, monkeypatch):
    monkeypatch.setattr(compiler, "supports_openmp", lambda command=None: False)
    compiler._warn_no_openmp.cache_clear()
    with tn.config.change_flags(openmp=None):
        assert compiler.openmp_enabled() is False
        assert _loop_settings(_node()) == (-1, 0)
    with tn.config.change_flags(openmp=True):
        with pytest.warns(RuntimeWarning, match="OpenMP"):
            assert compiler.openmp_enabled() is False
    compiler._warn_no_openmp.cache_clear()


def _run_python(code: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, TENURE_FLAGS=f"compiledir={tn.config.compiledir}")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_forked_child_does_not_hang(omp, tmp_path):
    """GNU libgomp's thread pool does not survive fork(): the child of a process
    that ran a parallel loop must run serially instead of hanging."""
    code = """
        import os, signal, sys
        import numpy as np
        import tenure as tn
        x = tn.vector("x", dtype="float64")
        with tn.config.change_flags(openmp=True, openmp_elemwise_minsize=1,
                                    openmp_threads=2):
            f = tn.function([x], [tn.exp(x) * 2, tn.sum(x.reshape((100, -1)), axis=1)],
                            mode=tn.Mode(linker="c"))
        v = np.arange(100_000.0) / 1e5
        want = [r.copy() for r in f(v)]
        pid = os.fork()
        if pid == 0:
            signal.alarm(120)  # a hung child must not outlive the test
            ok = all(np.array_equal(a, b) for a, b in zip(f(v), want))
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """
    proc = _run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_large_loops_start_threads_and_small_ones_do_not(omp, tmp_path):
    code = """
        import os
        import numpy as np
        import tenure as tn
        x = tn.vector("x", dtype="float64")
        with tn.config.change_flags(openmp=True, openmp_elemwise_minsize=50_000,
                                    openmp_threads=3):
            f = tn.function([x], tn.exp(x) * 2, mode=tn.Mode(linker="c"))
        threads = lambda: len(os.listdir("/proc/self/task"))
        before = threads()
        f(np.ones(49_999))
        small = threads()
        f(np.ones(50_000))
        print(small - before, threads() - before)
    """
    proc = _run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "2"]  # libgomp keeps its 2 workers


@pytest.mark.parametrize("preset, expected", [(None, "passive"), ("active", "active")])
def test_openmp_threads_sleep_between_loops_unless_the_environment_says(omp, tmp_path, monkeypatch,
                                                                        preset, expected):
    """Spinning OpenMP threads take the cores from the BLAS call after a loop:
    the policy is set before the OpenMP runtime loads (it reads it then), and
    a policy the user set is kept."""
    code = """
        import os
        import numpy as np
        import tenure as tn
        before = os.environ.get("OMP_WAIT_POLICY")
        x = tn.vector("x", dtype="float64")
        with tn.config.change_flags(openmp=True):
            f = tn.function([x], tn.exp(x) * 2, mode=tn.Mode(linker="c"))
        f(np.ones(10))
        print(before, os.environ.get("OMP_WAIT_POLICY"))
    """
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    if preset is not None:
        monkeypatch.setenv("OMP_WAIT_POLICY", preset)
    proc = _run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(preset), expected]
