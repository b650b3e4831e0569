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
 * written, so a draw that fails has changed no buffer.  A binomial,
 * permutation or choice draw into a C-ordered buffer writes each number
 * where it belongs as it comes: nothing of the draw's size is allocated.
 * A choice's way of choosing may take memory of the population's size (a
 * weighted one its cumulative distribution; one without replacement its
 * set, its shuffled range, or its indices before their shuffle), which is
 * allocated only beyond TN_CHOICE_STACK_WORDS words. */

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

/* Where a choice's samples go, as they come: sample k is the draw's
 * element k (C order), a's element at the index drawn, or the index itself
 * when a is a population size. */
typedef struct {
    char *data;
    npy_intp itemsize;
    int type;
    const char *elements;   /* a's data (the draw's dtype); NULL: a range */
} tn_choice_sink;

static void tn_choice_put(const tn_choice_sink *sink, npy_intp k, int64_t index)
{
    char *at = sink->data + k * sink->itemsize;
    if (sink->elements == NULL)
        tn_rng_store_int(at, sink->type, index);
    else
        memcpy(at, sink->elements + index * sink->itemsize, (size_t)sink->itemsize);
}

/* Whether the sink's elements are the int64 indices themselves. */
static int tn_choice_sink_is_indices(const tn_choice_sink *sink)
{
    return sink->elements == NULL && sink->type == NPY_INT64;
}

/* With replacement, uniform: Generator.integers(0, population), n of them,
 * through a small buffer (random_bounded_uint64_fill keeps no state
 * between calls, so pieces give the numbers of one call). */
static void tn_choice_uniform(tn_rng_stream *s, int64_t population, npy_intp n,
                              const tn_choice_sink *sink)
{
    uint64_t piece[256];
    if (tn_choice_sink_is_indices(sink)) {
        random_bounded_uint64_fill(&s->bitgen, 0, (uint64_t)(population - 1), n, 0,
                                   (uint64_t *)sink->data);
        return;
    }
    for (npy_intp done = 0; done < n;) {
        const npy_intp m = n - done < 256 ? n - done : 256;
        random_bounded_uint64_fill(&s->bitgen, 0, (uint64_t)(population - 1), m, 0, piece);
        for (npy_intp k = 0; k < m; k++)
            tn_choice_put(sink, done + k, (int64_t)piece[k]);
        done += m;
    }
}

/* With replacement and probabilities: a uniform, then its search, for each
 * sample (NumPy draws the n uniforms first; the search reads no stream). */
static void tn_choice_weighted(tn_rng_stream *s, const double *cdf, npy_intp population,
                               npy_intp n, const tn_choice_sink *sink)
{
    for (npy_intp k = 0; k < n; k++)
        tn_choice_put(sink, k, tn_rng_search_right(cdf, population,
                                                   random_standard_uniform(&s->bitgen)));
}

/* Without replacement and probabilities: rounds of as many uniforms as are
 * missing, searched in the distribution of the elements not yet chosen,
 * each round's new elements kept in the order they first came.  `left` (p,
 * the chosen set to 0 as they come: no zero element is ever found, so one
 * found again this round is one already 0) and `cdf` are the caller's. */
static void tn_choice_weighted_unique(tn_rng_stream *s, const double *p, npy_intp population,
                                      npy_intp n, double *left, double *cdf,
                                      const tn_choice_sink *sink)
{
    npy_intp found = 0;
    memcpy(left, p, (size_t)population * sizeof *left);
    while (found < n) {
        const npy_intp want = n - found;
        tn_rng_cdf(left, population, cdf);
        for (npy_intp k = 0; k < want; k++) {
            const npy_intp at = tn_rng_search_right(cdf, population,
                                                    random_standard_uniform(&s->bitgen));
            if (left[at] == 0.0)
                continue;              /* already drawn this round */
            left[at] = 0.0;
            tn_choice_put(sink, found++, at);
        }
    }
}

/* A set of int64 values >= 0 (open addressing), for Floyd's sampling, in
 * slots the caller gives (tn_int_set_slots of them). */
typedef struct {
    int64_t *slots;     /* -1: empty */
    uint64_t mask;
} tn_int_set;

static npy_intp tn_int_set_slots(npy_intp n)
{
    npy_intp size = 2;
    while (size < 2 * n)
        size *= 2;
    return size;
}

static void tn_int_set_start(tn_int_set *set, int64_t *slots, npy_intp n)
{
    const npy_intp size = tn_int_set_slots(n);
    set->slots = slots;
    set->mask = (uint64_t)size - 1;
    for (npy_intp k = 0; k < size; k++)
        set->slots[k] = -1;
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

/* Generator.choice without replacement and probabilities shuffles the tail
 * of arange(population) when many are taken from a large population, and
 * else samples with Floyd's algorithm and shuffles the sample. */
static int tn_choice_by_tail_shuffle(int64_t population, npy_intp n)
{
    return population > 10000 && n > population / 50;
}

static void tn_choice_tail_shuffle(tn_rng_stream *s, int64_t population, npy_intp n,
                                   int64_t *all, const tn_choice_sink *sink)
{
    for (int64_t k = 0; k < population; k++)
        all[k] = k;
    tn_stream_shuffle_int(s, population, population - n > 1 ? population - n : 1, all);
    for (npy_intp k = 0; k < n; k++)
        tn_choice_put(sink, k, all[population - n + k]);
}

/* Floyd's sampling into idx (n), then its shuffle. */
static void tn_choice_floyd(tn_rng_stream *s, int64_t population, npy_intp n, int64_t *slots,
                            int64_t *idx)
{
    tn_int_set taken;
    tn_int_set_start(&taken, slots, n);
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
    tn_stream_shuffle_int(s, n, 1, idx);
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

/* How many 8-byte words of temporary memory a choice of n samples takes
 * (none for a uniform one with replacement). */
static npy_intp tn_choice_workspace_words(const tn_rng_node *node, int64_t population,
                                          npy_intp n, const tn_choice_sink *sink)
{
    const int weighted = node->n_params == 2;
    if (n == 0)
        return 0;
    if (node->replace)
        return weighted ? (npy_intp)population : 0;                  /* the cdf */
    if (weighted)
        return 2 * (npy_intp)population;                             /* left, cdf */
    if (tn_choice_by_tail_shuffle(population, n))
        return (npy_intp)population;                                 /* arange */
    return tn_int_set_slots(n) + (tn_choice_sink_is_indices(sink) ? 0 : n);  /* set, idx */
}

/* The n samples into the sink, in the workspace (tn_choice_workspace_words'). */
static void tn_choice_run(const tn_rng_node *node, tn_rng_stream *s, const tn_rng_params *p,
                          int64_t population, npy_intp n, void *work,
                          const tn_choice_sink *sink)
{
    const double *weights = node->n_params == 2 ? (const double *)PyArray_DATA(p->values[1])
                                                : NULL;
    if (n == 0)
        return;
    if (node->replace && weights == NULL) {
        tn_choice_uniform(s, population, n, sink);
    } else if (node->replace) {
        tn_rng_cdf(weights, population, (double *)work);
        tn_choice_weighted(s, (const double *)work, population, n, sink);
    } else if (weights != NULL) {
        tn_choice_weighted_unique(s, weights, population, n, (double *)work,
                                  (double *)work + population, sink);
    } else if (tn_choice_by_tail_shuffle(population, n)) {
        tn_choice_tail_shuffle(s, population, n, (int64_t *)work, sink);
    } else {
        int64_t *slots = (int64_t *)work;
        int64_t *idx = tn_choice_sink_is_indices(sink) ? (int64_t *)sink->data
                                                       : slots + tn_int_set_slots(n);
        tn_choice_floyd(s, population, n, slots, idx);
        if (idx != (int64_t *)sink->data)
            for (npy_intp k = 0; k < n; k++)
                tn_choice_put(sink, k, idx[k]);
    }
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

/* A workspace this small lives on the stack: a choice among a few
 * thousand (a class, a token) allocates nothing per call.  The weighted
 * ways work in doubles, the others in int64s. */
#define TN_CHOICE_STACK_WORDS 2048

/* choice: each sample written into the draw as it comes (the index, a a
 * population size, or a's element at it), with the temporary memory its
 * way of choosing takes (tn_choice_workspace_words: a cdf, a set, ...)
 * allocated first. */
static int tn_rng_draw_choice(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                              PyArrayObject *draw)
{
    PyArrayObject *a = p->values[0], *target = tn_rng_c_ordered(draw);
    const npy_intp n = PyArray_SIZE(draw);
    const int64_t population = PyArray_NDIM(a) == 0 ? tn_rng_int64_at(a) : PyArray_DIM(a, 0);
    double stack_doubles[TN_CHOICE_STACK_WORDS];
    int64_t stack_ints[TN_CHOICE_STACK_WORDS];
    tn_choice_sink sink;
    tn_rng_stream s;
    npy_intp words;
    void *work = NULL;
    if (target == NULL)
        return -1;
    sink.data = PyArray_BYTES(target);
    sink.itemsize = PyArray_ITEMSIZE(target);
    sink.type = PyArray_TYPE(target);
    /* a is the draw's dtype already (tn_rng_param_type) */
    sink.elements = PyArray_NDIM(a) == 0 ? NULL : PyArray_BYTES(a);
    words = tn_choice_workspace_words(node, population, n, &sink);
    if (words <= TN_CHOICE_STACK_WORDS) {
        work = node->n_params == 2 ? (void *)stack_doubles : (void *)stack_ints;
    } else if ((work = PyMem_Malloc((size_t)words * 8)) == NULL) {
        Py_DECREF(target);
        PyErr_NoMemory();
        return -1;
    }
    tn_stream_start(&s, key);
    tn_choice_run(node, &s, p, population, n, work, &sink);
    if (work != (void *)stack_doubles && work != (void *)stack_ints)
        PyMem_Free(work);
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
