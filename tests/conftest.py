"""Shared fixtures.  Every behavioural test that compiles a function takes the
``mode`` parameter, so each linker runs the whole suite: a new linker joins by
adding its name to ``LINKERS``."""

import os

import numpy as np
import pytest

import tenure as tn

#: every linker the contract and op suites run on.  ``TENURE_TEST_LINKERS``
#: (comma-separated, e.g. ``TENURE_TEST_LINKERS=py,check,c``) overrides it to
#: run the whole suite on other linkers by hand.
_FROM_ENV = [name.strip() for name in os.environ.get("TENURE_TEST_LINKERS", "").split(",")
             if name.strip()]
LINKERS = _FROM_ENV or ["py", "check"]

#: test files that run on the C linker too in every run (the contract suite).
#: The whole suite passes on it (``TENURE_TEST_LINKERS=c``), but compiling
#: every graph of every test costs more than a CI run may take (the C
#: linker's own tests, in tests/linkers/c, run in every run as well).
C_IN_EVERY_RUN = {"test_contract.py", "test_function.py"}


def _linkers_for(path) -> list[str]:
    linkers = list(LINKERS)
    if not _FROM_ENV and os.path.basename(str(path)) in C_IN_EVERY_RUN:
        linkers.append("c")
    return linkers


def pytest_generate_tests(metafunc):
    """``mode``: a compilation mode for each linker the test's file runs on."""
    if "mode" in metafunc.fixturenames:
        linkers = _linkers_for(metafunc.definition.path)
        metafunc.parametrize("mode", [tn.Mode(linker=name) for name in linkers], ids=linkers)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def cc_or_skip():
    """A working C compiler, or a clean skip (the C linker's own tests)."""
    from tenure.linkers.c import compiler
    command = compiler.find_compiler()
    if command is None:
        pytest.skip("no working C compiler")
    return command


#: the flags every test starts from (see pytest_configure)
_REFERENCE_FLAGS = None


def pytest_configure(config):
    """C modules the tests compile go to a temporary cache, never the user's.
    Tests that name no mode run on the Python executor (the reference):
    compiling every graph of every such test would take longer than a CI run
    may; the C linker runs where a test asks for it (``mode``,
    ``C_IN_EVERY_RUN``, tests/linkers/c, the docs and the demo, which run in
    fresh interpreters with the real default).

    Set here, before any test module is imported, because modules build
    ``tn.Mode(...)`` objects at import time and a Mode without a linker takes
    ``config.linker`` when it is made (as PyTensor's does)."""
    import tempfile
    global _REFERENCE_FLAGS
    compiledir = tempfile.mkdtemp(prefix="tenure_test_cache_")
    _REFERENCE_FLAGS = tn.config.change_flags(compiledir=compiledir, linker="py")
    _REFERENCE_FLAGS.__enter__()
    config._tenure_compiledir = compiledir


def pytest_unconfigure(config):
    import shutil
    if _REFERENCE_FLAGS is not None:
        _REFERENCE_FLAGS.__exit__(None, None, None)
    shutil.rmtree(getattr(config, "_tenure_compiledir", ""), ignore_errors=True)
