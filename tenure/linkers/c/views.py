"""View ops in C: ``DimShuffle``, ``Reshape`` and basic ``Subtensor``.

A view step allocates no data: it returns a new array object over its
input's memory (``base`` set to the input, as NumPy does), with the input's
dtype and writeability.

Nothing is generated per node: the schedule interpreter (``src/interpret.c``)
makes the view with the runtime's helpers (``tn_vw_*``, ``src/views.c``) from
what this module says of a node: :func:`has_c_code`, :func:`view_kind`,
:func:`whats` (how errors name each input) and, for ``Subtensor``,
:func:`index_entries` (the index pattern as numbers).

And for :mod:`.subtensor`, which writes into the same regions:
:func:`region_function` ``(pattern, fname, what, input_whats, shift) -> str``
defines
``static int fname(PyArrayObject *a, PyObject **inputs, npy_intp *dims,
npy_intp *strides, char **data)``, the region ``a[pattern]`` (the index
scalars are ``inputs[pos + shift]``) as its shape, strides and first element.

A view step -- its contract with the caller:

- input ``i`` is the node's input ``i`` as the slot holds it (a borrowed
  reference, never NULL).  The array input must be an ndarray (or a NumPy
  scalar, for a 0-d one) of the node's dtype and ndim, else ``TypeError``;
  index scalars may be 0-d integer arrays, NumPy integers or Python ints.
- The output is a new array, or an exception (the caller holds the GIL).
  It never writes memory.
- Semantics are ``perform``'s, to the exception type: ``DimShuffle`` drops
  only length-1 axes (``ValueError``); new axes have stride 0 as in NumPy.
  ``Subtensor`` indexes as Python and NumPy do: negative integers count from
  the end, an integer out of range is an ``IndexError`` naming the input and
  axis, slices clip as ``slice.indices`` does (negative steps, None bounds,
  empty results, which like NumPy's start at the first element with step 1),
  a zero step is a ``ValueError``.  ``Reshape`` is ``np.reshape`` itself
  (``PyArray_Newshape``: a view whenever NumPy can make one, else a copy),
  with ``perform``'s checks and ``ValueError`` messages.
"""

from __future__ import annotations

import sys

import numpy as np

from tenure.linkers.c.cgen import C_DTYPES
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.indexing import In, Subtensor
from tenure.symbolic.ops.shape import DimShuffle, Reshape

__all__ = ["DIMSHUFFLE", "INDEX_WIDTH", "INT", "NEWAXIS", "RESHAPE", "SLICE",
           "SUBTENSOR", "has_c_code", "index_entries", "pattern_supported", "region_function",
           "view_kind", "whats"]

#: the largest static index printed into C (Python ints are unbounded; beyond
#: this every index is out of range and every slice bound clips the same way)
_INTP_MAX = 2 ** 63 - 1


def has_c_code(node: Apply) -> bool:
    """Whether the runtime makes ``node``'s view."""
    op = node.op
    if not isinstance(op, (DimShuffle, Reshape, Subtensor)) or len(node.outputs) != 1:
        return False
    if np.dtype(node.inputs[0].dtype).name not in C_DTYPES:
        return False
    if isinstance(op, Reshape):
        return np.dtype(node.inputs[1].dtype).kind in "iu" and node.inputs[1].ndim == 1
    if isinstance(op, Subtensor):
        return pattern_supported(op.pattern)
    return True


def pattern_supported(pattern) -> bool:
    """Whether every entry is one :func:`region_function` prints."""
    for entry in pattern:
        if entry[0] == "newaxis":
            continue
        if entry[0] not in ("int", "slice"):
            return False
        for slot in entry[1:]:
            if not (slot is None or isinstance(slot, (int, In))) or isinstance(slot, bool):
                return False
    return True


#: what the runtime's interpreter calls each view (src/interpret.c)
DIMSHUFFLE, RESHAPE, SUBTENSOR = range(3)
#: the kinds of index entries, and the ints per entry (kind, then three values
#: of (has, from an input, value or input index))
NEWAXIS, INT, SLICE = range(3)
INDEX_WIDTH = 10


def whats(node: Apply) -> tuple[str, ...]:
    """How errors name each input of a view node."""
    return tuple(f"tenure: {node.op}: input {i} ({v})" for i, v in enumerate(node.inputs))


def view_kind(node: Apply) -> int:
    """:data:`DIMSHUFFLE`, :data:`RESHAPE` or :data:`SUBTENSOR`."""
    return {DimShuffle: DIMSHUFFLE, Reshape: RESHAPE, Subtensor: SUBTENSOR}[type(node.op)]


def index_entries(pattern) -> tuple[int, ...]:
    """A basic index pattern as the interpreter reads it: :data:`INDEX_WIDTH`
    ints per entry, ``In(pos)`` being input ``pos``."""
    if not pattern_supported(pattern):
        raise NotImplementedError(f"no C code for the index pattern {pattern}")
    out = []
    for entry in pattern:
        kind = {"newaxis": NEWAXIS, "int": INT, "slice": SLICE}[entry[0]]
        values = []
        for slot in list(entry[1:]) + [None] * (4 - len(entry)):
            if slot is None:
                values += [0, 0, 0]
            elif isinstance(slot, In):
                values += [1, 1, slot.pos]
            else:
                values += [1, 0, max(-_INTP_MAX, min(_INTP_MAX, int(slot)))]
        out += [kind, *values]
    return tuple(out)


def _bound(slot) -> tuple[str, str]:
    """A slot as C: (has-value flag, value expression).  Index inputs were
    read into ``s<pos>``; static ints are clamped (see ``_INTP_MAX``)."""
    if slot is None:
        return "0", "0"
    if isinstance(slot, In):
        return "1", f"s{slot.pos}"
    value = max(-_INTP_MAX, min(_INTP_MAX, int(slot)))
    return "1", f"(npy_intp){value}LL"


def region_function(pattern, fname: str, what: str, input_whats: list[str],
                    shift: int = 0) -> str:
    """C for ``static int fname(PyArrayObject *a, PyObject **in, npy_intp
    *dims, npy_intp *strides, char **data)``: the region ``a[pattern]``
    (see the module doc).  The pattern's ``In(pos)`` is ``in[pos + shift]``
    (``shift`` 1 for ``IncSubtensor``, whose value comes before the index
    inputs); ``what`` names ``a`` in errors, ``input_whats[pos + shift]``
    that input."""
    if not pattern_supported(pattern):
        raise NotImplementedError(f"no C code for the index pattern {pattern}")
    lines = [f"static int {fname}(PyArrayObject *a, PyObject **in, npy_intp *dims, "
             "npy_intp *strides, char **data)", "{"]
    positions = sorted({s.pos for e in pattern for s in e[1:] if isinstance(s, In)})
    for pos in positions:
        lines += [f"    npy_intp s{pos};",
                  f"    if (tn_vw_scalar(in[{pos + shift}], {input_whats[pos + shift]}, &s{pos}) "
                  "< 0) return -1;"]
    lines += ["    *data = PyArray_BYTES(a);"]
    axis = k = 0
    for entry in pattern:
        kind = entry[0]
        if kind == "newaxis":
            lines.append(f"    dims[{k}] = 1; strides[{k}] = 0;")
            k += 1
            continue
        if kind == "int":
            _, value = _bound(entry[1])
            lines.append(f"    if (tn_vw_int_index({value}, a, {axis}, {what}, data) < 0) "
                         "return -1;")
        else:
            args = ", ".join(", ".join(_bound(s)) for s in entry[1:])
            lines.append(f"    if (tn_vw_slice(a, {axis}, {args}, {what}, data, &dims[{k}], "
                         f"&strides[{k}]) < 0) return -1;")
            k += 1
        axis += 1
    lines += ["    (void)in; (void)dims; (void)strides;", "    return 0;", "}", ""]
    return "\n".join(lines)


# How the C linker runs them (.dispatch): views the interpreter makes (src/views.c).
_ENTRY = CEntry("view", sys.modules[__name__], step="view")
register_c_op(DimShuffle, _ENTRY)
register_c_op(Reshape, _ENTRY)
register_c_op(Subtensor, _ENTRY)
