/* Advanced indexing steps: AdvancedSubtensor, and AdvancedIncSubtensor set or
 * inc, for an index of integer arrays on the leading axes and full slices
 * after them (see tenure/linkers/c/advanced.py).  Part of the runtime
 * (runtime.c includes this file, after views.c and schedule.c, whose helpers
 * it uses).
 *
 * The indexing itself is NumPy's, through its C entry points
 * (PyObject_GetItem, PyObject_SetItem, np.add.at): the same elements, order
 * of accumulation and errors as the ops' perform, without the Python around
 * it.  Each returns a new reference (the output) or NULL with the exception;
 * the caller holds the GIL. */

/* The NumPy index: per entry its index array, or a full slice (NULL). */
static PyObject *tn_ad_index(PyObject **items, int n)
{
    PyObject *index = PyTuple_New(n);
    if (index == NULL)
        return NULL;
    for (int e = 0; e < n; e++) {
        PyObject *item = items[e] != NULL ? Py_NewRef(items[e])
                                          : PySlice_New(NULL, NULL, NULL);
        if (item == NULL) {
            Py_DECREF(index);
            return NULL;
        }
        PyTuple_SET_ITEM(index, e, item);
    }
    return index;
}

/* The entries of an index, per entry the input holding its array
 * (`arrays[e]` >= 0) or NULL (a full slice), borrowed from `in`. */
static void tn_ad_items(PyObject **in, const int *arrays, int n, PyObject **items)
{
    for (int e = 0; e < n; e++)
        items[e] = arrays[e] >= 0 ? in[arrays[e]] : NULL;
}

/* The shape of x[index] (arrays first, then full slices: the arrays'
 * broadcast shape, then x's remaining axes) into `region`, its ndim the
 * result; -1 with perform's IndexError when the arrays do not broadcast. */
static int tn_ad_region(PyArrayObject *x, PyObject **items, int n, npy_intp *region)
{
    int nd = 0, k = 0;
    for (int e = 0; e < n && items[e] != NULL; e++, k++) {
        PyObject *a = items[e];
        const int an = PyArray_Check(a) ? PyArray_NDIM((PyArrayObject *)a) : 0;
        if (an > NPY_MAXDIMS)
            goto mismatch;
        /* right-aligned broadcast of the shapes so far with this one */
        if (an > nd) {
            memmove(region + (an - nd), region, (size_t)nd * sizeof *region);
            for (int d = 0; d < an - nd; d++)
                region[d] = 1;
            nd = an;
        }
        for (int d = 0; d < an; d++) {
            const npy_intp have = PyArray_DIM((PyArrayObject *)a, d);
            npy_intp *want = &region[nd - an + d];
            if (*want == 1)
                *want = have;
            else if (have != 1 && have != *want)
                goto mismatch;
        }
    }
    if (nd + PyArray_NDIM(x) - k > NPY_MAXDIMS) {
        PyErr_Format(PyExc_IndexError, "the indexed region has more than %d dimensions",
                     NPY_MAXDIMS);
        return -1;
    }
    for (int d = k; d < PyArray_NDIM(x); d++)
        region[nd++] = PyArray_DIM(x, d);
    return nd;
mismatch: {
        PyObject *shapes = PyUnicode_FromString(""), *part;
        char buf[64 * 24];
        for (int e = 0; e < n && items[e] != NULL && shapes != NULL; e++) {
            PyObject *a = items[e];
            const int an = PyArray_Check(a) ? PyArray_NDIM((PyArrayObject *)a) : 0;
            part = PyUnicode_FromFormat(e ? " %s" : "%s", tn_vw_shape_str(
                buf, sizeof buf, an, an ? PyArray_DIMS((PyArrayObject *)a) : NULL));
            Py_SETREF(shapes, part == NULL ? NULL : PyUnicode_Concat(shapes, part));
            Py_XDECREF(part);
        }
        if (shapes != NULL) {
            PyErr_Format(PyExc_IndexError, "shape mismatch: indexing arrays could not be "
                         "broadcast together with shapes %U", shapes);
            Py_DECREF(shapes);
        }
        return -1;
    }
}

/* AdvancedSubtensor: x[index], a new array. */
static PyObject *tn_ad_take(PyArrayObject *x, PyObject **in, const int *arrays, int n)
{
    PyObject *items[NPY_MAXDIMS], *index, *r;
    tn_ad_items(in, arrays, n, items);
    index = tn_ad_index(items, n);
    if (index == NULL)
        return NULL;
    r = PyObject_GetItem((PyObject *)x, index);
    Py_DECREF(index);
    return r;
}

/* The array an update writes into: x itself in place (when writeable), else
 * `planned` (a dead buffer the plan hands on; NULL for none) when it has x's
 * shape and overlaps no input, else a new copy -- as perform's _target. */
static PyArrayObject *tn_ad_target(PyArrayObject *x, PyObject **in, int nin, int inplace,
                                   PyArrayObject *planned)
{
    if (inplace && PyArray_ISWRITEABLE(x)) {
        Py_XDECREF(planned);
        Py_INCREF(x);
        return x;
    }
    if (planned != NULL) {
        int fits = PyArray_NDIM(planned) == PyArray_NDIM(x)
            && PyArray_CompareLists(PyArray_DIMS(planned), PyArray_DIMS(x), PyArray_NDIM(x))
            && PyArray_ISWRITEABLE(planned);
        for (int i = 0; i < nin && fits; i++)
            fits = !PyArray_Check(in[i]) || !tn_cl_overlap(planned, (PyArrayObject *)in[i]);
        if (fits && PyArray_CopyInto(planned, x) == 0)
            return planned;
        Py_DECREF(planned);
        if (PyErr_Occurred())
            return NULL;
    }
    return (PyArrayObject *)PyArray_NewCopy(x, NPY_CORDER);
}

/* `obj` read while `out` is written: a copy when it overlaps out, else itself
 * (a new reference either way), as perform copies what may share memory. */
static PyObject *tn_ad_unshared(PyObject *obj, PyArrayObject *out)
{
    if (PyArray_Check(obj) && tn_cl_overlap(out, (PyArrayObject *)obj))
        return PyArray_NewCopy((PyArrayObject *)obj, NPY_KEEPORDER);
    Py_INCREF(obj);
    return obj;
}

/* AdvancedIncSubtensor: `out` (from tn_ad_target) with out[index] set to
 * (`add_at` NULL) or incremented by (np.add.at) `v` broadcast to the region,
 * after perform's checks; `fn` names the op in errors. */
static PyObject *tn_ad_update(PyArrayObject *out, PyObject *v_obj, PyObject **in,
                              const int *arrays, int n, PyObject *add_at, const char *fn)
{
    npy_intp region[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    PyObject *index = NULL, *v = NULL, *r = NULL, *items[NPY_MAXDIMS];
    char buf[64 * 24], buf2[64 * 24];
    int nd, vnd, fits;
    tn_ad_items(in, arrays, n, items);
    for (int e = 0; e < n; e++)   /* index arrays that overlap out: read from copies */
        if (items[e] != NULL && (items[e] = tn_ad_unshared(items[e], out)) == NULL) {
            for (int f = e + 1; f < n; f++)
                items[f] = NULL;   /* (not yet owned: nothing to release) */
            goto done;
        }
    if ((nd = tn_ad_region(out, items, n, region)) < 0
            || (index = tn_ad_index(items, n)) == NULL)
        goto done;
    v = PyArray_FROM_OTF(v_obj, add_at == NULL ? NPY_NOTYPE : PyArray_TYPE(out),
                         NPY_ARRAY_FORCECAST);
    if (v == NULL)
        goto done;
    vnd = PyArray_NDIM((PyArrayObject *)v);
    fits = vnd <= nd;
    for (int d = 0; d < vnd && fits; d++) {
        const npy_intp have = PyArray_DIM((PyArrayObject *)v, d), want = region[nd - vnd + d];
        fits = have == 1 || have == want;
    }
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "%s: a value of shape %s cannot be broadcast to the "
                     "indexed region of shape %s", fn,
                     tn_vw_shape_str(buf, sizeof buf, vnd, PyArray_DIMS((PyArrayObject *)v)),
                     tn_vw_shape_str(buf2, sizeof buf2, nd, region));
        goto done;
    }
    Py_SETREF(v, tn_ad_unshared(v, out));   /* (reading v while writing out) */
    if (v == NULL)
        goto done;
    if (add_at == NULL) {
        if (PyObject_SetItem((PyObject *)out, index, v) == 0)
            r = (PyObject *)out;
        goto done;
    }
    /* np.add.at gets v already broadcast to the region (perform's workaround:
     * given a v that still needs broadcasting, NumPy 2.4 adds wrong elements) */
    for (int d = 0; d < nd; d++) {
        const int vd = d - (nd - vnd);
        strides[d] = vd < 0 || PyArray_DIM((PyArrayObject *)v, vd) != region[d]
            ? 0 : PyArray_STRIDE((PyArrayObject *)v, vd);
    }
    Py_SETREF(v, tn_vw_view((PyArrayObject *)v, nd, region, strides,
                            PyArray_BYTES((PyArrayObject *)v)));
    if (v == NULL)
        goto done;
    {
        PyObject *done_ = PyObject_CallFunctionObjArgs(add_at, (PyObject *)out, index, v, NULL);
        if (done_ != NULL) {
            Py_DECREF(done_);
            r = (PyObject *)out;
        }
    }
done:
    for (int e = 0; e < n; e++)
        Py_XDECREF(items[e]);
    Py_XDECREF(index);
    Py_XDECREF(v);
    if (r == NULL)
        Py_DECREF(out);
    return r;
}
