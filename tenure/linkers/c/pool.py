"""C code for max pooling and its gradient (``MaxPool2d``,
``MaxPool2dGrad``: :mod:`tenure.symbolic.ops.maxpool`).

The work is the C runtime's (``src/pool.c.src``: ``tn_pool_shape``,
``tn_pool_run``); a node's compiled step is glue that hands it the node's
geometry.  Plane by plane (the leading axes as one), each window's maximum
is read from the input where it is, and the gradient finds the maxima
again and adds each window's share of the gradient to them: no temporary
but the output.

The contract (:mod:`.dispatch`'s compiled steps): the arrays of one float
dtype (float32 or float64) and the node's number of dimensions, any
strides (read from contiguous copies where they are not contiguous);
shapes checked against each other and the geometry on every call, with a
``ValueError``; the output written in place when it is C-contiguous, else
through a temporary.  The GIL is released while the planes are computed.
Integer inputs run ``perform``.
"""

from __future__ import annotations

import sys

from tenure.linkers.c.cgen import IDENTIFIER, NPY_TYPES, c_string, comment
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.maxpool import MaxPool2d, MaxPool2dGrad

__all__ = ["c_function", "has_c_code"]

#: the runtime's kind of each op (src/pool.c.src: tn_pool_shape)
_KIND = {MaxPool2d: 0, MaxPool2dGrad: 1}
_FLOATS = ("float32", "float64")


def has_c_code(node: Apply) -> bool:
    """Whether the runtime computes ``node``: its arrays and its output of
    one float dtype."""
    if type(node.op) not in _KIND:
        return False
    dtypes = {v.dtype for v in node.inputs} | {node.outputs[0].dtype}
    return len(dtypes) == 1 and node.outputs[0].dtype in _FLOATS


def _geometry(op) -> str:
    """The op's ``tn_pool_geometry`` initializer."""
    (kh, kw), (sh, sw) = op.window, op.stride
    (top, bottom), (left, right) = op.pads
    return "{" + ", ".join(str(int(v)) for v in (kh, kw, sh, sw, top, bottom, left, right)) + "}"


def c_function(node: Apply, fname: str) -> str:
    """C source of ``fname_shape`` and ``fname`` for a node of the family
    (the contract of :mod:`.dispatch`'s compiled steps)."""
    if not IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op}: no C code for these dtypes")
    dtype = node.outputs[0].dtype
    kind, ndim = _KIND[type(node.op)], node.inputs[0].ndim
    name, tnum, tname = c_string(fname), NPY_TYPES[dtype], c_string(dtype)
    return f"""
/* {comment(str(node.op))} on {dtype} */
static const tn_pool_geometry {fname}_geometry = {_geometry(node.op)};

static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    return tn_pool_shape({name}, {kind}, &{fname}_geometry, inputs, {tnum}, {tname}, {ndim},
                         shape);
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    return tn_pool_run({name}, {kind}, &{fname}_geometry, inputs, outputs[0], {tnum}, {tname},
                       {ndim});
}}
"""


# How the C linker runs them (.dispatch): compiled steps of the graph's
# module, glue around the runtime's kernels (no temporaries: the default
# workspace, none).
_FAMILY = sys.modules[__name__]
for _op_class in _KIND:
    register_c_op(_op_class, CEntry("pool", _FAMILY))
