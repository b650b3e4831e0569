"""Testing helpers: :func:`verify_grad` checks symbolic gradients numerically."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: (finite-difference step, absolute tolerance, relative tolerance) per dtype
_DEFAULT_TOLERANCES = {
    "float64": (1e-6, 1e-6, 1e-4),
    "float32": (1e-3, 2e-2, 2e-2),
    "float16": (1e-1, 1e-1, 1e-1),
}


class GradientError(AssertionError):
    """A symbolic gradient disagrees with finite differences."""

    def __init__(self, input_index: int, analytic: float, numeric: float,
                 abs_err: float, rel_err: float, abs_tol: float, rel_tol: float):
        self.input_index = input_index
        self.analytic, self.numeric = analytic, numeric
        self.abs_err, self.rel_err = abs_err, rel_err
        super().__init__(
            f"gradient of input #{input_index} along a random direction: symbolic "
            f"{analytic!r}, finite differences {numeric!r} (absolute error {abs_err:.3g} > "
            f"{abs_tol:.3g} and relative error {rel_err:.3g} > {rel_tol:.3g})")


def verify_grad(fn: Callable, points: Sequence, n_tests: int = 2, rng=None,
                eps: float | None = None, abs_tol: float | None = None,
                rel_tol: float | None = None, mode=None) -> None:
    """Check the gradient of ``fn`` at ``points`` against central finite differences.

    ``fn`` takes one symbolic variable per point and returns a symbolic tensor
    of any shape.  It is reduced to a scalar with a fixed random projection
    ``sum(fn(*xs) * p)``; for each input and each of ``n_tests`` random
    directions ``d``, the symbolic directional derivative ``<grad, d>`` must
    match ``(c(x + eps d) - c(x - eps d)) / (2 eps)``.  Raises
    :class:`GradientError` naming the input when it does not.

    Tolerances default by the points' dtype (looser for float32).
    """
    import tenure as tn

    rng = rng if rng is not None else np.random.default_rng(42)
    points = [np.array(p, dtype=p.dtype if isinstance(p, np.ndarray) else tn.config.floatX)
              for p in points]
    for i, p in enumerate(points):
        if p.dtype.kind != "f":
            raise TypeError(f"verify_grad: point #{i} must be a float array, got dtype "
                            f"{p.dtype}")
    variables = [tn.tensor(f"x{i}", dtype=p.dtype, shape=(None,) * p.ndim)
                 for i, p in enumerate(points)]
    out = fn(*variables)
    if not isinstance(out, tn.Variable):
        raise TypeError(f"verify_grad: fn must return a symbolic variable, got "
                        f"{type(out).__name__}")
    # The projection is an input, not a constant, so one compiled function
    # gives the cost and the gradients (one C compile instead of three); its
    # shape comes from the reference executor, which compiles nothing.
    out_shape = np.shape(tn.function(variables, out, mode="py",
                                     on_unused_input="ignore")(*points))
    projection = tn.tensor("projection", dtype=out.dtype, shape=(None,) * out.ndim)
    projection_value = rng.uniform(0.5, 1.5, size=out_shape).astype(out.dtype)
    cost = (out * projection).sum()
    grads = tn.grad(cost, variables, disconnected_inputs="ignore")
    f_cost_and_grads = tn.function([*variables, projection], [cost, *grads], mode=mode,
                                   on_unused_input="ignore")

    def f_cost(*xs):
        return f_cost_and_grads(*xs, projection_value)[0]

    analytic_grads = f_cost_and_grads(*points, projection_value)[1:]

    worst = np.result_type(*[p.dtype for p in points]).name
    default_eps, default_abs, default_rel = _DEFAULT_TOLERANCES.get(worst,
                                                                    _DEFAULT_TOLERANCES["float64"])
    eps = default_eps if eps is None else eps
    abs_tol = default_abs if abs_tol is None else abs_tol
    rel_tol = default_rel if rel_tol is None else rel_tol
    for i, (point, g) in enumerate(zip(points, analytic_grads)):
        if g.shape != point.shape:
            raise GradientError(i, float("nan"), float("nan"), float("inf"), float("inf"),
                                abs_tol, rel_tol)
        for _ in range(n_tests):
            direction = rng.normal(size=point.shape).astype(point.dtype)
            analytic = float(np.sum(g.astype(np.float64) * direction))
            plus = [p.copy() for p in points]
            minus = [p.copy() for p in points]
            plus[i] = (point + eps * direction).astype(point.dtype)
            minus[i] = (point - eps * direction).astype(point.dtype)
            numeric = (float(f_cost(*plus)) - float(f_cost(*minus))) / (2 * eps)
            abs_err = abs(analytic - numeric)
            rel_err = abs_err / max(abs(analytic), abs(numeric), 1e-12)
            if abs_err > abs_tol and rel_err > rel_tol:
                raise GradientError(i, analytic, numeric, abs_err, rel_err, abs_tol, rel_tol)
