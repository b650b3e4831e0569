"""The CUDA linker under asynchronous launches (issue 43), on the emulated
device, whose launches and host-to-device copies are queued per stream and
run at the next synchronisation point, and whose pool poisons a block freed
while work queued on an unordered stream still uses it
(:mod:`tenure.linkers.cuda.emulated_device`).

Each test runs a function on a stream other than the one its data was made
on -- a caller's ``with stream:``, another thread's stream -- which is where
the real pool's stream-ordered reuse stops protecting a buffer.  Only
device-independent behaviour is asserted; the emulated device is tenure's
own (no GPU needed)."""

import gc

import numpy as np
import pytest

import tenure as tn
from tenure import Out
from tenure.linkers.c import compiler
from tenure.symbolic.device import cuda_runtime
from tenure.linkers.cuda.emulated_device import EmulatedIllegalAddress

pytestmark = pytest.mark.skipif(compiler.find_compiler() is None,
                                reason="no working C compiler to emulate kernels with")


@pytest.fixture
def runtime():
    with tn.config.change_flags(cuda_emulation=True):
        runtime = cuda_runtime()
        yield runtime
        runtime.device.synchronize()    # nothing left queued for the next test


def cuda(**kwargs):
    return tn.Mode(linker="cuda", **kwargs)


def test_constant_uploaded_when_compiling_is_there_for_a_call_on_another_stream(runtime):
    # The constant's upload is queued on the stream that compiled; a call on
    # a non-blocking stream must wait for it, or its kernel reads garbage.
    x = tn.vector("x")
    f = tn.function([x], x * np.array([1.0, 2.0, 3.0]), mode=cuda())
    stream = runtime.stream(non_blocking=True)
    with stream:
        got = f(np.ones(3)).get()
    np.testing.assert_array_equal(got, [1.0, 2.0, 3.0])


def test_shared_storage_made_on_one_stream_is_read_on_another(runtime):
    w = tn.shared(np.arange(3.0), name="w", device="cuda")
    f = tn.function([], w * 2, mode=cuda())
    with runtime.stream(non_blocking=True):
        got = f().get()
    np.testing.assert_array_equal(got, [0.0, 2.0, 4.0])


def test_replaced_shared_storage_outlives_the_call_that_reads_it(runtime):
    # Not in place: the update's kernel reads w's old buffer (allocated on the
    # null stream) and the commit drops it.  Freed while the kernel is still
    # queued on the caller's stream, the real pool may hand it to the next
    # allocation on the null stream: it must stay alive until the call's
    # stream has passed it.
    w = tn.shared(np.arange(3.0), name="w", device="cuda")
    runtime.synchronize()
    f = tn.function([], [], updates=[(w, w + 1)], mode=cuda(exclude=["inplace"]))
    stream = runtime.stream(non_blocking=True)
    with stream:
        f()
        gc.collect()
        got = w.get_value()
    np.testing.assert_array_equal(got, [1.0, 2.0, 3.0])


def test_calls_on_two_streams_run_in_call_order(runtime):
    # Two calls of one function on two unordered streams: the second reads
    # the shared storage the first one updated (in place).
    w = tn.shared(np.zeros(3), name="w", device="cuda")
    step = tn.function([], [], updates=[(w, w + 1)], mode=cuda())
    first, second = runtime.stream(non_blocking=True), runtime.stream(non_blocking=True)
    with first:
        step()
    with second:
        step()
        got = w.get_value()
    np.testing.assert_array_equal(got, [2.0, 2.0, 2.0])


def test_set_value_waits_for_a_call_still_reading_the_storage(runtime):
    w = tn.shared(np.ones(3), name="w", device="cuda")
    f = tn.function([], Out(w * 2, borrow=False), mode=cuda())
    stream = runtime.stream(non_blocking=True)
    with stream:
        y = f()
    w.set_value(np.full(3, 5.0))       # on the null stream, while f's kernel is queued
    with stream:
        got = y.get()
    np.testing.assert_array_equal(got, [2.0, 2.0, 2.0])


def test_a_dropped_argument_on_the_same_stream_is_safe(runtime):
    # CuPy's pool is stream-ordered: memory freed and reused on one stream is
    # safe, and the emulation must not call it a bug.
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x), mode=cuda())
    y = f(runtime.from_host(np.zeros(3)))     # the argument dies right after the call
    gc.collect()
    np.testing.assert_array_equal(y.get(), [1.0, 1.0, 1.0])


def test_the_emulated_pool_catches_a_cross_stream_free(runtime):
    # The emulation's own rule, seen through a kernel launch: an array made
    # on the null stream, read by a launch queued on a non-blocking stream
    # and dropped before that runs, fails at the stream's synchronisation.
    device = runtime.device
    x = runtime.from_host(np.arange(3.0))
    runtime.synchronize()
    out = runtime.empty(3, np.float64)
    stream = runtime.stream(non_blocking=True)
    with stream:
        memory, source = out._mem, x._mem
        runtime.launch(lambda: np.add(source, 1, out=memory), [out, x], name="add")
    del x, source
    gc.collect()
    with pytest.raises(EmulatedIllegalAddress, match="add queued on .* freed before it ran"):
        stream.synchronize()
    device.synchronize()
