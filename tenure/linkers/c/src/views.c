/* Views: shape ops and basic indexing as new array objects over their
 * input's memory, and the index reading they need (see
 * tenure/linkers/c/views.py).  Part of the runtime (runtime.c includes this
 * file). */
/* `obj` as an array of `typenum` and `nd` dims (a new reference), or NULL with
 * TypeError naming `what`.  A NumPy scalar stands for a 0-d array (a py step
 * may return one); it is immutable, so its copy is as good as a view. */
static PyArrayObject *tn_vw_as_array(PyObject *obj, int typenum, int nd, const char *what)
{
    PyArrayObject *a;
    if (PyArray_Check(obj)) {
        Py_INCREF(obj);
        a = (PyArrayObject *)obj;
    } else if (nd == 0 && PyArray_IsScalar(obj, Generic)) {
        a = (PyArrayObject *)PyArray_FromScalar(obj, NULL);
        if (a == NULL)
            return NULL;
    } else {
        PyErr_Format(PyExc_TypeError, "%s: expected a numpy.ndarray, got %s", what,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (!PyArray_EquivTypenums(PyArray_TYPE(a), typenum) || PyArray_NDIM(a) != nd) {
        PyArray_Descr *want = PyArray_DescrFromType(typenum);
        PyErr_Format(PyExc_TypeError, "%s: expected %d dimension(s) of dtype %S, got %d of %S",
                     what, nd, (PyObject *)want, PyArray_NDIM(a), (PyObject *)PyArray_DESCR(a));
        Py_XDECREF(want);
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* An integer of NumPy type `typenum` at `ptr` (any alignment) as an npy_intp;
 * uint64 values past its range clamp to NPY_MAX_INTP (out of range as an
 * index, and clipped the same as a slice bound).  -1 when not an integer type. */
static int tn_vw_read_int(const char *ptr, int typenum, npy_intp *value)
{
#define TN_VW_READ(T) { T v; memcpy(&v, ptr, sizeof v); *value = (npy_intp)v; return 0; }
    switch (typenum) {
    case NPY_BYTE: TN_VW_READ(npy_byte)
    case NPY_UBYTE: TN_VW_READ(npy_ubyte)
    case NPY_SHORT: TN_VW_READ(npy_short)
    case NPY_USHORT: TN_VW_READ(npy_ushort)
    case NPY_INT: TN_VW_READ(npy_int)
    case NPY_UINT: TN_VW_READ(npy_uint)
    case NPY_LONG: TN_VW_READ(npy_long)
    case NPY_LONGLONG: TN_VW_READ(npy_longlong)
    case NPY_ULONG: case NPY_ULONGLONG: {
        npy_ulonglong v = 0;
        memcpy(&v, ptr, typenum == NPY_ULONG ? sizeof(npy_ulong) : sizeof(npy_ulonglong));
        *value = v > (npy_ulonglong)NPY_MAX_INTP ? NPY_MAX_INTP : (npy_intp)v;
        return 0;
    }
    default:
        return -1;
    }
#undef TN_VW_READ
}

/* An index scalar: a 0-d integer array, a NumPy integer or a Python int. */
static int tn_vw_scalar(PyObject *obj, const char *what, npy_intp *value)
{
    if (PyArray_Check(obj)) {
        PyArrayObject *a = (PyArrayObject *)obj;
        if (PyArray_NDIM(a) == 0 && PyArray_ISNOTSWAPPED(a)
                && tn_vw_read_int(PyArray_BYTES(a), PyArray_TYPE(a), value) == 0)
            return 0;
        PyErr_Format(PyExc_TypeError, "%s: expected a 0-d integer array, got %d dimension(s) "
                     "of %S", what, PyArray_NDIM(a), (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    if (PyArray_IsScalar(obj, Integer) || (PyLong_Check(obj) && !PyBool_Check(obj))) {
        PyObject *i = PyNumber_Index(obj);
        int overflow = 0;
        long long v;
        if (i == NULL)
            return -1;
        v = PyLong_AsLongLongAndOverflow(i, &overflow);
        Py_DECREF(i);
        if (v == -1 && PyErr_Occurred())
            return -1;
        /* Beyond the range every index fails and every bound clips alike. */
        *value = overflow > 0 ? NPY_MAX_INTP : overflow < 0 ? -NPY_MAX_INTP : (npy_intp)v;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s: expected an integer, got %s", what, Py_TYPE(obj)->tp_name);
    return -1;
}

/* Integer index `i` into axis `axis` (length n): moves *data to the element,
 * or IndexError as NumPy raises it, naming `what`. */
static int tn_vw_int_index(npy_intp i, PyArrayObject *a, int axis, const char *what,
                           char **data)
{
    const npy_intp n = PyArray_DIM(a, axis);
    if (i < -n || i >= n) {
        PyErr_Format(PyExc_IndexError, "%s: index %zd is out of bounds for axis %d, which "
                     "has length %zd", what, (Py_ssize_t)i, axis, (Py_ssize_t)n);
        return -1;
    }
    *data += (i < 0 ? i + n : i) * PyArray_STRIDE(a, axis);
    return 0;
}

/* A slice of axis `axis`: Python's slice.indices, then NumPy's view of it
 * (an empty result starts at the first element with step 1, as in NumPy).
 * `has_*` are 0 for None bounds. */
static int tn_vw_slice(PyArrayObject *a, int axis, int has_start, npy_intp start, int has_stop,
                       npy_intp stop, int has_step, npy_intp step, const char *what,
                       char **data, npy_intp *dim, npy_intp *stride)
{
    Py_ssize_t first, last, by = has_step ? step : 1, len;
    if (by == 0) {
        PyErr_Format(PyExc_ValueError, "%s: slice step cannot be zero", what);
        return -1;
    }
    if (by < -PY_SSIZE_T_MAX)
        by = -PY_SSIZE_T_MAX;   /* as PySlice_Unpack: -by must not overflow */
    first = has_start ? start : (by < 0 ? PY_SSIZE_T_MAX : 0);
    last = has_stop ? stop : (by < 0 ? PY_SSIZE_T_MIN : PY_SSIZE_T_MAX);
    len = PySlice_AdjustIndices(PyArray_DIM(a, axis), &first, &last, by);
    if (len <= 0) {
        len = 0;
        first = 0;
        by = 1;
    }
    *data += first * PyArray_STRIDE(a, axis);
    *dim = len;
    *stride = by * PyArray_STRIDE(a, axis);
    return 0;
}

/* A view of `a` (a new reference): `nd` dims and strides from `data`, with
 * `a`'s dtype and writeability, its base `a` (NumPy collapses the chain). */
static PyObject *tn_vw_view(PyArrayObject *a, int nd, npy_intp *dims, npy_intp *strides,
                            char *data)
{
    PyArray_Descr *descr = PyArray_DESCR(a);
    PyArrayObject *v;
    Py_INCREF(descr);
    v = (PyArrayObject *)PyArray_NewFromDescr(&PyArray_Type, descr, nd, dims, strides, data,
                                              PyArray_FLAGS(a) & NPY_ARRAY_WRITEABLE, NULL);
    if (v == NULL)
        return NULL;
    Py_INCREF(a);
    if (PyArray_SetBaseObject(v, (PyObject *)a) < 0) {   /* steals `a`, even on failure */
        Py_DECREF(v);
        return NULL;
    }
    PyArray_UpdateFlags(v, NPY_ARRAY_UPDATE_ALL);
    return (PyObject *)v;
}

/* A shape as Python prints a tuple: "()", "(3,)", "(2, 3)" (into buf, n bytes). */
static const char *tn_vw_shape_str(char *buf, size_t n, int nd, const npy_intp *dims)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %zd" : "%zd", (Py_ssize_t)dims[d]);
    if (k < n)
        snprintf(buf + k, n - k, nd == 1 ? ",)" : ")");
    return buf;
}
