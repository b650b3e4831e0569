/* The error bits generated scalar code sets in its `int tn_status`: a kernel
 * returns them, the runtime turns them into an exception (tn_ew_fail). */
#ifndef TENURE_SCALAR_ERRORS_H
#define TENURE_SCALAR_ERRORS_H

/* an integer to a negative integer power (NumPy's ValueError) */
#define TN_ERR_NEGATIVE_POWER 1

#endif /* TENURE_SCALAR_ERRORS_H */
