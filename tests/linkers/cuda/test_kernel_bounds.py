"""Kernels run on the host check every operand access of a generated kernel
against the bytes of its array (issue 30): a kernel that would read or
write outside its buffers on a device fails in CI.  First that the check
catches such an access (a launch given a layout that lies), then the
kernels of each family over empty and zero-length parts, which must match
NumPy without a single access outside their operands."""

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.cuda import elemwise as cuda_ew
from tenure.linkers.cuda import nnet as cuda_nnet
from tenure.linkers.cuda import reduce as cuda_reduce
from tenure.linkers.cuda.host_kernels import KernelBoundsError, span
from tenure.linkers.cuda.launch import run_elemwise, run_nnet, run_reduce

X, Y = tn.matrix("x"), tn.matrix("y")
ADD = (X + Y).owner
EXP = tn.exp(X).owner
KERNELS = [cuda_ew.elemwise_kernel(ADD), cuda_ew.elemwise_kernel(EXP)]


def _launch_add(backend, out, a, b, n):
    """The 1-d variant of x + y over ``n`` elements of contiguous float64s."""
    kernel = cuda_ew.elemwise_kernel(ADD)
    return backend.launch(kernel, cuda_ew.variant_name(kernel.name, 1), 3, 5, [out, a, b],
                          [n, n, 8, 8, 8])


def test_span_of_views():
    a = np.zeros((3, 4))
    assert span(a) == (0, 96)
    assert span(a[::-1, 1:3]) == (-64, 16)
    assert span(a[:, :0]) == (0, 0)
    assert span(np.broadcast_to(np.zeros(1), (5,))) == (0, 8)


def test_a_read_past_an_input_fails(on_host):
    out, short, full = np.zeros(10), np.arange(4.0), np.arange(10.0)
    with pytest.raises(KernelBoundsError, match=r"bytes \[32, 40\) of operand 1 \(an input\), "
                                                r"whose bytes are \[0, 32\)"):
        _launch_add(on_host, out, short, full, 10)


def test_a_write_past_the_output_fails_and_is_not_made(on_host):
    memory = np.zeros(10)
    out = memory[:4]      # the kernel may write these four only
    with pytest.raises(KernelBoundsError, match=r"operand 0 \(the output\)"):
        _launch_add(on_host, out, np.ones(10), np.ones(10), 10)
    assert memory[4:].tolist() == [0.0] * 6


def test_a_launch_over_an_empty_array_touches_nothing(on_host):
    empty = np.zeros(0)
    with pytest.raises(KernelBoundsError, match=r"whose bytes are \[0, 0\)"):
        _launch_add(on_host, np.zeros(1), empty, np.ones(1), 1)


# -- every kernel family over empty and zero-length parts --------------------

ELEMWISE_SHAPES = [((0, 0), (0, 0)), ((0, 3), (0, 3)), ((3, 0), (1, 0)), ((1, 0), (3, 1)),
                   ((3, 1), (1, 0)), ((2, 3), (2, 3))]


@pytest.mark.parametrize("shapes", ELEMWISE_SHAPES, ids=str)
def test_elemwise_over_empty_parts(on_host, shapes):
    a, b = (np.arange(np.prod(s), dtype=float).reshape(s) + 1 for s in shapes)
    got = run_elemwise(on_host, cuda_ew.elemwise_kernel(ADD), ADD, [a, b])
    np.testing.assert_array_equal(got, a + b)


REDUCE_CASES = [("sum", (3, 0), 1), ("prod", (0, 3), 0), ("sum", (0, 3), 1), ("max", (3, 2), 1),
                ("sum", (3, 0), (0, 1)), ("any", (2, 0), 1), ("all", (2, 0), 1)]


@pytest.mark.parametrize("strategy", cuda_reduce.STRATEGIES)
@pytest.mark.parametrize("fn, shape, axis", REDUCE_CASES, ids=str)
def test_reductions_over_empty_parts(on_host, fn, shape, axis, strategy):
    x = tn.tensor("x", dtype="bool" if fn in ("any", "all") else "float64",
                  shape=(None,) * len(shape))
    node = getattr(tn, fn)(x, axis=axis).owner
    value = (np.arange(np.prod(shape)).reshape(shape) % 3).astype(x.dtype)
    got = run_reduce(on_host, cuda_reduce.reduce_kernel(node), node, [value],
                     strategy=strategy)
    np.testing.assert_array_equal(got, getattr(np, fn)(value, axis=axis))


@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("shape, axis", [((3, 0), 1), ((0, 3), 1), ((3, 0), 0), ((2, 3), 1)],
                         ids=str)
def test_row_kernels_over_empty_parts(on_host, fn, shape, axis):
    node = getattr(tn, fn)(X, axis=axis).owner
    value = np.arange(np.prod(shape), dtype=float).reshape(shape)
    expected = tn.function([X], node.outputs[0], mode=tn.Mode(linker="py"))(value)
    got = run_nnet(on_host, cuda_nnet.nnet_kernel(node), node, [value])
    np.testing.assert_allclose(got, expected)


def test_graphs_over_zero_length_parts_on_the_device():
    """Split into zero-length parts, kernels over each part, region updates
    of empty regions: the device path with every access checked."""
    v, k = tn.vector("v"), tn.scalar("k", dtype="int64")
    parts = tn.split(v, [0, 0, 2])
    outputs = [tn.exp(p) * 2 for p in parts] + [v[k:k].inc(1.0), tn.sum(parts[0] * parts[1])]
    value = np.arange(3.0)
    expected = tn.function([v, k], outputs, mode=tn.Mode(linker="py"))(value, 1)
    with tn.config.change_flags(cuda_emulation=True):
        fn = tn.function([v, k], outputs, mode=tn.Mode(linker="cuda"))
        got = [r.get() for r in fn(value, 1)]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e)


def test_the_device_paths_launches_are_checked_too():
    """The emulated device's backend (Mode(linker="cuda") in CI) registers
    the spans of its arrays as well."""
    from tenure.linkers.cuda.device_linker import device_backend
    from tenure.symbolic.device import cuda_runtime
    runtime = cuda_runtime(True)
    backend = device_backend(runtime, True)
    out, short = runtime.empty((10,), np.float64), runtime.from_host(np.arange(4.0))
    with pytest.raises(KernelBoundsError, match=r"operand 1 \(an input\)"):
        _launch_add(backend, out, short, runtime.from_host(np.arange(10.0)), 10)
        runtime.synchronize()
