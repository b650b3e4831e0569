"""Axis arguments, checked one way for every op family."""

from __future__ import annotations

import operator

import numpy as np
from numpy.exceptions import AxisError


def axis_index(value, fn: str, allow_none: bool = False) -> int | None:
    """``value`` as a Python int (bools are ints to Python but never axes);
    ``TypeError`` naming ``fn`` otherwise."""
    if value is None and allow_none:
        return None
    expected = "an int or None" if allow_none else "an int"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: axis must be {expected}, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: axis must be {expected}, got {type(value).__name__} "
                        f"{value!r}") from None


def normalize_axis(axis, ndim: int, fn: str) -> int:
    """One axis as an int in ``[0, ndim)`` (negative axes count from the end).

    Raises ``TypeError`` for a non-int and :class:`numpy.exceptions.AxisError`
    (a ``ValueError``) for an axis out of range.
    """
    axis = axis_index(axis, fn)
    if not -ndim <= axis < ndim:
        valid = f"valid axes: {-ndim} to {ndim - 1}" if ndim else "a 0-d tensor has no axes"
        raise AxisError(f"{fn}: axis {axis} is out of range for a tensor with ndim={ndim} "
                        f"({valid})")
    return axis % ndim
