/* set_subtensor / inc_subtensor with basic indices (see
 * tenure/linkers/c/subtensor.py): the value's broadcast and a private copy
 * of it.  Part of the runtime (runtime.c includes this file). */
/* Strides of `v` seen as the region's shape (right-aligned, 0 on broadcast
 * and missing axes), or -1 with perform's ValueError when it does not
 * broadcast.  `fn` is "set_subtensor" or "inc_subtensor". */
static int tn_st_broadcast(PyArrayObject *v, int nd, const npy_intp *dims, npy_intp *vstrides,
                           const char *fn, const char *what)
{
    const int vnd = PyArray_NDIM(v);
    int ok = vnd <= nd;
    for (int d = 0; ok && d < vnd; d++) {
        const npy_intp len = PyArray_DIM(v, d), want = dims[d + nd - vnd];
        ok = len == 1 || len == want;
    }
    if (!ok) {
        char a[64 * 24], b[64 * 24];
        PyErr_Format(PyExc_ValueError, "%s: a value of shape %s cannot be broadcast to the "
                     "indexed region of shape %s (%s)", fn,
                     tn_vw_shape_str(a, sizeof a, vnd, PyArray_DIMS(v)),
                     tn_vw_shape_str(b, sizeof b, nd, dims), what);
        return -1;
    }
    for (int d = 0; d < nd; d++) {
        const int vd = d - (nd - vnd);
        vstrides[d] = (vd < 0 || PyArray_DIM(v, vd) == 1) ? 0 : PyArray_STRIDE(v, vd);
    }
    return 0;
}

/* The value to write: `v` as an aligned, native array of `typenum` (a new
 * reference), a private copy when `copy` (it overlaps the output). */
static PyArrayObject *tn_st_value(PyArrayObject *v, int typenum, int copy)
{
    int flags = NPY_ARRAY_ALIGNED | NPY_ARRAY_NOTSWAPPED | (copy ? NPY_ARRAY_ENSURECOPY : 0);
    return (PyArrayObject *)PyArray_FromArray(v, PyArray_DescrFromType(typenum), flags);
}
