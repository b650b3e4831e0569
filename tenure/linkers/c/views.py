"""C code for view ops: ``DimShuffle``, ``Reshape`` and basic ``Subtensor``.

A view step allocates no data: it returns a new array object over its
input's memory (``base`` set to the input, as NumPy does), with the input's
dtype and writeability.

What the C linker calls:

- :func:`has_c_code` ``(node) -> bool``: whether :func:`c_function` can handle it.
- :func:`c_function` ``(node, fname) -> str``: the C definition of
  ``static PyObject *fname(PyObject **inputs)``.
- the C runtime's API (:func:`.runtime.header`) earlier in the module: the
  helpers the functions call, ``tn_vw_*``, are in ``src/views.c``.
- :data:`COMPILE_FLAGS`: none needed.

And for :mod:`.subtensor`, which writes into the same regions:
:func:`region_function` ``(pattern, fname, what, input_whats, shift) -> str``
defines
``static int fname(PyArrayObject *a, PyObject **inputs, npy_intp *dims,
npy_intp *strides, char **data)``, the region ``a[pattern]`` (the index
scalars are ``inputs[pos + shift]``) as its shape, strides and first element.

The generated function -- its contract with the caller:

- ``inputs[i]`` is node input ``i`` as the slot holds it (a borrowed
  reference, never NULL).  The array input must be an ndarray (or a NumPy
  scalar, for a 0-d one) of the node's dtype and ndim, else ``TypeError``;
  index scalars may be 0-d integer arrays, NumPy integers or Python ints.
- Returns a new reference, or NULL with a Python exception set (the caller
  holds the GIL).  It never writes memory.
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

import numpy as np

from tenure.linkers.c.cgen import C_DTYPES, c_string, typenum
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.indexing import In, Subtensor
from tenure.symbolic.ops.shape import DimShuffle, Reshape

__all__ = ["COMPILE_FLAGS", "DIMSHUFFLE", "INDEX_WIDTH", "INT", "NEWAXIS", "RESHAPE", "SLICE",
           "SUBTENSOR", "c_function", "has_c_code", "index_entries", "pattern_supported",
           "region_function", "typenum", "view_kind", "whats"]

COMPILE_FLAGS: tuple[str, ...] = ()

#: the largest static index printed into C (Python ints are unbounded; beyond
#: this every index is out of range and every slice bound clips the same way)
_INTP_MAX = 2 ** 63 - 1



def has_c_code(node: Apply) -> bool:
    """Whether :func:`c_function` can handle ``node``."""
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


def index_entries(pattern, shift: int = 0) -> tuple[int, ...]:
    """A basic index pattern as the interpreter reads it: :data:`INDEX_WIDTH`
    ints per entry, ``In(pos)`` being input ``pos + shift``."""
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
                values += [1, 1, slot.pos + shift]
            else:
                values += [1, 0, max(-_INTP_MAX, min(_INTP_MAX, int(slot)))]
        out += [kind, *values]
    return tuple(out)


def c_function(node: Apply, fname: str) -> str:
    """The C definition of ``static PyObject *fname(PyObject **inputs)``."""
    op = node.op
    if isinstance(op, DimShuffle):
        return _dimshuffle(node, fname)
    if isinstance(op, Reshape):
        return _reshape(node, fname)
    if isinstance(op, Subtensor):
        return _subtensor(node, fname)
    raise NotImplementedError(f"{op} has no view C code")


def _what(node: Apply, i: int) -> str:
    """The C literal naming input ``i`` of ``node`` in errors."""
    return c_string(f"tenure: {node.op}: input {i} ({node.inputs[i]})")


def _head(node: Apply, fname: str) -> list[str]:
    """Start of a view function: `a` is input 0, checked (dtype and ndim)."""
    x = node.inputs[0]
    return [f"static PyObject *{fname}(PyObject **in)", "{",
            f"    PyArrayObject *a = tn_vw_as_array(in[0], {typenum(x.dtype)}, {x.ndim}, "
            f"{_what(node, 0)});",
            "    PyObject *r;",
            "    if (a == NULL) return NULL;"]


def _dimshuffle(node: Apply, fname: str) -> str:
    op = node.op
    nd = len(op.new_order)
    lines = _head(node, fname)
    lines += [f"    npy_intp dims[{max(nd, 1)}], strides[{max(nd, 1)}];",
              "    char buf[64 * 24];"]
    # Dropped axes must have length 1 (perform's check and message).
    for axis in op.drop:
        msg = c_string(f"{op}: cannot drop axis {axis} of an array of shape %s: it has "
                        "length %zd, not 1")
        lines += [f"    if (PyArray_DIM(a, {axis}) != 1) {{",
                  f"        PyErr_Format(PyExc_ValueError, {msg}, tn_vw_shape_str(buf, "
                  f"sizeof buf, PyArray_NDIM(a), PyArray_DIMS(a)), "
                  f"(Py_ssize_t)PyArray_DIM(a, {axis}));",
                  "        Py_DECREF(a);", "        return NULL;", "    }"]
    # Kept axes keep their length and stride; a new axis has stride 0 as in NumPy.
    for k, e in enumerate(op.new_order):
        if e == "x":
            lines.append(f"    dims[{k}] = 1; strides[{k}] = 0;")
        else:
            lines.append(f"    dims[{k}] = PyArray_DIM(a, {e}); "
                         f"strides[{k}] = PyArray_STRIDE(a, {e});")
    lines += [f"    r = tn_vw_view(a, {nd}, dims, strides, PyArray_BYTES(a));",
              "    (void)buf;", "    Py_DECREF(a);", "    return r;", "}", ""]
    return "\n".join(lines)


def _reshape(node: Apply, fname: str) -> str:
    op = node.op
    nd = op.ndim
    n = max(nd, 1)
    shp = _what(node, 1)
    invalid = c_string("reshape: invalid shape %s (lengths must be >= 0, with at most one -1)")
    cannot = c_string("reshape: cannot reshape an array of shape %s (size %zd) into shape %s")
    lines = _head(node, fname)
    lines += [
        f"    npy_intp dims[{n}];",
        "    PyArray_Dims newshape = {dims, " + str(nd) + "};",
        "    PyArrayObject *s;",
        "    int unknown = 0, bad = 0;",
        "    char buf[64 * 24], buf2[64 * 24];",
        "    if (!PyArray_Check(in[1]) || PyArray_NDIM((PyArrayObject *)in[1]) != 1",
        f"            || PyArray_DIM((PyArrayObject *)in[1], 0) != {nd}",
        "            || !PyArray_ISINTEGER((PyArrayObject *)in[1])",
        "            || !PyArray_ISNOTSWAPPED((PyArrayObject *)in[1])) {",
        f"        PyErr_Format(PyExc_TypeError, \"%s: expected an integer vector of length {nd}\","
        f" {shp});",
        "        Py_DECREF(a);", "        return NULL;", "    }",
        "    s = (PyArrayObject *)in[1];",
        f"    for (int d = 0; d < {nd}; d++) {{",
        "        (void)tn_vw_read_int(PyArray_GETPTR1(s, d), PyArray_TYPE(s), &dims[d]);",
        "        unknown += dims[d] == -1;",
        "        bad |= dims[d] < -1;",
        "    }",
        "    if (bad || unknown > 1) {",
        f"        PyErr_Format(PyExc_ValueError, {invalid}, "
        f"tn_vw_shape_str(buf, sizeof buf, {nd}, dims));",
        "        Py_DECREF(a);", "        return NULL;", "    }",
        # np.reshape is PyArray_Newshape in C order: the same view-or-copy choice.
        "    r = PyArray_Newshape(a, &newshape, NPY_CORDER);",
        "    if (r == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {",
        "        PyErr_Clear();",
        f"        PyErr_Format(PyExc_ValueError, {cannot}, "
        "tn_vw_shape_str(buf, sizeof buf, PyArray_NDIM(a), PyArray_DIMS(a)), "
        f"(Py_ssize_t)PyArray_SIZE(a), tn_vw_shape_str(buf2, sizeof buf2, {nd}, dims));",
        "    }",
        "    Py_DECREF(a);", "    return r;", "}", ""]
    return "\n".join(lines)


def _subtensor(node: Apply, fname: str) -> str:
    op = node.op
    nd = node.outputs[0].ndim
    n = max(nd, 1)
    region = region_function(op.pattern, f"{fname}_region", _what(node, 0),
                             [_what(node, i) for i in range(len(node.inputs))])
    lines = _head(node, fname)
    lines += [f"    npy_intp dims[{n}], strides[{n}];",
              "    char *data;",
              f"    if ({fname}_region(a, in, dims, strides, &data) < 0) {{",
              "        Py_DECREF(a);", "        return NULL;", "    }",
              f"    r = tn_vw_view(a, {nd}, dims, strides, data);",
              "    Py_DECREF(a);", "    return r;", "}", ""]
    return region + "\n".join(lines)


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
