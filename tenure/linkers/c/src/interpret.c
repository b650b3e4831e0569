/* The schedule interpreter: a graph's schedule as data, run by one driver.
 *
 * A `Schedule` (a type of the runtime module) is built once per compiled
 * function from a description that tenure/linkers/c/schedule.py writes:
 * the slots, the steps in order, what each step reads and writes, the
 * frees, the commit point.  Calling it runs the whole schedule once, with
 * the contract of a graph module's run() (tenure/linkers/c/module.py says
 * what the arguments and the storage hold):
 *
 *     schedule(storage, inputs, shapes, py_steps, status) -> list of outputs
 *
 * Most steps are data here: elementwise nodes and reductions (their
 * description, with the loops a loop library hands out), products and Gemm
 * (the roles of their axes), softmax and its kin, views (DimShuffle, Reshape,
 * basic Subtensor), shape bookkeeping (Shape, SumTo, ExpandTo, Alloc), integer
 * array indexing (AdvancedSubtensor, AdvancedIncSubtensor).  A step whose C depends on the node in other ways
 * (set/inc_subtensor's region loops, outer products) is a function of a
 * small graph module, reached through that module's `steps` capsule; a step
 * without C code calls its perform.  So a graph made of data steps whose
 * loops are already built compiles nothing at all.
 *
 * Descriptions come from tenure itself, not from users: they are checked
 * for shape (a malformed one is a TypeError or ValueError, never a crash),
 * not for meaning.
 */

enum {
    TN_STEP_PY = 0,          /* the op's perform */
    TN_STEP_EW = 1,          /* elementwise (tn_ew_run) */
    TN_STEP_RD = 2,          /* reduction (tn_rd_run) */
    TN_STEP_MM = 3,          /* Dot / MatMul (tn_mm_run) */
    TN_STEP_GEMM = 4,        /* Gemm (tn_gemm) */
    TN_STEP_NN = 5,          /* softmax, log_softmax, logsumexp (tn_nn_run) */
    TN_STEP_COMPILED = 6,    /* a function of the graph module */
    TN_STEP_VIEW = 7,        /* DimShuffle, Reshape, basic Subtensor (src/views.c) */
    TN_STEP_SHAPE = 8,       /* Shape, SumTo, ExpandTo, Alloc, Arange, MakeVector,
                                SpecifyShape (src/shapes.c) */
    TN_STEP_ADVANCED = 9     /* AdvancedSubtensor, AdvancedIncSubtensor (src/advanced.c) */
};

enum { TN_ADVANCED_TAKE = 0, TN_ADVANCED_SET = 1, TN_ADVANCED_INC = 2 };

enum { TN_SHAPE_SHAPE = 0, TN_SHAPE_SUM_TO = 1, TN_SHAPE_EXPAND_TO = 2, TN_SHAPE_ALLOC = 3,
       TN_SHAPE_ARANGE = 4, TN_SHAPE_MAKE_VECTOR = 5, TN_SHAPE_SPECIFY = 6 };

enum { TN_VIEW_DIMSHUFFLE = 0, TN_VIEW_RESHAPE = 1, TN_VIEW_SUBTENSOR = 2 };

/* A Subtensor index entry: its kind, then three values (an int index uses
 * the first; a slice start, stop, step), each as (has, from an input, value
 * or input index). */
enum { TN_INDEX_NEWAXIS = 0, TN_INDEX_INT = 1, TN_INDEX_SLICE = 2 };
#define TN_INDEX_WIDTH 10

typedef struct {
    int kind;
    int nin, nout, nfrees;
    Py_ssize_t *ins, *outs, *frees;      /* slots */
    /* C kernels */
    const char *name;                    /* for error messages */
    const char **whats;                  /* per input: how tn_cl_array names it */
    int *weak;                           /* per input: 1 = a Python number, never read */
    Py_ssize_t offset;                   /* output 0's entry in the shape table */
    int out_type, out_nd;
    int destroyed;                       /* the input the output overwrites, or -1 */
    int full_nd;                         /* reductions: the inputs' broadcast ndim */
    int *shape_src;                      /* reductions: per output axis, the full axis or -1 */
    int nread;
    int *read;                           /* elementwise: the inputs read, in operand order */
    tn_ew_kernel ew;
    tn_rd_kernel rd;
    /* products */
    tn_mm_axes axes;
    const char **labels;                 /* per input */
    int *in_nd;
    const char *dtype_name;
    /* softmax and its kin */
    int nn_kind, nn_nd, nn_keepdims;
    int *nn_reduced;
    /* views */
    int view_kind, in_type, view_nd, norder, ndrop, nentries;
    int *order;                          /* DimShuffle: per output axis, the input axis or -1 */
    int *drop;                           /* DimShuffle: the axes dropped */
    Py_ssize_t *entries;                 /* Subtensor: TN_INDEX_WIDTH per entry */
    /* shape steps (the input's typenum and ndim, output ndim: as views';
     * SpecifyShape's spec in `order`, norder of them) */
    int shape_kind;
    PyObject *summing;                   /* SumTo: perform's sum (borrowed: the description's) */
    Py_ssize_t take;                     /* Alloc: the table entry of a buffer it may take, or -1 */
    /* advanced indexing (the input's typenum and ndim: as views'; the index
     * entries in `order`, nentries of them; the kind in shape_kind; the
     * buffer it may take in `take`; np.add.at in `summing`) */
    int inplace;
    /* a perform: per output, the table entry of a buffer it may take (or -1),
     * its typenum and ndim */
    Py_ssize_t *takes;
    /* a graph module's function */
    tn_step_fn fn;
} tn_istep;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *keep;                      /* what the C strings point into */
    void **blocks;                       /* every allocation, freed with the schedule */
    Py_ssize_t nblocks, cap_blocks;
    Py_ssize_t n_slots, n_steps, n_inputs, n_outputs, n_clear, n_written;
    Py_ssize_t *inputs, *outputs, *clear, *written;
    Py_ssize_t commit_step;              /* n_steps: none */
    Py_ssize_t table_size, stash;
    tn_istep *steps;
} tn_schedule;

/* ------------------------------------------------------------------------
 * Reading a description */

static void *tn_sc_alloc(tn_schedule *sc, Py_ssize_t n, size_t size)
{
    void *p;
    if (sc->nblocks == sc->cap_blocks) {
        Py_ssize_t cap = sc->cap_blocks ? 2 * sc->cap_blocks : 16;
        void **blocks = PyMem_Realloc(sc->blocks, (size_t)cap * sizeof *blocks);
        if (blocks == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        sc->blocks = blocks;
        sc->cap_blocks = cap;
    }
    p = PyMem_Calloc((size_t)(n > 0 ? n : 1), size);
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    sc->blocks[sc->nblocks++] = p;
    return p;
}

static int tn_sc_tuple(PyObject *obj, const char *what, Py_ssize_t n)
{
    if (!PyTuple_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "Schedule: %s: expected a tuple, got %R", what, obj);
        return -1;
    }
    if (n >= 0 && PyTuple_GET_SIZE(obj) != n) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: expected %zd item(s), got %R", what, n,
                     obj);
        return -1;
    }
    return 0;
}

/* A tuple of ints as a C array (its length in *n when n is not NULL). */
static Py_ssize_t *tn_sc_ssizes(tn_schedule *sc, PyObject *obj, const char *what, Py_ssize_t *n)
{
    Py_ssize_t *out;
    if (tn_sc_tuple(obj, what, -1) < 0)
        return NULL;
    out = tn_sc_alloc(sc, PyTuple_GET_SIZE(obj), sizeof *out);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); i++) {
        out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, i));
        if (out[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (n != NULL)
        *n = PyTuple_GET_SIZE(obj);
    return out;
}

static int *tn_sc_ints(tn_schedule *sc, PyObject *obj, const char *what, Py_ssize_t want)
{
    int *out;
    if (tn_sc_tuple(obj, what, want) < 0)
        return NULL;
    out = tn_sc_alloc(sc, PyTuple_GET_SIZE(obj), sizeof *out);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); i++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(obj, i));
        if (v == -1 && PyErr_Occurred())
            return NULL;
        out[i] = (int)v;
    }
    return out;
}

static const char **tn_sc_strings(tn_schedule *sc, PyObject *obj, const char *what,
                                  Py_ssize_t want)
{
    const char **out;
    if (tn_sc_tuple(obj, what, want) < 0)
        return NULL;
    out = tn_sc_alloc(sc, PyTuple_GET_SIZE(obj), sizeof *out);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); i++) {
        out[i] = PyUnicode_AsUTF8(PyTuple_GET_ITEM(obj, i));
        if (out[i] == NULL)
            return NULL;
    }
    return out;
}

static const void *tn_sc_loops(PyObject *loops, long i, const char *capsule)
{
    if (i < 0 || i >= PyTuple_GET_SIZE(loops)) {
        PyErr_Format(PyExc_ValueError, "Schedule: loop %ld of %zd", i, PyTuple_GET_SIZE(loops));
        return NULL;
    }
    return PyCapsule_GetPointer(PyTuple_GET_ITEM(loops, i), capsule);
}

/* The part every C kernel step shares:
 * (name, whats, weak, offset, out_type, out_nd, destroyed). */
static int tn_sc_kernel_head(tn_schedule *sc, tn_istep *st, PyObject *head)
{
    PyObject *name, *whats, *weak;
    if (!PyArg_ParseTuple(head, "UO!O!niii:Schedule step", &name, &PyTuple_Type, &whats,
                          &PyTuple_Type, &weak, &st->offset, &st->out_type, &st->out_nd,
                          &st->destroyed))
        return -1;
    /* (each reader stops at the first failure: none runs with an exception set) */
    if ((st->name = PyUnicode_AsUTF8(name)) == NULL
            || (st->whats = tn_sc_strings(sc, whats, "whats", st->nin)) == NULL
            || (st->weak = tn_sc_ints(sc, weak, "weak", st->nin)) == NULL)
        return -1;
    if (st->destroyed < -1 || st->destroyed >= st->nin || st->out_nd < 0
            || st->out_nd > NPY_MAXDIMS || st->offset < 1
            || st->offset + 2 + st->out_nd > sc->table_size) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: destroyed input %d of %d, output ndim %d "
                     "and table entry %zd (of a table of %zd) are out of range", st->name,
                     st->destroyed, st->nin, st->out_nd, st->offset, sc->table_size);
        return -1;
    }
    return 0;
}

/* (types, dtype names, ndims, labels): one per operand, the output first. */
static int tn_sc_operands(tn_schedule *sc, PyObject *obj, int nops, const int **types,
                          const char *const **dtypes, const int **ndims,
                          const char *const **labels)
{
    PyObject *t, *d, *n, *l;
    if (!PyArg_ParseTuple(obj, "O!O!O!O!:Schedule operands", &PyTuple_Type, &t, &PyTuple_Type,
                          &d, &PyTuple_Type, &n, &PyTuple_Type, &l))
        return -1;
    return (*types = tn_sc_ints(sc, t, "types", nops)) != NULL
           && (*dtypes = tn_sc_strings(sc, d, "dtypes", nops)) != NULL
           && (*ndims = tn_sc_ints(sc, n, "ndims", nops)) != NULL
           && (*labels = tn_sc_strings(sc, l, "labels", nops)) != NULL ? 0 : -1;
}

/* elementwise: (read, operands, width, minsize, threads, constants, loop); the
 * loops read the constants (bytes) as their `params`: the description keeps
 * them alive */
static int tn_sc_ew(tn_schedule *sc, tn_istep *st, PyObject *p, PyObject *loops)
{
    PyObject *read, *operands, *params;
    const tn_ew_loops *l;
    long loop;
    tn_ew_kernel *k = &st->ew;
    if (!PyArg_ParseTuple(p, "O!OinIO!l:Schedule elementwise", &PyTuple_Type, &read, &operands,
                          &k->width, &k->minsize, &k->threads, &PyBytes_Type, &params, &loop))
        return -1;
    k->params = PyBytes_AS_STRING(params);
    st->nread = (int)PyTuple_GET_SIZE(read);
    st->read = tn_sc_ints(sc, read, "read", -1);
    if (st->read == NULL)
        return -1;
    for (int j = 0; j < st->nread; j++)
        if (st->read[j] < 0 || st->read[j] >= st->nin) {
            PyErr_Format(PyExc_ValueError, "Schedule: %s: operand %d reads input %d of %d",
                         st->name, j + 1, st->read[j], st->nin);
            return -1;
        }
    k->name = st->name;
    k->nops = st->nread + 1;
    if (tn_sc_operands(sc, operands, k->nops, &k->type_nums, &k->dtype_names, &k->ndims,
                       &k->labels) < 0)
        return -1;
    l = tn_sc_loops(loops, loop, TN_EW_LOOPS_CAPSULE);
    if (l == NULL)
        return -1;
    k->typed = l->typed;
    k->strided = l->strided;
    return 0;
}

/* A reduced shape's source (per output axis, an axis of the inputs'
 * broadcast shape, or -1), checked against full_nd. */
static int tn_sc_shape_src(tn_schedule *sc, tn_istep *st, PyObject *src)
{
    if (st->full_nd < 0 || st->full_nd > NPY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: broadcast ndim %d is out of range",
                     st->name, st->full_nd);
        return -1;
    }
    st->shape_src = tn_sc_ints(sc, src, "shape_src", st->out_nd);
    if (st->shape_src == NULL)
        return -1;
    for (int d = 0; d < st->out_nd; d++)
        if (st->shape_src[d] < -1 || st->shape_src[d] >= st->full_nd) {
            PyErr_Format(PyExc_ValueError, "Schedule: %s: output axis %d comes from axis %d "
                         "of %d", st->name, d, st->shape_src[d], st->full_nd);
            return -1;
        }
    return 0;
}

/* reductions: (full_nd, shape_src, operands, reduced, keepdims, identity, no_identity,
 *              minsize, threads, constants, loop) */
static int tn_sc_rd(tn_schedule *sc, tn_istep *st, PyObject *p, PyObject *loops)
{
    PyObject *src, *operands, *reduced, *identity, *no_identity, *params;
    const tn_rd_loops *l;
    long loop;
    tn_rd_kernel *k = &st->rd;
    if (!PyArg_ParseTuple(p, "iO!OO!iO!OnIO!l:Schedule reduction", &st->full_nd, &PyTuple_Type,
                          &src, &operands, &PyTuple_Type, &reduced, &k->keepdims, &PyBytes_Type,
                          &identity, &no_identity, &k->minsize, &k->threads, &PyBytes_Type,
                          &params, &loop))
        return -1;
    k->params = PyBytes_AS_STRING(params);
    if (tn_sc_shape_src(sc, st, src) < 0)
        return -1;
    k->name = st->name;
    k->nops = st->nin + 1;
    if (tn_sc_operands(sc, operands, k->nops, &k->type_nums, &k->dtype_names, &k->ndims,
                       &k->labels) < 0)
        return -1;
    k->full_nd = st->full_nd;
    k->reduced = tn_sc_ints(sc, reduced, "reduced", st->full_nd);   /* one per axis */
    if (k->reduced == NULL)
        return -1;
    k->identity = PyBytes_AS_STRING(identity);
    k->itemsize = (int)PyBytes_GET_SIZE(identity);
    k->no_identity = no_identity == Py_None ? NULL : PyUnicode_AsUTF8(no_identity);
    if (no_identity != Py_None && k->no_identity == NULL)
        return -1;
    l = tn_sc_loops(loops, loop, TN_RD_LOOPS_CAPSULE);
    if (l == NULL)
        return -1;
    k->loops = *l;
    return 0;
}

/* products: (dtype_name, labels, in_nd, (nb, ba, bb, bo, am, ak, bk, bn, om, on, ond)) */
static int tn_sc_mm(tn_schedule *sc, tn_istep *st, PyObject *p)
{
    PyObject *dtype, *labels, *in_nd, *ba, *bb, *bo;
    tn_mm_axes *a = &st->axes;
    if (!PyArg_ParseTuple(p, "UO!O!(iO!O!O!iiiiiii):Schedule product", &dtype, &PyTuple_Type,
                          &labels, &PyTuple_Type, &in_nd, &a->nb, &PyTuple_Type, &ba,
                          &PyTuple_Type, &bb, &PyTuple_Type, &bo, &a->am, &a->ak, &a->bk,
                          &a->bn, &a->om, &a->on, &a->ond))
        return -1;
    if (a->nb < 0 || a->ond > NPY_MAXDIMS || st->nin != (st->kind == TN_STEP_GEMM ? 5 : 2)) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: %d input(s), %d batch axes and output "
                     "ndim %d do not make a product", st->name, st->nin, a->nb, a->ond);
        return -1;
    }
    return (st->dtype_name = PyUnicode_AsUTF8(dtype)) != NULL
           && (st->labels = tn_sc_strings(sc, labels, "labels", st->nin)) != NULL
           && (st->in_nd = tn_sc_ints(sc, in_nd, "in_nd", st->nin)) != NULL
           && (a->ba = tn_sc_ints(sc, ba, "ba", a->nb)) != NULL   /* one per batch axis */
           && (a->bb = tn_sc_ints(sc, bb, "bb", a->nb)) != NULL
           && (a->bo = tn_sc_ints(sc, bo, "bo", a->nb)) != NULL ? 0 : -1;
}

/* softmax and its kin: (dtype_name, kind, reduced, keepdims, full_nd, shape_src or None) */
static int tn_sc_nn(tn_schedule *sc, tn_istep *st, PyObject *p)
{
    PyObject *dtype, *reduced, *src;
    if (!PyArg_ParseTuple(p, "UiO!iiO:Schedule softmax", &dtype, &st->nn_kind, &PyTuple_Type,
                          &reduced, &st->nn_keepdims, &st->full_nd, &src))
        return -1;
    if (st->nin != 1) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: expected 1 input, got %d", st->name,
                     st->nin);
        return -1;
    }
    st->nn_nd = (int)PyTuple_GET_SIZE(reduced);
    if ((st->dtype_name = PyUnicode_AsUTF8(dtype)) == NULL
            || (st->nn_reduced = tn_sc_ints(sc, reduced, "reduced", -1)) == NULL)
        return -1;
    if (src != Py_None) {
        if (tn_sc_shape_src(sc, st, src) < 0)
            return -1;
    } else if (st->out_nd != st->nn_nd) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s keeps its input's shape: output ndim %d, "
                     "input ndim %d", st->name, st->out_nd, st->nn_nd);
        return -1;
    }
    return 0;
}

/* views: (kind, name, whats, in_type, in_nd, out_nd, order, drop, entries) */
static int tn_sc_view(tn_schedule *sc, tn_istep *st, PyObject *p)
{
    PyObject *name, *whats, *order, *drop, *entries;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(p, "iUO!iiiO!O!O!:Schedule view", &st->view_kind, &name,
                          &PyTuple_Type, &whats, &st->in_type, &st->view_nd, &st->out_nd,
                          &PyTuple_Type, &order, &PyTuple_Type, &drop, &PyTuple_Type, &entries))
        return -1;
    st->norder = (int)PyTuple_GET_SIZE(order);
    st->ndrop = (int)PyTuple_GET_SIZE(drop);
    if ((st->name = PyUnicode_AsUTF8(name)) == NULL
            || (st->whats = tn_sc_strings(sc, whats, "whats", st->nin)) == NULL
            || (st->order = tn_sc_ints(sc, order, "order", -1)) == NULL
            || (st->drop = tn_sc_ints(sc, drop, "drop", -1)) == NULL
            || (st->entries = tn_sc_ssizes(sc, entries, "entries", &n)) == NULL)
        return -1;
    st->nentries = (int)(n / TN_INDEX_WIDTH);
    if (st->nin < 1 || st->nout != 1 || st->view_nd < 0 || st->view_nd > NPY_MAXDIMS
            || st->out_nd < 0 || st->out_nd > NPY_MAXDIMS || n % TN_INDEX_WIDTH
            || st->view_kind < TN_VIEW_DIMSHUFFLE || st->view_kind > TN_VIEW_SUBTENSOR
            || (st->view_kind == TN_VIEW_RESHAPE && st->nin != 2)
            || (st->view_kind == TN_VIEW_DIMSHUFFLE && st->norder != st->out_nd)) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: view kind %d with %d input(s), input "
                     "ndim %d, output ndim %d, %d axes in its order: out of range", st->name,
                     st->view_kind, st->nin, st->view_nd, st->out_nd, st->norder);
        return -1;
    }
    for (int k = 0; k < st->norder; k++)
        if (st->order[k] < -1 || st->order[k] >= st->view_nd) {
            PyErr_Format(PyExc_ValueError, "Schedule: %s: output axis %d is input axis %d of %d",
                         st->name, k, st->order[k], st->view_nd);
            return -1;
        }
    for (int k = 0; k < st->ndrop; k++)
        if (st->drop[k] < 0 || st->drop[k] >= st->view_nd) {
            PyErr_Format(PyExc_ValueError, "Schedule: %s: dropped axis %d of %d", st->name,
                         st->drop[k], st->view_nd);
            return -1;
        }
    int axis = 0, k = 0;
    for (int e = 0; e < st->nentries; e++) {
        const Py_ssize_t *entry = st->entries + e * TN_INDEX_WIDTH;
        for (int j = 0; j < 3; j++)
            if (entry[2 + 3 * j] && (entry[3 + 3 * j] < 1 || entry[3 + 3 * j] >= st->nin)) {
                PyErr_Format(PyExc_ValueError, "Schedule: %s: index entry %d reads input %zd of "
                             "%d", st->name, e, entry[3 + 3 * j], st->nin);
                return -1;
            }
        axis += entry[0] != TN_INDEX_NEWAXIS;
        k += entry[0] != TN_INDEX_INT;
        if (axis > st->view_nd || k > st->out_nd) {
            PyErr_Format(PyExc_ValueError, "Schedule: %s: index entry %d goes past input ndim %d "
                         "or output ndim %d", st->name, e, st->view_nd, st->out_nd);
            return -1;
        }
    }
    if (st->view_kind == TN_VIEW_SUBTENSOR && k != st->out_nd) {   /* every output axis is made */
        PyErr_Format(PyExc_ValueError, "Schedule: %s: the index makes %d output axes, not %d",
                     st->name, k, st->out_nd);
        return -1;
    }
    return 0;
}

static int tn_sc_shape(tn_schedule *sc, tn_istep *st, PyObject *p)
{
    PyObject *name, *whats, *spec;
    int symbolic = 0;
    if (!PyArg_ParseTuple(p, "iUO!iiiOnO!:Schedule shape step", &st->shape_kind, &name,
                          &PyTuple_Type, &whats, &st->in_type, &st->view_nd, &st->out_nd,
                          &st->summing, &st->take, &PyTuple_Type, &spec))
        return -1;
    st->norder = (int)PyTuple_GET_SIZE(spec);
    if ((st->name = PyUnicode_AsUTF8(name)) == NULL
            || (st->whats = tn_sc_strings(sc, whats, "whats", st->nin)) == NULL
            || (st->order = tn_sc_ints(sc, spec, "spec", -1)) == NULL)
        return -1;
    for (int d = 0; d < st->norder; d++)
        symbolic += st->order[d] == -2;
    if (st->nout != 1 || st->view_nd < 0 || st->view_nd > NPY_MAXDIMS || st->out_nd < 0
            || st->out_nd > NPY_MAXDIMS || st->shape_kind < TN_SHAPE_SHAPE
            || st->shape_kind > TN_SHAPE_SPECIFY || st->take < -1
            || (st->take >= 0 && st->take + 2 + st->out_nd > sc->table_size)
            || (st->shape_kind == TN_SHAPE_SHAPE ? st->nin != 1 || st->out_nd != 1
                : st->shape_kind == TN_SHAPE_ARANGE ? st->nin != 3 || st->out_nd != 1
                : st->shape_kind == TN_SHAPE_MAKE_VECTOR ? st->out_nd != 1
                : st->shape_kind == TN_SHAPE_SPECIFY
                    ? st->nin != 1 + symbolic || st->norder != st->view_nd
                      || st->out_nd != st->view_nd
                : st->nin != 1 + st->out_nd)
            || (st->shape_kind == TN_SHAPE_SUM_TO && !PyCallable_Check(st->summing))) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: shape step kind %d with %d input(s), "
                     "input ndim %d, output ndim %d: out of range", st->name, st->shape_kind,
                     st->nin, st->view_nd, st->out_nd);
        return -1;
    }
    return 0;
}

static int tn_sc_advanced(tn_schedule *sc, tn_istep *st, PyObject *p)
{
    PyObject *name, *whats, *arrays;
    const int first = 1;   /* the index inputs start after x (and v, for an update) */
    if (!PyArg_ParseTuple(p, "iUO!iiO!inO:Schedule advanced indexing step", &st->shape_kind,
                          &name, &PyTuple_Type, &whats, &st->in_type, &st->view_nd,
                          &PyTuple_Type, &arrays, &st->inplace, &st->take, &st->summing))
        return -1;
    st->nentries = (int)PyTuple_GET_SIZE(arrays);
    if ((st->name = PyUnicode_AsUTF8(name)) == NULL
            || (st->whats = tn_sc_strings(sc, whats, "whats", st->nin)) == NULL
            || (st->order = tn_sc_ints(sc, arrays, "arrays", -1)) == NULL)
        return -1;
    if (st->nout != 1 || st->shape_kind < TN_ADVANCED_TAKE || st->shape_kind > TN_ADVANCED_INC
            || st->view_nd < 1 || st->view_nd > NPY_MAXDIMS || st->nentries != st->view_nd
            || st->take < -1 || (st->take >= 0 && st->take + 2 + st->view_nd > sc->table_size)
            || (st->shape_kind == TN_ADVANCED_INC && !PyCallable_Check(st->summing))) {
        PyErr_Format(PyExc_ValueError, "Schedule: %s: advanced indexing step kind %d of a "
                     "%d-d input with %d entries: out of range", st->name, st->shape_kind,
                     st->view_nd, st->nentries);
        return -1;
    }
    for (int e = 0; e < st->nentries; e++) {   /* arrays first, then full slices */
        const int pos = st->order[e];
        if (pos < -1 || pos >= st->nin || (pos >= 0 && pos < first + (st->shape_kind != 0))
                || (e > 0 && pos >= 0 && st->order[e - 1] < 0) || (e == 0 && pos < 0)) {
            PyErr_Format(PyExc_ValueError, "Schedule: %s: index entry %d reads input %d of %d",
                         st->name, e, pos, st->nin);
            return -1;
        }
    }
    return 0;
}

static int tn_sc_slots_ok(const tn_schedule *sc, const Py_ssize_t *slots, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= sc->n_slots) {
            PyErr_Format(PyExc_ValueError, "Schedule: slot %zd out of range", slots[i]);
            return 0;
        }
    return 1;
}

/* One step: (kind, ins, outs, frees, head or None, params). */
static int tn_sc_step(tn_schedule *sc, tn_istep *st, PyObject *desc, PyObject *loops,
                      const tn_step_table *compiled)
{
    PyObject *ins, *outs, *frees, *head, *params;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(desc, "iO!O!O!OO:Schedule step", &st->kind, &PyTuple_Type, &ins,
                          &PyTuple_Type, &outs, &PyTuple_Type, &frees, &head, &params))
        return -1;
    if ((st->ins = tn_sc_ssizes(sc, ins, "ins", &n)) == NULL)
        return -1;
    st->nin = (int)n;
    if ((st->outs = tn_sc_ssizes(sc, outs, "outs", &n)) == NULL)
        return -1;
    st->nout = (int)n;
    if ((st->frees = tn_sc_ssizes(sc, frees, "frees", &n)) == NULL)
        return -1;
    st->nfrees = (int)n;
    if (!tn_sc_slots_ok(sc, st->ins, st->nin) || !tn_sc_slots_ok(sc, st->outs, st->nout)
            || !tn_sc_slots_ok(sc, st->frees, st->nfrees))
        return -1;
    if (st->kind == TN_STEP_PY) {
        st->takes = tn_sc_ssizes(sc, params, "takes", &n);
        if (st->takes == NULL)
            return -1;
        if (n != 3 * (Py_ssize_t)st->nout) {
            PyErr_SetString(PyExc_ValueError, "Schedule: one take per output of a perform");
            return -1;
        }
        return 0;
    }
    if (st->kind == TN_STEP_COMPILED) {
        long i = PyLong_AsLong(params);
        if (i == -1 && PyErr_Occurred())
            return -1;
        if (compiled == NULL || i < 0 || i >= compiled->n) {
            PyErr_Format(PyExc_ValueError, "Schedule: no compiled step %ld", i);
            return -1;
        }
        st->fn = compiled->fns[i];
        return 0;
    }
    if (st->kind == TN_STEP_VIEW)
        return tn_sc_view(sc, st, params);
    if (st->kind == TN_STEP_SHAPE)
        return tn_sc_shape(sc, st, params);
    if (st->kind == TN_STEP_ADVANCED)
        return tn_sc_advanced(sc, st, params);
    if (st->nout != 1 || tn_sc_kernel_head(sc, st, head) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Schedule: a C kernel has one output");
        return -1;
    }
    switch (st->kind) {
    case TN_STEP_EW:
        return tn_sc_ew(sc, st, params, loops);
    case TN_STEP_RD:
        return tn_sc_rd(sc, st, params, loops);
    case TN_STEP_MM:
    case TN_STEP_GEMM:
        return tn_sc_mm(sc, st, params);
    case TN_STEP_NN:
        return tn_sc_nn(sc, st, params);
    }
    PyErr_Format(PyExc_ValueError, "Schedule: unknown step kind %d", st->kind);
    return -1;
}

/* ------------------------------------------------------------------------
 * Running the steps */

/* The inputs of a kernel step (borrowed; NULL for a Python number). */
static int tn_sc_inputs(const tn_istep *st, PyObject **S, PyArrayObject **in)
{
    for (int i = 0; i < st->nin; i++) {
        in[i] = NULL;
        if (!st->weak[i] && tn_cl_array(S[st->ins[i]], &in[i], st->whats[i]) < 0)
            return -1;
    }
    return 0;
}

/* The reduced shape: the inputs' broadcast shape, reduced axes dropped (or 1). */
static void tn_sc_reduced_shape(const tn_istep *st, PyArrayObject **in, npy_intp *shape)
{
    npy_intp full[NPY_MAXDIMS + 1];
    tn_cl_broadcast(in, st->nin, st->full_nd, full);
    for (int d = 0; d < st->out_nd; d++)
        shape[d] = st->shape_src[d] < 0 ? 1 : full[st->shape_src[d]];
}

static int tn_sc_mm_shape(const tn_istep *st, PyArrayObject **in, npy_intp *shape)
{
    const int a = st->kind == TN_STEP_GEMM ? 2 : 0;
    for (int i = 0; i < st->nin; i++)
        if (tn_bl_check(st->name, st->labels[i], in[i], st->out_type, st->dtype_name,
                        st->in_nd[i]) < 0)
            return -1;
    if (tn_mm_shape(st->name, st->labels[a], st->labels[a + 1], &st->axes, in[a], in[a + 1],
                    shape) < 0)
        return -1;
    return st->kind == TN_STEP_GEMM ? tn_bl_broadcast2(st->name, st->labels[0], in[0], shape) : 0;
}

/* A 0-d array's value as a double (Gemm's alpha and beta). */
static double tn_sc_scalar(PyArrayObject *a, int type_num)
{
    const char *p = PyArray_BYTES(a);
#define TN_READ(T) do { T v; memcpy(&v, p, sizeof v); return (double)v; } while (0)
    switch (type_num) {
    case NPY_BOOL: TN_READ(npy_bool);
    case NPY_INT8: TN_READ(npy_int8);
    case NPY_UINT8: TN_READ(npy_uint8);
    case NPY_INT16: TN_READ(npy_int16);
    case NPY_UINT16: TN_READ(npy_uint16);
    case NPY_INT32: TN_READ(npy_int32);
    case NPY_UINT32: TN_READ(npy_uint32);
    case NPY_INT64: TN_READ(npy_int64);
    case NPY_UINT64: TN_READ(npy_uint64);
    case NPY_FLOAT32: TN_READ(npy_float32);
    default: TN_READ(npy_float64);
    }
#undef TN_READ
}

/* The kernel itself, into `out` (whose shape the step worked out). */
static int tn_sc_kernel(const tn_istep *st, PyArrayObject **in, PyArrayObject *out)
{
    npy_intp shape[NPY_MAXDIMS + 1];
    switch (st->kind) {
    case TN_STEP_EW: {
        PyArrayObject *ops[st->nread + 1];
        ops[0] = out;
        for (int j = 0; j < st->nread; j++)
            ops[j + 1] = in[st->read[j]];
        return tn_ew_run(&st->ew, ops);
    }
    case TN_STEP_RD: {
        PyArrayObject *ops[st->nin + 1];
        ops[0] = out;
        for (int i = 0; i < st->nin; i++)
            ops[i + 1] = in[i];
        return tn_rd_run(&st->rd, ops);
    }
    case TN_STEP_MM:
        if (tn_sc_mm_shape(st, in, shape) < 0
                || tn_bl_check_out(st->name, out, st->out_type, st->dtype_name, st->axes.ond,
                                   shape) < 0)
            return -1;
        return tn_mm_run(st->name, st->labels[0], st->labels[1], &st->axes, in, out,
                         st->out_type);
    case TN_STEP_GEMM:
        if (tn_sc_mm_shape(st, in, shape) < 0
                || tn_bl_check_out(st->name, out, st->out_type, st->dtype_name, 2, shape) < 0)
            return -1;
        return tn_gemm(st->name, &st->axes, in[0], in[2], in[3], out,
                       tn_sc_scalar(in[1], st->out_type), tn_sc_scalar(in[4], st->out_type),
                       st->out_type);
    default:   /* TN_STEP_NN */
        if (tn_nn_check(st->name, in[0], out, st->out_type, st->dtype_name, st->nn_nd,
                        st->nn_reduced, st->nn_keepdims, st->out_nd) < 0)
            return -1;
        return tn_nn_run(st->nn_kind, in[0], out, st->nn_nd, st->nn_reduced);
    }
}

/* A C kernel step: its inputs, its output buffer (module.py's doc says which
 * one it gets), the kernel, the output into its slot. */
static int tn_sc_kernel_step(const tn_schedule *sc, const tn_istep *st, PyObject **S,
                             const npy_intp *planned, PyObject **aside)
{
    PyArrayObject *in[st->nin > 0 ? st->nin : 1], *copies[st->nin > 0 ? st->nin : 1];
    PyArrayObject *out, *dest = NULL, *taken = NULL;
    npy_intp shape[NPY_MAXDIMS + 1];
    const int nd = st->out_nd;
    int rc;
    if (tn_sc_inputs(st, S, in) < 0)
        return -1;
    if (!tn_cl_planned(planned, st->offset, nd, shape)) {
        if (st->kind == TN_STEP_EW) {
            tn_cl_broadcast(in, st->nin, nd, shape);
        } else if (st->kind == TN_STEP_MM || st->kind == TN_STEP_GEMM) {
            if (tn_sc_mm_shape(st, in, shape) < 0)
                return -1;
        } else if (st->kind == TN_STEP_NN && st->shape_src == NULL) {
            for (int d = 0; d < nd; d++)
                shape[d] = PyArray_NDIM(in[0]) > d ? PyArray_DIM(in[0], d) : 1;
        } else {
            tn_sc_reduced_shape(st, in, shape);
        }
    }
    if (st->destroyed >= 0 && !st->weak[st->destroyed])
        dest = in[st->destroyed];
    else if (aside != NULL && planned[st->offset] == 1 && planned[st->offset + 1] >= 0)
        taken = tn_cl_take(aside, planned[st->offset + 1], st->out_type, nd, shape);
    out = tn_cl_output(S[st->outs[0]], dest, in, st->nin, S, sc->inputs, (int)sc->n_inputs,
                       st->out_type, nd, shape, taken);
    if (out == NULL)
        return -1;
    if (dest != NULL && st->kind == TN_STEP_EW) {
        /* In place: inputs that overlap the output other than exactly are read from a copy. */
        int i;
        for (i = 0; i < st->nin; i++) {
            copies[i] = NULL;
            if (in[i] != NULL && tn_cl_unsafe_overlap(out, in[i])) {
                copies[i] = (PyArrayObject *)PyArray_NewCopy(in[i], NPY_ANYORDER);
                if (copies[i] == NULL)
                    break;
                in[i] = copies[i];
            }
        }
        rc = i == st->nin ? tn_sc_kernel(st, in, out) : -1;
        for (int j = 0; j < i; j++)
            Py_XDECREF(copies[j]);
    } else {
        rc = tn_sc_kernel(st, in, out);
    }
    if (rc < 0) {
        Py_DECREF(out);
        return -1;
    }
    Py_SETREF(S[st->outs[0]], (PyObject *)out);
    return 0;
}

/* DimShuffle: kept axes keep their length and stride, a new axis has stride
 * 0 (as in NumPy); a dropped axis must have length 1 (perform's message). */
static PyObject *tn_sc_dimshuffle(const tn_istep *st, PyArrayObject *a)
{
    npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    char buf[64 * 24];
    for (int k = 0; k < st->ndrop; k++)
        if (PyArray_DIM(a, st->drop[k]) != 1) {
            PyErr_Format(PyExc_ValueError, "%s: cannot drop axis %d of an array of shape %s: it "
                         "has length %zd, not 1", st->name, st->drop[k],
                         tn_vw_shape_str(buf, sizeof buf, PyArray_NDIM(a), PyArray_DIMS(a)),
                         (Py_ssize_t)PyArray_DIM(a, st->drop[k]));
            return NULL;
        }
    for (int k = 0; k < st->out_nd; k++) {
        dims[k] = st->order[k] < 0 ? 1 : PyArray_DIM(a, st->order[k]);
        strides[k] = st->order[k] < 0 ? 0 : PyArray_STRIDE(a, st->order[k]);
    }
    return tn_vw_view(a, st->out_nd, dims, strides, PyArray_BYTES(a));
}

/* Reshape: np.reshape itself (PyArray_Newshape in C order: a view where NumPy
 * makes one, else a copy), with perform's checks and messages. */
static PyObject *tn_sc_reshape(const tn_istep *st, PyArrayObject *a, PyObject *shape_obj)
{
    npy_intp dims[NPY_MAXDIMS];
    PyArray_Dims newshape = {dims, st->out_nd};
    PyArrayObject *s = (PyArrayObject *)shape_obj;
    char buf[64 * 24], buf2[64 * 24];
    int unknown = 0, bad = 0;
    PyObject *r;
    if (!PyArray_Check(shape_obj) || PyArray_NDIM(s) != 1 || PyArray_DIM(s, 0) != st->out_nd
            || !PyArray_ISINTEGER(s) || !PyArray_ISNOTSWAPPED(s)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer vector of length %d",
                     st->whats[1], st->out_nd);
        return NULL;
    }
    for (int d = 0; d < st->out_nd; d++) {
        (void)tn_vw_read_int(PyArray_GETPTR1(s, d), PyArray_TYPE(s), &dims[d]);
        unknown += dims[d] == -1;
        bad |= dims[d] < -1;
    }
    if (bad || unknown > 1) {
        PyErr_Format(PyExc_ValueError, "reshape: invalid shape %s (lengths must be >= 0, with at "
                     "most one -1)", tn_vw_shape_str(buf, sizeof buf, st->out_nd, dims));
        return NULL;
    }
    r = PyArray_Newshape(a, &newshape, NPY_CORDER);
    if (r == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "reshape: cannot reshape an array of shape %s (size %zd) "
                     "into shape %s",
                     tn_vw_shape_str(buf, sizeof buf, PyArray_NDIM(a), PyArray_DIMS(a)),
                     (Py_ssize_t)PyArray_SIZE(a),
                     tn_vw_shape_str(buf2, sizeof buf2, st->out_nd, dims));
    }
    return r;
}

/* Subtensor with basic indices: the region's shape, strides and first
 * element, as Python and NumPy index (the index inputs read first). */
static PyObject *tn_sc_subtensor(const tn_istep *st, PyArrayObject *a, PyObject **in)
{
    npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS], scalars[st->nin];
    char *data = PyArray_BYTES(a);
    int axis = 0, k = 0;
    for (int i = 1; i < st->nin; i++)
        if (tn_vw_scalar(in[i], st->whats[i], &scalars[i]) < 0)
            return NULL;
    for (int e = 0; e < st->nentries; e++) {
        const Py_ssize_t *entry = st->entries + e * TN_INDEX_WIDTH;
        npy_intp value[3];
        int has[3];
        for (int j = 0; j < 3; j++) {
            has[j] = (int)entry[1 + 3 * j];
            value[j] = entry[2 + 3 * j] ? scalars[entry[3 + 3 * j]] : (npy_intp)entry[3 + 3 * j];
        }
        if (entry[0] == TN_INDEX_NEWAXIS) {
            dims[k] = 1;
            strides[k++] = 0;
            continue;
        }
        if (entry[0] == TN_INDEX_INT) {
            if (tn_vw_int_index(value[0], a, axis, st->whats[0], &data) < 0)
                return NULL;
        } else {
            if (tn_vw_slice(a, axis, has[0], value[0], has[1], value[1], has[2], value[2],
                            st->whats[0], &data, &dims[k], &strides[k]) < 0)
                return NULL;
            k++;
        }
        axis++;
    }
    return tn_vw_view(a, st->out_nd, dims, strides, data);
}

/* A step's one output `r` (a new reference, or NULL with the error set) into
 * its slot: 0, or -1 with the error. */
static int tn_sc_put(const tn_istep *st, PyObject **S, PyObject *r)
{
    if (r == NULL)
        return -1;
    Py_SETREF(S[st->outs[0]], r);
    return 0;
}

/* A view step: a new array object over its input's memory into the slot. */
static int tn_sc_view_step(const tn_istep *st, PyObject **S)
{
    PyObject *in[st->nin], *r;
    PyArrayObject *a;
    for (int i = 0; i < st->nin; i++)
        in[i] = S[st->ins[i]];
    a = tn_vw_as_array(in[0], st->in_type, st->view_nd, st->whats[0]);
    if (a == NULL)
        return -1;
    if (st->view_kind == TN_VIEW_DIMSHUFFLE)
        r = tn_sc_dimshuffle(st, a);
    else if (st->view_kind == TN_VIEW_RESHAPE)
        r = tn_sc_reshape(st, a, in[1]);
    else
        r = tn_sc_subtensor(st, a, in);
    Py_DECREF(a);
    return tn_sc_put(st, S, r);
}

/* A shape step (src/shapes.c): its output into the slot. */
static int tn_sc_shape_step(const tn_istep *st, PyObject **S, const npy_intp *planned,
                            PyObject **aside)
{
    PyObject *in[st->nin > 0 ? st->nin : 1], *r;
    npy_intp dims[NPY_MAXDIMS];
    PyArrayObject *a;
    for (int i = 0; i < st->nin; i++)
        in[i] = S[st->ins[i]];
    if (st->shape_kind == TN_SHAPE_ARANGE || st->shape_kind == TN_SHAPE_MAKE_VECTOR) {
        /* (scalar inputs of any dtype: in_type is the output's) */
        return tn_sc_put(st, S, st->shape_kind == TN_SHAPE_ARANGE
                                    ? tn_sh_arange(in, st->in_type)
                                    : tn_sh_make_vector(in, st->nin, st->in_type));
    }
    a = tn_vw_as_array(in[0], st->in_type, st->view_nd, st->whats[0]);
    if (a == NULL)
        return -1;
    if (st->shape_kind == TN_SHAPE_SHAPE)
        r = tn_sh_shape(a);
    else if (st->shape_kind == TN_SHAPE_SPECIFY)
        r = tn_sh_specify(a, st->order, st->norder, in + 1, st->whats + 1);
    else if (tn_sh_dims(in + 1, st->out_nd, st->whats + 1, dims) < 0)
        r = NULL;
    else if (st->shape_kind == TN_SHAPE_SUM_TO)
        r = tn_sh_sum_to(a, st->out_nd, dims, st->summing);
    else if (st->shape_kind == TN_SHAPE_EXPAND_TO)
        r = tn_sh_expand_to(a, st->out_nd, dims, st->name);
    else
        r = tn_sh_alloc(a, st->out_nd, dims, st->take < 0 ? NULL : tn_cl_take_planned(
            aside, planned, st->take, st->in_type, st->out_nd));
    Py_DECREF(a);
    return tn_sc_put(st, S, r);
}

/* An advanced indexing step (src/advanced.c): its output into the slot. */
static int tn_sc_advanced_step(const tn_istep *st, PyObject **S, const npy_intp *planned,
                               PyObject **aside)
{
    PyObject *in[st->nin], *r;
    PyArrayObject *x, *out;
    for (int i = 0; i < st->nin; i++)
        in[i] = S[st->ins[i]];
    x = tn_vw_as_array(in[0], st->in_type, st->view_nd, st->whats[0]);
    if (x == NULL)
        return -1;
    if (st->shape_kind == TN_ADVANCED_TAKE) {
        r = tn_ad_take(x, in, st->order, st->nentries);
    } else {
        out = tn_ad_target(x, in, st->nin, st->inplace, st->take < 0 ? NULL : tn_cl_take_planned(
            aside, planned, st->take, st->in_type, st->view_nd));
        r = out == NULL ? NULL : tn_ad_update(out, in[1], in, st->order, st->nentries,
                                              st->shape_kind == TN_ADVANCED_INC ? st->summing
                                                                                : NULL,
                                              st->name);
    }
    Py_DECREF(x);
    return tn_sc_put(st, S, r);
}

static int tn_sc_run_step(const tn_schedule *sc, const tn_istep *st, Py_ssize_t k, PyObject **S,
                          PyObject *py_steps, const npy_intp *planned, PyObject **aside)
{
    if (st->kind == TN_STEP_COMPILED) {
        const int r = st->fn(S, planned, aside);
        if (r != 1)
            return r;
        /* 1: the step declines this call's inputs (a row program, for shapes
         * its kernel does not cover) and its perform runs instead */
        PyObject *none[st->nout > 0 ? st->nout : 1];
        for (int j = 0; j < st->nout; j++)
            none[j] = NULL;
        return tn_cl_py_step(S, PyTuple_GET_ITEM(py_steps, k), st->ins, st->nin, st->outs,
                             st->nout, none);
    }
    if (st->kind == TN_STEP_VIEW)
        return tn_sc_view_step(st, S);
    if (st->kind == TN_STEP_SHAPE)
        return tn_sc_shape_step(st, S, planned, aside);
    if (st->kind == TN_STEP_ADVANCED)
        return tn_sc_advanced_step(st, S, planned, aside);
    if (st->kind == TN_STEP_PY) {
        PyObject *pre[st->nout > 0 ? st->nout : 1];
        for (int j = 0; j < st->nout; j++) {
            const Py_ssize_t *take = st->takes + 3 * j;   /* table entry, typenum, ndim */
            pre[j] = take[0] < 0 ? NULL : (PyObject *)tn_cl_take_planned(
                aside, planned, take[0], (int)take[1], (int)take[2]);
        }
        return tn_cl_py_step(S, PyTuple_GET_ITEM(py_steps, k), st->ins, st->nin, st->outs,
                             st->nout, pre);
    }
    return tn_sc_kernel_step(sc, st, S, planned, aside);
}

/* The checks of a call's arguments (module.py's run()): storage and inputs
 * as lists of the schedule's lengths, py_steps a tuple, status a writeable
 * intp array, shapes None or the shape table.  0, or -1 with the error. */
static int tn_sc_check_call(const tn_schedule *sc, PyObject *storage, PyObject *inputs,
                            PyObject *shapes, PyObject *py_steps, PyObject *status_obj)
{
    if (!PyList_CheckExact(storage) || !PyList_CheckExact(inputs) || !PyTuple_Check(py_steps)) {
        PyErr_Format(PyExc_TypeError, "run: expected storage and inputs as lists and py_steps "
                     "as a tuple, got %s, %s and %s", Py_TYPE(storage)->tp_name,
                     Py_TYPE(inputs)->tp_name, Py_TYPE(py_steps)->tp_name);
        return -1;
    }
    if (PyList_GET_SIZE(storage) != sc->n_slots || PyList_GET_SIZE(inputs) != sc->n_inputs
            || PyTuple_GET_SIZE(py_steps) != sc->n_steps + 1) {
        PyErr_Format(PyExc_ValueError, "run: expected storage, inputs and py_steps of lengths "
                     "%zd, %zd and %zd, got %zd, %zd and %zd", sc->n_slots, sc->n_inputs,
                     sc->n_steps + 1, PyList_GET_SIZE(storage), PyList_GET_SIZE(inputs),
                     PyTuple_GET_SIZE(py_steps));
        return -1;
    }
    if (!PyArray_Check(status_obj) || PyArray_TYPE((PyArrayObject *)status_obj) != NPY_INTP
            || !PyArray_ISCARRAY((PyArrayObject *)status_obj)
            || PyArray_SIZE((PyArrayObject *)status_obj) < 1) {
        PyErr_SetString(PyExc_ValueError, "run: status must be a writeable intp array");
        return -1;
    }
    if (shapes != Py_None
            && (!PyArray_Check(shapes) || PyArray_TYPE((PyArrayObject *)shapes) != NPY_INTP
                || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)shapes)
                || PyArray_SIZE((PyArrayObject *)shapes) != sc->table_size)) {
        PyErr_Format(PyExc_ValueError, "run: shapes must be None or a contiguous intp "
                     "array of length %zd", sc->table_size);
        return -1;
    }
    return 0;
}

/* One run of the schedule over checked arguments (tn_sc_check_call), the
 * inputs as an array of sc->n_inputs: 0 with sc->n_outputs new references
 * in `results`, or -1 with the error (status[0]: the step that failed, as
 * the run() contract says), `results` untouched. */
static int tn_sc_execute(const tn_schedule *sc, PyObject *storage, PyObject *const *inputs,
                         PyObject *shapes, PyObject *py_steps, npy_intp *status,
                         PyObject **results)
{
    PyObject **S, **aside = NULL;
    PyObject *backups[sc->n_written > 0 ? sc->n_written : 1];   /* backup mode: shared storage */
    const int was_interruptible = tn_interruptible;   /* a call from inside another's step */
    const npy_intp *planned = NULL;
    int committed = 0, rc = -1;
    Py_ssize_t k;
    status[0] = -1;
    if (shapes != Py_None) {
        planned = (const npy_intp *)PyArray_DATA((PyArrayObject *)shapes);
        if (planned[0] & 1) {
            aside = (PyObject **)PyMem_Calloc((size_t)sc->n_slots, sizeof(PyObject *));
            if (aside == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        }
    }
    for (Py_ssize_t i = 0; i < sc->n_written; i++)
        backups[i] = NULL;
    S = PySequence_Fast_ITEMS(storage);
    tn_interruptible = sc->commit_step > 0;   /* loops stop for Ctrl-C until the commit point */
    for (Py_ssize_t j = 0; j < sc->n_inputs; j++) {
        Py_INCREF(inputs[j]);
        Py_SETREF(S[sc->inputs[j]], inputs[j]);
    }
    for (k = 0; k < sc->n_steps; k++) {
        const tn_istep *st = &sc->steps[k];
        if (k == sc->commit_step) {   /* the commit point (tenure.linkers.commit) */
            if (tn_cl_commit(S, py_steps, sc->n_steps, planned, sc->written, sc->n_written,
                             backups) < 0)
                goto fail;
            committed = 1;
            tn_interruptible = 0;
        }
        if (tn_sc_run_step(sc, st, k, S, py_steps, planned, aside) < 0)
            goto fail;
        for (int f = 0; f < st->nfrees; f++)
            tn_cl_free(S, aside, planned, sc->stash, st->frees[f]);
        /* Ctrl-C between steps, until the call has written shared storage. */
        if (k < sc->commit_step && PyErr_CheckSignals() < 0)
            goto fail;
    }
    for (Py_ssize_t j = 0; j < sc->n_outputs; j++) {
        results[j] = S[sc->outputs[j]];
        Py_INCREF(results[j]);
    }
    for (Py_ssize_t j = 0; j < sc->n_clear; j++)
        tn_cl_clear(S, sc->clear[j]);
    rc = 0;
    goto done;
fail:
    status[0] = k < sc->n_steps ? k : -1;
    if (committed)
        tn_cl_restore(S, sc->written, sc->n_written, backups);
done:
    tn_interruptible = was_interruptible;
    for (Py_ssize_t i = 0; i < sc->n_written; i++)
        Py_XDECREF(backups[i]);
    if (aside != NULL) {
        for (Py_ssize_t i = 0; i < sc->n_slots; i++)
            Py_XDECREF(aside[i]);
        PyMem_Free(aside);
    }
    return rc;
}

/* The call: module.py's run(), over the description. */
static PyObject *tn_sc_call(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    const tn_schedule *sc = (const tn_schedule *)self;
    PyObject *results;
    if (PyVectorcall_NARGS(nargsf) != 5 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "Schedule: expected (storage, inputs, shapes, py_steps, "
                        "status)");
        return NULL;
    }
    if (tn_sc_check_call(sc, args[0], args[1], args[2], args[3], args[4]) < 0)
        return NULL;
    results = PyList_New(sc->n_outputs);   /* (its items filled only on success) */
    if (results == NULL)
        return NULL;
    if (tn_sc_execute(sc, args[0], PySequence_Fast_ITEMS(args[1]), args[2], args[3],
                      (npy_intp *)PyArray_DATA((PyArrayObject *)args[4]),
                      PySequence_Fast_ITEMS(results)) < 0)
        Py_CLEAR(results);
    return results;
}

/* ------------------------------------------------------------------------
 * The type */

static void tn_sc_dealloc(tn_schedule *sc)
{
    PyObject_GC_UnTrack(sc);
    Py_CLEAR(sc->keep);
    for (Py_ssize_t i = 0; i < sc->nblocks; i++)
        PyMem_Free(sc->blocks[i]);
    PyMem_Free(sc->blocks);
    Py_TYPE(sc)->tp_free((PyObject *)sc);
}

static int tn_sc_traverse(tn_schedule *sc, visitproc visit, void *arg)
{
    Py_VISIT(sc->keep);
    return 0;
}

static int tn_sc_clear(tn_schedule *sc)
{
    Py_CLEAR(sc->keep);
    return 0;
}

/* Schedule(description, loops, module):
 *   description: (n_slots, inputs, outputs, clear, written, commit_step, table_size, stash,
 *                 steps), see tenure/linkers/c/schedule.py;
 *   loops: a tuple of loop capsules (tenure/linkers/c/kernels.py);
 *   module: the graph module holding the compiled steps, or None. */
static PyObject *tn_sc_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"description", "loops", "module", NULL};
    PyObject *desc, *loops, *module, *steps, *ins, *outs, *clear, *written;
    PyObject *table_capsule = NULL;
    const tn_step_table *compiled = NULL;
    tn_schedule *sc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O:Schedule", names, &PyTuple_Type, &desc,
                                     &PyTuple_Type, &loops, &module))
        return NULL;
    sc = (tn_schedule *)type->tp_alloc(type, 0);
    if (sc == NULL)
        return NULL;
    sc->vectorcall = tn_sc_call;
    sc->keep = PyTuple_Pack(3, desc, loops, module);
    if (sc->keep == NULL)
        goto fail;
    if (!PyArg_ParseTuple(desc, "nO!O!O!O!nnnO!:Schedule description", &sc->n_slots,
                          &PyTuple_Type, &ins, &PyTuple_Type, &outs, &PyTuple_Type, &clear,
                          &PyTuple_Type, &written, &sc->commit_step, &sc->table_size,
                          &sc->stash, &PyTuple_Type, &steps))
        goto fail;
    if (module != Py_None) {
        table_capsule = PyObject_GetAttrString(module, "steps");
        if (table_capsule == NULL)
            goto fail;
        compiled = PyCapsule_GetPointer(table_capsule, TN_STEP_TABLE_CAPSULE);
        Py_DECREF(table_capsule);   /* the module (kept) holds it */
        if (compiled == NULL)
            goto fail;
    }
    if ((sc->inputs = tn_sc_ssizes(sc, ins, "inputs", &sc->n_inputs)) == NULL
            || (sc->outputs = tn_sc_ssizes(sc, outs, "outputs", &sc->n_outputs)) == NULL
            || (sc->clear = tn_sc_ssizes(sc, clear, "clear", &sc->n_clear)) == NULL
            || (sc->written = tn_sc_ssizes(sc, written, "written", &sc->n_written)) == NULL)
        goto fail;
    if (!tn_sc_slots_ok(sc, sc->inputs, sc->n_inputs)
            || !tn_sc_slots_ok(sc, sc->outputs, sc->n_outputs)
            || !tn_sc_slots_ok(sc, sc->clear, sc->n_clear)
            || !tn_sc_slots_ok(sc, sc->written, sc->n_written))
        goto fail;
    sc->n_steps = PyTuple_GET_SIZE(steps);
    if (sc->commit_step < 0 || sc->commit_step > sc->n_steps || sc->table_size < 1
            || sc->stash < 1 || sc->stash + sc->n_slots > sc->table_size) {
        PyErr_SetString(PyExc_ValueError, "Schedule: commit step or table out of range");
        goto fail;
    }
    sc->steps = tn_sc_alloc(sc, sc->n_steps, sizeof *sc->steps);
    if (sc->steps == NULL)
        goto fail;
    for (Py_ssize_t k = 0; k < sc->n_steps; k++) {
        if (tn_sc_step(sc, &sc->steps[k], PyTuple_GET_ITEM(steps, k), loops, compiled) < 0) {
            PyObject *type_, *value, *tb;
            PyErr_Fetch(&type_, &value, &tb);
            PyErr_Format(PyExc_ValueError, "Schedule: step %zd: %S", k,
                         value != NULL ? value : Py_None);
            Py_XDECREF(type_); Py_XDECREF(value); Py_XDECREF(tb);
            goto fail;
        }
    }
    return (PyObject *)sc;
fail:
    Py_DECREF(sc);
    return NULL;
}

/* schedule.kernel(k, inputs, out): step k's kernel alone, on these inputs
 * (all of the node's, a Python number's position ignored) into `out`, an
 * array the kernel checks like any other: no slots, no plan.  For tests and
 * debugging: one node through exactly the code a schedule runs. */
static PyObject *tn_sc_kernel_method(tn_schedule *sc, PyObject *args)
{
    Py_ssize_t k;
    PyObject *inputs, *out_obj;
    const tn_istep *st;
    int rc = -1, i;
    if (!PyArg_ParseTuple(args, "nO!O:kernel", &k, &PyTuple_Type, &inputs, &out_obj))
        return NULL;
    if (k < 0 || k >= sc->n_steps) {
        PyErr_Format(PyExc_IndexError, "kernel: no step %zd (of %zd)", k, sc->n_steps);
        return NULL;
    }
    st = &sc->steps[k];
    if (st->kind < TN_STEP_EW || st->kind > TN_STEP_NN) {
        PyErr_Format(PyExc_TypeError, "kernel: step %zd has no kernel writing an output", k);
        return NULL;
    }
    if (PyTuple_GET_SIZE(inputs) != st->nin) {
        PyErr_Format(PyExc_TypeError, "%s: expected %d input(s), got %zd", st->name, st->nin,
                     PyTuple_GET_SIZE(inputs));
        return NULL;
    }
    {
        PyArrayObject *in[st->nin > 0 ? st->nin : 1], *copies[st->nin > 0 ? st->nin : 1];
        PyArrayObject *out;
        for (i = 0; i < st->nin; i++) {
            in[i] = NULL;
            if (!st->weak[i] && tn_cl_array(PyTuple_GET_ITEM(inputs, i), &in[i],
                                            st->whats[i]) < 0)
                return NULL;
        }
        if (tn_cl_array(out_obj, &out, "kernel: out") < 0)
            return NULL;
        /* Inputs that overlap the output other than exactly are read from a
         * copy (a schedule's buffers never do but in place; products stage
         * their operands themselves). */
        const int own_staging = st->kind == TN_STEP_MM || st->kind == TN_STEP_GEMM;
        for (i = 0; i < st->nin; i++) {
            copies[i] = NULL;
            if (!own_staging && in[i] != NULL && tn_cl_unsafe_overlap(out, in[i])) {
                copies[i] = (PyArrayObject *)PyArray_NewCopy(in[i], NPY_ANYORDER);
                if (copies[i] == NULL)
                    break;
                in[i] = copies[i];
            }
        }
        if (i == st->nin)
            rc = tn_sc_kernel(st, in, out);
        for (int j = 0; j < i; j++)
            Py_XDECREF(copies[j]);
    }
    if (rc < 0)
        return NULL;
    Py_INCREF(out_obj);
    return out_obj;
}

static PyMethodDef tn_sc_methods[] = {
    {"kernel", (PyCFunction)tn_sc_kernel_method, METH_VARARGS,
     "kernel(k, inputs, out): step k's kernel alone, into out (tests, debugging)"},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject ScheduleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tenure.linkers.c.runtime.Schedule",
    .tp_doc = "Schedule(description, loops, module): a graph's schedule, run by the runtime's "
              "interpreter; call it as run(storage, inputs, shapes, py_steps, status)",
    .tp_basicsize = sizeof(tn_schedule),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = tn_sc_new,
    .tp_dealloc = (destructor)tn_sc_dealloc,
    .tp_traverse = (traverseproc)tn_sc_traverse,
    .tp_clear = (inquiry)tn_sc_clear,
    .tp_call = PyVectorcall_Call,
    .tp_methods = tn_sc_methods,
    .tp_vectorcall_offset = offsetof(tn_schedule, vectorcall),
};
