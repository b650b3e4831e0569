/* A draw node's step, which the C linker's step for the node calls
 * (tenure/linkers/c/random.py): the checks, the draw (random.c,
 * random_sequential.c), the state after it.  Part of the runtime (runtime.c
 * includes this file after those two). */

/* The draw's shape, once the size, the parameters' shapes and their domains
 * have passed every check, in RandomVariable.perform's order and words. */
static int tn_rng_checked_shape(const tn_rng_node *node, PyObject **in, const tn_rng_params *p,
                                npy_intp *shape)
{
#ifndef TN_NO_NPYRANDOM
    if (node->kind == TN_RNG_CHOICE || node->kind == TN_RNG_PERMUTATION)
        return tn_rng_sequential_shape(node, in, p, shape);
#endif
    if (node->n_size >= 0) {
        if (tn_rng_size(node, in, shape) < 0 || tn_rng_check_fit(node, p, shape) < 0)
            return -1;
    } else if (tn_rng_broadcast(node, p, node->n_params, node->nd, shape, 0) < 0) {
        return -1;
    }
    return tn_rng_check_domains(node, p);
}

/* 1 when every element of the int64 array `n` is 1 (none: 1 too). */
static int tn_rng_all_ones(PyArrayObject *n)
{
    const long long *v = (const long long *)PyArray_DATA(n);
    for (npy_intp k = 0; k < PyArray_SIZE(n); k++)
        if (v[k] != 1)
            return 0;
    return 1;
}

/* The draw into `draw` (checked): -1 only when memory runs out, before the
 * draw's buffer is written. */
static int tn_rng_draw(const tn_rng_node *node, tn_rng_key key, const tn_rng_params *p,
                       PyArrayObject *draw)
{
#ifndef TN_NO_NPYRANDOM
    if (node->kind == TN_RNG_BINOMIAL && tn_rng_all_ones(p->values[0])) {
        /* one trial everywhere: the bernoulli numbers of p, as the reference draws them */
        tn_rng_node one = *node;
        const tn_rng_params q = {{p->values[1], NULL}, {p->type[1], 0}, {p->integer[1], 0}};
        one.kind = TN_RNG_BERNOULLI;
        one.n_params = 1;
        tn_rng_fill(&one, key, &q, draw);
        return 0;
    }
    if (node->kind == TN_RNG_BINOMIAL) {
        tn_rng_fill_binomial(node, key, p, draw);
        return 0;
    }
    if (tn_rng_is_sequential(node))
        return tn_rng_draw_sequential(node, key, p, draw);
#endif
    tn_rng_fill(node, key, p, draw);
    return 0;
}

/* One draw node's step: the state S[ins[0]], the size lengths and the
 * parameters after it; the new state into S[outs[0]], the draw into
 * S[outs[1]].  The draw's buffer is the dead one the plan hands on (its
 * entry at `draw_offset` of the shape table, -1: none), else as
 * tn_cl_output hands it: last call's when it fits and overlaps nothing it
 * must not, else new. */
static int tn_rng_step(const tn_rng_node *node, PyObject **S, const Py_ssize_t *ins,
                       const Py_ssize_t *outs, const Py_ssize_t *graph_in, int ngraph_in,
                       const npy_intp *planned, PyObject **aside, Py_ssize_t draw_offset)
{
    PyObject *in[1 + NPY_MAXDIMS + 2];
    npy_intp shape[NPY_MAXDIMS];
    tn_rng_params p = {{NULL, NULL}, {0, 0}, {0, 0}};
    PyArrayObject *state, *draw = NULL, *next = NULL, *taken = NULL, *reads[4];
    const npy_intp three = 3;
    tn_rng_key key;
    int nreads = 1;
    const int first_param = 1 + (node->n_size > 0 ? node->n_size : 0);
#ifdef TN_NO_NPYRANDOM
    if (tn_rng_is_sequential(node)) {
        PyErr_Format(PyExc_RuntimeError, "%s: this runtime was built without NumPy's random "
                     "library (numpy/random/lib), and the C linker draws %s with the op's "
                     "perform: a C step for it is a bug", node->dist, node->dist);
        return -1;
    }
#endif
    for (int i = 0; i < first_param + node->n_params; i++)
        in[i] = S[ins[i]];
    state = tn_rng_state(node, in[0]);
    if (state == NULL || tn_rng_convert(node, in + first_param, &p) < 0
            || tn_rng_checked_shape(node, in, &p, shape) < 0)
        goto fail;
    /* Checked: from here on nothing fails but an allocation, before any write. */
    reads[0] = state;
    for (int i = 0; i < node->n_params; i++)
        if (PyArray_Check(in[first_param + i]))
            reads[nreads++] = (PyArrayObject *)in[first_param + i];
    if (aside != NULL && draw_offset >= 0 && planned[draw_offset] == 1
            && planned[draw_offset + 1] >= 0)
        taken = tn_cl_take(aside, planned[draw_offset + 1], node->out_type, node->nd, shape);
    draw = tn_cl_output(S[outs[1]], NULL, reads, nreads, S, graph_in, ngraph_in, node->out_type,
                        node->nd, shape, taken);
    if (draw == NULL)
        goto fail;
    if (node->inplace && PyArray_ISWRITEABLE(state)) {
        Py_INCREF(state);
        next = state;
    } else {   /* (a read-only state is never written: the new state gets a buffer) */
        reads[nreads++] = draw;
        next = tn_cl_output(S[outs[0]], NULL, reads, nreads, S, graph_in, ngraph_in, NPY_UINT64,
                            1, &three, NULL);
        if (next == NULL)
            goto fail;
    }
    key.key0 = tn_rng_state_word(state, 0);
    key.key1 = tn_rng_state_word(state, 1);
    key.n = tn_rng_state_word(state, 2);
    if (tn_rng_draw(node, key, &p, draw) < 0)
        goto fail;
    tn_rng_set_state_word(next, 0, key.key0);
    tn_rng_set_state_word(next, 1, key.key1);
    tn_rng_set_state_word(next, 2, key.n + 1);
    tn_rng_release(&p);
    Py_SETREF(S[outs[1]], (PyObject *)draw);
    Py_SETREF(S[outs[0]], (PyObject *)next);
    return 0;
fail:
    tn_rng_release(&p);
    Py_XDECREF(draw);
    Py_XDECREF(next);
    return -1;
}
