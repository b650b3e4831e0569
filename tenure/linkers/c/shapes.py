"""Shape steps in C: ``Shape``, ``SumTo``, ``ExpandTo``, ``Alloc``, ``Arange``,
``MakeVector`` and ``SpecifyShape``.

The shape bookkeeping that gradients and shape inference leave in a graph:
``shape(x)``, the adjoints of broadcasting that do nothing when nothing
was broadcast (``sum_to(g, *dims)`` of a ``g`` that has the lengths
``dims``, ``expand_to(v, *dims)`` of a ``v`` that has them), and the fills
of ``zeros_like`` and gradients (``alloc(v, *dims)``), the ranges that
index rows (``arange(n)``), the shapes built from lengths (``make_vector``)
and the shapes a graph asserts (``specify_shape``).  The schedule
interpreter (``src/interpret.c``) runs them with the runtime's helpers
(``tn_sh_*``, ``src/shapes.c``) from what this module says of a node
(:func:`has_c_code`, :func:`shape_kind`, :func:`whats`,
:func:`summing`): nothing is generated per node, and none of them is a
Python step of the schedule.

A shape step -- its contract with the caller:

- input 0 is the array, as the slot holds it: an ndarray (or a NumPy
  scalar, for a 0-d one) of the node's dtype and ndim, else ``TypeError``
  naming the input; the dims are 0-d ints, NumPy integers or Python ints.
- Semantics are ``perform``'s, to the exception type and message:
  ``Shape`` is a new int64 vector; ``SumTo`` returns ``g`` itself when it
  has the target lengths (the check is all it costs), else it calls
  :func:`summing` -- perform's own sum, so the sums round as perform's and
  the errors read as its; ``ExpandTo`` returns ``v`` itself, a view adding
  leading length-1 axes, or a new array holding ``v`` broadcast, with
  ``check_shapes``' errors; ``Alloc`` writes ``v`` broadcast into the dead
  buffer the plan hands on (as a perform step gets it: :func:`take`), or a
  new array, after ``check_shapes``' checks; ``Arange`` is NumPy's own
  arange (``PyArray_ArangeObj``) of its inputs' items, after perform's
  check of the step; ``MakeVector`` is ``np.array(items, dtype)``
  (``PyArray_FromAny``); ``SpecifyShape`` is a view of ``x`` once its shape
  is the one specified, else perform's ``ValueError``.
"""

from __future__ import annotations

import sys
from functools import partial

import numpy as np

from tenure.linkers.c.cgen import C_DTYPES
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.creation import Alloc, Arange, ExpandTo
from tenure.symbolic.ops.reduce import SumTo
from tenure.symbolic.ops.shape import MakeVector, Shape, SpecifyShape

__all__ = ["ALLOC", "ARANGE", "EXPAND_TO", "MAKE_VECTOR", "SHAPE", "SPECIFY", "SUM_TO",
           "has_c_code", "made_of_scalars", "shape_kind", "spec", "summing", "take", "whats"]

#: what the runtime's interpreter calls each shape step (src/interpret.c)
SHAPE, SUM_TO, EXPAND_TO, ALLOC, ARANGE, MAKE_VECTOR, SPECIFY = range(7)


def has_c_code(node: Apply) -> bool:
    """Whether the runtime runs ``node``: its array of a C dtype, its dims
    integers."""
    if len(node.outputs) != 1 or np.dtype(node.outputs[0].dtype).name not in C_DTYPES:
        return False
    if made_of_scalars(node):
        return True
    if np.dtype(node.inputs[0].dtype).name not in C_DTYPES:
        return False
    return all(np.dtype(d.dtype).kind in "iu" and d.ndim == 0 for d in node.inputs[1:])


def shape_kind(node: Apply) -> int:
    """:data:`SHAPE`, :data:`SUM_TO`, :data:`EXPAND_TO`, :data:`ALLOC`, :data:`ARANGE`,
    :data:`MAKE_VECTOR` or :data:`SPECIFY`."""
    return {Shape: SHAPE, SumTo: SUM_TO, ExpandTo: EXPAND_TO, Alloc: ALLOC, Arange: ARANGE,
            MakeVector: MAKE_VECTOR, SpecifyShape: SPECIFY}[type(node.op)]


def made_of_scalars(node: Apply) -> bool:
    """Whether the node makes its output from scalar inputs of any dtype
    (``Arange``, ``MakeVector``): the step knows the output's dtype, not an
    input array's."""
    return isinstance(node.op, (Arange, MakeVector))


def spec(node: Apply) -> tuple[int, ...]:
    """``SpecifyShape``: per axis, the length, -1 (not specified) or -2 (the
    next symbolic length input); () for the other kinds."""
    if not isinstance(node.op, SpecifyShape):
        return ()
    return tuple(-1 if e is None else -2 if e == "?" else int(e) for e in node.op.spec)


def whats(node: Apply) -> tuple[str, ...]:
    """How errors name each input of a shape node."""
    return tuple(f"tenure: {node.op}: input {i} ({v})" for i, v in enumerate(node.inputs))


def _summed(dtype: np.dtype, g, target: tuple):
    return np.asarray(SumTo.summed_to(g, target), dtype=dtype)


def summing(node: Apply):
    """``SumTo``: ``(g, target) -> array``, perform's sum to ``target`` in the
    output's dtype (the step calls it only when there is something to sum);
    None for the other kinds."""
    if not isinstance(node.op, SumTo):
        return None
    return partial(_summed, node.outputs[0].type.numpy_dtype)


def take(node: Apply, slot: int, offsets: dict) -> int:
    """``Alloc``: the shape table entry of the buffer the plan may hand its
    output (a perform step's take), or -1."""
    return offsets.get(slot, -1) if isinstance(node.op, Alloc) else -1


# How the C linker runs them (.dispatch): steps the interpreter runs (src/shapes.c).
_ENTRY = CEntry("shape", sys.modules[__name__], step="shape")
register_c_op(Shape, _ENTRY)
register_c_op(SumTo, _ENTRY)
register_c_op(ExpandTo, _ENTRY)
register_c_op(Alloc, _ENTRY)
register_c_op(Arange, _ENTRY)
register_c_op(MakeVector, _ENTRY)
register_c_op(SpecifyShape, _ENTRY)
