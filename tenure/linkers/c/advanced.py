"""Integer array indexing in C: ``AdvancedSubtensor`` and
``AdvancedIncSubtensor`` (set or inc, in place or not).

For an index of integer arrays on the leading axes and full slices on the
rest (``x[rows, cols]``, ``x[i]``, ``x[i, :]``: the gathers and scatters of
embeddings and cross-entropies), the schedule interpreter
(``src/interpret.c``) runs the step with the runtime's helpers
(``tn_ad_*``, ``src/advanced.c``) from what this module says of a node
(:func:`has_c_code`, :func:`kind`, :func:`arrays`, :func:`whats`); other
patterns (ints, bounded slices, new axes) run their perform.

An advanced indexing step -- its contract with the caller:

- input 0 is ``x`` as the slot holds it: an ndarray of the node's dtype and
  ndim, else ``TypeError`` naming the input; the index inputs are what the
  slots hold, handed to NumPy as perform hands them.
- The indexing is NumPy's own, through its C entry points
  (``PyObject_GetItem``, ``PyObject_SetItem``, ``np.add.at``): the same
  elements, order of accumulation (repeated indices add up in index order,
  a set keeps the last write) and errors (an index out of bounds) as
  perform.  The checks perform makes itself come with its messages: index
  arrays that do not broadcast together (``IndexError``), a value that does
  not broadcast to the region (``ValueError``).
- An update writes into ``x`` itself when in place and ``x`` is writeable,
  else into the dead buffer the plan hands on (when it has ``x``'s shape and
  overlaps no input), else into a new copy; index arrays and values that
  overlap what it writes are read from copies.
"""

from __future__ import annotations

import sys

import numpy as np

from tenure.linkers.c.cgen import C_DTYPES
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.indexing import AdvancedSubtensor, In
from tenure.symbolic.ops.subtensor_update import AdvancedIncSubtensor

__all__ = ["INC", "SET", "TAKE", "arrays", "has_c_code", "kind", "whats"]

#: what the runtime's interpreter calls each step (src/interpret.c)
TAKE, SET, INC = range(3)


def _full_slice(entry) -> bool:
    return entry[0] == "slice" and all(slot is None for slot in entry[1:])


def pattern_supported(pattern) -> bool:
    """Integer arrays on the leading axes (at least one), full slices after."""
    kinds = ["array" if e[0] == "array" else "full" if _full_slice(e) else "other"
             for e in pattern]
    n = kinds.count("array")
    return n > 0 and kinds == ["array"] * n + ["full"] * (len(kinds) - n)


def has_c_code(node: Apply) -> bool:
    """Whether the runtime runs ``node``: a supported pattern, ``x`` of a C
    dtype, integer index arrays."""
    op = node.op
    if len(node.outputs) != 1 or not pattern_supported(op.pattern):
        return False
    if np.dtype(node.inputs[0].dtype).name not in C_DTYPES:
        return False
    first = 2 if isinstance(op, AdvancedIncSubtensor) else 1
    return all(np.dtype(v.dtype).kind in "iu" for v in node.inputs[first:])


def kind(node: Apply) -> int:
    """:data:`TAKE`, :data:`SET` or :data:`INC`."""
    if isinstance(node.op, AdvancedSubtensor):
        return TAKE
    return SET if node.op.set_instead_of_inc else INC


def arrays(node: Apply) -> tuple[int, ...]:
    """Per pattern entry, the node input holding its index array, or -1 (a
    full slice).  ``In(pos)`` is input ``pos`` of an ``AdvancedSubtensor``,
    ``pos + 1`` of an update (whose value ``v`` comes before the index)."""
    shift = 0 if isinstance(node.op, AdvancedSubtensor) else 1
    return tuple(e[1].pos + shift if e[0] == "array" and isinstance(e[1], In) else -1
                 for e in node.op.pattern)


def whats(node: Apply) -> tuple[str, ...]:
    """How errors name each input of the node."""
    return tuple(f"tenure: {node.op}: input {i} ({v})" for i, v in enumerate(node.inputs))


def fn_name(node: Apply) -> str:
    """The name errors give the op (perform's: set_subtensor, inc_subtensor)."""
    return getattr(node.op, "fn_name", str(node.op))


def take(node: Apply, slot: int, offsets: dict) -> int:
    """An update: the shape table entry of the buffer the plan may hand its
    output, or -1."""
    return -1 if isinstance(node.op, AdvancedSubtensor) else offsets.get(slot, -1)


def add_at(node: Apply):
    """An inc: ``np.add.at``; else None."""
    return np.add.at if kind(node) == INC else None


# How the C linker runs them (.dispatch): steps the interpreter runs (src/advanced.c).
_ENTRY = CEntry("advanced", sys.modules[__name__], step="advanced")
register_c_op(AdvancedSubtensor, _ENTRY)
register_c_op(AdvancedIncSubtensor, _ENTRY)
