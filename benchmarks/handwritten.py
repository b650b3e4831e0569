"""Workloads written from primitive ops only (issue 37): formulas users write
themselves instead of calling a built-in op.

- ``softmax_grad_by_hand``: the gradient of ``sum(softmax(x) * w)`` with the
  softmax written out, ``exp(x - log(sum(exp(x), 1)))`` (its built-in twin is
  ``softmax_grad``);
- ``layer_norm_by_hand``: ``(x - mean) / sqrt(var + eps) * g + b`` over rows,
  forward only (NumPy runs it too);
- ``layer_norm_grad_by_hand``: the gradients of ``sum(layer_norm(x) * w)``
  with respect to ``x``, ``g`` and ``b``;
- ``gelu_mlp_by_hand``: one SGD step of a GELU MLP block (the tanh form
  written out), ``gelu(x @ W1 + b1) @ W2 + b2`` under a squared error.

Each is float32 and checked against a float64 NumPy reference like every
workload (see :mod:`workloads`); PyTorch runs eager and through
``torch.compile`` (the variant "torch.compile").  This module adds them to
:data:`workloads.WORKLOADS` (which imports it).
"""

from __future__ import annotations

import importlib

import numpy as np

from workloads import (LR, TORCH_COMPILE, WORKLOADS, Built, SoftmaxGrad, _Clock, _jax, _jax_built,
                       _jax_sgd, _np, _pytensor_sgd, _tenure_mode, _tenure_sgd, _torch_sgd,
                       _torch_wrap, pytensor_mode)

#: rows and columns of the row-wise workloads (``--quick``: smaller)
_ROWS = {"full": {"rows": 2048, "cols": 4096}, "quick": {"rows": 512, "cols": 1024}}
EPS = 1e-5


class SoftmaxGradByHand(SoftmaxGrad):
    """``softmax_grad`` (its data, reference and builders) with the softmax
    written out, ``exp(x - log(sum(exp(x), 1)))``, in every system."""
    name = "softmax_grad_by_hand"
    title = "grad of sum(exp(x-log(sum(exp(x),1)))*w) wrt x, float32"
    variants = (None, TORCH_COMPILE)

    @staticmethod
    def softmax(system: str, x):
        if system == "torch":
            import torch
            return torch.exp(x - torch.log(torch.sum(torch.exp(x), dim=1, keepdim=True)))
        lib = importlib.import_module({"tenure": "tenure", "pytensor": "pytensor.tensor",
                                       "jax": "jax.numpy"}[system])
        return lib.exp(x - lib.log(lib.sum(lib.exp(x), axis=1, keepdims=True)))


# ============================================================================
# layer norm over rows, written out


def _layer_norm(lib, x, g, b, mean, sqrt, const=float):
    """``(x - mean) / sqrt(var + eps) * g + b`` over axis 1, the variance as
    the mean of squared deviations (``mean(v, axis)`` keeps dims).
    ``const``: how a number is written (PyTensor takes ``np.float32``: its
    Python floats would make the float32 graph float64)."""
    mu = mean(x, 1)
    var = mean((x - mu) ** 2, 1)
    return (x - mu) / sqrt(var + const(EPS)) * g + b


def _np_mean(x, axis):
    return x.mean(axis=axis, keepdims=True)


def _torch_mean(x, axis):
    return x.mean(dim=axis, keepdim=True)


def _layer_norm64(d):
    """``(y, xhat, inv)`` in float64: the output, the normalised rows and
    1 / sqrt(var + eps) per row."""
    x = d["x"].astype(np.float64)
    mu = x.mean(axis=1, keepdims=True)
    inv = 1 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + EPS)
    xhat = (x - mu) * inv
    return xhat * d["g"].astype(np.float64) + d["b"].astype(np.float64), xhat, inv


class _LayerNormRows:
    """What the two layer norm workloads share: their sizes, data and variants."""
    variants = (None, TORCH_COMPILE)
    sizes = _ROWS

    @staticmethod
    def data(rows, cols, rng):
        return {"x": rng.standard_normal((rows, cols), dtype=np.float32),
                "g": rng.standard_normal(cols, dtype=np.float32),
                "b": rng.standard_normal(cols, dtype=np.float32),
                "w": rng.standard_normal((rows, cols), dtype=np.float32)}


class LayerNormByHand(_LayerNormRows):
    name = "layer_norm_by_hand"
    title = "(x-mean)/sqrt(var+eps)*g+b over rows, written out, float32"
    gradient = False

    @staticmethod
    def reference(d):
        return [_layer_norm64(d)[0]]

    @staticmethod
    def numpy(d):
        x, g, b = d["x"], d["g"], d["b"]
        return Built(lambda: _layer_norm(np, x, g, b, _np_mean, np.sqrt), lambda r: [_np(r)])

    @staticmethod
    def tenure(d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            x = tn.matrix("x", dtype="float32")
            g, b = tn.vector("g", dtype="float32"), tn.vector("b", dtype="float32")
            y = _layer_norm(tn, x, g, b, _np_mean, tn.sqrt)
            f = tn.function([tn.In(x, borrow=True), tn.In(g, borrow=True), tn.In(b, borrow=True)],
                            tn.Out(y, borrow=True), mode=_tenure_mode(linker))
        x_, g_, b_ = d["x"], d["g"], d["b"]
        return Built(lambda: f(x_, g_, b_), lambda r: [_np(r)], clock.s)

    @staticmethod
    def pytensor(d, variant):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            x = pt.matrix("x", dtype="float32")
            g, b = pt.vector("g", dtype="float32"), pt.vector("b", dtype="float32")
            y = _layer_norm(pt, x, g, b, _np_mean, pt.sqrt, np.float32)
            f = pytensor.function([pytensor.In(x, borrow=True), g, b],
                                  pytensor.Out(y, borrow=True), mode=pytensor_mode(variant))
        x_, g_, b_ = d["x"], d["g"], d["b"]
        return Built(lambda: f(x_, g_, b_), lambda r: [_np(r)], clock.s)

    @staticmethod
    def torch(d, variant=None):
        import torch
        x, g, b = (torch.from_numpy(d[k]) for k in "xgb")
        forward = _torch_wrap(variant)(
            lambda x, g, b: _layer_norm(torch, x, g, b, _torch_mean, torch.sqrt))

        def step():
            with torch.inference_mode():
                return forward(x, g, b)
        return Built(step, lambda r: [_np(r)])

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp
        forward = jax.jit(lambda x, g, b: _layer_norm(jnp, x, g, b, _np_mean, jnp.sqrt))
        return _jax_built(forward, [jnp.asarray(d[k]) for k in "xgb"])


class LayerNormGradByHand(_LayerNormRows):
    name = "layer_norm_grad_by_hand"
    title = "grads of sum(layer_norm(x)*w) wrt x, g, b, written out, float32"
    gradient = True

    @staticmethod
    def reference(d):
        """The gradients by hand: with ``dy = w * g``, ``dx = inv * (dy -
        mean(dy) - xhat * mean(dy * xhat))`` per row."""
        _, xhat, inv = _layer_norm64(d)
        w = d["w"].astype(np.float64)
        dy = w * d["g"].astype(np.float64)
        dx = inv * (dy - dy.mean(axis=1, keepdims=True)
                    - xhat * (dy * xhat).mean(axis=1, keepdims=True))
        return [dx, (w * xhat).sum(axis=0), w.sum(axis=0)]

    @staticmethod
    def tenure(d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            x, w = tn.matrix("x", dtype="float32"), tn.matrix("w", dtype="float32")
            g, b = tn.vector("g", dtype="float32"), tn.vector("b", dtype="float32")
            y = _layer_norm(tn, x, g, b, _np_mean, tn.sqrt)
            gx, gg, gb = tn.grad(tn.sum(y * w), [x, g, b])
            f = tn.function([tn.In(v, borrow=True) for v in (x, g, b, w)],
                            [tn.Out(gx, borrow=True), gg, gb], mode=_tenure_mode(linker))
        args = [d[k] for k in "xgbw"]
        return Built(lambda: f(*args), lambda r: [_np(v) for v in r], clock.s)

    @staticmethod
    def pytensor(d, variant):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            x, w = pt.matrix("x", dtype="float32"), pt.matrix("w", dtype="float32")
            g, b = pt.vector("g", dtype="float32"), pt.vector("b", dtype="float32")
            y = _layer_norm(pt, x, g, b, _np_mean, pt.sqrt, np.float32)
            grads = pytensor.grad(pt.sum(y * w), [x, g, b])
            f = pytensor.function([pytensor.In(v, borrow=True) for v in (x, g, b, w)],
                                  grads, mode=pytensor_mode(variant))
        args = [d[k] for k in "xgbw"]
        return Built(lambda: f(*args), lambda r: [_np(v) for v in r], clock.s)

    @staticmethod
    def torch(d, variant=None):
        import torch
        w = torch.from_numpy(d["w"])
        x, g, b = (torch.from_numpy(d[k]).requires_grad_() for k in "xgb")
        loss = _torch_wrap(variant)(lambda x, g, b, w: torch.sum(
            _layer_norm(torch, x, g, b, _torch_mean, torch.sqrt) * w))

        def step():
            return torch.autograd.grad(loss(x, g, b, w), (x, g, b))
        return Built(step, lambda r: [_np(v) for v in r])

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp
        grads = jax.grad(lambda x, g, b, w: jnp.sum(
            _layer_norm(jnp, x, g, b, _np_mean, jnp.sqrt) * w), argnums=(0, 1, 2))
        return _jax_built(jax.jit(grads), [jnp.asarray(d[k]) for k in "xgbw"],
                          observe=lambda r: [_np(v) for v in r])


# ============================================================================
# gelu_mlp_by_hand: one SGD step of gelu(x @ W1 + b1) @ W2 + b2, MSE


_GELU_C = float(np.sqrt(2 / np.pi))


def _gelu(lib_tanh, h, const=float):
    """GELU's tanh form, written out (``const``: see :func:`_layer_norm`)."""
    return const(0.5) * h * (1 + lib_tanh(const(_GELU_C) * (h + const(0.044715) * h ** 3)))


def _block(lib_tanh, x, params, const=float):
    w1, b1, w2, b2 = params
    return _gelu(lib_tanh, x @ w1 + b1, const) @ w2 + b2


def _mse(lib_mean, y, t):
    return lib_mean((y - t) ** 2)


class GeluMlpByHand:
    name = "gelu_mlp_by_hand"
    title = "GELU (tanh form) MLP block, MSE + grads + SGD step, float32"
    gradient = True
    variants = (None, TORCH_COMPILE)
    sizes = {"full": {"batch": 512, "d": 512, "hidden": 2048},
             "quick": {"batch": 128, "d": 128, "hidden": 512}}

    @staticmethod
    def data(batch, d, hidden, rng):
        f32 = np.float32
        params = [rng.standard_normal((d, hidden), dtype=f32) * f32(1 / np.sqrt(d)),
                  rng.standard_normal(hidden, dtype=f32) * f32(0.1),
                  rng.standard_normal((hidden, d), dtype=f32) * f32(1 / np.sqrt(hidden)),
                  rng.standard_normal(d, dtype=f32) * f32(0.1)]
        return {"x": rng.standard_normal((batch, d), dtype=f32),
                "t": rng.standard_normal((batch, d), dtype=f32), "params": params}

    @staticmethod
    def reference(d):
        """[loss, *parameters after one SGD step] by hand in float64."""
        x, t = d["x"].astype(np.float64), d["t"].astype(np.float64)
        w1, b1, w2, b2 = (p.astype(np.float64) for p in d["params"])
        h = x @ w1 + b1
        u = _GELU_C * (h + 0.044715 * h ** 3)
        th = np.tanh(u)
        a = 0.5 * h * (1 + th)
        y = a @ w2 + b2
        diff = y - t
        gy = 2 * diff / diff.size
        ga = gy @ w2.T
        dgelu = 0.5 * (1 + th) + 0.5 * h * (1 - th ** 2) * _GELU_C * (1 + 3 * 0.044715 * h ** 2)
        gh = ga * dgelu
        grads = [x.T @ gh, gh.sum(axis=0), a.T @ gy, gy.sum(axis=0)]
        return [np.mean(diff ** 2)] + [p - LR * gp for p, gp in zip((w1, b1, w2, b2), grads)]

    @staticmethod
    def tenure(d, linker):
        import tenure as tn
        return _tenure_sgd(d, linker, 2, lambda x, t, params: _mse(
            tn.mean, _block(tn.tanh, x, params), t))

    @staticmethod
    def pytensor(d, variant):
        import pytensor.tensor as pt
        return _pytensor_sgd(d, variant, lambda x, t, params: _mse(
            pt.mean, _block(pt.tanh, x, params, np.float32), t))

    @staticmethod
    def torch(d, variant=None):
        import torch
        params = [torch.from_numpy(p.copy()).requires_grad_() for p in d["params"]]
        run, observe = _torch_sgd(lambda x, t, *ps: _mse(torch.mean, _block(torch.tanh, x, ps), t),
                                  params, variant)
        x, t = torch.from_numpy(d["x"]), torch.from_numpy(d["t"])
        return Built(lambda: run(x, t), observe)

    @staticmethod
    def jax(d):
        _jax()
        import jax.numpy as jnp
        run, observe, compile_s = _jax_sgd(
            lambda params, x, t: _mse(jnp.mean, _block(jnp.tanh, x, params), t),
            d["params"], [jnp.asarray(d["x"]), jnp.asarray(d["t"])])
        x, t = jnp.asarray(d["x"]), jnp.asarray(d["t"])
        return Built(lambda: run(x, t), observe, compile_s)


HANDWRITTEN = (SoftmaxGradByHand, LayerNormByHand, LayerNormGradByHand, GeluMlpByHand)
WORKLOADS.update({w.name: w for w in HANDWRITTEN})
