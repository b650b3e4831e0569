"""The checking linker catches ops that break their declarations."""

import numpy as np
import pytest

import tenure as tn
from tenure import In
from tenure.linkers.check import CheckError
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.variable import as_tensor_variable

CHECK = tn.Mode(linker="check")


class _Bad(Op):
    """A vector op whose ``perform`` misbehaves in the way ``fault`` names."""

    __props__ = ("fault",)

    def __init__(self, fault: str):
        self.fault = fault
        if fault == "copying_view":
            self.view_map = {0: [0]}

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        (x,) = inputs
        cell = output_storage[0]
        if self.fault == "writes_input":
            x *= 2
            cell[0] = x.copy()
        elif self.fault == "undeclared_view":
            cell[0] = x[::-1]
        elif self.fault == "copying_view":
            cell[0] = x.copy()
        elif self.fault == "stale_buffer":
            # Trusts last call's buffer blindly: accumulates instead of computing.
            if cell[0] is not None and cell[0].shape == x.shape:
                cell[0] += x
            else:
                cell[0] = x.copy()
        elif self.fault == "wrong_dtype":
            cell[0] = x.astype("float32")
        elif self.fault == "scalar":
            cell[0] = float(x.sum())
        else:
            cell[0] = x * 2

    def infer_shape(self, node, input_shapes):
        return input_shapes


@pytest.mark.parametrize("fault, message", [
    ("writes_input", "wrote to input 0"),
    ("undeclared_view", r"shares memory with input 0 \(x\) without declaring"),
    ("copying_view", "declared a view of input 0 but is a separate array"),
    ("wrong_dtype", "has dtype float32"),
    ("scalar", "not an ndarray"),
])
def test_misbehaving_ops_are_caught(fault, message):
    x = tn.vector("x")
    f = tn.function([x], _Bad(fault)(x) * 1, mode=CHECK)
    with pytest.raises(CheckError, match=message):
        f(np.arange(3.0))


def test_misuse_of_a_reused_buffer_is_caught():
    x = tn.vector("x")
    # Intermediates keep their buffers between calls (gc off, and no in-place
    # op taking over the buffer).
    with tn.config.change_flags(allow_gc=False):
        f = tn.function([x], _Bad("stale_buffer")(x) * 2,
                        mode=tn.Mode(linker="check", exclude=["inplace"]))
    f(np.arange(3.0))
    with pytest.raises(CheckError, match="differs from a fresh run"):
        f(np.arange(3.0))


def test_a_correct_op_passes():
    x = tn.vector("x")
    f = tn.function([x], _Bad("none")(x) + 1, mode=CHECK)
    np.testing.assert_array_equal(f(np.arange(3.0)), [1.0, 3.0, 5.0])


def test_the_py_linker_does_not_check():
    x = tn.vector("x")
    f = tn.function([x], _Bad("writes_input")(x) * 1, mode=tn.Mode(linker="py"))
    f(np.arange(3.0))  # silently wrong: that is what the checking mode is for


def test_protected_inputs_are_compared_after_each_call():
    # An op writing its input behind the graph's back is caught per node; the
    # per-call comparison also covers shared variables that are not updated.
    w = tn.shared(np.arange(3.0), name="w")
    f = tn.function([], _Bad("writes_input")(w) * 1, mode=CHECK)
    with pytest.raises(CheckError):
        f()


def test_in_place_rewrites_pass_the_checks():
    x = tn.matrix("x")
    w = tn.shared(np.ones(3), name="w")
    y = tn.exp(x) * 2 + tn.sin(x) + w
    f = tn.function([In(x, borrow=True, mutable=True)], y.sum(), updates=[(w, w - 0.1 * w)],
                    mode=CHECK)
    assert any(n.op.destroy_map for n in f.fgraph.apply_nodes)
    value = np.ones((2, 3))
    expected = (np.exp(1.0) * 2 + np.sin(1.0) + 1) * 6
    np.testing.assert_allclose(f(value), expected)
    np.testing.assert_allclose(w.get_value(), np.full(3, 0.9))


@pytest.mark.usefixtures("freeing_intermediates")
def test_misuse_of_a_buffer_handed_on_within_the_call_is_caught():
    # The checking linker hands dead buffers on whatever their size: the op
    # that trusts its output cell blindly gets exp's dead buffer and is caught
    # on the first call (no allow_gc=False needed).
    x = tn.vector("x")
    y = _Bad("stale_buffer")(tn.sin(tn.exp(x))) * 2
    f = tn.function([x], y, mode=tn.Mode(linker="check", rewrites="none"))
    plan = f._thunk.plan_for([np.arange(3.0)])
    assert plan.reused_from()
    with pytest.raises(CheckError, match="differs from a fresh run"):
        f(np.arange(3.0))


@pytest.mark.usefixtures("freeing_intermediates")
def test_a_handed_on_buffer_still_in_use_is_caught(monkeypatch):
    import tenure.linkers.check as check

    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], tn.cos(tn.sin(tn.exp(x))) * 2,
                    mode=tn.Mode(linker="check", rewrites="none"))
    assert f._thunk.plan_for([np.arange(3.0)]).reused_from()
    arg = np.arange(3.0)
    # A broken donor check that hands on the caller's array.
    monkeypatch.setattr(check, "take_donor", lambda aside, *rest: arg)
    with pytest.raises(CheckError, match="still uses it"):
        f(arg)
