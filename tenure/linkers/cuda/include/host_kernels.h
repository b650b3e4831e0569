/* The CUDA that tenure's generated kernels use, on the host (host-compiled
 * kernels), so that CI (which has no GPU) runs every generated elementwise
 * kernel on the CPU and compares it with NumPy: the kernel source is
 * compiled as host C++ with TN_ON_HOST defined and this header first.
 *
 * - __global__ / __device__ / __forceinline__ vanish: kernels are functions.
 * - blockIdx, threadIdx, blockDim, gridDim are per-thread globals set for
 *   each thread run on the host.  Two ways to launch:
 *   TN_RUN_ON_HOST runs a kernel once per thread of the launch grid, one
 *   thread after another: faithful for kernels whose threads never wait for each
 *   other (the elementwise kernels, whose threads each own the elements of
 *   a grid-stride loop).
 *   TN_RUN_ON_HOST_THREADS runs the threads of each block as coroutines that
 *   meet at __syncthreads (one block after another, see below), so kernels
 *   that share memory within a block (reductions) run as on the device;
 *   __shared__ variables are static: one copy, which the block running owns.
 * - atomicOr is an atomic |= (GCC's built-in; TN_RUN_ON_HOST launches may
 *   run on several process threads at once).
 * - math functions are <math.h>'s, with the CUDA intrinsics the prelude
 *   (tenure_cuda.h) uses for infinities.
 *
 * TN_RUN_ON_HOST launches may run at once on several process threads (the
 * launch globals are thread_local); TN_RUN_ON_HOST_THREADS launches one at a time per
 * library (one scheduler, one copy of each __shared__ variable).  Tests only:
 * the grid on the host is small (a few blocks of a few threads). */
#ifndef TENURE_HOST_KERNELS_H
#define TENURE_HOST_KERNELS_H

/* The C library's own headers, not libstdc++'s C++ wrappers around them:
 * <cmath>'s templates would cost a third of a second per compilation, and
 * the kernels call the C functions by their C names (expf, not exp). */
#define _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#include <math.h>
#include <stdlib.h>
#include <string.h>
#undef _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#include <ucontext.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct tn_dim3 {
    unsigned int x, y, z;
};
static thread_local tn_dim3 blockIdx, threadIdx, blockDim, gridDim;

static inline int atomicOr(int *address, int value)
{
    return __atomic_fetch_or(address, value, __ATOMIC_SEQ_CST);
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

/* Run `kernel(...)` as a launch of `grid` blocks of `block` threads (x only).
 * The loop variables have names no kernel parameter has: a parameter of the
 * same name would be shadowed in the call. */
#define TN_RUN_ON_HOST(kernel, grid, block, ...)                              \
    do {                                                                  \
        gridDim.x = (grid); gridDim.y = gridDim.z = 1;                    \
        blockDim.x = (block); blockDim.y = blockDim.z = 1;                \
        blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;          \
        for (unsigned int tn_host_block_ = 0; tn_host_block_ < gridDim.x; \
             tn_host_block_++) {                                          \
            for (unsigned int tn_host_thread_ = 0;                        \
                 tn_host_thread_ < blockDim.x; tn_host_thread_++) {       \
                blockIdx.x = tn_host_block_;                              \
                threadIdx.x = tn_host_thread_;                            \
                kernel(__VA_ARGS__);                                      \
            }                                                             \
        }                                                                 \
    } while (0)

/* TN_RUN_ON_HOST_THREADS: the threads of a block are coroutines (ucontext) on
 * one process thread, each with its own stack; __syncthreads returns to the
 * scheduler, which runs every other thread of the block up to the same
 * barrier (or to its end) before resuming any: a round per barrier.  Cheap
 * enough to run every launch of the tests on the host, and deterministic. */
#define TN_HOST_MAX_THREADS 64
#define TN_HOST_STACK (64 * 1024)

/* Set when a launch could not run (a block of more than
 * TN_HOST_MAX_THREADS threads, no memory for the stacks): the caller
 * (tenure/linkers/cuda/host_kernels.py) clears it before a launch and raises
 * when it is set after. */
extern "C" int tn_host_failed;
int tn_host_failed = 0;

static ucontext_t tn_scheduler, tn_contexts[TN_HOST_MAX_THREADS];
static int tn_finished[TN_HOST_MAX_THREADS];
static unsigned int tn_current;
static void (*tn_thread_body)(void *);
static void *tn_thread_arg;

static inline void __syncthreads(void)
{
    swapcontext(&tn_contexts[tn_current], &tn_scheduler);
}

static void tn_thread_start(void)
{
    tn_thread_body(tn_thread_arg);
    tn_finished[tn_current] = 1;   /* then back to the scheduler (uc_link) */
}

template <typename Body>
static void tn_call_body(void *body)
{
    (*(Body *)body)();
}

/* Run `body` as a launch of `grid` blocks of `block` threads (at most
 * TN_HOST_MAX_THREADS; a larger block sets tn_host_failed). */
template <typename Body>
static void tn_run_threads_on_host(unsigned int grid, unsigned int block, Body body)
{
    if (block == 0 || block > TN_HOST_MAX_THREADS) {
        tn_host_failed = 1;
        return;
    }
    char *stacks = (char *)malloc((size_t)block * TN_HOST_STACK);
    if (stacks == NULL) {
        tn_host_failed = 1;
        return;
    }
    tn_thread_body = tn_call_body<Body>;
    tn_thread_arg = &body;
    gridDim.x = grid; gridDim.y = gridDim.z = 1;
    blockDim.x = block; blockDim.y = blockDim.z = 1;
    blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;
    for (unsigned int b = 0; b < grid; b++) {
        blockIdx.x = b;
        for (unsigned int t = 0; t < block; t++) {
            getcontext(&tn_contexts[t]);
            tn_contexts[t].uc_stack.ss_sp = stacks + (size_t)t * TN_HOST_STACK;
            tn_contexts[t].uc_stack.ss_size = TN_HOST_STACK;
            tn_contexts[t].uc_link = &tn_scheduler;
            makecontext(&tn_contexts[t], tn_thread_start, 0);
            tn_finished[t] = 0;
        }
        for (int running = 1; running;) {
            running = 0;
            for (unsigned int t = 0; t < block; t++) {
                if (tn_finished[t]) continue;
                running = 1;
                tn_current = t;
                threadIdx.x = t;
                swapcontext(&tn_scheduler, &tn_contexts[t]);
            }
        }
    }
    free(stacks);
}

#define TN_RUN_ON_HOST_THREADS(kernel, grid, block, ...) \
    tn_run_threads_on_host((grid), (block), [&]() { kernel(__VA_ARGS__); })

/* Checked operand access.  Before a launch, the caller (host_kernels.py)
 * registers each operand's pointer and the bytes it spans around that
 * pointer, [lo, hi) (lo < 0 under negative strides; an empty array spans
 * nothing).  Every TN_AT of a kernel then checks its bytes lie in the span
 * of the operand whose pointer it starts from: an access outside is not
 * made (it goes to a scratch cell), and the first one is recorded for the
 * caller to raise -- so a kernel that would read or write outside its
 * buffers on a device (an empty or zero-length part, a wrong stride) fails
 * in CI instead of reading garbage.  No spans registered: unchecked. */
#define TN_MAX_SPANS 64

struct tn_span {
    const char *base;
    long long lo, hi;
};
static thread_local tn_span tn_spans[TN_MAX_SPANS];
static thread_local int tn_n_spans = -1;
static thread_local long long tn_fault[4];   /* operand (-1: none), offset, bytes, 0 */
static thread_local int tn_faulted;
alignas(16) static thread_local char tn_scratch[64];

extern "C" void tn_host_set_spans(int n, const long long *bases, const long long *lo,
                                       const long long *hi)
{
    tn_n_spans = n < TN_MAX_SPANS ? n : TN_MAX_SPANS;
    for (int k = 0; k < tn_n_spans; k++) {
        tn_spans[k].base = (const char *)bases[k];
        tn_spans[k].lo = lo[k];
        tn_spans[k].hi = hi[k];
    }
    tn_faulted = 0;
}

/* Whether an access fell outside; then `out` gets operand, offset, bytes. */
extern "C" int tn_host_fault(long long *out)
{
    for (int k = 0; k < 3; k++) out[k] = tn_fault[k];
    return tn_faulted;
}

template <typename T>
static inline T *tn_checked(const char *p, long long offset)
{
    long long size = (long long)sizeof(T);
    int operand = -1;
    if (tn_n_spans < 0) return (T *)(p + offset);
    for (int k = 0; k < tn_n_spans; k++) {
        if (tn_spans[k].base != p) continue;
        if (offset >= tn_spans[k].lo && offset + size <= tn_spans[k].hi)
            return (T *)(p + offset);
        if (operand < 0) operand = k;
    }
    if (!tn_faulted) {
        tn_faulted = 1;
        tn_fault[0] = operand;
        tn_fault[1] = offset;
        tn_fault[2] = size;
    }
    memset(tn_scratch, 0, sizeof tn_scratch);
    return (T *)(void *)tn_scratch;
}

#define TN_AT(T, p, offset) (*tn_checked<T>((const char *)(p), (offset)))

#endif /* TENURE_HOST_KERNELS_H */
