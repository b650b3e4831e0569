"""What else may run while a compiled function is running (issue 41): a
memory report of it from another thread waits for the call (or runs apart
from it), and a call of it from inside itself -- an op's ``perform`` calling
the function that runs it -- is refused before it changes anything.

The tests run on every linker that runs ops' ``perform`` (``linker``):
the dask linker lowers no custom op (so cannot be re-entered) and its calls
hold no per-call storage of the function's.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tenure as tn
from tenure.function import ReentrantCallError
from tenure.linkers.c import compiler
from tenure.linkers.cuda.device_ops import register_device_op
from tenure.symbolic.device import is_device_array
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.variable import as_tensor_variable

LINKERS = ["py", "check", "c", "cuda_host", "cuda"]


@pytest.fixture(params=LINKERS)
def linker(request):
    """A linker name; ``"cuda"`` runs on the emulated device, with device
    shared variables (``config.device="cuda"``)."""
    if request.param in ("c", "cuda_host", "cuda") and compiler.find_compiler() is None:
        pytest.skip("no working C compiler")
    if request.param == "cuda":
        with tn.config.change_flags(cuda_emulation=True, device="cuda"):
            yield request.param
    else:
        yield request.param


def _host(value):
    return value.get() if is_device_array(value) else np.asarray(value)


# ----------------------------------------------------------------------------
# A memory report while other threads call the function (item 3)

_REPORTS_BESIDE_CALLS = """
    import sys, threading
    import numpy as np
    import tenure as tn

    sys.setswitchinterval(1e-6)
    x = tn.vector("x", dtype="float64")
    w = tn.shared(np.ones(50), name="w")
    if {with_shared!r}:   # a call takes the shared variable's lock
        f = tn.function([x], (tn.exp(x) * w).sum(), updates=[(w, w * 0.5 + x)],
                        mode={linker!r})
    else:                 # a call on the C linker takes no lock at all
        f = tn.function([x], tn.Out(tn.exp(x) * 2 + tn.sin(x).sum(), borrow=True),
                        mode={linker!r})
    arg = np.linspace(0.0, 1.0, 50)
    errors = []
    reported = threading.Event()

    def calls():   # for as long as the reports run (at most 50000 calls)
        try:
            for _ in range(50000):
                if reported.is_set():
                    break
                f(arg)
        except BaseException as exc:
            errors.append(repr(exc))

    def reports():
        try:
            for _ in range(25):
                f.memory_report(arg, print_report=False)
                f.memory_timeline(arg)
        except BaseException as exc:
            errors.append(repr(exc))
        finally:
            reported.set()

    threads = [threading.Thread(target=calls), threading.Thread(target=calls),
               threading.Thread(target=reports)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("errors:", errors)
"""


@pytest.mark.parametrize("with_shared", [False, True], ids=["no shared", "shared"])
def test_memory_reports_beside_calls_in_other_threads(linker, with_shared):
    """In a subprocess, so that a crash fails the test instead of pytest."""
    if linker == "cuda":
        pytest.skip("the device linker's thunk is the cuda_host one's, on device arrays")
    code = textwrap.dedent(_REPORTS_BESIDE_CALLS.format(linker=linker,
                                                        with_shared=with_shared))
    env = dict(os.environ, TENURE_FLAGS=f"compiledir={tn.config.compiledir}")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip().endswith("errors: []"), done.stdout[-2000:]


# ----------------------------------------------------------------------------
# A call from inside the same call (item 7)


class CallsBack(Op):
    """The identity (a copy) that first calls ``action(x)`` once, when armed:
    an op whose ``perform`` calls the function running it."""

    __props__ = ()

    def __init__(self):
        self.action = None
        self.raised = []

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        action, self.action = self.action, None
        if action is not None:
            action(inputs[0])
        output_storage[0][0] = inputs[0].copy()

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]


register_device_op(CallsBack)


def _calling_itself(linker, with_update):
    op = CallsBack()
    s = tn.shared(np.zeros(3), name="s")
    x = tn.vector("x", dtype="float64")
    updates = [(s, s + x)] if with_update else []
    f = tn.function([x], op(x) * 2.0, updates=updates, mode=linker, name="step")
    return f, op, s


@pytest.mark.parametrize("with_update", [True, False], ids=["update", "no update"])
def test_a_call_from_inside_its_own_call_is_refused_and_changes_nothing(linker, with_update):
    f, op, s = _calling_itself(linker, with_update)
    op.action = f
    with pytest.raises(ReentrantCallError, match="function 'step'.*running in this thread"):
        f(np.ones(3))
    np.testing.assert_array_equal(s.get_value(), np.zeros(3))
    # Usable afterwards, and right.
    np.testing.assert_array_equal(_host(f(np.ones(3))), np.full(3, 2.0))
    np.testing.assert_array_equal(s.get_value(), np.full(3, float(with_update)))


def test_a_refused_inner_call_that_is_caught_lets_the_outer_call_complete(linker):
    f, op, s = _calling_itself(linker, with_update=True)

    def call_and_catch(value):
        with pytest.raises(ReentrantCallError):
            f(value)
        op.raised.append(True)

    op.action = call_and_catch
    np.testing.assert_array_equal(_host(f(np.ones(3))), np.full(3, 2.0))
    assert op.raised == [True]
    np.testing.assert_array_equal(s.get_value(), np.ones(3))   # one update, once


def test_a_memory_report_from_inside_a_call_is_refused(linker):
    f, op, s = _calling_itself(linker, with_update=True)
    op.action = lambda value: f.memory_report(value, print_report=False)
    with pytest.raises(ReentrantCallError, match="memory report"):
        f(np.ones(3))
    np.testing.assert_array_equal(s.get_value(), np.zeros(3))
    assert f.memory_report(np.ones(3), print_report=False).records
