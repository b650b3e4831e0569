/* FastCall: a compiled function's call path in C, without Python in between
 * (see tenure/linkers/c/call.py for what it does and when a function gets
 * one).  Part of the runtime (runtime.c includes this file and adds the type
 * to the runtime module). */
typedef struct {
    PyObject_HEAD
    PyObject *run, *storage, *py_steps, *status, *table_for, *on_error, *fallback;
    PyObject *deliver_interrupt;
    PyObject *containers, *update_containers, *locks;    /* tuples */
    Py_ssize_t n_in, n_out;
    int single;
    int *typenums, *ndims;              /* per explicit input */
    npy_intp *static_dims;              /* per explicit input, NPY_MAXDIMS each; -1: any */
    PyObject *last_table;               /* the table of the last signature (or NULL) */
    npy_intp *last_dims;                /* that signature: per value ndim then dims */
    Py_ssize_t last_len, last_cap;
} FastCall;

static PyObject *value_attr;            /* "value" */
static PyObject *acquire_name, *release_name;   /* "acquire", "release" */

static void fc_free_arrays(FastCall *self)
{
    PyMem_Free(self->typenums);
    PyMem_Free(self->ndims);
    PyMem_Free(self->static_dims);
    PyMem_Free(self->last_dims);
    self->typenums = self->ndims = NULL;
    self->static_dims = self->last_dims = NULL;
}

static int fc_traverse(FastCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->run); Py_VISIT(self->storage); Py_VISIT(self->py_steps);
    Py_VISIT(self->status); Py_VISIT(self->table_for); Py_VISIT(self->on_error);
    Py_VISIT(self->fallback); Py_VISIT(self->containers); Py_VISIT(self->update_containers);
    Py_VISIT(self->locks); Py_VISIT(self->deliver_interrupt); Py_VISIT(self->last_table);
    return 0;
}

static int fc_clear(FastCall *self)
{
    Py_CLEAR(self->run); Py_CLEAR(self->storage); Py_CLEAR(self->py_steps);
    Py_CLEAR(self->status); Py_CLEAR(self->table_for); Py_CLEAR(self->on_error);
    Py_CLEAR(self->fallback); Py_CLEAR(self->containers); Py_CLEAR(self->update_containers);
    Py_CLEAR(self->locks); Py_CLEAR(self->deliver_interrupt); Py_CLEAR(self->last_table);
    return 0;
}

static void fc_dealloc(FastCall *self)
{
    PyObject_GC_UnTrack(self);
    fc_clear(self);
    fc_free_arrays(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* gate: a tuple, per explicit input, of (typenum, ndim, static lengths tuple
 * with -1 for unknown). */
static int fc_read_gate(FastCall *self, PyObject *gate)
{
    Py_ssize_t n = PyTuple_GET_SIZE(gate);
    self->n_in = n;
    self->typenums = PyMem_Calloc(n ? n : 1, sizeof(int));
    self->ndims = PyMem_Calloc(n ? n : 1, sizeof(int));
    self->static_dims = PyMem_Calloc((n ? n : 1) * NPY_MAXDIMS, sizeof(npy_intp));
    if (!self->typenums || !self->ndims || !self->static_dims) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(gate, i), *lengths;
        int typenum, ndim;
        if (!PyArg_ParseTuple(spec, "iiO!:gate", &typenum, &ndim, &PyTuple_Type, &lengths))
            return -1;
        if (ndim < 0 || ndim > NPY_MAXDIMS || PyTuple_GET_SIZE(lengths) != ndim) {
            PyErr_SetString(PyExc_ValueError, "FastCall: bad gate entry");
            return -1;
        }
        self->typenums[i] = typenum;
        self->ndims[i] = ndim;
        for (int d = 0; d < ndim; d++) {
            npy_intp len = PyLong_AsSsize_t(PyTuple_GET_ITEM(lengths, d));
            if (len == -1 && PyErr_Occurred())
                return -1;
            self->static_dims[i * NPY_MAXDIMS + d] = len;
        }
    }
    return 0;
}

static int fc_init(FastCall *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"run", "storage", "py_steps", "status", "table_for", "on_error",
                            "fallback", "gate", "containers", "update_containers", "locks",
                            "deliver_interrupt", "n_out", "single", NULL};
    PyObject *run, *storage, *py_steps, *status, *table_for, *on_error, *fallback, *gate;
    PyObject *containers, *update_containers, *locks, *deliver_interrupt;
    Py_ssize_t n_out;
    int single;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!O!OOOO!O!O!O!Onp:FastCall", names,
                                     &run, &PyList_Type, &storage, &PyTuple_Type, &py_steps,
                                     &PyArray_Type, &status, &table_for, &on_error, &fallback,
                                     &PyTuple_Type, &gate, &PyTuple_Type, &containers,
                                     &PyTuple_Type, &update_containers, &PyTuple_Type, &locks,
                                     &deliver_interrupt, &n_out, &single))
        return -1;
    fc_clear(self);
    fc_free_arrays(self);
#define FC_SET(field, value) do { Py_INCREF(value); self->field = value; } while (0)
    FC_SET(run, run); FC_SET(storage, storage); FC_SET(py_steps, py_steps);
    FC_SET(status, status); FC_SET(table_for, table_for); FC_SET(on_error, on_error);
    FC_SET(fallback, fallback); FC_SET(containers, containers);
    FC_SET(update_containers, update_containers); FC_SET(locks, locks);
    FC_SET(deliver_interrupt, deliver_interrupt);
#undef FC_SET
    self->n_out = n_out;
    self->single = single;
    self->last_len = 0;
    self->last_cap = 0;
    return fc_read_gate(self, gate);
}

/* Whether `obj` passes the gate for explicit input `i` as it is. */
static int fc_accepts(FastCall *self, Py_ssize_t i, PyObject *obj)
{
    PyArrayObject *a;
    if (!PyArray_CheckExact(obj))
        return 0;
    a = (PyArrayObject *)obj;
    if (PyArray_NDIM(a) != self->ndims[i] || !PyArray_ISNOTSWAPPED(a)
            || !PyArray_EquivTypenums(PyArray_TYPE(a), self->typenums[i]))
        return 0;
    for (int d = 0; d < self->ndims[i]; d++) {
        const npy_intp want = self->static_dims[i * NPY_MAXDIMS + d];
        if (want >= 0 && PyArray_DIM(a, d) != want)
            return 0;
    }
    return 1;
}

/* Whether the values have the shapes of the last signature; with `remember`,
 * make them the last signature.  -1 on a memory error. */
static int fc_same_signature(FastCall *self, PyObject **values, Py_ssize_t n, int remember)
{
    Py_ssize_t len = 0, k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyArray_Check(values[i]))
            return 0;
        len += 1 + PyArray_NDIM((PyArrayObject *)values[i]);
    }
    if (remember && len > self->last_cap) {
        npy_intp *grown = PyMem_Realloc(self->last_dims, len * sizeof(npy_intp));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->last_dims = grown;
        self->last_cap = len;
    }
    if (!remember && len != self->last_len)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyArrayObject *a = (PyArrayObject *)values[i];
        const int nd = PyArray_NDIM(a);
        if (remember) {
            self->last_dims[k] = nd;
            memcpy(self->last_dims + k + 1, PyArray_DIMS(a), nd * sizeof(npy_intp));
        } else if (self->last_dims[k] != nd
                   || memcmp(self->last_dims + k + 1, PyArray_DIMS(a), nd * sizeof(npy_intp))) {
            return 0;
        }
        k += 1 + nd;
    }
    if (remember)
        self->last_len = len;
    return 1;
}

/* The shape table for these values (a new reference; Py_None when there is none). */
static PyObject *fc_table(FastCall *self, PyObject *values)
{
    PyObject **items = PySequence_Fast_ITEMS(values), *got, *table;
    Py_ssize_t n = PyList_GET_SIZE(values);
    int cacheable, same;
    if (self->table_for == Py_None)
        Py_RETURN_NONE;
    if (self->last_table != NULL) {
        same = fc_same_signature(self, items, n, 0);
        if (same) {
            Py_INCREF(self->last_table);
            return self->last_table;
        }
    }
    got = PyObject_CallOneArg(self->table_for, values);
    if (got == NULL)
        return NULL;
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "FastCall: table_for must return (table, cacheable)");
        return NULL;
    }
    table = PyTuple_GET_ITEM(got, 0);
    cacheable = PyObject_IsTrue(PyTuple_GET_ITEM(got, 1));
    Py_INCREF(table);
    Py_DECREF(got);
    Py_CLEAR(self->last_table);
    if (cacheable == 1 && fc_same_signature(self, items, n, 1) == 1) {
        Py_INCREF(table);
        self->last_table = table;
    }
    PyErr_Clear();   /* a signature we could not remember is only not cached */
    return table;
}

static PyObject *fc_fallback(FastCall *self, PyObject *args, PyObject *kwargs)
{
    return PyObject_Call(self->fallback, args, kwargs);
}

/* Release the first `n` locks, last taken first (an exception set stays set). */
static void fc_release(FastCall *self, Py_ssize_t n)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        PyObject *r = PyObject_CallMethodNoArgs(PyTuple_GET_ITEM(self->locks, i), release_name);
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    PyErr_Restore(type, value, tb);
}

/* Take every lock without waiting: 1 when all are held, 0 when one is held
 * elsewhere (none kept), -1 on an error (none kept). */
static int fc_acquire(FastCall *self)
{
    const Py_ssize_t n = PyTuple_GET_SIZE(self->locks);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyObject_CallMethodOneArg(PyTuple_GET_ITEM(self->locks, i), acquire_name,
                                                Py_False);
        int got = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
        if (got != 1) {
            fc_release(self, i);
            return got;
        }
    }
    return 1;
}

/* A thunk's run raised: let its on_error see the exception (it clears the
 * intermediates and adds the note naming the step), then re-raise it.  Also
 * what src/loop.c's driver does. */
static void tn_report_failure(PyObject *on_error)
{
    PyObject *type, *value, *tb, *r;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    r = PyObject_CallOneArg(on_error, value != NULL ? value : Py_None);
    if (r == NULL)
        PyErr_Clear();
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
}

static void fc_report(FastCall *self)
{
    tn_report_failure(self->on_error);
}

static PyObject *fc_call_locked(FastCall *self, PyObject *args);

static PyObject *fc_call(FastCall *self, PyObject *args, PyObject *kwargs)
{
    PyObject *out;
    int held;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) || PyTuple_GET_SIZE(args) != self->n_in)
        return fc_fallback(self, args, kwargs);
    for (Py_ssize_t i = 0; i < self->n_in; i++)
        if (!fc_accepts(self, i, PyTuple_GET_ITEM(args, i)))
            return fc_fallback(self, args, kwargs);
    if (PyTuple_GET_SIZE(self->locks) == 0)
        return fc_call_locked(self, args);
    held = fc_acquire(self);
    if (held < 0)
        return NULL;
    if (held == 0)   /* another call holds a lock: wait for it on the Python path */
        return fc_fallback(self, args, kwargs);
    out = fc_call_locked(self, args);
    fc_release(self, PyTuple_GET_SIZE(self->locks));
    return out;
}

/* The call itself, with the arguments accepted and the locks held. */
static PyObject *fc_call_locked(FastCall *self, PyObject *args)
{
    const Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    const Py_ssize_t n_shared = PyTuple_GET_SIZE(self->containers);
    PyObject *values, *table, *results, *call_args[5], *out;
    values = PyList_New(nargs + n_shared);
    if (values == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *v = PyTuple_GET_ITEM(args, i);
        Py_INCREF(v);
        PyList_SET_ITEM(values, i, v);
    }
    for (Py_ssize_t j = 0; j < n_shared; j++) {
        PyObject *v = PyObject_GetAttr(PyTuple_GET_ITEM(self->containers, j), value_attr);
        if (v == NULL) {
            Py_DECREF(values);
            return NULL;
        }
        PyList_SET_ITEM(values, nargs + j, v);
    }
    table = fc_table(self, values);
    if (table == NULL) {
        Py_DECREF(values);
        return NULL;
    }
    call_args[0] = self->storage;
    call_args[1] = values;
    call_args[2] = table;
    call_args[3] = self->py_steps;
    call_args[4] = self->status;
    results = PyObject_Vectorcall(self->run, call_args, 5, NULL);
    Py_DECREF(table);
    Py_DECREF(values);
    if (results == NULL) {
        fc_report(self);
        return NULL;
    }
    if (!PyList_Check(results)
            || PyList_GET_SIZE(results)
                   != self->n_out + PyTuple_GET_SIZE(self->update_containers)) {
        Py_DECREF(results);
        PyErr_SetString(PyExc_TypeError, "FastCall: run returned the wrong results");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(self->update_containers); k++) {
        if (PyObject_SetAttr(PyTuple_GET_ITEM(self->update_containers, k), value_attr,
                             PyList_GET_ITEM(results, self->n_out + k)) < 0) {
            Py_DECREF(results);
            return NULL;
        }
    }
    if (PyTuple_GET_SIZE(self->update_containers) && PyErr_CheckSignals() < 0) {
        /* Ctrl-C after the call wrote shared storage: it completes, and the
         * KeyboardInterrupt comes once it has returned. */
        PyObject *r;
        if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
            Py_DECREF(results);
            return NULL;
        }
        PyErr_Clear();
        r = PyObject_CallNoArgs(self->deliver_interrupt);
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    if (self->single && self->n_out == 1) {
        out = PyList_GET_ITEM(results, 0);
        Py_INCREF(out);
    } else {
        out = PyList_GetSlice(results, 0, self->n_out);
    }
    Py_DECREF(results);
    return out;
}

static PyObject *fc_forget(FastCall *self, PyObject *unused)
{
    (void)unused;
    Py_CLEAR(self->last_table);
    self->last_len = 0;
    Py_RETURN_NONE;
}

static PyMethodDef fc_methods[] = {
    {"forget_table", (PyCFunction)fc_forget, METH_NOARGS,
     "Forget the cached shape table (the next call asks table_for again)."},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tenure_runtime.FastCall",
    .tp_doc = "A compiled function's call path in C (see tenure.linkers.c.call).",
    .tp_basicsize = sizeof(FastCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fc_init,
    .tp_dealloc = (destructor)fc_dealloc,
    .tp_traverse = (traverseproc)fc_traverse,
    .tp_clear = (inquiry)fc_clear,
    .tp_call = (ternaryfunc)fc_call,
    .tp_methods = fc_methods,
};


/* Ready the type and the names it uses; 0, or -1 with an exception set. */
static int tn_fastcall_ready(void)
{
    value_attr = PyUnicode_InternFromString("value");
    acquire_name = PyUnicode_InternFromString("acquire");
    release_name = PyUnicode_InternFromString("release");
    if (value_attr == NULL || acquire_name == NULL || release_name == NULL)
        return -1;
    return PyType_Ready(&FastCallType);
}
