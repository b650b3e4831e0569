/* Host emulation of the CUDA that tenure's generated kernels use, so that CI
 * (which has no GPU) runs every generated elementwise kernel on the CPU and
 * compares it with NumPy: the kernel source is compiled as host C++ with
 * TN_HOST_EMULATION defined and this header first.
 *
 * - __global__ / __device__ / __forceinline__ vanish: kernels are functions.
 * - blockIdx, threadIdx, blockDim, gridDim are globals of the launch in
 *   progress; TN_EMULATE runs a kernel once per thread of the launch grid,
 *   one thread after another.  That is faithful for kernels whose threads
 *   never wait for each other (no __syncthreads, no shared memory): the
 *   elementwise kernels, whose threads each own the elements of a grid-stride
 *   loop.  Kernels that synchronise (reductions) are device-only.
 * - atomicOr is a plain |= (one thread runs at a time).
 * - math functions are <math.h>'s, with the CUDA intrinsics the prelude
 *   (tenure_cuda.h) uses for infinities.
 *
 * One launch at a time per process thread: the launch globals are
 * thread_local. */
#ifndef TENURE_HOST_EMULATION_H
#define TENURE_HOST_EMULATION_H

#include <math.h>
#include <string.h>

#define __global__
#define __device__
#define __forceinline__ inline

struct tn_dim3 {
    unsigned int x, y, z;
};
static thread_local tn_dim3 blockIdx, threadIdx, blockDim, gridDim;

static inline int atomicOr(int *address, int value)
{
    int old = *address;
    *address = old | value;
    return old;
}

static inline float __int_as_float(int bits)
{
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static inline double __longlong_as_double(long long bits)
{
    double x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* Run `kernel(...)` as a launch of `grid` blocks of `block` threads (x only). */
#define TN_EMULATE(kernel, grid, block, ...)                              \
    do {                                                                  \
        gridDim.x = (grid); gridDim.y = gridDim.z = 1;                    \
        blockDim.x = (block); blockDim.y = blockDim.z = 1;                \
        blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;          \
        for (unsigned int tn_b = 0; tn_b < gridDim.x; tn_b++) {           \
            for (unsigned int tn_t = 0; tn_t < blockDim.x; tn_t++) {      \
                blockIdx.x = tn_b;                                        \
                threadIdx.x = tn_t;                                       \
                kernel(__VA_ARGS__);                                      \
            }                                                             \
        }                                                                 \
    } while (0)

#endif /* TENURE_HOST_EMULATION_H */
