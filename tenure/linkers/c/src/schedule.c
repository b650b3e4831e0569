/* The schedule helpers of a graph module's run() (see the doc of
 * tenure/linkers/c/module.py): which buffer a step writes, the steps without
 * C code, dead buffers handed on, the commit point and its backups.
 * Part of the runtime (runtime.c includes this file). */
static int tn_cl_fits(PyArrayObject *a, int typenum, int nd, const npy_intp *shape)
{
    return PyArray_EquivTypenums(PyArray_TYPE(a), typenum) && PyArray_ISNOTSWAPPED(a)
           && PyArray_NDIM(a) == nd && PyArray_ISWRITEABLE(a) && PyArray_ISALIGNED(a)
           && PyArray_CompareLists(PyArray_DIMS(a), shape, nd);
}

static void tn_cl_extent(PyArrayObject *a, char **lo, char **hi)
{
    char *l = PyArray_BYTES(a), *h = PyArray_BYTES(a);
    for (int d = 0; d < PyArray_NDIM(a); d++) {
        const npy_intp step = PyArray_STRIDE(a, d) * (PyArray_DIM(a, d) - 1);
        if (step < 0) l += step; else h += step;
    }
    *lo = l;
    *hi = h + PyArray_ITEMSIZE(a);
}

/* Whether the memory ranges of `a` and `b` meet. */
static int tn_cl_overlap(PyArrayObject *a, PyArrayObject *b)
{
    char *lo1, *hi1, *lo2, *hi2;
    if (PyArray_SIZE(a) == 0 || PyArray_SIZE(b) == 0)
        return 0;
    tn_cl_extent(a, &lo1, &hi1);
    tn_cl_extent(b, &lo2, &hi2);
    return !(hi1 <= lo2 || hi2 <= lo1);
}

/* Whether computing into `out` elementwise could overwrite `a` before it is
 * read: they overlap and `a` is not `out` itself (data, shape, strides). */
static int tn_cl_unsafe_overlap(PyArrayObject *out, PyArrayObject *a)
{
    if (!tn_cl_overlap(out, a))
        return 0;
    return !(PyArray_BYTES(out) == PyArray_BYTES(a) && PyArray_NDIM(out) == PyArray_NDIM(a)
             && PyArray_CompareLists(PyArray_DIMS(out), PyArray_DIMS(a), PyArray_NDIM(a))
             && PyArray_CompareLists(PyArray_STRIDES(out), PyArray_STRIDES(a), PyArray_NDIM(a)));
}

/* A step's input: an ndarray (borrowed), else TypeError. */
static int tn_cl_array(PyObject *obj, PyArrayObject **a, const char *what)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a numpy.ndarray, got %s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *a = (PyArrayObject *)obj;
    return 0;
}

/* The planned shape of a slot: 1 and `shape` filled when known, else 0. */
static int tn_cl_planned(const npy_intp *planned, Py_ssize_t offset, int nd, npy_intp *shape)
{
    if (planned == NULL || planned[offset] != 1)
        return 0;
    for (int d = 0; d < nd; d++)
        shape[d] = planned[offset + 2 + d];
    return 1;
}

/* The broadcast shape of the (non-NULL) inputs, right-aligned into `nd` axes.
 * Inputs that do not broadcast leave some length: the kernel then raises. */
static void tn_cl_broadcast(PyArrayObject **in, int nin, int nd, npy_intp *shape)
{
    for (int d = 0; d < nd; d++)
        shape[d] = 1;
    for (int i = 0; i < nin; i++) {
        if (in[i] == NULL)
            continue;
        for (int d = 0; d < PyArray_NDIM(in[i]); d++) {
            const int axis = d + nd - PyArray_NDIM(in[i]);
            if (axis >= 0 && PyArray_DIM(in[i], d) != 1)
                shape[axis] = PyArray_DIM(in[i], d);
        }
    }
}

/* The output of a C step (a new reference, NULL with an exception set): the
 * destroyed input of an in-place op when it fits, else the slot's array from
 * the last call when it fits and overlaps no input of the step or the graph,
 * else a new array. */
static PyArrayObject *tn_cl_output(PyObject *prev, PyArrayObject *destroyed, PyArrayObject **in,
                                   int nin, PyObject **S, const Py_ssize_t *graph_in, int ngraph_in,
                                   int typenum, int nd, const npy_intp *shape,
                                   PyArrayObject *taken)
{
    if (taken != NULL) {   /* a dead buffer of this call, handed on by the plan */
        if (destroyed == NULL && tn_cl_fits(taken, typenum, nd, shape))
            return taken;
        Py_DECREF(taken);
    }
    if (destroyed != NULL) {
        if (tn_cl_fits(destroyed, typenum, nd, shape)) {
            Py_INCREF(destroyed);
            return destroyed;
        }
    } else if (prev != NULL && PyArray_CheckExact(prev)
               && tn_cl_fits((PyArrayObject *)prev, typenum, nd, shape)) {
        PyArrayObject *p = (PyArrayObject *)prev;
        int ok = 1;
        for (int i = 0; ok && i < nin; i++)
            if (in[i] != NULL && tn_cl_overlap(p, in[i]))
                ok = 0;
        for (int j = 0; ok && j < ngraph_in; j++) {
            PyObject *v = S[graph_in[j]];
            if (PyArray_Check(v) && tn_cl_overlap(p, (PyArrayObject *)v))
                ok = 0;
        }
        if (ok) {
            Py_INCREF(p);
            return p;
        }
    }
    return (PyArrayObject *)PyArray_EMPTY(nd, (npy_intp *)shape, typenum, 0);
}

/* A step without C code: perform(node, [inputs], [[cell], ...]) as the Python
 * executor calls it, cells pre-filled with the slots' current values. */
static int tn_cl_py_step(PyObject **S, PyObject *entry, const Py_ssize_t *ins, int nin,
                         const Py_ssize_t *outs, int nout, PyObject **pre)
{
    PyObject *inputs, *cells = NULL, *r = NULL, *args[3];
    int status = -1;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "run: py_steps entries must be (perform, node)");
        for (int k = 0; k < nout; k++)
            Py_CLEAR(pre[k]);
        return -1;
    }
    inputs = PyList_New(nin);
    if (inputs == NULL) {
        for (int k = 0; k < nout; k++)
            Py_CLEAR(pre[k]);
        return -1;
    }
    for (int i = 0; i < nin; i++) {
        Py_INCREF(S[ins[i]]);
        PyList_SET_ITEM(inputs, i, S[ins[i]]);
    }
    cells = PyList_New(nout);
    if (cells == NULL)
        goto done;
    for (int k = 0; k < nout; k++) {
        PyObject *cell = PyList_New(1);
        if (cell == NULL)
            goto done;
        if (pre[k] != NULL) {           /* a dead buffer handed on: the cell takes it */
            PyList_SET_ITEM(cell, 0, pre[k]);
            pre[k] = NULL;
        } else {
            Py_INCREF(S[outs[k]]);
            PyList_SET_ITEM(cell, 0, S[outs[k]]);
        }
        PyList_SET_ITEM(cells, k, cell);
    }
    args[0] = PyTuple_GET_ITEM(entry, 1);
    args[1] = inputs;
    args[2] = cells;
    r = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), args, 3, NULL);
    if (r == NULL)
        goto done;
    for (int k = 0; k < nout; k++) {
        PyObject *cell = PyList_GET_ITEM(cells, k), *v;
        if (!PyList_Check(cell) || PyList_GET_SIZE(cell) < 1) {
            PyErr_SetString(PyExc_TypeError, "perform replaced an output cell");
            goto done;
        }
        v = PyList_GET_ITEM(cell, 0);
        Py_INCREF(v);
        Py_SETREF(S[outs[k]], v);
    }
    status = 0;
done:
    for (int k = 0; k < nout; k++)
        Py_CLEAR(pre[k]);
    Py_XDECREF(r);
    Py_XDECREF(cells);
    Py_DECREF(inputs);
    return status;
}

static void tn_cl_clear(PyObject **S, Py_ssize_t slot)
{
    Py_INCREF(Py_None);
    Py_SETREF(S[slot], Py_None);
}

/* Table layout (see graph_module): planned[0] is 1 when some buffer is handed
 * on; an output slot's entry at `offset` is [known, donor slot or -1, dims...];
 * planned[stash + slot] is 1 when that slot's dead buffer goes aside. */

/* A dead intermediate: dropped, or kept aside for the step that takes it. */
static void tn_cl_free(PyObject **S, PyObject **aside, const npy_intp *planned, Py_ssize_t stash,
                       Py_ssize_t slot)
{
    if (aside != NULL && planned[stash + slot]) {
        Py_XSETREF(aside[slot], S[slot]);
        Py_INCREF(Py_None);
        S[slot] = Py_None;
    } else {
        tn_cl_clear(S, slot);
    }
}

/* The dead buffer kept aside for `donor`, as a C-ordered array of `shape` and
 * `typenum` (a new reference), or NULL (no exception set) when it cannot be
 * used safely: it must be held by nobody else (reference counts: the aside
 * slot holds the only reference, to the array or to the one view of it),
 * own its memory, be C-contiguous, writeable, aligned and of exactly the
 * bytes needed.  It leaves `aside` either way: a donor is taken once. */
static PyArrayObject *tn_cl_take(PyObject **aside, Py_ssize_t donor, int typenum, int nd,
                                 const npy_intp *shape)
{
    PyObject *buf = aside[donor];
    PyArrayObject *owner, *view;
    PyArray_Descr *descr;
    npy_intp n = 1;
    aside[donor] = NULL;
    if (buf == NULL)
        return NULL;
    if (!PyArray_CheckExact(buf) || Py_REFCNT(buf) != 1)
        goto refuse;
    owner = (PyArrayObject *)buf;
    if (PyArray_BASE(owner) != NULL) {
        PyObject *base = PyArray_BASE(owner);
        if (!PyArray_CheckExact(base) || Py_REFCNT(base) != 1)
            goto refuse;
        owner = (PyArrayObject *)base;
    }
    if (PyArray_BASE(owner) != NULL || !PyArray_CHKFLAGS(owner, NPY_ARRAY_OWNDATA)
            || !PyArray_IS_C_CONTIGUOUS(owner) || !PyArray_ISWRITEABLE(owner)
            || !PyArray_ISALIGNED(owner) || !PyArray_ISNOTSWAPPED(owner))
        goto refuse;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    descr = PyArray_DescrFromType(typenum);
    if (descr == NULL) {
        PyErr_Clear();
        goto refuse;
    }
    if (n * (npy_intp)PyDataType_ELSIZE(descr) != PyArray_NBYTES(owner) || n == 0) {
        Py_DECREF(descr);
        goto refuse;
    }
    Py_INCREF(owner);
    Py_DECREF(buf);
    if (PyArray_TYPE(owner) == typenum && PyArray_NDIM(owner) == nd
            && PyArray_CompareLists(PyArray_DIMS(owner), shape, nd)) {
        Py_DECREF(descr);
        return owner;
    }
    view = (PyArrayObject *)PyArray_NewFromDescr(&PyArray_Type, descr, nd, (npy_intp *)shape,
                                                 NULL, PyArray_DATA(owner), NPY_ARRAY_CARRAY,
                                                 NULL);
    if (view == NULL) {
        PyErr_Clear();
        Py_DECREF(owner);
        return NULL;
    }
    if (PyArray_SetBaseObject(view, (PyObject *)owner) < 0) {
        PyErr_Clear();
        Py_DECREF(view);
        return NULL;
    }
    return view;
refuse:
    Py_DECREF(buf);
    return NULL;
}

/* The buffer planned for the output whose table entry is at `offset`, when
 * the plan hands it a dead one and its planned shape is known; else NULL. */
static PyArrayObject *tn_cl_take_planned(PyObject **aside, const npy_intp *planned,
                                         Py_ssize_t offset, int typenum, int nd)
{
    if (aside == NULL || planned[offset] != 1 || planned[offset + 1] < 0)
        return NULL;
    return tn_cl_take(aside, planned[offset + 1], typenum, nd, planned + offset + 2);
}
/* The commit point: call the commit hook (the last entry of py_steps, or
 * None) and, in backup mode (bit 2 of planned[0], or no table), copy the
 * storage of the shared variables written from here on into `backups`. */
static int tn_cl_commit(PyObject **S, PyObject *py_steps, Py_ssize_t n_steps,
                        const npy_intp *planned, const Py_ssize_t *written, Py_ssize_t n_written,
                        PyObject **backups)
{
    PyObject *hook = PyTuple_GET_ITEM(py_steps, n_steps);
    if (hook != Py_None) {
        PyObject *r = PyObject_CallNoArgs(hook);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if (planned != NULL && !(planned[0] & 2))
        return 0;
    for (Py_ssize_t i = 0; i < n_written; i++) {
        PyObject *value = S[written[i]];
        if (!PyArray_Check(value) || !PyArray_ISWRITEABLE((PyArrayObject *)value))
            continue;
        backups[i] = PyArray_NewCopy((PyArrayObject *)value, NPY_KEEPORDER);
        if (backups[i] == NULL)
            return -1;
    }
    return 0;
}

/* A step after the commit point raised: write the backups back (the
 * exception stays set). */
static void tn_cl_restore(PyObject **S, const Py_ssize_t *written, Py_ssize_t n_written,
                          PyObject **backups)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    for (Py_ssize_t i = 0; i < n_written; i++)
        if (backups[i] != NULL && PyArray_CopyInto((PyArrayObject *)S[written[i]],
                                                   (PyArrayObject *)backups[i]) < 0)
            PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

