"""The binary cross-entropy, written out or through ``tn.nnet``: finite loss
and gradient at any logit, and a float32 logistic regression on separable
data that trains to zero errors without NaN, on every linker."""

import warnings

import numpy as np
import pytest
import scipy.special

import tenure as tn

#: logits where the formulas as written overflow: float32's sigmoid rounds to
#: 1 above ~17 and underflows to 0 below ~-104; float64's above ~37 and ~-745
LOGITS = np.array([-800.0, -120.0, -50.0, -20.0, -1.0, 0.0, 1e-3, 20.0, 50.0, 120.0, 800.0])
TARGETS = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 1.0, 0.0])


def reference_loss(x, t):
    """``t * softplus(-x) + (1 - t) * softplus(x)`` in float64."""
    x, t = x.astype(np.float64), t.astype(np.float64)
    return t * np.logaddexp(0, -x) + (1 - t) * np.logaddexp(0, x)


def reference_grad(x, t):
    """``sigmoid(x) - t``, written so that neither term rounds the other away."""
    x, t = x.astype(np.float64), t.astype(np.float64)
    return (1 - t) * scipy.special.expit(x) - t * scipy.special.expit(-x)


def textbook(p, t):
    return -t * tn.log(p) - (1 - t) * tn.log(1 - p)


FORMULAS = {
    "textbook": lambda x, t: textbook(tn.sigmoid(x), t),
    "written_out_sigmoid": lambda x, t: textbook(1 / (1 + tn.exp(-x)), t),
    "log1p": lambda x, t: -t * tn.log(tn.sigmoid(x)) - (1 - t) * tn.log1p(-tn.sigmoid(x)),
    "binary_crossentropy": lambda x, t: tn.nnet.binary_crossentropy(tn.sigmoid(x), t),
    "sigmoid_binary_crossentropy": tn.nnet.sigmoid_binary_crossentropy,
}


def call(f, *args):
    with np.errstate(divide="raise", invalid="raise"), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # no inf * 0 on the way
        return f(*args)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("formula", sorted(FORMULAS))
def test_loss_and_gradient_are_finite_at_any_logit(mode, formula, dtype):
    x, t = tn.vector("x", dtype=dtype), tn.vector("t", dtype=dtype)
    loss = FORMULAS[formula](x, t)
    f = tn.function([x, t], [loss, tn.grad(loss.sum(), x)], mode=mode)
    xv, tv = LOGITS.astype(dtype), TARGETS.astype(dtype)
    got_loss, got_grad = (np.asarray(v) for v in call(f, xv, tv))
    assert got_loss.dtype == got_grad.dtype == np.dtype(dtype)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got_loss, reference_loss(xv, tv), rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(got_grad, reference_grad(xv, tv), rtol=rtol, atol=1e-30)


def test_the_gradient_of_an_intermediate_keeps_the_chain_rule(mode):
    """A gradient asked of the sigmoid itself (or through it, with the sigmoid
    held constant) goes through the formula as written: d log(p)/dp = 1/p."""
    x = tn.vector("x")
    p = tn.sigmoid(x)
    loss = tn.log(p).sum() + tn.log(1 - p).sum()
    xv = np.array([-2.0, 0.5, 3.0])
    pv = 1 / (1 + np.exp(-xv))
    f = tn.function([x], tn.grad(loss, [x, p]), mode=mode)
    gx, gp = call(f, xv)
    np.testing.assert_allclose(gp, 1 / pv - 1 / (1 - pv), rtol=1e-12)
    np.testing.assert_allclose(gx, (1 - pv) - pv, rtol=1e-12)
    held = tn.grad(loss + x.sum(), x, consider_constant=[p])
    np.testing.assert_allclose(call(tn.function([x], held, mode=mode), xv), np.ones(3))


def test_logistic_regression_on_separable_data_trains_without_nan(mode):
    """float32, features of a few units, a large step: the logits pass 17 (where
    float32's ``1 - sigmoid`` rounds to 0) within a few steps.  Written as the
    textbook formula, the loss and every weight become NaN; stabilized, the
    loss keeps falling and every point ends on its side."""
    rng = np.random.default_rng(0)
    n, d = 64, 4
    direction = rng.standard_normal(d)
    features = rng.standard_normal((n, d)) * 4
    labels = (features @ direction > 0).astype("float32")
    features = features.astype("float32")
    w = tn.shared(np.zeros(d, dtype="float32"), name="w")
    b = tn.shared(np.float32(0), name="b")
    x, t = tn.matrix("x", dtype="float32"), tn.vector("t", dtype="float32")
    p = tn.sigmoid(x @ w + b)
    loss = textbook(p, t).mean()
    gw, gb = tn.grad(loss, [w, b])
    step = tn.function([x, t], loss, updates=[(w, w - 5.0 * gw), (b, b - 5.0 * gb)], mode=mode)
    losses = [float(np.asarray(call(step, features, labels))) for _ in range(150)]
    assert np.all(np.isfinite(losses)), losses
    assert np.all(np.isfinite(w.get_value())) and np.isfinite(b.get_value())
    logits = features @ w.get_value() + b.get_value()
    assert np.abs(logits).max() > 17      # the range where the textbook formula fails
    assert np.all((logits > 0) == (labels > 0))
    assert losses[-1] < losses[0] / 10


@pytest.mark.parametrize("fn", [tn.nnet.binary_crossentropy, tn.nnet.sigmoid_binary_crossentropy])
def test_complex_operands_are_refused_by_name(fn):
    with pytest.raises(TypeError, match=rf"{fn.__name__}: .* must be a real tensor"):
        fn(tn.vector("z", dtype="complex128"), tn.vector("t"))
