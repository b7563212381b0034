// The AArch64 kernels over the 16-row packed layouts (quant/packed_layout.h). A per-ISA unit (backend/cpu/isa.h), built
// for neon, dotprod and i8mm.
//
// A 64-byte line of a group holds four consecutive weights of each of the 16 rows; each 16-byte quarter is 4 rows
// x 4 weights, the operand of one SDOT against the four matching activation bytes (broadcast): 4 rows' partial
// dot products in one register (Dot4, neon_util.h; SMULL+SADALP without dotprod). SDOT multiplies signed bytes, so
// Q8_0's stored value + 128 is flipped back to signed; the other types' unsigned values (Q4_0/Q4_K nibbles, Q5_K
// 5-bit, Q6_K 6-bit values) are below 128 and used as they are, their offsets and the K-quant mins coming back
// through the activation block sums, as in the x86 kernels. All sums are exact int32.
//
// i8mm: for pairs of tokens, Q8_0 / Q4_0 use SMMLA (a 2x8 by 8x2 int8 matrix product per instruction): two
// consecutive 4-weight groups zipped give 8 consecutive weights of 2 rows, against 8 activations of 2 tokens,
// half the multiply instructions of SDOT for the same work.
#include "backend/cpu/isa_unit.h"

#include <arm_neon.h>

#include "backend/cpu/arm/neon_util.h"
#include "backend/cpu/isa_kernels.h"
#include "quant/blocks.h"

namespace tandem::TD_ISA {

namespace {

constexpr int R = packed::R;

// ---- Q8_0 / Q4_0 ----
template <bool Q4, int T>
void q8_tile(const uint8_t* base, int64_t nb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gbb = packed::q8_block_bytes(Q4);
    float32x4_t acc[4][T];
    for (int q = 0; q < 4; q++)
        for (int t = 0; t < T; t++) acc[q][t] = vdupq_n_f32(0);
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = base + size_t(b) * gbb;
        const uint8_t* qb = blk + 2 * R;
        for (int q = 0; q < 4; q++) {
            Dot4 s[T];
            for (int t = 0; t < T; t++) s[t].zero();
            if constexpr (Q4) {
                for (int g = 0; g < 4; g++) {
                    const uint8x16_t v = vld1q_u8(qb + 64 * g + 16 * q);
                    const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
                    const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
                    for (int t = 0; t < T; t++) {
                        s[t].add(lo, bcast4(aq0[t] + b * 32 + 4 * g));
                        s[t].add(hi, bcast4(aq0[t] + b * 32 + 16 + 4 * g));
                    }
                }
            } else {
                for (int g = 0; g < 8; g++) {
                    const int8x16_t w = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(qb + 64 * g + 16 * q), vdupq_n_u8(0x80)));
                    for (int t = 0; t < T; t++) s[t].add(w, bcast4(aq0[t] + b * 32 + 4 * g));
                }
            }
            const float32x4_t dw = load_h4(blk + 8 * q);
            for (int t = 0; t < T; t++) {
                int32x4_t si = s[t].get();
                if constexpr (Q4) si = vsubq_s32(si, vdupq_n_s32(8 * a.sumrow(t0 + t)[b]));  // nibbles are value + 8
                acc[q][t] = vfmaq_f32(acc[q][t], vcvtq_f32_s32(si), vmulq_n_f32(dw, a.drow(t0 + t)[b]));
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int q = 0; q < 4; q++) vst1q_f32(y + int64_t(t0 + t) * ldy + row0 + 4 * q, acc[q][t]);
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
// Tokens t0, t0+1 (P pairs: T = 2P tokens) with SMMLA.
template <bool Q4, int P>
void q8_tile_mmla(const uint8_t* base, int64_t nb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gbb = packed::q8_block_bytes(Q4);
    constexpr int T = 2 * P;
    float32x4_t acc[4][T];
    for (int q = 0; q < 4; q++)
        for (int t = 0; t < T; t++) acc[q][t] = vdupq_n_f32(0);
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = base + size_t(b) * gbb;
        const uint8_t* qb = blk + 2 * R;
        for (int q = 0; q < 4; q++) {
            // m01[p] = [t·r0, t·r1, t'·r0, t'·r1] for rows 4q, 4q+1 and the pair's tokens t, t'; m23 rows 4q+2, 4q+3
            int32x4_t m01[P], m23[P];
            for (int p = 0; p < P; p++) m01[p] = m23[p] = vdupq_n_s32(0);
            auto step = [&](int8x16_t w0, int8x16_t w1, int e) {  // weights of elements e..e+3 and e+4..e+7
                const int8x16_t b01 =
                    vreinterpretq_s8_s32(vzip1q_s32(vreinterpretq_s32_s8(w0), vreinterpretq_s32_s8(w1)));
                const int8x16_t b23 =
                    vreinterpretq_s8_s32(vzip2q_s32(vreinterpretq_s32_s8(w0), vreinterpretq_s32_s8(w1)));
                for (int p = 0; p < P; p++) {
                    const int8x16_t av =
                        vcombine_s8(vld1_s8(aq0[2 * p] + b * 32 + e), vld1_s8(aq0[2 * p + 1] + b * 32 + e));
                    m01[p] = vmmlaq_s32(m01[p], av, b01);
                    m23[p] = vmmlaq_s32(m23[p], av, b23);
                }
            };
            if constexpr (Q4) {
                for (int g = 0; g < 4; g += 2) {
                    const uint8x16_t v0 = vld1q_u8(qb + 64 * g + 16 * q), v1 = vld1q_u8(qb + 64 * (g + 1) + 16 * q);
                    step(vreinterpretq_s8_u8(vandq_u8(v0, vdupq_n_u8(0x0F))),
                         vreinterpretq_s8_u8(vandq_u8(v1, vdupq_n_u8(0x0F))), 4 * g);
                    step(vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(v1, 4)), 16 + 4 * g);
                }
            } else {
                for (int g = 0; g < 8; g += 2) {
                    const int8x16_t w0 =
                        vreinterpretq_s8_u8(veorq_u8(vld1q_u8(qb + 64 * g + 16 * q), vdupq_n_u8(0x80)));
                    const int8x16_t w1 =
                        vreinterpretq_s8_u8(veorq_u8(vld1q_u8(qb + 64 * (g + 1) + 16 * q), vdupq_n_u8(0x80)));
                    step(w0, w1, 4 * g);
                }
            }
            const float32x4_t dw = load_h4(blk + 8 * q);
            for (int p = 0; p < P; p++)
                for (int k = 0; k < 2; k++) {
                    const int t = 2 * p + k;
                    int32x4_t si = k == 0 ? vcombine_s32(vget_low_s32(m01[p]), vget_low_s32(m23[p]))
                                          : vcombine_s32(vget_high_s32(m01[p]), vget_high_s32(m23[p]));
                    if constexpr (Q4) si = vsubq_s32(si, vdupq_n_s32(8 * a.sumrow(t0 + t)[b]));
                    acc[q][t] = vfmaq_f32(acc[q][t], vcvtq_f32_s32(si), vmulq_n_f32(dw, a.drow(t0 + t)[b]));
                }
        }
    }
    for (int t = 0; t < T; t++)
        for (int q = 0; q < 4; q++) vst1q_f32(y + int64_t(t0 + t) * ldy + row0 + 4 * q, acc[q][t]);
}
#endif

// ---- Q4_K / Q5_K ----
template <bool Q5, int T>
void q45k_tile(const uint8_t* base, int64_t nsb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gb = packed::q45k_block_bytes(Q5);
    float32x4_t acc[4][T];
    for (int q = 0; q < 4; q++)
        for (int t = 0; t < T; t++) acc[q][t] = vdupq_n_f32(0);
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t* blk = base + size_t(sb) * gb;
        for (int q = 0; q < 4; q++) {
            int32x4_t isum[T], msum[T];
            for (int t = 0; t < T; t++) isum[t] = msum[t] = vdupq_n_s32(0);
            for (int p = 0; p < 4; p++) {
                Dot4 slo[T], shi[T];
                for (int t = 0; t < T; t++) {
                    slo[t].zero();
                    shi[t].zero();
                }
                for (int g = 0; g < 8; g++) {
                    const uint8x16_t v = vld1q_u8(blk + packed::kQ45OffQ + size_t(p * 8 + g) * 64 + 16 * q);
                    uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
                    if constexpr (Q5) {  // fifth bits of sub-blocks 2p and 2p+1 (bit j of qh), moved to bit 4
                        const uint8x16_t qh = vld1q_u8(blk + packed::kQ45OffQh + size_t(g) * 64 + 16 * q);
                        lo = vorrq_u8(lo, vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(4 - 2 * p))), vdupq_n_u8(0x10)));
                        hi = vorrq_u8(hi, vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(3 - 2 * p))), vdupq_n_u8(0x10)));
                    }
                    for (int t = 0; t < T; t++) {
                        const int8_t* qa = aq0[t] + sb * QK_K + p * 64 + 4 * g;
                        slo[t].add(vreinterpretq_s8_u8(lo), bcast4(qa));
                        shi[t].add(vreinterpretq_s8_u8(hi), bcast4(qa + 32));
                    }
                }
                const uint8_t* sc = blk + packed::kQ45OffSc + 4 * q;
                const int32x4_t sc_lo =
                    vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(sc + size_t(2 * p) * R)))));
                const int32x4_t sc_hi =
                    vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(sc + size_t(2 * p + 1) * R)))));
                // (m_2p, m_2p+1) of the 4 rows, interleaved bytes
                const uint32x4_t mp =
                    vreinterpretq_u32_u16(vmovl_u8(vld1_u8(blk + packed::kQ45OffM + size_t(p) * 2 * R + 8 * q)));
                const int32x4_t m_lo = vreinterpretq_s32_u32(vandq_u32(mp, vdupq_n_u32(0xFFFF)));
                const int32x4_t m_hi = vreinterpretq_s32_u32(vshrq_n_u32(mp, 16));
                for (int t = 0; t < T; t++) {
                    isum[t] = vmlaq_s32(vmlaq_s32(isum[t], sc_lo, slo[t].get()), sc_hi, shi[t].get());
                    const int32_t* A = a.sumrow(t0 + t) + sb * 8 + 2 * p;
                    msum[t] = vmlaq_n_s32(vmlaq_n_s32(msum[t], m_lo, A[0]), m_hi, A[1]);
                }
            }
            const float32x4_t dv = load_h4(blk + packed::kQ45OffD + 8 * q),
                              mv = load_h4(blk + packed::kQ45OffDmin + 8 * q);
            for (int t = 0; t < T; t++) {
                const float da = a.drow(t0 + t)[sb * 8];
                acc[q][t] = vfmaq_f32(acc[q][t], vcvtq_f32_s32(isum[t]), vmulq_n_f32(dv, da));
                acc[q][t] = vfmsq_f32(acc[q][t], vcvtq_f32_s32(msum[t]), vmulq_n_f32(mv, da));
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int q = 0; q < 4; q++) vst1q_f32(y + int64_t(t0 + t) * ldy + row0 + 4 * q, acc[q][t]);
}

// ---- Q6_K ----
template <int T>
void q6k_tile(const uint8_t* base, int64_t nsb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    float32x4_t acc[4][T];
    for (int q = 0; q < 4; q++)
        for (int t = 0; t < T; t++) acc[q][t] = vdupq_n_f32(0);
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t* blk = base + size_t(sb) * packed::kQ6BlockBytes;
        for (int q = 0; q < 4; q++) {
            int32x4_t isum[T], osum[T];
            for (int t = 0; t < T; t++) isum[t] = osum[t] = vdupq_n_s32(0);
            for (int p = 0; p < 8; p++) {
                // (sc_2p, sc_2p+1) of the 4 rows as int16 pairs, then each as int32
                const int32x4_t scp = vreinterpretq_s32_s16(vmovl_s8(
                    vld1_s8(reinterpret_cast<const int8_t*>(blk + packed::kQ6OffSc + size_t(p) * 2 * R + 8 * q))));
                const int32x4_t sc_a = vshrq_n_s32(vshlq_n_s32(scp, 16), 16), sc_b = vshrq_n_s32(scp, 16);
                Dot4 sa[T], sbv[T];
                for (int t = 0; t < T; t++) {
                    sa[t].zero();
                    sbv[t].zero();
                }
                for (int g = 0; g < 4; g++) {
                    const uint8x16_t l = vld1q_u8(blk + packed::q6k_ql_index(p, g, 4 * q, 0));
                    const uint8x16_t h = vld1q_u8(blk + packed::q6k_qh_index(p / 2, g, 4 * q, 0));
                    // high bits of sub-blocks 2p, 2p+1: bits 0-1 and 2-3 of h (p even) or 4-5 and 6-7 (p odd), to bits 4-5
                    const uint8x16_t ha = p % 2 ? h : vshlq_n_u8(h, 4);
                    const uint8x16_t hh = p % 2 ? vshrq_n_u8(h, 2) : vshlq_n_u8(h, 2);
                    const uint8x16_t m30 = vdupq_n_u8(0x30);
                    const int8x16_t wa =
                        vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l, vdupq_n_u8(0x0F)), vandq_u8(ha, m30)));
                    const int8x16_t wb = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l, 4), vandq_u8(hh, m30)));
                    for (int t = 0; t < T; t++) {
                        const int8_t* qa = aq0[t] + sb * QK_K + p * 32 + 4 * g;
                        sa[t].add(wa, bcast4(qa));
                        sbv[t].add(wb, bcast4(qa + 16));
                    }
                }
                for (int t = 0; t < T; t++) {
                    isum[t] = vmlaq_s32(vmlaq_s32(isum[t], sc_a, sa[t].get()), sc_b, sbv[t].get());
                    const int16_t* A = a.sum16row(t0 + t) + sb * 16 + 2 * p;
                    osum[t] = vmlaq_n_s32(vmlaq_n_s32(osum[t], sc_a, A[0]), sc_b, A[1]);
                }
            }
            const float32x4_t dv = load_h4(blk + packed::kQ6OffD + 8 * q);
            for (int t = 0; t < T; t++) {
                const int32x4_t tot = vsubq_s32(isum[t], vshlq_n_s32(osum[t], 5));  // - 32 * sum sc_j A_j
                acc[q][t] = vfmaq_f32(acc[q][t], vcvtq_f32_s32(tot), vmulq_n_f32(dv, a.drow(t0 + t)[sb * 8]));
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int q = 0; q < 4; q++) vst1q_f32(y + int64_t(t0 + t) * ldy + row0 + 4 * q, acc[q][t]);
}

}  // namespace

void matmul_packed(TensorType type, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                   int64_t r0, int64_t r1) {
    if (type == TensorType::Q8_0 || type == TensorType::Q4_0) {
        const int64_t nb = cols / 32;
        const bool q4 = type == TensorType::Q4_0;
        const size_t gbb = packed::q8_block_bytes(q4);
        packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto) {
            constexpr int TN = decltype(tn)::value;
            const uint8_t* base = packed + size_t(G) * size_t(nb) * gbb;
#if defined(__ARM_FEATURE_MATMUL_INT8)
            if constexpr (TN % 2 == 0) {
                if (q4) q8_tile_mmla<true, TN / 2>(base, nb, a, t, y, ldy, G * R);
                else q8_tile_mmla<false, TN / 2>(base, nb, a, t, y, ldy, G * R);
                return;
            }
#endif
            if (q4) q8_tile<true, TN>(base, nb, a, t, y, ldy, G * R);
            else q8_tile<false, TN>(base, nb, a, t, y, ldy, G * R);
        });
        return;
    }
    const int64_t nsb = cols / QK_K;
    if (type == TensorType::Q6_K) {
        packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto) {
            q6k_tile<decltype(tn)::value>(packed + size_t(G) * size_t(nsb) * packed::kQ6BlockBytes, nsb, a, t, y, ldy,
                                          G * R);
        });
        return;
    }
    const bool q5 = type == TensorType::Q5_K;
    packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto) {
        const uint8_t* base = packed + size_t(G) * size_t(nsb) * packed::q45k_block_bytes(q5);
        if (q5) q45k_tile<true, decltype(tn)::value>(base, nsb, a, t, y, ldy, G * R);
        else q45k_tile<false, decltype(tn)::value>(base, nsb, a, t, y, ldy, G * R);
    });
}

}  // namespace tandem::TD_ISA
