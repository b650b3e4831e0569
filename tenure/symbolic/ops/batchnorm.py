"""Batch normalization, PyTensor's three functions, written with other ops
(elementwise arithmetic, ``mean``, ``var``): every linker runs them, and
their gradients are those ops'.

``axes`` are the axes normalized over: ``"per-activation"`` the batch axis
(0), ``"spatial"`` the batch axis and every axis after the channels (0, 2,
3, ... of an NCHW image), or a tuple of axes.  The parameters (``gamma``,
``beta``, means and variances) either have the input's number of axes, with
length 1 on the normalized ones (PyTensor's form), or only the other axes
(``gamma`` of shape (C,) for an NCHW input normalized spatially): those are
put in place, never broadcast against the wrong axis.  A scalar is one
value for every element.
"""

from __future__ import annotations

import numbers

from tenure.symbolic.ops.elemwise import add, cast, mul, sqrt, sub, true_divide
from tenure.symbolic.ops.reduce import mean as reduce_mean
from tenure.symbolic.ops.reduce import normalize_axes
from tenure.symbolic.ops.reduce import var as reduce_var
from tenure.symbolic.ops.shape import dim_prod, expand_dims, shape_tuple
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["batch_normalization", "batch_normalization_test", "batch_normalization_train"]


def _axes(x, axes, fn: str) -> tuple[int, ...]:
    if axes == "per-activation":
        return (0,)
    if axes == "spatial":
        return (0,) + tuple(range(2, x.ndim))
    if isinstance(axes, str):
        raise ValueError(f"{fn}: axes must be 'per-activation', 'spatial' or a tuple of axes, "
                         f"got {axes!r}")
    return tuple(sorted(normalize_axes(axes, x.ndim)))


def _parameter(value, x, axes, fn: str, name: str):
    """``value`` with ``x``'s number of axes (see the module doc)."""
    p = as_tensor_variable(value)
    if p.ndim == 0:
        return p
    if p.ndim == x.ndim:
        for axis in axes:
            if p.type.shape[axis] not in (1, None):
                raise ValueError(f"{fn}: {name} must have length 1 on the normalized axes "
                                 f"{axes}, got {p} ({p.type})")
        return p
    if p.ndim == x.ndim - len(axes):
        for axis in axes:
            p = expand_dims(p, axis)
        return p
    raise ValueError(f"{fn}: {name} must have {x.ndim} axes (length 1 on the normalized axes "
                     f"{axes}) or {x.ndim - len(axes)} (the others), got {p} ({p.type})")


def _epsilon(epsilon, fn: str) -> float:
    if not isinstance(epsilon, numbers.Real) or not epsilon >= 0:
        raise ValueError(f"{fn}: epsilon must be a number >= 0, got {epsilon!r}")
    return float(epsilon)


def _float_input(inputs, fn: str):
    x = as_tensor_variable(inputs)
    if x.type.numpy_dtype.kind != "f":
        raise TypeError(f"{fn}: inputs must be floats, got {x} ({x.type})")
    return x


def batch_normalization(inputs, gamma, beta, mean, std, mode: str = "low_mem"):
    """``(inputs - mean) * (gamma / std) + beta``, the parameters broadcast
    as given (PyTensor's ``batch_normalization``; ``mode`` is accepted for
    its sake, both modes computing the same)."""
    if mode not in ("low_mem", "high_mem"):
        raise ValueError(f"batch_normalization: mode must be 'low_mem' or 'high_mem', got "
                         f"{mode!r}")
    x = _float_input(inputs, "batch_normalization")
    return add(mul(sub(x, mean), true_divide(gamma, std)), beta)


def batch_normalization_train(inputs, gamma, beta, axes="per-activation",
                              epsilon: float = 1e-4, running_average_factor: float = 0.1,
                              running_mean=None, running_var=None):
    """Normalize ``inputs`` by the statistics of this batch: ``(x - mean) *
    invstd * gamma + beta``, ``invstd = 1 / sqrt(var + epsilon)`` (the
    biased variance).  Returns ``(out, mean, invstd)`` -- both with the
    input's number of axes -- and, when ``running_mean`` and ``running_var``
    are given, their updates ``running * (1 - factor) + statistic * factor``
    (the variance's statistic unbiased: ``var * m / (m - 1)``, ``m`` the
    elements normalized together), as PyTensor does."""
    fn = "batch_normalization_train"
    x = _float_input(inputs, fn)
    axes = _axes(x, axes, fn)
    eps = _epsilon(epsilon, fn)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{fn}: give both running_mean and running_var, or neither")
    factor = running_average_factor
    if not isinstance(factor, numbers.Real) or not 0 <= factor <= 1:
        raise ValueError(f"{fn}: running_average_factor must be in [0, 1], got {factor!r}")
    gamma, beta = (_parameter(p, x, axes, fn, n) for p, n in ((gamma, "gamma"), (beta, "beta")))
    mean = reduce_mean(x, axis=axes, keepdims=True)
    var = reduce_var(x, axis=axes, keepdims=True)
    invstd = true_divide(1.0, sqrt(add(var, eps)))
    out = add(mul(mul(sub(x, mean), invstd), gamma), beta)
    if running_mean is None:
        return out, mean, invstd
    running_mean = _parameter(running_mean, x, axes, fn, "running_mean")
    running_var = _parameter(running_var, x, axes, fn, "running_var")
    count = cast(dim_prod([shape_tuple(x)[a] for a in axes]), x.dtype)
    unbiased = mul(var, true_divide(count, sub(count, 1.0)))
    keep = 1.0 - float(factor)
    new_mean = add(mul(running_mean, keep), mul(mean, float(factor)))
    new_var = add(mul(running_var, keep), mul(unbiased, float(factor)))
    return out, mean, invstd, new_mean, new_var


def batch_normalization_test(inputs, gamma, beta, mean, var, axes="per-activation",
                             epsilon: float = 1e-4):
    """Normalize ``inputs`` by given statistics (the running averages, at
    inference): ``(x - mean) / sqrt(var + epsilon) * gamma + beta``."""
    fn = "batch_normalization_test"
    x = _float_input(inputs, fn)
    axes = _axes(x, axes, fn)
    eps = _epsilon(epsilon, fn)
    gamma, beta, mean, var = (_parameter(p, x, axes, fn, n) for p, n in (
        (gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var")))
    return add(mul(true_divide(sub(x, mean), sqrt(add(var, eps))), gamma), beta)
