// The 512-bit AVX512-VNNI kernels over the 16-row packed layouts (quant/packed_layout.h): one 64-byte load holds
// four consecutive weights of each of the 16 rows, and vpdpbusd against the four matching activation bytes
// (broadcast) accumulates the 16 rows' dot products in one register: no horizontal sums, one scale multiply per
// 16 rows. All sums are exact integers: the unsigned offsets (Q8_0 +128, Q4_0 +8, Q6_K +32) and the K-quant
// mins come back out through the activation block sums (vpdpwssd against ActRows::qsum / qsum16).
// A per-ISA unit (backend/cpu/isa.h), built only for the avx512vnni level.
//
// Why 16 rows in 512-bit registers rather than 8 in 256-bit ones: on Zen 4 both run vpdpbusd at the same MACs
// per cycle, but a verification batch issues one activation broadcast per vpdpbusd and a scale multiply per
// block and token, and with 8 rows those instructions alone kept the front end as busy as the multiplier.
#include "backend/cpu/isa_unit.h"

#include <immintrin.h>

#include "backend/cpu/isa_kernels.h"
#include "backend/cpu/x86/x86_util.h"
#include "quant/blocks.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512BW__)
#error "packed_vnni512.cpp is built for the avx512vnni level only"
#endif
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_cvtepi32_ps / _mm512_cvtph_ps pass an intentionally undefined vector as the unused merge
// source, which -Wmaybe-uninitialized reports as a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace tandem::TD_ISA {

namespace {

constexpr int R = packed::R;

// y[t][row0 .. row0+15] for tokens t0 .. t0+T-1, over one group's nb blocks.
template <bool Q4, int T, bool PF>
void group_tile(const uint8_t* base, int64_t nb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gbb = packed::q8_block_bytes(Q4);
    constexpr int32_t offset = Q4 ? 8 : 128;
    // Independent accumulator chains: vpdpbusd has a latency of several cycles, so one chain of eight per
    // token would leave the unit idle; with 4 or more tokens the tokens themselves are the independent chains.
    constexpr int C = T == 1 ? 4 : T == 2 ? 2 : 1;
    static_assert(T <= 8, "registers: 8 weight + T integer + T float accumulators");
    __m512 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int8_t* aq[T];
    const float* ad[T];
    const int32_t* as[T];
    for (int t = 0; t < T; t++) {
        aq[t] = a.qrow(t0 + t);
        ad[t] = a.drow(t0 + t);
        as[t] = a.sumrow(t0 + t);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = base + size_t(b) * gbb;
        if constexpr (PF) prefetch_stream(blk, gbb);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
        const uint8_t* qb = blk + 2 * R;
        __m512i w[8];
        if constexpr (Q4) {
            for (int g = 0; g < 4; g++) {
                const __m512i v = _mm512_loadu_si512(qb + 64 * g);
                w[g] = _mm512_and_si512(v, m4);
                w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
        } else {
            for (int g = 0; g < 8; g++) w[g] = _mm512_loadu_si512(qb + 64 * g);
        }
        // The weights carry +offset (unsigned for vpdpbusd); starting the sum at -offset * sum(a) removes it.
        // Weight group outer, token inner: neighbouring instructions are independent.
        __m512i s[T][C];
        for (int t = 0; t < T; t++) {
            s[t][0] = _mm512_set1_epi32(-offset * as[t][b]);
            for (int c = 1; c < C; c++) s[t][c] = _mm512_setzero_si512();
        }
        for (int g = 0; g < 8; g++)
            for (int t = 0; t < T; t++) {
                const int32_t* a4 = reinterpret_cast<const int32_t*>(aq[t] + b * 32);
                s[t][g % C] = _mm512_dpbusd_epi32(s[t][g % C], w[g], _mm512_set1_epi32(a4[g]));
            }
        for (int t = 0; t < T; t++) {
            for (int c = 1; c < C; c++) s[t][0] = _mm512_add_epi32(s[t][0], s[t][c]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][0]), _mm512_mul_ps(dw, _mm512_set1_ps(ad[t][b])), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + int64_t(t0 + t) * ldy + row0, acc[t]);
}

template <bool Q4>
void packed_rows(const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = cols / 32;
    constexpr size_t gbb = packed::q8_block_bytes(Q4);
    packed_tiles<8>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        group_tile<Q4, decltype(tn)::value, decltype(pf)::value>(packed + size_t(G) * size_t(nb) * gbb, nb, a, t, y,
                                                                 ldy, G * R);
    });
}

// y[t][row0 .. row0+15] for tokens t0 .. t0+T-1, over one group's nsb super-blocks.
// Bit b (0..7) of every byte moved to bit 4 (16-bit shifts; the bits that cross a byte boundary are masked off
// by the caller's 0x10 mask).
inline __m512i bit_to_4(__m512i h, int b) {
    return b <= 4 ? _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - b)) : _mm512_srl_epi16(h, _mm_cvtsi32_si128(b - 4));
}

template <bool Q5, int T, bool PF>
void q45k_tile(const uint8_t* base, int64_t nsb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t kGroupBytes = packed::q45k_block_bytes(Q5);
    constexpr int C = T == 1 ? 2 : 1;  // independent vpdpbusd chains per token and sub-block
    __m512 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = base + size_t(s) * kGroupBytes;
        if constexpr (PF) prefetch_stream(blk, kGroupBytes);
        __m512i isum[T], msum[T];
        for (int t = 0; t < T; t++) {
            isum[t] = _mm512_setzero_si512();
            msum[t] = _mm512_setzero_si512();
        }
        for (int p = 0; p < 4; p++) {
            __m512i slo[T][C], shi[T][C];
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    slo[t][c] = _mm512_setzero_si512();
                    shi[t][c] = _mm512_setzero_si512();
                }
            for (int g = 0; g < 8; g++) {
                const __m512i v = _mm512_loadu_si512(blk + packed::kQ45OffQ + size_t(p * 8 + g) * 64);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if constexpr (Q5) {  // the fifth bits of sub-blocks 2p and 2p+1
                    const __m512i h = _mm512_loadu_si512(blk + packed::kQ45OffQh + size_t(g) * 64);
                    lo = _mm512_or_si512(lo, _mm512_and_si512(bit_to_4(h, 2 * p), m10));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(bit_to_4(h, 2 * p + 1), m10));
                }
                for (int t = 0; t < T; t++) {
                    const int8_t* qa = a.qrow(t0 + t) + s * QK_K + p * 64 + 4 * g;
                    slo[t][g % C] = _mm512_dpbusd_epi32(slo[t][g % C], lo,
                                                        _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qa)));
                    shi[t][g % C] = _mm512_dpbusd_epi32(shi[t][g % C], hi,
                                                        _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qa + 32)));
                }
            }
            const __m512i sc_lo = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + packed::kQ45OffSc + size_t(2 * p) * R)));
            const __m512i sc_hi = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + packed::kQ45OffSc + size_t(2 * p + 1) * R)));
            const __m512i mp = _mm512_cvtepu8_epi16(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + packed::kQ45OffM + size_t(p) * 2 * R)));
            for (int t = 0; t < T; t++) {
                __m512i sl = slo[t][0], sh = shi[t][0];
                if constexpr (C > 1) {
                    sl = _mm512_add_epi32(sl, slo[t][1]);
                    sh = _mm512_add_epi32(sh, shi[t][1]);
                }
                isum[t] = _mm512_add_epi32(
                    isum[t], _mm512_add_epi32(_mm512_mullo_epi32(sc_lo, sl), _mm512_mullo_epi32(sc_hi, sh)));
                const int32_t* A = a.sumrow(t0 + t) + s * 8 + 2 * p;
                const int32_t pair = int32_t((uint32_t(A[0]) & 0xFFFFu) | (uint32_t(A[1]) << 16));
                msum[t] = _mm512_dpwssd_epi32(msum[t], mp, _mm512_set1_epi32(pair));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + packed::kQ45OffD)));
        const __m512 mv =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + packed::kQ45OffDmin)));
        for (int t = 0; t < T; t++) {
            const __m512 da = _mm512_set1_ps(a.drow(t0 + t)[s * 8]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, da), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(mv, da), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + int64_t(t0 + t) * ldy + row0, acc[t]);
}

void packed_q45k(TensorType type, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                 int64_t r0, int64_t r1) {
    const bool q5 = type == TensorType::Q5_K;
    const int64_t nsb = cols / QK_K;
    packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        const uint8_t* base = packed + size_t(G) * size_t(nsb) * packed::q45k_block_bytes(q5);
        // Q5_K's single-token tiles prefetch too (measured: tg 33 against 22 t/s without; for Q4_K it costs 12%):
        // its two streams within each block, weights and fifth bits, seem to defeat the hardware prefetcher.
        if (q5 && t == 0) q45k_tile<true, decltype(tn)::value, true>(base, nsb, a, t, y, ldy, G * R);
        else if (q5) q45k_tile<true, decltype(tn)::value, decltype(pf)::value>(base, nsb, a, t, y, ldy, G * R);
        else q45k_tile<false, decltype(tn)::value, decltype(pf)::value>(base, nsb, a, t, y, ldy, G * R);
    });
}

template <int T, bool PF>
void q6k_tile(const uint8_t* base, int64_t nsb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr int C = T == 1 ? 2 : 1;  // independent vpdpbusd chains per token and sub-block
    __m512 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = base + size_t(s) * packed::kQ6BlockBytes;
        if constexpr (PF) prefetch_stream(blk, packed::kQ6BlockBytes);
        __m512i isum[T], osum[T];
        for (int t = 0; t < T; t++) {
            isum[t] = _mm512_setzero_si512();
            osum[t] = _mm512_setzero_si512();
        }
        for (int p = 0; p < 8; p++) {
            // (sc_2p, sc_2p+1) per row as int16 pairs; each as int32 for the multiply.
            const __m512i scp = _mm512_cvtepi8_epi16(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + packed::kQ6OffSc + size_t(p) * 2 * R)));
            const __m512i sc_a = _mm512_srai_epi32(_mm512_slli_epi32(scp, 16), 16), sc_b = _mm512_srai_epi32(scp, 16);
            __m512i Sa[T][C], Sb[T][C];
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    Sa[t][c] = _mm512_setzero_si512();
                    Sb[t][c] = _mm512_setzero_si512();
                }
            for (int g = 0; g < 4; g++) {
                // Sub-blocks 2p and 2p+1 are 4Q+2(p%2) and 4Q+2(p%2)+1 of quad Q = p/2: their high bits sit at bits
                // 0-1 and 2-3 (p even) or 4-5 and 6-7 (p odd) of each qh byte, moved to bits 4-5 (16-bit shifts;
                // the bits crossing a byte boundary are masked off).
                const __m512i l = _mm512_loadu_si512(blk + packed::q6k_ql_index(p, g, 0, 0));
                const __m512i h = _mm512_loadu_si512(blk + packed::q6k_qh_index(p / 2, g, 0, 0));
                const __m512i ha = p % 2 ? h : _mm512_slli_epi16(h, 4),
                              hb = p % 2 ? _mm512_srli_epi16(h, 2) : _mm512_slli_epi16(h, 2);
                const __m512i wa = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(ha, m30));
                const __m512i wb =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(hb, m30));
                for (int t = 0; t < T; t++) {
                    const int8_t* qa = a.qrow(t0 + t) + s * QK_K + p * 32 + 4 * g;
                    Sa[t][g % C] =
                        _mm512_dpbusd_epi32(Sa[t][g % C], wa, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qa)));
                    Sb[t][g % C] = _mm512_dpbusd_epi32(Sb[t][g % C], wb,
                                                       _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qa + 16)));
                }
            }
            for (int t = 0; t < T; t++) {
                __m512i sa = Sa[t][0], sb = Sb[t][0];
                if constexpr (C > 1) {
                    sa = _mm512_add_epi32(sa, Sa[t][1]);
                    sb = _mm512_add_epi32(sb, Sb[t][1]);
                }
                isum[t] = _mm512_add_epi32(
                    isum[t], _mm512_add_epi32(_mm512_mullo_epi32(sc_a, sa), _mm512_mullo_epi32(sc_b, sb)));
                const int16_t* A = a.sum16row(t0 + t) + s * 16 + 2 * p;
                const int32_t pair = int32_t((uint32_t(uint16_t(A[0]))) | (uint32_t(uint16_t(A[1])) << 16));
                osum[t] = _mm512_dpwssd_epi32(osum[t], scp, _mm512_set1_epi32(pair));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + packed::kQ6OffD)));
        for (int t = 0; t < T; t++) {
            const __m512i tot = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(osum[t], 5));  // - 32 * sum sc_j A_j
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dv, _mm512_set1_ps(a.drow(t0 + t)[s * 8])),
                                     acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + int64_t(t0 + t) * ldy + row0, acc[t]);
}

void packed_q6k(const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nsb = cols / QK_K;
    packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        q6k_tile<decltype(tn)::value, decltype(pf)::value>(packed + size_t(G) * size_t(nsb) * packed::kQ6BlockBytes,
                                                           nsb, a, t, y, ldy, G * R);
    });
}

}  // namespace

void matmul_packed(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                   int64_t r0, int64_t r1) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) packed_q45k(t, packed, cols, a, y, ldy, r0, r1);
    else if (t == TensorType::Q6_K) packed_q6k(packed, cols, a, y, ldy, r0, r1);
    else if (t == TensorType::Q4_0) packed_rows<true>(packed, cols, a, y, ldy, r0, r1);
    else packed_rows<false>(packed, cols, a, y, ldy, r0, r1);
}

}  // namespace tandem::TD_ISA
