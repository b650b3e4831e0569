"""The CUDA linker's executor on the host (``Mode(linker="cuda_host")``):
the nodes with generated kernels run them inside whole graphs -- into kept
output buffers, into shared storage being updated, in place -- with the
Python linker's results.  (The contract and op suites run on
``Mode(linker="cuda")`` on the emulated device: tests/conftest.py, SUITES.)"""

from types import SimpleNamespace

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.cuda import nvrtc
from tenure.symbolic.device import CudaUnavailable
from tenure.linkers.cuda.host_kernels import HostBackend
from tenure.linkers.cuda.linker import CudaThunk, KernelStep
from tenure.linkers.cuda.subtensor import RegionUpdateStep
from tests.helpers import need

HOST = tn.Mode(linker="cuda_host")


def _kernel_ops(f) -> set[str]:
    thunk = f._thunk
    assert isinstance(thunk, CudaThunk)
    return {type(node.op).__name__ for node, step in thunk.kernel_steps.items()
            if isinstance(step, (KernelStep, RegionUpdateStep))}


def test_kernels_compute_the_graph(rng):
    x, z = tn.matrix("x"), tn.vector("z")
    s = tn.softmax(tn.exp(x) * 2 + tn.sin(z) * x, axis=1)
    outputs = [s, tn.sum(s * x, axis=0), tn.logsumexp(x, axis=1), tn.max(tn.abs(x - z), axis=0)]
    f = tn.function([x, z], outputs, mode=HOST)
    g = tn.function([x, z], outputs, mode="py")
    assert {"Elemwise", "Softmax", "LogSumExp"} <= _kernel_ops(f)
    assert _kernel_ops(f) & {"Reduce", "FusedReduce"}
    args = rng.standard_normal((7, 5)), rng.standard_normal(5)
    for got, want in zip(f(*args), g(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_a_borrowed_output_is_written_into_last_calls_buffer(rng):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True)], Out(tn.exp(x) + 1, borrow=True), mode=HOST)
    a = rng.standard_normal((4, 6))
    first = f(a)
    second = f(a * 2)
    assert second is first                       # the kernel wrote into the kept buffer
    np.testing.assert_allclose(second, np.exp(a * 2) + 1, rtol=1e-15)
    assert f(rng.standard_normal((3, 6))).shape == (3, 6)   # another shape: a new buffer


def test_an_update_is_computed_in_the_shared_storage(rng):
    w = tn.shared(rng.standard_normal((5, 3)), name="w")
    g = tn.matrix("g")
    step = tn.function([g], [], updates=[(w, w - 0.1 * g)], mode=HOST)
    before = w.get_value(borrow=True)
    want = before - 0.1 * np.ones((5, 3))
    step(np.ones((5, 3)))
    assert w.get_value(borrow=True) is before    # the kernel wrote in place
    np.testing.assert_allclose(before, want, rtol=1e-15)


def test_a_kernel_error_names_the_node():
    i = tn.vector("i", dtype="int64")
    f = tn.function([i], i ** i, mode=HOST)
    with pytest.raises(ValueError, match="negative integer powers") as info:
        f(np.array([2, -1], np.int64))
    assert any("raised while computing" in note for note in info.value.__notes__)


def test_nodes_without_kernels_run_their_perform(rng):
    x = tn.matrix("x")
    f = tn.function([x], [tn.sort(x, axis=1), x @ x.T], mode=HOST)
    assert not _kernel_ops(f) & {"Sort", "Dot", "Gemm", "MatMul"}
    a = rng.standard_normal((3, 3))
    got = f(a)
    np.testing.assert_array_equal(got[0], np.sort(a, axis=1))
    np.testing.assert_allclose(got[1], a @ a.T)


def test_the_memory_report_counts_no_kernel_workspace(rng):
    """A kernel needs no temporaries: the plan predicts the output alone,
    and that is what the call holds (perform's phases would hold more)."""
    x = tn.matrix("x")
    a = rng.standard_normal((256, 300))
    on_host = tn.function([x], tn.softmax(x, axis=1), mode=HOST)
    report = on_host.memory_report(a, print_report=False)
    reference = tn.function([x], tn.softmax(x, axis=1), mode="py")
    assert report.predicted_peak == a.nbytes < reference.memory_report(
        a, print_report=False).predicted_peak
    assert 0 <= report.measured_peak - report.predicted_peak <= 16384   # Python objects


def test_a_kernel_the_device_compiler_refuses_fails_the_host_build():
    """With ``check_device_compile`` (the test suite's setting wherever NVRTC
    or nvcc is installed), a kernel is compiled for the device as well as
    for the CPU: code that only the host compiler takes fails.  The code is
    refused by both device compilers (a kernel calling a host function),
    not only by NVRTC (a host header such as <stdio.h>, which nvcc takes)."""
    try:
        nvrtc.compiler_name()
    except CudaUnavailable as exc:
        need(False, str(exc))
    host_only = SimpleNamespace(
        name="tn_host_only", uses_status=False,
        source='static int tn_host_helper(void) { return 1; }\n'
               'extern "C" __global__ void tn_host_only(int *out) { *out = tn_host_helper(); }\n')
    HostBackend().prepare([host_only])            # the CPU's compiler takes it
    with pytest.raises(nvrtc.KernelCompileError, match="tn_host_helper"):
        HostBackend(check_device_compile=True).prepare([host_only])


def test_a_host_launch_that_cannot_run_raises(rng):
    """A block larger than the host runs (its coroutines' stacks) is
    an error, not a launch that silently computes nothing."""
    x = tn.matrix("x")
    f = tn.function([x], tn.softmax(x, axis=1), mode=HOST)
    ((node, step),) = f._thunk.kernel_steps.items()
    big = HostBackend()
    big.reduction_threads = 128
    with pytest.raises(RuntimeError, match="could not run .* on blocks of 128 threads"):
        step.run(big, step.kernel, node, [rng.random((2, 3))])


def test_region_updates_run_as_kernels(rng):
    """``x[index] += v`` and ``x[index] = v`` (basic indexing) write the
    region through an elementwise kernel: into the shared storage when the
    update is in place, with NumPy's promotion and cast, ``v`` broadcast."""
    w = tn.shared(rng.standard_normal((6, 4)), name="w")
    g = tn.matrix("g")
    step = tn.function([g], [], updates=[(w, tn.inc_subtensor(w[1:5:2, ::-1], g))],
                       mode=HOST)
    assert "IncSubtensor" in _kernel_ops(step)
    before = w.get_value(borrow=True)
    want = before.copy()
    delta = rng.standard_normal((2, 4))
    want[1:5:2, ::-1] += delta
    step(delta)
    assert w.get_value(borrow=True) is before            # written where it lies
    np.testing.assert_array_equal(before, want)

    x, v = tn.tensor("x", dtype="float32", shape=(None, None)), tn.vector("v")
    # (set with a value of fewer axes than the region: the kernel still has
    # a variant for the region's axes)
    outputs = [tn.inc_subtensor(x[:, 1:3], v[:2]), tn.set_subtensor(x[2], v), x[0, 0].set(v[0]),
               tn.set_subtensor(x[1:3], v)]
    on_host = tn.function([x, v], outputs, mode=HOST)
    reference = tn.function([x, v], outputs, mode="py")
    assert _kernel_ops(on_host) >= {"IncSubtensor"}
    args = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4)
    for got, expected in zip(on_host(*args), reference(*args)):
        assert got.dtype == expected.dtype == np.float32
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="cannot be broadcast to the indexed region"):
        on_host(args[0], rng.standard_normal(3))
