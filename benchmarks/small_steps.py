"""Small steps, where the per-call overhead is most of the time (issue 33):

- ``overhead_20``: a chain of 20 elementwise ops on 10 float64 (the
  ``overhead`` workload is one op);
- ``tiny_mlp``: one SGD step of a 2-32-2 ReLU MLP under a squared error
  (``mlp_train``'s graph, batch 16);
- ``demo_step``: the training step of ``python -m tenure.demo`` (a 2-64-64-3
  ReLU MLP, softmax cross-entropy on integer labels, SGD at 0.1, float64),
  batch 64.

PyTensor's C mode runs each, and ``overhead``, also with ``trust_input=True``
(the variant "trust_input", PyTensor's alone: it skips the checks of the
arguments that tenure always makes).  Each is checked against a float64
NumPy reference like every workload (see :mod:`workloads`).  This module adds
them to :data:`workloads.WORKLOADS` (which imports it).
"""

from __future__ import annotations

import numpy as np

from workloads import (TRUST_INPUT, WORKLOADS, Built, MlpTrain, Overhead, _Clock, _jax,
                       _jax_sgd, _np, _pt_relu, _pytensor_sgd, _tenure_mode, _torch_sgd,
                       pytensor_mode, symbolic_mlp)

#: the chain of ``overhead_20``: ten times ``tanh`` then ``+ 0.5``
_CHAIN = 10


class Overhead20(Overhead):
    """``overhead`` (its data and builders) with a chain of 20 ops."""
    name = "overhead_20"
    title = "20 elementwise ops (tanh, +0.5) on 10 float64"

    @staticmethod
    def formula(lib, x):
        for _ in range(_CHAIN):
            x = lib.tanh(x) + 0.5
        return x


class TinyMlp(MlpTrain):
    """``mlp_train`` at 2-32-2, batch 16: its data, reference and builders."""
    name = "tiny_mlp"
    title = "ReLU MLP 2-32-2 MSE + grads + SGD step, batch 16, float32"
    variants = (None, TRUST_INPUT)
    sizes = {"full": {"batch": 16, "layers": (2, 32, 2)},
             "quick": {"batch": 16, "layers": (2, 32, 2)}}

    @staticmethod
    def pytensor(d, mode_variant, variant=None):
        import pytensor.tensor as pt
        return _pytensor_sgd(d, mode_variant, lambda x, t, params: pt.mean(
            (symbolic_mlp(_pt_relu, x, params) - t) ** 2), trust_input=variant == TRUST_INPUT)


#: the demo's learning rate and layer sizes (tenure/demo.py)
DEMO_LR = 0.1
DEMO_LAYERS = (2, 64, 64, 3)


class DemoStep:
    name = "demo_step"
    title = "the demo's training step: MLP 2-64-64-3, cross-entropy, batch 64, float64"
    gradient = True
    variants = (None, TRUST_INPUT)
    sizes = {"full": {"batch": 64}, "quick": {"batch": 64}}

    @staticmethod
    def data(batch, rng):
        params = []
        for n_in, n_out in zip(DEMO_LAYERS[:-1], DEMO_LAYERS[1:]):
            params += [rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in),
                       np.zeros(n_out)]
        return {"x": rng.standard_normal((batch, DEMO_LAYERS[0])),
                "y": rng.integers(0, DEMO_LAYERS[-1], batch).astype(np.int32),
                "params": params}

    @staticmethod
    def reference(d):
        """[loss, *parameters after one SGD step], by hand-written backprop."""
        params, x, y = d["params"], d["x"], d["y"]
        hs, h = [], x
        for i in range(len(params) // 2):
            a = h @ params[2 * i] + params[2 * i + 1]
            hs.append((h, a))
            h = np.maximum(a, 0) if i < len(params) // 2 - 1 else a
        z = h - h.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        rows = np.arange(len(y))
        loss = -log_p[rows, y].mean()
        g = np.exp(log_p)
        g[rows, y] -= 1
        g /= len(y)
        grads = []
        for i in reversed(range(len(params) // 2)):
            h_in, a = hs[i]
            if i < len(params) // 2 - 1:
                g = g * (a > 0)
            grads = [h_in.T @ g, g.sum(axis=0)] + grads
            g = g @ params[2 * i].T
        return [np.float64(loss)] + [p - DEMO_LR * gp for p, gp in zip(params, grads)]

    @staticmethod
    def tenure(d, linker):
        """As ``tenure.demo.build_model`` builds it."""
        import tenure as tn
        clock = _Clock()
        with clock:
            params = [tn.shared(p.copy()) for p in d["params"]]
            x, y = tn.matrix("X"), tn.vector("y", dtype="int32")
            logits = symbolic_mlp(tn.relu, x, params)
            loss = -tn.log_softmax(logits, axis=1)[tn.arange(y.shape[0]), y].mean()
            grads = tn.grad(loss, params)
            f = tn.function([tn.In(x, borrow=True), tn.In(y, borrow=True)], loss,
                            updates=[(p, p - DEMO_LR * g) for p, g in zip(params, grads)],
                            mode=_tenure_mode(linker))
        xv, yv = d["x"], d["y"]
        return Built(lambda: f(xv, yv),
                     lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params],
                     clock.s)

    @staticmethod
    def pytensor(d, mode_variant, variant=None):
        import pytensor
        import pytensor.tensor as pt
        from pytensor.tensor.special import log_softmax
        clock = _Clock()
        with clock:
            params = [pytensor.shared(p.copy()) for p in d["params"]]
            x, y = pt.matrix("X", dtype="float64"), pt.vector("y", dtype="int32")
            logits = symbolic_mlp(_pt_relu, x, params)
            loss = -log_softmax(logits, axis=1)[pt.arange(y.shape[0]), y].mean()
            grads = pytensor.grad(loss, params)
            f = pytensor.function([pytensor.In(x, borrow=True), pytensor.In(y, borrow=True)],
                                  loss,
                                  updates=[(p, p - DEMO_LR * g) for p, g in zip(params, grads)],
                                  mode=pytensor_mode(mode_variant))
            f.trust_input = variant == TRUST_INPUT
        xv, yv = d["x"], d["y"]
        return Built(lambda: f(xv, yv),
                     lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params],
                     clock.s)

    @staticmethod
    def torch(d):
        import torch
        import torch.nn.functional as F
        params = [torch.from_numpy(p.copy()).requires_grad_() for p in d["params"]]
        x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"].astype(np.int64))
        run, observe = _torch_sgd(
            lambda x, y, *ps: F.cross_entropy(symbolic_mlp(torch.relu, x, ps), y), params, None,
            lr=DEMO_LR)
        return Built(lambda: run(x, y), observe)

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp

        def loss_fn(params, x, y):
            log_p = jax.nn.log_softmax(symbolic_mlp(jax.nn.relu, x, params), axis=1)
            return -jnp.take_along_axis(log_p, y[:, None], axis=1).mean()

        args = [jnp.asarray(d["x"]), jnp.asarray(d["y"])]
        run, observe, compile_s = _jax_sgd(loss_fn, d["params"], args, lr=DEMO_LR)
        return Built(lambda: run(*args), observe, compile_s)


SMALL_STEPS = (Overhead20, TinyMlp, DemoStep)
WORKLOADS.update({w.name: w for w in SMALL_STEPS})
