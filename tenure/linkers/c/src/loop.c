/* A loop's steps run by the runtime: no Python between two steps.
 *
 * `run_steps` calls a compiled step (a Schedule, with the storage, py_steps
 * and status of its thunk: the arguments of module.py's run()) once per
 * step t in [first, stop), and between two calls does in C what
 * Scan.perform does in Python (tenure/symbolic/ops/scan.py):
 *
 *   - each read is a step argument: row `row(t)` of a base array (a
 *     sequence, a stored trajectory, a ring), where
 *         row(t) = start + t                 (modulus 0)
 *         row(t) = (start + t) mod modulus   (a ring)
 *   - each write copies one step result into row `row(t)` of its base
 *     (a trajectory, a ring, a nit-sot's store), after checking that the
 *     result has the shape of a row;
 *   - `cond` (a result index, or -1) is the `until` condition: true stops
 *     the loop after the step that gave it.
 *
 *     run_steps(run, storage, py_steps, status, on_error, table, args,
 *               reads, writes, cond, first, stop)
 *         -> (t, fired, bad_write, bad_value)
 *
 * `args` is the step's argument list (the non-sequences in place; the
 * read positions are replaced).  `t` is the number of steps done when the
 * call returned; `fired`, whether `until` stopped it; `bad_write` the index
 * in `writes` of a result whose shape is not its row's (-1: none), with
 * the result as `bad_value` (the caller raises the error naming the loop's
 * output: it knows the names).  When the step raises, on_error(exception)
 * is called (as FastCall does) and the exception propagates.
 *
 * A read's argument is one array object per read whose data pointer moves
 * from row to row: a view made once, not one per step.  It is only moved
 * while nothing but the argument list and the step's storage holds it; when
 * a step kept it (a reference more), the next step gets a fresh view, so an
 * array someone holds never changes under them.  The caller checks the
 * arguments against the step's input gate once, before the first step:
 * every row of a base has the same dtype and shape.
 *
 * A step that is a Schedule (src/interpret.c) is run without a call
 * through Python's protocol: its arguments are checked once, and each step
 * hands its results over in an array, not a new list (tn_lp_step). */

typedef struct {
    Py_ssize_t pos;                  /* reads: the argument; writes: the result */
    PyArrayObject *base;             /* borrowed from the reads / writes tuple */
    Py_ssize_t start, modulus;
    int movable;                     /* reads: the view's data pointer may move */
} tn_lp_row;

static Py_ssize_t tn_lp_row_of(const tn_lp_row *r, Py_ssize_t t)
{
    Py_ssize_t row = r->start + t;
    if (r->modulus > 0) {
        row %= r->modulus;
        if (row < 0)
            row += r->modulus;
    }
    return row;
}

static char *tn_lp_row_data(const tn_lp_row *r, Py_ssize_t t)
{
    return PyArray_BYTES(r->base) + tn_lp_row_of(r, t) * PyArray_STRIDE(r->base, 0);
}

/* A new view of row `row(t)` of `r->base` (a new reference, or NULL). */
static PyObject *tn_lp_view(const tn_lp_row *r, Py_ssize_t t)
{
    PyArrayObject *base = r->base;
    PyArray_Descr *descr = PyArray_DESCR(base);
    int flags = PyArray_ISWRITEABLE(base) ? NPY_ARRAY_WRITEABLE : 0;
    PyObject *view;
    Py_INCREF(descr);
    view = PyArray_NewFromDescr(&PyArray_Type, descr, PyArray_NDIM(base) - 1,
                                PyArray_DIMS(base) + 1, PyArray_STRIDES(base) + 1,
                                tn_lp_row_data(r, t), flags, NULL);
    if (view == NULL)
        return NULL;
    Py_INCREF(base);
    if (PyArray_SetBaseObject((PyArrayObject *)view, (PyObject *)base) < 0) {
        Py_DECREF(view);
        return NULL;
    }
    return view;
}

/* Read one (pos, base, start, modulus) entry; `limit`: the positions allowed. */
static int tn_lp_parse(PyObject *entry, tn_lp_row *r, Py_ssize_t limit, Py_ssize_t first,
                       Py_ssize_t stop, const char *what)
{
    PyObject *base;
    if (!PyTuple_Check(entry) || !PyArg_ParseTuple(entry, "nO!nn", &r->pos, &PyArray_Type, &base,
                                                   &r->start, &r->modulus))
        goto bad;
    r->base = (PyArrayObject *)base;
    if (r->pos < 0 || r->pos >= limit || r->modulus < 0 || PyArray_NDIM(r->base) < 1)
        goto bad;
    /* every row the steps touch lies in the base */
    if (stop > first) {
        const Py_ssize_t len = PyArray_DIM(r->base, 0);
        if (r->modulus > 0 ? r->modulus > len
                           : r->start + first < 0 || r->start + stop - 1 >= len)
            goto bad;
    }
    r->movable = PyArray_ISALIGNED(r->base)
                 && PyArray_STRIDE(r->base, 0) % PyArray_ITEMSIZE(r->base) == 0;
    return 0;
bad:
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "run_steps: bad %s entry (expected (position < %zd, an "
                 "array with rows for steps %zd..%zd, start, modulus >= 0)), got %R", what,
                 limit, first, stop - 1, entry);
    return -1;
}

static tn_lp_row *tn_lp_parse_all(PyObject *entries, Py_ssize_t limit, Py_ssize_t first,
                                  Py_ssize_t stop, const char *what)
{
    const Py_ssize_t n = PyTuple_GET_SIZE(entries);
    tn_lp_row *rows = PyMem_Calloc(n ? n : 1, sizeof(tn_lp_row));
    if (rows == NULL)
        return (tn_lp_row *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++)
        if (tn_lp_parse(PyTuple_GET_ITEM(entries, i), &rows[i], limit, first, stop, what) < 0) {
            PyMem_Free(rows);
            return NULL;
        }
    return rows;
}

/* Whether `value` has the shape of a row of `base`. */
static int tn_lp_fits_row(PyArrayObject *value, PyArrayObject *base)
{
    return PyArray_NDIM(value) == PyArray_NDIM(base) - 1
           && PyArray_CompareLists(PyArray_DIMS(value), PyArray_DIMS(base) + 1,
                                   PyArray_NDIM(value));
}

/* Copy `value` into row `row(t)` of `w->base`: 0, 1 when its shape is not a
 * row's, -1 on an error. */
static int tn_lp_write(const tn_lp_row *w, Py_ssize_t t, PyObject *value)
{
    PyArrayObject *base = w->base, *src;
    PyObject *dst;
    int rc;
    if (PyArray_CheckExact(value)) {
        src = (PyArrayObject *)value;
        if (!tn_lp_fits_row(src, base))
            return 1;
        if (PyArray_EquivTypes(PyArray_DESCR(src), PyArray_DESCR(base))
                && PyArray_IS_C_CONTIGUOUS(src) && PyArray_IS_C_CONTIGUOUS(base)) {
            memmove(tn_lp_row_data(w, t), PyArray_BYTES(src), PyArray_NBYTES(src));
            return 0;
        }
        Py_INCREF(value);
    } else {   /* a perform's NumPy scalar, say: as Python's store[t] = value */
        src = (PyArrayObject *)PyArray_FROM_O(value);
        if (src == NULL)
            return -1;
        if (!tn_lp_fits_row(src, base)) {
            Py_DECREF(src);
            return 1;
        }
    }
    dst = tn_lp_view(w, t);
    rc = dst == NULL ? -1 : PyArray_CopyInto((PyArrayObject *)dst, src);
    Py_XDECREF(dst);
    Py_DECREF(src);
    return rc < 0 ? -1 : 0;
}

/* How many references to `obj` the argument list and the step's storage
 * hold: any other is someone's who kept it. */
static Py_ssize_t tn_lp_expected_refs(PyObject *obj, PyObject *storage)
{
    Py_ssize_t refs = 1;   /* the argument list's */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(storage); i++)
        refs += PyList_GET_ITEM(storage, i) == obj;
    return refs;
}

/* Point read `r`'s argument at row `row(t)`: move its view when only the
 * argument list and the step's storage hold it, else put a fresh one in
 * its place.  0, or -1 on an error. */
static int tn_lp_place(PyObject *args, PyObject *storage, const tn_lp_row *r, Py_ssize_t t)
{
    PyObject *current = PyList_GET_ITEM(args, r->pos), *fresh;
    if (r->movable && Py_REFCNT(current) <= tn_lp_expected_refs(current, storage)) {
        ((PyArrayObject_fields *)current)->data = tn_lp_row_data(r, t);
        return 0;
    }
    fresh = tn_lp_view(r, t);
    if (fresh == NULL)
        return -1;
    return PyList_SetItem(args, r->pos, fresh);
}

/* One step's results: `items` (n of them, new references in `own` when the
 * step is a Schedule, else the items of the list in `*list`).  0, or -1
 * with the error (on_error told). */
static int tn_lp_step(PyObject *run, const tn_schedule *sc, PyObject *const *call_args,
                      PyObject *on_error, PyObject **own, PyObject **list, PyObject ***items,
                      Py_ssize_t *n)
{
    if (sc != NULL) {
        if (tn_sc_execute(sc, call_args[0], PySequence_Fast_ITEMS(call_args[1]), call_args[2],
                          call_args[3], (npy_intp *)PyArray_DATA((PyArrayObject *)call_args[4]),
                          own) < 0) {
            tn_report_failure(on_error);   /* src/fastcall.c */
            return -1;
        }
        *items = own;
        *n = sc->n_outputs;
        return 0;
    }
    *list = PyObject_Vectorcall(run, call_args, 5, NULL);
    if (*list == NULL) {
        tn_report_failure(on_error);
        return -1;
    }
    if (!PyList_Check(*list)) {
        PyErr_Format(PyExc_TypeError, "run_steps: the step returned %s, expected a list",
                     Py_TYPE(*list)->tp_name);
        return -1;
    }
    *items = PySequence_Fast_ITEMS(*list);
    *n = PyList_GET_SIZE(*list);
    return 0;
}

/* Drop one step's results (tn_lp_step). */
static void tn_lp_release(const tn_schedule *sc, PyObject **own, PyObject **list)
{
    if (sc != NULL && *list == NULL)
        for (Py_ssize_t j = 0; j < sc->n_outputs; j++)
            Py_CLEAR(own[j]);
    Py_CLEAR(*list);
}

static PyObject *tn_lp_run_steps(PyObject *module, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *run, *storage, *py_steps, *status, *on_error, *table, *args0, *reads_obj;
    PyObject *writes_obj, *args = NULL, *results = NULL, *call_args[5], *bad = Py_None;
    PyObject **own = NULL, **items = NULL;
    Py_ssize_t cond, first, stop, n_args, t, bad_write = -1, n_items = 0;
    const tn_schedule *sc = NULL;
    tn_lp_row *reads = NULL, *writes = NULL;
    int fired = 0;
    (void)module;
    if (argc != 12) {
        PyErr_SetString(PyExc_TypeError, "run_steps: expected (run, storage, py_steps, status, "
                        "on_error, table, args, reads, writes, cond, first, stop)");
        return NULL;
    }
    run = argv[0], storage = argv[1], py_steps = argv[2], status = argv[3];
    on_error = argv[4], table = argv[5], args0 = argv[6], reads_obj = argv[7];
    writes_obj = argv[8];
    cond = PyLong_AsSsize_t(argv[9]);
    first = PyLong_AsSsize_t(argv[10]);
    stop = PyLong_AsSsize_t(argv[11]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(args0) || !PyList_CheckExact(storage) || !PyTuple_Check(reads_obj)
            || !PyTuple_Check(writes_obj) || first < 0 || stop < first) {
        PyErr_Format(PyExc_TypeError, "run_steps: expected args and storage as lists, reads "
                     "and writes as tuples and 0 <= first <= stop, got %s, %s, %s, %s and "
                     "%zd, %zd", Py_TYPE(args0)->tp_name, Py_TYPE(storage)->tp_name,
                     Py_TYPE(reads_obj)->tp_name, Py_TYPE(writes_obj)->tp_name, first, stop);
        return NULL;
    }
    n_args = PyList_GET_SIZE(args0);
    args = PyList_GetSlice(args0, 0, n_args);   /* our own list: its views are ours */
    if (args == NULL)
        return NULL;
    reads = tn_lp_parse_all(reads_obj, n_args, first, stop, "read");
    /* a write's position is checked against the results once they come */
    writes = reads == NULL ? NULL
             : tn_lp_parse_all(writes_obj, PY_SSIZE_T_MAX, first, stop, "write");
    if (writes == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(reads_obj); i++) {
        PyObject *view = tn_lp_view(&reads[i], first);
        if (view == NULL || PyList_SetItem(args, reads[i].pos, view) < 0)
            goto fail;
    }
    call_args[0] = storage, call_args[1] = args, call_args[2] = table, call_args[3] = py_steps;
    call_args[4] = status;
    if (Py_TYPE(run) == &ScheduleType) {
        sc = (const tn_schedule *)run;
        if (tn_sc_check_call(sc, storage, args, table, py_steps, status) < 0)
            goto fail;
        own = PyMem_Calloc((size_t)(sc->n_outputs > 0 ? sc->n_outputs : 1), sizeof *own);
        if (own == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    for (t = first; t < stop; t++) {
        if (t > first)
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(reads_obj); i++)
                if (tn_lp_place(args, storage, &reads[i], t) < 0)
                    goto fail;
        if (tn_lp_step(run, sc, call_args, on_error, own, &results, &items, &n_items) < 0)
            goto fail;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(writes_obj); i++) {
            PyObject *value;
            int rc;
            if (writes[i].pos >= n_items) {
                PyErr_Format(PyExc_ValueError, "run_steps: write %zd names result %zd, but "
                             "the step gave %zd", i, writes[i].pos, n_items);
                goto fail;
            }
            value = items[writes[i].pos];
            rc = tn_lp_write(&writes[i], t, value);
            if (rc < 0)
                goto fail;
            if (rc > 0) {
                bad_write = i;
                bad = value;
                Py_INCREF(bad);
                goto done;
            }
        }
        if (cond >= 0) {
            int truth;
            if (cond >= n_items) {
                PyErr_Format(PyExc_ValueError, "run_steps: cond names result %zd, but the step "
                             "gave %zd", cond, n_items);
                goto fail;
            }
            truth = PyObject_IsTrue(items[cond]);
            if (truth < 0)
                goto fail;
            if (truth) {
                fired = 1;
                t++;
                goto done;
            }
        }
        tn_lp_release(sc, own, &results);
    }
done:
    if (own != NULL)
        tn_lp_release(sc, own, &results);
    Py_XDECREF(results);
    PyMem_Free(own);
    Py_DECREF(args);
    PyMem_Free(reads);
    PyMem_Free(writes);
    if (bad == Py_None)
        Py_INCREF(bad);
    {
        PyObject *out = Py_BuildValue("(nNnN)", t, PyBool_FromLong(fired), bad_write, bad);
        return out;
    }
fail:
    if (own != NULL)
        tn_lp_release(sc, own, &results);
    Py_XDECREF(results);
    PyMem_Free(own);
    Py_XDECREF(args);
    PyMem_Free(reads);
    PyMem_Free(writes);
    return NULL;
}

static PyMethodDef tn_loop_methods[] = {
    {"run_steps", (PyCFunction)(void (*)(void))tn_lp_run_steps, METH_FASTCALL,
     "Run a loop's steps with no Python between them (see src/loop.c)."},
    {NULL, NULL, 0, NULL}
};
