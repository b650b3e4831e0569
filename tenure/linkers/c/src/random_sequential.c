/* The sequential draws in the C runtime: binomial (of other than one trial),
 * choice and permutation, which RandomVariable.perform makes with NumPy's
 * Generator (tenure/symbolic/ops/random.py).  Part of the runtime
 * (runtime.c includes this file after random.c, whose step calls it).
 *
 * Each number depends on those drawn before it, so these draws run on one
 * thread, reading the draw's stream in order: words 0, 1, 2, ... at attempt
 * 0 (tn_rng_word), which are the words of NumPy's Philox(key, counter=[0, 0,
 * n, 0]).  The numbers come from NumPy's own C distributions (libnpyrandom,
 * which NumPy ships for C code like this and the runtime links, see
 * runtime.py): they read the stream through a bitgen_t that hands it out as
 * NumPy's Philox does (tn_rng_stream), so they are the reference's numbers
 * for the NumPy the runtime was built against, whose version its build flags
 * carry.  What Generator.choice and Generator.permutation do around those
 * calls -- the cumulative distribution and its search, Floyd's sampling, the
 * shuffles -- is written here step for step; the tests compare every path
 * with NumPy's numbers.
 *
 * A runtime built against a NumPy without libnpyrandom (TN_NO_NPYRANDOM)
 * leaves this file out, and the C linker draws these with the op's perform.
 *
 * Every check comes first (tn_rng_check_choice, and the step's), and what
 * can fail after them (an allocation) comes before the draw's buffer is
 * written, so a draw that fails has changed no buffer.  A binomial or
 * permutation draw into a C-ordered buffer allocates nothing, nor does an
 * int64 choice from a range with replacement and no probabilities; other
 * choices allocate their indices (a weighted one its cumulative
 * distribution, one without replacement its set or its shuffled range). */

#ifndef TN_NO_NPYRANDOM
#include <float.h>
#include <numpy/random/distributions.h>

struct tn_rng_stream {
    bitgen_t bitgen;         /* what NumPy's functions read the stream through */
    tn_rng_key key;
    tn_rng_cursor cursor;
    tn_u64 next;             /* the index of the next word */
    int has_half;            /* a 32-bit half kept for the next 32-bit call */
    uint32_t half;
    binomial_t binomial;     /* NumPy's constants of the last (n, p) */
};

static uint64_t tn_stream_next64(void *st)
{
    tn_rng_stream *s = (tn_rng_stream *)st;
    return tn_rng_word(s->key, &s->cursor, s->next++, 0);
}

/* As NumPy's Philox: a word's low half, and its high half kept for the next call. */
static uint32_t tn_stream_next32(void *st)
{
    tn_rng_stream *s = (tn_rng_stream *)st;
    tn_u64 word;
    if (s->has_half) {
        s->has_half = 0;
        return s->half;
    }
    word = tn_stream_next64(st);
    s->has_half = 1;
    s->half = (uint32_t)(word >> 32);
    return (uint32_t)(word & 0xffffffffULL);
}

static double tn_stream_double(void *st)
{
    return (double)(tn_stream_next64(st) >> 11) * (1.0 / 9007199254740992.0);
}

static void tn_stream_start(tn_rng_stream *s, tn_rng_key key)
{
    memset(s, 0, sizeof *s);
    s->bitgen.state = s;
    s->bitgen.next_uint64 = tn_stream_next64;
    s->bitgen.next_uint32 = tn_stream_next32;
    s->bitgen.next_double = tn_stream_double;
    s->bitgen.next_raw = tn_stream_next64;
    s->key = key;
    tn_rng_start(&s->cursor);
}

static long long tn_rng_binomial(tn_rng_stream *s, long long n, double p)
{
    return (long long)random_binomial(&s->bitgen, p, (int64_t)n, &s->binomial);
}

/* A binomial draw: element after element in C order (Generator.binomial's
 * loop over the broadcast), from one stream. */
static void tn_rng_fill_binomial(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                                 PyArrayObject *out)
{
    tn_rng_stream s;
    tn_stream_start(&s, key);
    tn_rng_fill_range(node, key, p, out, 0, PyArray_SIZE(out), &s);
}

/* An integer in [0, high] (NumPy's random_bounded_uint64, unmasked: Lemire's). */
static int64_t tn_stream_below_or_at(tn_rng_stream *s, int64_t high)
{
    return (int64_t)random_bounded_uint64(&s->bitgen, 0, (uint64_t)high, 0, 0);
}

/* Generator's _shuffle_int: positions n-1 down to `first` of `data`, each
 * swapped with one drawn at or below it. */
static void tn_stream_shuffle_int(tn_rng_stream *s, npy_intp n, npy_intp first, int64_t *data)
{
    for (npy_intp i = n - 1; i >= first; i--) {
        const int64_t j = tn_stream_below_or_at(s, i), held = data[j];
        data[j] = data[i];
        data[i] = held;
    }
}

/* ------------------------------------------------------------------------
 * choice */

/* The index of the first cdf element above u (NumPy's searchsorted, side right). */
static npy_intp tn_rng_search_right(const double *cdf, npy_intp len, double u)
{
    npy_intp lo = 0, hi = len;
    while (lo < hi) {
        const npy_intp mid = lo + (hi - lo) / 2;
        if (cdf[mid] <= u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* NumPy's cumsum of p (added in order), then divided by its last element. */
static void tn_rng_cdf(const double *p, npy_intp len, double *cdf)
{
    double sum = 0.0;
    for (npy_intp k = 0; k < len; k++)
        cdf[k] = sum += p[k];
    for (npy_intp k = 0; k < len; k++)
        cdf[k] /= sum;
}

/* With replacement and probabilities: n uniforms, then each one's search. */
static int tn_choice_weighted(tn_rng_stream *s, const double *p, npy_intp population, npy_intp n,
                              int64_t *idx)
{
    double *cdf = PyMem_Malloc((size_t)population * sizeof *cdf), *u;
    u = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *u);
    if (cdf == NULL || u == NULL) {
        PyMem_Free(cdf);
        PyMem_Free(u);
        PyErr_NoMemory();
        return -1;
    }
    tn_rng_cdf(p, population, cdf);
    random_standard_uniform_fill(&s->bitgen, n, u);
    for (npy_intp k = 0; k < n; k++)
        idx[k] = tn_rng_search_right(cdf, population, u[k]);
    PyMem_Free(cdf);
    PyMem_Free(u);
    return 0;
}

/* Without replacement and probabilities: rounds of as many uniforms as are
 * missing, the chosen elements' probabilities set to zero, keeping each
 * round's new elements in the order they first came. */
static int tn_choice_weighted_unique(tn_rng_stream *s, const double *p, npy_intp population,
                                     npy_intp n, int64_t *idx)
{
    double *left = PyMem_Malloc((size_t)population * sizeof *left);
    double *cdf = PyMem_Malloc((size_t)population * sizeof *cdf);
    double *u = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *u);
    npy_intp *round_of = PyMem_Malloc((size_t)population * sizeof *round_of), found = 0;
    if (left == NULL || cdf == NULL || u == NULL || round_of == NULL) {
        PyMem_Free(left);
        PyMem_Free(cdf);
        PyMem_Free(u);
        PyMem_Free(round_of);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(left, p, (size_t)population * sizeof *left);
    for (npy_intp k = 0; k < population; k++)
        round_of[k] = -1;
    for (npy_intp round = 0; found < n; round++) {
        const npy_intp want = n - found;
        random_standard_uniform_fill(&s->bitgen, want, u);
        for (npy_intp k = 0; k < found; k++)
            left[idx[k]] = 0.0;
        tn_rng_cdf(left, population, cdf);
        for (npy_intp k = 0; k < want; k++) {
            const npy_intp at = tn_rng_search_right(cdf, population, u[k]);
            if (round_of[at] == round)
                continue;              /* already drawn this round */
            round_of[at] = round;
            idx[found++] = at;
        }
    }
    PyMem_Free(left);
    PyMem_Free(cdf);
    PyMem_Free(u);
    PyMem_Free(round_of);
    return 0;
}

/* A set of int64 values >= 0 (open addressing), for Floyd's sampling. */
typedef struct {
    int64_t *slots;     /* -1: empty */
    uint64_t mask;
} tn_int_set;

static int tn_int_set_start(tn_int_set *set, npy_intp n)
{
    uint64_t size = 2;
    while (size < 2 * (uint64_t)n)
        size *= 2;
    set->mask = size - 1;
    set->slots = PyMem_Malloc((size_t)size * sizeof *set->slots);
    if (set->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint64_t k = 0; k < size; k++)
        set->slots[k] = -1;
    return 0;
}

/* Adds v; 0 if it was there already. */
static int tn_int_set_add(tn_int_set *set, int64_t v)
{
    uint64_t at = (uint64_t)v & set->mask;
    while (set->slots[at] != -1) {
        if (set->slots[at] == v)
            return 0;
        at = (at + 1) & set->mask;
    }
    set->slots[at] = v;
    return 1;
}

/* Without replacement, uniform: a shuffle of the tail of arange(population)
 * when many are taken from a large population, else Floyd's sampling
 * followed by a shuffle (Generator.choice's two ways, at its cutoff). */
static int tn_choice_unique(tn_rng_stream *s, int64_t population, npy_intp n, int64_t *idx)
{
    if (population > 10000 && n > population / 50) {
        int64_t *all = PyMem_Malloc((size_t)population * sizeof *all);
        if (all == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t k = 0; k < population; k++)
            all[k] = k;
        tn_stream_shuffle_int(s, population, population - n > 1 ? population - n : 1, all);
        memcpy(idx, all + (population - n), (size_t)n * sizeof *idx);
        PyMem_Free(all);
        return 0;
    }
    tn_int_set taken;
    if (tn_int_set_start(&taken, n) < 0)
        return -1;
    for (int64_t j = population - n; j < population; j++) {
        const int64_t v = tn_stream_below_or_at(s, j);
        /* Floyd: v when it is new, else j (new: every value so far is below j) */
        if (tn_int_set_add(&taken, v)) {
            idx[j - (population - n)] = v;
        } else {
            tn_int_set_add(&taken, j);
            idx[j - (population - n)] = j;
        }
    }
    PyMem_Free(taken.slots);
    tn_stream_shuffle_int(s, n, 1, idx);
    return 0;
}

static int64_t tn_rng_int64_at(PyArrayObject *a)
{
    int64_t v;
    memcpy(&v, PyArray_DATA(a), sizeof v);
    return v;
}

/* choice's checks, in _check_choice's order and words; n: the samples asked. */
static int tn_rng_check_choice(const tn_rng_node *node, const tn_rng_params *p, int nd,
                               const npy_intp *shape, npy_intp n)
{
    PyArrayObject *a = p->values[0];
    const int from_range = PyArray_NDIM(a) == 0;
    const int64_t population = from_range ? tn_rng_int64_at(a) : PyArray_DIM(a, 0);
    int64_t nonzero = 0;
    if (from_range && population < 1 && n)
        return tn_rng_bad(node, p, 0, PyArray_DATA(a), "a positive integer (the population size)");
    if (!from_range && population == 0 && n) {
        PyErr_SetString(PyExc_ValueError, "choice: parameter 'a' must not be empty when samples "
                        "are taken, got an array of shape (0,)");
        return -1;
    }
    if (node->n_params == 2) {
        PyArrayObject *pa = p->values[1];
        const double *pv = (const double *)PyArray_DATA(pa);
        double sum = 0.0;
        if (PyArray_NDIM(pa) != 1 || PyArray_DIM(pa, 0) != population) {
            PyObject *have = tn_shape_tuple(PyArray_NDIM(pa), PyArray_DIMS(pa));
            if (have != NULL)
                PyErr_Format(PyExc_ValueError, "choice: parameter 'p' must have one probability "
                             "per element of a (shape (%lld,)), got shape %R",
                             (long long)population, have);
            Py_XDECREF(have);
            return -1;
        }
        if (tn_rng_check_each(node, p, 1, TN_RNG_PROBABILITY, "a probability in [0, 1]") < 0)
            return -1;
        for (npy_intp k = 0; k < population; k++) {
            sum += pv[k];      /* in order: the reference's sum (np.cumsum's last) */
            nonzero += pv[k] != 0.0;
        }
        if (population && !(fabs(sum - 1.0) <= sqrt(DBL_EPSILON))) {
            PyObject *shown = PyFloat_FromDouble(sum);
            if (shown != NULL)
                PyErr_Format(PyExc_ValueError, "choice: parameter 'p' must sum to 1, got a sum "
                             "of %R", shown);
            Py_XDECREF(shown);
            return -1;
        }
    }
    if (!node->replace && (node->n_params == 2 ? n > nonzero : n > population)) {
        PyObject *size = tn_shape_tuple(nd, shape);
        if (size != NULL && node->n_params == 2)
            PyErr_Format(PyExc_ValueError, "choice: size %R asks for %zd samples without "
                         "replacement, but parameter 'p' gives only %lld element(s) a nonzero "
                         "probability", size, (Py_ssize_t)n, (long long)nonzero);
        else if (size != NULL)
            PyErr_Format(PyExc_ValueError, "choice: size %R asks for %zd samples without "
                         "replacement from parameter 'a', which has only %lld", size,
                         (Py_ssize_t)n, (long long)population);
        Py_XDECREF(size);
        return -1;
    }
    return 0;
}

/* The indices choice takes, into idx (n of them). */
static int tn_choice_indices(const tn_rng_node *node, tn_rng_stream *s, const tn_rng_params *p,
                             npy_intp n, int64_t *idx)
{
    PyArrayObject *a = p->values[0];
    const int64_t population = PyArray_NDIM(a) == 0 ? tn_rng_int64_at(a) : PyArray_DIM(a, 0);
    const double *weights = node->n_params == 2 ? (const double *)PyArray_DATA(p->values[1])
                                                : NULL;
    if (n == 0)
        return 0;
    if (node->replace && weights != NULL)
        return tn_choice_weighted(s, weights, population, n, idx);
    if (node->replace) {       /* Generator.integers(0, population) */
        random_bounded_uint64_fill(&s->bitgen, 0, (uint64_t)(population - 1), n, 0,
                                   (uint64_t *)idx);
        return 0;
    }
    if (weights != NULL)
        return tn_choice_weighted_unique(s, weights, population, n, idx);
    return tn_choice_unique(s, population, n, idx);
}

/* ------------------------------------------------------------------------
 * Writing the draw */

/* A C-contiguous array of out's shape and dtype to write the draw into:
 * `draw` itself, or a new one copied into it after (a new reference, NULL
 * when memory runs out). */
static PyArrayObject *tn_rng_c_ordered(PyArrayObject *draw)
{
    if (PyArray_IS_C_CONTIGUOUS(draw)) {
        Py_INCREF(draw);
        return draw;
    }
    return (PyArrayObject *)PyArray_EMPTY(PyArray_NDIM(draw), PyArray_DIMS(draw),
                                          PyArray_TYPE(draw), 0);
}

/* `target` (tn_rng_c_ordered's) into `draw`, and released. */
static int tn_rng_finish(PyArrayObject *draw, PyArrayObject *target)
{
    const int status = target == draw ? 0 : PyArray_CopyInto(draw, target);
    Py_DECREF(target);
    return status;
}

/* Swap n bytes at a and b (distinct or the same). */
static void tn_swap_bytes(char *a, char *b, npy_intp n)
{
    char held[64];
    if (a == b)
        return;
    for (npy_intp done = 0; done < n; done += (npy_intp)sizeof held) {
        const size_t part = n - done < (npy_intp)sizeof held ? (size_t)(n - done) : sizeof held;
        memcpy(held, a + done, part);
        memcpy(a + done, b + done, part);
        memcpy(b + done, held, part);
    }
}

/* permutation: arange(x) (x a length) or x's rows written into the draw,
 * then shuffled there row with row as Generator.shuffle shuffles (positions
 * len-1 down to 1, each swapped with the one random_interval draws at or
 * below it): nothing allocated for a C-ordered draw. */
static int tn_rng_draw_permutation(tn_rng_key key, const tn_rng_params *p, PyArrayObject *draw)
{
    PyArrayObject *x = p->values[0], *target = tn_rng_c_ordered(draw);
    const npy_intp len = PyArray_NDIM(x) == 0 ? (npy_intp)tn_rng_int64_at(x) : PyArray_DIM(x, 0);
    tn_rng_stream s;
    npy_intp row;
    char *o;
    if (target == NULL)
        return -1;
    o = PyArray_BYTES(target);
    if (PyArray_NDIM(x) == 0) {
        row = PyArray_ITEMSIZE(target);
        for (npy_intp k = 0; k < len; k++)
            tn_rng_store_int(o + k * row, PyArray_TYPE(target), k);
    } else {   /* x is the draw's dtype and shape already (tn_rng_param_type) */
        row = len ? PyArray_NBYTES(x) / len : 0;
        memcpy(o, PyArray_BYTES(x), (size_t)PyArray_NBYTES(x));
    }
    tn_stream_start(&s, key);
    for (npy_intp i = len - 1; i >= 1; i--) {
        const npy_intp j = (npy_intp)random_interval(&s.bitgen, (uint64_t)i);
        tn_swap_bytes(o + i * row, o + j * row, row);
    }
    return tn_rng_finish(draw, target);
}

/* choice: its indices into memory of their own, then the draw: the indices
 * themselves (a a population size) or a's elements at them. */
static int tn_rng_draw_choice(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                              PyArrayObject *draw)
{
    PyArrayObject *a = p->values[0], *target;
    const npy_intp n = PyArray_SIZE(draw);
    int64_t *idx;
    tn_rng_stream s;
    if (PyArray_NDIM(a) == 0 && node->replace && node->n_params == 1
            && PyArray_TYPE(draw) == NPY_INT64 && PyArray_IS_C_CONTIGUOUS(draw)) {
        /* integers from a range (a minibatch's indices, say): drawn straight
         * into the draw's buffer, nothing allocated (nothing fails after) */
        tn_stream_start(&s, key);
        return tn_choice_indices(node, &s, p, n, (int64_t *)PyArray_DATA(draw));
    }
    idx = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (idx == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    tn_stream_start(&s, key);
    if (tn_choice_indices(node, &s, p, n, idx) < 0 || (target = tn_rng_c_ordered(draw)) == NULL) {
        PyMem_Free(idx);
        return -1;
    }
    char *o = PyArray_BYTES(target);
    const npy_intp itemsize = PyArray_ITEMSIZE(target);
    for (npy_intp k = 0; k < n; k++) {
        if (PyArray_NDIM(a) == 0)
            tn_rng_store_int(o + k * itemsize, PyArray_TYPE(target), idx[k]);
        else   /* a is the draw's dtype already (tn_rng_param_type) */
            memcpy(o + k * itemsize, PyArray_BYTES(a) + idx[k] * itemsize, (size_t)itemsize);
    }
    PyMem_Free(idx);
    return tn_rng_finish(draw, target);
}

/* A choice or permutation draw into `draw` (checked): -1 only when memory
 * runs out, before the draw's buffer is written. */
static int tn_rng_draw_sequential(const tn_rng_node *node, tn_rng_key key,
                                  const tn_rng_params *p, PyArrayObject *draw)
{
    if (node->kind == TN_RNG_PERMUTATION)
        return tn_rng_draw_permutation(key, p, draw);
    return tn_rng_draw_choice(node, key, p, draw);
}

/* The shape of a choice (size, or ()) or permutation ((x,) or x's) draw,
 * then choice's checks. */
static int tn_rng_sequential_shape(const tn_rng_node *node, PyObject **in,
                                   const tn_rng_params *p, npy_intp *shape)
{
    PyArrayObject *a = p->values[0];
    npy_intp n = 1;
    if (node->kind == TN_RNG_PERMUTATION) {
        if (PyArray_NDIM(a) > 0) {
            memcpy(shape, PyArray_DIMS(a), (size_t)PyArray_NDIM(a) * sizeof *shape);
            return 0;
        }
        if (tn_rng_int64_at(a) < 0)
            return tn_rng_bad(node, p, 0, PyArray_DATA(a), "a length >= 0 (or an array)");
        shape[0] = (npy_intp)tn_rng_int64_at(a);
        return 0;
    }
    if (node->n_size > 0 && tn_rng_size(node, in, shape) < 0)
        return -1;
    for (int d = 0; d < node->nd; d++)
        n *= shape[d];
    return tn_rng_check_choice(node, p, node->nd, shape, n);
}

#endif /* TN_NO_NPYRANDOM */
