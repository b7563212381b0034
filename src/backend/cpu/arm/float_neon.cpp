// The float kernels of the AArch64 levels (Advanced SIMD, part of every ARMv8-A CPU; half-precision conversion
// included). A per-ISA unit (backend/cpu/isa.h): built once for each of neon, dotprod and i8mm (the float code is the same
// at the three; the compiler may schedule it differently).
#include "backend/cpu/isa_unit.h"

#include "backend/cpu/isa_kernels.h"

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

// The delta rule (contract: backend/cpu/kernels.h delta_rule; S % 8 == 0): four rows of the state at a time, each read
// once for its dot products with k and q, then written once.
void delta_rule(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                float beta, int S, float* o) {
    const float kq = dot_f32(k, q, S), scale = 1.0f / sqrtf(float(S));
    const float32x4_t dv = vdupq_n_f32(decay);
    for (int j = 0; j < S; j += 4) {
        const float* mi[4];
        float32x4_t ak[4], aq[4];
        for (int r = 0; r < 4; r++) {
            mi[r] = m_in + size_t(j + r) * size_t(S);
            ak[r] = aq[r] = vdupq_n_f32(0);
        }
        for (int i = 0; i < S; i += 4) {
            const float32x4_t kv = vld1q_f32(k + i), qv = vld1q_f32(q + i);
            for (int r = 0; r < 4; r++) {
                const float32x4_t m = vld1q_f32(mi[r] + i);
                ak[r] = vfmaq_f32(ak[r], m, kv);
                aq[r] = vfmaq_f32(aq[r], m, qv);
            }
        }
        for (int r = 0; r < 4; r++) {
            const float d = (v[j + r] - decay * vaddvq_f32(ak[r])) * beta;
            o[j + r] = (decay * vaddvq_f32(aq[r]) + d * kq) * scale;
            const float32x4_t dd = vdupq_n_f32(d);
            float* mo = m_out + size_t(j + r) * size_t(S);
            for (int i = 0; i < S; i += 4)
                vst1q_f32(mo + i, vfmaq_f32(vmulq_f32(dv, vld1q_f32(mi[r] + i)), dd, vld1q_f32(k + i)));
        }
    }
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
// The tile step (contract: backend/cpu/kernels.h attn_tile): every position's score is computed whatever the mask.
void attn_tile(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
               const float* vt, int hd, float scale, float* mx, float* l, float* o) {
    float s[kAttnTile] = {};
    for (int r = 0; r < n_rows; r++) {
        const uint32_t mask = masks[r];
        if (!mask) continue;
        for (int g = 0; g < group; g++) {
            const int qi = r * group + g;
            const float* qr = q + size_t(r) * q_stride + size_t(g) * size_t(hd);
            const int j_lo = __builtin_ctz(mask), j_hi = 31 - __builtin_clz(mask);  // visible span
            for (int j = j_lo; j <= j_hi; j++) s[j] = dot_f32(qr, kt + size_t(j) * size_t(hd), hd) * scale;
            float tmax = -INFINITY;
            for (uint32_t m = mask; m; m &= m - 1) {
                const int j = __builtin_ctz(m);
                tmax = s[j] > tmax ? s[j] : tmax;
            }
            const float m1 = mx[qi] > tmax ? mx[qi] : tmax;
            const float c = expf(mx[qi] - m1);  // 0 before any position (mx = -inf)
            for (int j = j_lo / 4 * 4; j <= j_hi; j += 4)
                vst1q_f32(s + j, exp_ps(vsubq_f32(vld1q_f32(s + j), vdupq_n_f32(m1))));
            float sum = 0;
            for (uint32_t m = mask; m; m &= m - 1) sum += s[__builtin_ctz(m)];
            l[qi] = l[qi] * c + sum;
            mx[qi] = m1;
            float* oq = o + size_t(qi) * size_t(hd);
            for (int i = 0; i < hd; i += 16) {
                float32x4_t a0 = vmulq_n_f32(vld1q_f32(oq + i), c), a1 = vmulq_n_f32(vld1q_f32(oq + i + 4), c);
                float32x4_t a2 = vmulq_n_f32(vld1q_f32(oq + i + 8), c), a3 = vmulq_n_f32(vld1q_f32(oq + i + 12), c);
                const bool four = i + 16 <= hd;
                for (uint32_t m = mask; m; m &= m - 1) {
                    const int j = __builtin_ctz(m);
                    const float* vj = vt + size_t(j) * size_t(hd) + i;
                    a0 = vfmaq_n_f32(a0, vld1q_f32(vj), s[j]);
                    a1 = vfmaq_n_f32(a1, vld1q_f32(vj + 4), s[j]);
                    if (four) {
                        a2 = vfmaq_n_f32(a2, vld1q_f32(vj + 8), s[j]);
                        a3 = vfmaq_n_f32(a3, vld1q_f32(vj + 12), s[j]);
                    }
                }
                vst1q_f32(oq + i, a0);
                vst1q_f32(oq + i + 4, a1);
                if (four) {
                    vst1q_f32(oq + i + 8, a2);
                    vst1q_f32(oq + i + 12, a3);
                }
            }
        }
    }
}

// Cache rows to a float tile (contract: backend/cpu/kernels.h kv_tile_f32): f32, f16, bf16, q8_0 here, the other
// block types by the reference. x = float(q) * d, one rounding, as the reference.
bool kv_tile_f32(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile) {
    if (hd % 32 != 0) return false;
    switch (t) {
        case TensorType::F32:
            for (int j = 0; j < np; j++) __builtin_memcpy(tile + j * hd, rows[j], size_t(hd) * 4);
            break;
        case TensorType::F16:
            for (int j = 0; j < np; j++)
                for (int i = 0; i < hd; i += 4)
                    vst1q_f32(tile + j * hd + i, load4_f16(reinterpret_cast<const uint16_t*>(rows[j]) + i));
            break;
        case TensorType::BF16:
            for (int j = 0; j < np; j++)
                for (int i = 0; i < hd; i += 4)
                    vst1q_f32(tile + j * hd + i, load4_bf16(reinterpret_cast<const uint16_t*>(rows[j]) + i));
            break;
        case TensorType::Q8_0:
            for (int j = 0; j < np; j++) {
                const uint8_t* b = rows[j];
                for (int k = 0; k < hd / 32; k++, b += 34) {
                    uint16_t dh;
                    __builtin_memcpy(&dh, b, 2);
                    const float d = scalar_f16(dh);
                    for (int i = 0; i < 32; i += 8) {
                        const int16x8_t w = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(b + 2 + i)));
                        float* out = tile + j * hd + 32 * k + i;
                        vst1q_f32(out, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), d));
                        vst1q_f32(out + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))), d));
                    }
                }
            }
            break;
        default: return false;
    }
    for (int j = np; j < (np + 7) / 8 * 8; j++)
        for (int i = 0; i < hd; i++) tile[j * hd + i] = 0.0f;
    return true;
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

// The compute probe (contract: backend/cpu/isa.h). Eight independent accumulators hide the instructions' latency.
uint64_t probe_mac_i8(int64_t iters, uint64_t* sink) {
    int32x4_t acc[8];
    const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
    for (int j = 0; j < 8; j++) acc[j] = vdupq_n_s32(j);
    for (int64_t i = 0; i < iters; i++) {
        for (int j = 0; j < 8; j++) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
            acc[j] = vmmlaq_s32(acc[j], a, b);  // (2x8) x (8x2): 32 multiply-accumulates
#elif defined(__ARM_FEATURE_DOTPROD)
            acc[j] = vdotq_s32(acc[j], a, b);  // 16
#else
            acc[j] = vpadalq_s16(acc[j], vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // 8
#endif
        }
        __asm__ volatile("" : "+w"(acc[0]), "+w"(acc[1]), "+w"(acc[2]), "+w"(acc[3]));
    }
    int32x4_t s = acc[0];
    for (int j = 1; j < 8; j++) s = vaddq_s32(s, acc[j]);
    *sink = uint64_t(vaddvq_s32(s));
#if defined(__ARM_FEATURE_MATMUL_INT8)
    return uint64_t(iters) * 8 * 32;
#elif defined(__ARM_FEATURE_DOTPROD)
    return uint64_t(iters) * 8 * 16;
#else
    return uint64_t(iters) * 8 * 8;
#endif
}

uint64_t probe_mac_f32(int64_t iters, uint64_t* sink) {
    float32x4_t acc[10];
    const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(1e-3f);
    for (int j = 0; j < 10; j++) acc[j] = vdupq_n_f32(float(j));
    for (int64_t i = 0; i < iters; i++) {
        for (int j = 0; j < 10; j++) acc[j] = vfmaq_f32(b, acc[j], a);
        __asm__ volatile("" : "+w"(acc[0]), "+w"(acc[1]), "+w"(acc[2]), "+w"(acc[3]));
    }
    float32x4_t s = acc[0];
    for (int j = 1; j < 10; j++) s = vaddq_f32(s, acc[j]);
    *sink = uint64_t(vaddvq_f32(s));
    return uint64_t(iters) * 10 * 4;
}

}  // namespace tandem::TD_ISA
