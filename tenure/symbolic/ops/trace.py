"""``trace``: the sum of a matrix's diagonal (``np.trace`` of a 2-d array).

``offset`` picks the diagonal as ``np.trace`` does: 0 the main one, ``k > 0``
the one ``k`` above it (elements ``x[i, i + k]``), ``k < 0`` one below.  A
diagonal that misses the matrix (an empty one, or ``|k|`` past its edge) sums
to 0.  Small ints and bools widen as :func:`~tenure.symbolic.ops.reduce.sum`
widens them (``np.trace``'s dtype).

The gradient puts the output gradient on that diagonal: ``gz * eye(n, m, k)``.

The file holds everything about the op that no backend decides; the backends
run it through their tables (see the docs page "Writing an op", which walks
through this op): the C linker by a compiled step (:mod:`tenure.linkers.c.reduce`),
the CUDA linker by this ``perform`` on device arrays
(:mod:`tenure.linkers.cuda.device_ops`), the Dask linker by the same
``perform`` on a ``dask.array`` (:mod:`tenure.linkers.dask.lower`).
"""

from __future__ import annotations

import operator

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["Trace", "trace"]


class Trace(Op):
    """``np.trace(x, offset)`` of a matrix ``x``: a 0-d result."""

    __props__ = ("offset",)

    def __init__(self, offset: int = 0):
        try:
            self.offset = operator.index(offset)
        except TypeError:
            raise TypeError(f"trace: offset must be an int, got {offset!r}") from None

    def __str__(self) -> str:
        return f"trace{{offset={self.offset}}}" if self.offset else "trace"

    def make_node(self, x) -> Apply:
        x = as_tensor_variable(x)
        if x.ndim != 2:
            raise ValueError(f"trace: {x} ({x.type}) is {x.ndim}-d; trace takes a matrix "
                             "(2-d)")
        try:
            dtype = np.trace(np.zeros((1, 1), dtype=x.dtype)).dtype
        except TypeError as exc:
            raise TypeError(f"trace: unsupported input {x} ({x.type}): {exc}") from None
        return Apply(self, [x], [TensorType(dtype, ())()])

    def perform(self, node, inputs, output_storage):
        # NumPy functions only (device and Dask arrays take them over; see
        # the module doc): never np.asarray of the input.
        (x,) = inputs
        result = np.trace(x, offset=self.offset, dtype=node.outputs[0].type.numpy_dtype)
        output_storage[0][0] = np.asarray(result) if isinstance(result, np.generic) else result

    def infer_shape(self, node, input_shapes):
        return [()]

    def flops(self, node, shapes) -> float:
        """One addition per diagonal element (at most the shorter side)."""
        x = node.inputs[0]
        return float(min(cost_facts.dim(x, shapes, 0), cost_facts.dim(x, shapes, 1)))

    def bytes_moved(self, node, shapes) -> float:
        """The diagonal read, the result written."""
        x, out = node.inputs[0], node.outputs[0]
        return float(self.flops(node, shapes) * x.type.numpy_dtype.itemsize
                     + out.type.numpy_dtype.itemsize)

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.creation import eye
        from tenure.symbolic.ops.shape import shape_tuple
        (x,) = inputs
        (gz,) = output_grads
        if not is_differentiable(x):
            return [None]
        n, m = shape_tuple(x)
        return [gz * eye(n, m, self.offset, dtype=x.dtype)]


def trace(x, offset=0):
    """The sum of the ``offset``-th diagonal of the matrix ``x`` (``np.trace``)."""
    return Trace(offset)(x)
