"""The workloads, each written once per system.

A workload has sizes (full and ``--quick``), a data generator, a NumPy
reference (computed in float64 and used to check every system's first call),
and one small builder per system.  A builder takes the data and returns a
:class:`Built`: ``step()`` runs one call, ``observe(result)`` turns that
call's result into the arrays compared with the reference, and ``compile_s``
is the time from symbolic expression to callable (graph, gradients and
compilation; 0 for the eager systems).

Importing this module imports NumPy only; each builder imports its own library,
so a worker process loads just the system it measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Built:
    step: Callable[[], object]
    observe: Callable[[object], list]
    compile_s: float = 0.0
    notes: list[str] = field(default_factory=list)


class _Clock:
    """``with clock: ...`` adds the block's duration to ``clock.s``."""

    def __init__(self):
        self.s = 0.0

    def __enter__(self):
        self._t = time.perf_counter()

    def __exit__(self, *exc):
        self.s += time.perf_counter() - self._t


#: the variant of PyTensor's C mode with ``f.trust_input = True`` (no checks
#: of the arguments)
TRUST_INPUT = "trust_input"


def _np(value) -> np.ndarray:
    """A result as a NumPy array the caller owns (a borrowed buffer is copied)."""
    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)   # (a JAX array converts too)


def _tenure_mode(linker, **options):
    import tenure as tn
    return tn.Mode(linker=linker, **options)


def pytensor_mode(variant):
    """PyTensor's default mode, or its C mode (the C VM with all FAST_RUN rewrites)."""
    if variant == "default":
        return None
    from pytensor.compile.mode import Mode
    return Mode(linker="cvm", optimizer="fast_run")


def _jax():
    """JAX with float64 enabled (the float64 workloads stay float64, as for
    every other system; float32 data stays float32)."""
    import jax
    jax.config.update("jax_enable_x64", True)
    return jax


def _jax_built(jitted, args, observe=None) -> Built:
    """A ``jax.jit`` function over ``args`` (device arrays, made once): the
    compile time is lowering + XLA compilation, and each step waits for its
    result (JAX dispatches asynchronously: without waiting, the time would be
    the dispatch's)."""
    clock = _Clock()
    with clock:
        compiled = jitted.lower(*args).compile()

    def step():
        out = compiled(*args)
        return _jax_ready(out)
    return Built(step, observe or (lambda r: [_np(r)]), clock.s)


def _jax_ready(out):
    import jax
    return jax.block_until_ready(out)


# ============================================================================
# overhead: (exp(x) * 2 + 1).sum() on a 10-element float64 vector


class Overhead:
    """One small formula on 10 float64 (:meth:`formula`, written once for
    every system: ``lib`` is the system's array module); subclasses change
    the formula (``small_steps.Overhead20``)."""
    name = "overhead"
    title = "(exp(x)*2+1).sum(), 10 float64"
    gradient = False
    variants = (None, TRUST_INPUT)
    sizes = {"full": {"n": 10}, "quick": {"n": 10}}

    @staticmethod
    def formula(lib, x):
        return (lib.exp(x) * 2 + 1).sum()

    @staticmethod
    def data(n, rng):
        return {"x": rng.standard_normal(n)}

    @classmethod
    def reference(cls, d):
        return [cls.formula(np, d["x"])]

    @classmethod
    def numpy(cls, d):
        x = d["x"]
        return Built(lambda: cls.formula(np, x), lambda r: [_np(r)])

    @classmethod
    def tenure(cls, d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            x = tn.vector("x")
            f = tn.function([tn.In(x, borrow=True)], tn.Out(cls.formula(tn, x), borrow=True),
                            mode=_tenure_mode(linker))
        xv = d["x"]
        return Built(lambda: f(xv), lambda r: [_np(r)], clock.s)

    @classmethod
    def pytensor(cls, d, mode_variant, variant=None):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            x = pt.vector("x", dtype="float64")
            f = pytensor.function([pytensor.In(x, borrow=True)],
                                  pytensor.Out(cls.formula(pt, x), borrow=True),
                                  mode=pytensor_mode(mode_variant))
            f.trust_input = variant == TRUST_INPUT
        xv = d["x"]
        return Built(lambda: f(xv), lambda r: [_np(r)], clock.s)

    @classmethod
    def torch(cls, d):
        import torch
        x = torch.from_numpy(d["x"])

        def step():
            with torch.inference_mode():
                return cls.formula(torch, x)
        return Built(step, lambda r: [_np(r)])

    @classmethod
    def jax(cls, d):
        jax = _jax()
        import jax.numpy as jnp
        return _jax_built(jax.jit(lambda x: cls.formula(jnp, x)), [jnp.asarray(d["x"])])


# ============================================================================
# elemwise: exp(x) * 2 + sin(z) * x, x and z of 4,000,000 float64


class Elemwise:
    name = "elemwise"
    title = "exp(x)*2+sin(z)*x, float64"
    gradient = False
    sizes = {"full": {"n": 4_000_000}, "quick": {"n": 400_000}}

    @staticmethod
    def data(n, rng):
        return {"x": rng.standard_normal(n), "z": rng.standard_normal(n)}

    @staticmethod
    def reference(d):
        x, z = d["x"], d["z"]
        return [np.exp(x) * 2 + np.sin(z) * x]

    @staticmethod
    def numpy(d):
        x, z = d["x"], d["z"]
        return Built(lambda: np.exp(x) * 2 + np.sin(z) * x, lambda r: [_np(r)])

    @staticmethod
    def tenure(d, linker, borrow_out=True):
        import tenure as tn
        clock = _Clock()
        with clock:
            x, z = tn.vector("x"), tn.vector("z")
            f = tn.function([tn.In(x, borrow=True), tn.In(z, borrow=True)],
                            tn.Out(tn.exp(x) * 2 + tn.sin(z) * x, borrow=borrow_out),
                            mode=_tenure_mode(linker))
        xv, zv = d["x"], d["z"]
        return Built(lambda: f(xv, zv), lambda r: [_np(r)], clock.s)

    @staticmethod
    def pytensor(d, variant, borrow_out=True):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            x, z = pt.vector("x", dtype="float64"), pt.vector("z", dtype="float64")
            f = pytensor.function([pytensor.In(x, borrow=True), pytensor.In(z, borrow=True)],
                                  pytensor.Out(pt.exp(x) * 2 + pt.sin(z) * x, borrow=borrow_out),
                                  mode=pytensor_mode(variant))
        xv, zv = d["x"], d["z"]
        return Built(lambda: f(xv, zv), lambda r: [_np(r)], clock.s)

    @staticmethod
    def torch(d):
        import torch
        x, z = torch.from_numpy(d["x"]), torch.from_numpy(d["z"])

        def step():
            with torch.inference_mode():
                return torch.exp(x) * 2 + torch.sin(z) * x
        return Built(step, lambda r: [_np(r)])

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp
        return _jax_built(jax.jit(lambda x, z: jnp.exp(x) * 2 + jnp.sin(z) * x),
                          [jnp.asarray(d["x"]), jnp.asarray(d["z"])])


# ============================================================================
# softmax_infer: exp(x - log(sum(exp(x), axis=1, keepdims=True))), 2048x4096 float32


def _softmax64(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class SoftmaxInfer:
    name = "softmax_infer"
    title = "exp(x-log(sum(exp(x),1))), float32"
    gradient = False
    sizes = {"full": {"rows": 2048, "cols": 4096}, "quick": {"rows": 512, "cols": 1024}}

    @staticmethod
    def data(rows, cols, rng):
        return {"x": rng.standard_normal((rows, cols), dtype=np.float32)}

    @staticmethod
    def reference(d):
        return [_softmax64(d["x"])]

    @staticmethod
    def numpy(d):
        x = d["x"]
        return Built(lambda: np.exp(x - np.log(np.sum(np.exp(x), axis=1, keepdims=True))),
                     lambda r: [_np(r)])

    @staticmethod
    def tenure(d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            x = tn.matrix("x", dtype="float32")
            y = tn.exp(x - tn.log(tn.sum(tn.exp(x), axis=1, keepdims=True)))
            f = tn.function([tn.In(x, borrow=True)], tn.Out(y, borrow=True),
                            mode=_tenure_mode(linker))
        xv = d["x"]
        return Built(lambda: f(xv), lambda r: [_np(r)], clock.s)

    @staticmethod
    def pytensor(d, variant):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            x = pt.matrix("x", dtype="float32")
            y = pt.exp(x - pt.log(pt.sum(pt.exp(x), axis=1, keepdims=True)))
            f = pytensor.function([pytensor.In(x, borrow=True)], pytensor.Out(y, borrow=True),
                                  mode=pytensor_mode(variant))
        xv = d["x"]
        return Built(lambda: f(xv), lambda r: [_np(r)], clock.s)

    @staticmethod
    def torch(d):
        import torch
        x = torch.from_numpy(d["x"])

        def step():
            with torch.inference_mode():
                return torch.exp(x - torch.log(torch.sum(torch.exp(x), dim=1, keepdim=True)))
        return Built(step, lambda r: [_np(r)])

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp
        return _jax_built(
            jax.jit(lambda x: jnp.exp(x - jnp.log(jnp.sum(jnp.exp(x), axis=1, keepdims=True)))),
            [jnp.asarray(d["x"])])


# ============================================================================
# softmax_grad: d/dx sum(softmax(x) * w), same sizes


class SoftmaxGrad:
    """The gradient of ``sum(softmax(x) * w)``, the softmax each system's
    own (:meth:`softmax`: the hook ``softmax_grad_by_hand`` overrides)."""
    name = "softmax_grad"
    title = "grad of sum(softmax(x)*w) wrt x, float32"
    gradient = True
    sizes = SoftmaxInfer.sizes

    @staticmethod
    def data(rows, cols, rng):
        return {"x": rng.standard_normal((rows, cols), dtype=np.float32),
                "w": rng.standard_normal((rows, cols), dtype=np.float32)}

    @staticmethod
    def reference(d):
        s = _softmax64(d["x"])
        w = d["w"].astype(np.float64)
        return [s * (w - (s * w).sum(axis=1, keepdims=True))]

    @staticmethod
    def softmax(system: str, x):
        """The softmax over axis 1 of ``x``, a variable or array of ``system``
        (tenure, pytensor, torch or jax)."""
        if system == "tenure":
            import tenure as tn
            return tn.softmax(x, axis=1)
        if system == "pytensor":
            from pytensor.tensor.special import softmax
            return softmax(x, axis=1)
        if system == "torch":
            import torch
            return torch.softmax(x, dim=1)
        import jax
        return jax.nn.softmax(x, axis=1)

    @classmethod
    def tenure(cls, d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            x = tn.matrix("x", dtype="float32")
            w = tn.matrix("w", dtype="float32")
            g = tn.grad(tn.sum(cls.softmax("tenure", x) * w), x)
            f = tn.function([tn.In(x, borrow=True), tn.In(w, borrow=True)], tn.Out(g, borrow=True),
                            mode=_tenure_mode(linker))
        xv, wv = d["x"], d["w"]
        return Built(lambda: f(xv, wv), lambda r: [_np(r)], clock.s)

    @classmethod
    def pytensor(cls, d, variant):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            x = pt.matrix("x", dtype="float32")
            w = pt.matrix("w", dtype="float32")
            g = pytensor.grad(pt.sum(cls.softmax("pytensor", x) * w), x)
            f = pytensor.function([pytensor.In(x, borrow=True), pytensor.In(w, borrow=True)],
                                  pytensor.Out(g, borrow=True), mode=pytensor_mode(variant))
        xv, wv = d["x"], d["w"]
        return Built(lambda: f(xv, wv), lambda r: [_np(r)], clock.s)

    @classmethod
    def torch(cls, d, variant=None):
        import torch
        w = torch.from_numpy(d["w"])
        x = torch.from_numpy(d["x"]).requires_grad_()
        loss = _torch_wrap(variant)(lambda x, w: torch.sum(cls.softmax("torch", x) * w))

        def step():
            (g,) = torch.autograd.grad(loss(x, w), x)
            return g
        return Built(step, lambda r: [_np(r)])

    @classmethod
    def jax(cls, d):
        jax = _jax()
        import jax.numpy as jnp
        grad = jax.grad(lambda x, w: jnp.sum(cls.softmax("jax", x) * w))
        return _jax_built(jax.jit(grad), [jnp.asarray(d["x"]), jnp.asarray(d["w"])])


# ============================================================================
# mlp_infer / mlp_train: ReLU MLP 1024 -> 2048 -> 2048 -> 2048 -> 1024, float32


def _mlp_data(batch, layers, rng):
    params = []
    for n_in, n_out in zip(layers[:-1], layers[1:]):
        params.append(rng.standard_normal((n_in, n_out), dtype=np.float32)
                      * np.float32(np.sqrt(2.0 / n_in)))
        params.append(rng.standard_normal(n_out, dtype=np.float32) * np.float32(0.1))
    return {"x": rng.standard_normal((batch, layers[0]), dtype=np.float32),
            "t": rng.standard_normal((batch, layers[-1]), dtype=np.float32),
            "params": params}


def _mlp_forward64(x, params):
    """The forward pass in float64; returns the output and each layer's input and
    pre-activation (for the reference backward pass)."""
    h, saved = x.astype(np.float64), []
    n = len(params) // 2
    for i in range(n):
        W, b = (p.astype(np.float64) for p in params[2 * i:2 * i + 2])
        a = h @ W + b
        saved.append((h, a))
        h = np.maximum(a, 0) if i < n - 1 else a
    return h, saved


def _pt_relu(h):
    import pytensor.tensor as pt
    return pt.maximum(h, 0)  # pytensor.tensor has no relu


def symbolic_mlp(relu, x, params):
    h = x
    n = len(params) // 2
    for i in range(n):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < n - 1:
            h = relu(h)
    return h


_MLP_SIZES = {"full": {"batch": 1024, "layers": (1024, 2048, 2048, 2048, 1024)},
              "quick": {"batch": 256, "layers": (256, 512, 512, 512, 256)}}
LR = 0.01


class MlpInfer:
    name = "mlp_infer"
    title = "ReLU MLP forward, float32"
    gradient = False
    sizes = _MLP_SIZES

    @staticmethod
    def data(batch, layers, rng):
        return _mlp_data(batch, layers, rng)

    @staticmethod
    def reference(d):
        return [_mlp_forward64(d["x"], d["params"])[0]]

    @staticmethod
    def numpy(d):
        x, params = d["x"], d["params"]
        return Built(lambda: symbolic_mlp(lambda h: np.maximum(h, 0), x, params),
                     lambda r: [_np(r)])

    @staticmethod
    def tenure(d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            params = [tn.shared(p, borrow=True) for p in d["params"]]
            x = tn.matrix("x", dtype="float32")
            f = tn.function([tn.In(x, borrow=True)],
                            tn.Out(symbolic_mlp(tn.relu, x, params), borrow=True),
                            mode=_tenure_mode(linker))
        xv = d["x"]
        return Built(lambda: f(xv), lambda r: [_np(r)], clock.s)

    @staticmethod
    def pytensor(d, variant):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            params = [pytensor.shared(p, borrow=True) for p in d["params"]]
            x = pt.matrix("x", dtype="float32")
            f = pytensor.function([pytensor.In(x, borrow=True)],
                                  pytensor.Out(symbolic_mlp(_pt_relu, x, params), borrow=True),
                                  mode=pytensor_mode(variant))
        xv = d["x"]
        return Built(lambda: f(xv), lambda r: [_np(r)], clock.s)

    @staticmethod
    def torch(d):
        import torch
        x = torch.from_numpy(d["x"])
        params = [torch.from_numpy(p) for p in d["params"]]

        def step():
            with torch.inference_mode():
                return symbolic_mlp(torch.relu, x, params)
        return Built(step, lambda r: [_np(r)])

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp
        forward = jax.jit(lambda x, params: symbolic_mlp(jax.nn.relu, x, params))
        return _jax_built(forward, [jnp.asarray(d["x"]), [jnp.asarray(p) for p in d["params"]]])


class MlpTrain:
    name = "mlp_train"
    title = "ReLU MLP MSE + grads + SGD step, float32"
    gradient = True
    sizes = _MLP_SIZES

    @staticmethod
    def data(batch, layers, rng):
        return _mlp_data(batch, layers, rng)

    @staticmethod
    def reference(d):
        """[loss, *parameters after one SGD step], by hand-written backprop in float64."""
        params = d["params"]
        out, saved = _mlp_forward64(d["x"], params)
        diff = out - d["t"].astype(np.float64)
        loss = np.mean(diff ** 2)
        g = 2 * diff / diff.size
        grads = []
        for i in reversed(range(len(params) // 2)):
            h, a = saved[i]
            if i < len(params) // 2 - 1:
                g = g * (a > 0)
            grads = [h.T @ g, g.sum(axis=0)] + grads
            g = g @ params[2 * i].astype(np.float64).T
        return [np.float64(loss)] + [p - LR * gp for p, gp in zip(params, grads)]

    @staticmethod
    def tenure(d, linker, **mode_options):
        import tenure as tn
        return _tenure_sgd(d, linker, 2, lambda x, t, params: tn.mean(
            (symbolic_mlp(tn.relu, x, params) - t) ** 2), **mode_options)

    @staticmethod
    def pytensor(d, variant):
        import pytensor.tensor as pt
        return _pytensor_sgd(d, variant, lambda x, t, params: pt.mean(
            (symbolic_mlp(_pt_relu, x, params) - t) ** 2))

    @staticmethod
    def torch(d):
        import torch
        x, t = torch.from_numpy(d["x"]), torch.from_numpy(d["t"])
        params = [torch.from_numpy(p).requires_grad_() for p in d["params"]]
        opt = torch.optim.SGD(params, lr=LR)

        def step():
            opt.zero_grad()
            loss = torch.mean((symbolic_mlp(torch.relu, x, params) - t) ** 2)
            loss.backward()
            opt.step()
            return loss.detach()
        return Built(step, lambda r: [_np(r)] + [_np(p) for p in params])

    @staticmethod
    def jax(d):
        """The SGD step as one ``jit`` function that donates the parameters
        (``donate_argnums``: JAX's form of borrowing, so the new parameters
        may take the old ones' buffers)."""
        jax = _jax()
        import jax.numpy as jnp

        def loss_fn(params, x, t):
            return jnp.mean((symbolic_mlp(jax.nn.relu, x, params) - t) ** 2)

        def train_step(params, x, t):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, t)
            return loss, [p - jnp.float32(LR) * g for p, g in zip(params, grads)]

        x, t = jnp.asarray(d["x"]), jnp.asarray(d["t"])
        state = {"params": [jnp.asarray(p) for p in d["params"]]}
        clock = _Clock()
        with clock:
            compiled = jax.jit(train_step, donate_argnums=(0,)).lower(
                state["params"], x, t).compile()

        def step():
            loss, state["params"] = _jax_ready(compiled(state["params"], x, t))
            return loss
        return Built(step, lambda r: [_np(r)] + [_np(p) for p in state["params"]], clock.s)


# ============================================================================
# mlp_train_budget / mlp_train_budget_8: mlp_train under activation-memory budgets

#: the budgets measured; peers keep every activation, so they run at 1.0 only
BUDGETS = ("budget 1.0", "budget 0.5", "budget 0.25")


def budget_of(variant: str) -> float:
    """``"budget 0.5"`` -> 0.5."""
    return float(variant.split()[-1])


class _UnderBudgets:
    """A workload (``base``) whose variants are activation-memory budgets:
    tenure compiles it with ``Mode(activation_memory_budget=b)``; the peers,
    which keep every activation, run the base workload whatever the variant."""

    base: type

    @classmethod
    def tenure(cls, d, linker, variant):
        return cls.base.tenure(d, linker, activation_memory_budget=budget_of(variant))

    @classmethod
    def pytensor(cls, d, mode_variant, variant):
        return cls.base.pytensor(d, mode_variant)

    @classmethod
    def torch(cls, d, variant):
        return cls.base.torch(d)

    @classmethod
    def jax(cls, d, variant):
        return cls.base.jax(d)


class MlpTrainBudget(_UnderBudgets, MlpTrain):
    """``mlp_train`` compiled with ``Mode(activation_memory_budget=...)``: the
    saved activations are cut to a fraction, the rest recomputed in the
    backward pass.  The targets (issue 7): at 0.5, peak extra memory at most
    0.6x and time at most 1.35x the run at 1.0."""

    name = "mlp_train_budget"
    title = "mlp_train under an activation-memory budget"
    variants = BUDGETS
    base = MlpTrain


class MlpTrainBudget8(MlpTrainBudget):
    """The same with 8 layers, where saved activations dominate the peak."""

    name = "mlp_train_budget_8"
    title = "8-layer mlp_train under an activation-memory budget"
    #: float32 rounding grows with depth: PyTorch's parameter steps differ from
    #: the float64 reference by 1.3e-3 of their largest magnitude here
    float32_tolerance = 3e-3
    sizes = {"full": {"batch": 2048, "layers": (1024,) + (1024,) * 7 + (512,)},
             "quick": {"batch": 512, "layers": (256,) + (256,) * 7 + (128,)}}


# ============================================================================
# borrow_steady_state: the elemwise function with Out(borrow=True) vs Out(borrow=False)


class BorrowSteadyState:
    name = "borrow_steady_state"
    title = "elemwise with Out(borrow=True|False), float64"
    gradient = False
    variants = ("borrow=True", "borrow=False")
    sizes = {"full": {"n": 1_000_000}, "quick": {"n": 200_000}}
    data = staticmethod(Elemwise.data)
    reference = staticmethod(Elemwise.reference)

    @staticmethod
    def tenure(d, linker, variant):
        return Elemwise.tenure(d, linker, borrow_out=variant == "borrow=True")

    @staticmethod
    def pytensor(d, mode_variant, variant):
        return Elemwise.pytensor(d, mode_variant, borrow_out=variant == "borrow=True")


# ============================================================================
# rnn_train: one SGD step of a tanh RNN through its loop (scan), float32
#
# h_t = tanh(x_t @ Wx + h_{t-1} @ Wh + b), h_0 = 0; a linear readout of every
# h_t, y_t = h_t @ Wy + by; loss = mean((y - target)^2) over all steps.
# tenure: tn.scan; PyTensor: pytensor.scan (C and Numba modes); JAX:
# lax.scan under jit; PyTorch: a Python loop over the steps, eager and
# through torch.compile (the variant "torch.compile").

#: the peers' loops compiled as a whole: torch.compile (PyTorch only)
TORCH_COMPILE = "torch.compile"


def _torch_wrap(variant):
    """``torch.compile`` for the variant "torch.compile" (its default mode:
    Inductor; the backward is compiled with the forward by AOTAutograd), the
    function itself for eager (variant None)."""
    import torch
    return torch.compile if variant == TORCH_COMPILE else (lambda fn: fn)


def _torch_sgd(loss_fn, params, variant, lr: float = LR):
    """``(run, observe)``: ``run(*args)`` takes one SGD step (rate ``lr``) on
    ``loss_fn(*args, *params)`` (eager, or through torch.compile for the
    variant "torch.compile": its compilation happens in the first call, so it
    shows in ``first_call_s``, not ``compile_s``), the gradients by
    ``torch.autograd.grad`` (no .grad tensors kept between calls), the update
    in place; it returns the loss."""
    import torch
    loss_fn = _torch_wrap(variant)(loss_fn)

    def run(*args):
        loss = loss_fn(*args, *params)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(g, alpha=lr)
        return loss.detach()
    return run, lambda r: [_np(r)] + [_np(p) for p in params]


def _tenure_sgd(d, linker, x_ndim: int, loss_fn, **mode_options) -> Built:
    """One SGD step of tenure as a function of borrowed ``x`` (float32, of
    ``x_ndim`` axes) and ``t`` (a float32 matrix), the parameters shared
    variables over ``d["params"]`` (borrowed), updated through ``updates``;
    ``loss_fn(x, t, params)`` is the loss; its compile time is measured."""
    import tenure as tn
    clock = _Clock()
    with clock:
        params = [tn.shared(p, borrow=True) for p in d["params"]]
        x = tn.tensor("x", dtype="float32", shape=(None,) * x_ndim)
        t = tn.matrix("t", dtype="float32")
        loss = loss_fn(x, t, params)
        grads = tn.grad(loss, params)
        f = tn.function([tn.In(x, borrow=True), tn.In(t, borrow=True)], loss,
                        updates=[(p, p - LR * g) for p, g in zip(params, grads)],
                        mode=_tenure_mode(linker, **mode_options))
    xv, tv = d["x"], d["t"]
    return Built(lambda: f(xv, tv),
                 lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params], clock.s)


def _pytensor_sgd(d, variant, loss_fn, trust_input: bool = False) -> Built:
    """One SGD step of PyTensor (``variant``: its mode), as :func:`_tenure_sgd`
    builds tenure's: borrowed float32 matrices ``x`` and ``t``, the
    parameters shared variables over ``d["params"]``; ``trust_input``: the
    function's own switch."""
    import pytensor
    import pytensor.tensor as pt
    clock = _Clock()
    with clock:
        params = [pytensor.shared(p, borrow=True) for p in d["params"]]
        x, t = pt.matrix("x", dtype="float32"), pt.matrix("t", dtype="float32")
        loss = loss_fn(x, t, params)
        grads = pytensor.grad(loss, params)
        lr = np.float32(LR)  # a Python float would upcast float32 to float64 in PyTensor
        f = pytensor.function([pytensor.In(x, borrow=True), pytensor.In(t, borrow=True)],
                              loss, updates=[(p, p - lr * g) for p, g in zip(params, grads)],
                              mode=pytensor_mode(variant))
        f.trust_input = trust_input
    xv, tv = d["x"], d["t"]
    return Built(lambda: f(xv, tv),
                 lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params], clock.s)


def _jax_sgd(loss_fn, params, args, rng_key=None, lr=None):
    """``(run, observe, compile_s)``: ``run(*args)`` takes one SGD step on
    ``loss_fn(params, *args)`` as one ``jit`` function (compiled for arrays
    like ``args``) that donates the parameters, as ``mlp_train``'s; with
    ``rng_key`` it is ``loss_fn(params, key, *args)`` and the step threads the
    key (split once per call, the next key donated and returned).  ``lr``:
    the rate (default float32 ``LR``; a Python float keeps the parameters'
    dtype, as JAX's weak scalars do)."""
    jax = _jax()
    import jax.numpy as jnp
    lr = jnp.float32(LR) if lr is None else lr

    if rng_key is None:
        def train_step(params, *args):
            loss, grads = jax.value_and_grad(loss_fn)(params, *args)
            return loss, [p - lr * g for p, g in zip(params, grads)]
        state = [[jnp.asarray(p) for p in params]]
    else:
        def train_step(params, key, *args):
            key, sub = jax.random.split(key)
            loss, grads = jax.value_and_grad(loss_fn)(params, sub, *args)
            return loss, [p - lr * g for p, g in zip(params, grads)], key
        state = [[jnp.asarray(p) for p in params], rng_key]
    clock = _Clock()
    with clock:
        compiled = jax.jit(train_step, donate_argnums=tuple(range(len(state)))
                           ).lower(*state, *args).compile()

    def run(*args):
        out = _jax_ready(compiled(*state, *args))
        state[:] = out[1:]
        return out[0]
    return run, lambda r: [_np(r)] + [_np(p) for p in state[0]], clock.s


def _rnn_data(steps, batch, n_in, hidden, n_out, rng):
    f32 = np.float32
    params = [rng.standard_normal((n_in, hidden), dtype=f32) * f32(1 / np.sqrt(n_in)),
              rng.standard_normal((hidden, hidden), dtype=f32) * f32(1 / np.sqrt(hidden)),
              rng.standard_normal(hidden, dtype=f32) * f32(0.1),
              rng.standard_normal((hidden, n_out), dtype=f32) * f32(1 / np.sqrt(hidden)),
              rng.standard_normal(n_out, dtype=f32) * f32(0.1)]
    return {"x": rng.standard_normal((steps, batch, n_in), dtype=f32),
            "t": rng.standard_normal((steps, batch, n_out), dtype=f32),
            "h0": np.zeros((batch, hidden), dtype=f32),
            "params": params}


def _rnn_reference64(d):
    """[loss, *parameters after one SGD step]: the forward loop and
    backpropagation through time written out in float64."""
    x, t, h0 = (d[k].astype(np.float64) for k in ("x", "t", "h0"))
    Wx, Wh, b, Wy, by = (p.astype(np.float64) for p in d["params"])
    hs, h = [], h0
    for x_t in x:
        h = np.tanh(x_t @ Wx + h @ Wh + b)
        hs.append(h)
    hs = np.stack(hs)                                   # (steps, batch, hidden)
    diff = hs @ Wy + by - t
    loss = np.mean(diff ** 2)
    g_y = 2 * diff / diff.size
    g_Wy = hs.reshape(-1, hs.shape[-1]).T @ g_y.reshape(-1, g_y.shape[-1])
    g_by = g_y.sum(axis=(0, 1))
    g_hs = g_y @ Wy.T
    g_Wx, g_Wh, g_b = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    g_h = np.zeros_like(h0)
    for k in reversed(range(len(x))):
        g_a = (g_h + g_hs[k]) * (1 - hs[k] ** 2)        # through tanh
        g_Wx += x[k].T @ g_a
        g_Wh += (hs[k - 1] if k > 0 else h0).T @ g_a
        g_b += g_a.sum(axis=0)
        g_h = g_a @ Wh.T                                # to h_{k-1}
    grads = [g_Wx, g_Wh, g_b, g_Wy, g_by]
    return [np.float64(loss)] + [p - LR * g for p, g in zip(d["params"], grads)]


class RnnTrain:
    """One SGD step (lr 0.01) of a tanh RNN, the gradient through all its steps.

    Checked like ``mlp_train``: the loss and each parameter's step against a
    float64 NumPy forward loop and hand-written backpropagation through time.
    PyTorch's eager loop and torch.compile are two rows (torch.compile in the
    variant "torch.compile", measured for PyTorch only; its compilation is in
    its first call)."""

    name = "rnn_train"
    title = "tanh RNN, MSE of a readout of every step + BPTT + SGD, float32"
    gradient = True
    variants = (None, TORCH_COMPILE)
    sizes = {"full": {"steps": 100, "batch": 64, "n_in": 32, "hidden": 256, "n_out": 32},
             "quick": {"steps": 10, "batch": 8, "n_in": 8, "hidden": 16, "n_out": 8}}

    @staticmethod
    def data(steps, batch, n_in, hidden, n_out, rng):
        return _rnn_data(steps, batch, n_in, hidden, n_out, rng)

    reference = staticmethod(_rnn_reference64)

    @staticmethod
    def tenure(d, linker, **mode_options):
        import tenure as tn
        clock = _Clock()
        with clock:
            params = [tn.shared(p, borrow=True) for p in d["params"]]
            Wx, Wh, b, Wy, by = params
            x = tn.tensor3("x", dtype="float32")
            t = tn.tensor3("t", dtype="float32")
            h0 = tn.matrix("h0", dtype="float32")
            hs, _ = tn.scan(lambda x_t, h: tn.tanh(x_t @ Wx + h @ Wh + b),
                            sequences=x, outputs_info=h0)
            loss = tn.mean((hs @ Wy + by - t) ** 2)
            grads = tn.grad(loss, params)
            f = tn.function([tn.In(v, borrow=True) for v in (x, t, h0)], loss,
                            updates=[(p, p - LR * g) for p, g in zip(params, grads)],
                            mode=_tenure_mode(linker, **mode_options))
        xv, tv, h0v = d["x"], d["t"], d["h0"]
        return Built(lambda: f(xv, tv, h0v),
                     lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params],
                     clock.s)

    @staticmethod
    def pytensor(d, variant):
        import pytensor
        import pytensor.tensor as pt
        clock = _Clock()
        with clock:
            params = [pytensor.shared(p, borrow=True) for p in d["params"]]
            Wx, Wh, b, Wy, by = params
            x = pt.tensor3("x", dtype="float32")
            t = pt.tensor3("t", dtype="float32")
            h0 = pt.matrix("h0", dtype="float32")
            hs, _ = pytensor.scan(lambda x_t, h: pt.tanh(x_t @ Wx + h @ Wh + b),
                                  sequences=x, outputs_info=h0)
            loss = pt.mean((hs @ Wy + by - t) ** 2)
            grads = pytensor.grad(loss, params)
            lr = np.float32(LR)  # a Python float would upcast float32 to float64 in PyTensor
            f = pytensor.function([pytensor.In(v, borrow=True) for v in (x, t, h0)], loss,
                                  updates=[(p, p - lr * g) for p, g in zip(params, grads)],
                                  mode=pytensor_mode(variant))
        xv, tv, h0v = d["x"], d["t"], d["h0"]
        return Built(lambda: f(xv, tv, h0v),
                     lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params],
                     clock.s)

    @staticmethod
    def torch(d, variant=None):
        import torch

        def loss_fn(x, t, h0, Wx, Wh, b, Wy, by):
            h, hs = h0, []
            for x_t in x:  # the Python loop (torch.compile unrolls it)
                h = torch.tanh(x_t @ Wx + h @ Wh + b)
                hs.append(h)
            return torch.mean((torch.stack(hs) @ Wy + by - t) ** 2)

        args = [torch.from_numpy(d[k]) for k in ("x", "t", "h0")]
        params = [torch.from_numpy(p).requires_grad_() for p in d["params"]]
        run, observe = _torch_sgd(loss_fn, params, variant)
        return Built(lambda: run(*args), observe)

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp

        def loss_fn(params, x, t, h0):
            Wx, Wh, b, Wy, by = params

            def cell(h, x_t):
                h = jnp.tanh(x_t @ Wx + h @ Wh + b)
                return h, h
            _, hs = jax.lax.scan(cell, h0, x)
            return jnp.mean((hs @ Wy + by - t) ** 2)
        args = [jnp.asarray(d[k]) for k in ("x", "t", "h0")]
        run, observe, compile_s = _jax_sgd(loss_fn, d["params"], args)
        return Built(lambda: run(*args), observe, compile_s)


class RnnTrainBudget(_UnderBudgets, RnnTrain):
    """``rnn_train`` under activation-memory budgets: the loop keeps
    checkpoints instead of its states where they exceed the budget.  The
    readout reads every state, so they stay alive until its backward pass:
    checkpoints shorten how long, not whether.  Issue 34's target (at 0.3:
    at most 0.4x the memory at 1.4x the time) is for this step."""

    name = "rnn_train_budget"
    title = "rnn_train under an activation-memory budget"
    variants = ("budget 1.0", "budget 0.3")
    base = RnnTrain


# ============================================================================
# dropout_mlp_train: mlp_train with (inverted) dropout after every hidden ReLU

#: the dropout probability of the measured calls (the first call runs at 0)
DROPOUT_P = 0.5


def symbolic_dropout_mlp(relu, dropout, x, params):
    """``symbolic_mlp`` with ``dropout(h)`` after each hidden activation."""
    h = x
    n = len(params) // 2
    for i in range(n):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < n - 1:
            h = dropout(relu(h))
    return h


#: how far the first loss at DROPOUT_P may lie from NumPy's estimate (relative)
DROPOUT_LOSS_BAND = 0.25


def _dropout_loss_estimate(d, p, samples=2, seed=0) -> float:
    """The loss at dropout probability ``p`` and the initial parameters,
    averaged over ``samples`` NumPy masks (float32): what a step at ``p`` should
    report whatever its random numbers."""
    rng = np.random.default_rng(seed)
    keep = np.float32(1 - p)

    def dropout(h):
        return h * (rng.random(h.shape, dtype=np.float32) < keep) / keep
    return float(np.mean([np.mean((symbolic_dropout_mlp(lambda h: np.maximum(h, 0), dropout,
                                                        d["x"], d["params"]) - d["t"]) ** 2)
                          for _ in range(samples)]))


def _dropout_steps(run, d, name):
    """``step()`` for ``run(p)``, one SGD step at dropout probability ``p``
    (a float32 0-d array, an input of the compiled function): the first call,
    the one checked against the reference, at p = 0; every later call at
    DROPOUT_P.  The second call (a warm-up call) checks its loss against
    NumPy's estimate at DROPOUT_P (``_dropout_loss_estimate``, within
    DROPOUT_LOSS_BAND); the estimate is made from ``d``'s parameters as they
    are now, before any step."""
    calls = [0]
    p0, p = np.float32(0.0), np.float32(DROPOUT_P)
    start = {"x": d["x"], "t": d["t"], "params": [q.copy() for q in d["params"]]}

    def step():
        calls[0] += 1
        if calls[0] == 1:
            return run(p0)
        out = run(p)
        if calls[0] == 2:
            loss, expected = float(_np(out)), _dropout_loss_estimate(start, DROPOUT_P)
            if not abs(loss - expected) <= DROPOUT_LOSS_BAND * expected:
                raise AssertionError(f"{name}: loss {loss:.4g} at dropout p={DROPOUT_P}, "
                                     f"NumPy's estimate {expected:.4g} (allowed: "
                                     f"±{DROPOUT_LOSS_BAND:.0%})")
            del start["params"]
        return out
    return step


class DropoutMlpTrain:
    """``mlp_train`` with inverted dropout after each hidden ReLU (``h * mask /
    (1 - p)``, ``mask`` Bernoulli(1 - p) drawn afresh each call: tenure and
    PyTensor through a ``RandomStream``, JAX through a PRNG key threaded
    through the jitted step, PyTorch through ``nn.functional.dropout``).

    The check: every system draws different random numbers, so no reference
    can predict a step taken with p > 0.  ``p`` is therefore an input of every
    system's step (a float32 scalar, as a dropout schedule would pass it): the
    first call -- the one the worker checks -- runs at p = 0, where the masks
    are all ones and the step must equal ``mlp_train``'s float64 reference (the
    whole graph runs, random draws and masking included, so this checks the
    wiring and the gradient, not the drop rate).  Every later call, warm-up
    and measured runs, is at p = DROPOUT_P, and the first of them checks the
    rate loosely: its loss must lie within DROPOUT_LOSS_BAND (25%) of a NumPy
    estimate from two other masks at the initial parameters (at either size
    the estimate is about 17.7, the systems' losses 2-7% below it after the
    first step; p = 0.25 or 0.75 would give about 6 or 131, p = 0 about 3.1).
    Under p = 0 PyTorch's dropout returns its input without drawing; the
    others draw.
    """

    name = "dropout_mlp_train"
    title = f"ReLU MLP with dropout p={DROPOUT_P} + grads + SGD step, float32"
    gradient = True
    variants = (None, TORCH_COMPILE)
    sizes = _MLP_SIZES

    @staticmethod
    def data(batch, layers, rng):
        return _mlp_data(batch, layers, rng)

    reference = staticmethod(MlpTrain.reference)

    @staticmethod
    def tenure(d, linker):
        import tenure as tn
        clock = _Clock()
        with clock:
            params = [tn.shared(p, borrow=True) for p in d["params"]]
            x = tn.matrix("x", dtype="float32")
            t = tn.matrix("t", dtype="float32")
            p = tn.scalar("p", dtype="float32")
            keep = 1 - p
            srng = tn.random.RandomStream(42)

            def dropout(h):
                return h * srng.bernoulli(keep, size=h.shape, dtype="float32") / keep
            loss = tn.mean((symbolic_dropout_mlp(tn.relu, dropout, x, params) - t) ** 2)
            grads = tn.grad(loss, params)
            f = tn.function([tn.In(x, borrow=True), tn.In(t, borrow=True), p], loss,
                            updates=[(q, q - LR * g) for q, g in zip(params, grads)],
                            mode=_tenure_mode(linker))
        xv, tv = d["x"], d["t"]
        return Built(_dropout_steps(lambda pv: f(xv, tv, pv), d, DropoutMlpTrain.name),
                     lambda r: [_np(r)] + [_np(q.get_value(borrow=True)) for q in params],
                     clock.s)

    @staticmethod
    def pytensor(d, variant):
        import pytensor
        import pytensor.tensor as pt
        from pytensor.tensor.random.utils import RandomStream
        clock = _Clock()
        with clock:
            params = [pytensor.shared(p, borrow=True) for p in d["params"]]
            x = pt.matrix("x", dtype="float32")
            t = pt.matrix("t", dtype="float32")
            p = pt.scalar("p", dtype="float32")
            keep = 1 - p
            srng = RandomStream(42)

            def dropout(h):
                return h * pt.cast(srng.bernoulli(keep, size=h.shape), "float32") / keep
            loss = pt.mean((symbolic_dropout_mlp(_pt_relu, dropout, x, params) - t) ** 2)
            grads = pytensor.grad(loss, params)
            lr = np.float32(LR)
            f = pytensor.function([pytensor.In(x, borrow=True), pytensor.In(t, borrow=True), p],
                                  loss, updates=[(q, q - lr * g) for q, g in zip(params, grads)],
                                  mode=pytensor_mode(variant))
        xv, tv = d["x"], d["t"]
        return Built(_dropout_steps(lambda pv: f(xv, tv, pv), d, DropoutMlpTrain.name),
                     lambda r: [_np(r)] + [_np(q.get_value(borrow=True)) for q in params],
                     clock.s)

    @staticmethod
    def torch(d, variant=None):
        import torch
        import torch.nn.functional as F
        torch.manual_seed(42)

        def loss_fn(x, t, p, *params):
            dropout = lambda h: F.dropout(h, p=p, training=True)  # noqa: E731
            return torch.mean((symbolic_dropout_mlp(torch.relu, dropout, x, params) - t) ** 2)

        x, t = torch.from_numpy(d["x"]), torch.from_numpy(d["t"])
        params = [torch.from_numpy(q).requires_grad_() for q in d["params"]]
        run, observe = _torch_sgd(loss_fn, params, variant)
        # (p as a Python float: torch.compile specializes on it and compiles
        # once more for DROPOUT_P, in the warm-up)
        return Built(_dropout_steps(lambda pv: run(x, t, float(pv)), d,
                                    DropoutMlpTrain.name),
                     observe)

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp

        def loss_fn(params, key, x, t, p):
            keep = 1 - p
            keys = iter(jax.random.split(key, len(params) // 2 - 1))

            def dropout(h):
                mask = jax.random.bernoulli(next(keys), keep, h.shape).astype(h.dtype)
                return h * mask / keep
            return jnp.mean((symbolic_dropout_mlp(jax.nn.relu, dropout, x, params) - t) ** 2)

        x, t = jnp.asarray(d["x"]), jnp.asarray(d["t"])
        ps = {np.float32(0.0): jnp.float32(0.0), np.float32(DROPOUT_P): jnp.float32(DROPOUT_P)}
        run, observe, compile_s = _jax_sgd(loss_fn, d["params"], [x, t, ps[np.float32(0.0)]],
                                           rng_key=jax.random.key(42))
        return Built(_dropout_steps(lambda pv: run(x, t, ps[pv]), d, DropoutMlpTrain.name),
                     observe, compile_s)


# ============================================================================
# lenet_train: a LeNet-style convnet's SGD step, float32
#
# x (batch, 1, 28, 28) -> conv 6 5x5 + b -> relu -> max pool 2x2 -> conv 16
# 5x5 + b -> relu -> max pool 2x2 -> flatten (256) -> dense 120 + b -> relu
# -> dense 10 + b -> softmax cross-entropy against one-hot targets (mean over
# the batch).  tenure: tn.nnet.conv2d / pool_2d; PyTorch: F.conv2d /
# F.max_pool2d (eager, and the variant "torch.compile"); JAX: lax.conv and
# reduce_window under jit.  PyTensor 3 has no conv2d or pool_2d.


def _lenet_data(batch, rng):
    f32 = np.float32

    def layer(*shape):
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape, dtype=f32) * f32(np.sqrt(2 / fan_in))
    params = [layer(6, 1, 5, 5), np.zeros(6, f32), layer(16, 6, 5, 5), np.zeros(16, f32),
              layer(120, 256).T.copy(), np.zeros(120, f32), layer(10, 120).T.copy(),
              np.zeros(10, f32)]
    labels = rng.integers(0, 10, size=batch)
    return {"x": rng.standard_normal((batch, 1, 28, 28), dtype=f32), "params": params,
            "t": np.eye(10, dtype=f32)[labels]}


def _conv64(x, w):
    """Valid cross-correlation of NCHW ``x`` with OIHW ``w``, and the windows."""
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return np.einsum("nchwij,fcij->nfhw", windows, w, optimize=True), windows


def _pool64(h):
    """2x2 max pool, and the mask routing its gradient (split among ties)."""
    n, c, height, width = h.shape
    blocks = h.reshape(n, c, height // 2, 2, width // 2, 2)
    out = blocks.max(axis=(3, 5))
    mask = blocks == out[:, :, :, None, :, None]
    return out, mask / mask.sum(axis=(3, 5), keepdims=True)


def _unpool64(g, mask):
    n, c, height, width = g.shape
    return (mask * g[:, :, :, None, :, None]).reshape(n, c, 2 * height, 2 * width)


def _conv_input_grad64(g, w):
    """The gradient of a valid cross-correlation for its input: the full
    correlation of ``g`` with the flipped filters."""
    k = w.shape[-1]
    padded = np.pad(g, ((0, 0), (0, 0), (k - 1, k - 1), (k - 1, k - 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    return np.einsum("nfhwij,fcij->nchw", windows, w[:, :, ::-1, ::-1], optimize=True)


def symbolic_lenet(conv, pool, relu, log_softmax, reshape, x, params):
    """The forward pass, written once for every system's functions."""
    w1, b1, w2, b2, w3, b3, w4, b4 = params
    h = pool(relu(conv(x, w1) + reshape(b1, (1, -1, 1, 1))))
    h = pool(relu(conv(h, w2) + reshape(b2, (1, -1, 1, 1))))
    h = relu(reshape(h, (h.shape[0], -1)) @ w3 + b3)
    return log_softmax(h @ w4 + b4)


class LenetTrain:
    """One SGD step (lr 0.01) of a LeNet-style convnet (see above), checked
    like ``mlp_train``: the loss and each parameter's step against a float64
    NumPy forward pass and hand-written backpropagation (a max pool's
    gradient split among equal maxima; after a ReLU those are zeros, whose
    gradient is zero in every system)."""

    name = "lenet_train"
    title = "LeNet convnet, softmax cross-entropy + grads + SGD step, float32"
    gradient = True
    variants = (None, TORCH_COMPILE)
    sizes = {"full": {"batch": 128}, "quick": {"batch": 16}}

    @staticmethod
    def data(batch, rng):
        return _lenet_data(batch, rng)

    @staticmethod
    def reference(d):
        w1, b1, w2, b2, w3, b3, w4, b4 = [p.astype(np.float64) for p in d["params"]]
        x, t = d["x"].astype(np.float64), d["t"].astype(np.float64)
        c1, win1 = _conv64(x, w1)
        a1 = c1 + b1[None, :, None, None]
        p1, m1 = _pool64(np.maximum(a1, 0))
        c2, win2 = _conv64(p1, w2)
        a2 = c2 + b2[None, :, None, None]
        p2, m2 = _pool64(np.maximum(a2, 0))
        flat = p2.reshape(len(x), -1)
        a3 = flat @ w3 + b3
        h3 = np.maximum(a3, 0)
        z = h3 @ w4 + b4
        z = z - z.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -np.mean(np.sum(t * log_p, axis=1))
        gz = (np.exp(log_p) - t) / len(x)
        g4, gb4 = h3.T @ gz, gz.sum(0)
        ga3 = (gz @ w4.T) * (a3 > 0)
        g3, gb3 = flat.T @ ga3, ga3.sum(0)
        ga2 = _unpool64((ga3 @ w3.T).reshape(p2.shape), m2) * (a2 > 0)
        g2, gb2 = np.einsum("nchwij,nfhw->fcij", win2, ga2, optimize=True), ga2.sum((0, 2, 3))
        ga1 = _unpool64(_conv_input_grad64(ga2, w2), m1) * (a1 > 0)
        g1, gb1 = np.einsum("nchwij,nfhw->fcij", win1, ga1, optimize=True), ga1.sum((0, 2, 3))
        grads = [g1, gb1, g2, gb2, g3, gb3, g4, gb4]
        return [np.float64(loss)] + [p.astype(np.float64) - LR * g
                                     for p, g in zip(d["params"], grads)]

    @staticmethod
    def tenure(d, linker):
        import tenure as tn

        def loss(x, t, params):
            log_p = symbolic_lenet(tn.nnet.conv2d, lambda h: tn.nnet.pool_2d(h, (2, 2)),
                                   tn.relu, tn.nnet.log_softmax, tn.reshape, x, params)
            return -tn.mean(tn.sum(t * log_p, axis=1))
        return _tenure_sgd(d, linker, 4, loss)

    @staticmethod
    def torch(d, variant=None):
        import torch
        import torch.nn.functional as F

        def loss_fn(x, t, *params):
            log_p = symbolic_lenet(F.conv2d, lambda h: F.max_pool2d(h, 2), torch.relu,
                                   lambda z: F.log_softmax(z, dim=1), torch.reshape, x, params)
            return -torch.mean(torch.sum(t * log_p, dim=1))

        x, t = torch.from_numpy(d["x"]), torch.from_numpy(d["t"])
        params = [torch.from_numpy(p.copy()).requires_grad_() for p in d["params"]]
        run, observe = _torch_sgd(loss_fn, params, variant)
        return Built(lambda: run(x, t), observe)

    @staticmethod
    def jax(d):
        jax = _jax()
        import jax.numpy as jnp
        from jax import lax

        def conv(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

        def pool(h):
            return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        def loss_fn(params, x, t):
            log_p = symbolic_lenet(conv, pool, jax.nn.relu,
                                   lambda z: jax.nn.log_softmax(z, axis=1), jnp.reshape, x,
                                   params)
            return -jnp.mean(jnp.sum(t * log_p, axis=1))

        x, t = jnp.asarray(d["x"]), jnp.asarray(d["t"])
        run, observe, compile_s = _jax_sgd(loss_fn, d["params"], [x, t])
        return Built(lambda: run(x, t), observe, compile_s)


# ============================================================================
# minibatch_loop: one epoch of SGD over a data set held by the system, by index
#
# The classic Theano training loop (issue 39): the data set lives in shared
# variables and one compiled step takes a minibatch index i, its inputs
# X[i*b:(i+1)*b] given through ``givens`` (tenure and PyTensor, the same
# graph); JAX: a jit step slicing with lax.dynamic_slice at i; PyTorch eager:
# indexing a tensor.  A ReLU MLP 784-500-10, softmax cross-entropy, float32;
# one measured call is one epoch (rows // b minibatches: every system sees
# full batches only, since dynamic_slice cannot make a shorter one).

_MINIBATCH_LAYERS = (784, 500, 10)


def batch_of(variant: str) -> int:
    """``"batch 20"`` -> 20."""
    return int(variant.split()[-1])


def _minibatch_data(rows, rng):
    params = _mlp_data(1, _MINIBATCH_LAYERS, rng)["params"]
    labels = rng.integers(0, 10, rows)
    return {"X": rng.standard_normal((rows, 784), dtype=np.float32),
            "T": np.eye(10, dtype=np.float32)[labels], "params": params}


def _symbolic_xent(log_softmax, mean, total, x, t, params, relu):
    """Softmax cross-entropy of the MLP, written once for every system."""
    return -mean(total(t * log_softmax(symbolic_mlp(relu, x, params)), 1))


def _epoch(step, n_batches: int):
    """``epoch()``: ``step(k)`` for every minibatch ``k``, in order; the last loss."""
    def epoch():
        for k in range(n_batches):
            loss = step(k)
        return loss
    return epoch


def _over_shared(epoch, params, compile_s: float) -> Built:
    """The epoch of a system whose parameters are shared variables."""
    return Built(epoch, lambda r: [_np(r)] + [_np(p.get_value(borrow=True)) for p in params],
                 compile_s)


class MinibatchLoop:
    """One epoch of minibatch SGD (lr 0.01), checked against a float64 NumPy
    epoch: the last minibatch's loss and the parameters after the epoch."""

    name = "minibatch_loop"
    title = "one epoch of SGD by minibatch index, MLP 784-500-10, float32"
    gradient = True
    variants = ("batch 20", "batch 128")
    sizes = {"full": {"rows": 50_000}, "quick": {"rows": 2_560}}
    #: float32 rounding over an epoch of steps: the parameters' change after
    #: 2,500 steps differs from float64's by up to 1.4% of its largest
    #: magnitude (every system's, PyTorch's 0.9%); a wrong gradient differs by
    #: its whole size
    float32_tolerance = 3e-2
    #: the batch size (the variant) decides the epoch's steps
    reference_per_variant = True

    @staticmethod
    def data(rows, rng):
        return _minibatch_data(rows, rng)

    @staticmethod
    def reference(d, variant):
        b = batch_of(variant)
        params = [p.astype(np.float64) for p in d["params"]]
        X, T = d["X"], d["T"]
        for k in range(len(X) // b):
            x, t = X[k * b:(k + 1) * b].astype(np.float64), T[k * b:(k + 1) * b]
            out, saved = _mlp_forward64(x, params)
            z = out - out.max(axis=1, keepdims=True)
            log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            loss = -np.mean(np.sum(t * log_p, axis=1))
            g = (np.exp(log_p) - t) / b
            grads = []
            for i in reversed(range(len(params) // 2)):
                h, a = saved[i]
                if i < len(params) // 2 - 1:
                    g = g * (a > 0)
                grads = [h.T @ g, g.sum(axis=0)] + grads
                g = g @ params[2 * i].T
            params = [p - LR * gp for p, gp in zip(params, grads)]
        return [np.float64(loss)] + params

    @staticmethod
    def tenure(d, linker, variant):
        import tenure as tn
        b = batch_of(variant)
        clock = _Clock()
        with clock:
            X, T = tn.shared(d["X"], borrow=True), tn.shared(d["T"], borrow=True)
            params = [tn.shared(p, borrow=True) for p in d["params"]]
            i = tn.scalar("i", dtype="int64")
            x, t = tn.matrix("x", dtype="float32"), tn.matrix("t", dtype="float32")
            loss = _symbolic_xent(tn.log_softmax, tn.mean, tn.sum, x, t, params, tn.relu)
            grads = tn.grad(loss, params)
            f = tn.function([i], loss, updates=[(p, p - LR * g) for p, g in zip(params, grads)],
                            givens={x: X[i * b:(i + 1) * b], t: T[i * b:(i + 1) * b]},
                            mode=_tenure_mode(linker))
        return _over_shared(_epoch(f, len(d["X"]) // b), params, clock.s)

    @staticmethod
    def pytensor(d, mode_variant, variant):
        import pytensor
        import pytensor.tensor as pt
        from pytensor.tensor.special import log_softmax
        b = batch_of(variant)
        clock = _Clock()
        with clock:
            X, T = pytensor.shared(d["X"], borrow=True), pytensor.shared(d["T"], borrow=True)
            params = [pytensor.shared(p, borrow=True) for p in d["params"]]
            i = pt.scalar("i", dtype="int64")
            x, t = pt.matrix("x", dtype="float32"), pt.matrix("t", dtype="float32")
            loss = _symbolic_xent(lambda z: log_softmax(z, axis=1), pt.mean,
                                  lambda v, axis: pt.sum(v, axis=axis), x, t, params, _pt_relu)
            grads = pytensor.grad(loss, params)
            lr = np.float32(LR)  # a Python float would upcast float32 to float64 in PyTensor
            f = pytensor.function([i], loss,
                                  updates=[(p, p - lr * g) for p, g in zip(params, grads)],
                                  givens={x: X[i * b:(i + 1) * b], t: T[i * b:(i + 1) * b]},
                                  mode=pytensor_mode(mode_variant))
        return _over_shared(_epoch(f, len(d["X"]) // b), params, clock.s)

    @staticmethod
    def torch(d, variant):
        import torch
        b = batch_of(variant)
        X, T = torch.from_numpy(d["X"]), torch.from_numpy(d["T"])
        params = [torch.from_numpy(p.copy()).requires_grad_() for p in d["params"]]
        run, observe = _torch_sgd(
            lambda x, t, *ps: _symbolic_xent(lambda z: torch.log_softmax(z, dim=1), torch.mean,
                                             torch.sum, x, t, ps, torch.relu), params, None)
        return Built(_epoch(lambda k: run(X[k * b:(k + 1) * b], T[k * b:(k + 1) * b]),
                            len(d["X"]) // b), observe)

    @staticmethod
    def jax(d, variant):
        jax = _jax()
        import jax.numpy as jnp
        from jax import lax
        b = batch_of(variant)

        def loss_fn(params, X, T, i):
            start, zero = i * b, i * 0        # (start indices of one integer type)
            x = lax.dynamic_slice(X, (start, zero), (b, X.shape[1]))
            t = lax.dynamic_slice(T, (start, zero), (b, T.shape[1]))
            return _symbolic_xent(lambda z: jax.nn.log_softmax(z, axis=1), jnp.mean,
                                  lambda v, axis: jnp.sum(v, axis=axis), x, t, params,
                                  jax.nn.relu)

        X, T = jnp.asarray(d["X"]), jnp.asarray(d["T"])
        run, observe, compile_s = _jax_sgd(loss_fn, d["params"], [X, T, jnp.int32(0)])
        return Built(_epoch(lambda k: run(X, T, jnp.int32(k)), len(d["X"]) // b), observe,
                     compile_s)


WORKLOADS = {w.name: w for w in (Overhead, Elemwise, SoftmaxInfer, SoftmaxGrad, MlpInfer,
                                 MlpTrain, MlpTrainBudget, MlpTrainBudget8, BorrowSteadyState,
                                 RnnTrain, RnnTrainBudget, DropoutMlpTrain, LenetTrain,
                                 MinibatchLoop)}

# handwritten.py and small_steps.py build on the helpers above and add their
# workloads to the table
import handwritten  # noqa: E402,F401
import small_steps  # noqa: E402,F401


def family(system: str) -> str:
    """``tenure-py`` -> ``tenure``, ``pytensor-c`` -> ``pytensor``."""
    return system.split("-", 1)[0]


def measured(workload: str, system: str, variant: str | None) -> bool:
    """Whether the run is part of the benchmark at all: peers have no
    activation budget, so they run the budget workloads at 1.0 only; the
    variant "torch.compile" is PyTorch's alone, "trust_input" PyTensor C's."""
    if issubclass(WORKLOADS[workload], MlpTrainBudget):
        return family(system) == "tenure" or variant == BUDGETS[0]
    if variant == TORCH_COMPILE:
        return family(system) == "torch"
    if variant == TRUST_INPUT:
        return system == "pytensor-c"
    return True


def skip_reason(workload: str, system: str) -> str | None:
    """Why ``system`` cannot run ``workload`` (None when it can)."""
    w = WORKLOADS[workload]
    fam = family(system)
    if w is BorrowSteadyState and fam not in ("tenure", "pytensor"):
        return "no Out(borrow=...) to compare: measured for tenure and PyTensor only"
    if fam == "numpy" and w.gradient:
        return "NumPy has no automatic differentiation"
    if w is LenetTrain and fam == "pytensor":
        return "PyTensor 3 has no conv2d or pool_2d"
    if not hasattr(w, fam):
        return f"workload not written for {fam}"
    return None


def build(workload: str, system: str, data: dict, variant: str | None = None) -> Built:
    """Compile ``workload`` for ``system`` over ``data``."""
    w = WORKLOADS[workload]
    fam, _, sub = system.partition("-")
    builder = getattr(w, fam)
    args = [data]
    if fam == "tenure":
        args.append(sub)
    elif fam == "pytensor":
        args.append("c" if sub == "c" else "default")
    if variant is not None:
        args.append(variant)
    return builder(*args)
