/* Shape steps: Shape, SumTo, ExpandTo, Alloc, Arange, MakeVector and
 * SpecifyShape, the shape bookkeeping that
 * gradients and shape inference leave in a graph (see
 * tenure/linkers/c/shapes.py).  Part of the runtime (runtime.c includes this
 * file, after views.c, whose helpers read the arrays and the dims).
 *
 * Each returns a new reference (the output) or NULL with the exception that
 * the op's perform raises; the caller holds the GIL. */

/* The dims inputs of SumTo/ExpandTo as npy_intp (0-d ints, NumPy integers or
 * Python ints, as perform's int(d) takes them). */
static int tn_sh_dims(PyObject **dims, int n, const char **whats, npy_intp *out)
{
    for (int d = 0; d < n; d++)
        if (tn_vw_scalar(dims[d], whats[d], &out[d]) < 0)
            return -1;
    return 0;
}

/* Shape: a new int64 vector of `a`'s lengths (np.array(x.shape, int64)). */
static PyObject *tn_sh_shape(PyArrayObject *a)
{
    npy_intp n = PyArray_NDIM(a);
    PyArrayObject *r = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT64);
    if (r == NULL)
        return NULL;
    for (npy_intp d = 0; d < n; d++)
        ((npy_int64 *)PyArray_DATA(r))[d] = (npy_int64)PyArray_DIM(a, (int)d);
    return (PyObject *)r;
}

/* Whether `a` has exactly the lengths `dims` (nd of them). */
static int tn_sh_has_shape(PyArrayObject *a, int nd, const npy_intp *dims)
{
    if (PyArray_NDIM(a) != nd)
        return 0;
    for (int d = 0; d < nd; d++)
        if (PyArray_DIM(a, d) != dims[d])
            return 0;
    return 1;
}

/* SumTo: `g` itself when it has the target lengths (nothing to sum: the
 * check is all this step costs); else `summing(g, dims)`, perform's own sum
 * (SumTo.summed_to and the cast to the output dtype), so that the sums round
 * as perform's do and fail with its errors. */
static PyObject *tn_sh_sum_to(PyArrayObject *g, int nd, const npy_intp *dims,
                              PyObject *summing)
{
    PyObject *target, *r;
    if (tn_sh_has_shape(g, nd, dims)) {
        Py_INCREF(g);
        return (PyObject *)g;
    }
    target = PyTuple_New(nd);
    if (target == NULL)
        return NULL;
    for (int d = 0; d < nd; d++) {
        PyObject *n = PyLong_FromSsize_t((Py_ssize_t)dims[d]);
        if (n == NULL) {
            Py_DECREF(target);
            return NULL;
        }
        PyTuple_SET_ITEM(target, d, n);
    }
    r = PyObject_CallFunctionObjArgs(summing, (PyObject *)g, target, NULL);
    Py_DECREF(target);
    return r;
}

/* ExpandTo: `v` itself when it has the target lengths; a view adding leading
 * length-1 axes when that is all it lacks; else a new array holding `v`
 * broadcast, after perform's checks and with its messages. */
static PyObject *tn_sh_expand_to(PyArrayObject *v, int nd, const npy_intp *dims,
                                 const char *name)
{
    const int vnd = PyArray_NDIM(v), lead = nd - vnd;
    char buf[64 * 24], buf2[64 * 24];
    int leading_ones = lead >= 0, fits = lead >= 0;
    PyArrayObject *r;
    if (tn_sh_has_shape(v, nd, dims)) {
        Py_INCREF(v);
        return (PyObject *)v;
    }
    for (int d = 0; d < nd; d++)
        if (dims[d] < 0) {
            PyErr_Format(PyExc_ValueError, "%s: negative dimensions are not allowed, got shape "
                         "%s", name, tn_vw_shape_str(buf, sizeof buf, nd, dims));
            return NULL;
        }
    for (int d = 0; d < nd && fits; d++) {
        if (d < lead) {
            leading_ones &= dims[d] == 1;
            continue;
        }
        const npy_intp have = PyArray_DIM(v, d - lead);
        leading_ones &= have == dims[d];
        fits &= have == dims[d] || have == 1;
    }
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "%s: value of shape %s cannot be broadcast to %s", name,
                     tn_vw_shape_str(buf, sizeof buf, vnd, PyArray_DIMS(v)),
                     tn_vw_shape_str(buf2, sizeof buf2, nd, dims));
        return NULL;
    }
    if (leading_ones) {   /* perform's value.reshape(dims): a view */
        PyArray_Dims shape = {(npy_intp *)dims, nd};
        return PyArray_Newshape(v, &shape, NPY_CORDER);
    }
    Py_INCREF(PyArray_DESCR(v));
    r = (PyArrayObject *)PyArray_NewFromDescr(&PyArray_Type, PyArray_DESCR(v), nd,
                                              (npy_intp *)dims, NULL, NULL, 0, NULL);
    if (r == NULL)
        return NULL;
    if (PyArray_CopyInto(r, v) < 0) {   /* broadcasts v, as np.broadcast_to(...).copy() */
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

/* Alloc: `v` broadcast into `out` (a buffer the plan hands on, NULL for a new
 * one; a new reference either way), after perform's checks and with their
 * messages. */
static PyObject *tn_sh_alloc(PyArrayObject *v, int nd, const npy_intp *dims, PyArrayObject *out)
{
    const int vnd = PyArray_NDIM(v), lead = nd - vnd;
    char buf[64 * 24], buf2[64 * 24];
    int fits = lead >= 0;
    for (int d = 0; d < nd; d++)
        if (dims[d] < 0) {
            PyErr_Format(PyExc_ValueError, "alloc: negative dimensions are not allowed, got "
                         "shape %s", tn_vw_shape_str(buf, sizeof buf, nd, dims));
            goto fail;
        }
    for (int d = 0; d < vnd && fits; d++)
        fits = PyArray_DIM(v, d) == dims[lead + d] || PyArray_DIM(v, d) == 1;
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "alloc: value of shape %s cannot be broadcast to %s",
                     tn_vw_shape_str(buf, sizeof buf, vnd, PyArray_DIMS(v)),
                     tn_vw_shape_str(buf2, sizeof buf2, nd, dims));
        goto fail;
    }
    if (out != NULL && !tn_sh_has_shape(out, nd, dims))
        Py_CLEAR(out);   /* a plan made for other shapes: never write past a buffer */
    if (out == NULL) {
        Py_INCREF(PyArray_DESCR(v));
        out = (PyArrayObject *)PyArray_NewFromDescr(&PyArray_Type, PyArray_DESCR(v), nd,
                                                    (npy_intp *)dims, NULL, NULL, 0, NULL);
        if (out == NULL)
            return NULL;
    }
    if (PyArray_CopyInto(out, v) < 0)
        goto fail;
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    return NULL;
}

/* A 0-d input as the Python number perform's v.item() gives (a new
 * reference): 0-d arrays and NumPy scalars through their item(), Python
 * numbers as they are. */
static PyObject *tn_sh_item(PyObject *obj)
{
    if (PyArray_Check(obj) || PyArray_IsScalar(obj, Generic))
        return PyObject_CallMethod(obj, "item", NULL);
    Py_INCREF(obj);
    return obj;
}

/* Arange: np.arange(start, stop, step, dtype) of the three inputs' items
 * (PyArray_ArangeObj, NumPy's own arange), after perform's check of step. */
static PyObject *tn_sh_arange(PyObject **in, int typenum)
{
    PyObject *items[3] = {NULL, NULL, NULL}, *zero = NULL, *r = NULL;
    PyArray_Descr *descr = NULL;
    int is_zero;
    for (int i = 0; i < 3; i++)
        if ((items[i] = tn_sh_item(in[i])) == NULL)
            goto done;
    if ((zero = PyLong_FromLong(0)) == NULL
            || (is_zero = PyObject_RichCompareBool(items[2], zero, Py_EQ)) < 0)
        goto done;
    if (is_zero) {
        PyErr_SetString(PyExc_ValueError, "arange: step must not be 0");
        goto done;
    }
    /* PyArray_ArangeObj borrows descr (NumPy's own arange releases it after) */
    if ((descr = PyArray_DescrFromType(typenum)) != NULL)
        r = PyArray_ArangeObj(items[0], items[1], items[2], descr);
done:
    Py_XDECREF(descr);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(items[i]);
    Py_XDECREF(zero);
    return r;
}

/* MakeVector: np.array(items, dtype) of the n 0-d inputs (NumPy's own
 * conversion, casting as it casts). */
static PyObject *tn_sh_make_vector(PyObject **in, int n, int typenum)
{
    PyObject *items = PyList_New(n), *r;
    if (items == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        Py_INCREF(in[i]);
        PyList_SET_ITEM(items, i, in[i]);
    }
    r = PyArray_FromAny(items, PyArray_DescrFromType(typenum), 0, 0,
                        NPY_ARRAY_DEFAULT | NPY_ARRAY_FORCECAST, NULL);   /* (steals the descr) */
    Py_DECREF(items);
    if (r != NULL && PyArray_NDIM((PyArrayObject *)r) != 1) {   /* perform's reshape(n) */
        npy_intp len = n;
        PyArray_Dims shape = {&len, 1};
        Py_SETREF(r, PyArray_Newshape((PyArrayObject *)r, &shape, NPY_CORDER));
    }
    return r;
}

/* SpecifyShape: a view of `x` (x.view()) once its shape is the one specified:
 * per axis `spec` is a length, -1 (not specified) or -2 (the next of `dims`,
 * the symbolic lengths); else perform's ValueError. */
static PyObject *tn_sh_specify(PyArrayObject *x, const int *spec, int nd, PyObject **dims,
                               const char **whats)
{
    npy_intp expected[NPY_MAXDIMS];
    int ok = PyArray_NDIM(x) == nd, k = 0;
    for (int d = 0; d < nd; d++) {
        expected[d] = spec[d];
        if (spec[d] == -2 && tn_vw_scalar(dims[k], whats[k], &expected[d]) < 0)
            return NULL;
        k += spec[d] == -2;
        ok &= expected[d] == -1 || (ok && expected[d] == PyArray_DIM(x, d));
    }
    if (!ok) {
        PyObject *want = PyUnicode_FromString("(");
        char buf[64 * 24];
        for (int d = 0; d < nd && want != NULL; d++) {
            PyObject *part = expected[d] == -1
                ? PyUnicode_FromFormat(d ? ", ?" : "?")
                : PyUnicode_FromFormat(d ? ", %zd" : "%zd", (Py_ssize_t)expected[d]);
            Py_SETREF(want, part == NULL ? NULL : PyUnicode_Concat(want, part));
            Py_XDECREF(part);
        }
        if (want != NULL) {
            PyObject *tail = PyUnicode_FromString(nd == 1 ? ",)" : ")");
            Py_SETREF(want, tail == NULL ? NULL : PyUnicode_Concat(want, tail));
            Py_XDECREF(tail);
        }
        if (want != NULL) {
            PyErr_Format(PyExc_ValueError, "specify_shape: expected shape %U, got an array of "
                         "shape %s", want, tn_vw_shape_str(buf, sizeof buf, PyArray_NDIM(x),
                                                           PyArray_DIMS(x)));
            Py_DECREF(want);
        }
        return NULL;
    }
    return tn_vw_view(x, PyArray_NDIM(x), PyArray_DIMS(x), PyArray_STRIDES(x), PyArray_BYTES(x));
}
