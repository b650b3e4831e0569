"""C code for ``Shape`` (:mod:`tenure.symbolic.ops.shape`): an array's
shape as an int64 vector.

A compiled step of the graph's module (:mod:`.dispatch`'s contract): the
input is any array of the node's number of dimensions (any dtype, read for
its shape only), the output an int64 vector of that length.
"""

from __future__ import annotations

import sys

from tenure.linkers.c.cgen import IDENTIFIER, c_string, comment
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.shape import Shape

__all__ = ["c_function", "has_c_code"]


def has_c_code(node: Apply) -> bool:
    """Whether the step is C: a ``Shape`` of at most 32 dimensions."""
    return type(node.op) is Shape and node.inputs[0].ndim <= 32


def c_function(node: Apply, fname: str) -> str:
    """C source of ``fname_shape`` and ``fname`` for a ``Shape`` node."""
    if not IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op}: no C code for this node")
    nd, name = node.inputs[0].ndim, c_string(fname)
    return f"""
/* {comment(str(node.op))} of a {nd}-d array */
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    if (PyArray_NDIM(inputs[0]) != {nd}) {{
        PyErr_Format(PyExc_TypeError, "%s: input 0: expected %d dimension(s), got %d",
                     {name}, {nd}, PyArray_NDIM(inputs[0]));
        return -1;
    }}
    shape[0] = {nd};
    return 0;
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[1];
    char *data;
    if ({fname}_shape(inputs, shape) < 0
            || tn_bl_check_out({name}, outputs[0], NPY_INT64, "int64", 1, shape) < 0)
        return -1;
    data = PyArray_BYTES(outputs[0]);
    for (int d = 0; d < {nd}; d++) {{
        const npy_int64 length = (npy_int64)PyArray_DIM(inputs[0], d);
        memcpy(data + d * PyArray_STRIDE(outputs[0], 0), &length, sizeof length);
    }}
    return 0;
}}
"""


# How the C linker runs it (.dispatch): a compiled step of the graph's module.
_FAMILY = sys.modules[__name__]
register_c_op(Shape, CEntry("shape", _FAMILY))
