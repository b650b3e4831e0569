"""Fixtures for the C tests: a compiler (or a clean skip).

No test may write into the user's real cache directory: the session compiles
into the temporary ``compiledir`` that tests/conftest.py makes for it (shared
by the pytest-xdist workers, so a loop or the runtime one test built is
loaded by the others); tests that check the cache itself use their own, per
test."""

import pytest

from tenure.linkers.c import compiler


@pytest.fixture(scope="module")
def cc():
    """The system C compiler; tests that need one skip (not fail) without it."""
    command = compiler.find_compiler()
    if command is None:
        pytest.skip("no working C compiler: none of tenure.config.cxx, $CC, cc, gcc, clang "
                    "compiles a test file")
    return command
