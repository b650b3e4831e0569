"""Neural-network functions: ``softmax``, ``log_softmax``, ``logsumexp``,
``relu``, ``gelu``, ``one_hot`` and the binary cross-entropies
(``binary_crossentropy``, ``sigmoid_binary_crossentropy``).  ``tn.nnet`` is
this module.

``softmax``, ``log_softmax`` and ``logsumexp`` are ops of their own: they
subtract the maximum along the axes before exponentiating (so inputs like
1000 or -1000 give finite, exact results where ``exp`` alone overflows) and
have gradients written in terms of their own output.  ``axis`` is an int, a
tuple of ints or None (every axis).  Float inputs keep their dtype; integer
and boolean inputs give float64 (like ``np.mean`` and
``scipy.special.logsumexp``); complex inputs are rejected.

``relu``, ``gelu`` and the cross-entropies are compositions of elementwise
ops, so their gradients come from the elementwise rules.  ``one_hot`` has no
gradient.

``conv2d`` and ``pool_2d`` (:mod:`.conv`) and the batch normalizations
(:mod:`.batchnorm`) live in files of their own and are part of ``tn.nnet``
too.
"""

from __future__ import annotations

import math

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.reduce import normalize_axes
from tenure.symbolic.ops.shape import as_dim
from tenure.symbolic.types import TensorType, normalize_dtype
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant


def _float_dtype(x, fn: str) -> str:
    """The dtype of ``fn(x)``: ``x``'s for floats, float64 for ints and bools."""
    kind = x.type.numpy_dtype.kind
    if kind == "f":
        return x.dtype
    if kind in "biu":
        return "float64"
    raise TypeError(f"{fn}: expected a real (float, integer or bool) tensor, got {x} "
                    f"({x.type})")


def _fits(buffer, shape: tuple, dtype) -> bool:
    """Whether a buffer left from an earlier call can take this output as it is."""
    return (isinstance(buffer, np.ndarray) and buffer.shape == shape
            and buffer.dtype == dtype and buffer.flags.writeable)


def _shifted_max(x, axes):
    """The maximum of ``x`` over ``axes`` (kept as length-1 axes), with non-finite
    values replaced by 0 so that subtracting it never makes a NaN out of an
    infinite input; -inf over empty axes."""
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    return np.where(np.isfinite(m), m, 0).astype(x.dtype, copy=False)


def _is_float(var) -> bool:
    return var.type.numpy_dtype.kind == "f"


def _along_axes_bytes(node, shape, axes) -> tuple[int, int, int, int, int]:
    """What the NumPy code below makes, in bytes: ``(full, reduced, converted,
    buffered, mask)`` -- a full-size and a reduced (``keepdims``) array in the
    output dtype, the input converted to that dtype (0 when it has it), what
    NumPy buffers to broadcast a reduced array against a full one (``x -
    max``), and the finite mask of the maximum."""
    dtype = node.outputs[0].type.numpy_dtype
    full = math.prod(shape) * dtype.itemsize
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    reduced = math.prod(kept) * dtype.itemsize
    converted = full if node.inputs[0].type.numpy_dtype != dtype else 0
    buffered = ew.broadcast_buffer_bytes(shape, [shape, kept], dtype.itemsize)
    return full, reduced, converted, buffered, math.prod(kept)


class _AlongAxes(Op):
    """What softmax and log_softmax share: one float output shaped like the input."""

    __props__ = ("axis",)
    fn_name = ""

    def __init__(self, axis: tuple[int, ...]):
        self.axis = tuple(int(a) for a in axis)

    def __str__(self) -> str:
        return f"{self.fn_name}{{axis={self.axis}}}"

    def make_node(self, x):
        x = as_tensor_variable(x)
        for a in self.axis:
            if not 0 <= a < x.ndim:
                raise ValueError(f"{self.fn_name}: axis {a} is out of range for {x} ({x.type})")
        dtype = _float_dtype(x, self.fn_name)
        return Apply(self, [x], [TensorType(dtype, x.type.shape)()])

    def perform(self, node, inputs, output_storage):
        dtype = node.outputs[0].type.numpy_dtype
        x = np.asarray(inputs[0]).astype(dtype, copy=False)
        cell = output_storage[0]
        if not _fits(cell[0], x.shape, dtype):
            cell[0] = np.empty(x.shape, dtype=dtype)
        out = cell[0]
        if x.size:
            self._compute(x, out)

    def _compute(self, x, out) -> None:
        raise NotImplementedError

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """The input converted to the output dtype, then the largest of the
        phases of ``_compute`` (see :meth:`_phases`)."""
        (shape,) = input_shapes
        if shape is None:
            return 0
        full, reduced, converted, buffered, mask = _along_axes_bytes(node, tuple(shape),
                                                                     self.axis)
        return converted + max(self._phases(full, reduced, buffered, mask))

    def flops(self, node, shapes) -> float:
        """A few per input element (:data:`~tenure.symbolic.cost_facts.SOFTMAX_FLOPS`:
        max, subtract, exp, sum, divide)."""
        return float(cost_facts.SOFTMAX_FLOPS * cost_facts.inputs_size(node, shapes))

    def _phases(self, full, reduced, buffered, mask) -> tuple[int, ...]:
        """Bytes alive beyond the output in each phase: the maximum (with its
        finite mask), ``x - max`` written into the output (NumPy buffering the
        broadcast maximum), then the sum along the axes divided out."""
        return (2 * reduced + mask, reduced + buffered, reduced + buffered)


class Softmax(_AlongAxes):
    """``exp(x) / sum(exp(x))`` over ``axis`` (a sorted tuple of axes), computed
    as ``exp(x - max)`` so that no exponential overflows."""

    fn_name = "softmax"

    def _compute(self, x, out):
        np.subtract(x, _shifted_max(x, self.axis), out=out)
        np.exp(out, out=out)
        out /= np.sum(out, axis=self.axis, keepdims=True)

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.reduce import sum
        (x,), (gz,) = inputs, output_grads
        if gz is None or not _is_float(x):
            return [None]
        s = self.make_node(x).outputs[0]
        return [ew.mul(s, ew.sub(gz, sum(ew.mul(gz, s), axis=self.axis, keepdims=True)))]


class LogSoftmax(_AlongAxes):
    """``x - logsumexp(x)`` over ``axis`` (a sorted tuple of axes)."""

    fn_name = "log_softmax"

    def _phases(self, full, reduced, buffered, mask):
        # ... and exp(x - max), a full temporary, summed; its log subtracted.
        return (2 * reduced + mask, reduced + buffered, full + reduced,
                2 * reduced + buffered)

    def _compute(self, x, out):
        np.subtract(x, _shifted_max(x, self.axis), out=out)
        total = np.sum(np.exp(out), axis=self.axis, keepdims=True)
        out -= np.log(total)

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.reduce import sum
        (x,), (gz,) = inputs, output_grads
        if gz is None or not _is_float(x):
            return [None]
        out = self.make_node(x).outputs[0]
        return [ew.sub(gz, ew.mul(ew.exp(out), sum(gz, axis=self.axis, keepdims=True)))]


class LogSumExp(Op):
    """``log(sum(exp(x)))`` over ``axis`` (a sorted tuple of axes), as ``m +
    log(sum(exp(x - m)))`` with ``m`` the maximum.  An empty axis gives -inf."""

    __props__ = ("axis", "keepdims")

    def __init__(self, axis: tuple[int, ...], keepdims: bool = False):
        self.axis = tuple(int(a) for a in axis)
        self.keepdims = bool(keepdims)

    def __str__(self) -> str:
        keep = ", keepdims" if self.keepdims else ""
        return f"logsumexp{{axis={self.axis}{keep}}}"

    def _out_shape(self, shape):
        if self.keepdims:
            return tuple(1 if i in self.axis else d for i, d in enumerate(shape))
        return tuple(d for i, d in enumerate(shape) if i not in self.axis)

    def make_node(self, x):
        x = as_tensor_variable(x)
        for a in self.axis:
            if not 0 <= a < x.ndim:
                raise ValueError(f"logsumexp: axis {a} is out of range for {x} ({x.type})")
        dtype = _float_dtype(x, "logsumexp")
        return Apply(self, [x], [TensorType(dtype, self._out_shape(x.type.shape))()])

    def perform(self, node, inputs, output_storage):
        dtype = node.outputs[0].type.numpy_dtype
        x = np.asarray(inputs[0]).astype(dtype, copy=False)
        m = _shifted_max(x, self.axis)
        shifted = np.asarray(x - m)     # the one full-size temporary (an array even 0-d):
        np.exp(shifted, out=shifted)    # exponentiated where it lies
        total = np.sum(shifted, axis=self.axis, keepdims=True)
        with np.errstate(divide="ignore"):  # log(0) = -inf: all -inf, or an empty axis
            result = np.log(total)
        result += m
        output_storage[0][0] = np.asarray(result).reshape(self._out_shape(x.shape))

    def infer_shape(self, node, input_shapes):
        return [self._out_shape(tuple(input_shapes[0]))]

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """The input converted to the output dtype, then the largest phase:
        the maximum (with its finite mask); ``x - max`` (full size, NumPy
        buffering the broadcast maximum); the sum and its log (the output),
        while ``x - max`` is alive.  The output (as large as the maximum)
        exists in the last phase only: the plan counts it for the whole step."""
        (shape,) = input_shapes
        if shape is None:
            return 0
        full, reduced, converted, buffered, mask = _along_axes_bytes(node, tuple(shape),
                                                                     self.axis)
        return converted + max(reduced + mask, full + buffered, full + 2 * reduced)

    def flops(self, node, shapes) -> float:
        """A few per input element (:data:`~tenure.symbolic.cost_facts.SOFTMAX_FLOPS`:
        max, subtract, exp, sum, divide)."""
        return float(cost_facts.SOFTMAX_FLOPS * cost_facts.inputs_size(node, shapes))

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.shape import expand_dims
        (x,), (gz,) = inputs, output_grads
        if gz is None or not _is_float(x):
            return [None]
        out = self.make_node(x).outputs[0]
        if not self.keepdims and self.axis:
            gz, out = expand_dims(gz, self.axis), expand_dims(out, self.axis)
        return [ew.mul(gz, ew.exp(ew.sub(x, out)))]


def _axes(x, axis, fn: str) -> tuple[int, ...]:
    if isinstance(axis, list):
        axis = tuple(axis)
    return normalize_axes(axis, x.ndim, fn)


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x), axis)``, numerically stable (like ``scipy.special.softmax``).

    ``axis``: an int, a tuple of ints or None (every axis).  Float inputs keep
    their dtype; ints and bools give float64.
    """
    x = as_tensor_variable(x)
    return Softmax(_axes(x, axis, "softmax"))(x)


def log_softmax(x, axis=-1):
    """``log(softmax(x, axis))``, computed as ``x - logsumexp(x, axis)`` so it stays
    finite and accurate where the softmax underflows to 0."""
    x = as_tensor_variable(x)
    return LogSoftmax(_axes(x, axis, "log_softmax"))(x)


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x), axis))``, numerically stable (like ``scipy.special.logsumexp``).

    ``axis=None`` reduces every axis; an empty axis gives -inf.
    """
    x = as_tensor_variable(x)
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"logsumexp: keepdims must be a bool, got {keepdims!r}")
    return LogSumExp(_axes(x, axis, "logsumexp"), bool(keepdims))(x)


# --------------------------------------------------------------------------
# Activations (compositions of elementwise ops)


def relu(x):
    """``max(x, 0)`` elementwise (NaN stays NaN).

    The gradient is 1 where ``x > 0`` and 0 where ``x <= 0``: at exactly 0,
    where ``relu`` has no derivative, it is 0 (the usual convention; note that
    ``tn.maximum(x, 0)`` would split it, giving 1/2).
    """
    # One scalar op (NumPy's maximum, the fast path) with its own gradient rule.
    return ew.elemwise_op(ps.relu)(x)


_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gelu(x, approximate=False):
    """The Gaussian error linear unit ``x * Phi(x)``, with ``Phi`` the standard
    normal CDF: ``x / 2 * (1 + erf(x / sqrt(2)))``.

    ``approximate=True`` uses the tanh form ``x / 2 * (1 + tanh(sqrt(2 / pi) *
    (x + 0.044715 x**3)))``.  Float inputs keep their dtype.
    """
    x = as_tensor_variable(x)
    if not isinstance(approximate, (bool, np.bool_)):
        raise TypeError(f"gelu: approximate must be a bool, got {approximate!r}")
    if approximate:
        inner = ew.mul(_SQRT_2_OVER_PI, ew.add(x, ew.mul(0.044715, ew.mul(x, ew.square(x)))))
        cdf = ew.add(1, ew.tanh(inner))
    else:
        cdf = ew.add(1, ew.erf(ew.mul(x, _SQRT_HALF)))
    return ew.mul(ew.mul(x, 0.5), cdf)


# --------------------------------------------------------------------------
# Binary cross-entropy


def _float_operand(value, fn: str, what: str):
    var = as_tensor_variable(value)
    if var.type.numpy_dtype.kind not in "fiub":
        raise TypeError(f"{fn}: {what} must be a real tensor, got {var} of type {var.type}")
    return var


def binary_crossentropy(output, target):
    """``-(target * log(output) + (1 - target) * log(1 - output))`` elementwise:
    the cross-entropy of probabilities ``output`` against targets in [0, 1].

    When ``output`` is ``sigmoid(x)`` (or ``1 / (1 + exp(-x))``), the logs are
    computed as softplus forms and differentiated as such (the ``log_sigmoid``
    stabilization, :mod:`tenure.symbolic.patterns`): loss and gradient stay
    finite however large ``|x|`` grows.  Given logits, prefer
    :func:`sigmoid_binary_crossentropy`.
    """
    p = _float_operand(output, "binary_crossentropy", "output")
    t = _float_operand(target, "binary_crossentropy", "target")
    return ew.neg(ew.add(ew.mul(t, ew.log(p)), ew.mul(ew.sub(1, t), ew.log(ew.sub(1, p)))))


def sigmoid_binary_crossentropy(logits, target):
    """``binary_crossentropy(sigmoid(logits), target)``, computed from the logits
    as ``target * softplus(-logits) + (1 - target) * softplus(logits)``:
    finite for every logit, and to full precision where a target is 0 or 1
    (``softplus(x) - target * x`` would round ``softplus(50) - 50`` to 0); the
    gradient is ``sigmoid(logits) - target``."""
    x = _float_operand(logits, "sigmoid_binary_crossentropy", "logits")
    t = _float_operand(target, "sigmoid_binary_crossentropy", "target")
    return ew.add(ew.mul(t, ew.softplus(ew.neg(x))), ew.mul(ew.sub(1, t), ew.softplus(x)))


# --------------------------------------------------------------------------
# One-hot encoding


class OneHot(Op):
    """``indices`` (integers, any shape) as one-hot rows along a new last axis of
    length ``num_classes`` (the second input, a 0-d integer), of ``dtype``."""

    __props__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = normalize_dtype(dtype, what="one_hot")

    def make_node(self, indices, num_classes):
        indices = as_tensor_variable(indices)
        num_classes = as_tensor_variable(num_classes)
        if indices.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"one_hot: indices must be an integer tensor, got {indices} "
                            f"({indices.type})")
        if num_classes.ndim != 0 or num_classes.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"one_hot: num_classes must be an int or a 0-d integer tensor, got "
                            f"{num_classes} ({num_classes.type})")
        n = int(num_classes.data) if isinstance(num_classes, TensorConstant) else None
        if n is not None and n < 0:
            raise ValueError(f"one_hot: num_classes must be non-negative, got {n}")
        out = TensorType(self.dtype, indices.type.shape + (n,))()
        return Apply(self, [indices, num_classes], [out])

    def perform(self, node, inputs, output_storage):
        indices, n = np.asarray(inputs[0]), int(inputs[1])
        if n < 0:
            raise ValueError(f"one_hot: num_classes must be non-negative, got {n}")
        bad = (indices < 0) | (indices >= n)
        if bad.any():
            first = indices[bad].flat[0]
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"one_hot: index {first} (at position {where}) is out of range "
                             f"for num_classes={n}: expected 0 <= index < {n}")
        shape = indices.shape + (n,)
        cell = output_storage[0]
        if _fits(cell[0], shape, node.outputs[0].type.numpy_dtype):
            cell[0].fill(0)
        else:
            cell[0] = np.zeros(shape, dtype=self.dtype)
        np.put_along_axis(cell[0], indices.astype(np.intp)[..., None], 1, axis=-1)

    def infer_shape(self, node, input_shapes):
        return [tuple(input_shapes[0]) + (as_dim(node.inputs[1]),)]

    def grad(self, inputs, output_grads):
        return [None, None]


def one_hot(indices, num_classes, dtype=None):
    """One-hot encoding: ``out[..., k]`` is 1 where ``indices[...] == k``, else 0.

    ``indices`` is an integer tensor of any shape; the result has one more axis,
    of length ``num_classes`` (an int or a 0-d integer tensor), and dtype
    ``dtype`` (``config.floatX`` by default).  An index outside
    ``[0, num_classes)`` raises ``ValueError`` when the function runs.  No
    gradient flows through it.
    """
    n = as_dim(num_classes, what="one_hot: num_classes")
    if isinstance(n, int):
        if n < 0:
            raise ValueError(f"one_hot: num_classes must be non-negative, got {n}")
        n = constant(n, dtype="int64")
    return OneHot(normalize_dtype(dtype, what="one_hot"))(indices, n)


# tn.nnet also holds the image and normalization layers (files of their own).
from tenure.symbolic.ops.batchnorm import (  # noqa: E402,F401
    batch_normalization, batch_normalization_test, batch_normalization_train)
from tenure.symbolic.ops.conv import conv2d, pool_2d  # noqa: E402,F401
