/* The iteration over several operands: their axes ordered and merged, one
 * implementation for the elementwise and the reduction drivers.  Part of the
 * runtime (runtime.c includes this file).
 *
 * `shape[0..k)` is the iteration's shape; operand j's byte strides are
 * `strides[j * NPY_MAXDIMS + d]` (0 where it is broadcast). */

/* Order the k axes by the sum of |stride| of operands [first, last), largest
 * first (insertion sort, stable): the innermost axis is then the one those
 * operands step through in the smallest steps, and a transposed or
 * Fortran-ordered operand is walked in memory order. */
static void tn_sort_axes(int k, int nops, npy_intp *shape, npy_intp *strides, int first,
                         int last)
{
    for (int d = 1; d < k; d++) {
        for (int e = d; e > 0; e--) {
            npy_intp w0 = 0, w1 = 0, t;
            for (int j = first; j < last; j++) {
                const npy_intp s0 = strides[j * NPY_MAXDIMS + e - 1];
                const npy_intp s1 = strides[j * NPY_MAXDIMS + e];
                w0 += s0 < 0 ? -s0 : s0;
                w1 += s1 < 0 ? -s1 : s1;
            }
            if (w0 >= w1)
                break;
            t = shape[e];
            shape[e] = shape[e - 1];
            shape[e - 1] = t;
            for (int j = 0; j < nops; j++) {
                npy_intp *s = strides + j * NPY_MAXDIMS;
                t = s[e];
                s[e] = s[e - 1];
                s[e - 1] = t;
            }
        }
    }
}

/* Merge axis d into the one before when every operand steps through both as
 * through one; the number of axes left (1 for a single element: k == 0). */
static int tn_merge_axes(int k, int nops, npy_intp *shape, npy_intp *strides)
{
    int m = 0;
    if (k == 0) {
        shape[0] = 1;
        for (int j = 0; j < nops; j++)
            strides[j * NPY_MAXDIMS] = 0;
        return 1;
    }
    for (int d = 1; d < k; d++) {
        int merge = 1;
        for (int j = 0; j < nops && merge; j++) {
            const npy_intp *s = strides + j * NPY_MAXDIMS;
            merge = s[m] == s[d] * shape[d];
        }
        if (merge) {
            shape[m] *= shape[d];
        } else {
            m++;
            shape[m] = shape[d];
        }
        for (int j = 0; j < nops; j++)
            strides[j * NPY_MAXDIMS + m] = strides[j * NPY_MAXDIMS + d];
    }
    return m + 1;
}
