"""``RepeatIndices``: where each element of a ``repeat`` with a count per
element comes from, ``np.repeat(np.arange(length), counts)``.

:func:`~tenure.symbolic.ops.composed.repeat` takes ``x`` at these indices
along the axis (``take``), so the result, its gradient and every linker's
code are ``take``'s.  Counts known when the graph is built give the indices
as a constant; counts that are a tensor go through this op, whose output's
length (their sum) is known once it ran (``shape_from_values``).  It runs
``perform`` on every linker; on the CUDA linker its inputs are read on the
host and its indices copied to the device.
"""

from __future__ import annotations

import numpy as np

from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["RepeatIndices", "check_counts"]


def check_counts(counts: np.ndarray, length: int) -> None:
    """ValueError naming ``repeats`` unless ``counts`` has one count >= 0 per
    element along the axis (``length`` of them) or one for all."""
    if counts.ndim > 1 or counts.size not in (1, length):
        raise ValueError(f"repeat: repeats must hold one count per element along the axis "
                         f"({length}) or one for all, got shape {counts.shape}")
    if counts.size and counts.min() < 0:
        raise ValueError(f"repeat: repeats must be >= 0, got {int(counts.min())}")


class RepeatIndices(Op):
    """Inputs: ``counts`` (a 0-d or 1-d integer tensor) and ``length`` (the
    axis's length, 0-d); output: the int64 indices (see the module doc)."""

    __props__ = ()
    shape_from_values = True

    def make_node(self, counts, length) -> Apply:
        counts, length = as_tensor_variable(counts), as_tensor_variable(length)
        if counts.ndim > 1 or counts.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"repeat: repeats must be an int or a vector of ints, got {counts} "
                            f"({counts.type})")
        if length.ndim != 0 or length.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"RepeatIndices: length must be a 0-d integer, got {length} "
                            f"({length.type})")
        return Apply(self, [counts, length], [TensorType("int64", (None,))()])

    def perform(self, node, inputs, output_storage):
        counts, length = np.asarray(inputs[0]), int(inputs[1])
        check_counts(counts, length)
        output_storage[0][0] = np.repeat(np.arange(length, dtype=np.int64),
                                         counts.astype(np.int64))

    def grad(self, inputs, output_grads):
        return [None, None]
