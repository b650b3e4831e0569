/* tenure's C runtime: what generated graph modules call.
 *
 * The runtime (the C files of src/, next to this directory) is the C that
 * does not depend on the graph: the elementwise and reduction drivers, the
 * schedule helpers of a graph module's run(), views, products, softmax and
 * the FastCall type.  It is compiled once per machine and
 * tenure version (tenure/linkers/c/runtime.py, through the disk cache) and
 * hands its functions to graph modules as a table of pointers in a capsule,
 * the way NumPy's C API does: a graph module includes this header, calls
 * tn_import_runtime() in its init, and then every tn_* name below goes
 * through `tn_rt`.
 *
 * A graph module's source carries TN_RUNTIME_DIGEST (the digest of every
 * runtime file, defined before this header is included); tn_import_runtime
 * refuses a runtime built from other sources, so a module can never call
 * into a table of another layout.
 *
 * The runtime itself includes this header with TN_RUNTIME_BUILD defined: it
 * then gets the declarations without the macros.
 */
#ifndef TENURE_RUNTIME_H
#define TENURE_RUNTIME_H

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Loops whose iterations are independent (in place included: element k of
 * the output is written only after every input's element k was read). */
#if defined(__clang__)
#define TN_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TN_IVDEP _Pragma("GCC ivdep")
#else
#define TN_IVDEP
#endif

/* A loop checks for Ctrl-C (on the caller's thread) every this many blocks. */
#define TN_CHECK_BLOCKS 64

/* ------------------------------------------------------------------------
 * Elementwise kernels
 *
 * A generated elementwise kernel is two loops over one block of `m`
 * elements, and a description; the runtime's tn_ew_run does the rest
 * (checks, layout, blocks, threads, row buffers, Ctrl-C).  Operand 0 is the
 * output, then the inputs read from memory.
 *
 * typed(at, rows, m, params): `at[0]` the output block, `rows[j]` input j's
 *   block, aligned and contiguous (a repeated input was copied out into a row).
 * strided(at, strides, m, params): `at[j]` operand j's first element,
 *   `strides[j]` its byte stride (any alignment: the loop reads with memcpy).
 * `params`: the values of the node's constants (the description's bytes),
 *   which the loops read with TN_PARAM before their loop: one compiled loop
 *   serves every value (tenure/linkers/c/elemwise.py, ScalarKernel).
 * Both return error bits (TN_ERR_* of the scalar code), 0 when all is well.
 */
typedef int (*tn_ew_typed_fn)(char *const *at, char *const *rows, npy_intp m,
                              const char *params);
typedef int (*tn_ew_strided_fn)(char *const *at, const npy_intp *strides, npy_intp m,
                                const char *params);

/* Define `type name` from the bytes at params + offset (memcpy: the bytes
 * need no alignment, and a local copy is a loop invariant the vectorizer
 * keeps in a register, as it would a literal). */
#define TN_PARAM(type, name, params, offset) \
    type name;                                \
    memcpy(&name, (params) + (offset), sizeof name)

typedef struct {
    const char *name;              /* for error messages */
    int nops;                      /* the output, then the inputs read from memory */
    const int *type_nums;          /* per operand */
    const char *const *dtype_names;
    const int *ndims;
    const char *const *labels;     /* "output 0", "input 1 (b1)", ... */
    int width;                     /* the widest itemsize: an element of a row buffer */
    npy_intp minsize;              /* threads for loops of at least this many elements; -1: never */
    int threads;                   /* how many (0: OpenMP's default) */
    const char *params;            /* the loops' parameters (see TN_PARAM) */
    tn_ew_typed_fn typed;
    tn_ew_strided_fn strided;
} tn_ew_kernel;

/* ------------------------------------------------------------------------
 * Products (src/blas.c.src)
 */

/* A strided matrix: element (i, j) of the r x c matrix at p + i * sr + j * sc (bytes). */
typedef struct {
    char *p;
    npy_intp r, c, sr, sc;
} tn_mat;

/* C = alpha * A @ B + beta * C, one kernel per dtype. */
typedef int (*tn_mm_kernel)(const tn_mat *, const tn_mat *, const tn_mat *, double, double);

/* The roles of the axes of one product node (-1 where absent): batch axis j is
 * axis ba[j] of a, bb[j] of b, bo[j] of the output; a's rows am (output om),
 * the summed axes ak, bk, b's columns bn (output on). */
typedef struct {
    int nb;
    const int *ba, *bb, *bo;
    int am, ak, bk, bn, om, on, ond;
} tn_mm_axes;

typedef struct {
    int nb;
    npy_intp len[NPY_MAXDIMS], sa[NPY_MAXDIMS], sb[NPY_MAXDIMS], sc[NPY_MAXDIMS];
    tn_mat a, b, c;
} tn_mm_desc;

/* The geometry of a 2-d correlation node (src/conv.c.src; tenure/linkers/c/conv.py):
 * window, stride, dilation, padding before and after, groups. */
typedef struct {
    int kh, kw, sh, sw, dh, dw, pt, pb, pl, pr, groups;
} tn_conv_geometry;

/* The geometry of a max-pooling node (src/pool.c.src; tenure/linkers/c/pool.py):
 * window, stride, padding before and after. */
typedef struct {
    int kh, kw, sh, sw, pt, pb, pl, pr;
} tn_pool_geometry;

/* A node's two loops, as a loop library hands them out (in a capsule of this
 * name: tenure/linkers/c/kernels.py); a graph module copies them into its
 * tn_ew_kernel descriptions when it is bound (bind_loops). */
typedef struct {
    tn_ew_typed_fn typed;
    tn_ew_strided_fn strided;
} tn_ew_loops;
#define TN_EW_LOOPS_CAPSULE "tenure.linkers.c.kernels.loops"

/* ------------------------------------------------------------------------
 * Reductions (src/reduce.c)
 *
 * A generated reduction is its loops and a description; the runtime's
 * tn_rd_run does the rest (checks, layout, identity, threads, Ctrl-C).
 * row(ptr, s, n, contiguous, status, params): the n values at ptr[1..] (byte
 *   strides s[1..]) combined into the output element at ptr[0];
 * kept(ptr, s, n, contiguous, status, params): out[k] combined with value k
 *   along a kept innermost axis of n elements;
 * divide(p, count): for a mean, the output element at p divided by count
 *   (NULL for the other reductions).
 * `params`: the values of a fused composite's constants, as for tn_ew_kernel.
 */
typedef void (*tn_rd_row_fn)(char *const *ptr, const npy_intp *s, npy_intp n, int contiguous,
                             int *status, const char *params);
typedef void (*tn_rd_divide_fn)(char *p, double count);

typedef struct {
    tn_rd_row_fn row, kept;
    tn_rd_divide_fn divide;
} tn_rd_loops;
#define TN_RD_LOOPS_CAPSULE "tenure.linkers.c.kernels.reduce_loops"

typedef struct {
    const char *name;              /* for error messages */
    int nops;                      /* the output, then the inputs */
    const int *type_nums;
    const char *const *dtype_names;
    const int *ndims;
    const char *const *labels;
    int full_nd;                   /* the inputs' broadcast ndim */
    const int *reduced;            /* per axis of it: 1 when reduced */
    int keepdims;
    const void *identity;          /* the output dtype's identity of the reduction */
    int itemsize;
    const char *no_identity;       /* max, min: the ufunc named in the empty error; else NULL */
    npy_intp minsize;              /* threads for at least this many visits; -1: never */
    int threads;                   /* how many (0: OpenMP's default) */
    const char *params;            /* the loops' parameters (see TN_PARAM) */
    tn_rd_loops loops;
} tn_rd_kernel;

/* ------------------------------------------------------------------------
 * The schedule interpreter (src/interpret.c)
 *
 * A graph module holds only the steps whose C depends on the node beyond
 * what a description says (views, set/inc_subtensor, outer products): each
 * is a tn_step_fn, and the module hands them out as a tn_step_table in a
 * capsule named TN_STEP_TABLE_CAPSULE, its attribute `steps`. */
typedef int (*tn_step_fn)(PyObject **S, const npy_intp *planned, PyObject **aside);

typedef struct {
    Py_ssize_t n;
    const tn_step_fn *fns;
} tn_step_table;
#define TN_STEP_TABLE_CAPSULE "tenure.linkers.c.module.steps"

/* ------------------------------------------------------------------------
 * Random draws (src/random.c): one node's description, which its step
 * (tenure/linkers/c/random.py) passes to tn_rng_step. */
enum {
    /* counter-indexed: element i depends on the state and i alone */
    TN_RNG_UNIFORM = 0, TN_RNG_NORMAL = 1, TN_RNG_BERNOULLI = 2, TN_RNG_INTEGERS = 3,
    /* sequential (src/random_sequential.c): NumPy's algorithms over the stream */
    TN_RNG_BINOMIAL = 4, TN_RNG_CHOICE = 5, TN_RNG_PERMUTATION = 6
};

typedef struct {
    const char *dist;              /* "uniform", ...: how messages name the draw */
    const char *label;             /* the node, for a size input's type error */
    const char *params[2];         /* the parameters' names */
    int kind;                      /* TN_RNG_* */
    int standard;                  /* the standard variate: no affine part, no checks */
    int inplace;                   /* the new state is written into the state's buffer */
    int n_size;                    /* size inputs after the state; -1: the params' broadcast */
    int n_params;
    int out_type, nd;              /* the draw's typenum and ndim */
    npy_intp minsize;              /* threads for draws of at least this many elements; -1: never */
    int threads;                   /* how many (0: OpenMP's default) */
    int replace;                   /* choice: with replacement */
} tn_rng_node;

/* The table a runtime hands out; TN_RUNTIME_ABI changes with its layout (and
 * with the loops' signatures above). */
#define TN_RUNTIME_ABI 5

typedef struct {
    int abi;
    const char *digest;
    int *(*interruptible_flag)(void);  /* this thread's: loops may stop for Ctrl-C
                                          (see src/elemwise.c) */

    /* elementwise (src/elemwise.c) */
    int (*ew_run)(const tn_ew_kernel *kernel, PyArrayObject **ops);
    PyObject *(*shape_tuple)(int nd, const npy_intp *dims);
    int (*omp_usable)(void);

    /* views (src/views.c) */
    PyArrayObject *(*vw_as_array)(PyObject *obj, int typenum, int nd, const char *what);
    int (*vw_read_int)(const char *ptr, int typenum, npy_intp *value);
    int (*vw_scalar)(PyObject *obj, const char *what, npy_intp *value);
    int (*vw_int_index)(npy_intp i, PyArrayObject *a, int axis, const char *what, char **data);
    int (*vw_slice)(PyArrayObject *a, int axis, int has_start, npy_intp start, int has_stop,
                    npy_intp stop, int has_step, npy_intp step, const char *what, char **data,
                    npy_intp *dim, npy_intp *stride);
    PyObject *(*vw_view)(PyArrayObject *a, int nd, npy_intp *dims, npy_intp *strides, char *data);
    const char *(*vw_shape_str)(char *buf, size_t n, int nd, const npy_intp *dims);

    /* set/inc_subtensor (src/subtensor.c) */
    int (*st_broadcast)(PyArrayObject *v, int nd, const npy_intp *dims, npy_intp *vstrides,
                        const char *fn, const char *what);
    PyArrayObject *(*st_value)(PyArrayObject *v, int typenum, int copy);

    /* softmax, log_softmax, logsumexp (src/nnet.c.src) */
    int (*nn_check)(const char *fname, PyArrayObject *x, PyArrayObject *out, int type_num,
                    const char *dtype_name, int nd, const int *reduced, int keepdims,
                    int out_nd);
    int (*nn_run)(int kind, PyArrayObject *x, PyArrayObject *out, int nd, const int *reduced);

    /* reductions (src/reduce.c) */
    int (*rd_broadcast)(const char *fname, int nops, PyArrayObject *const *ops,
                        const char *const *labels, int full_nd, npy_intp *shape);
    int (*rd_run)(const tn_rd_kernel *kernel, PyArrayObject **ops);

    /* a graph module's schedule (src/schedule.c) */
    int (*cl_overlap)(PyArrayObject *a, PyArrayObject *b);
    int (*cl_unsafe_overlap)(PyArrayObject *out, PyArrayObject *a);
    int (*cl_array)(PyObject *obj, PyArrayObject **a, const char *what);
    int (*cl_planned)(const npy_intp *planned, Py_ssize_t offset, int nd, npy_intp *shape);
    void (*cl_broadcast)(PyArrayObject **in, int nin, int nd, npy_intp *shape);
    PyArrayObject *(*cl_output)(PyObject *prev, PyArrayObject *destroyed, PyArrayObject **in,
                                int nin, PyObject **S, const Py_ssize_t *graph_in,
                                int ngraph_in, int typenum, int nd, const npy_intp *shape,
                                PyArrayObject *taken);
    int (*cl_py_step)(PyObject **S, PyObject *entry, const Py_ssize_t *ins, int nin,
                      const Py_ssize_t *outs, int nout, PyObject **pre);
    void (*cl_clear)(PyObject **S, Py_ssize_t slot);
    void (*cl_free)(PyObject **S, PyObject **aside, const npy_intp *planned, Py_ssize_t stash,
                    Py_ssize_t slot);
    PyArrayObject *(*cl_take)(PyObject **aside, Py_ssize_t donor, int typenum, int nd,
                              const npy_intp *shape);
    PyArrayObject *(*cl_take_planned)(PyObject **aside, const npy_intp *planned,
                                      Py_ssize_t offset, int typenum, int nd);
    /* products (src/blas.c.src) */
    int (*blas_init)(void);
    int (*bl_check)(const char *fname, const char *label, PyArrayObject *a, int type_num,
                    const char *dtype_name, int ndim);
    int (*bl_check_out)(const char *fname, PyArrayObject *out, int type_num,
                        const char *dtype_name, int ndim, const npy_intp *shape);
    int (*bl_private)(PyArrayObject *out, PyArrayObject **inputs, int n, PyArrayObject **in);
    int (*bl_broadcast2)(const char *fname, const char *label, PyArrayObject *z,
                         npy_intp *shape);
    int (*mm_shape)(const char *fname, const char *la, const char *lb, const tn_mm_axes *axes,
                    PyArrayObject *a, PyArrayObject *b, npy_intp *shape);
    int (*mm_run)(const char *fname, const char *la, const char *lb, const tn_mm_axes *axes,
                  PyArrayObject **inputs, PyArrayObject *out, int type_num);
    int (*gemm)(const char *fname, const tn_mm_axes *axes, PyArrayObject *z, PyArrayObject *x,
                PyArrayObject *y, PyArrayObject *out, double alpha, double beta, int type_num);
    /* 2-d correlations (src/conv.c.src) */
    int (*conv_shape)(const char *fname, int kind, const tn_conv_geometry *g,
                      PyArrayObject **inputs, int type_num, const char *dtype_name,
                      npy_intp *shape);
    int (*conv_run)(const char *fname, int kind, const tn_conv_geometry *g,
                    PyArrayObject **inputs, PyArrayObject *out, int type_num,
                    const char *dtype_name);
    /* max pooling (src/pool.c.src) */
    int (*pool_shape)(const char *fname, int kind, const tn_pool_geometry *g,
                      PyArrayObject **inputs, int type_num, const char *dtype_name, int ndim,
                      npy_intp *shape);
    int (*pool_run)(const char *fname, int kind, const tn_pool_geometry *g,
                    PyArrayObject **inputs, PyArrayObject *out, int type_num,
                    const char *dtype_name, int ndim);

    int (*cl_commit)(PyObject **S, PyObject *py_steps, Py_ssize_t n_steps,
                     const npy_intp *planned, const Py_ssize_t *written, Py_ssize_t n_written,
                     PyObject **backups);
    void (*cl_restore)(PyObject **S, const Py_ssize_t *written, Py_ssize_t n_written,
                       PyObject **backups);

    /* random draws (src/random.c) */
    int (*rng_step)(const tn_rng_node *node, PyObject **S, const Py_ssize_t *ins,
                    const Py_ssize_t *outs, const Py_ssize_t *graph_in, int ngraph_in,
                    const npy_intp *planned, PyObject **aside, Py_ssize_t draw_offset);
} tn_runtime_api;

/* The capsule's name, and the Python module that builds and hands it out. */
#define TN_RUNTIME_CAPSULE "tenure.linkers.c.runtime._C_API"
#define TN_RUNTIME_MODULE "tenure.linkers.c.runtime"

#ifndef TN_RUNTIME_BUILD

static const tn_runtime_api *tn_rt = NULL;

/* Fetch the runtime's table (building the runtime on first use); 0, or -1
 * with ImportError set.  Call once, in the module's init. */
static int tn_import_runtime(void)
{
    PyObject *module, *capsule;
    const tn_runtime_api *api;
    module = PyImport_ImportModule(TN_RUNTIME_MODULE);
    if (module == NULL)
        return -1;
    capsule = PyObject_CallMethod(module, "capsule", NULL);
    Py_DECREF(module);
    if (capsule == NULL)
        return -1;
    api = (const tn_runtime_api *)PyCapsule_GetPointer(capsule, TN_RUNTIME_CAPSULE);
    Py_DECREF(capsule);   /* the runtime module keeps the table alive for the process */
    if (api == NULL)
        return -1;
    if (api->abi != TN_RUNTIME_ABI || strcmp(api->digest, TN_RUNTIME_DIGEST) != 0) {
        PyErr_Format(PyExc_ImportError, "tenure: this module was generated for the C runtime "
                     "%s (ABI %d), but the runtime loaded is %s (ABI %d)", TN_RUNTIME_DIGEST,
                     TN_RUNTIME_ABI, api->digest, api->abi);
        return -1;
    }
    tn_rt = api;
    return 0;
}

#define tn_interruptible (*tn_rt->interruptible_flag())
#define tn_ew_run (tn_rt->ew_run)
#define tn_shape_tuple (tn_rt->shape_tuple)
#define tn_omp_usable (tn_rt->omp_usable)
#define tn_cl_overlap (tn_rt->cl_overlap)
#define tn_cl_unsafe_overlap (tn_rt->cl_unsafe_overlap)
#define tn_cl_array (tn_rt->cl_array)
#define tn_cl_planned (tn_rt->cl_planned)
#define tn_cl_broadcast (tn_rt->cl_broadcast)
#define tn_cl_output (tn_rt->cl_output)
#define tn_cl_py_step (tn_rt->cl_py_step)
#define tn_cl_clear (tn_rt->cl_clear)
#define tn_cl_free (tn_rt->cl_free)
#define tn_cl_take (tn_rt->cl_take)
#define tn_cl_take_planned (tn_rt->cl_take_planned)
#define tn_cl_commit (tn_rt->cl_commit)
#define tn_blas_init (tn_rt->blas_init)
#define tn_bl_check (tn_rt->bl_check)
#define tn_bl_check_out (tn_rt->bl_check_out)
#define tn_bl_private (tn_rt->bl_private)
#define tn_bl_broadcast2 (tn_rt->bl_broadcast2)
#define tn_mm_shape (tn_rt->mm_shape)
#define tn_mm_run (tn_rt->mm_run)
#define tn_gemm (tn_rt->gemm)
#define tn_conv_shape (tn_rt->conv_shape)
#define tn_conv_run (tn_rt->conv_run)
#define tn_pool_shape (tn_rt->pool_shape)
#define tn_pool_run (tn_rt->pool_run)
#define tn_cl_restore (tn_rt->cl_restore)

#define tn_vw_as_array (tn_rt->vw_as_array)
#define tn_vw_read_int (tn_rt->vw_read_int)
#define tn_vw_scalar (tn_rt->vw_scalar)
#define tn_vw_int_index (tn_rt->vw_int_index)
#define tn_vw_slice (tn_rt->vw_slice)
#define tn_vw_view (tn_rt->vw_view)
#define tn_vw_shape_str (tn_rt->vw_shape_str)

#define tn_st_broadcast (tn_rt->st_broadcast)
#define tn_st_value (tn_rt->st_value)

#define tn_nn_check (tn_rt->nn_check)
#define tn_nn_run (tn_rt->nn_run)

#define tn_rd_broadcast (tn_rt->rd_broadcast)
#define tn_rd_run (tn_rt->rd_run)
#define tn_rng_step (tn_rt->rng_step)

#endif /* !TN_RUNTIME_BUILD */
#endif /* TENURE_RUNTIME_H */
