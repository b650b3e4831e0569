"""Fixtures for the C tests: a compiler (or a clean skip).

No test may write into the user's real cache directory: the session compiles
into the temporary ``compiledir`` that tests/conftest.py makes for it (shared
by the pytest-xdist workers, so a loop or the runtime one test built is
loaded by the others); tests that check the cache itself use their own, per
test."""

import shutil

import pytest

from tenure.linkers.c import cache, compiler, runtime


@pytest.fixture(scope="module")
def cc():
    """The system C compiler; tests that need one skip (not fail) without it."""
    command = compiler.find_compiler()
    if command is None:
        pytest.skip("no working C compiler: none of tenure.config.cxx, $CC, cc, gcc, clang "
                    "compiles a test file")
    return command


@pytest.fixture
def cache_with_the_runtime(cc, tmp_path):
    """An empty compile cache (``tmp_path``) but for the C runtime, copied from
    the session's (built there first if need be): for the tests of which
    loops and graph modules a fresh cache builds, which need no build of the
    runtime of their own (3 s of gcc each)."""
    runtime.load_runtime()
    (entry,) = [e for e in cache.info().entries if e.name == runtime.runtime_name()]
    shutil.copytree(entry.path, cache.entries_dir(tmp_path) / entry.path.name)
    return tmp_path
