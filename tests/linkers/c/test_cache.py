"""tenure.linkers.c.cache: keys, loading, the on-disk cache, its locks, and the CLI."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tenure as tn
from tenure import config
from tenure.linkers.c import cache, cache_locks, compiler
from tenure.linkers.c.cache import CacheWarning
from tenure.linkers.c.compiler import CompileError

ROOT = Path(tn.__file__).resolve().parents[1]
TAG = f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"


def add_source(name: str = "addmod", salt: str = "") -> str:
    """A module ``name`` with ``add(a, b)``; ``salt`` makes the source (and key) new."""
    return textwrap.dedent(f"""\
        /* {salt} */
        #define PY_SSIZE_T_CLEAN
        #include <Python.h>

        static PyObject* add(PyObject* self, PyObject* args) {{
            PyObject *a, *b;
            if (!PyArg_ParseTuple(args, "OO:add", &a, &b)) return NULL;
            return PyNumber_Add(a, b);
        }}

        static PyMethodDef methods[] = {{
            {{"add", add, METH_VARARGS, "a + b"}},
            {{NULL, NULL, 0, NULL}}
        }};

        static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, methods}};

        PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&def); }}
        """)


NUMPY_SOURCE = textwrap.dedent("""\
    #define PY_SSIZE_T_CLEAN
    #include <Python.h>
    #include <numpy/arrayobject.h>

    static PyObject* total(PyObject* self, PyObject* arg) {
        if (!PyArray_Check(arg) || PyArray_TYPE((PyArrayObject*)arg) != NPY_FLOAT64) {
            PyErr_Format(PyExc_TypeError, "total: expected a float64 ndarray, got %R", arg);
            return NULL;
        }
        PyArrayObject* a = PyArray_GETCONTIGUOUS((PyArrayObject*)arg);
        if (a == NULL) return NULL;
        const double* data = (const double*)PyArray_DATA(a);
        double sum = 0.0;
        for (npy_intp i = 0, n = PyArray_SIZE(a); i < n; i++) sum += data[i];
        Py_DECREF(a);
        return PyFloat_FromDouble(sum);
    }

    static PyMethodDef methods[] = {
        {"total", total, METH_O, "the sum of a float64 array's elements"},
        {NULL, NULL, 0, NULL}
    };

    static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "npsum", NULL, -1, methods};

    PyMODINIT_FUNC PyInit_npsum(void) {
        import_array();
        return PyModule_Create(&def);
    }
    """)

OPENMP_SOURCE = textwrap.dedent("""\
    #include <Python.h>
    #include <omp.h>

    static PyObject* threads(PyObject* self, PyObject* unused) {
        int n = 0;
        #pragma omp parallel reduction(+:n)
        n += 1;
        return PyLong_FromLong(n);
    }

    static PyMethodDef methods[] = {{"threads", threads, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "ompmod", NULL, -1, methods};
    PyMODINIT_FUNC PyInit_ompmod(void) { return PyModule_Create(&def); }
    """)


# --------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(autouse=True)
def _private_compiledir(tmp_path):
    """Nothing here may touch the user's real cache, even by mistake."""
    with tn.config.change_flags(compiledir=str(tmp_path / "default-compiledir")):
        yield


@dataclass
class Built:
    compiledir: Path  # holds exactly the two entries below; tests must not add to it
    add: object
    npsum: object


@pytest.fixture(scope="module")
def built(cc, tmp_path_factory):
    """The add and NumPy modules, compiled once for the whole file."""
    compiledir = tmp_path_factory.mktemp("built")
    return Built(compiledir,
                 cache.load_module("addmod", add_source(), compiledir=compiledir),
                 cache.load_module("npsum", NUMPY_SOURCE, compiledir=compiledir))


def copy_of(compiledir: Path, tmp_path: Path) -> Path:
    """A copy of a compiledir; its files are mapped by no process, so safe to corrupt."""
    copy = tmp_path / "copy"
    shutil.copytree(compiledir, copy)
    return copy


def entry_dirs(compiledir: Path) -> list[Path]:
    directory = Path(compiledir) / TAG
    return sorted(p for p in directory.iterdir() if p.is_dir() and len(p.name) == 64)


def all_files(compiledir: Path) -> list[str]:
    return sorted(str(p.relative_to(compiledir)) for p in Path(compiledir).rglob("*"))


def binaries(compiledir: Path) -> list[Path]:
    return sorted(Path(compiledir).rglob(f"*{sysconfig.get_config_var('EXT_SUFFIX')}"))


def run_python(code: str, *, flags: str | None = None, timeout: float = 120,
               **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_env(flags),
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, **popen)


def _env(flags: str | None) -> dict:
    env = dict(os.environ)
    env.pop("TENURE_FLAGS", None)
    if flags is not None:
        env["TENURE_FLAGS"] = flags
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


#: subprocess code: load ``SOURCE`` as ``NAME`` from ``COMPILEDIR``; report
#: whether it compiled, and ``add(20, 22)``
LOAD_ADD = """
    import sys, warnings
    from tenure.linkers.c import cache, compiler
    real_compile = compiler.compile_shared_library
    def counting_compile(*args, **kwargs):
        print("COMPILED", flush=True)
        return real_compile(*args, **kwargs)
    compiler.compile_shared_library = counting_compile
    module = cache.load_module(NAME, SOURCE, compiledir=COMPILEDIR)
    print("RESULT", module.add(20, 22), flush=True)
"""


def load_add_code(compiledir: Path, source: str, name: str = "addmod", prelude: str = "") -> str:
    return (f"NAME = {name!r}\nSOURCE = {source!r}\nCOMPILEDIR = {str(compiledir)!r}\n"
            + textwrap.dedent(prelude) + textwrap.dedent(LOAD_ADD))


# --------------------------------------------------------------------------
# building and calling


def test_add_module(built):
    assert built.add.add(2, 3) == 5
    assert built.add.add("ab", "c") == "abc"
    with pytest.raises(TypeError):
        built.add.add(1)


def test_numpy_module(built):
    x = np.arange(12.0).reshape(3, 4)
    assert built.npsum.total(x) == x.sum()
    assert built.npsum.total(x[:, ::2]) == x[:, ::2].sum()  # not contiguous
    assert built.npsum.total(np.zeros(0)) == 0.0
    with pytest.raises(TypeError, match="float64"):
        built.npsum.total(np.arange(3))  # int64: refused, not misread


def test_modules_get_unique_names_and_leave_sys_modules_alone(built):
    assert built.add.__name__.endswith(".addmod") and built.add.__name__ != "addmod"
    assert built.add.__name__ not in sys.modules and "addmod" not in sys.modules


def test_openmp_module(cc, tmp_path):
    if not compiler.supports_openmp(cc):
        pytest.skip(f"{cc} does not support OpenMP")
    module = cache.load_module("ompmod", OPENMP_SOURCE, openmp=True, compiledir=tmp_path)
    assert module.threads() >= 1
    meta = json.loads((entry_dirs(tmp_path)[0] / "meta.json").read_text())
    assert "-fopenmp" in meta["flags"]


def test_same_source_twice_is_the_same_object(built):
    first = cache.load_module("addmod", add_source(), compiledir=built.compiledir)
    again = cache.load_module("addmod", add_source(), compiledir=built.compiledir)
    assert again is first


def test_loaded_modules_are_shared_across_compiledirs(built, tmp_path):
    # Same key, same binary: a second directory is not consulted at all.
    first = cache.load_module("addmod", add_source(), compiledir=built.compiledir)
    assert cache.load_module("addmod", add_source(), compiledir=tmp_path) is first
    assert not (tmp_path / TAG).exists()


def test_forgotten_module_is_loaded_from_disk_without_compiling(built, monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although the cache holds the module")
    monkeypatch.setattr(compiler, "compile_shared_library", no_compile)
    cache._forget_loaded()
    module = cache.load_module("addmod", add_source(), compiledir=built.compiledir)
    assert module.add(40, 2) == 42
    assert cache.load_module("addmod", add_source(), compiledir=built.compiledir) is module
    assert len(entry_dirs(built.compiledir)) == 2


def test_load_from_disk_in_a_new_process_does_not_compile(built, tmp_path):
    proc = run_python(load_add_code(built.compiledir, add_source()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["RESULT", "42"]  # and no COMPILED
    assert "Warning" not in proc.stderr


def test_different_flags_make_a_different_entry(cc, tmp_path):
    plain = cache.load_module("addmod", add_source(salt="flags"), compiledir=tmp_path)
    debug = cache.load_module("addmod", add_source(salt="flags"), flags=("-O1", "-g"),
                              compiledir=tmp_path)
    assert plain is not debug and debug.add(1, 2) == 3
    entries = entry_dirs(tmp_path)
    assert len(entries) == 2
    flags = [json.loads((e / "meta.json").read_text())["flags"] for e in entries]
    assert sorted("-g" in f for f in flags) == [False, True]


# --------------------------------------------------------------------------
# keys


def test_key_is_a_stable_sha256_hex(cc):
    key = cache.cache_key(add_source())
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache.cache_key(add_source(), (), False) == key


def test_key_changes_with_every_input(cc):
    base = cache.cache_key(add_source())
    variants = [cache.cache_key(add_source(salt="x")),
                cache.cache_key(add_source(), ("-g",)),
                cache.cache_key(add_source(), ("-g", "-O1")),
                cache.cache_key(add_source(), ("-O1", "-g"))]
    if compiler.supports_openmp(cc):
        variants.append(cache.cache_key(add_source(), (), True))
    assert len({base, *variants}) == 1 + len(variants)


@pytest.mark.parametrize("change", ["compiler version", "numpy", "python", "includes"])
def test_key_changes_with_the_toolchain(cc, monkeypatch, change):
    base = cache.cache_key(add_source())
    if change == "compiler version":
        monkeypatch.setattr(compiler, "compiler_version", lambda command: "cc 99.0")
    elif change == "numpy":
        monkeypatch.setattr(cache, "_numpy_abi", lambda: {"version": "9.0.0", "c_abi": 1})
    elif change == "python":
        monkeypatch.setattr(cache, "_python_abi", lambda: {"cache_tag": "cpython-399"})
    else:
        monkeypatch.setattr(compiler, "include_dirs", lambda: ("/elsewhere/include",))
    assert cache.cache_key(add_source()) != base


def test_key_is_the_same_in_another_process(cc):
    source = add_source(salt="other process")
    proc = run_python(f"""
        from tenure.linkers.c import cache
        print(cache.cache_key({source!r}, ("-g",), False))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == cache.cache_key(source, ("-g",), False)


def test_numpy_abi_is_known():
    abi = cache._numpy_abi()
    assert abi["version"] == np.__version__
    assert isinstance(abi["c_abi"], int)


# --------------------------------------------------------------------------
# bad input and failed builds


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a.b", "módulo", None])
def test_name_must_be_a_c_identifier(name):
    with pytest.raises(ValueError, match="C identifier"):
        cache.load_module(name, add_source())


def test_source_must_define_the_init_function():
    with pytest.raises(ValueError, match="PyInit_other"):
        cache.load_module("other", add_source("addmod"))
    with pytest.raises(ValueError, match="PyInit_add "):   # a longer name is not the name
        cache.load_module("add", add_source("addmod"))
    with pytest.raises(TypeError, match="str"):
        cache.load_module("addmod", add_source().encode())


def test_compile_error_leaves_no_entry(cc, tmp_path):
    source = add_source(salt="broken").replace("return PyNumber_Add(a, b);",
                                               "return PyNumber_Add(a, b) + oops_undeclared;")
    with pytest.raises(CompileError) as info:
        cache.load_module("addmod", source, compiledir=tmp_path)
    error = info.value
    assert "oops_undeclared" in str(error) and "oops_undeclared" in error.stderr
    assert "addmod" in str(error)
    kept = Path(error.source_path)
    assert kept.read_text() == source
    assert str(kept) in error.command  # the command names the kept file, rerunnable
    assert entry_dirs(tmp_path) == [] and binaries(tmp_path) == []
    assert all_files(tmp_path / TAG) == ["failed", f"failed/{kept.name}"]
    assert cache.info(tmp_path).count == 0


def test_no_compiler_is_a_clear_error_that_creates_nothing(tmp_path):
    with tn.config.change_flags(cxx=str(tmp_path / "no-such-cc")):
        with pytest.raises(CompileError, match="no working C compiler"):
            cache.load_module("addmod", add_source(), compiledir=tmp_path / "cd")
    assert not (tmp_path / "cd").exists()


# --------------------------------------------------------------------------
# concurrency


def test_processes_loading_one_new_source_at_once_build_it_once(cc, tmp_path):
    compiledir = tmp_path / "shared"
    source = add_source(salt=f"concurrent {time.time_ns()}")
    go = tmp_path / "go"
    prelude = f"""
        import os, time
        from tenure.linkers.c import compiler
        compiler.make_recipe()  # probe the compiler before the start line
        print("READY", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.002)
    """
    code = load_add_code(compiledir, source, prelude=prelude)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=_env(None), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    try:
        for proc in procs:  # all four at the start line, then go
            assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        go.touch()
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert out.split()[-2:] == ["RESULT", "42"], out + err
        assert "Warning" not in err
    assert sum(out.split().count("COMPILED") for out, _ in outputs) == 1
    assert len(binaries(compiledir)) == 1
    leftovers = [f for f in all_files(compiledir / TAG)
                 if f.startswith((".build-", ".trash-")) or f.endswith(".lock")]
    assert leftovers == []


def test_threads_loading_one_new_source_get_one_module(cc, tmp_path):
    source = add_source(salt=f"threads {time.time_ns()}")
    results = []

    def load():
        results.append(cache.load_module("addmod", source, compiledir=tmp_path))
    threads = [threading.Thread(target=load) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and all(module is results[0] for module in results)
    assert len(binaries(tmp_path)) == 1


# --------------------------------------------------------------------------
# corruption


def _truncate_binary(entry: Path) -> None:
    binary = next(entry.glob(f"*{sysconfig.get_config_var('EXT_SUFFIX')}"))
    data = binary.read_bytes()
    binary.write_bytes(data[: len(data) // 3])


def _garbage_binary(entry: Path) -> None:
    binary = next(entry.glob(f"*{sysconfig.get_config_var('EXT_SUFFIX')}"))
    binary.write_bytes(b"\x7fELF this is not a shared library" * 50)


def _garbage_metadata(entry: Path) -> None:
    (entry / "meta.json").write_text('{"key": "abc", "name": ')


def _missing_metadata(entry: Path) -> None:
    (entry / "meta.json").unlink()


@pytest.mark.parametrize("corrupt", [_truncate_binary, _garbage_binary, _garbage_metadata,
                                     _missing_metadata])
def test_a_corrupt_entry_is_rebuilt_with_a_warning_in_a_new_process(built, tmp_path, corrupt):
    compiledir = copy_of(built.compiledir, tmp_path)
    entry = Path(cache.entries_dir(compiledir)) / cache.cache_key(add_source())
    corrupt(entry)
    proc = run_python(load_add_code(compiledir, add_source()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["COMPILED", "RESULT", "42"]
    assert "CacheWarning" in proc.stderr and "rebuilt" in proc.stderr
    assert "addmod" in proc.stderr
    # Repaired: the next process loads it quietly, without compiling.
    proc = run_python(load_add_code(compiledir, add_source()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["RESULT", "42"] and "Warning" not in proc.stderr
    assert len(binaries(compiledir)) == 2  # addmod (rebuilt) and npsum


def _write_replacing(path: Path, data: bytes) -> None:
    # Never write into a library in place: this process may have it mapped.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _fresh_entry(tmp_path: Path, salt: str) -> tuple[str, Path, Path, dict]:
    """The source, a compiledir, its one entry and its metadata.

    The entry is a copy of one built (and loaded) elsewhere: CPython hands back
    an extension it has loaded from the same path without reading the file.
    """
    source = add_source(salt=salt)
    cache.load_module("addmod", source, compiledir=tmp_path / "origin")
    cache._forget_loaded()
    compiledir = copy_of(tmp_path / "origin", tmp_path)
    entry = entry_dirs(compiledir)[0]
    return source, compiledir, entry, json.loads((entry / "meta.json").read_text())


def test_an_entry_that_fails_to_load_is_rebuilt(cc, tmp_path):
    source, compiledir, entry, meta = _fresh_entry(tmp_path, "load failure")
    garbage = b"not an ELF file at all" * 100
    # The checksum matches, so only the loader itself can find the fault.
    _write_replacing(entry / meta["module_file"], garbage)
    meta.update(binary_size=len(garbage), binary_sha256=cache._sha256(garbage))
    _write_replacing(entry / "meta.json", json.dumps(meta).encode())
    with pytest.warns(CacheWarning, match="loading it failed"):
        module = cache.load_module("addmod", source, compiledir=compiledir)
    assert module.add(1, 1) == 2
    assert len(binaries(compiledir)) == 1


@pytest.mark.parametrize("field, value", [("key", "0" * 64), ("source_sha256", "0" * 64),
                                          ("format", -1), ("name", "other"),
                                          ("module_file", "../../evil.so")])
def test_metadata_that_does_not_match_means_rebuild(cc, tmp_path, field, value):
    source, compiledir, entry, meta = _fresh_entry(tmp_path, f"meta {field}")
    meta[field] = value
    _write_replacing(entry / "meta.json", json.dumps(meta).encode())
    with pytest.warns(CacheWarning, match=field):
        module = cache.load_module("addmod", source, compiledir=compiledir)
    assert module.add(2, 2) == 4
    assert len(entry_dirs(compiledir)) == 1 and len(binaries(compiledir)) == 1


# --------------------------------------------------------------------------
# info and clear


def test_info_lists_the_entries(built):
    summary = cache.info(built.compiledir)
    assert summary.directory == Path(built.compiledir) / TAG
    assert summary.count == 2
    assert sorted(e.name for e in summary.entries) == ["addmod", "npsum"]
    assert summary.total_bytes == sum(e.size_bytes for e in summary.entries) > 0
    for entry in summary.entries:
        assert entry.age_s is not None and entry.age_s >= 0
        assert entry.compiler_version == compiler.compiler_version(compiler.find_compiler())


def test_info_of_a_missing_directory_is_empty(tmp_path):
    summary = cache.info(tmp_path / "nothing")
    assert summary.count == 0 and summary.total_bytes == 0


def test_clear_removes_entries_and_leftovers(built, tmp_path):
    compiledir = copy_of(built.compiledir, tmp_path)
    directory = cache.entries_dir(compiledir)
    key = "f" * 64
    (directory / f".build-{key}-abc123").mkdir()  # a crashed build
    (directory / f".trash-{key}-0000").mkdir()
    (directory / "failed").mkdir()
    (directory / "failed" / f"addmod-{key}.c").write_text("int x;")
    assert cache.clear(compiledir) == 2
    assert all_files(directory) == []
    assert cache.info(compiledir).count == 0
    assert cache.clear(compiledir) == 0


def test_clear_leaves_a_build_in_progress_alone(cc, tmp_path):
    directory = cache.entries_dir(tmp_path)
    directory.mkdir(parents=True)
    key = "e" * 64
    build = directory / f".build-{key}-inprogress"
    build.mkdir()
    with cache._KeyLock(cache._lock_path(directory, key)):
        assert cache.clear(tmp_path) == 0
        assert build.is_dir()
    cache.clear(tmp_path)
    assert not build.exists()


def test_loaded_modules_survive_clear_and_the_next_load_rebuilds(cc, tmp_path):
    source = add_source(salt="survive clear")
    module = cache.load_module("addmod", source, compiledir=tmp_path)
    assert cache.clear(tmp_path) == 1
    assert module.add(3, 4) == 7  # the mapped library outlives its file
    cache._forget_loaded()
    again = cache.load_module("addmod", source, compiledir=tmp_path)
    assert again.add(3, 4) == 7 and len(entry_dirs(tmp_path)) == 1


def test_clear_waits_for_a_process_using_the_entry(cc, tmp_path):
    cache.load_module("addmod", add_source(salt="busy"), compiledir=tmp_path)
    directory = cache.entries_dir(tmp_path)
    key = entry_dirs(tmp_path)[0].name
    removed = []
    with cache._KeyLock(cache._lock_path(directory, key)):
        clearing = threading.Thread(target=lambda: removed.append(cache.clear(tmp_path)))
        clearing.start()
        clearing.join(0.3)
        assert clearing.is_alive() and removed == []  # waiting for our lock
        assert (directory / key).is_dir()
    clearing.join(30)
    assert removed == [1]


# --------------------------------------------------------------------------
# locks


@pytest.fixture(params=["flock", "polling"])
def lock_kind(request, monkeypatch):
    if request.param == "flock" and cache_locks._fcntl is None:
        pytest.skip("no fcntl on this platform")
    if request.param == "polling":
        monkeypatch.setattr(cache_locks, "_fcntl", None)
    return request.param


def test_key_lock_excludes_other_threads(lock_kind, tmp_path):
    path = tmp_path / "k.lock"
    events = []

    def critical_section(name):
        with cache._KeyLock(path, poll_s=0.001):
            events.append(f"enter {name}")
            time.sleep(0.02)
            events.append(f"exit {name}")
    threads = [threading.Thread(target=critical_section, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(events) == 8
    for enter, leave in zip(events[::2], events[1::2]):
        assert enter.split()[0] == "enter" and leave == "exit " + enter.split()[1]
    assert not path.exists()  # the last holder removed it


def test_key_lock_non_blocking(lock_kind, tmp_path):
    path = tmp_path / "k.lock"
    with cache._KeyLock(path):
        assert cache._KeyLock(path, blocking=False).acquire() is False
    other = cache._KeyLock(path, blocking=False)
    assert other.acquire() is True
    other.release()


def test_polling_lock_breaks_a_stale_lock(monkeypatch, tmp_path):
    monkeypatch.setattr(cache_locks, "_fcntl", None)
    path = tmp_path / "k.lock"
    path.write_text("12345 crashed")
    old = time.time() - 3600
    os.utime(path, (old, old))
    lock = cache._KeyLock(path, blocking=False, stale_after=60)
    assert lock.acquire() is True
    assert path.read_text() != "12345 crashed"
    lock.release()
    assert not path.exists()


def test_polling_lock_respects_a_fresh_lock(monkeypatch, tmp_path):
    monkeypatch.setattr(cache_locks, "_fcntl", None)
    path = tmp_path / "k.lock"
    path.write_text("12345 alive")
    assert cache._KeyLock(path, blocking=False, stale_after=60).acquire() is False
    assert path.read_text() == "12345 alive"


def test_load_module_works_with_the_polling_lock(cc, monkeypatch, tmp_path):
    monkeypatch.setattr(cache_locks, "_fcntl", None)
    module = cache.load_module("addmod", add_source(salt="polling"), compiledir=tmp_path)
    assert module.add(5, 5) == 10
    assert not list(cache.entries_dir(tmp_path).glob("*.lock"))


# --------------------------------------------------------------------------
# the compiledir flag


def test_entries_live_under_a_platform_and_python_subdirectory(tmp_path):
    assert cache.entries_dir(tmp_path) == tmp_path / TAG
    with tn.config.change_flags(compiledir=tmp_path / "via-config"):
        assert cache.entries_dir() == tmp_path / "via-config" / TAG


def test_compiledir_flag_validation(tmp_path, monkeypatch):
    with tn.config.change_flags(compiledir=tmp_path):  # a Path is fine
        assert tn.config.compiledir == str(tmp_path)
    monkeypatch.chdir(tmp_path)
    with tn.config.change_flags(compiledir="relative/dir"):
        assert tn.config.compiledir == str(tmp_path / "relative" / "dir")
    for bad in ("", "  ", 3, None):
        with pytest.raises(ValueError, match="compiledir"):
            tn.config.compiledir = bad


@pytest.mark.parametrize("platform, env, expected", [
    ("linux", {"XDG_CACHE_HOME": "/xdg"}, "/xdg/tenure"),
    ("linux", {"XDG_CACHE_HOME": "relative"}, "{home}/.cache/tenure"),
    ("linux", {}, "{home}/.cache/tenure"),
    ("darwin", {"XDG_CACHE_HOME": "/xdg"}, "{home}/Library/Caches/tenure"),
])
def test_default_compiledir(monkeypatch, tmp_path, platform, env, expected):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)
    assert config._default_compiledir() == expected.format(home=tmp_path)


def test_compiledir_from_the_environment(tmp_path):
    code = "import tenure as tn; print(tn.config.compiledir)"
    proc = run_python(code, flags=f"compiledir={tmp_path}/a")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{tmp_path}/a"
    env = _env(None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if sys.platform != "darwin":
        assert proc.stdout.strip() == str(tmp_path / "xdg" / "tenure")


# --------------------------------------------------------------------------
# python -m tenure cache


def run_cli(*args: str, compiledir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tenure", *args],
                          env=_env(f"compiledir={compiledir}"), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_info_and_clear(built, tmp_path):
    compiledir = copy_of(built.compiledir, tmp_path)
    proc = run_cli("cache", "info", compiledir=compiledir)
    assert proc.returncode == 0, proc.stderr
    assert f"cache directory: {compiledir / TAG}" in proc.stdout
    assert "entries: 2" in proc.stdout and "total size:" in proc.stdout
    assert "size cap: 1.0 GiB" in proc.stdout
    assert "addmod" not in proc.stdout  # names only with --verbose

    proc = run_cli("cache", "info", "--verbose", compiledir=compiledir)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert sorted(line[0] for line in lines) == ["addmod", "npsum"]
    assert all(line[-1] == "ago" for line in lines)

    proc = run_cli("cache", "clear", compiledir=compiledir)
    assert proc.returncode == 0, proc.stderr
    assert "removed 2 entries" in proc.stdout
    assert "addmod" in proc.stdout and "npsum" in proc.stdout
    assert entry_dirs(compiledir) == []

    proc = run_cli("cache", "info", compiledir=compiledir)
    assert proc.returncode == 0, proc.stderr
    assert "entries: 0" in proc.stdout


@pytest.mark.parametrize("args", [("cache", "bogus"), ("bogus",), (), ("cache",)])
def test_cli_unknown_or_missing_command_is_a_usage_error(tmp_path, args):
    proc = run_cli(*args, compiledir=tmp_path)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr


def test_cli_formats():
    from tenure.__main__ import format_age, format_size
    assert format_size(0) == "0 B" and format_size(1536) == "1.5 KiB"
    assert format_size(3 * 1024 ** 3) == "3.0 GiB"
    assert format_age(None) == "age unknown" and format_age(5) == "5 s ago"
    assert format_age(90) == "1 min ago" and format_age(7200) == "2 h ago"
    assert format_age(86400) == "1 day ago" and format_age(3 * 86400) == "3 days ago"


# --------------------------------------------------------------------------
# fork while another thread builds (issue 41, item 4)

#: subprocess code: a thread builds ``SOURCE`` (module) or files, held in the
#: middle of it; the main thread forks; the child must load it too
FORK_WHILE_BUILDING = """
    import os, sys, threading
    from tenure.linkers.c import cache, compiler, runtime
    from tenure.linkers.c.compiler import make_recipe
    started, go = threading.Event(), threading.Event()

    def held(function):
        def wrapper(*args, **kwargs):
            started.set()
            go.wait()
            return function(*args, **kwargs)
        return wrapper

    def write_files(directory):
        (directory / "f.txt").write_text("files")

    if WHAT == "module":
        compiler.compile_shared_library = held(compiler.compile_shared_library)
        load = lambda: cache.load_module(NAME, SOURCE, compiledir=COMPILEDIR).add(20, 22)
    elif WHAT == "files":
        load = lambda: (cache.load_files("held", "text", make_recipe(()), held(write_files),
                                         compiledir=COMPILEDIR) / "f.txt").read_text()
    else:
        compiler.compile_shared_library = held(compiler.compile_shared_library)
        load = lambda: runtime.load_runtime().__name__.split(".")[-1][:15]
    thread = threading.Thread(target=load)
    thread.start()
    started.wait()
    pid = os.fork()
    if pid == 0:
        print("CHILD", load(), flush=True)
        os._exit(0)
    go.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    print("PARENT", os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.mark.parametrize("what, expected", [("module", "42"), ("files", "files"),
                                            ("runtime", "tenure_runtime_")])
def test_a_child_forked_while_a_thread_builds_can_load(cc, tmp_path, what, expected):
    code = (f"NAME = 'addmod'\nSOURCE = {add_source(salt='fork')!r}\n"
            f"COMPILEDIR = {str(tmp_path)!r}\nWHAT = {what!r}\n"
            + textwrap.dedent(FORK_WHILE_BUILDING))
    flags = f"compiledir={tmp_path}"
    try:   # a child that hangs on a lock left held by the fork fails here
        proc = run_python(code, flags=flags, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fork while building {what}: the child hung")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["CHILD", expected, "PARENT", "0"], proc.stderr


# --------------------------------------------------------------------------
# a cache that cannot be written (issue 41, item 9)


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-Urm", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


needs_mount_namespace = pytest.mark.skipif(
    not _unshare_works(), reason="needs `unshare -Urm` (a user and mount namespace) to make a "
                                 "read-only or full file system without being root")


def run_in_namespace(script: str, code: str, flags: str | None) -> subprocess.CompletedProcess:
    """``code`` run by Python after the shell ``script`` (mounts), in a
    mount namespace of its own (root ignores modes; a read-only mount it
    cannot ignore)."""
    shell = f"set -e\n{script}\nexec {sys.executable} -c \"$CODE\""
    env = _env(flags) | {"CODE": textwrap.dedent(code)}
    return subprocess.run(["unshare", "-Urm", "sh", "-c", shell], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _read_only(path: Path) -> str:
    return f"mount --bind {path} {path}\nmount -o remount,ro,bind {path} {path}"


@needs_mount_namespace
def test_a_read_only_cache_loads_what_it_holds_and_builds_the_rest_privately(cc, tmp_path):
    compiledir = tmp_path / "cache"
    cache._forget_loaded()
    cache.load_module("addmod", add_source(salt="ro"), compiledir=compiledir)
    before = all_files(compiledir)
    code = load_add_code(compiledir, add_source(salt="ro")) + textwrap.dedent(f"""
        other = cache.load_module("addmod", {add_source(salt="ro new")!r}, compiledir=COMPILEDIR)
        third = cache.load_module("addmod", {add_source(salt="ro 3")!r}, compiledir=COMPILEDIR)
        print("NEW", other.add(1, 2), third.add(2, 2), cache.locate(COMPILEDIR).build, flush=True)
    """)
    proc = run_in_namespace(_read_only(compiledir), code, None)
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    assert words[:6] == ["RESULT", "42", "COMPILED", "COMPILED", "NEW", "3"], proc.stderr
    assert not words[7].startswith(str(compiledir))   # built privately
    assert proc.stderr.count("CacheWarning") == 1
    assert f"the compile cache {cache.entries_dir(compiledir)} cannot be written" in proc.stderr
    assert "loading the modules it holds" in proc.stderr
    assert all_files(compiledir) == before


@needs_mount_namespace
def test_an_unwritable_home_compiles_privately(cc, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code = """
        import os
        from tenure import config
        from tenure.linkers.c import cache
        print(config.compiledir, flush=True)
        module = cache.load_module("addmod", SOURCE)
        print("RESULT", module.add(20, 22), flush=True)
    """
    env_code = f"SOURCE = {add_source(salt='home')!r}\n" + textwrap.dedent(code)
    script = f"export HOME={home}\nunset XDG_CACHE_HOME\n" + _read_only(home)
    proc = run_in_namespace(script, env_code, None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(home / ".cache" / "tenure"), "RESULT", "42"]
    assert proc.stderr.count("CacheWarning") == 1 and "cannot be written" in proc.stderr
    assert list(home.iterdir()) == []


@needs_mount_namespace
def test_a_full_disk_compiles_privately(cc, tmp_path):
    compiledir = tmp_path / "cache"
    compiledir.mkdir()
    fill = f"mount -t tmpfs -o size=64k,mode=700 tmpfs {compiledir}\n" \
           f"mkdir -m 700 {compiledir / TAG}\n" \
           f"dd if=/dev/zero of={compiledir}/filler bs=4k 2>/dev/null || true"
    proc = run_in_namespace(fill, load_add_code(compiledir, add_source(salt="full")), None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["COMPILED", "RESULT", "42"], proc.stderr
    assert proc.stderr.count("CacheWarning") == 1
    assert "No space left on device" in proc.stderr and "private directory" in proc.stderr


# --------------------------------------------------------------------------
# the size cap (issue 41, item 10)


def _used_long_ago(entry: Path, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(entry, (when, when))


def test_a_size_cap_evicts_the_least_recently_used_entries(cc, tmp_path):
    cache._forget_loaded()
    sources = {name: add_source(salt=f"lru {name}") for name in ("a", "b", "c")}
    directory = cache.entries_dir(tmp_path)
    cache.load_module("addmod", sources["a"], compiledir=tmp_path)
    cache.load_module("addmod", sources["b"], compiledir=tmp_path)
    entry = {name: directory / cache.cache_key(source) for name, source in sources.items()}
    _used_long_ago(entry["a"], 200)   # a is the older build...
    _used_long_ago(entry["b"], 100)
    cache._forget_loaded()            # (this process's loads are never evicted)
    proc = run_python(load_add_code(tmp_path, sources["a"]))   # ...but used since
    assert proc.stdout.split() == ["RESULT", "42"], proc.stderr
    one_entry = cache._tree_size(entry["a"])
    with tn.config.change_flags(compiledir_max_size=int(2.5 * one_entry)):
        cache.load_module("addmod", sources["c"], compiledir=tmp_path)
    assert sorted(entry_dirs(tmp_path)) == sorted([entry["a"], entry["c"]])


def test_the_size_cap_spares_entries_this_process_loaded(cc, tmp_path):
    cache._forget_loaded()
    sources = [add_source(salt=f"spare {i}") for i in range(3)]
    directory = cache.entries_dir(tmp_path)
    for source in sources[:2]:
        cache.load_module("addmod", source, compiledir=tmp_path)
    cache._forget_loaded()
    kept = cache.load_module("addmod", sources[0], compiledir=tmp_path)
    with tn.config.change_flags(compiledir_max_size=1):
        cache.load_module("addmod", sources[2], compiledir=tmp_path)
    assert sorted(entry_dirs(tmp_path)) == sorted(directory / cache.cache_key(s)
                                                  for s in (sources[0], sources[2]))
    assert kept.add(1, 1) == 2


def test_the_cache_is_walked_at_the_first_build_then_per_sixteenth_of_the_cap(
        cc, tmp_path, monkeypatch):
    """Eviction walks every entry (a fifth of a second per build once a
    thousand are there): a process walks at its first build, then once it has
    built a sixteenth of the cap since, not after every build."""
    cache._forget_loaded()
    walks = []
    real_evict = cache.evict
    monkeypatch.setattr(cache, "evict", lambda *a, **k: walks.append(1) or real_evict(*a, **k))
    sources = [add_source(salt=f"walk {i}") for i in range(5)]
    directory = cache.entries_dir(tmp_path)
    cache.load_module("addmod", sources[0], compiledir=tmp_path)
    one_entry = cache._tree_size(directory / cache.cache_key(sources[0]))
    # a cap whose sixteenth is two and a half entries: walks after builds 1 and 4
    with tn.config.change_flags(compiledir_max_size=int(2.5 * 16 * one_entry)):
        for source in sources[1:]:
            cache.load_module("addmod", source, compiledir=tmp_path)
    assert len(walks) == 2
    with tn.config.change_flags(compiledir_max_size=0):     # no cap: no walk
        cache.load_module("addmod", add_source(salt="walk none"), compiledir=tmp_path)
    assert len(walks) == 2


def test_size_flag_takes_units(tmp_path):
    with tn.config.change_flags(compiledir_max_size="512MiB"):
        assert tn.config.compiledir_max_size == 512 * 2**20
    with tn.config.change_flags(compiledir_max_size="2GB"):
        assert tn.config.compiledir_max_size == 2 * 10**9
    assert tn.config.compiledir_max_size == 2**30   # the default: 1 GiB
    for bad in ("lots", "-1", True, 1.5, "1 parsec"):
        with pytest.raises(ValueError, match="compiledir_max_size"):
            tn.config.compiledir_max_size = bad
