// AVX2 + FMA + F16C versions of the float kernels. Compiled with target attributes, so the file builds on any
// x86-64 compiler and is only called when the CPU reports the features (see kernels.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace tandem::avx2 {

__attribute__((target("avx2,fma"))) static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma,f16c"))) float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 bv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), bv, s0);
    }
    float s = hsum(s0);
    for (; i < n; i++) s += a[i] * _cvtsh_ss(b[i]);
    return s;
}

__attribute__((target("avx2,fma,f16c"))) void axpy_f16(float w, const uint16_t* x, float* y, int64_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += w * _cvtsh_ss(x[i]);
}

}  // namespace tandem::avx2
#endif
