/* tenure's random numbers, element by element: the Philox4x64-10 generator
 * and the transforms of the draws the C runtime (src/random.c) and the CUDA
 * kernels (tenure/linkers/cuda/random.py) compute.  One text for both: C
 * compiles it as it is, NVRTC and the host-compiled kernels with the CUDA
 * prelude before it.  The reference is RandomVariable.perform
 * (tenure/symbolic/ops/random.py), written with NumPy's own Philox; the
 * tests hold the three to the same numbers.
 *
 * A draw reads the generator state [key0, key1, n]: its words are Philox's
 * blocks at the counters [1 + b, 0, n, a] (b = 0, 1, ...: block b holds
 * words 4b .. 4b+3), which is NumPy's Philox(key, counter=[0, 0, n, 0])
 * stream for a = 0.  `a` numbers the further attempts of a rejection
 * (integers): draw n owns every counter whose third word is n.
 *
 * Element i of a draw (C order) depends on i alone, so any thread may
 * compute any element:
 * - uniform float64: word i's top 53 bits times 2**-53 (NumPy's random());
 * - uniform float32: 32-bit half i (the low half of word i/2 first) -- its
 *   top 24 bits times 2**-24 (NumPy's random(dtype=float32));
 * - bernoulli: the float64 uniform of word i, below p;
 * - normal: Box-Muller on words 2k, 2k+1 (k = i/2): r = sqrt(-2 log u1),
 *   u1 in (0, 1]; theta = 2 pi u2; r cos theta for even i, r sin theta for
 *   odd i, in double;
 * - integers in [low, high): Lemire's multiply and reject on word i; a word
 *   rejected (probability below (high - low) / 2**64) is followed by word i
 *   of attempt 1, 2, ...
 * The affine parts (low + (high - low) u, loc + scale z) are in the draw's
 * dtype, the parameters rounded to it first (tn_rng_uniform_f32, ...). */
#ifndef TENURE_PHILOX_H
#define TENURE_PHILOX_H

#if defined(__CUDACC__) || defined(TN_ON_HOST)
#define TN_RNG_FN static __device__ __forceinline__
#else
#define TN_RNG_FN static inline
#endif

typedef unsigned long long tn_u64;

/* The generator state of one draw. */
typedef struct {
    tn_u64 key0, key1, n;
} tn_rng_key;

/* The block last computed, so that the elements of one block compute it once. */
typedef struct {
    tn_u64 block, attempt;
    int valid;
    tn_u64 words[4];
} tn_rng_cursor;

/* hi:lo = a * b */
TN_RNG_FN tn_u64 tn_rng_mulhilo(tn_u64 a, tn_u64 b, tn_u64 *lo)
{
#if defined(__CUDACC__)
    *lo = a * b;
    return __umul64hi(a, b);
#else
    unsigned __int128 p = (unsigned __int128)a * b;
    *lo = (tn_u64)p;
    return (tn_u64)(p >> 64);
#endif
}

/* Philox4x64 with 10 rounds (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC 2011): the block at counter c under key (k0, k1). */
TN_RNG_FN void tn_philox4x64_10(const tn_u64 c[4], tn_u64 k0, tn_u64 k1, tn_u64 out[4])
{
    tn_u64 x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3];
    for (int round = 0; round < 10; round++) {
        tn_u64 lo0, lo1;
        const tn_u64 hi0 = tn_rng_mulhilo(0xD2E7470EE14C6C93ULL, x0, &lo0);
        const tn_u64 hi1 = tn_rng_mulhilo(0xCA5A826395121157ULL, x2, &lo1);
        x0 = hi1 ^ x1 ^ k0;
        x1 = lo1;
        x2 = hi0 ^ x3 ^ k1;
        x3 = lo0;
        k0 += 0x9E3779B97F4A7C15ULL;   /* the golden ratio's bits */
        k1 += 0xBB67AE8584CAA73BULL;   /* sqrt(3) - 1's */
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

TN_RNG_FN void tn_rng_start(tn_rng_cursor *cursor)
{
    cursor->valid = 0;
    cursor->block = cursor->attempt = 0;   /* unread while not valid (GCC cannot tell) */
}

/* Word j of the draw's stream, attempt `attempt`. */
TN_RNG_FN tn_u64 tn_rng_word(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 j, tn_u64 attempt)
{
    const tn_u64 block = j / 4;
    if (!cursor->valid || cursor->block != block || cursor->attempt != attempt) {
        const tn_u64 counter[4] = {block + 1, 0, key.n, attempt};
        tn_philox4x64_10(counter, key.key0, key.key1, cursor->words);
        cursor->block = block;
        cursor->attempt = attempt;
        cursor->valid = 1;
    }
    return cursor->words[j % 4];
}

TN_RNG_FN double tn_rng_uniform64(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i)
{
    return (double)(tn_rng_word(key, cursor, i, 0) >> 11) * (1.0 / 9007199254740992.0);
}

TN_RNG_FN float tn_rng_uniform32(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i)
{
    const tn_u64 word = tn_rng_word(key, cursor, i / 2, 0);
    const unsigned int half = (unsigned int)(i % 2 ? word >> 32 : word & 0xffffffffULL);
    return (float)(half >> 8) * (1.0f / 16777216.0f);
}

/* Box-Muller's radius and angle of pair k (elements 2k and 2k + 1). */
TN_RNG_FN void tn_rng_polar(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 k, double *r,
                            double *theta)
{
    const double u1 = (double)((tn_rng_word(key, cursor, 2 * k, 0) >> 11) + 1)
                      * (1.0 / 9007199254740992.0);
    const double u2 = (double)(tn_rng_word(key, cursor, 2 * k + 1, 0) >> 11)
                      * (1.0 / 9007199254740992.0);
    *r = sqrt(-2.0 * log(u1));
    *theta = 6.283185307179586 * u2;
}

TN_RNG_FN double tn_rng_normal64(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i)
{
    double r, theta;
    tn_rng_polar(key, cursor, i / 2, &r, &theta);
    return i % 2 ? r * sin(theta) : r * cos(theta);
}

/* low + an unbiased integer in [0, range), range >= 1, wrapped to int64. */
TN_RNG_FN long long tn_rng_integer(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i, long long low,
                                   tn_u64 range)
{
    tn_u64 lo, hi = tn_rng_mulhilo(tn_rng_word(key, cursor, i, 0), range, &lo);
    if (lo < range) {
        const tn_u64 threshold = (0 - range) % range;
        for (tn_u64 attempt = 1; lo < threshold; attempt++)
            hi = tn_rng_mulhilo(tn_rng_word(key, cursor, i, attempt), range, &lo);
    }
    return (long long)((tn_u64)low + hi);
}

/* Element i of each draw, as RandomVariable.perform computes it (standard:
 * the standard variate, without the affine part). */
TN_RNG_FN double tn_rng_uniform_f64(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i,
                                    int standard, double low, double high)
{
    const double u = tn_rng_uniform64(key, cursor, i);
    return standard ? u : u * (high - low) + low;
}

TN_RNG_FN float tn_rng_uniform_f32(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i,
                                   int standard, double low, double high)
{
    const float u = tn_rng_uniform32(key, cursor, i), lo = (float)low, hi = (float)high;
    return standard ? u : u * (hi - lo) + lo;
}

TN_RNG_FN double tn_rng_normal_f64(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i,
                                   int standard, double loc, double scale)
{
    const double z = tn_rng_normal64(key, cursor, i);
    return standard ? z : z * scale + loc;
}

TN_RNG_FN float tn_rng_normal_f32(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i,
                                  int standard, double loc, double scale)
{
    const float z = (float)tn_rng_normal64(key, cursor, i);
    return standard ? z : z * (float)scale + (float)loc;
}

TN_RNG_FN int tn_rng_bernoulli(tn_rng_key key, tn_rng_cursor *cursor, tn_u64 i, double p)
{
    return tn_rng_uniform64(key, cursor, i) < p;
}

#endif /* TENURE_PHILOX_H */
