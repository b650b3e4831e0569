/* The first lines of every generated CUDA kernel source (see
 * tenure/linkers/cuda/elemwise.py): the element types and limits that the
 * scalar helpers (tenure/linkers/c/include/scalar_ops.h.src) and the scalar
 * table's C expressions are written in, without NumPy's headers, and the
 * pieces of <math.h> that NVRTC does not provide as built-ins.
 *
 * Compiled two ways, from the same text:
 * - by NVRTC (through CuPy) for the device: no C library, no includes;
 * - as host C++ after host_kernels.h (TN_ON_HOST), so CI runs
 *   the kernels' logic on the CPU without a GPU. */
#ifndef TENURE_CUDA_H
#define TENURE_CUDA_H

typedef unsigned char npy_bool;
typedef signed char npy_int8;
typedef unsigned char npy_uint8;
typedef short npy_int16;
typedef unsigned short npy_uint16;
typedef int npy_int32;
typedef unsigned int npy_uint32;
typedef long long npy_int64;
typedef unsigned long long npy_uint64;
typedef float npy_float32;
typedef double npy_float64;
typedef long long npy_intp;

#define NPY_MIN_INT32 (-2147483647 - 1)
#define NPY_MIN_INT64 (-9223372036854775807LL - 1)

/* TN_AT(T, p, offset): the T at byte `offset` from operand pointer `p`, how
 * every generated kernel reads and writes its operands.  On the device a
 * plain access; host_kernels.h defines it first (on the host), as an access checked
 * against the operand's bytes (host_kernels.h). */
#ifndef TN_AT
#define TN_AT(T, p, offset) (*(T *)((p) + (offset)))
#endif

/* The scalar helpers are device functions (host ones on the host). */
#define TN_SCALAR_FN static __device__ __forceinline__

/* C99's quiet comparisons: plain comparisons give the same answers (false
 * when either side is NaN); they differ only in the floating-point flags,
 * which no kernel reads. */
#ifndef isless
#define isless(a, b) ((a) < (b))
#endif
#ifndef isgreater
#define isgreater(a, b) ((a) > (b))
#endif

/* Infinities, as <math.h> names them (c_literal writes HUGE_VAL / HUGE_VALF). */
#ifndef HUGE_VAL
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000LL)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __int_as_float(0x7f800000)
#endif

/* The larger of two doubles, NaN winning (either side): the running maximum
 * of the softmax kernels (tenure/linkers/cuda/nnet.py). */
TN_SCALAR_FN double tn_max2(double a, double b)
{
    return (b > a || b != b) ? b : a;
}

#endif /* TENURE_CUDA_H */
