// AVX2 + FMA + F16C versions of the float kernels. Compiled with target attributes, so the file builds on any
// x86-64 compiler and is only called when the CPU reports the features (see kernels.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
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

__attribute__((target("avx2,fma,f16c"))) static inline __m256 load8_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// exp(x) for x <= 0 (softmax after subtracting the max): Cody-Waite range reduction x = n ln2 + r and a degree-6
// polynomial for exp(r) on |r| <= ln2/2 (relative error below 2e-7); underflows to 0 below -87.
__attribute__((target("avx2,fma"))) static inline __m256 exp_ps(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma,f16c"))) void attention_head(const float* q, const uint16_t* k, const uint16_t* v,
                                                             size_t stride, int n_pos, int hd, float scale,
                                                             float* scores, float* out) {
    float mx = -INFINITY;
    if (hd % 8 == 0) {
        for (int p = 0; p < n_pos; p++) {
            const uint16_t* kp = k + size_t(p) * stride;
            __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(q), load8_f16(kp));
            for (int i = 8; i < hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8_f16(kp + i), acc);
            scores[p] = hsum(acc) * scale;
            mx = std::max(mx, scores[p]);
        }
    } else {
        for (int p = 0; p < n_pos; p++) {
            scores[p] = dot_f32_f16(q, k + size_t(p) * stride, hd) * scale;
            mx = std::max(mx, scores[p]);
        }
    }
    float sum = 0;
    int p0 = 0;
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (; p0 + 8 <= n_pos; p0 += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(scores + p0), vmx));
        _mm256_storeu_ps(scores + p0, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    sum = hsum(vsum);
    for (int p = p0; p < n_pos; p++) {
        scores[p] = std::exp(scores[p] - mx);
        sum += scores[p];
    }
    const float inv = 1.0f / sum;
    if (hd % 8 == 0 && hd <= 256) {
        __m256 acc[32];
        const int nv = hd / 8;
        for (int i = 0; i < nv; i++) acc[i] = _mm256_setzero_ps();
        for (int p = 0; p < n_pos; p++) {
            const __m256 w = _mm256_set1_ps(scores[p]);
            const uint16_t* vp = v + size_t(p) * stride;
            for (int i = 0; i < nv; i++) acc[i] = _mm256_fmadd_ps(w, load8_f16(vp + 8 * i), acc[i]);
        }
        const __m256 s = _mm256_set1_ps(inv);
        for (int i = 0; i < nv; i++) _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(acc[i], s));
    } else {
        for (int i = 0; i < hd; i++) out[i] = 0;
        for (int p = 0; p < n_pos; p++) axpy_f16(scores[p] * inv, v + size_t(p) * stride, out, hd);
    }
}

static inline float to_f32(float v) { return v; }
__attribute__((target("f16c"))) static inline float to_f32(uint16_t h) { return _cvtsh_ss(h); }

// F32 / F16 weights: four rows per pass share each load of the activations.
template <typename W, __m256 (*Load)(const W*)>
__attribute__((target("avx2,fma,f16c"))) static inline void rows4(const W* w, int64_t cols, const float* x, int n_tok,
                                                                  float* y, int64_t ldy, int64_t r0, int64_t r1) {
    int64_t r = r0;
    const int64_t cols8 = cols / 8 * 8;
    for (; r + 4 <= r1; r += 4) {
        const W* w0 = w + r * cols;
        for (int t = 0; t < n_tok; t++) {
            const float* xt = x + int64_t(t) * cols;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t i = 0; i < cols8; i += 8) {
                const __m256 xv = _mm256_loadu_ps(xt + i);
                a0 = _mm256_fmadd_ps(Load(w0 + i), xv, a0);
                a1 = _mm256_fmadd_ps(Load(w0 + cols + i), xv, a1);
                a2 = _mm256_fmadd_ps(Load(w0 + 2 * cols + i), xv, a2);
                a3 = _mm256_fmadd_ps(Load(w0 + 3 * cols + i), xv, a3);
            }
            // transpose-reduce the four accumulators into four sums
            const __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
            const __m256 h = _mm256_hadd_ps(h01, h23);
            const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            float o[4];
            _mm_storeu_ps(o, sum4);
            for (int64_t i = cols8; i < cols; i++)  // column remainder (rows whose length is not a multiple of 8)
                for (int j = 0; j < 4; j++) o[j] += to_f32(w0[j * cols + i]) * xt[i];
            for (int j = 0; j < 4; j++) y[int64_t(t) * ldy + r + j] = o[j];
        }
    }
    for (; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            const W* wr = w + r * cols;
            const float* xt = x + int64_t(t) * cols;
            float s;
            if constexpr (sizeof(W) == 4) s = dot_f32(reinterpret_cast<const float*>(wr), xt, cols);
            else s = dot_f32_f16(xt, reinterpret_cast<const uint16_t*>(wr), cols);
            y[int64_t(t) * ldy + r] = s;
        }
}

__attribute__((target("avx2,fma,f16c"))) static inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }

void matmul_f32_rows(const float* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    rows4<float, load_f32>(w, cols, x, n_tok, y, ldy, r0, r1);
}

void matmul_f16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    rows4<uint16_t, load8_f16>(w, cols, x, n_tok, y, ldy, r0, r1);
}

}  // namespace tandem::avx2
#endif
