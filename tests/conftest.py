"""Shared fixtures, and which linkers run which suites.

Every behavioural test that compiles a function takes the ``mode``
parameter; :data:`SUITES` says, per linker, which test files run on it (one
declarative table).  A new linker joins by adding one row: its name (a key
of ``tenure.linkers.table.LINKERS``, the linker table), the files and
op-suite directories it runs, the files it does not run and why, and what it
needs installed (without it the row is dropped: a missing optional
dependency is not a failure; ``TENURE_REQUIRE_OPTIONAL=1`` in CI makes sure
the dependencies are there).  Options of the mode it runs with go in
:data:`LINKER_OPTIONS`.  ``TENURE_TEST_LINKERS=py,check,c`` runs every
suite file on the named linkers instead, by hand."""

import importlib.util
import os
import pathlib
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import compiler
from tenure.linkers.cuda import nvrtc
from tenure.linkers.cuda.runtime import unavailable_reason
from tenure.symbolic.device import CudaUnavailable, is_device_array
from tenure.linkers.cuda.linker import host_backend
from tenure.linkers.cuda.emulated_device import emulated_device
from tests.helpers import COMPILEDIR_VARIABLE

#: ``TENURE_TEST_LINKERS`` (comma-separated) runs every suite file on these
#: linkers instead of :data:`SUITES`.
_FROM_ENV = [name.strip() for name in os.environ.get("TENURE_TEST_LINKERS", "").split(",")
             if name.strip()]

HAVE_DASK = importlib.util.find_spec("dask") is not None


@dataclass(frozen=True)
class Suites:
    """Which test files one linker runs.  ``files``: file names anywhere in
    tests/; ``dirs``: (parent, directory) pairs every file of which runs,
    except ``not_files``; ``everything``: every file with a ``mode`` test;
    ``needs``: a condition for the row at all (a missing dependency drops
    the row; it is not a failure)."""

    files: frozenset = frozenset()
    dirs: frozenset = frozenset()
    not_files: frozenset = frozenset()
    everything: bool = False
    needs: Callable[[], bool] = lambda: True

    def runs(self, path: pathlib.Path) -> bool:
        if path.name in self.not_files:
            return False
        return (self.everything or path.name in self.files
                or (path.parent.parent.name, path.parent.name) in self.dirs)


def _have_compiler() -> bool:
    return compiler.find_compiler() is not None


#: The contract suite files: the memory contract, the calling conventions,
#: the error names.
_CONTRACT = {"test_contract.py", "test_function.py", "test_pytensor_idioms.py",
             "test_pickle.py", "test_error_names.py"}
_OP_SUITE = frozenset({("symbolic", "ops")})

#: which linkers run which suites, one row per linker:
#:
#: - ``py`` (the reference) and ``check`` (py and c compared) run everything.
#: - ``c`` runs the contract suite, transactions, the array-type, leak,
#:   timeline and foreign-array suites and the whole op suite, besides its
#:   own tests (tests/linkers/c).  The rest passes on it too
#:   (``TENURE_TEST_LINKERS=c``), but compiling every graph of every test
#:   costs more than a CI run may take.
#: - ``dask`` (where Dask is installed) runs the contract suite and the op
#:   families it lowers whole (loops included: one task each).  Not yet the
#:   rest of the op suite (indexing, join, sorting, shape, blas and nnet
#:   have cases it does not lower or
#:   whose errors read differently; test_elemwise passes but takes a minute)
#:   nor test_transactions (Ctrl-C between steps, per-step errors and backup
#:   copies describe the step-by-step linkers).
#: - ``cuda`` (device arrays, device shared variables, the generated kernels)
#:   runs the contract suite, transactions, the activation-memory budgets and
#:   the op suite but test_elemwise (its kernels have their own tests in
#:   tests/linkers/cuda, and compiling each of its graphs' kernels as host C++
#:   and for the device costs minutes).  It runs on the emulated device (see
#:   :func:`_on_the_emulated_device`), or with ``TENURE_TEST_CUDA=device`` on
#:   the GPU (skipped, with the reason, where there is none); the emulated
#:   device's kernels need a C compiler.
SUITES = {
    "py": Suites(everything=True),
    "check": Suites(everything=True),
    "c": Suites(files=frozenset(_CONTRACT | {"test_transactions.py", "test_array_types.py",
                                             "test_leaks.py", "test_memory_timeline.py",
                                             "test_foreign_arrays.py"}),
                dirs=_OP_SUITE),
    "dask": Suites(files=frozenset(_CONTRACT | {"test_array_types.py", "test_foreign_arrays.py",
                                                "test_reduce.py", "test_creation.py",
                                                "test_elemwise_grad.py",
                                                "test_specify_shape.py", "test_scan.py",
                                                "test_conv.py", "test_ifelse.py"}),
                   needs=lambda: HAVE_DASK),
    "cuda": Suites(files=frozenset(_CONTRACT | {"test_transactions.py", "test_remat.py"}),
                   dirs=_OP_SUITE, not_files=frozenset({"test_elemwise.py"}),
                   needs=_have_compiler),
}

#: where the suites' cuda linker runs: "emulated" (CI) or "device"
CUDA_FOR_SUITES = os.environ.get("TENURE_TEST_CUDA", "emulated")


def _linkers_for(path) -> list[str]:
    if _FROM_ENV:
        return list(_FROM_ENV)
    path = pathlib.Path(str(path))
    return [name for name, suites in SUITES.items() if suites.runs(path) and suites.needs()]


def pytest_generate_tests(metafunc):
    """``mode``: a compilation mode for each linker the test's file runs on."""
    if "mode" in metafunc.fixturenames:
        linkers = _linkers_for(metafunc.definition.path)
        shares = metafunc.definition.get_closest_marker("shares_buffers") is not None
        host = metafunc.definition.get_closest_marker("host_buffers") is not None
        metafunc.parametrize("mode", [_mode_param(name, shares, host) for name in linkers],
                             ids=linkers)


def _mode_param(linker: str, checks_shared_buffers: bool, checks_host_buffers: bool):
    if linker == "cuda" and CUDA_FOR_SUITES == "device" and unavailable_reason() is not None:
        return pytest.param(None, marks=pytest.mark.skip(
            reason=f"no CUDA device: {unavailable_reason()}"))
    mode = mode_for(linker)
    if (checks_shared_buffers or checks_host_buffers) and linker == "cuda":
        return pytest.param(mode, marks=pytest.mark.skip(
            reason="the suites pass host arrays, which the cuda linker copies to the device; "
                   "its buffer sharing with device arrays is tested in "
                   "tests/linkers/cuda/test_device_path.py"))
    if checks_shared_buffers and not getattr(mode.make_linker(), "shares_buffers", True):
        return pytest.param(mode, marks=pytest.mark.skip(
            reason=f"the {linker} linker never shares buffers (views of arguments, in-place "
                   f"writes, kept output buffers): results are made elsewhere"))
    return mode


def mode_for(linker: str) -> tn.Mode:
    """The mode a suite runs on ``linker`` with (the dask linker computes its
    outputs: the suites compare NumPy arrays; the cuda linker runs on the
    emulated device, see :func:`_on_the_emulated_device`)."""
    if linker == "cuda":
        with tn.config.change_flags(cuda_emulation=CUDA_FOR_SUITES != "device"):
            return tn.Mode(linker="cuda")
    return tn.Mode(linker=linker, **LINKER_OPTIONS.get(linker, {}))


@pytest.fixture(autouse=True)
def _on_the_emulated_device(request, monkeypatch):
    """A suite test running on the cuda linker runs on its mode's device (the
    emulated one unless ``TENURE_TEST_CUDA=device``) with
    ``config.device="cuda"`` (its shared variables are device storage, whose
    ``get_value()`` gives NumPy copies), and every call's results (but a
    loop's steps') are copied back to the host, so that the suite compares NumPy arrays as on
    the other linkers.  What is checked is the device path's values and
    errors; its memory contract on device arrays has its own tests
    (tests/linkers/cuda/test_device_path.py)."""
    mode = getattr(request.node, "callspec", None) and request.node.callspec.params.get("mode")
    if getattr(mode, "linker", None) != "cuda":
        yield
        return
    call = tn.Function.__call__
    # calls under way in this thread: a loop's step is called inside its function's call
    running = threading.local()

    def call_with_host_results(self, *args, **kwargs):
        depth = getattr(running, "depth", 0)
        running.depth = depth + 1
        try:
            results = call(self, *args, **kwargs)
        finally:
            running.depth = depth
        if depth:
            return results   # a step's results stay on the device, as the loop needs
        if isinstance(results, list):
            return [_to_host(r) for r in results]
        if isinstance(results, dict):
            return {key: _to_host(r) for key, r in results.items()}
        return _to_host(results)

    monkeypatch.setattr(tn.Function, "__call__", call_with_host_results)
    with tn.config.change_flags(cuda_emulation=mode.cuda_emulation, device="cuda"):
        yield
    if mode.cuda_emulation:
        # The emulated device queues launches as a GPU does: what a test left
        # queued runs (and fails, if it touched freed memory) in that test.
        emulated_device().synchronize()


def _to_host(value):
    return value.get() if is_device_array(value) else value


#: options of the modes the suites run linkers with
LINKER_OPTIONS = {"dask": {"compute": True}}


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def freeing_intermediates():
    """``allow_gc`` on, whatever ``TENURE_FLAGS`` says: for tests whose figures
    are what freeing intermediates gives (peaks, hand-ons, budgets).  A test
    may still turn it off inside."""
    with tn.config.change_flags(allow_gc=True):
        yield


@pytest.fixture
def cc_or_skip():
    """A working C compiler, or a clean skip (the C linker's own tests)."""
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
    compiledir = os.environ.get(COMPILEDIR_VARIABLE)
    if compiledir is None:
        # named ``tenure`` as the default one is (the docs' doctests show its end)
        parent = tempfile.mkdtemp(prefix="tenure_test_cache_")
        compiledir = os.path.join(parent, "tenure")
        os.environ[COMPILEDIR_VARIABLE] = compiledir
        config._tenure_compiledir_to_remove = parent
    _REFERENCE_FLAGS = tn.config.change_flags(compiledir=compiledir, linker="py")
    _REFERENCE_FLAGS.__enter__()
    _compile_host_kernels_for_the_device()
    if _groups_need_node_ids(config):
        config.pluginmanager.register(_GroupsInNodeIds(), "tenure-xdist-groups")


def _compile_host_kernels_for_the_device() -> None:
    """Every kernel the suites run on the host (the ``cuda`` linker on the
    emulated device, and ``cuda_host``) is compiled for the
    device too (NVRTC, else nvcc), where a device compiler is installed (CI
    installs NVRTC): a generated kernel that would not compile fails its test."""
    try:
        nvrtc.compiler_name()
    except CudaUnavailable:
        return
    host_backend().check_device_compile = True


def pytest_unconfigure(config):
    import shutil
    if _REFERENCE_FLAGS is not None:
        _REFERENCE_FLAGS.__exit__(None, None, None)
    compiledir = getattr(config, "_tenure_compiledir_to_remove", None)
    if compiledir is not None:
        os.environ.pop(COMPILEDIR_VARIABLE, None)
        shutil.rmtree(compiledir, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), each file of the C linker's
    own tests runs on one worker: their module fixtures compile every kernel
    of a family at once, which two workers would each do again."""
    c_tests = pathlib.Path(__file__).parent / "linkers" / "c"
    for item in items:
        path = pathlib.Path(str(item.path))
        if path.parent == c_tests:
            item.add_marker(pytest.mark.xdist_group(path.stem))


class _GroupsInNodeIds:
    """pytest-xdist's ``--dist loadgroup`` sends the tests of one
    ``xdist_group`` to one worker by the ``@group`` suffix its workers append
    to their node ids (``item._nodeid``).  Since pytest 9 a node id is read
    from ``item._id`` (a ``NodeId``): the suffix went nowhere, every group
    was spread over the workers, and each worker compiled the group's module
    fixtures again (tests/linkers/c/test_elemwise_c.py's 25 s of kernels
    twice, at once, on 2 cores).  This puts the suffix where the node id is
    read, where xdist's own hook did not."""

    @pytest.hookimpl(trylast=True)   # after xdist's worker hook
    def pytest_collection_modifyitems(self, config, items):
        from _pytest.nodeid import NodeId
        for item in items:
            suffix = _group_suffix(item)
            if suffix is None or item.nodeid.endswith(suffix):
                continue
            item._id = NodeId.parse(item.nodeid + suffix)


def _group_suffix(item) -> str | None:
    names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                    for mark in item.iter_markers("xdist_group")})
    return "@" + "_".join(names) if names else None


def _groups_need_node_ids(config) -> bool:
    """In an xdist worker under ``--dist loadgroup``, on a pytest whose node ids
    live in ``_id`` (9 and later)."""
    if not hasattr(config, "workerinput") or not getattr(config.option, "loadgroup", False):
        return False
    try:
        from _pytest.nodeid import NodeId  # noqa: F401  (pytest >= 9)
    except ImportError:
        return False
    return True
