/* Reductions (see tenure/linkers/c/reduce.py): the operands' broadcast
 * and checks, the layout of the iteration (axes compacted and ordered, the
 * reduced ones inside), how threads split it, and the identity fill.  Part
 * of the runtime (runtime.c includes this file). */
/* The pointer to the element after `p` in `a`, in C order (`idx` tracks it). */
static char *tn_rd_step(PyArrayObject *a, npy_intp *idx, char *p)
{
    for (int d = PyArray_NDIM(a) - 1; d >= 0; d--) {
        p += PyArray_STRIDE(a, d);
        if (++idx[d] < PyArray_DIM(a, d))
            return p;
        p -= PyArray_STRIDE(a, d) * PyArray_DIM(a, d);
        idx[d] = 0;
    }
    return p;
}

static void tn_rd_fill(PyArrayObject *a, const void *value, size_t size)
{
    npy_intp idx[NPY_MAXDIMS] = {0};
    char *p = PyArray_BYTES(a);
    const npy_intp n = PyArray_SIZE(a);
    for (npy_intp i = 0; i < n; i++) {
        memcpy(p, value, size);
        p = tn_rd_step(a, idx, p);
    }
}

static void tn_rd_shape_error(const char *fname, const char *what, int nd1, const npy_intp *s1,
                              int nd2, const npy_intp *s2)
{
    PyObject *a = tn_shape_tuple(nd1, s1), *b = tn_shape_tuple(nd2, s2);
    if (a != NULL && b != NULL)
        PyErr_Format(PyExc_ValueError, "%s: %s %R, expected %R", fname, what, a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
}

/* The broadcast shape of the inputs ops[1..nops) over full_nd axes. */
static int tn_rd_broadcast(const char *fname, int nops, PyArrayObject *const *ops,
                           const char *const *labels, int full_nd, npy_intp *shape)
{
    int d, j;
    for (d = 0; d < full_nd; d++)
        shape[d] = 1;
    for (j = 1; j < nops; j++) {
        PyArrayObject *a = ops[j];
        const int offset = full_nd - PyArray_NDIM(a);
        for (d = 0; d < PyArray_NDIM(a); d++) {
            const npy_intp n = PyArray_DIM(a, d);
            if (n == 1 || n == shape[d + offset])
                continue;
            if (shape[d + offset] != 1) {
                PyErr_Format(PyExc_ValueError, "%s: %s has length %zd on axis %d where another "
                             "input has %zd: the inputs do not broadcast", fname, labels[j], n,
                             d + offset, shape[d + offset]);
                return -1;
            }
            shape[d + offset] = n;
        }
    }
    return 0;
}

/* The iteration over the broadcast input shape: shape[0..full_nd) and, for
 * operand j, byte strides strides[j * NPY_MAXDIMS + d] (0 where broadcast; the
 * output's are 0 on reduced axes).  Checks the output's shape; *count is the
 * number of elements reduced into each output element. */
static int tn_rd_layout(const char *fname, int nops, PyArrayObject *const *ops,
                        const char *const *labels, int full_nd, const int *reduced,
                        int keepdims, npy_intp *shape, npy_intp *strides, npy_intp *count)
{
    PyArrayObject *out = ops[0];
    npy_intp want[NPY_MAXDIMS];
    int j, d, o = 0, ok = 1;
    if (tn_rd_broadcast(fname, nops, ops, labels, full_nd, shape) < 0)
        return -1;
    *count = 1;
    for (d = 0; d < full_nd; d++) {
        if (reduced[d]) {
            *count *= shape[d];
            strides[d] = 0;
            if (keepdims)
                want[o++] = 1;
        } else {
            strides[d] = o < PyArray_NDIM(out) ? PyArray_STRIDE(out, o) : 0;
            want[o++] = shape[d];
        }
    }
    ok = o == PyArray_NDIM(out) && PyArray_CompareLists(PyArray_DIMS(out), want, o);
    if (!ok) {
        tn_rd_shape_error(fname, "the output has shape", PyArray_NDIM(out), PyArray_DIMS(out), o,
                          want);
        return -1;
    }
    for (d = 0; d < full_nd; d++) {
        /* A kept axis the output does not step along would sum into one element. */
        if (!reduced[d] && shape[d] > 1 && strides[d] == 0 && PyArray_SIZE(out) > 0) {
            PyErr_Format(PyExc_ValueError, "%s: the output has stride 0 on a kept axis", fname);
            return -1;
        }
    }
    for (j = 1; j < nops; j++) {
        PyArrayObject *a = ops[j];
        const int offset = full_nd - PyArray_NDIM(a);
        for (d = 0; d < full_nd; d++)
            strides[j * NPY_MAXDIMS + d] =
                (d < offset || PyArray_DIM(a, d - offset) == 1) ? 0 : PyArray_STRIDE(a, d - offset);
    }
    return 0;
}

/* Drop length-1 axes, order the rest by the inputs' strides (innermost last),
 * merge axes every operand steps through as one.  Returns whether the inputs
 * (and the output, when it steps along it) are aligned and contiguous (or, for
 * inputs, broadcast: stride 0) along the innermost axis. */
static int tn_rd_compact(int nops, PyArrayObject *const *ops, int full_nd, int *nd,
                         npy_intp *shape, npy_intp *strides)
{
    int k = 0, j, d;
    for (d = 0; d < full_nd; d++) {
        if (shape[d] == 1)
            continue;
        shape[k] = shape[d];
        for (j = 0; j < nops; j++)
            strides[j * NPY_MAXDIMS + k] = strides[j * NPY_MAXDIMS + d];
        k++;
    }
    /* Innermost = the inputs' smallest strides; merged where every operand allows. */
    tn_sort_axes(k, nops, shape, strides, 1, nops);
    k = tn_merge_axes(k, nops, shape, strides);
    *nd = k;
    for (j = 0; j < nops; j++) {
        const npy_intp s = strides[j * NPY_MAXDIMS + k - 1];
        if (j == 0 && s == 0)
            continue;  /* the output does not move along a reduced axis */
        if (!PyArray_ISALIGNED(ops[j]))
            return 0;
        /* an input with stride 0 is broadcast into a buffer by the loops */
        if (s != PyArray_ITEMSIZE(ops[j]) && shape[k - 1] > 1 && !(j > 0 && s == 0))
            return 0;
    }
    return 1;
}

/* The axis whose parts threads take: the kept axis (output stride != 0) with
 * the most units, the outermost of equals, or -1 when none has two.  A unit is
 * one index of an outer axis, and `block` elements of the innermost one, so
 * that a part of it starts where a serial chunk does. */
static int tn_rd_split_axis(int nd, const npy_intp *shape, const npy_intp *strides,
                            npy_intp block, npy_intp *unit)
{
    int best = -1;
    npy_intp most = 1;
    *unit = 1;
    for (int d = 0; d < nd; d++) {
        const npy_intp u = d == nd - 1 ? block : 1, units = (shape[d] + u - 1) / u;
        if (strides[d] != 0 && units > most) {
            best = d;
            most = units;
            *unit = u;
        }
    }
    return best;
}

/* Thread part [first, last) (in units) of axis `split` of the iteration
 * (the whole of it when split < 0): its shape `box`, a zero odometer `index`
 * and the operands' pointers at its start.  No Python API: threads call it. */
static void tn_rd_box(int nops, PyArrayObject *const *ops, int nd, const npy_intp *shape,
                      const npy_intp *strides, int split, npy_intp unit, npy_intp first,
                      npy_intp last, npy_intp *box, npy_intp *index, char **ptr)
{
    int j;
    memcpy(box, shape, (size_t)nd * sizeof *box);
    memset(index, 0, NPY_MAXDIMS * sizeof *index);
    for (j = 0; j < nops; j++)
        ptr[j] = PyArray_BYTES(ops[j]);
    if (split >= 0) {
        const npy_intp lo = first * unit, hi = last * unit;
        box[split] = (hi < shape[split] ? hi : shape[split]) - lo;
        for (j = 0; j < nops; j++)
            ptr[j] += lo * strides[j * NPY_MAXDIMS + split];
    }
}

/* Elements of the innermost axis a thread takes at a time (a multiple of
 * every vector width; tenure.linkers.c.reduce.BLOCK says the same). */
#define TN_RD_BLOCK 4096

/* The threads a reduction of `work` element visits runs on. */
static int tn_rd_threads(const tn_rd_kernel *kernel, npy_intp work)
{
#ifdef _OPENMP
    if (kernel->minsize >= 0 && work >= kernel->minsize && tn_omp_usable())
        return kernel->threads > 0 ? kernel->threads : omp_get_max_threads();
#else
    (void)kernel;
    (void)work;
#endif
    return 1;
}

/* Mean: every output element divided by the count of the values it reduced. */
static int tn_rd_divide(const tn_rd_kernel *kernel, PyArrayObject *out, npy_intp count)
{
    npy_intp idx[NPY_MAXDIMS] = {0};
    char *p = PyArray_BYTES(out);
    if (count == 0 && PyArray_SIZE(out) > 0
            && PyErr_WarnEx(PyExc_RuntimeWarning, "Mean of empty slice.", 1) < 0)
        return -1;   /* NumPy warns too; a warning made an error propagates */
    for (npy_intp i = 0; i < PyArray_SIZE(out); i++) {
        kernel->loops.divide(p, (double)count);
        p = tn_rd_step(out, idx, p);
    }
    return 0;
}

/* One run of tn_rd_run's loops, as its threads share it. */
typedef struct {
    PyArrayObject **ops;
    int nops, nd, contiguous, split, interruptible;
    const npy_intp *shape, *strides, *s;
    npy_intp unit, units, per_chunk;
    tn_rd_row_fn loop;
    const char *params;
    volatile int *stop;
} tn_rd_job;

/* Chunk `chunk` of `job`'s units on thread `tid`: the loops' status bits. */
static int tn_rd_chunk(const tn_rd_job *job, npy_intp chunk, int tid)
{
    const int nops = job->nops, nd = job->nd;
    const npy_intp first = chunk * job->per_chunk;
    const npy_intp last = job->units - first < job->per_chunk ? job->units
                                                                : first + job->per_chunk;
    npy_intp box[NPY_MAXDIMS], index[NPY_MAXDIMS], visits = 0;
    char *ptr[nops];
    int status = 0;
    if (*job->stop)
        return 0;
    tn_rd_box(nops, job->ops, nd, job->shape, job->strides, job->split, job->unit, first, last,
              box, index, ptr);
    do {
        job->loop(ptr, job->s, box[nd - 1], job->contiguous, &status, job->params);
        if (job->interruptible && tid == 0 && ++visits % TN_CHECK_BLOCKS == 0
                && PyErr_CheckSignals() < 0)
            *job->stop = 1;
    } while (!*job->stop && tn_ew_next(nd - 1, box, job->strides, nops, index, ptr));
    return status;
}

/* Run the reduction `kernel` of ops[1..] into ops[0]: 0, or -1 with an
 * exception set.  The output is filled with the identity, then each of its
 * elements combined with its values, row by row (`row`: the innermost axis is
 * reduced) or along a kept innermost axis (`kept`).  Threads take parts of
 * one kept axis: disjoint output elements, each reduced in the serial order,
 * so the result never depends on the thread count. */
static int tn_rd_run(const tn_rd_kernel *kernel, PyArrayObject **ops)
{
    const int nops = kernel->nops;
    npy_intp shape[NPY_MAXDIMS], strides[nops * NPY_MAXDIMS], count;
    int nd, contiguous, status = 0;
    if (tn_ew_check(kernel->name, nops, ops, kernel->type_nums, kernel->dtype_names,
                    kernel->ndims, kernel->labels) < 0)
        return -1;
    if (tn_rd_layout(kernel->name, nops, ops, kernel->labels, kernel->full_nd, kernel->reduced,
                     kernel->keepdims, shape, strides, &count) < 0)
        return -1;
    if (count == 0 && kernel->no_identity != NULL) {  /* as NumPy: even for an empty output */
        PyErr_Format(PyExc_ValueError, "%s: zero-size array to reduction operation %s which "
                     "has no identity", kernel->name, kernel->no_identity);
        return -1;
    }
    if (PyArray_SIZE(ops[0]) == 0)
        return 0;
    tn_rd_fill(ops[0], kernel->identity, (size_t)kernel->itemsize);
    contiguous = tn_rd_compact(nops, ops, kernel->full_nd, &nd, shape, strides);
    if (count > 0) {
        npy_intp s[nops], unit;
        const int rows = strides[nd - 1] == 0;  /* output stride on the innermost axis */
        const int split = tn_rd_split_axis(nd, shape, strides, TN_RD_BLOCK, &unit);
        const npy_intp units = split < 0 ? 1 : (shape[split] + unit - 1) / unit;
        const int nthreads = tn_rd_threads(kernel, split < 0 ? 0 : count * PyArray_SIZE(ops[0]));
        const npy_intp per_chunk = tn_chunk(units, nthreads);
        const npy_intp chunks = (units + per_chunk - 1) / per_chunk;
        const tn_rd_row_fn loop = rows ? kernel->loops.row : kernel->loops.kept;
        /* Ctrl-C: the caller's thread checks every TN_CHECK_BLOCKS rows; the
         * threads then stop. */
        const int interruptible = tn_interruptible && tn_is_main_thread();
        volatile int stop = 0;
        PyThreadState *saved = NULL;
        for (int j = 0; j < nops; j++)
            s[j] = strides[j * NPY_MAXDIMS + nd - 1];
        if (!interruptible && count * PyArray_SIZE(ops[0]) >= TN_NOGIL_MIN)
            saved = PyEval_SaveThread();   /* the loops touch no Python object */
        const tn_rd_job job = {ops, nops, nd, contiguous, split, interruptible, shape, strides,
                               s, unit, units, per_chunk, loop, kernel->params, &stop};
        if (nthreads > 1) {   /* a parallel region only then (see tn_ew_run) */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) reduction(| : status)
#endif
            for (npy_intp chunk = 0; chunk < chunks; chunk++)
                status |= tn_rd_chunk(&job, chunk, tn_thread_num());
        } else {
            for (npy_intp chunk = 0; chunk < chunks; chunk++)
                status |= tn_rd_chunk(&job, chunk, 0);
        }
        if (saved != NULL)
            PyEval_RestoreThread(saved);
        if (stop)
            return -1;   /* KeyboardInterrupt (or a handler's error) is set */
    }
    if (kernel->loops.divide != NULL && tn_rd_divide(kernel, ops[0], count) < 0)
        return -1;
    if (status)
        return tn_ew_fail(kernel->name, status);
    return 0;
}
