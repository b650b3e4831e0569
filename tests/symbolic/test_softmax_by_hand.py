"""A softmax or log-softmax written out by hand is the op: its gradient is
the op's (taken by ``tn.grad``, before any rewrite), its value the op's
(the ``softmax_by_hand`` rewrite), so it is as stable, as fast and as
frugal as ``tn.softmax`` -- on every linker."""

import warnings

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.nnet import LogSoftmax, Softmax

#: (build, the op's own spelling)
FORMS = {
    "exp_over_sum": (lambda x: tn.exp(x) / tn.exp(x).sum(axis=1, keepdims=True),
                     lambda x: tn.softmax(x, axis=1)),
    "max_taken_out": (lambda x: tn.exp(x - x.max(axis=1, keepdims=True))
                      / tn.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True),
                      lambda x: tn.softmax(x, axis=1)),
    "exp_of_log_softmax": (lambda x: tn.exp(x - tn.log(tn.exp(x).sum(axis=1, keepdims=True))),
                           lambda x: tn.softmax(x, axis=1)),
    "log_softmax": (lambda x: x - tn.log(tn.exp(x).sum(axis=1, keepdims=True)),
                    lambda x: tn.log_softmax(x, axis=1)),
}


def quiet(f, *args):
    """The call, failing on an overflow or an invalid value on the way (an
    exp that underflows to 0 is the op's own business)."""
    with np.errstate(over="raise", invalid="raise"), warnings.catch_warnings():
        warnings.filterwarnings("error", "overflow|invalid", RuntimeWarning)
        return f(*args)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_gradient_is_the_ops_and_finite_where_exp_overflows(mode, form):
    build, builtin = FORMS[form]
    x, w = tn.matrix("x", dtype="float32"), tn.matrix("w", dtype="float32")
    by_hand = tn.function([x, w], tn.grad(tn.sum(build(x) * w), x), mode=mode)
    reference = tn.function([x, w], tn.grad(tn.sum(builtin(x) * w), x), mode=mode)
    xv = np.array([[0.0, 100.0, -100.0, 3.0], [1.0, 2.0, 90.0, -0.5]], dtype="float32")
    wv = np.array([[1.0, -2.0, 0.5, 3.0], [0.25, 1.0, -1.0, 2.0]], dtype="float32")
    got = quiet(by_hand, xv, wv)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, quiet(reference, xv, wv), rtol=1e-6, atol=1e-7)


def test_tn_grad_itself_takes_the_ops_gradient():
    """Without any rewrite the gradient graph already holds the op (whose
    gradient it is), not the chain rule through exp, sum and division."""
    x, w = tn.matrix("x"), tn.matrix("w")
    for form, (build, _) in FORMS.items():
        g = tn.grad(tn.sum(build(x) * w), x)
        f = tn.function([x, w], g, mode=tn.Mode(rewrites="none"))
        ops = {type(n.op) for n in f.fgraph.toposort()}
        assert ops & {Softmax, LogSoftmax}, form


def test_the_hand_written_gradient_is_compiled_as_the_builtin_one():
    """After the rewrites the two training steps are the same graph: the same
    plan, the same predicted peak (no full-size temporaries of their own)."""
    x, w = tn.matrix("x", dtype="float32"), tn.matrix("w", dtype="float32")
    build, builtin = FORMS["exp_of_log_softmax"]
    by_hand = tn.function([x, w], tn.grad(tn.sum(build(x) * w), x), mode=tn.Mode(linker="c"))
    reference = tn.function([x, w], tn.grad(tn.sum(builtin(x) * w), x), mode=tn.Mode(linker="c"))
    args = [np.ones((64, 128), "float32"), np.ones((64, 128), "float32")]
    assert (by_hand.memory_report(*args).predicted_peak
            == reference.memory_report(*args).predicted_peak)
    assert (sorted(type(n.op).__name__ for n in by_hand.fgraph.toposort())
            == sorted(type(n.op).__name__ for n in reference.fgraph.toposort()))


def test_an_intermediate_asked_for_keeps_the_chain_rule(mode):
    """A gradient asked of the sums themselves goes through the formula as
    written: the sums get theirs, and x the softmax's all the same."""
    x = tn.matrix("x")
    e = tn.exp(x)
    s = e.sum(axis=1, keepdims=True)
    loss = tn.sum((e / s) * np.array([[1.0, 2.0, 3.0]]))
    gx, gs = tn.grad(loss, [x, s])
    f = tn.function([x], [gx, gs], mode=mode)
    xv = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
    ev = np.exp(xv)
    sv = ev.sum(axis=1, keepdims=True)
    weights = np.array([[1.0, 2.0, 3.0]])
    yv = ev / sv
    got_gx, got_gs = f(xv)
    np.testing.assert_allclose(got_gs, -(ev * weights).sum(axis=1, keepdims=True) / sv ** 2,
                               rtol=1e-12)
    np.testing.assert_allclose(got_gx, yv * (weights - (weights * yv).sum(axis=1, keepdims=True)),
                               rtol=1e-12)
    assert not any(isinstance(n.op, Softmax) for n in f.fgraph.toposort())
