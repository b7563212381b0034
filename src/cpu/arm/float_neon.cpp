// The float kernels of the AArch64 levels (Advanced SIMD, part of every ARMv8-A CPU; half-precision conversion
// included). A per-ISA unit (cpu/isa.h): built once for each of neon, dotprod and i8mm (the float code is the same
// at the three; the compiler may schedule it differently).
#include "cpu/isa_unit.h"

#include "cpu/isa_kernels.h"

#include <arm_neon.h>
#include <math.h>

namespace tandem::TD_ISA {

static inline float32x4_t load4_f16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline float32x4_t load4_bf16(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
static inline float32x4_t load4_f32(const float* p) { return vld1q_f32(p); }
static inline float scalar_f32(float v) { return v; }
static inline float scalar_f16(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
static inline float scalar_bf16(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

float dot_f32(const float* a, const float* b, int64_t n) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), load4_f16(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), load4_f16(b + i + 4));
    }
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s += a[i] * scalar_f16(b[i]);
    return s;
}

void axpy_f16(float w, const uint16_t* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), load4_f16(x + i), w));
    for (; i < n; i++) y[i] += w * scalar_f16(x[i]);
}

// exp(x) for x <= 0 (softmax after subtracting the max, and exp(-|g|)): x = n ln2 + r, a degree-6 polynomial for
// exp(r) on |r| <= ln2/2 (relative error below 2e-7); underflows to 0 below -87. The AVX2 version's constants.
static inline float32x4_t exp_ps(float32x4_t x) {
    x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_n_f32(x, n, 0.693359375f);
    r = vfmsq_n_f32(r, n, -2.12194440e-4f);
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

static inline float32x4_t silu_mul4(float32x4_t g, float32x4_t up) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = exp_ps(vnegq_f32(vabsq_f32(g)));  // exp(-|g|)
    const float32x4_t r = vdivq_f32(one, vaddq_f32(one, e));
    const uint32x4_t neg = vcltq_f32(g, vdupq_n_f32(0.0f));
    const float32x4_t sig = vbslq_f32(neg, vmulq_f32(e, r), r);  // e / (1 + e) below zero
    return vmulq_f32(vmulq_f32(g, sig), up);
}

// The tail (n % 4 values) goes through the same vector arithmetic in a padded buffer: every value is computed
// the same way wherever it sits, so a batch of rows equals one row at a time bit for bit.
void silu_mul(float* gate, const float* up, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(gate + i, silu_mul4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i == n) return;
    float g4[4] = {0, 0, 0, 0}, u4[4] = {0, 0, 0, 0};
    for (int64_t j = i; j < n; j++) {
        g4[j - i] = gate[j];
        u4[j - i] = up[j];
    }
    vst1q_f32(g4, silu_mul4(vld1q_f32(g4), vld1q_f32(u4)));
    for (int64_t j = i; j < n; j++) gate[j] = g4[j - i];
}

// softmax numerators in place over row[0, n) (max subtracted); returns 1 / their sum.
static inline float softmax_unnormalized(float* row, int n) {
    float mx = row[0];
    for (int p = 1; p < n; p++) mx = row[p] > mx ? row[p] : mx;
    float32x4_t vs = vdupq_n_f32(0);
    int p = 0;
    for (; p + 4 <= n; p += 4) {
        const float32x4_t e = exp_ps(vsubq_f32(vld1q_f32(row + p), vdupq_n_f32(mx)));
        vst1q_f32(row + p, e);
        vs = vaddq_f32(vs, e);
    }
    float sum = vaddvq_f32(vs);
    for (; p < n; p++) {
        row[p] = expf(row[p] - mx);
        sum += row[p];
    }
    return 1.0f / sum;
}

// m query heads sharing one key/value head, hd % 8 == 0 and hd <= 256: each cached key and value row is
// converted from half precision once for all m heads.
void attention_heads(const float* q, int m, const uint16_t* k, const uint16_t* v, size_t stride, const int32_t* rows,
                     int n_pos, int hd, float scale, float* scores, float* out) {
    float row[256];
    for (int p = 0; p < n_pos; p++) {
        const uint16_t* kp = k + size_t(rows ? rows[p] : p) * stride;
        for (int i = 0; i < hd; i += 4) vst1q_f32(row + i, load4_f16(kp + i));
        for (int r = 0; r < m; r++)
            scores[size_t(r) * size_t(n_pos) + size_t(p)] = dot_f32(q + size_t(r) * size_t(hd), row, hd) * scale;
    }
    float inv[64];
    for (int r = 0; r < m; r++) inv[r] = softmax_unnormalized(scores + size_t(r) * size_t(n_pos), n_pos);
    for (int r = 0; r < m; r++)
        for (int i = 0; i < hd; i++) out[size_t(r) * size_t(hd) + size_t(i)] = 0.0f;
    for (int p = 0; p < n_pos; p++) {
        const uint16_t* vp = v + size_t(rows ? rows[p] : p) * stride;
        for (int i = 0; i < hd; i += 4) vst1q_f32(row + i, load4_f16(vp + i));
        for (int r = 0; r < m; r++) {
            float* o = out + size_t(r) * size_t(hd);
            const float w = scores[size_t(r) * size_t(n_pos) + size_t(p)];
            for (int i = 0; i < hd; i += 4) vst1q_f32(o + i, vfmaq_n_f32(vld1q_f32(o + i), vld1q_f32(row + i), w));
        }
    }
    for (int r = 0; r < m; r++) {
        float* o = out + size_t(r) * size_t(hd);
        for (int i = 0; i < hd; i += 4) vst1q_f32(o + i, vmulq_n_f32(vld1q_f32(o + i), inv[r]));
    }
}

// F32 / F16 / BF16 weights: four rows per pass share each load of the activations.
template <typename W, float32x4_t (*Load)(const W*), float (*Scalar)(W)>
static inline void rows4(const W* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                         int64_t r1) {
    int64_t r = r0;
    const int64_t cols4 = cols / 4 * 4;
    for (; r + 4 <= r1; r += 4) {
        const W* w0 = w + r * cols;
        for (int t = 0; t < n_tok; t++) {
            const float* xt = x + int64_t(t) * cols;
            float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t i = 0; i < cols4; i += 4) {
                const float32x4_t xv = vld1q_f32(xt + i);
                a0 = vfmaq_f32(a0, Load(w0 + i), xv);
                a1 = vfmaq_f32(a1, Load(w0 + cols + i), xv);
                a2 = vfmaq_f32(a2, Load(w0 + 2 * cols + i), xv);
                a3 = vfmaq_f32(a3, Load(w0 + 3 * cols + i), xv);
            }
            float o[4] = {vaddvq_f32(a0), vaddvq_f32(a1), vaddvq_f32(a2), vaddvq_f32(a3)};
            for (int64_t i = cols4; i < cols; i++)
                for (int j = 0; j < 4; j++) o[j] += Scalar(w0[j * cols + i]) * xt[i];
            for (int j = 0; j < 4; j++) y[int64_t(t) * ldy + r + j] = o[j];
        }
    }
    for (; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            const W* wr = w + r * cols;
            const float* xt = x + int64_t(t) * cols;
            float32x4_t acc = vdupq_n_f32(0);
            for (int64_t i = 0; i < cols4; i += 4) acc = vfmaq_f32(acc, Load(wr + i), vld1q_f32(xt + i));
            float s = vaddvq_f32(acc);
            for (int64_t i = cols4; i < cols; i++) s += Scalar(wr[i]) * xt[i];
            y[int64_t(t) * ldy + r] = s;
        }
}

void matmul_f32_rows(const float* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
    rows4<float, load4_f32, scalar_f32>(w, cols, x, n_tok, y, ldy, r0, r1);
}
void matmul_f16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
    rows4<uint16_t, load4_f16, scalar_f16>(w, cols, x, n_tok, y, ldy, r0, r1);
}
void matmul_bf16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                      int64_t r1) {
    rows4<uint16_t, load4_bf16, scalar_bf16>(w, cols, x, n_tok, y, ldy, r0, r1);
}

uint64_t stream_sum(const uint64_t* p, size_t n) {
    uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        __builtin_prefetch(p + i + 512);
        a0 = vaddq_u64(a0, vld1q_u64(p + i));
        a1 = vaddq_u64(a1, vld1q_u64(p + i + 2));
        a2 = vaddq_u64(a2, vld1q_u64(p + i + 4));
        a3 = vaddq_u64(a3, vld1q_u64(p + i + 6));
    }
    return vaddvq_u64(vaddq_u64(vaddq_u64(a0, a1), vaddq_u64(a2, a3)));
}

}  // namespace tandem::TD_ISA
