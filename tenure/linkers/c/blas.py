"""C code for the products: ``Dot``, ``MatMul`` (batched, broadcasting batch
axes), ``Outer`` and ``Gemm`` (in place or not), through the BLAS that SciPy
ships, found at run time (no BLAS headers or libraries at build time).

What the C linker uses:

- :func:`has_c_code` ``(node) -> bool``: whether the node has C code.
- :func:`product_dtype` and :func:`product_axes` ``(node)``: what the schedule
  interpreter tells the C runtime of a ``Dot``, ``MatMul`` or ``Gemm`` (the
  roles of the axes, ``tn_mm_axes``).  The runtime (``src/blas.c.src``) holds
  the checks (``tn_bl_check``, ``tn_mm_shape``: dtype, ndim, alignment of
  the products' lengths), the BLAS pointer table, the staging of operands,
  batches of products and one product kernel per dtype; ``tn_blas_init()``
  imports ``scipy.linalg.cython_blas`` and takes ``dgemm``, ``sgemm``,
  ``dgemv``, ``sgemv``, ``ddot`` and ``sdot`` from its ``__pyx_capi__``
  capsules (Fortran ABI), keeping the module alive; 0, or -1 with
  ``ImportError`` set.  Repeated calls are free; the runtime calls it before
  every float product.
- :func:`c_function` ``(node, fname) -> str``, for ``Outer`` only (its
  loops are the node's): the C definitions of ``static int
  fname(PyArrayObject **inputs, PyArrayObject **outputs)`` and of ``static
  int fname_shape(PyArrayObject **inputs, npy_intp *shape)``, which checks
  the inputs and writes the output's shape; compiled into the graph's module
  (:mod:`.module`), after the C runtime's API.
- :data:`COMPILE_FLAGS`: flags to build that with.

A product's kernel — its contract with the caller (as elemwise's):

- ``inputs[i]`` is node input ``i``: an ndarray of exactly the input's dtype
  (native byte order) and ndim, any strides (negative, zero, unaligned);
  Gemm's ``alpha`` and ``beta`` are 0-d arrays, read before anything is written.
- ``outputs[0]`` is allocated by the caller with the output's full shape and
  dtype, any strides.  For in-place Gemm (``destroy_map = {0: [0]}``) the
  caller passes ``z`` itself as the output when ``z`` has the output's shape
  (``z`` does not broadcast); otherwise any array of the output's shape, into
  which ``z`` is copied (broadcasting) first.  Inputs that overlap the output
  (other than ``z`` being it exactly) are copied first, so any output is safe.
- Dtypes, ndims, lengths and the output's shape and writeability are checked on
  every call: a mismatch returns -1 with ``TypeError`` / ``ValueError`` set.
- Returns 0, or -1 with a Python exception set (``MemoryError`` when a
  staging buffer cannot be had).  The caller holds the GIL; it is kept.

How it computes.  Every product is a batch of matrix products ``C = alpha *
A @ B + beta * C`` over strided matrices (a vector operand is a one-row or
one-column matrix; batch axes broadcast with stride 0).  A batch axis along
which ``B`` does not move and ``A`` and ``C`` step by whole matrices is folded
into the rows, so ``x3d @ w`` is one gemm.  Per matrix, float32 / float64:

- 1x1 results with ``alpha == 1, beta == 0``: ``?dot``; one row or one
  column: ``?gemv``; otherwise ``?gemm`` (row-major ``C`` computed as
  ``C^T = B^T A^T`` in column-major terms).
- An operand that BLAS cannot take as it is (negative, zero or odd strides,
  misaligned, leading dimension past INT_MAX) is staged through a contiguous
  copy (and a staged output copied back); leading dimensions are always at
  least 1.  With ``beta == 0`` the output is zeroed first (BLAS must not
  read uninitialised memory, where a NaN times 0 might survive).
- Lengths past INT_MAX (BLAS takes ints) and ``k == 0`` take a plain C loop.

Integer and bool products are a plain C loop, wrapping like NumPy's (integers
accumulate modulo 2**64, then truncate); bool is OR of ANDs.  Gemm follows
gemm.py exactly: BLAS accumulates into the output when the product has the
output's shape and ``alpha``, ``beta`` and ``k`` are nonzero; otherwise the
product is computed into a temporary and the output becomes ``out * beta +
product * alpha`` elementwise (broadcasting the product), so ``0 * inf`` is NaN
as NumPy gives it.

Not covered (``has_c_code`` is False): operands of different dtypes, dtypes
other than bool / integers / float32 / float64 (complex, float16), 0-d
``Dot`` operands (a scaling).  ``TensorDot`` is a compiled step around the
same driver (:mod:`.tensordot`).
"""

from __future__ import annotations

import sys

from tenure.linkers.c.cgen import IDENTIFIER, NPY_TYPES, c_string, comment, input_label
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.linkers.c import scalar_code as sc
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.blas import Dot, MatMul, Outer
from tenure.symbolic.ops.gemm import Gemm

__all__ = ["COMPILE_FLAGS", "c_function", "has_c_code", "product_axes", "product_dtype"]

#: flags to compile the generated code with
COMPILE_FLAGS = ("-fno-math-errno", "-fno-trapping-math")

#: the dtypes BLAS computes in (the others run a plain C loop)
_FLOATS = ("float32", "float64")


# --------------------------------------------------------------------------
# Which nodes, and how their axes map onto a batch of matrix products


def product_dtype(node: Apply) -> str:
    """The one dtype of the node's arrays; NotImplementedError when there is none."""
    op = node.op
    if not isinstance(op, (Dot, MatMul, Outer, Gemm)):
        raise NotImplementedError(f"{op} is not a Dot, MatMul, Outer or Gemm")
    out = node.outputs[0].dtype
    arrays = [node.inputs[i] for i in ((0, 2, 3) if isinstance(op, Gemm) else (0, 1))]
    dtypes = {v.dtype for v in arrays} | {out}
    if isinstance(op, Gemm):
        dtypes |= {node.inputs[1].dtype, node.inputs[4].dtype}
    if len(dtypes) != 1:
        raise NotImplementedError(f"{op}: mixed dtypes {sorted(dtypes)}")
    if out not in NPY_TYPES:
        raise NotImplementedError(f"{op}: no C code for dtype {out}")
    if isinstance(op, (Dot, MatMul)) and min(v.ndim for v in node.inputs) == 0:
        raise NotImplementedError(f"{op}: a 0-d operand (a scaling)")
    return out


def product_axes(node: Apply) -> dict:
    """For Dot / MatMul / Gemm: the axes of ``a``, ``b`` and the output playing
    each role (-1 where absent): per batch axis (ba, bb, bo), the rows (am, om),
    the summed axis (ak, bk) and the columns (bn, on)."""
    op = node.op
    if isinstance(op, Gemm):
        return dict(ba=[], bb=[], bo=[], am=0, ak=1, bk=0, bn=1, om=0, on=1, ond=2)
    na, nb = node.inputs[0].ndim, node.inputs[1].ndim
    ond = node.outputs[0].ndim
    bk = nb - 2 if nb >= 2 else 0
    bn = nb - 1 if nb >= 2 else -1
    am = na - 2 if na >= 2 else -1
    if isinstance(op, MatMul):
        nbatch = ond - (na >= 2) - (nb >= 2)
        ba = [j - (nbatch - (na - 2)) if j - (nbatch - (na - 2)) >= 0 else -1
              for j in range(nbatch)]
        bb = [j - (nbatch - (nb - 2)) if j - (nbatch - (nb - 2)) >= 0 else -1
              for j in range(nbatch)]
        bo = list(range(nbatch))
        om = nbatch if na >= 2 else -1
    else:  # Dot: a's leading axes, a's rows, b's leading axes, b's columns
        a_lead, b_lead = max(na - 2, 0), max(nb - 2, 0)
        ba = list(range(a_lead)) + [-1] * b_lead
        bb = [-1] * a_lead + list(range(b_lead))
        bo = list(range(a_lead)) + [na - 1 + j for j in range(b_lead)]
        om = na - 2 if na >= 2 else -1
    on = ond - 1 if nb >= 2 else -1
    return dict(ba=ba, bb=bb, bo=bo, am=am, ak=na - 1, bk=bk, bn=bn, om=om, on=on, ond=ond)


def has_c_code(node: Apply) -> bool:
    """Whether the C runtime (or, for ``Outer``, :func:`c_function`) computes ``node``."""
    try:
        product_dtype(node)
    except NotImplementedError:
        return False
    return True


# --------------------------------------------------------------------------
# The generated functions


def _mul(dtype: str, x: str, y: str) -> str:
    """C for NumPy's ``x * y`` in ``dtype`` (integers wrap, bool is AND)."""
    if dtype == "bool":
        return f"(npy_bool)(({x}) != 0 && ({y}) != 0)"
    if dtype in _FLOATS:
        return f"({x}) * ({y})"
    return f"({sc.c_type(dtype)})((npy_uint64)({x}) * (npy_uint64)({y}))"


def c_function(node: Apply, fname: str) -> str:
    """C source of ``static int fname(PyArrayObject **inputs, PyArrayObject
    **outputs)`` and ``fname_shape`` computing an ``Outer`` node (see the
    module doc for the contract).  Needs the C runtime's API earlier in the
    module.  Raises ``NotImplementedError`` for any other node (the other
    products are the runtime's, described to it by the schedule)."""
    if not IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    dtype = product_dtype(node)
    op = node.op
    if not isinstance(op, Outer):
        raise NotImplementedError(f"{op}: the C runtime computes it (no per-node C)")
    name = c_string(fname)
    tnum, tname = NPY_TYPES[dtype], c_string(dtype)
    labels = [c_string(input_label(node, i)) for i in range(len(node.inputs))]
    checks = " ||\n        ".join(
        f"tn_bl_check({name}, {labels[i]}, inputs[{i}], {tnum}, {tname}, {v.ndim}) < 0"
        for i, v in enumerate(node.inputs))
    head = f"/* {comment(str(op))} on {dtype} */"
    return f"""
{head}
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    if ({checks})
        return -1;
    shape[0] = PyArray_SIZE(inputs[0]);
    shape[1] = PyArray_SIZE(inputs[1]);
    return 0;
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[2];
    PyArrayObject *in[2] = {{NULL, NULL}}, *flat[2] = {{NULL, NULL}};
    int status = -1;
    if ({fname}_shape(inputs, shape) < 0
            || tn_bl_check_out({name}, outputs[0], {tnum}, {tname}, 2, shape) < 0
            || tn_bl_private(outputs[0], inputs, 2, in) < 0)
        return -1;
    flat[0] = (PyArrayObject *)PyArray_Ravel(in[0], NPY_CORDER);
    flat[1] = flat[0] == NULL ? NULL : (PyArrayObject *)PyArray_Ravel(in[1], NPY_CORDER);
    if (flat[1] != NULL) {{
        PyArrayObject *out = outputs[0];
        const npy_intp sa = PyArray_STRIDE(flat[0], 0), sb = PyArray_STRIDE(flat[1], 0);
        const npy_intp so0 = PyArray_STRIDE(out, 0), so1 = PyArray_STRIDE(out, 1);
        const char *pa = PyArray_BYTES(flat[0]), *pb = PyArray_BYTES(flat[1]);
        char *po = PyArray_BYTES(out);
        for (npy_intp i = 0; i < shape[0]; i++) {{
            {sc.c_type(dtype)} x;
            memcpy(&x, pa + i * sa, sizeof x);
            for (npy_intp j = 0; j < shape[1]; j++) {{
                {sc.c_type(dtype)} y, r;
                memcpy(&y, pb + j * sb, sizeof y);
                r = {_mul(dtype, "x", "y")};
                memcpy(po + i * so0 + j * so1, &r, sizeof r);
            }}
        }}
        status = 0;
    }}
    Py_XDECREF(flat[0]); Py_XDECREF(flat[1]);
    Py_XDECREF(in[0]); Py_XDECREF(in[1]);
    return status;
}}
"""


# How the C linker runs the products (.dispatch): Dot, MatMul and Gemm from a
# description (the runtime's drivers); Outer as a compiled step of the graph's
# module around c_function (the generic path a new family takes).
_FAMILY = sys.modules[__name__]
register_c_op(Dot, CEntry("blas", _FAMILY, step="product"))
register_c_op(MatMul, CEntry("blas", _FAMILY, step="product"))
register_c_op(Gemm, CEntry("blas", _FAMILY, step="gemm"))
register_c_op(Outer, CEntry("blas", _FAMILY, flags=COMPILE_FLAGS))
