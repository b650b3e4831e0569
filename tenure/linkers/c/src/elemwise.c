/* The elementwise loop driver: everything about running a generated
 * elementwise kernel except its arithmetic (see tenure/linkers/c/elemwise.py
 * for the contract).  Part of the runtime (runtime.c includes this file).
 *
 * The work: the output's elements as rows along the innermost axis (after
 * length-1 axes go, axes are ordered by the output's strides and merged where
 * every operand allows), each row cut into blocks of at most TN_EW_BLOCK
 * elements, the work items, numbered row by row.  With OpenMP a loop over at
 * least kernel->minsize elements is cut into chunks of consecutive items,
 * about eight per thread, which the threads take as they come.  The blocks
 * never depend on the thread count, so every element takes the same path
 * through the same code whatever the number of threads: results are
 * identical to a serial run's, bit for bit. */

/* Elements per work item: a multiple of every vector width and of 64 bytes
 * for every dtype (tenure.linkers.c.elemwise.BLOCK says the same). */
#define TN_EW_BLOCK 4096

/* Whether a loop may stop for Ctrl-C: a graph module's run sets it until its
 * commit point (tenure/linkers/commit.py) and puts back the value it found
 * when it returns; 0 elsewhere, so a loop that writes shared storage always
 * completes.  One per thread: calls on other threads (Dask's) run at the same
 * time, and one call's commit point must not decide another's loops. */
static _Thread_local int tn_interruptible = 0;

/* This thread's tn_interruptible (what graph modules read and write). */
static int *tn_interruptible_flag(void)
{
    return &tn_interruptible;
}

/* The main thread's identity: only it runs Python's signal handlers, so only
 * its loops need the GIL to stop for Ctrl-C (set once by the runtime's init). */
static unsigned long tn_main_thread_ident = 0;

static int tn_is_main_thread(void)
{
    return PyThread_get_thread_ident() == tn_main_thread_ident;
}

/* Loops over at least this many elements (and products of at least this many
 * multiply-adds) run without the GIL, so other Python threads run meanwhile
 * (Dask's threads on the other cores); below it, giving the GIL back and
 * waiting for it again would cost more than the loop.  A loop that may stop
 * for Ctrl-C keeps the GIL: checking for a signal needs it. */
#define TN_NOGIL_MIN 32768

#ifdef _OPENMP
#include <unistd.h>

/* Whether this process may start threads.  GNU libgomp's thread pool does not
 * survive fork(): the child of a process that ran a parallel region hangs in
 * its first one (multiprocessing's default start method forks).  The first
 * process to go parallel records its pid here; a process that finds another
 * pid is such a child, and runs serially.  Called with the GIL held. */
static int tn_omp_usable(void)
{
    static pid_t owner = 0;
    const pid_t me = getpid();
    if (owner == 0)
        owner = me;
    return owner == me;
}
#else
static int tn_omp_usable(void)
{
    return 0;
}
#endif

/* The calling thread's number in its parallel region (0 outside one). */
static int tn_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* How many of `total` work items make one chunk, the unit threads take in
 * turn: all of them on one thread; else about eight chunks per thread, so a
 * thread the OS holds back (other processes on the cores) delays only its
 * current chunk while the others take the rest.  Which thread computes what
 * never changes a result. */
static npy_intp tn_chunk(npy_intp total, int nthreads)
{
    const npy_intp per = total / (8 * (npy_intp)nthreads);
    return nthreads <= 1 ? (total > 0 ? total : 1) : (per > 0 ? per : 1);
}

/* Every operand is an array of the expected dtype (native byte order) and
 * ndim; the output (operand 0) is writeable. */
static int tn_ew_check(const char *fname, int nops, PyArrayObject *const *ops, const int *type_nums,
                       const char *const *dtype_names, const int *ndims, const char *const *labels)
{
    for (int j = 0; j < nops; j++) {
        PyArrayObject *a = ops[j];
        if (a == NULL || !PyArray_Check(a)) {
            PyErr_Format(PyExc_TypeError, "%s: %s: expected a numpy.ndarray of dtype %s, got %s",
                         fname, labels[j], dtype_names[j],
                         a == NULL ? "NULL" : Py_TYPE((PyObject *)a)->tp_name);
            return -1;
        }
        if (!PyArray_EquivTypenums(PyArray_TYPE(a), type_nums[j]) || !PyArray_ISNOTSWAPPED(a)) {
            PyErr_Format(PyExc_TypeError, "%s: %s: expected dtype %s (native byte order), got %S",
                         fname, labels[j], dtype_names[j], (PyObject *)PyArray_DESCR(a));
            return -1;
        }
        if (PyArray_NDIM(a) != ndims[j]) {
            PyErr_Format(PyExc_TypeError, "%s: %s: expected %d dimension(s), got %d",
                         fname, labels[j], ndims[j], PyArray_NDIM(a));
            return -1;
        }
    }
    if (!PyArray_ISWRITEABLE(ops[0])) {
        PyErr_Format(PyExc_ValueError, "%s: %s is read-only", fname, labels[0]);
        return -1;
    }
    return 0;
}

static PyObject *tn_shape_tuple(int nd, const npy_intp *dims)
{
    PyObject *t = PyTuple_New(nd);
    for (int d = 0; t != NULL && d < nd; d++) {
        PyObject *n = PyLong_FromSsize_t(dims[d]);
        if (n == NULL) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, d, n);
    }
    return t;
}

static void tn_ew_broadcast_error(const char *fname, const char *label, PyArrayObject *a,
                                  PyArrayObject *out)
{
    PyObject *s = tn_shape_tuple(PyArray_NDIM(a), PyArray_DIMS(a));
    PyObject *o = tn_shape_tuple(PyArray_NDIM(out), PyArray_DIMS(out));
    if (s != NULL && o != NULL)
        PyErr_Format(PyExc_ValueError, "%s: %s of shape %R does not broadcast to the output "
                     "shape %R", fname, label, s, o);
    Py_XDECREF(s);
    Py_XDECREF(o);
}

/* Whether the innermost axis is contiguous for the output and, for every
 * input, contiguous or of stride 0 (one element repeated), all aligned: the
 * typed loop can then run over rows where the repeated inputs are copied
 * out into a buffer. */
static int tn_ew_rows_fillable(int nops, PyArrayObject *const *ops, const npy_intp *strides,
                               int nd)
{
    for (int j = 0; j < nops; j++) {
        const npy_intp s = strides[j * NPY_MAXDIMS + nd - 1];
        if (!PyArray_ISALIGNED(ops[j]))
            return 0;
        if (s != PyArray_ITEMSIZE(ops[j]) && (j == 0 || s != 0))
            return 0;
    }
    return 1;
}

/* Describe the iteration over the output's shape: shape[0..*nd) and, for
 * operand j, byte strides strides[j * NPY_MAXDIMS + d] (0 where it is
 * broadcast).  Returns 1 when the innermost axis is contiguous and aligned for
 * every operand (a typed, vectorizable loop), 0 when it is not, -1 (ValueError)
 * when an input does not broadcast to the output. */
static int tn_ew_layout(const char *fname, int nops, PyArrayObject *const *ops,
                        const char *const *labels, int *nd, npy_intp *shape, npy_intp *strides)
{
    PyArrayObject *out = ops[0];
    const int ond = PyArray_NDIM(out);
    const npy_intp *odims = PyArray_DIMS(out);
    int flat = 1, k = 0, j, d;
    for (j = 1; j < nops; j++) {
        PyArrayObject *a = ops[j];
        const int offset = ond - PyArray_NDIM(a);
        if (offset < 0) {
            tn_ew_broadcast_error(fname, labels[j], a, out);
            return -1;
        }
        for (d = 0; d < PyArray_NDIM(a); d++) {
            const npy_intp n = PyArray_DIM(a, d);
            if (n != odims[d + offset] && n != 1) {
                tn_ew_broadcast_error(fname, labels[j], a, out);
                return -1;
            }
            if (n != odims[d + offset])
                flat = 0;
        }
        if (offset != 0 || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a))
            flat = 0;
    }
    if (!PyArray_IS_C_CONTIGUOUS(out) || !PyArray_ISALIGNED(out))
        flat = 0;
    if (flat) {  /* the fast path: one loop over all the elements */
        *nd = 1;
        shape[0] = PyArray_SIZE(out);
        for (j = 0; j < nops; j++)
            strides[j * NPY_MAXDIMS] = PyArray_ITEMSIZE(ops[j]);
        return 1;
    }
    /* Strides over the output's axes, 0 where broadcast; length-1 axes go. */
    for (d = 0; d < ond; d++) {
        if (odims[d] == 1)
            continue;
        shape[k] = odims[d];
        for (j = 0; j < nops; j++) {
            PyArrayObject *a = ops[j];
            const int offset = ond - PyArray_NDIM(a);
            strides[j * NPY_MAXDIMS + k] =
                (d < offset || PyArray_DIM(a, d - offset) == 1) ? 0 : PyArray_STRIDE(a, d - offset);
        }
        k++;
    }
    /* Innermost = smallest output stride; merged where every operand allows. */
    tn_sort_axes(k, nops, shape, strides, 0, 1);
    k = tn_merge_axes(k, nops, shape, strides);
    *nd = k;
    for (j = 0; j < nops; j++) {
        const npy_intp s = strides[j * NPY_MAXDIMS + k - 1];
        if ((s != PyArray_ITEMSIZE(ops[j]) && shape[k - 1] > 1) || !PyArray_ISALIGNED(ops[j]))
            return 0;
    }
    return 1;
}

/* Position the odometer of the outer axes 0..nouter-1 at row `row` (rows
 * numbered in the order tn_ew_next visits them): its index and the operands'
 * pointers.  No Python API: threads call it. */
static void tn_ew_seek(int nouter, const npy_intp *shape, const npy_intp *strides, int nops,
                       PyArrayObject *const *ops, npy_intp row, npy_intp *index, char **ptr)
{
    int j;
    for (j = 0; j < nops; j++)
        ptr[j] = PyArray_BYTES(ops[j]);
    memset(index, 0, NPY_MAXDIMS * sizeof *index);
    for (int d = nouter - 1; d >= 0; d--) {
        index[d] = row % shape[d];
        row /= shape[d];
        for (j = 0; j < nops; j++)
            ptr[j] += index[d] * strides[j * NPY_MAXDIMS + d];
    }
}

/* Step the outer axes 0..nouter-1 like an odometer; 0 once every position ran. */
static int tn_ew_next(int nouter, const npy_intp *shape, const npy_intp *strides, int nops,
                      npy_intp *index, char **ptr)
{
    for (int d = nouter - 1; d >= 0; d--) {
        int j;
        for (j = 0; j < nops; j++)
            ptr[j] += strides[j * NPY_MAXDIMS + d];
        if (++index[d] < shape[d])
            return 1;
        for (j = 0; j < nops; j++)
            ptr[j] -= strides[j * NPY_MAXDIMS + d] * shape[d];
        index[d] = 0;
    }
    return 0;
}

static int tn_ew_fail(const char *fname, int status)
{
    if (status & TN_ERR_NEGATIVE_POWER)
        PyErr_Format(PyExc_ValueError, "%s: integers to negative integer powers are not allowed",
                     fname);
    else
        PyErr_Format(PyExc_RuntimeError, "%s: failed (status %d)", fname, status);
    return -1;
}

/* Fill `m` elements of `itemsize` bytes at `row` with copies of `value`. */
static void tn_ew_fill(char *row, const char *value, int itemsize, npy_intp m)
{
    switch (itemsize) {
    case 1:
        memset(row, *value, (size_t)m);
        break;
    case 2: {
        npy_uint16 v, *r = (npy_uint16 *)row;
        memcpy(&v, value, sizeof v);
        for (npy_intp k = 0; k < m; k++) r[k] = v;
        break;
    }
    case 4: {
        npy_uint32 v, *r = (npy_uint32 *)row;
        memcpy(&v, value, sizeof v);
        for (npy_intp k = 0; k < m; k++) r[k] = v;
        break;
    }
    case 8: {
        npy_uint64 v, *r = (npy_uint64 *)row;
        memcpy(&v, value, sizeof v);
        for (npy_intp k = 0; k < m; k++) r[k] = v;
        break;
    }
    default: {
        for (npy_intp k = 0; k < m; k++)
            memcpy(row + k * itemsize, value, (size_t)itemsize);
        break;
    }
    }
}

/* How many threads a loop over `size` elements of `kernel` runs on. */
static int tn_ew_threads(const tn_ew_kernel *kernel, npy_intp size)
{
#ifdef _OPENMP
    if (kernel->minsize >= 0 && size >= kernel->minsize && tn_omp_usable())
        return kernel->threads > 0 ? kernel->threads : omp_get_max_threads();
#else
    (void)kernel;
    (void)size;
#endif
    return 1;
}

/* One run of tn_ew_run, as its threads share it. */
typedef struct {
    const tn_ew_kernel *kernel;
    PyArrayObject **ops;
    int nops, nd, contiguous, filled, interruptible;
    const npy_intp *shape, *strides, *inner;
    npy_intp n, bn, per_row, items, per_chunk;
    size_t buffer_size;
    char *row_buffer;
    volatile int *stop;
} tn_ew_job;

/* Chunk `chunk` of `job`'s work items, on thread `tid`: the typed loops'
 * status bits. */
static int tn_ew_chunk(const tn_ew_job *job, npy_intp chunk, int tid)
{
    const tn_ew_kernel *kernel = job->kernel;
    const int nops = job->nops, nd = job->nd, contiguous = job->contiguous;
    const npy_intp n = job->n, bn = job->bn, per_row = job->per_row;
    const npy_intp first = chunk * job->per_chunk;
    const npy_intp last = job->items - first < job->per_chunk ? job->items
                                                                : first + job->per_chunk;
    char *ptr[nops], *at[nops], *rows[nops];
    char *const buffer = job->filled ? job->row_buffer + job->buffer_size * (size_t)tid : NULL;
    npy_intp index[NPY_MAXDIMS], b = first % per_row;
    int status = 0;
    tn_ew_seek(nd - 1, job->shape, job->strides, nops, job->ops, first / per_row, index, ptr);
    for (npy_intp item = first; item < last && !*job->stop; item++) {
        const npy_intp c0 = b * bn, m = n - c0 < bn ? n - c0 : bn;
        for (int j = 0; j < nops; j++)
            at[j] = ptr[j] + c0 * job->inner[j];
        if (contiguous || job->filled) {
            rows[0] = at[0];
            for (int j = 1; j < nops; j++) {
                if (!contiguous && job->inner[j] == 0) {
                    rows[j] = buffer + (size_t)bn * (size_t)kernel->width * (size_t)j;
                    tn_ew_fill(rows[j], at[j], (int)PyArray_ITEMSIZE(job->ops[j]), m);
                } else {
                    rows[j] = at[j];
                }
            }
            status |= kernel->typed(at, rows, m, kernel->params);
        } else {
            status |= kernel->strided(at, job->inner, m, kernel->params);
        }
        if (++b == per_row) {
            b = 0;
            tn_ew_next(nd - 1, job->shape, job->strides, nops, index, ptr);
        }
        if (job->interruptible && tid == 0 && item % TN_CHECK_BLOCKS == 0
                && PyErr_CheckSignals() < 0)
            *job->stop = 1;
    }
    return status;
}

/* Whether every operand is an aligned 0-d array. */
static int tn_ew_all_scalars(int nops, PyArrayObject *const *ops)
{
    for (int j = 0; j < nops; j++)
        if (PyArray_NDIM(ops[j]) != 0 || !PyArray_ISALIGNED(ops[j]))
            return 0;
    return 1;
}

/* Run `kernel` over `ops` (the output, then the inputs read from memory): 0,
 * or -1 with an exception set.  Checks every operand (dtype, ndim, broadcast,
 * a writeable output) first, so a wrong array raises instead of crashing. */
static int tn_ew_run(const tn_ew_kernel *kernel, PyArrayObject **ops)
{
    const int nops = kernel->nops;
    npy_intp shape[NPY_MAXDIMS], strides[nops * NPY_MAXDIMS], inner[nops];
    int nd, contiguous, status = 0;
    if (tn_ew_check(kernel->name, nops, ops, kernel->type_nums, kernel->dtype_names,
                    kernel->ndims, kernel->labels) < 0)
        return -1;
    if (tn_ew_all_scalars(nops, ops)) {
        /* One element (a loop's scalar state, say): no layout, no blocks --
         * their bookkeeping would cost more than the element. */
        char *at[nops];
        for (int j = 0; j < nops; j++)
            at[j] = PyArray_BYTES(ops[j]);
        status = kernel->typed(at, at, 1, kernel->params);
        return status ? tn_ew_fail(kernel->name, status) : 0;
    }
    contiguous = tn_ew_layout(kernel->name, nops, ops, kernel->labels, &nd, shape, strides);
    if (contiguous < 0)
        return -1;
    if (PyArray_SIZE(ops[0]) == 0)
        return 0;
    const npy_intp n = shape[nd - 1], size = PyArray_SIZE(ops[0]);
    const npy_intp bn = n < TN_EW_BLOCK ? n : TN_EW_BLOCK, per_row = (n + bn - 1) / bn;
    const npy_intp items = size / n * per_row;
    for (int j = 0; j < nops; j++)
        inner[j] = strides[j * NPY_MAXDIMS + nd - 1];
    /* Rows where every input is contiguous or one repeated element (an (n, 1)
     * operand): the repeated ones are copied out into a row buffer (one per
     * thread), so the typed loop still runs (and vectorizes). */
    const int filled = !contiguous && n > 1 && tn_ew_rows_fillable(nops, ops, strides, nd);
    const size_t buffer_size = (size_t)bn * (size_t)kernel->width * (size_t)nops;
    char *row_buffer = NULL;
    const int nthreads = tn_ew_threads(kernel, size);
    const npy_intp per_chunk = tn_chunk(items, nthreads);
    const npy_intp chunks = (items + per_chunk - 1) / per_chunk;
    /* Ctrl-C: the threads stop taking blocks once the caller's thread saw it. */
    const int interruptible = tn_interruptible && items > TN_CHECK_BLOCKS && tn_is_main_thread();
    volatile int stop = 0;
    PyThreadState *saved = NULL;
    if (filled) {
        row_buffer = (char *)PyMem_Malloc(buffer_size * (size_t)nthreads);
        if (row_buffer == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    const tn_ew_job job = {kernel, ops, nops, nd, contiguous, filled, interruptible, shape,
                           strides, inner, n, bn, per_row, items, per_chunk, buffer_size,
                           row_buffer, &stop};
    if (!interruptible && size >= TN_NOGIL_MIN)
        saved = PyEval_SaveThread();   /* the loop touches no Python object */
    if (nthreads > 1) {
        /* Only then a parallel region: entering one costs microseconds even
         * on one thread (libgomp builds and ends a team), more than a small
         * loop's whole work. */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) reduction(| : status)
#endif
        for (npy_intp chunk = 0; chunk < chunks; chunk++)
            status |= tn_ew_chunk(&job, chunk, tn_thread_num());
    } else {
        for (npy_intp chunk = 0; chunk < chunks; chunk++)
            status |= tn_ew_chunk(&job, chunk, 0);
    }
    if (saved != NULL)
        PyEval_RestoreThread(saved);
    PyMem_Free(row_buffer);
    if (stop)
        return -1;   /* KeyboardInterrupt (or a handler's error) is set */
    if (status)
        return tn_ew_fail(kernel->name, status);
    return 0;
}
