"""C code for the creation ops of :mod:`tenure.symbolic.ops.creation` that
a gradient graph holds: ``Alloc`` and ``Arange``.

Compiled steps of the graph's module (:mod:`.dispatch`'s contract):

- ``Alloc``: ``value`` broadcast into a new array of the shape its length
  inputs give.  ``fname_shape`` reads the lengths (0-d integer arrays) and
  checks them -- no negative length, a value that broadcasts to them --
  with ``ValueError`` messages as ``perform``'s; ``fname`` checks the
  output's shape and copies the value in with NumPy's broadcasting
  assignment (``PyArray_CopyInto``).  The value and the output share a
  dtype (``Alloc``'s output has the value's): every dtype the runtime knows.
- ``Arange`` of integer bounds into int64 (``arange(n)``, the positions a
  gradient indexes with): ``np.arange``'s length (NumPy's rule: the exact
  difference of the bounds divided by the step in double precision, rounded
  up) and values; a zero step is ``perform``'s ``ValueError``.  Float bounds or another output
  dtype run ``perform`` (NumPy's own rounding of the length).
"""

from __future__ import annotations

import sys

from tenure.linkers.c.cgen import IDENTIFIER, NPY_TYPES, c_string, comment
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.creation import Alloc, Arange

__all__ = ["c_function", "has_c_code"]


def has_c_code(node: Apply) -> bool:
    """Whether the step is C: an ``Alloc`` (not a subclass) of a dtype the
    runtime knows, into at most 32 dimensions; an ``Arange`` of integer
    bounds into int64."""
    out = node.outputs[0]
    if type(node.op) is Alloc:
        return out.dtype in NPY_TYPES and out.ndim <= 32
    if type(node.op) is Arange:
        return out.dtype == "int64" and all(
            v.type.numpy_dtype.kind in "iu" for v in node.inputs)
    return False


def c_function(node: Apply, fname: str) -> str:
    """C source of ``fname_shape`` and ``fname`` for an ``Alloc`` or
    ``Arange`` node."""
    if not IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op}: no C code for this node")
    if type(node.op) is Arange:
        return _arange_function(node, fname)
    return _alloc_function(node, fname)


def _arange_function(node: Apply, fname: str) -> str:
    return f"""
/* {comment(str(node.op))} of integer bounds */
static int {fname}_bounds(PyArrayObject **inputs, npy_int64 *bounds)
{{
    for (int i = 0; i < 3; i++) {{
        PyObject *value = PyNumber_Index((PyObject *)inputs[i]);
        long long v;
        if (value == NULL)
            return -1;
        v = PyLong_AsLongLong(value);
        Py_DECREF(value);
        if (v == -1 && PyErr_Occurred())
            return -1;
        bounds[i] = (npy_int64)v;
    }}
    if (bounds[2] == 0) {{
        PyErr_SetString(PyExc_ValueError, "arange: step must not be 0");
        return -1;
    }}
    return 0;
}}

/* np.arange's length, as NumPy computes it: the exact difference of the
 * bounds (a Python int there; 128 bits here) divided by the step in double
 * precision, rounded up, at least 0. */
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    npy_int64 b[3];
    double length;
    if ({fname}_bounds(inputs, b) < 0)
        return -1;
    length = ceil((double)((__int128)b[1] - (__int128)b[0]) / (double)b[2]);
    if (!(length > 0)) {{
        shape[0] = 0;
        return 0;
    }}
    if (length >= (double)NPY_MAX_INTP) {{
        PyErr_SetString(PyExc_ValueError, "arange: Maximum allowed size exceeded");
        return -1;
    }}
    shape[0] = (npy_intp)length;
    return 0;
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[1];
    npy_int64 b[3];
    char *data;
    if ({fname}_shape(inputs, shape) < 0 || {fname}_bounds(inputs, b) < 0
            || tn_bl_check_out({c_string(fname)}, outputs[0], NPY_INT64, "int64", 1, shape) < 0)
        return -1;
    data = PyArray_BYTES(outputs[0]);
    for (npy_intp i = 0; i < shape[0]; i++) {{
        const npy_int64 v = (npy_int64)((npy_uint64)b[0] + (npy_uint64)i * (npy_uint64)b[2]);
        memcpy(data + i * PyArray_STRIDE(outputs[0], 0), &v, sizeof v);
    }}
    return 0;
}}
"""


def _alloc_function(node: Apply, fname: str) -> str:
    out = node.outputs[0]
    nd, tnum, tname = out.ndim, NPY_TYPES[out.dtype], c_string(out.dtype)
    return f"""
/* {comment(str(node.op))} into {nd} dimension(s) of {out.dtype} */
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    PyArrayObject *value = inputs[0];
    const int value_nd = PyArray_NDIM(value);
    for (int d = 0; d < {nd}; d++) {{
        shape[d] = PyArray_PyIntAsIntp((PyObject *)inputs[1 + d]);
        if (shape[d] == -1 && PyErr_Occurred())
            return -1;
    }}
    for (int d = 0; d < {nd}; d++)
        if (shape[d] < 0) {{
            PyErr_Format(PyExc_ValueError, "alloc: negative dimensions are not allowed, got "
                         "length %zd for axis %d", (Py_ssize_t)shape[d], d);
            return -1;
        }}
    if (value_nd > {nd}) {{
        PyErr_Format(PyExc_ValueError, "alloc: value of %d dimension(s) cannot be broadcast "
                     "to %d", value_nd, {nd});
        return -1;
    }}
    for (int d = 0; d < value_nd; d++) {{
        const npy_intp length = PyArray_DIM(value, d), want = shape[{nd} - value_nd + d];
        if (length != 1 && length != want) {{
            PyErr_Format(PyExc_ValueError, "alloc: value of length %zd along its axis %d "
                         "cannot be broadcast to length %zd", (Py_ssize_t)length, d,
                         (Py_ssize_t)want);
            return -1;
        }}
    }}
    return 0;
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[{max(nd, 1)}];
    if ({fname}_shape(inputs, shape) < 0
            || tn_bl_check({c_string(fname)}, "input 0", inputs[0], {tnum}, {tname},
                           PyArray_NDIM(inputs[0])) < 0
            || tn_bl_check_out({c_string(fname)}, outputs[0], {tnum}, {tname}, {nd}, shape) < 0)
        return -1;
    return PyArray_CopyInto(outputs[0], inputs[0]);
}}
"""


# How the C linker runs them (.dispatch): compiled steps of the graph's module.
_FAMILY = sys.modules[__name__]
register_c_op(Alloc, CEntry("creation", _FAMILY))
register_c_op(Arange, CEntry("creation", _FAMILY))
