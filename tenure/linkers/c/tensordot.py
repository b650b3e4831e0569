"""C code for ``TensorDot``: ``np.tensordot``'s one matrix product, run by
the C runtime's product driver.

As ``np.tensordot`` does, the compiled step sees each operand as a matrix:
the first as (its free axes, its summed axes), the second as (its summed
axes, its free axes), the summed ones in the op's pairing order.  Each is a
transposed view reshaped (``PyArray_Newshape``: a view when the axes allow
it, else a C-ordered copy, as NumPy's reshape makes), and the output is the
(free axes of the first, free axes of the second) matrix: a view of a
C-contiguous output, else a temporary copied into it.  The product is
``tn_mm_run``'s, the runtime's driver of ``Dot`` (BLAS for float32 and
float64, its C loops for the integers and bool, inputs overlapping the
output read from copies): the numbers of a ``Dot`` of those matrices.

What the C linker uses (:mod:`.dispatch`): :func:`has_c_code` (the
operands and the result of one dtype that the product kernels know) and
:func:`c_function` (the step's ``fname_shape``, which checks the operands
and the summed lengths, and ``fname``).
"""

from __future__ import annotations

import sys

from tenure.linkers.c.cgen import IDENTIFIER, NPY_TYPES, c_string, comment, input_label
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.blas import TensorDot, free_axes

__all__ = ["c_function", "has_c_code"]


def has_c_code(node: Apply) -> bool:
    """Whether the C runtime computes ``node``: a ``TensorDot`` whose
    operands and result share a dtype of the product kernels (not complex
    or float16: those run its ``perform``)."""
    if not isinstance(node.op, TensorDot):
        return False
    dtypes = {v.dtype for v in node.inputs} | {node.outputs[0].dtype}
    return len(dtypes) == 1 and node.outputs[0].dtype in NPY_TYPES


def _c_ints(values) -> str:
    """A C initializer of ``values`` (one unused 0 when there are none: C
    has no empty arrays)."""
    return "{" + ", ".join(str(int(v)) for v in (list(values) or [0])) + "}"


def c_function(node: Apply, fname: str) -> str:
    """C source of ``fname_shape`` and ``fname`` computing a ``TensorDot``
    node (the contract of :mod:`.dispatch`'s compiled steps)."""
    if not IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op}: no C code for these dtypes")
    op = node.op
    a, b = node.inputs
    dtype = node.outputs[0].dtype
    a_free, b_free = free_axes(a.ndim, op.a_axes), free_axes(b.ndim, op.b_axes)
    n_out = len(a_free) + len(b_free)
    name, tnum, tname = c_string(fname), NPY_TYPES[dtype], c_string(dtype)
    la, lb = (c_string(input_label(node, i)) for i in range(2))
    out_dims = "\n    ".join(
        [f"shape[{k}] = PyArray_DIM(a, {i});" for k, i in enumerate(a_free)]
        + [f"shape[{len(a_free) + k}] = PyArray_DIM(b, {j});" for k, j in enumerate(b_free)])
    return f"""
/* {comment(str(op))} on {dtype} */
static npy_intp {fname}_a_order[] = {_c_ints(list(a_free) + list(op.a_axes))};
static npy_intp {fname}_b_order[] = {_c_ints(list(op.b_axes) + list(b_free))};
static const int {fname}_a_summed[] = {_c_ints(op.a_axes)};
static const int {fname}_b_summed[] = {_c_ints(op.b_axes)};

static PyObject *{fname}_dims(PyArrayObject *x)
{{
    PyObject *dims = PyTuple_New(PyArray_NDIM(x));
    for (int d = 0; dims != NULL && d < PyArray_NDIM(x); d++) {{
        PyObject *n = PyLong_FromSsize_t(PyArray_DIM(x, d));
        if (n == NULL) {{
            Py_CLEAR(dims);
            break;
        }}
        PyTuple_SET_ITEM(dims, d, n);
    }}
    return dims;
}}

/* The operands' dtypes, ndims and summed lengths checked; the result's shape. */
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    PyArrayObject *a = inputs[0], *b = inputs[1];
    if (tn_bl_check({name}, {la}, a, {tnum}, {tname}, {a.ndim}) < 0
            || tn_bl_check({name}, {lb}, b, {tnum}, {tname}, {b.ndim}) < 0)
        return -1;
    for (int k = 0; k < {len(op.a_axes)}; k++) {{
        const int i = {fname}_a_summed[k], j = {fname}_b_summed[k];
        if (PyArray_DIM(a, i) != PyArray_DIM(b, j)) {{
            PyObject *sa = {fname}_dims(a), *sb = sa == NULL ? NULL : {fname}_dims(b);
            if (sb != NULL)
                PyErr_Format(PyExc_ValueError, "tensordot: shapes %R and %R are not aligned: "
                             "axis %d of the first (length %zd) is summed against axis %d of "
                             "the second (length %zd)", sa, sb, i, (Py_ssize_t)PyArray_DIM(a, i),
                             j, (Py_ssize_t)PyArray_DIM(b, j));
            Py_XDECREF(sa);
            Py_XDECREF(sb);
            return -1;
        }}
    }}
    {out_dims}
    (void)shape;
    return 0;
}}

/* a as (free, summed) and b as (summed, free) matrices, their product into
 * the output as a (free of a, free of b) matrix. */
static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    static const int no_batch[1] = {{-1}};
    const tn_mm_axes axes = {{0, no_batch, no_batch, no_batch, 0, 1, 0, 1, 0, 1, 2}};
    PyArrayObject *out = outputs[0], *at = NULL, *bt = NULL, *am = NULL, *bm = NULL;
    PyArrayObject *om = NULL, *result = NULL;
    npy_intp shape[{max(n_out, 1)}], m = 1, k = 1, n = 1;
    npy_intp a_dims[2], b_dims[2], o_dims[2];
    PyArray_Dims a_order = {{{fname}_a_order, {a.ndim}}}, b_order = {{{fname}_b_order, {b.ndim}}};
    PyArray_Dims a_matrix = {{a_dims, 2}}, b_matrix = {{b_dims, 2}}, o_matrix = {{o_dims, 2}};
    int status = -1;
    if ({fname}_shape(inputs, shape) < 0
            || tn_bl_check_out({name}, out, {tnum}, {tname}, {n_out}, shape) < 0)
        return -1;
    for (int d = 0; d < {len(a_free)}; d++)
        m *= shape[d];
    for (int d = {len(a_free)}; d < {n_out}; d++)
        n *= shape[d];
    for (int s = 0; s < {len(op.a_axes)}; s++)
        k *= PyArray_DIM(inputs[0], {fname}_a_summed[s]);
    a_dims[0] = m, a_dims[1] = k, b_dims[0] = k, b_dims[1] = n, o_dims[0] = m, o_dims[1] = n;
    at = (PyArrayObject *)PyArray_Transpose(inputs[0], &a_order);
    bt = at == NULL ? NULL : (PyArrayObject *)PyArray_Transpose(inputs[1], &b_order);
    am = bt == NULL ? NULL : (PyArrayObject *)PyArray_Newshape(at, &a_matrix, NPY_CORDER);
    bm = am == NULL ? NULL : (PyArrayObject *)PyArray_Newshape(bt, &b_matrix, NPY_CORDER);
    if (bm != NULL)
        om = PyArray_IS_C_CONTIGUOUS(out)
            ? (PyArrayObject *)PyArray_Newshape(out, &o_matrix, NPY_CORDER)
            : (PyArrayObject *)PyArray_EMPTY(2, o_dims, {tnum}, 0);
    if (om != NULL) {{
        PyArrayObject *operands[2] = {{am, bm}};
        status = tn_mm_run({name}, {la}, {lb}, &axes, operands, om, {tnum});
    }}
    if (status == 0 && !PyArray_IS_C_CONTIGUOUS(out)) {{
        PyArray_Dims out_shape = {{shape, {n_out}}};
        result = (PyArrayObject *)PyArray_Newshape(om, &out_shape, NPY_CORDER);
        status = result == NULL ? -1 : PyArray_CopyInto(out, result);
    }}
    Py_XDECREF(result);
    Py_XDECREF(om);
    Py_XDECREF(bm);
    Py_XDECREF(am);
    Py_XDECREF(bt);
    Py_XDECREF(at);
    return status;
}}
"""


# How the C linker runs TensorDot (.dispatch): a compiled step of the graph's
# module around c_function, glue around the runtime's product driver.
_FAMILY = sys.modules[__name__]
register_c_op(TensorDot, CEntry("tensordot", _FAMILY))
