"""Sizes and bytes from numeric shapes: what the ops' cost methods share.

:meth:`Op.flops <tenure.symbolic.graph.Op.flops>` and :meth:`Op.bytes_moved
<tenure.symbolic.graph.Op.bytes_moved>` (which :mod:`tenure.rewrites.cost`
turns into seconds) read ``shapes``: a map from variable to its shape as a
tuple of ints, or to ``None`` when unknown (what
:meth:`tenure.rewrites.sizes.SizeModel.shapes` returns).  These helpers live in
the symbolic layer so that every op module can use them without importing the
rewrites.

An unknown shape, or a variable that is not a tensor, counts as zero elements;
an unknown (or 0-d) variable's length along an axis counts as 1.  A tensor is
told by its type's ``numpy_dtype`` (duck typing: :mod:`tenure.symbolic.graph`
imports this module and knows nothing about tensor types).
"""

from __future__ import annotations

import math

import numpy as np

#: flops per input element of the softmax-like ops (max, subtract, exp, sum, divide)
SOFTMAX_FLOPS = 5


def size(var, shapes) -> int:
    """The number of elements of ``var`` (0 when unknown or not a tensor)."""
    shape = shapes.get(var)
    if shape is None or getattr(var.type, "numpy_dtype", None) is None:
        return 0
    return math.prod(shape)


def nbytes(var, shapes) -> int:
    """The bytes ``var``'s elements take (0 when its size is unknown)."""
    n = size(var, shapes)
    return n * np.dtype(var.type.dtype).itemsize if n else 0


def dim(var, shapes, axis: int) -> int:
    """``var``'s length along ``axis`` (1 when unknown or ``var`` is 0-d)."""
    shape = shapes.get(var)
    if shape is None or not shape:
        return 1
    return shape[axis]


def inputs_size(node, shapes) -> int:
    """The elements of all of ``node``'s inputs."""
    return sum(size(i, shapes) for i in node.inputs)


def outputs_size(node, shapes) -> int:
    """The elements of all of ``node``'s outputs."""
    return sum(size(o, shapes) for o in node.outputs)


def inputs_outputs_nbytes(node, shapes) -> int:
    """The bytes of all of ``node``'s inputs and outputs: what it reads and writes."""
    return (sum(nbytes(i, shapes) for i in node.inputs)
            + sum(nbytes(o, shapes) for o in node.outputs))


def scalar_steps(scalar_op) -> int:
    """How many primitive scalar ops a scalar op is (a Composite: its steps)."""
    steps = getattr(scalar_op, "steps", None)
    return len(steps) if steps else 1


def all_views(node) -> bool:
    """Every output of ``node`` is declared a view of an input (and none is
    written into one)."""
    op = node.op
    return bool(op.view_map) and not op.destroy_map and all(
        k in op.view_map for k in range(len(node.outputs)))
