"""tn.gradient.jacobian and hessian (issue 35, item 3) on every linker:
against closed forms and finite differences, their shapes
(``expression.shape + wrt.shape``), and their errors."""

import numpy as np
import pytest

import tenure as tn


def _finite_jacobian(fn, x, eps=1e-6):
    """d fn(x) / d x by central differences: shape fn(x).shape + x.shape."""
    out = np.asarray(fn(x))
    jac = np.zeros(out.shape + x.shape)
    for index in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        jac[(...,) + index] = (np.asarray(fn(x + step)) - np.asarray(fn(x - step))) / (2 * eps)
    return jac


def test_jacobian_of_a_vector_and_a_matrix_expression(mode):
    x, a = tn.vector("x"), tn.matrix("a")
    y = tn.tanh(a @ x)                        # (2,)
    z = tn.outer(x, x) * tn.sum(a)            # (3, 3)
    jx, ja = tn.gradient.jacobian(y, [x, a])
    jz = tn.gradient.jacobian(z, x)
    f = tn.function([x, a], [jx, ja, jz], mode=mode)
    xv, av = np.array([0.1, -0.2, 0.3]), np.arange(6.0).reshape(2, 3) / 6
    got_x, got_a, got_z = f(xv, av)
    d = 1 - np.tanh(av @ xv) ** 2
    np.testing.assert_allclose(got_x, d[:, None] * av, rtol=1e-12)
    want_a = np.zeros((2, 2, 3))
    for i in range(2):
        want_a[i, i] = d[i] * xv
    np.testing.assert_allclose(got_a, want_a, rtol=1e-12, atol=1e-15)
    assert got_z.shape == (3, 3, 3)
    np.testing.assert_allclose(got_z, _finite_jacobian(lambda v: np.outer(v, v) * av.sum(), xv),
                               rtol=1e-6, atol=1e-9)


def test_hessian_against_its_closed_form_and_finite_differences(mode):
    x, w = tn.vector("x"), tn.matrix("w")
    cost = tn.sum(x ** 3) * tn.sum(x)
    h = tn.gradient.hessian(cost, x)
    hw = tn.gradient.hessian(tn.sum(tn.exp(w) * w), [w])
    f = tn.function([x, w], [h, *hw], mode=mode)
    xv, wv = np.array([0.5, -1.0, 2.0]), np.array([[0.1, 0.2], [0.3, -0.4]])
    got, got_w = f(xv, wv)
    want = np.diag(6 * xv * xv.sum()) + 3 * xv[:, None] ** 2 + 3 * xv[None, :] ** 2
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got_w.shape == (2, 2, 2, 2)
    gradient = lambda v: np.exp(v) * v + np.exp(v)  # noqa: E731
    np.testing.assert_allclose(got_w, _finite_jacobian(gradient, wv), rtol=1e-6)


def test_the_jacobian_of_a_scalar_is_its_gradient_and_of_nothing_is_empty(mode):
    x = tn.vector("x")
    g = tn.gradient.jacobian(tn.sum(x ** 2), x)
    empty = tn.gradient.jacobian(x[:0] * 2, x)
    f = tn.function([x], [g, empty], mode=mode)
    got, got_empty = f(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(got, [2.0, 4.0])
    assert got_empty.shape == (0, 2)


def test_errors():
    x, y = tn.vector("x"), tn.vector("y")
    with pytest.raises(ValueError, match=r"hessian: cost must be a scalar \(0-d\)"):
        tn.gradient.hessian(x * 2, x)
    with pytest.raises(TypeError, match="jacobian: wrt must be a variable or a list"):
        tn.gradient.jacobian(x * 2, "x")
    with pytest.raises(tn.DisconnectedInputError):
        tn.gradient.jacobian(x * 2, y)
    zeros = tn.gradient.jacobian(x * 2, y, disconnected_inputs="zero")
    f = tn.function([x, y], zeros)
    np.testing.assert_array_equal(f(np.ones(2), np.ones(3)), np.zeros((2, 3)))
