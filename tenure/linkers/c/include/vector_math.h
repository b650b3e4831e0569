/* Vector math for vectorized loops (generated kernels and the runtime's). */
#ifndef TENURE_VECTOR_MATH_H
#define TENURE_VECTOR_MATH_H

#include <math.h>

/* With TN_VECTOR_MATH defined (and libm linked: -lm), GCC turns
 * these calls in vectorized loops into calls of glibc's libmvec (exp of 8
 * doubles at once on AVX-512).  libmvec is accurate to a few ulps where libm
 * is to one: NumPy's own SIMD math (which it uses for most of these) differs
 * from libm by as much, so neither is bit-identical to NumPy anyway. */
#if defined(TN_VECTOR_MATH) && defined(__GLIBC__) && defined(__x86_64__) && !defined(__clang__)
#define TN_SIMD_MATH(name) \
    __attribute__((__simd__("notinbranch"))) extern double name(double); \
    __attribute__((__simd__("notinbranch"))) extern float name##f(float);
TN_SIMD_MATH(exp) TN_SIMD_MATH(log) TN_SIMD_MATH(sin) TN_SIMD_MATH(cos)
__attribute__((__simd__("notinbranch"))) extern double pow(double, double);
__attribute__((__simd__("notinbranch"))) extern float powf(float, float);
#if __GLIBC_PREREQ(2, 35)
TN_SIMD_MATH(expm1) TN_SIMD_MATH(log1p) TN_SIMD_MATH(tanh) TN_SIMD_MATH(erf)
#endif
#undef TN_SIMD_MATH
#endif

#endif /* TENURE_VECTOR_MATH_H */
