"""The device path: ``Mode(linker="cuda")``, device shared variables, device
inputs and outputs, the memory contract on device memory.

Every test takes ``device`` (tests/linkers/cuda/conftest.py): the emulated
device (``config.cuda_emulation``: host memory behind arrays that refuse
conversion to NumPy exactly as CuPy's do, the kernels under host
emulation), which runs in every CI run, and the real one, which skips
without CuPy and a GPU.  Results are compared with the
Python linker's (the reference) on the same graphs.
"""

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.cuda.device_linker import UnsupportedOnDevice
from tenure.linkers.cuda.device_ops import register_device_op
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.variable import as_tensor_variable
from tenure.linkers.cuda.runtime import unavailable_reason
from tenure.symbolic.device import CudaUnavailable
from tests.linkers.cuda.conftest import host

PY = tn.Mode(linker="py")


def cuda():
    return tn.Mode(linker="cuda")


def buffer_of(var):
    return var.get_value(borrow=True, return_internal_type=True)


def test_without_a_device_the_mode_names_what_is_missing():
    reason = unavailable_reason()
    if reason is None:
        pytest.skip("this machine has a CUDA device")
    with tn.config.change_flags(cuda_emulation=False):
        with pytest.raises(CudaUnavailable) as info:
            tn.Mode(linker="cuda")
    assert str(info.value) == reason
    assert "CuPy" in reason and ("not installed" in reason or "no CUDA device" in reason)


# -- device shared variables ----------------------------------------------------------


def test_shared_of_a_device_array_returns_device_arrays(device):
    w = device.from_host(np.arange(6.0).reshape(2, 3))
    s = tn.shared(w, name="s")
    assert s.device == "cuda" and s.type.dtype == "float64" and s.ndim == 2
    got = s.get_value()
    assert device.is_device_array(got)
    np.testing.assert_array_equal(host(got), np.arange(6.0).reshape(2, 3))
    assert not device.may_share_memory(got, buffer_of(s))      # a copy the caller owns
    assert not device.may_share_memory(buffer_of(s), w)        # shared() copied
    assert s.get_value(borrow=True) is buffer_of(s)


def test_shared_of_host_data_on_the_device_returns_numpy_copies(device):
    s = tn.shared(np.ones(4, np.float32), device="cuda")
    assert s.device == "cuda"
    assert device.is_device_array(buffer_of(s))
    for borrow in (False, True):
        got = s.get_value(borrow=borrow)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_array_equal(got, 1.0)


def test_borrowed_device_arrays_are_adopted_but_never_by_two_shared(device):
    w = device.from_host(np.zeros(3))
    a = tn.shared(w, borrow=True)
    b = tn.shared(w, borrow=True)
    assert buffer_of(a) is w
    assert not device.may_share_memory(buffer_of(b), w)


def test_set_value_of_the_same_shape_copies_into_the_device_buffer(device):
    s = tn.shared(device.from_host(np.zeros((64, 64))))
    before = buffer_of(s)
    source = device.from_host(np.full((64, 64), 2.0))
    with device.track() as usage:
        s.set_value(source)
        s.set_value(np.full((64, 64), 3.0))      # from the host: uploaded into the buffer
    assert usage.n_allocations == 0, usage
    assert buffer_of(s) is before
    np.testing.assert_array_equal(host(s.get_value()), 3.0)
    s.set_value(np.zeros((2, 2)))                # another shape: a new buffer
    assert buffer_of(s) is not before and tuple(buffer_of(s).shape) == (2, 2)


def test_set_value_borrow_adopts_a_device_array(device):
    s = tn.shared(device.from_host(np.zeros(5)))
    mine = device.from_host(np.arange(5.0))
    s.set_value(mine, borrow=True)
    assert buffer_of(s) is mine
    s.set_value(device.from_host(np.ones(5)))    # not borrowed: copied into mine
    assert buffer_of(s) is mine
    np.testing.assert_array_equal(host(mine), 1.0)


def test_set_value_checks_dtype_and_ndim_on_the_device(device):
    s = tn.shared(device.from_host(np.zeros(3, np.float32)), name="w")
    with pytest.raises(TypeError, match="set_value of w.*float32.*float64"):
        s.set_value(device.from_host(np.zeros(3)))
    with pytest.raises(TypeError, match="expected 1 dimension"):
        s.set_value(device.from_host(np.zeros((3, 1), np.float32)))
    with pytest.raises(TypeError, match="device array .* for a shared variable in host"):
        tn.shared(np.zeros(3)).set_value(device.from_host(np.zeros(3)))


def test_shared_device_argument_is_checked(device):
    with pytest.raises(ValueError, match="device must be one of cpu, cuda"):
        tn.shared(np.zeros(3), device="gpu")
    s = tn.shared(device.from_host(np.arange(3.0)), device="cpu")
    assert s.device == "cpu" and isinstance(s.get_value(), np.ndarray)


def test_storage_and_linker_must_agree(device):
    x = tn.vector("x")
    on_device = tn.shared(np.zeros(3), device="cuda", name="d")
    on_host = tn.shared(np.zeros(3), name="h")
    with pytest.raises(TypeError, match=r"d \(cuda\) are stored on a device.*'py' linker"):
        tn.function([x], x + on_device, mode=PY)
    with pytest.raises(TypeError, match=r"h \(cpu\) are not stored on the device"):
        tn.function([x], x + on_host, mode=cuda())


# -- functions -------------------------------------------------------------------------


def test_numpy_and_device_inputs_give_device_outputs(device, rng):
    x = tn.matrix("x")
    y = tn.exp(x) * 2 + tn.sin(x).sum(axis=0)
    f = tn.function([x], y, mode=cuda())
    value = rng.standard_normal((5, 7))
    want = tn.function([x], y, mode=PY)(value)
    for arg in (value, device.from_host(value)):
        got = f(arg)
        assert device.is_device_array(got)
        np.testing.assert_allclose(host(got), want, rtol=1e-12)


def test_outputs_never_alias_unborrowed_inputs(device):
    x = tn.vector("x")
    arg = device.from_host(np.arange(4.0))
    same = tn.function([x], x, mode=cuda())(arg)
    assert not device.may_share_memory(same, arg)
    lent = tn.function([In(x, borrow=True)], x, mode=cuda())(arg)
    np.testing.assert_array_equal(host(lent), np.arange(4.0))


def test_mutable_input_may_be_overwritten_and_results_are_right(device):
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], tn.exp(x) + 1, mode=cuda())
    arg = device.from_host(np.arange(4.0))
    got = f(arg)
    np.testing.assert_allclose(host(got), np.exp(np.arange(4.0)) + 1)


def test_borrowed_output_allocates_nothing_in_steady_state(device):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True)], Out(tn.exp(x) * 2 + tn.sin(x), borrow=True),
                    mode=cuda())
    arg = device.from_host(np.ones((128, 64)))
    first = f(arg)
    with device.track() as usage:
        again = f(arg)
    assert again is first                      # last call's buffer, written again
    assert usage.n_allocations == 0, usage


def test_unborrowed_outputs_are_fresh_every_call(device):
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True)], tn.exp(x) * 2, mode=cuda())
    arg = device.from_host(np.ones((16, 16)))
    first = f(arg)
    with device.track() as usage:
        second = f(arg)
    assert not device.may_share_memory(first, second)
    assert usage.allocated_bytes >= 16 * 16 * 8


def test_updates_go_into_the_shared_device_buffer(device):
    w = tn.shared(device.from_host(np.ones((32, 32))), name="w")
    before = buffer_of(w)
    step = tn.function([], [], updates=[(w, w * 2 + 1)], mode=cuda())
    step()
    step()
    assert buffer_of(w) is before
    np.testing.assert_array_equal(host(w.get_value()), 7.0)


def test_a_failing_call_changes_no_shared_variable(device):
    w = tn.shared(device.from_host(np.arange(4)), name="w")
    p = tn.scalar("p", dtype="int64")
    f = tn.function([p], (w + 1) ** p, updates=[(w, w + 1)], mode=cuda())
    np.testing.assert_array_equal(host(f(1)), np.arange(4) + 1)
    with pytest.raises(ValueError, match="negative integer powers"):
        f(-1)
    np.testing.assert_array_equal(host(w.get_value()), np.arange(4) + 1)


def test_bad_inputs_name_the_input(device):
    x = tn.matrix("x")
    f = tn.function([x], x * 2, mode=cuda())
    with pytest.raises(TypeError, match="input 'x': expected 2 dimension"):
        f(device.from_host(np.zeros(3)))
    with pytest.raises(TypeError, match="input 'x': expected dtype float64, got complex128"):
        f(device.from_host(np.zeros((2, 2), complex)))
    g = tn.function([x], x * 2, mode=PY)
    with pytest.raises(TypeError, match="input 'x': expected a host array, got a device array"):
        g(device.from_host(np.zeros((2, 2))))


class HostOnly(Op):
    """An op of a user's, with no device implementation registered."""

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.asarray(inputs[0]) * 2


class Doubled(HostOnly):
    """The same, written for any array, and registered."""

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = inputs[0] * 2


register_device_op(Doubled)


def test_ops_without_a_device_implementation_are_named_when_compiling(device):
    x = tn.matrix("x")
    with pytest.raises(UnsupportedOnDevice,
                       match=r"cannot run HostOnly on the device.*HostOnly\(x\)"):
        tn.function([x], HostOnly()(x) + 1, mode=cuda())


def test_a_registered_op_runs_its_perform_on_device_arrays(device):
    x = tn.matrix("x")
    got = tn.function([x], Doubled()(x) + 1, mode=cuda())(np.ones((2, 3)))
    assert device.is_device_array(got)
    np.testing.assert_array_equal(host(got), 3.0)


def test_shape_results_come_back_on_the_device(device):
    x = tn.matrix("x")
    got = tn.function([x], [x.shape, x.shape[0] * 2], mode=cuda())(np.zeros((3, 5)))
    assert all(device.is_device_array(g) for g in got)
    assert host(got[0]).tolist() == [3, 5] and int(got[1]) == 6


def test_training_steps_match_the_python_linker(device, rng):
    """An MLP trained on the device: same weights as on the host after three steps."""
    x, y = tn.matrix("x"), tn.matrix("y")
    w1, b1 = rng.standard_normal((8, 16)) * 0.3, np.zeros(16)
    w2 = rng.standard_normal((16, 4)) * 0.3
    xs, ys = rng.standard_normal((32, 8)), rng.standard_normal((32, 4))

    def train(mode, make_shared):
        params = [make_shared(w1), make_shared(b1), make_shared(w2)]
        h = tn.relu(tn.dot(x, params[0]) + params[1])
        out = tn.softmax(tn.dot(h, params[2]), axis=-1)
        loss = tn.mean((out - y) ** 2) + 0.01 * tn.sum(params[0] ** 2)
        grads = tn.grad(loss, params)
        step = tn.function([x, y], loss, mode=mode,
                           updates=[(p, p - 0.1 * g) for p, g in zip(params, grads)])
        losses = [float(host(step(xs, ys))) for _ in range(3)]
        return losses, [host(p.get_value()) for p in params]

    want_losses, want = train(PY, tn.shared)
    got_losses, got = train(cuda(), lambda v: tn.shared(v, device="cuda"))
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-10)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_memory_report_of_a_device_function(device):
    x = tn.matrix("x")
    f = tn.function([x], tn.softmax(tn.exp(x) * 2, axis=-1), mode=cuda())
    report = f.memory_report(np.zeros((64, 32)), print_report=False)
    assert report.predicted_peak >= 64 * 32 * 8


def test_set_value_into_an_adopted_strided_buffer(device):
    s = tn.shared(device.from_host(np.zeros(3)))
    strided = device.from_host(np.zeros(6))[::2]
    s.set_value(strided, borrow=True)
    s.set_value(np.arange(3.0))                  # host data into a strided device buffer
    assert buffer_of(s) is strided
    np.testing.assert_array_equal(host(s.get_value()), np.arange(3.0))


def _mlp_step(mode, rng):
    """A 4-layer MLP's training step with its weights on the device, and arguments."""
    x, t = tn.matrix("x"), tn.matrix("t")
    sizes = (64, 128, 128, 128, 8)
    weights = [tn.shared(rng.standard_normal((a, b)) * 0.1, device="cuda")
               for a, b in zip(sizes, sizes[1:])]
    h = x
    for w in weights[:-1]:
        h = tn.tanh(tn.dot(h, w))
    loss = tn.mean((tn.dot(h, weights[-1]) - t) ** 2)
    grads = tn.grad(loss, weights)
    f = tn.function([x, t], loss, mode=mode,
                    updates=[(w, w - 0.01 * g) for w, g in zip(weights, grads)])
    return f, (rng.standard_normal((256, 64)), rng.standard_normal((256, 8)))


@pytest.mark.usefixtures("freeing_intermediates")
def test_an_activation_budget_lowers_the_device_peak(device, rng):
    """The remat rewrite's budget applies to device memory: the measured
    device peak drops, and the plan predicts it within 10%."""
    peaks = {}
    for budget in (None, 0.0):
        f, args = _mlp_step(tn.Mode(linker="cuda", activation_memory_budget=budget), rng)
        report = f.memory_report(*args, print_report=False)
        assert "memory" in report.measured_by and "tracemalloc" not in report.measured_by
        assert abs(report.measured_peak - report.predicted_peak) <= 0.1 * report.predicted_peak
        peaks[budget] = report.measured_peak
    assert peaks[0.0] < 0.9 * peaks[None], peaks


def _benchmark_graphs(rng):
    """The GPU benchmark's workloads (benchmarks/gpu.py), at small sizes."""
    x, z, w = (tn.matrix(n, dtype="float32") for n in "xzw")
    values = {n: rng.standard_normal((256, 128)).astype("float32") for n in "xzw"}
    yield "elemwise", [x, z], tn.exp(x) * 2 + tn.sin(z) * x, [values["x"], values["z"]]
    yield "softmax_infer", [x], tn.softmax(x, axis=1), [values["x"]]
    yield ("softmax_grad", [x, w], tn.grad(tn.sum(tn.softmax(x, axis=1) * w), x),
           [values["x"], values["w"]])


@pytest.mark.usefixtures("freeing_intermediates")
def test_the_device_report_predicts_the_benchmark_workloads(device, rng):
    """The report's predicted peak is within 10% of the measured device peak."""
    for name, inputs, output, values in _benchmark_graphs(rng):
        f = tn.function(inputs, output, mode=cuda())
        report = f.memory_report(*values, print_report=False)
        assert report.predicted_peak > 0, name
        assert abs(report.measured_peak - report.predicted_peak) <= 0.1 * report.predicted_peak, \
            (name, report.predicted_peak, report.measured_peak)
