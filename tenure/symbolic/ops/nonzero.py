"""``nonzero``: the indices of the nonzero elements, one int64 vector per
axis (``np.nonzero``), and what boolean masks index with.

Its outputs' length is known only when it runs: their static shape is
``(None,)``, a shape read from them is the output's own, and the size model
leaves it unknown (``shape_from_values``).  ``x[mask]``
(:func:`~tenure.symbolic.ops.indexing.getitem`) is NumPy's
``x[np.nonzero(mask)]``: the mask's nonzero indices, one integer array per
axis it covers, so the result, its gradient and ``set_subtensor`` /
``inc_subtensor`` through it are advanced indexing's.  Given the lengths of
the axes a mask covers (``lengths``), the op first checks the mask against
them and raises NumPy's ``IndexError`` when they differ.

No gradient: the outputs are integers.  The C linker runs ``perform``; the
CUDA linker runs it on device arrays (CuPy's ``nonzero``).
"""

from __future__ import annotations

import operator

import numpy as np

from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["Nonzero", "nonzero", "outputs_of"]


class Nonzero(Op):
    """``np.nonzero(x)`` of an ``x`` of one axis or more: one int64 vector
    per axis.  ``first_axis``: where the lengths given after ``x`` (as many
    as ``x`` has axes, or none) start in the array a mask indexes, for the
    error's words."""

    __props__ = ("first_axis",)
    shape_from_values = True

    def __init__(self, first_axis: int = 0):
        self.first_axis = operator.index(first_axis)

    def make_node(self, x, *lengths) -> Apply:
        x = as_tensor_variable(x)
        if x.ndim == 0:
            raise ValueError(f"nonzero: {x} ({x.type}) is 0-d; nonzero takes an array of one "
                             "axis or more")
        lengths = [as_tensor_variable(n) for n in lengths]
        if lengths and len(lengths) != x.ndim:
            raise ValueError(f"nonzero: expected one length per axis of {x} ({x.ndim}), got "
                             f"{len(lengths)}")
        for n in lengths:
            if n.ndim != 0 or n.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"nonzero: a length must be a 0-d integer, got {n} ({n.type})")
        return Apply(self, [x, *lengths], [TensorType("int64", (None,))() for _ in range(x.ndim)])

    def perform(self, node, inputs, output_storage):
        # NumPy functions and array methods only: device arrays take them over.
        x, *lengths = inputs
        for k, (have, want) in enumerate(zip(x.shape, lengths)):
            if have != int(want):
                raise IndexError(f"boolean index did not match indexed array along axis "
                                 f"{self.first_axis + k}; size of axis is {int(want)} but size "
                                 f"of corresponding boolean axis is {have}")
        for cell, indices in zip(output_storage, np.nonzero(x)):
            cell[0] = indices.astype(np.int64, copy=False)

    def grad(self, inputs, output_grads):
        return [None] * len(inputs)


def nonzero(x) -> tuple:
    """The indices of ``x``'s nonzero elements, one int64 vector per axis
    (NumPy's ``nonzero``)."""
    return outputs_of(Nonzero()(x))


def outputs_of(result) -> tuple:
    """An op call's outputs as a tuple (a call of one output returns it alone)."""
    return tuple(result) if isinstance(result, (list, tuple)) else (result,)
