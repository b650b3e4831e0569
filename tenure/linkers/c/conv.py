"""C code for the 2-d correlation and its gradients (``Corr2d``,
``Corr2dGradInputs``, ``Corr2dGradFilters``: :mod:`tenure.symbolic.ops.corr2d`).

The work is the C runtime's (``src/conv.c.src``: ``tn_conv_shape``,
``tn_conv_run``); a node's compiled step is glue that hands it the node's
geometry.  Image by image and group by group, the runtime writes one
image's columns (im2col: a row per channel and filter tap, a column per
window position, zeros for the padding) into a buffer it allocates once
per call, and multiplies them with BLAS ``gemm`` (the gradient for the
input multiplies first and adds the columns back: col2im).  So the step's
only temporary is one image's columns of one group, which the op's
``workspace_bytes`` also counts for the memory plan.

The contract (:mod:`.dispatch`'s compiled steps): the arrays of one float
dtype (float32 or float64) and 4 dimensions, any strides (read from
contiguous copies where they are not contiguous), the lengths of the
gradient for the input 0-d integer arrays; shapes checked against each
other and the geometry on every call, with the ``ValueError`` ``perform``
raises; the output written in place when it is C-contiguous, else through a
temporary.  The GIL is released while the images are computed.  Other
dtypes (integers, mixed) run ``perform``.
"""

from __future__ import annotations

import sys

from tenure.linkers.c.cgen import IDENTIFIER, NPY_TYPES, c_string, comment
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.corr2d import Corr2d, Corr2dGradFilters, Corr2dGradInputs

__all__ = ["c_function", "has_c_code", "step_workspace"]

#: the runtime's kind of each op (src/conv.c.src: tn_conv_shape)
_KIND = {Corr2d: 0, Corr2dGradInputs: 1, Corr2dGradFilters: 2}
_FLOATS = ("float32", "float64")


def has_c_code(node: Apply) -> bool:
    """Whether the runtime computes ``node``: its two arrays and its output
    of one float dtype."""
    if type(node.op) not in _KIND:
        return False
    dtypes = {v.dtype for v in node.inputs[:2]} | {node.outputs[0].dtype}
    return len(dtypes) == 1 and node.outputs[0].dtype in _FLOATS


def _geometry(op) -> str:
    """The op's ``tn_conv_geometry`` initializer."""
    (kh, kw), (sh, sw), (dh, dw) = op.window, op.stride, op.dilation
    (top, bottom), (left, right) = op.pads
    values = (kh, kw, sh, sw, dh, dw, top, bottom, left, right, op.groups)
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def c_function(node: Apply, fname: str) -> str:
    """C source of ``fname_shape`` and ``fname`` for a node of the family
    (the contract of :mod:`.dispatch`'s compiled steps)."""
    if not IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op}: no C code for these dtypes")
    dtype = node.outputs[0].dtype
    kind = _KIND[type(node.op)]
    name, tnum, tname = c_string(fname), NPY_TYPES[dtype], c_string(dtype)
    return f"""
/* {comment(str(node.op))} on {dtype} */
static const tn_conv_geometry {fname}_geometry = {_geometry(node.op)};

static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    return tn_conv_shape({name}, {kind}, &{fname}_geometry, inputs, {tnum}, {tname}, shape);
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    return tn_conv_run({name}, {kind}, &{fname}_geometry, inputs, outputs[0], {tnum},
                       {tname});
}}
"""


def step_workspace(node: Apply, shapes, memo: dict) -> int:
    """The step's temporary for the memory plan: one image's columns of one
    group (contiguous copies of strided inputs aside)."""
    x_shape, y_shape = node.op.geometry_shapes(node, shapes)
    if x_shape is None or y_shape is None:
        return 0
    return node.op.columns_bytes(x_shape, y_shape, node.outputs[0].type.numpy_dtype.itemsize)


# How the C linker runs them (.dispatch): compiled steps of the graph's
# module, glue around the runtime's kernels.
_FAMILY = sys.modules[__name__]
for _op_class in _KIND:
    register_c_op(_op_class, CEntry("conv", _FAMILY, workspace=step_workspace))
