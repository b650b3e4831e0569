/* Random draws in the C runtime (tenure/linkers/c/random.py generates the
 * step that calls tn_rng_step, in random_step.c): the parameters, the
 * checks, and the counter-indexed draws -- uniform, normal, bernoulli and
 * integers, element by element from include/tenure_philox.h.  The
 * sequential draws (binomial, choice, permutation) are in
 * random_sequential.c.  Part of the runtime (runtime.c includes this file,
 * then those two).
 *
 * A step checks, in RandomVariable.perform's order and words, the generator
 * state, the size (or the parameters' broadcast), then the parameters'
 * domains -- all before anything is written, so a draw that raises has
 * changed no buffer, the state included -- then fills the draw and writes
 * the state after it: into the state's own buffer when the node is in place,
 * else into a buffer of its own. */
#include "tenure_philox.h"

/* The parameters of one call: C-contiguous arrays of the types
 * tn_rng_param_type gives, and whether a message shows each as an int
 * (NumPy's item() of an integer parameter). */
typedef struct {
    PyArrayObject *values[2];
    int type[2];
    int integer[2];
} tn_rng_params;

/* A binomial draw's stream (random_sequential.c). */
typedef struct tn_rng_stream tn_rng_stream;
#ifndef TN_NO_NPYRANDOM
static long long tn_rng_binomial(tn_rng_stream *s, long long n, double p);
#endif

static int tn_rng_is_sequential(const tn_rng_node *node)
{
    return node->kind >= TN_RNG_BINOMIAL;
}

static void tn_rng_release(tn_rng_params *p)
{
    Py_CLEAR(p->values[0]);
    Py_CLEAR(p->values[1]);
}

/* The state, checked as check_state does (borrowed), or NULL. */
static PyArrayObject *tn_rng_state(const tn_rng_node *node, PyObject *obj)
{
    PyArrayObject *a;
    PyObject *shape;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_ValueError, "%s: the generator state must be a uint64 array of shape "
                     "(3,), got %s", node->dist, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) == NPY_UINT64 && PyArray_ISNOTSWAPPED(a) && PyArray_NDIM(a) == 1
            && PyArray_DIM(a, 0) == 3)
        return a;
    shape = tn_shape_tuple(PyArray_NDIM(a), PyArray_DIMS(a));
    if (shape != NULL)
        PyErr_Format(PyExc_ValueError, "%s: the generator state must be a uint64 array of "
                     "shape (3,), got shape %R, dtype %S", node->dist, shape,
                     (PyObject *)PyArray_DESCR(a));
    Py_XDECREF(shape);
    return NULL;
}

static tn_u64 tn_rng_state_word(PyArrayObject *state, int i)
{
    tn_u64 w;
    memcpy(&w, PyArray_BYTES(state) + i * PyArray_STRIDE(state, 0), sizeof w);
    return w;
}

static void tn_rng_set_state_word(PyArrayObject *state, int i, tn_u64 w)
{
    memcpy(PyArray_BYTES(state) + i * PyArray_STRIDE(state, 0), &w, sizeof w);
}

/* What parameter i is read as: int64 for integers' bounds, binomial's n, and
 * a length or population (choice's a, permutation's x, 0-d); the draw's own
 * dtype for the array choice or permutation takes from; else double. */
static int tn_rng_param_type(const tn_rng_node *node, int i, PyObject *v)
{
    const int scalar = PyArray_Check(v) ? PyArray_NDIM((PyArrayObject *)v) == 0 : 1;
    switch (node->kind) {
    case TN_RNG_INTEGERS:
        return NPY_INT64;
    case TN_RNG_BINOMIAL:
        return i == 0 ? NPY_INT64 : NPY_DOUBLE;
    case TN_RNG_CHOICE:
    case TN_RNG_PERMUTATION:
        return i == 1 ? NPY_DOUBLE : scalar ? NPY_INT64 : node->out_type;
    default:
        return NPY_DOUBLE;
    }
}

/* The parameters as arrays the loops read (see tn_rng_params). */
static int tn_rng_convert(const tn_rng_node *node, PyObject **raw, tn_rng_params *p)
{
    for (int i = 0; i < node->n_params; i++) {
        PyObject *v = raw[i];
        p->type[i] = tn_rng_param_type(node, i, v);
        p->integer[i] = p->type[i] == NPY_INT64
                        || (PyArray_Check(v) ? PyArray_ISINTEGER((PyArrayObject *)v)
                            || PyArray_ISBOOL((PyArrayObject *)v)
                            : PyLong_Check(v) || PyArray_IsScalar(v, Integer)
                            || PyArray_IsScalar(v, Bool));
        p->values[i] = (PyArrayObject *)PyArray_FROM_OTF(
            v, p->type[i], NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        if (p->values[i] == NULL)
            return -1;
    }
    return 0;
}

/* The draw's shape from the size inputs, each a length >= 0. */
static int tn_rng_size(const tn_rng_node *node, PyObject **in, npy_intp *shape)
{
    for (int d = 0; d < node->n_size; d++)
        if (tn_vw_scalar(in[1 + d], node->label, &shape[d]) < 0)
            return -1;
    for (int d = 0; d < node->n_size; d++) {
        if (shape[d] < 0) {
            PyObject *size = tn_shape_tuple(node->n_size, shape);
            if (size != NULL)
                PyErr_Format(PyExc_ValueError, "%s: size must hold lengths >= 0, got size[%d] = "
                             "%zd (size %R)", node->dist, d, (Py_ssize_t)shape[d], size);
            Py_XDECREF(size);
            return -1;
        }
    }
    return 0;
}

/* 1 when `a` broadcasts to the nd lengths `shape` (right-aligned), else 0. */
static int tn_rng_fits(PyArrayObject *a, int nd, const npy_intp *shape)
{
    const int and = PyArray_NDIM(a);
    if (and > nd)
        return 0;
    for (int d = 0; d < and; d++) {
        const npy_intp len = PyArray_DIM(a, d);
        if (len != 1 && len != shape[nd - and + d])
            return 0;
    }
    return 1;
}

/* Each parameter broadcasts to the size, or the error naming it. */
static int tn_rng_check_fit(const tn_rng_node *node, const tn_rng_params *p,
                            const npy_intp *shape)
{
    for (int i = 0; i < node->n_params; i++) {
        PyArrayObject *a = p->values[i];
        PyObject *have, *size;
        if (tn_rng_fits(a, node->nd, shape))
            continue;
        have = tn_shape_tuple(PyArray_NDIM(a), PyArray_DIMS(a));
        size = tn_shape_tuple(node->nd, shape);
        if (have != NULL && size != NULL)
            PyErr_Format(PyExc_ValueError, "%s: parameter '%s' of shape %R does not broadcast "
                         "to size %R", node->dist, node->params[i], have, size);
        Py_XDECREF(have);
        Py_XDECREF(size);
        return -1;
    }
    return 0;
}

/* The broadcast shape of the first `n` parameters in `nd` axes, or -1 with
 * the error `perform` raises when they do not broadcast. */
static int tn_rng_broadcast(const tn_rng_node *node, const tn_rng_params *p, int n, int nd,
                            npy_intp *shape, int quiet)
{
    for (int d = 0; d < nd; d++)
        shape[d] = 1;
    for (int i = 0; i < n; i++) {
        PyArrayObject *a = p->values[i];
        const int and = PyArray_NDIM(a);
        int ok = and <= nd;
        for (int d = 0; ok && d < and; d++) {
            const npy_intp len = PyArray_DIM(a, d);
            npy_intp *have = &shape[nd - and + d];
            if (len != 1 && *have != 1 && len != *have)
                ok = 0;
            else if (len != 1)
                *have = len;
        }
        if (!ok) {
            if (!quiet) {
                PyObject *a0 = tn_shape_tuple(PyArray_NDIM(p->values[0]),
                                            PyArray_DIMS(p->values[0]));
                PyObject *a1 = tn_shape_tuple(PyArray_NDIM(p->values[1]),
                                            PyArray_DIMS(p->values[1]));
                if (a0 != NULL && a1 != NULL)
                    PyErr_Format(PyExc_ValueError, "%s: the parameters' shapes do not broadcast "
                                 "together: %s %R, %s %R", node->dist, node->params[0], a0,
                                 node->params[1], a1);
                Py_XDECREF(a0);
                Py_XDECREF(a1);
            }
            return -1;
        }
    }
    return 0;
}

/* Byte strides of parameter `a` (C-contiguous) along the nd axes of
 * `shape` it broadcasts to: 0 where it has length 1 or no axis. */
static void tn_rng_strides(PyArrayObject *a, int nd, npy_intp *strides)
{
    const int and = PyArray_NDIM(a);
    for (int d = 0; d < nd; d++) {
        const int ad = d - (nd - and);
        strides[d] = (ad < 0 || PyArray_DIM(a, ad) == 1) ? 0 : PyArray_STRIDE(a, ad);
    }
}

/* ValueError "<dist>: parameter '<name>' must be <expected>, got <value>". */
static int tn_rng_bad(const tn_rng_node *node, const tn_rng_params *p, int i, const char *at,
                      const char *expected)
{
    PyObject *shown;
    if (p->type[i] == NPY_INT64) {
        long long v;
        memcpy(&v, at, sizeof v);
        shown = PyLong_FromLongLong(v);
    } else {
        double v;
        memcpy(&v, at, sizeof v);
        shown = p->integer[i] ? PyLong_FromDouble(v) : PyFloat_FromDouble(v);
    }
    if (shown != NULL)
        PyErr_Format(PyExc_ValueError, "%s: parameter '%s' must be %s, got %R", node->dist,
                     node->params[i], expected, shown);
    Py_XDECREF(shown);
    return -1;
}

enum { TN_RNG_FINITE, TN_RNG_SCALE, TN_RNG_PROBABILITY };

/* Every element of parameter i passes `test`, or the error naming the first
 * that does not. */
static int tn_rng_check_each(const tn_rng_node *node, const tn_rng_params *p, int i, int test,
                             const char *expected)
{
    PyArrayObject *a = p->values[i];
    const double *v = (const double *)PyArray_DATA(a);
    for (npy_intp k = 0; k < PyArray_SIZE(a); k++) {
        const double x = v[k];
        const int ok = test == TN_RNG_FINITE ? isfinite(x)
                       : test == TN_RNG_SCALE ? x >= 0 && isfinite(x) : x >= 0 && x <= 1;
        if (!ok)
            return tn_rng_bad(node, p, i, (const char *)&v[k], expected);
    }
    return 0;
}

/* Every element of the int64 parameter i is >= 0, or the error naming the
 * first that is not. */
static int tn_rng_check_count(const tn_rng_node *node, const tn_rng_params *p, int i)
{
    const long long *v = (const long long *)PyArray_DATA(p->values[i]);
    for (npy_intp k = 0; k < PyArray_SIZE(p->values[i]); k++)
        if (v[k] < 0)
            return tn_rng_bad(node, p, i, (const char *)&v[k], ">= 0");
    return 0;
}

/* high >= low (high > low when `strict`) over the two parameters'
 * broadcast, or the error naming high's first element that is not. */
static int tn_rng_check_order(const tn_rng_node *node, const tn_rng_params *p, int strict,
                              const char *expected)
{
    npy_intp shape[NPY_MAXDIMS], s0[NPY_MAXDIMS], s1[NPY_MAXDIMS], idx[NPY_MAXDIMS] = {0};
    const int nd = PyArray_NDIM(p->values[0]) > PyArray_NDIM(p->values[1])
                   ? PyArray_NDIM(p->values[0]) : PyArray_NDIM(p->values[1]);
    npy_intp n = 1;
    if (tn_rng_broadcast(node, p, 2, nd, shape, 0) < 0)
        return -1;
    tn_rng_strides(p->values[0], nd, s0);
    tn_rng_strides(p->values[1], nd, s1);
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    for (npy_intp k = 0; k < n; k++) {
        const char *lo = PyArray_BYTES(p->values[0]), *hi = PyArray_BYTES(p->values[1]);
        int ok;
        for (int d = 0; d < nd; d++) {
            lo += idx[d] * s0[d];
            hi += idx[d] * s1[d];
        }
        if (p->type[0] == NPY_INT64) {
            long long l, h;
            memcpy(&l, lo, sizeof l);
            memcpy(&h, hi, sizeof h);
            ok = strict ? h > l : h >= l;
        } else {
            double l, h;
            memcpy(&l, lo, sizeof l);
            memcpy(&h, hi, sizeof h);
            ok = strict ? h > l : h >= l;
        }
        if (!ok)
            return tn_rng_bad(node, p, 1, hi, expected);
        for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--)
            idx[d] = 0;
    }
    return 0;
}

/* The parameters' domains, in _check_<dist>'s order and words. */
static int tn_rng_check_domains(const tn_rng_node *node, const tn_rng_params *p)
{
    if (node->standard)
        return 0;
    switch (node->kind) {
    case TN_RNG_UNIFORM:
        if (tn_rng_check_each(node, p, 0, TN_RNG_FINITE, "finite") < 0
                || tn_rng_check_each(node, p, 1, TN_RNG_FINITE, "finite") < 0)
            return -1;
        return tn_rng_check_order(node, p, 0, ">= low");
    case TN_RNG_NORMAL:
        if (tn_rng_check_each(node, p, 0, TN_RNG_FINITE, "finite") < 0)
            return -1;
        return tn_rng_check_each(node, p, 1, TN_RNG_SCALE, "finite and >= 0");
    case TN_RNG_BERNOULLI:
        return tn_rng_check_each(node, p, 0, TN_RNG_PROBABILITY, "a probability in [0, 1]");
    case TN_RNG_BINOMIAL:
        if (tn_rng_check_count(node, p, 0) < 0)
            return -1;
        return tn_rng_check_each(node, p, 1, TN_RNG_PROBABILITY, "a probability in [0, 1]");
    case TN_RNG_INTEGERS:
        return tn_rng_check_order(node, p, 1, "greater than low (high is excluded)");
    default:   /* choice: tn_rng_check_choice, with the size; permutation: none */
        return 0;
    }
}

/* Store the integer `v` as the output's dtype (wrapping, as NumPy's unsafe cast). */
static void tn_rng_store_int(char *at, int type, long long v)
{
    switch (type) {
    case NPY_BOOL: *(npy_bool *)at = v != 0; break;
    case NPY_INT8: *(npy_int8 *)at = (npy_int8)v; break;
    case NPY_UINT8: *(npy_uint8 *)at = (npy_uint8)v; break;
    case NPY_INT16: *(npy_int16 *)at = (npy_int16)v; break;
    case NPY_UINT16: *(npy_uint16 *)at = (npy_uint16)v; break;
    case NPY_INT32: *(npy_int32 *)at = (npy_int32)v; break;
    case NPY_UINT32: *(npy_uint32 *)at = (npy_uint32)v; break;
    case NPY_UINT64: *(npy_uint64 *)at = (npy_uint64)v; break;
    case NPY_FLOAT32: *(npy_float32 *)at = (npy_float32)v; break;
    case NPY_FLOAT64: *(npy_float64 *)at = (npy_float64)v; break;
    default: *(npy_int64 *)at = (npy_int64)v; break;
    }
}

static double tn_rng_double(const char *at)
{
    double v;
    memcpy(&v, at, sizeof v);
    return v;
}

/* Element i of the draw, written at `at`; `a`, `b`: the parameters'
 * elements; `stream`: a binomial draw's (random_sequential.c). */
static void tn_rng_element(const tn_rng_node *node, tn_rng_key key, tn_rng_cursor *cursor,
                           tn_u64 i, const char *a, const char *b, char *at,
                           tn_rng_stream *stream)
{
    const int f32 = node->out_type == NPY_FLOAT32, standard = node->standard;
    switch (node->kind) {
    case TN_RNG_UNIFORM:
        if (f32)
            *(float *)at = tn_rng_uniform_f32(key, cursor, i, standard, tn_rng_double(a),
                                              tn_rng_double(b));
        else
            *(double *)at = tn_rng_uniform_f64(key, cursor, i, standard, tn_rng_double(a),
                                               tn_rng_double(b));
        return;
    case TN_RNG_NORMAL:
        if (f32)
            *(float *)at = tn_rng_normal_f32(key, cursor, i, standard, tn_rng_double(a),
                                             tn_rng_double(b));
        else
            *(double *)at = tn_rng_normal_f64(key, cursor, i, standard, tn_rng_double(a),
                                              tn_rng_double(b));
        return;
    case TN_RNG_BERNOULLI:
        tn_rng_store_int(at, node->out_type,
                         tn_rng_bernoulli(key, cursor, i, tn_rng_double(a)));
        return;
#ifndef TN_NO_NPYRANDOM
    case TN_RNG_BINOMIAL: {
        long long n;
        memcpy(&n, a, sizeof n);
        tn_rng_store_int(at, node->out_type, tn_rng_binomial(stream, n, tn_rng_double(b)));
        return;
    }
#endif
    default: {
        long long lo, hi;
        memcpy(&lo, a, sizeof lo);
        memcpy(&hi, b, sizeof hi);
        tn_rng_store_int(at, node->out_type,
                         tn_rng_integer(key, cursor, i, lo, (tn_u64)hi - (tn_u64)lo));
    }
    }
}

/* Elements start .. stop-1 of the draw into `out` (any strides, parameters
 * of any shape), in C order; `stream`: a binomial draw's.  Not vectorized: GCC would take log, sin and cos from
 * libmvec (see include/vector_math.h), a few ulps off the libm the
 * host-compiled CUDA kernels use. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void tn_rng_fill_range(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                              PyArrayObject *out, npy_intp start, npy_intp stop,
                              tn_rng_stream *stream)
{
    const int nd = PyArray_NDIM(out);
    npy_intp ps[2][NPY_MAXDIMS] = {{0}}, idx[NPY_MAXDIMS] = {0};
    const char *pa[2] = {NULL, NULL};
    char *o = PyArray_BYTES(out);
    tn_rng_cursor cursor;
    tn_rng_start(&cursor);
    for (int j = 0; j < node->n_params; j++) {
        tn_rng_strides(p->values[j], nd, ps[j]);
        pa[j] = PyArray_BYTES(p->values[j]);
    }
    /* the odometer at element `start` (< n: no axis is empty) */
    for (npy_intp d = nd - 1, rest = start; d >= 0; d--) {
        idx[d] = rest % PyArray_DIM(out, d);
        rest /= PyArray_DIM(out, d);
        o += idx[d] * PyArray_STRIDE(out, d);
        pa[0] += idx[d] * ps[0][d];
        pa[1] += idx[d] * ps[1][d];
    }
    for (npy_intp i = start; i < stop; i++) {
        tn_rng_element(node, key, &cursor, (tn_u64)i, pa[0], pa[1], o, stream);
        /* the odometer: the next element's address in out and each parameter */
        for (int d = nd - 1; d >= 0; d--) {
            o += PyArray_STRIDE(out, d);
            pa[0] += ps[0][d];
            pa[1] += ps[1][d];
            if (++idx[d] < PyArray_DIM(out, d))
                break;
            o -= PyArray_STRIDE(out, d) * idx[d];
            pa[0] -= ps[0][d] * idx[d];
            pa[1] -= ps[1][d] * idx[d];
            idx[d] = 0;
        }
    }
}

/* The flat loops: a C-contiguous draw whose parameters are single values
 * (the common case), element after element with nothing but the element's
 * arithmetic in the loop.  Same numbers as tn_rng_element. */
#define TN_RNG_LOOP(T, expr)                                   \
    do {                                                       \
        T *o_ = (T *)out;                                      \
        for (npy_intp i = start; i < stop; i++)                \
            o_[i] = (T)(expr);                                 \
    } while (0)

/* `expr` (an integer) stored as every integer type, and bool. */
#define TN_RNG_INT_LOOPS(expr)                                               \
    switch (node->out_type) {                                                \
    case NPY_BOOL: TN_RNG_LOOP(npy_bool, (expr) != 0); break;                \
    case NPY_INT8: TN_RNG_LOOP(npy_int8, expr); break;                       \
    case NPY_UINT8: TN_RNG_LOOP(npy_uint8, expr); break;                     \
    case NPY_INT16: TN_RNG_LOOP(npy_int16, expr); break;                     \
    case NPY_UINT16: TN_RNG_LOOP(npy_uint16, expr); break;                   \
    case NPY_INT32: TN_RNG_LOOP(npy_int32, expr); break;                     \
    case NPY_UINT32: TN_RNG_LOOP(npy_uint32, expr); break;                   \
    case NPY_UINT64: TN_RNG_LOOP(npy_uint64, expr); break;                   \
    case NPY_FLOAT32: TN_RNG_LOOP(npy_float32, expr); break;                 \
    case NPY_FLOAT64: TN_RNG_LOOP(npy_float64, expr); break;                 \
    default: TN_RNG_LOOP(npy_int64, expr); break;                            \
    }

/* Normal draws by pairs (one logarithm per pair); `start` is even.  Not
 * vectorized: GCC would take log, sin and cos from libmvec. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void tn_rng_flat_normal(const tn_rng_node *node, tn_rng_key key, double loc, double scale,
                               char *out, npy_intp start, npy_intp stop)
{
    tn_rng_cursor cursor;
    const int standard = node->standard;
    const float locf = (float)loc, scalef = (float)scale;
    tn_rng_start(&cursor);
    for (npy_intp i = start; i < stop; i += 2) {
        double r, theta, z[2];
        tn_rng_polar(key, &cursor, (tn_u64)i / 2, &r, &theta);
        z[0] = r * cos(theta);
        z[1] = r * sin(theta);
        for (int j = 0; j < 2 && i + j < stop; j++) {
            if (node->out_type == NPY_FLOAT32) {
                const float zf = (float)z[j];
                ((float *)out)[i + j] = standard ? zf : zf * scalef + locf;
            } else {
                ((double *)out)[i + j] = standard ? z[j] : z[j] * scale + loc;
            }
        }
    }
}

static void tn_rng_fill_flat(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                             char *out, npy_intp start, npy_intp stop)
{
    tn_rng_cursor cursor;
    const int standard = node->standard;
    const char *pa = PyArray_BYTES(p->values[0]);
    const char *pb = node->n_params > 1 ? PyArray_BYTES(p->values[1]) : pa;
    tn_rng_start(&cursor);
    switch (node->kind) {
    case TN_RNG_UNIFORM: {
        const double lo = tn_rng_double(pa), hi = tn_rng_double(pb);
        if (node->out_type == NPY_FLOAT32)
            TN_RNG_LOOP(float, tn_rng_uniform_f32(key, &cursor, (tn_u64)i, standard, lo, hi));
        else
            TN_RNG_LOOP(double, tn_rng_uniform_f64(key, &cursor, (tn_u64)i, standard, lo, hi));
        return;
    }
    case TN_RNG_NORMAL:
        tn_rng_flat_normal(node, key, tn_rng_double(pa), tn_rng_double(pb), out, start, stop);
        return;
    case TN_RNG_BERNOULLI: {
        const double prob = tn_rng_double(pa);
        TN_RNG_INT_LOOPS(tn_rng_bernoulli(key, &cursor, (tn_u64)i, prob));
        return;
    }
    default: {
        long long lo, hi;
        memcpy(&lo, pa, sizeof lo);
        memcpy(&hi, pb, sizeof hi);
        TN_RNG_INT_LOOPS(tn_rng_integer(key, &cursor, (tn_u64)i, lo, (tn_u64)hi - (tn_u64)lo));
    }
    }
}

/* Elements start .. stop-1: the flat loops where they apply, else
 * element by element. */
static void tn_rng_fill_part(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                             PyArrayObject *out, int flat, npy_intp start, npy_intp stop)
{
    if (flat)
        tn_rng_fill_flat(node, key, p, PyArray_BYTES(out), start, stop);
    else
        tn_rng_fill_range(node, key, p, out, start, stop, NULL);
}

/* Elements a thread takes at a time (a multiple of 8: whole Philox blocks) */
#define TN_RNG_CHUNK 16384

/* The whole draw: on several threads for a draw of node->minsize elements or
 * more (the elementwise loops' setting); the same numbers however many run,
 * element i being a function of i alone. */
static void tn_rng_fill(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                        PyArrayObject *out)
{
    const npy_intp n = PyArray_SIZE(out), chunks = (n + TN_RNG_CHUNK - 1) / TN_RNG_CHUNK;
    int flat = PyArray_IS_C_CONTIGUOUS(out);
    for (int j = 0; j < node->n_params; j++)
        flat = flat && PyArray_SIZE(p->values[j]) == 1;
#ifdef _OPENMP
    if (node->minsize >= 0 && n >= node->minsize && chunks > 1 && tn_omp_usable()) {
        const int nthreads = node->threads > 0 ? node->threads : omp_get_max_threads();
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (npy_intp c = 0; c < chunks; c++)
            tn_rng_fill_part(node, key, p, out, flat, c * TN_RNG_CHUNK,
                             c == chunks - 1 ? n : (c + 1) * TN_RNG_CHUNK);
        return;
    }
#endif
    (void)chunks;
    tn_rng_fill_part(node, key, p, out, flat, 0, n);
}
