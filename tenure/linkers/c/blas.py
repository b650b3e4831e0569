"""C code for the products: ``Dot``, ``MatMul`` (batched, broadcasting batch
axes), ``Outer`` and ``Gemm`` (in place or not), through the BLAS that SciPy
ships, found at run time (no BLAS headers or libraries at build time).

What the C linker calls (the same shape as tenure/linkers/c/elemwise.py):

- :func:`has_c_code` ``(node) -> bool``: whether :func:`c_function` can handle it.
- :func:`c_function` ``(node, fname) -> str``: the C definitions of
  ``static int fname(PyArrayObject **inputs, PyArrayObject **outputs)`` and of
  ``static int fname_shape(PyArrayObject **inputs, npy_intp *shape)``, which
  checks the inputs (dtype, ndim, alignment of the products' lengths) and
  writes the output's shape (``outputs[0]``'s ndim entries): -1 with a Python
  exception when the inputs are bad.  ``fname`` calls it itself.
- :data:`SUPPORT_CODE`: C helpers the functions need, once per module, after
  ``#include <Python.h>`` and ``#include <numpy/arrayobject.h>``
  (include-guarded, so repeating it is harmless).  It holds the BLAS pointer
  table and ``static int tn_blas_init(void)``, which the module's init
  function must call once, after ``import_array()``: it imports
  ``scipy.linalg.cython_blas`` and takes ``dgemm``, ``sgemm``, ``dgemv``,
  ``sgemv``, ``ddot`` and ``sdot`` from its ``__pyx_capi__`` capsules (Fortran
  ABI), keeping the module alive; 0, or -1 with ``ImportError`` set (return
  NULL from the init then).  Repeated calls are free, and every generated
  function calls it again first, so a module that forgot it fails with the
  ImportError rather than crashing.
- :data:`COMPILE_FLAGS`: flags to build with.

For tests and debugging: :func:`module_source` ``(node or {entry: node},
name)`` gives a complete extension module whose entries are called like
``run(*inputs, out=None)``; :func:`build_module` compiles and loads it.

The generated function — its contract with the caller (as elemwise's):

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
``Dot`` operands (a scaling), ``TensorDot``.
"""

from __future__ import annotations

from collections.abc import Mapping

from tenure.linkers.c.elemwise import (_IDENTIFIER, _NPY_TYPES, _c_string, _comment,
                                       _input_label, _no_contract)
from tenure.linkers.c.standalone import module_text
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.blas import Dot, MatMul, Outer
from tenure.symbolic.ops.gemm import Gemm

__all__ = ["COMPILE_FLAGS", "SUPPORT_CODE", "build_module", "c_function", "has_c_code",
           "module_source"]

#: flags to compile the generated code with
COMPILE_FLAGS = ("-fno-math-errno", "-fno-trapping-math")

#: the dtypes BLAS computes in (the others run a plain C loop)
_FLOATS = ("float32", "float64")


# --------------------------------------------------------------------------
# Which nodes, and how their axes map onto a batch of matrix products


def _dtype(node: Apply) -> str:
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
    if out not in _NPY_TYPES:
        raise NotImplementedError(f"{op}: no C code for dtype {out}")
    if isinstance(op, (Dot, MatMul)) and min(v.ndim for v in node.inputs) == 0:
        raise NotImplementedError(f"{op}: a 0-d operand (a scaling)")
    return out


def _axes(node: Apply) -> dict:
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
    """Whether :func:`c_function` can compile ``node``."""
    try:
        _dtype(node)
    except NotImplementedError:
        return False
    return True


# --------------------------------------------------------------------------
# The generated functions


def _table(values) -> str:
    values = list(values)
    return "{" + ", ".join(values or ["-1"]) + "}"


def _mul(dtype: str, x: str, y: str) -> str:
    """C for NumPy's ``x * y`` in ``dtype`` (integers wrap, bool is AND)."""
    if dtype == "bool":
        return f"(npy_bool)(({x}) != 0 && ({y}) != 0)"
    if dtype in _FLOATS:
        return f"({x}) * ({y})"
    return f"({ps.c_type(dtype)})((npy_uint64)({x}) * (npy_uint64)({y}))"


def _loop_kernel(dtype: str) -> str:
    """The plain-loop product kernel ``tn_mm_<dtype>`` for a non-BLAS dtype."""
    t = ps.c_type(dtype)
    if dtype == "bool":
        acc, step, result = "int acc = 0;", "if (x != 0 && y != 0) { acc = 1; break; }", \
            "(npy_bool)acc"
    else:
        acc, step, result = ("npy_uint64 acc = 0;", "acc += (npy_uint64)x * (npy_uint64)y;",
                             f"({t})acc")
    return f"""
#ifndef TN_MM_KERNEL_{dtype}
#define TN_MM_KERNEL_{dtype}
/* C = A @ B for {dtype}, NumPy's wrapping arithmetic (alpha, beta unused: 1, 0) */
static int tn_mm_{dtype}(const tn_mat *a, const tn_mat *b, const tn_mat *c, double alpha,
                         double beta)
{{
    (void)alpha; (void)beta;
    for (npy_intp i = 0; i < c->r; i++)
        for (npy_intp j = 0; j < c->c; j++) {{
            {acc}
            {t} r;
            for (npy_intp p = 0; p < a->c; p++) {{
                {t} x, y;
                memcpy(&x, a->p + i * a->sr + p * a->sc, sizeof x);
                memcpy(&y, b->p + p * b->sr + j * b->sc, sizeof y);
                {step}
            }}
            r = {result};
            memcpy(c->p + i * c->sr + j * c->sc, &r, sizeof r);
        }}
    return 0;
}}
#endif
"""


def c_function(node: Apply, fname: str) -> str:
    """C source of ``static int fname(PyArrayObject **inputs, PyArrayObject
    **outputs)`` and ``fname_shape`` computing ``node`` (see the module doc
    for the contract).  Needs :data:`SUPPORT_CODE` earlier in the module.
    Raises ``NotImplementedError`` when the node has no C code."""
    if not _IDENTIFIER.match(fname):
        raise ValueError(f"c_function: {fname!r} is not a C identifier")
    dtype = _dtype(node)
    op = node.op
    name = _c_string(fname)
    tnum, tname = _NPY_TYPES[dtype], _c_string(dtype)
    labels = [_c_string(_input_label(node, i)) for i in range(len(node.inputs))]
    checks = " ||\n        ".join(
        f"tn_bl_check({name}, {labels[i]}, inputs[{i}], {tnum}, {tname}, {v.ndim}) < 0"
        for i, v in enumerate(node.inputs))
    kernel = "" if dtype in _FLOATS else _loop_kernel(dtype)
    head = f"/* {_comment(str(op))} on {dtype} */"
    if isinstance(op, Outer):
        return kernel + f"""
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
            {ps.c_type(dtype)} x;
            memcpy(&x, pa + i * sa, sizeof x);
            for (npy_intp j = 0; j < shape[1]; j++) {{
                {ps.c_type(dtype)} y, r;
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
    ax = _axes(node)
    axes = (f"static const int {fname}_ba[] = {_table(map(str, ax['ba']))};\n"
            f"static const int {fname}_bb[] = {_table(map(str, ax['bb']))};\n"
            f"static const int {fname}_bo[] = {_table(map(str, ax['bo']))};\n"
            f"static const tn_mm_axes {fname}_axes = {{{len(ax['bo'])}, {fname}_ba, {fname}_bb, "
            f"{fname}_bo, {ax['am']}, {ax['ak']}, {ax['bk']}, {ax['bn']}, {ax['om']}, "
            f"{ax['on']}, {ax['ond']}}};\n")
    if isinstance(op, Gemm):
        return axes + f"""
{head}
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    tn_mm_desc d;
    if ({checks})
        return -1;
    if (tn_mm_layout({name}, {labels[2]}, {labels[3]}, &{fname}_axes, inputs[2], inputs[3],
                     &d, shape) < 0)
        return -1;
    return tn_bl_broadcast2({name}, {labels[0]}, inputs[0], shape);
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[2];
    {ps.c_type(dtype)} alpha, beta;
    if (tn_blas_init() < 0 || {fname}_shape(inputs, shape) < 0
            || tn_bl_check_out({name}, outputs[0], {tnum}, {tname}, 2, shape) < 0)
        return -1;
    memcpy(&alpha, PyArray_BYTES(inputs[1]), sizeof alpha);
    memcpy(&beta, PyArray_BYTES(inputs[4]), sizeof beta);
    return tn_gemm_run({name}, &{fname}_axes, inputs[0], inputs[2], inputs[3], outputs[0],
                       (double)alpha, (double)beta, tn_mm_{dtype}, {tnum});
}}
"""
    return axes + kernel + f"""
{head}
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    tn_mm_desc d;
    if ({checks})
        return -1;
    return tn_mm_layout({name}, {labels[0]}, {labels[1]}, &{fname}_axes, inputs[0], inputs[1],
                        &d, shape);
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[NPY_MAXDIMS];
    PyArrayObject *in[2] = {{NULL, NULL}};
    tn_mm_desc d;
    int status;
    if ({"tn_blas_init() < 0 || " if dtype in _FLOATS else ""}{fname}_shape(inputs, shape) < 0
            || tn_bl_check_out({name}, outputs[0], {tnum}, {tname}, {ax['ond']}, shape) < 0
            || tn_bl_private(outputs[0], inputs, 2, in) < 0)
        return -1;
    status = tn_mm_layout({name}, {labels[0]}, {labels[1]}, &{fname}_axes, in[0], in[1], &d,
                          shape);
    if (status == 0) {{
        tn_mm_output(&{fname}_axes, &d, outputs[0]);
        status = tn_mm_batched(&d, tn_mm_{dtype}, 1.0, 0.0);
    }}
    Py_DECREF(in[0]);
    Py_DECREF(in[1]);
    return status;
}}
"""


# --------------------------------------------------------------------------
# Runtime helpers (C), shared by every generated function


_FLOAT_KERNEL = r"""
/* C = alpha * A @ B + beta * C for @T@ through BLAS (see the module doc). */
static int tn_mm_@name@(const tn_mat *a, const tn_mat *b, const tn_mat *c, double alpha_d,
                        double beta_d)
{
    const npy_intp e = sizeof(@T@);
    const npy_intp m = c->r, n = c->c, k = a->c;
    @T@ alpha = (@T@)alpha_d, beta = (@T@)beta_d;
    char *buf[4] = {NULL, NULL, NULL, NULL};
    int status = 0;
    if (m == 0 || n == 0)
        return 0;
    if (k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
        for (npy_intp i = 0; i < m; i++)
            for (npy_intp j = 0; j < n; j++) {
                @T@ acc = 0, x, y, r;
                char *q = c->p + i * c->sr + j * c->sc;
                for (npy_intp p = 0; p < k; p++) {
                    memcpy(&x, a->p + i * a->sr + p * a->sc, sizeof x);
                    memcpy(&y, b->p + p * b->sr + j * b->sc, sizeof y);
                    acc += x * y;
                }
                if (beta == 0) {
                    r = alpha * acc;
                } else {
                    memcpy(&r, q, sizeof r);
                    r = alpha * acc + beta * r;
                }
                memcpy(q, &r, sizeof r);
            }
        return 0;
    }
    if (m == 1 && n == 1 && alpha == 1 && beta == 0) {
        char *x, *y;
        int ix, iy, ik = (int)k;
        @T@ r;
        if (tn_bl_vector(a->p, k, a->sc, e, &x, &ix, &buf[0], 1) < 0
                || tn_bl_vector(b->p, k, b->sr, e, &y, &iy, &buf[1], 1) < 0) {
            status = -1;
        } else {
            r = tn_@p@dot(&ik, (@T@ *)x, &ix, (@T@ *)y, &iy);
            memcpy(c->p, &r, sizeof r);
        }
    } else if (m == 1 || n == 1) {
        /* y (r) = alpha * M (r x k) @ x (k) + beta * y */
        tn_mat mat;
        char *xp, *yp, *mp, *xq, *yq, trans;
        npy_intp xs, ys, ld;
        int fm, fn, lda, ix, iy;
        if (n == 1) {
            mat = *a; xp = b->p; xs = b->sr; yp = c->p; ys = c->sr;
        } else {
            mat.p = b->p; mat.r = n; mat.c = k; mat.sr = b->sc; mat.sc = b->sr;
            xp = a->p; xs = a->sc; yp = c->p; ys = c->sc;
        }
        if (tn_bl_colmajor(&mat, e, &ld)) {
            trans = 'N'; fm = (int)mat.r; fn = (int)mat.c; mp = mat.p;
        } else {
            tn_mat t = {mat.p, mat.c, mat.r, mat.sc, mat.sr};
            trans = 'T'; fm = (int)mat.c; fn = (int)mat.r; mp = mat.p;
            if (!tn_bl_colmajor(&t, e, &ld)) {
                mp = buf[0] = tn_bl_stage(&mat, e, 1);
                ld = mat.c;
            }
        }
        lda = (int)(ld > 1 ? ld : 1);
        if (mp == NULL || tn_bl_vector(xp, mat.c, xs, e, &xq, &ix, &buf[1], 1) < 0
                || tn_bl_vector(yp, mat.r, ys, e, &yq, &iy, &buf[2], beta != 0) < 0) {
            status = -1;
        } else {
            if (beta == 0)
                tn_bl_zero(yq, mat.r, (npy_intp)iy * e, e);
            tn_@p@gemv(&trans, &fm, &fn, &alpha, (@T@ *)mp, &lda, (@T@ *)xq, &ix, &beta,
                       (@T@ *)yq, &iy);
            if (buf[2] != NULL) {
                tn_mat yv = {yp, mat.r, 1, ys, 0};
                tn_bl_unstage(buf[2], &yv, e);
            }
        }
    } else {
        /* gemm: C column-major as it is, else C^T = B^T A^T column-major */
        tn_mat A = *a, B = *b, C = *c;
        char *cq, *ap, *bp, ta, tb;
        npy_intp ld;
        int fm, fn, fk = (int)k, lda, ldb, ldc;
        if (tn_bl_colmajor(&C, e, &ld)) {
            cq = C.p;
        } else {
            tn_mat ct = {C.p, C.c, C.r, C.sc, C.sr};
            tn_mat bt = {B.p, B.c, B.r, B.sc, B.sr}, at = {A.p, A.c, A.r, A.sc, A.sr};
            if (tn_bl_colmajor(&ct, e, &ld)) {
                cq = C.p;
            } else {
                cq = buf[2] = tn_bl_stage(&C, e, beta != 0);
                ld = C.c;
            }
            A = bt; B = at;
            C = ct;
        }
        ldc = (int)(ld > 1 ? ld : 1);
        fm = (int)A.r; fn = (int)B.c;
        if (cq == NULL || tn_bl_operand(&A, e, &ta, &ap, &lda, &buf[0]) < 0
                || tn_bl_operand(&B, e, &tb, &bp, &ldb, &buf[1]) < 0) {
            status = -1;
        } else {
            if (beta == 0) {
                tn_mat z = {cq, C.r, C.c, e, (npy_intp)ldc * e};
                tn_bl_zero_mat(&z, e);
            }
            tn_@p@gemm(&ta, &tb, &fm, &fn, &fk, &alpha, (@T@ *)ap, &lda, (@T@ *)bp, &ldb, &beta,
                       (@T@ *)cq, &ldc);
            if (buf[2] != NULL)
                tn_bl_unstage(buf[2], c, e);
        }
    }
    for (int i = 0; i < 4; i++)
        free(buf[i]);
    return status;
}
"""

_SUPPORT = r"""
#ifndef TN_BLAS_SUPPORT
#define TN_BLAS_SUPPORT
/* Products through SciPy's BLAS (tenure/linkers/c/blas.py). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef void (*tn_dgemm_t)(char *, char *, int *, int *, int *, double *, double *, int *,
                           double *, int *, double *, double *, int *);
typedef void (*tn_sgemm_t)(char *, char *, int *, int *, int *, float *, float *, int *,
                           float *, int *, float *, float *, int *);
typedef void (*tn_dgemv_t)(char *, int *, int *, double *, double *, int *, double *, int *,
                           double *, double *, int *);
typedef void (*tn_sgemv_t)(char *, int *, int *, float *, float *, int *, float *, int *,
                           float *, float *, int *);
typedef double (*tn_ddot_t)(int *, double *, int *, double *, int *);
typedef float (*tn_sdot_t)(int *, float *, int *, float *, int *);

static tn_dgemm_t tn_dgemm;
static tn_sgemm_t tn_sgemm;
static tn_dgemv_t tn_dgemv;
static tn_sgemv_t tn_sgemv;
static tn_ddot_t tn_ddot;
static tn_sdot_t tn_sdot;
static PyObject *tn_blas_module = NULL;   /* scipy.linalg.cython_blas, kept alive */

static void *tn_blas_symbol(PyObject *capi, const char *name)
{
    PyObject *capsule = PyDict_Check(capi) ? PyDict_GetItemString(capi, name) : NULL;
    void *p;
    if (capsule == NULL || !PyCapsule_CheckExact(capsule)) {
        PyErr_Format(PyExc_ImportError, "tenure: scipy.linalg.cython_blas.__pyx_capi__ has no "
                     "capsule for %s", name);
        return NULL;
    }
    p = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
    if (p == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ImportError, "tenure: the BLAS capsule %s is empty", name);
    return p;
}

/* Fetch the BLAS functions from SciPy; call once from the module init (after
 * import_array).  0, or -1 with ImportError (or the import's error) set. */
static int tn_blas_init(void)
{
    PyObject *module, *capi;
    int ok;
    if (tn_blas_module != NULL)
        return 0;
    module = PyImport_ImportModule("scipy.linalg.cython_blas");
    if (module == NULL)
        return -1;
    capi = PyObject_GetAttrString(module, "__pyx_capi__");
    if (capi == NULL) {
        Py_DECREF(module);
        return -1;
    }
    ok = (tn_dgemm = (tn_dgemm_t)tn_blas_symbol(capi, "dgemm")) != NULL
         && (tn_sgemm = (tn_sgemm_t)tn_blas_symbol(capi, "sgemm")) != NULL
         && (tn_dgemv = (tn_dgemv_t)tn_blas_symbol(capi, "dgemv")) != NULL
         && (tn_sgemv = (tn_sgemv_t)tn_blas_symbol(capi, "sgemv")) != NULL
         && (tn_ddot = (tn_ddot_t)tn_blas_symbol(capi, "ddot")) != NULL
         && (tn_sdot = (tn_sdot_t)tn_blas_symbol(capi, "sdot")) != NULL;
    Py_DECREF(capi);
    if (!ok) {
        Py_DECREF(module);
        return -1;
    }
    tn_blas_module = module;
    return 0;
}

/* A strided matrix: element (i, j) of the r x c matrix at p + i * sr + j * sc (bytes). */
typedef struct { char *p; npy_intp r, c, sr, sc; } tn_mat;

typedef int (*tn_mm_kernel)(const tn_mat *, const tn_mat *, const tn_mat *, double, double);

/* Whether BLAS can take x as a column-major matrix as it is; *ld its leading
 * dimension (>= max(1, rows), in elements, <= INT_MAX). */
static int tn_bl_colmajor(const tn_mat *x, npy_intp e, npy_intp *ld)
{
    npy_intp l, rows = x->r > 1 ? x->r : 1;
    if ((npy_uintp)x->p % (npy_uintp)e != 0)
        return 0;
    if (x->r > 1 && x->sr != e)
        return 0;
    if (x->c > 1) {
        if (x->sc <= 0 || x->sc % e != 0)
            return 0;
        l = x->sc / e;
        if (l < rows || l > INT_MAX)
            return 0;
    } else {
        l = rows;
    }
    *ld = l;
    return 1;
}

/* A new row-major copy of x (contents copied when `copy`); NULL with MemoryError. */
static char *tn_bl_stage(const tn_mat *x, npy_intp e, int copy)
{
    char *buf;
    if (x->r > 0 && x->c > NPY_MAX_INTP / e / x->r) {
        PyErr_NoMemory();
        return NULL;
    }
    buf = malloc((size_t)(x->r * x->c > 0 ? x->r * x->c * e : e));
    if (buf == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (copy)
        for (npy_intp i = 0; i < x->r; i++) {
            char *dst = buf + i * x->c * e;
            const char *src = x->p + i * x->sr;
            if (e == 8)  /* constant sizes: the copies compile to plain moves */
                for (npy_intp j = 0; j < x->c; j++)
                    memcpy(dst + j * 8, src + j * x->sc, 8);
            else if (e == 4)
                for (npy_intp j = 0; j < x->c; j++)
                    memcpy(dst + j * 4, src + j * x->sc, 4);
            else
                for (npy_intp j = 0; j < x->c; j++)
                    memcpy(dst + j * e, src + j * x->sc, (size_t)e);
        }
    return buf;
}

/* Copy a row-major buffer back into x. */
static void tn_bl_unstage(const char *buf, const tn_mat *x, npy_intp e)
{
    for (npy_intp i = 0; i < x->r; i++)
        for (npy_intp j = 0; j < x->c; j++)
            memcpy(x->p + i * x->sr + j * x->sc, buf + (i * x->c + j) * e, (size_t)e);
}

static void tn_bl_zero(char *p, npy_intp n, npy_intp s, npy_intp e)
{
    for (npy_intp i = 0; i < n; i++)
        memset(p + i * s, 0, (size_t)e);
}

static void tn_bl_zero_mat(const tn_mat *x, npy_intp e)
{
    for (npy_intp j = 0; j < x->c; j++)
        tn_bl_zero(x->p + j * x->sc, x->r, x->sr, e);
}

/* A matrix as a BLAS operand: op(*ptr) == x with op per *trans; staged (row-major,
 * into *buf) when BLAS cannot take it as it is. */
static int tn_bl_operand(const tn_mat *x, npy_intp e, char *trans, char **ptr, int *ld,
                         char **buf)
{
    tn_mat t = {x->p, x->c, x->r, x->sc, x->sr};
    npy_intp l;
    *ptr = x->p;
    if (tn_bl_colmajor(x, e, &l)) {
        *trans = 'N';
    } else if (tn_bl_colmajor(&t, e, &l)) {
        *trans = 'T';
    } else if ((x->sr < 0 ? -x->sr : x->sr) < (x->sc < 0 ? -x->sc : x->sc)) {
        /* staged in the order that reads the source along its smaller stride */
        *trans = 'N';
        *ptr = *buf = tn_bl_stage(&t, e, 1);   /* x column-major */
        l = x->r > 1 ? x->r : 1;
    } else {
        *trans = 'T';
        *ptr = *buf = tn_bl_stage(x, e, 1);    /* x row-major */
        l = x->c > 1 ? x->c : 1;
    }
    if (*ptr == NULL)
        return -1;
    *ld = (int)l;
    return 0;
}

/* A vector of n elements with byte stride s as a BLAS operand (increment
 * *inc > 0), staged into *buf (contents copied when `copy`) when need be. */
static int tn_bl_vector(char *p, npy_intp n, npy_intp s, npy_intp e, char **ptr, int *inc,
                        char **buf, int copy)
{
    if ((npy_uintp)p % (npy_uintp)e == 0 && (n <= 1 || (s > 0 && s % e == 0 && s / e <= INT_MAX))) {
        *ptr = p;
        *inc = n <= 1 ? 1 : (int)(s / e);
        return 0;
    } else {
        tn_mat v = {p, n, 1, s, 0};
        *ptr = *buf = tn_bl_stage(&v, e, copy);
        *inc = 1;
        return *buf == NULL ? -1 : 0;
    }
}

/* ---- argument checks ---- */

static int tn_bl_check(const char *fname, const char *label, PyArrayObject *a, int type_num,
                       const char *dtype_name, int ndim)
{
    if (a == NULL || !PyArray_Check(a)) {
        PyErr_Format(PyExc_TypeError, "%s: %s: expected a numpy.ndarray of dtype %s with %d "
                     "dimension(s), got %s", fname, label, dtype_name, ndim,
                     a == NULL ? "NULL" : Py_TYPE((PyObject *)a)->tp_name);
        return -1;
    }
    if (!PyArray_EquivTypenums(PyArray_TYPE(a), type_num) || !PyArray_ISNOTSWAPPED(a)) {
        PyErr_Format(PyExc_TypeError, "%s: %s: expected dtype %s (native byte order), got %S",
                     fname, label, dtype_name, (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_TypeError, "%s: %s: expected %d dimension(s), got %d", fname, label,
                     ndim, PyArray_NDIM(a));
        return -1;
    }
    return 0;
}

static PyObject *tn_bl_shape_tuple(int nd, const npy_intp *dims)
{
    PyObject *t = PyTuple_New(nd);
    for (int d = 0; t != NULL && d < nd; d++) {
        PyObject *n = PyLong_FromSsize_t(dims[d]);
        if (n == NULL) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, d, n);
    }
    return t;
}

/* ValueError "<fname>: <what> of shape <a> and <b> ...". */
static void tn_bl_shape_error(const char *fname, const char *text, const char *l1,
                              PyArrayObject *a1, const char *l2, int nd2, const npy_intp *d2)
{
    PyObject *s1 = tn_bl_shape_tuple(PyArray_NDIM(a1), PyArray_DIMS(a1));
    PyObject *s2 = tn_bl_shape_tuple(nd2, d2);
    if (s1 != NULL && s2 != NULL)
        PyErr_Format(PyExc_ValueError, "%s: %s of shape %R and %s of shape %R %s", fname, l1, s1,
                     l2, s2, text);
    Py_XDECREF(s1);
    Py_XDECREF(s2);
}

/* The output: the dtype, ndim and shape expected, and writeable. */
static int tn_bl_check_out(const char *fname, PyArrayObject *out, int type_num,
                           const char *dtype_name, int ndim, const npy_intp *shape)
{
    if (tn_bl_check(fname, "output 0", out, type_num, dtype_name, ndim) < 0)
        return -1;
    if (!PyArray_CompareLists(PyArray_DIMS(out), shape, ndim)) {
        tn_bl_shape_error(fname, "differ: the output has the wrong shape", "output 0", out,
                          "the result", ndim, shape);
        return -1;
    }
    if (!PyArray_ISWRITEABLE(out)) {
        PyErr_Format(PyExc_ValueError, "%s: output 0 is read-only", fname);
        return -1;
    }
    return 0;
}

static void tn_bl_extent(PyArrayObject *a, char **lo, char **hi)
{
    char *l = PyArray_BYTES(a), *h = PyArray_BYTES(a);
    for (int d = 0; d < PyArray_NDIM(a); d++) {
        const npy_intp step = PyArray_STRIDE(a, d) * (PyArray_DIM(a, d) - 1);
        if (step < 0) l += step; else h += step;
    }
    *lo = l;
    *hi = h + PyArray_ITEMSIZE(a);
}

/* Whether the memory of a and b may meet (by extent). */
static int tn_bl_overlap(PyArrayObject *a, PyArrayObject *b)
{
    char *lo1, *hi1, *lo2, *hi2;
    if (PyArray_SIZE(a) == 0 || PyArray_SIZE(b) == 0)
        return 0;
    tn_bl_extent(a, &lo1, &hi1);
    tn_bl_extent(b, &lo2, &hi2);
    return !(hi1 <= lo2 || hi2 <= lo1);
}

static int tn_bl_same(PyArrayObject *a, PyArrayObject *b)
{
    return a == b || (PyArray_BYTES(a) == PyArray_BYTES(b) && PyArray_NDIM(a) == PyArray_NDIM(b)
                      && PyArray_CompareLists(PyArray_DIMS(a), PyArray_DIMS(b), PyArray_NDIM(a))
                      && PyArray_CompareLists(PyArray_STRIDES(a), PyArray_STRIDES(b),
                                              PyArray_NDIM(a)));
}

/* in[i]: a new reference to inputs[i], or to a copy of it when it overlaps out. */
static int tn_bl_private(PyArrayObject *out, PyArrayObject **inputs, int n, PyArrayObject **in)
{
    for (int i = 0; i < n; i++) {
        if (tn_bl_overlap(out, inputs[i])) {
            in[i] = (PyArrayObject *)PyArray_NewCopy(inputs[i], NPY_ANYORDER);
            if (in[i] == NULL) {
                for (int j = 0; j < i; j++)
                    Py_CLEAR(in[j]);
                return -1;
            }
        } else {
            Py_INCREF(inputs[i]);
            in[i] = inputs[i];
        }
    }
    return 0;
}

/* ---- batches of products ---- */

/* The roles of the axes of one product node (-1 where absent): batch axis j is
 * axis ba[j] of a, bb[j] of b, bo[j] of the output; a's rows am (output om),
 * the summed axes ak, bk, b's columns bn (output on). */
typedef struct {
    int nb;
    const int *ba, *bb, *bo;
    int am, ak, bk, bn, om, on, ond;
} tn_mm_axes;

typedef struct {
    int nb;
    npy_intp len[NPY_MAXDIMS], sa[NPY_MAXDIMS], sb[NPY_MAXDIMS], sc[NPY_MAXDIMS];
    tn_mat a, b, c;
} tn_mm_desc;

/* The batch and matrices of a @ b in d, and the output shape; ValueError when
 * the summed lengths differ or the batch axes do not broadcast. */
static int tn_mm_layout(const char *fname, const char *la, const char *lb, const tn_mm_axes *x,
                        PyArrayObject *a, PyArrayObject *b, tn_mm_desc *d, npy_intp *shape)
{
    const npy_intp k = PyArray_DIM(a, x->ak), kb = PyArray_DIM(b, x->bk);
    if (k != kb) {
        tn_bl_shape_error(fname, "are not aligned: the summed lengths differ", la, a, lb,
                          PyArray_NDIM(b), PyArray_DIMS(b));
        return -1;
    }
    d->nb = x->nb;
    for (int j = 0; j < x->nb; j++) {
        const npy_intp na = x->ba[j] >= 0 ? PyArray_DIM(a, x->ba[j]) : 1;
        const npy_intp nb = x->bb[j] >= 0 ? PyArray_DIM(b, x->bb[j]) : 1;
        const npy_intp n = na == 1 ? nb : na;
        if (nb != 1 && nb != n) {
            tn_bl_shape_error(fname, "do not broadcast: their batch axes differ", la, a, lb,
                              PyArray_NDIM(b), PyArray_DIMS(b));
            return -1;
        }
        d->len[j] = n;
        d->sa[j] = x->ba[j] >= 0 && na != 1 ? PyArray_STRIDE(a, x->ba[j]) : 0;
        d->sb[j] = x->bb[j] >= 0 && nb != 1 ? PyArray_STRIDE(b, x->bb[j]) : 0;
        d->sc[j] = 0;
        shape[x->bo[j]] = n;
    }
    d->a.p = PyArray_BYTES(a);
    d->a.r = x->am >= 0 ? PyArray_DIM(a, x->am) : 1;
    d->a.c = k;
    d->a.sr = x->am >= 0 ? PyArray_STRIDE(a, x->am) : 0;
    d->a.sc = PyArray_STRIDE(a, x->ak);
    d->b.p = PyArray_BYTES(b);
    d->b.r = k;
    d->b.c = x->bn >= 0 ? PyArray_DIM(b, x->bn) : 1;
    d->b.sr = PyArray_STRIDE(b, x->bk);
    d->b.sc = x->bn >= 0 ? PyArray_STRIDE(b, x->bn) : 0;
    d->c.p = NULL;
    d->c.r = d->a.r;
    d->c.c = d->b.c;
    d->c.sr = d->c.sc = 0;
    if (x->om >= 0)
        shape[x->om] = d->a.r;
    if (x->on >= 0)
        shape[x->on] = d->b.c;
    return 0;
}

/* The output's pointer and strides into d (its shape is checked). */
static void tn_mm_output(const tn_mm_axes *x, tn_mm_desc *d, PyArrayObject *out)
{
    d->c.p = PyArray_BYTES(out);
    d->c.sr = x->om >= 0 ? PyArray_STRIDE(out, x->om) : 0;
    d->c.sc = x->on >= 0 ? PyArray_STRIDE(out, x->on) : 0;
    for (int j = 0; j < x->nb; j++)
        d->sc[j] = PyArray_STRIDE(out, x->bo[j]);
}

/* Every product of the batch. */
static int tn_mm_batched(tn_mm_desc *d, tn_mm_kernel kernel, double alpha, double beta)
{
    npy_intp index[NPY_MAXDIMS];
    char *pa, *pb, *pc;
    int nb = 0, j;
    if (d->c.r == 0 || d->c.c == 0)
        return 0;
    for (j = 0; j < d->nb; j++) {  /* length-1 axes go */
        if (d->len[j] == 0)
            return 0;
        if (d->len[j] == 1)
            continue;
        d->len[nb] = d->len[j]; d->sa[nb] = d->sa[j]; d->sb[nb] = d->sb[j];
        d->sc[nb] = d->sc[j];
        nb++;
    }
    /* Fold inner batch axes along which b stays put into the rows. */
    while (nb > 0 && d->sb[nb - 1] == 0 && d->sa[nb - 1] != 0 && d->c.r <= NPY_MAX_INTP / d->len[nb - 1]
           && (d->c.r == 1 || (d->sa[nb - 1] == d->c.r * d->a.sr
                               && d->sc[nb - 1] == d->c.r * d->c.sr))) {
        if (d->c.r == 1) {
            d->a.sr = d->sa[nb - 1];
            d->c.sr = d->sc[nb - 1];
        }
        d->a.r = d->c.r = d->c.r * d->len[nb - 1];
        nb--;
    }
    pa = d->a.p; pb = d->b.p; pc = d->c.p;
    memset(index, 0, sizeof index);
    for (;;) {
        tn_mat A = d->a, B = d->b, C = d->c;
        A.p = pa; B.p = pb; C.p = pc;
        if (kernel(&A, &B, &C, alpha, beta) < 0)
            return -1;
        for (j = nb - 1; j >= 0; j--) {
            pa += d->sa[j]; pb += d->sb[j]; pc += d->sc[j];
            if (++index[j] < d->len[j])
                break;
            pa -= d->sa[j] * d->len[j]; pb -= d->sb[j] * d->len[j]; pc -= d->sc[j] * d->len[j];
            index[j] = 0;
        }
        if (j < 0)
            return 0;
    }
}

/* ---- gemm ---- */

/* z (2-d) must broadcast to shape (the product's); shape becomes the result's. */
static int tn_bl_broadcast2(const char *fname, const char *label, PyArrayObject *z,
                            npy_intp *shape)
{
    npy_intp out[2];
    for (int d = 0; d < 2; d++) {
        const npy_intp n = PyArray_DIM(z, d);
        if (n != shape[d] && n != 1 && shape[d] != 1) {
            tn_bl_shape_error(fname, "cannot be broadcast together", label, z, "x @ y", 2,
                              shape);
            return -1;
        }
        out[d] = shape[d] == 1 ? n : shape[d];
    }
    shape[0] = out[0];
    shape[1] = out[1];
    return 0;
}

/* out = beta * z + alpha * (x @ y), as gemm.py's perform computes it. */
static int tn_gemm_run(const char *fname, const tn_mm_axes *axes, PyArrayObject *z,
                       PyArrayObject *x, PyArrayObject *y, PyArrayObject *out, double alpha,
                       double beta, tn_mm_kernel kernel, int type_num)
{
    PyArrayObject *ins[2] = {x, y}, *in[2] = {NULL, NULL}, *product = NULL;
    npy_intp shape[2];
    tn_mm_desc d;
    int status = -1;
    if (!tn_bl_same(out, z)) {  /* z into the output first */
        PyArrayObject *zc = z;
        if (tn_bl_overlap(out, z)) {
            zc = (PyArrayObject *)PyArray_NewCopy(z, NPY_ANYORDER);
            if (zc == NULL)
                return -1;
        } else {
            Py_INCREF(zc);
        }
        status = PyArray_CopyInto(out, zc);
        Py_DECREF(zc);
        if (status < 0)
            return -1;
        status = -1;
    }
    if (tn_bl_private(out, ins, 2, in) < 0)
        return -1;
    if (tn_mm_layout(fname, "x", "y", axes, in[0], in[1], &d, shape) < 0)
        goto done;
    if (PyArray_CompareLists(PyArray_DIMS(out), shape, 2) && PyArray_SIZE(out) > 0
            && d.a.c > 0 && alpha != 0 && beta != 0) {
        tn_mm_output(axes, &d, out);
        status = tn_mm_batched(&d, kernel, alpha, beta);
        goto done;
    }
    /* The NumPy path: the product, then out * beta + product * alpha. */
    product = (PyArrayObject *)PyArray_EMPTY(2, shape, type_num, 0);
    if (product == NULL)
        goto done;
    tn_mm_output(axes, &d, product);
    if (tn_mm_batched(&d, kernel, 1.0, 0.0) < 0)
        goto done;
    {
        const npy_intp m = PyArray_DIM(out, 0), n = PyArray_DIM(out, 1);
        const npy_intp sp0 = shape[0] == 1 ? 0 : PyArray_STRIDE(product, 0);
        const npy_intp sp1 = shape[1] == 1 ? 0 : PyArray_STRIDE(product, 1);
        const npy_intp so0 = PyArray_STRIDE(out, 0), so1 = PyArray_STRIDE(out, 1);
        const char *pp = PyArray_BYTES(product);
        char *po = PyArray_BYTES(out);
        for (npy_intp i = 0; i < m; i++)
            for (npy_intp j = 0; j < n; j++) {
                char *q = po + i * so0 + j * so1;
                const char *p = pp + i * sp0 + j * sp1;
                if (type_num == NPY_FLOAT64) {
                    npy_float64 t, u;
                    memcpy(&t, q, sizeof t); memcpy(&u, p, sizeof u);
                    t = t * (npy_float64)beta + u * (npy_float64)alpha;
                    memcpy(q, &t, sizeof t);
                } else {
                    npy_float32 t, u;
                    memcpy(&t, q, sizeof t); memcpy(&u, p, sizeof u);
                    t = t * (npy_float32)beta + u * (npy_float32)alpha;
                    memcpy(q, &t, sizeof t);
                }
            }
    }
    status = 0;
done:
    Py_XDECREF(product);
    Py_XDECREF(in[0]);
    Py_XDECREF(in[1]);
    return status;
}
"""


def _float_kernels() -> str:
    return "".join(_FLOAT_KERNEL.replace("@name@", name).replace("@T@", ps.c_type(name))
                   .replace("@p@", p) for name, p in (("float64", "d"), ("float32", "s")))


#: C helpers every generated function needs, once per module (include-guarded)
SUPPORT_CODE = _no_contract(_SUPPORT + _float_kernels() + "#endif /* TN_BLAS_SUPPORT */\n")


# --------------------------------------------------------------------------
# A standalone module, for tests and debugging


_ENTRY_SUPPORT = r"""
/* Entry points of a standalone module: run(*inputs, out=None). */
typedef struct {
    const char *name;
    int nin, out_type_num, out_ndim;
    int inplace_input;                /* the input the output overwrites, or -1 */
    int (*shape)(PyArrayObject **, npy_intp *);
    int (*func)(PyArrayObject **, PyArrayObject **);
} tn_bl_spec;

static PyObject *tn_bl_call(const tn_bl_spec *spec, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"out", NULL};
    PyObject *out_obj = NULL, *empty = NULL;
    PyArrayObject *in[8], *out = NULL;
    npy_intp shape[NPY_MAXDIMS];
    int ok = 0;
    if (kwds != NULL) {
        empty = PyTuple_New(0);
        if (empty == NULL || !PyArg_ParseTupleAndKeywords(empty, kwds, "|O", keywords, &out_obj))
            goto done;
    }
    if (PyTuple_GET_SIZE(args) != spec->nin) {
        PyErr_Format(PyExc_TypeError, "%s: expected %d input(s), got %zd", spec->name, spec->nin,
                     PyTuple_GET_SIZE(args));
        goto done;
    }
    for (int i = 0; i < spec->nin; i++) {
        PyObject *obj = PyTuple_GET_ITEM(args, i);
        if (!PyArray_Check(obj)) {
            PyErr_Format(PyExc_TypeError, "%s: input %d: expected a numpy.ndarray, got %s",
                         spec->name, i, Py_TYPE(obj)->tp_name);
            goto done;
        }
        in[i] = (PyArrayObject *)obj;
    }
    if (spec->shape(in, shape) < 0)
        goto done;
    if (out_obj != NULL && out_obj != Py_None) {
        if (!PyArray_Check(out_obj)) {
            PyErr_Format(PyExc_TypeError, "%s: out: expected a numpy.ndarray, got %s",
                         spec->name, Py_TYPE(out_obj)->tp_name);
            goto done;
        }
        out = (PyArrayObject *)out_obj;
        Py_INCREF(out);
    } else if (spec->inplace_input >= 0
               && PyArray_EquivTypenums(PyArray_TYPE(in[spec->inplace_input]), spec->out_type_num)
               && PyArray_NDIM(in[spec->inplace_input]) == spec->out_ndim
               && PyArray_ISWRITEABLE(in[spec->inplace_input])
               && PyArray_CompareLists(PyArray_DIMS(in[spec->inplace_input]), shape,
                                       spec->out_ndim)) {
        out = in[spec->inplace_input];
        Py_INCREF(out);
    } else {
        out = (PyArrayObject *)PyArray_EMPTY(spec->out_ndim, shape, spec->out_type_num, 0);
        if (out == NULL)
            goto done;
    }
    ok = spec->func(in, &out) == 0;
done:
    Py_XDECREF(empty);
    if (!ok) {
        Py_XDECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}
"""

_HEADERS = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <numpy/arrayobject.h>
"""


def _entry(node: Apply, entry: str, fname: str) -> tuple[str, str]:
    dtype = _dtype(node)
    out = node.outputs[0]
    inplace = node.op.destroy_map.get(0, [-1])[0] if isinstance(node.op, Gemm) else -1
    doc = _c_string(f"{entry}(*inputs, out=None): {node.op} compiled; returns the output")
    code = f"""
static const tn_bl_spec {entry}_spec = {{
    {_c_string(entry)}, {len(node.inputs)}, {_NPY_TYPES[dtype]}, {out.ndim}, {inplace},
    {fname}_shape, {fname}}};

static PyObject *tn_entry_{entry}(PyObject *self, PyObject *args, PyObject *kwds)
{{
    (void)self;
    return tn_bl_call(&{entry}_spec, args, kwds);
}}
"""
    method = (f'{{{_c_string(entry)}, (PyCFunction)(void (*)(void))tn_entry_{entry}, '
              f'METH_VARARGS | METH_KEYWORDS, {doc}}},')
    return code, method


def module_source(node: Apply | Mapping[str, Apply], name: str) -> str:
    """A complete extension module ``name`` computing ``node``: entry ``run``,
    or one entry per key of a mapping ``{entry_name: node}``.  An entry takes
    the node's inputs (arrays; Gemm's alpha and beta as 0-d arrays) and
    ``out=`` (an array of the output's shape to write, or None), computes the
    output into ``out``, else, for in-place Gemm, into ``z`` when ``z`` has the
    output's shape and is writeable, else into a new array, and returns it."""
    return module_text(name, node, prefix="tn_bl", c_function=c_function, entry=_entry,
                       headers=_HEADERS, support=SUPPORT_CODE, entry_support=_ENTRY_SUPPORT,
                       doc="tenure BLAS kernels", init="\n    if (tn_blas_init() < 0)\n        return NULL;")


def build_module(node: Apply | Mapping[str, Apply], name: str, compiledir=None):
    """Compile (or fetch from the cache) and import :func:`module_source`'s module."""
    from tenure.linkers.c.cache import load_module
    return load_module(name, module_source(node, name), flags=COMPILE_FLAGS,
                       compiledir=compiledir)
