"""C code for the neural-network ops of :mod:`tenure.symbolic.ops.nnet`:
``Softmax``, ``LogSoftmax`` and ``LogSumExp`` over any axes (``keepdims`` for
``LogSumExp``), on float32 and float64 inputs (whose output dtype is the
input's; integer and boolean inputs, which give float64, run their perform).

Same API as :mod:`tenure.linkers.c.elemwise` and :mod:`tenure.linkers.c.reduce`
(the C text helpers come from :mod:`.cgen`):

- :func:`has_c_code` ``(node) -> bool``; :func:`c_function` ``(node, fname) -> str``:
  the C definition of ``static int fname(PyArrayObject **inputs, PyArrayObject **outputs)``;
- the C runtime's API (:func:`.runtime.header`) earlier in the module: the
  checks and the row loops, one per dtype, are in ``src/nnet.c.src``;
- :data:`COMPILE_FLAGS` (elemwise's);
- :func:`module_source` / :func:`build_module` for standalone tests: entries
  ``run(x, out=None)``.

The generated function -- its contract with the caller:

- ``inputs[0]`` is the node's input, of the output's dtype (native byte
  order), any strides (negative too);
- ``outputs[0]`` is allocated by the caller with the output's shape (the
  input's for softmax and log_softmax; the reduced shape, length 1 on reduced
  axes with keepdims, for logsumexp) and dtype, any strides.  It may be the
  input itself (exactly): the kernels read each row before writing it; any
  other overlap is detected and goes through a copy.
- Dtypes, ndims, the output's shape and writeability are checked on every
  call (``TypeError``/``ValueError``).  Returns 0, or -1 with a Python
  exception set (the caller holds the GIL).

What is computed, row by row (a row: the values along the reduced axes), as
``perform`` does: ``m``, the row's maximum, replaced by 0 when it is not
finite (all -inf, any +inf, or any NaN -- a NaN makes the row's sum NaN, so
the whole row NaN, whatever ``m``); ``e = exp(x - m)`` and its sum ``s``
(rounded to the dtype; float32 sums accumulate in double, 16 lanes, so they are
at least as accurate as NumPy's pairwise float32 sum); then softmax ``e / s``,
log_softmax ``(x - m) - log(s)``, logsumexp ``log(s) + m``.  So rows of -inf
give NaN (softmax, log_softmax) and -inf (logsumexp), a +inf gives NaN where
perform does, and an empty reduced axis gives an empty output (softmax,
log_softmax) or -inf (logsumexp), like perform.  NumPy's warnings (0/0,
log(0)) are not issued.

Loops.  When the reduced axes are the trailing ones and the input and output
are C-contiguous and aligned, the rows are read in place: one pass for the
maximum (16 lanes), one computing ``exp`` a block of :data:`BLOCK` at a time
into a stack buffer (vectorized through libmvec) and summing it, and one
writing the row.  Otherwise the input is copied (kept axes first, reduced axes
last, C order), the rows computed into a contiguous temporary and that copied
into the output.  No OpenMP.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tenure.linkers.c.cgen import HEADERS, NPY_TYPES, c_string, comment, table
from tenure.linkers.c.elemwise import COMPILE_FLAGS
from tenure.linkers.c.standalone import module_text
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax

__all__ = ["BLOCK", "COMPILE_FLAGS", "build_module", "c_function", "has_c_code",
           "module_source", "spec"]

#: values exponentiated at a time (on the stack) along a row
BLOCK = 256

_KIND = {Softmax: 0, LogSoftmax: 1, LogSumExp: 2}
_FLOATS = ("float32", "float64")


def has_c_code(node: Apply) -> bool:
    """Whether :func:`c_function` can compile ``node``."""
    op = node.op
    if type(op) not in _KIND or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype not in _FLOATS or out.dtype != x.dtype or x.ndim > 32:
        return False
    return all(0 <= a < x.ndim for a in op.axis)


def spec(node: Apply) -> tuple[int, list[int], int, int]:
    """``(kind, reduced flags per input axis, keepdims, output ndim)``."""
    if not has_c_code(node):
        raise NotImplementedError(f"no C code for {node.op}")
    op = node.op
    nd = node.inputs[0].ndim
    reduced = [1 if d in op.axis else 0 for d in range(nd)]
    kind = _KIND[type(op)]
    keepdims = int(op.keepdims) if kind == 2 else -1  # -1: the input's shape
    return kind, reduced, keepdims, node.outputs[0].ndim


def c_function(node: Apply, fname: str) -> str:
    """C source of ``static int fname(PyArrayObject **inputs, PyArrayObject
    **outputs)`` computing ``node`` (see the module doc for the contract)."""
    kind, reduced, keepdims, out_nd = spec(node)
    nd = len(reduced)
    dtype = np.dtype(node.outputs[0].dtype)
    return f"""
/* {comment(str(node.op))} on {dtype.name} */
static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    static const int reduced[] = {table(map(str, reduced or [0]))};
    if (tn_nn_check({c_string(str(node.op))}, inputs[0], outputs[0], {NPY_TYPES[dtype.name]},
                    {c_string(dtype.name)}, {nd}, reduced, {keepdims}, {out_nd}) < 0)
        return -1;
    return tn_nn_run({kind}, inputs[0], outputs[0], {nd}, reduced);
}}
"""




# --------------------------------------------------------------------------
# A standalone module, for tests and debugging


_ENTRY_SUPPORT = r"""
/* Entry points of a standalone module: run(x, out=None). */
typedef int (*tn_nn_func)(PyArrayObject **, PyArrayObject **);

typedef struct {
    const char *name;
    int nd;
    const int *reduced;
    int keepdims, out_type_num, out_ndim;
    tn_nn_func func;
} tn_nn_spec;

static PyObject *tn_nn_call(const tn_nn_spec *spec, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"x", "out", NULL};
    PyObject *x_obj = NULL, *out_obj = NULL;
    PyArrayObject *in[1], *out = NULL;
    npy_intp shape[NPY_MAXDIMS];
    int o = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", keywords, &x_obj, &out_obj))
        return NULL;
    if (!PyArray_Check(x_obj) || PyArray_NDIM((PyArrayObject *)x_obj) != spec->nd) {
        PyErr_Format(PyExc_TypeError, "%s: input 0: expected a numpy.ndarray with %d "
                     "dimension(s)", spec->name, spec->nd);
        return NULL;
    }
    in[0] = (PyArrayObject *)x_obj;
    for (int d = 0; d < spec->nd; d++) {
        if (!spec->reduced[d])
            shape[o++] = PyArray_DIM(in[0], d);
        else if (spec->keepdims)
            shape[o++] = 1;
    }
    if (out_obj != NULL && out_obj != Py_None) {
        if (!PyArray_Check(out_obj)) {
            PyErr_Format(PyExc_TypeError, "%s: out: expected a numpy.ndarray", spec->name);
            return NULL;
        }
        out = (PyArrayObject *)out_obj;
        Py_INCREF(out);
    } else {
        out = (PyArrayObject *)PyArray_EMPTY(spec->out_ndim, shape, spec->out_type_num, 0);
        if (out == NULL)
            return NULL;
    }
    if (spec->func(in, &out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}
"""


def _entry(node: Apply, entry: str, fname: str) -> tuple[str, str]:
    kind, reduced, keepdims, out_nd = spec(node)
    dtype = np.dtype(node.outputs[0].dtype)
    # softmax / log_softmax keep every axis: their "reduced" axes keep their length
    shape_reduced = reduced if kind == 2 else [0] * len(reduced)
    doc = c_string(f"{entry}(x, out=None): {node.op} compiled; returns the output")
    code = f"""
static const int {entry}_reduced[] = {table(map(str, shape_reduced or [0]))};
static const tn_nn_spec {entry}_spec = {{
    {c_string(entry)}, {len(reduced)}, {entry}_reduced, {keepdims},
    {NPY_TYPES[dtype.name]}, {out_nd}, {fname}}};

static PyObject *tn_entry_{entry}(PyObject *self, PyObject *args, PyObject *kwds)
{{
    (void)self;
    return tn_nn_call(&{entry}_spec, args, kwds);
}}
"""
    method = (f'{{{c_string(entry)}, (PyCFunction)(void (*)(void))tn_entry_{entry}, '
              f'METH_VARARGS | METH_KEYWORDS, {doc}}},')
    return code, method


def module_source(node: Apply | Mapping[str, Apply], name: str) -> str:
    """A complete extension module ``name`` computing ``node``: entry ``run``,
    or one entry per key for a mapping ``{entry_name: node}``.  An entry takes
    the input (an array of exactly the output's dtype and the input's ndim)
    and ``out=`` (an array of the output's shape and dtype, or None for a new
    C-ordered one), computes into it and returns it."""
    return module_text(name, node, prefix="tn_nn", c_function=c_function, entry=_entry,
                       headers=HEADERS, support="", entry_support=_ENTRY_SUPPORT,
                       doc="tenure softmax / log_softmax / logsumexp kernels")


def build_module(node: Apply | Mapping[str, Apply], name: str, compiledir=None):
    """Compile (or fetch from the cache) and import :func:`module_source`'s module."""
    from tenure.linkers.c.cache import load_module
    return load_module(name, module_source(node, name), flags=COMPILE_FLAGS,
                       compiledir=compiledir)
