// The 256-bit kernels over the 16-row packed layouts (quant/packed_layout.h) for CPUs without AVX512-VNNI
// (Haswell to Comet Lake, Zen 1-3; also built for the avx512 level, where the compiler gives them EVEX encodings
// and 32 registers). A per-ISA unit (backend/cpu/isa.h).
//
// A 64-byte line of a group holds four consecutive weights of each of the 16 rows: rows 0-7 in its first 32
// bytes, rows 8-15 in the second, so each half is one 256-bit register of 8 rows x 4 weights, and vpmaddubsw
// against the four matching activation bytes (broadcast) followed by vpmaddwd gives the 8 rows' partial dot
// products with no horizontal sums. vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pairs:
//  - Q4_0 / Q4_K nibbles (0..15) and Q5_K values (0..31), Q6_K values (0..63) are unsigned already; a pair is at
//    most 2 * 63 * 127 = 16002, so int16 lanes accumulate 8 (4-bit), 4 (5-bit) or 2 (6-bit) pairs exactly before
//    vpmaddwd widens them. The offsets (Q4_0's 8, Q6_K's 32) and the K-quant mins come back through the
//    activation block sums, as in the AVX512-VNNI kernels.
//  - Q8_0 is signed: its sign moves onto the activations (vpsignb) and |w| is the unsigned operand, at most
//    2 * 128 * 127 = 32512 per pair: exact.
// With AVX-VNNI (the avxvnni level) vpdpbusd replaces each vpmaddubsw + vpmaddwd pair (and Q8_0's sign trick).
// Every tile walks the blocks once and meets both halves of each line in turn, so a group streams from memory
// once per tile; float accumulators per (half, token) take one multiply-add per block.
#include "backend/cpu/isa_unit.h"

#include <immintrin.h>

#include "backend/cpu/isa_kernels.h"
#include "backend/cpu/x86/x86_util.h"
#include "quant/blocks.h"

namespace tandem::TD_ISA {

namespace {

constexpr int R = packed::R;

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
inline __m256i widen_pairs(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// The avxvnni level (AVX-VNNI, the VEX form of vpdpbusd: Alder Lake and later, Zen 5): unsigned weights times
// signed activations summed into int32 in one instruction, no int16 stage and no sign trick.
#if defined(__AVXVNNI__)
constexpr bool kVnni = true;
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#else
constexpr bool kVnni = false;
inline __m256i dpbusd(__m256i acc, __m256i, __m256i) { return acc; }  // not reached: every use is under kVnni
#endif
// Eight half-precision scales (rows 8h .. 8h+7) as floats.
inline __m256 load_d8(const uint8_t* d16, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d16 + 16 * h)));
}

// ---- Q8_0 / Q4_0: y[t][row0 .. row0+15] for tokens t0 .. t0+T-1 over one group's nb blocks ----
template <bool Q4, int T, bool PF>
void q8_tile(const uint8_t* base, int64_t nb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gbb = packed::q8_block_bytes(Q4);
    __m256 acc[2][T];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < T; t++) acc[h][t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(char(0x80));
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = base + size_t(b) * gbb;
        if constexpr (PF) prefetch_stream(blk, gbb);
        const uint8_t* qb = blk + 2 * R;
        // Both halves of each line in the same step, so each activation broadcast serves 16 rows.
        __m256i s[2][T];
        if constexpr (kVnni) {
            // the stored weights are value + 128 (Q8_0) or value + 8 (Q4_0 nibbles): start at -offset * sum(a)
            for (int t = 0; t < T; t++) s[0][t] = s[1][t] = _mm256_set1_epi32(-(Q4 ? 8 : 128) * a.sumrow(t0 + t)[b]);
#pragma GCC unroll 1
            for (int g = 0; g < (Q4 ? 4 : 8); g++) {
                const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * g));
                const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * g + 32));
                if constexpr (Q4) {
                    const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
                    const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
                    for (int t = 0; t < T; t++) {
                        const __m256i al = bcast4(aq0[t] + b * 32 + 4 * g), ah = bcast4(aq0[t] + b * 32 + 16 + 4 * g);
                        s[0][t] = dpbusd(dpbusd(s[0][t], lo0, al), hi0, ah);
                        s[1][t] = dpbusd(dpbusd(s[1][t], lo1, al), hi1, ah);
                    }
                } else {
                    for (int t = 0; t < T; t++) {
                        const __m256i av = bcast4(aq0[t] + b * 32 + 4 * g);
                        s[0][t] = dpbusd(s[0][t], v0, av);
                        s[1][t] = dpbusd(s[1][t], v1, av);
                    }
                }
            }
        } else if constexpr (Q4) {
            __m256i p[2][T];
            for (int t = 0; t < T; t++) p[0][t] = p[1][t] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int g = 0; g < 4; g++) {
                const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * g));
                const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * g + 32));
                const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
                const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
                for (int t = 0; t < T; t++) {
                    const __m256i al = bcast4(aq0[t] + b * 32 + 4 * g), ah = bcast4(aq0[t] + b * 32 + 16 + 4 * g);
                    p[0][t] = _mm256_add_epi16(
                        p[0][t], _mm256_add_epi16(_mm256_maddubs_epi16(lo0, al), _mm256_maddubs_epi16(hi0, ah)));
                    p[1][t] = _mm256_add_epi16(
                        p[1][t], _mm256_add_epi16(_mm256_maddubs_epi16(lo1, al), _mm256_maddubs_epi16(hi1, ah)));
                }
            }
            // the nibbles are value + 8: remove 8 * (sum of the block's activations)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < 2; h++)
                    s[h][t] = _mm256_sub_epi32(widen_pairs(p[h][t]), _mm256_set1_epi32(8 * a.sumrow(t0 + t)[b]));
        } else {
            for (int t = 0; t < T; t++) s[0][t] = s[1][t] = _mm256_setzero_si256();
                // not unrolled: unrolled, GCC schedules all the multiplies first and spills their results
#pragma GCC unroll 1
            for (int g = 0; g < 8; g++) {
                const __m256i w0 =
                    _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * g)), flip);
                const __m256i w1 =
                    _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * g + 32)), flip);
                const __m256i aw0 = _mm256_sign_epi8(w0, w0), aw1 = _mm256_sign_epi8(w1, w1);
                for (int t = 0; t < T; t++) {
                    const __m256i av = bcast4(aq0[t] + b * 32 + 4 * g);
                    s[0][t] =
                        _mm256_add_epi32(s[0][t], widen_pairs(_mm256_maddubs_epi16(aw0, _mm256_sign_epi8(av, w0))));
                    s[1][t] =
                        _mm256_add_epi32(s[1][t], widen_pairs(_mm256_maddubs_epi16(aw1, _mm256_sign_epi8(av, w1))));
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 dw = load_d8(blk, h);
            for (int t = 0; t < T; t++)
                acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h][t]),
                                            _mm256_mul_ps(dw, _mm256_set1_ps(a.drow(t0 + t)[b])), acc[h][t]);
        }
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + int64_t(t0 + t) * ldy + row0 + 8 * h, acc[h][t]);
}

// ---- Q4_K / Q5_K ----
template <bool Q5, int T, bool PF>
void q45k_tile(const uint8_t* base, int64_t nsb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gb = packed::q45k_block_bytes(Q5);
    // int16 pairs accumulate exactly over 8 groups of 4-bit weights, 4 of 5-bit ones
    constexpr int kWiden = Q5 ? 4 : 8;
    __m256 acc[2][T];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < T; t++) acc[h][t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t* blk = base + size_t(sb) * gb;
        if constexpr (PF) prefetch_stream(blk, gb);
        for (int h = 0; h < 2; h++) {
            __m256i isum[T], msum[T];
            for (int t = 0; t < T; t++) {
                isum[t] = _mm256_setzero_si256();
                msum[t] = _mm256_setzero_si256();
            }
            for (int p = 0; p < 4; p++) {
                __m256i Slo[T], Shi[T], plo[T], phi[T];
                for (int t = 0; t < T; t++) {
                    Slo[t] = Shi[t] = _mm256_setzero_si256();
                    plo[t] = phi[t] = _mm256_setzero_si256();
                }
                for (int g0 = 0; g0 < 8; g0 += kWiden) {
#pragma GCC unroll 1
                    for (int g = g0; g < g0 + kWiden; g++) {
                        const __m256i v = _mm256_loadu_si256(
                            reinterpret_cast<const __m256i*>(blk + packed::kQ45OffQ + size_t(p * 8 + g) * 64 + 32 * h));
                        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                        if constexpr (Q5) {  // fifth bits of sub-blocks 2p and 2p+1, moved to bit 4
                            const __m256i qh = _mm256_loadu_si256(
                                reinterpret_cast<const __m256i*>(blk + packed::kQ45OffQh + size_t(g) * 64 + 32 * h));
                            const __m256i bl = 2 * p <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * p))
                                                          : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p - 4));
                            const __m256i bh = 2 * p + 1 <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(3 - 2 * p))
                                                              : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p - 3));
                            lo = _mm256_or_si256(lo, _mm256_and_si256(bl, m10));
                            hi = _mm256_or_si256(hi, _mm256_and_si256(bh, m10));
                        }
                        for (int t = 0; t < T; t++) {
                            const int8_t* qa = aq0[t] + sb * QK_K + p * 64 + 4 * g;
                            if constexpr (kVnni) {
                                Slo[t] = dpbusd(Slo[t], lo, bcast4(qa));
                                Shi[t] = dpbusd(Shi[t], hi, bcast4(qa + 32));
                            } else {
                                plo[t] = _mm256_add_epi16(plo[t], _mm256_maddubs_epi16(lo, bcast4(qa)));
                                phi[t] = _mm256_add_epi16(phi[t], _mm256_maddubs_epi16(hi, bcast4(qa + 32)));
                            }
                        }
                    }
                    if constexpr (!kVnni)
                        for (int t = 0; t < T; t++) {
                            Slo[t] = _mm256_add_epi32(Slo[t], widen_pairs(plo[t]));
                            Shi[t] = _mm256_add_epi32(Shi[t], widen_pairs(phi[t]));
                            plo[t] = phi[t] = _mm256_setzero_si256();
                        }
                }
                const __m256i sc_lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                    reinterpret_cast<const __m128i*>(blk + packed::kQ45OffSc + size_t(2 * p) * R + 8 * h)));
                const __m256i sc_hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                    reinterpret_cast<const __m128i*>(blk + packed::kQ45OffSc + size_t(2 * p + 1) * R + 8 * h)));
                // (m_2p, m_2p+1) of the 8 rows as int16 pairs
                const __m256i mp = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(blk + packed::kQ45OffM + size_t(p) * 2 * R + 16 * h)));
                for (int t = 0; t < T; t++) {
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_mullo_epi32(sc_lo, Slo[t]),
                                                                         _mm256_mullo_epi32(sc_hi, Shi[t])));
                    const int32_t* A = a.sumrow(t0 + t) + sb * 8 + 2 * p;
                    const int32_t pair = int32_t((uint32_t(A[0]) & 0xFFFFu) | (uint32_t(A[1]) << 16));
                    msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mp, _mm256_set1_epi32(pair)));
                }
            }
            const __m256 dv = load_d8(blk + packed::kQ45OffD, h), mv = load_d8(blk + packed::kQ45OffDmin, h);
            for (int t = 0; t < T; t++) {
                const __m256 da = _mm256_set1_ps(a.drow(t0 + t)[sb * 8]);
                acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dv, da), acc[h][t]);
                acc[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[t]), _mm256_mul_ps(mv, da), acc[h][t]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + int64_t(t0 + t) * ldy + row0 + 8 * h, acc[h][t]);
}

// ---- Q6_K ----
template <int T, bool PF>
void q6k_tile(const uint8_t* base, int64_t nsb, const ActRows& a, int t0, float* y, int64_t ldy, int64_t row0) {
    __m256 acc[2][T];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < T; t++) acc[h][t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const int8_t* aq0[T];
    for (int t = 0; t < T; t++) aq0[t] = a.qrow(t0 + t);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t* blk = base + size_t(sb) * packed::kQ6BlockBytes;
        if constexpr (PF) prefetch_stream(blk, packed::kQ6BlockBytes);
        for (int h = 0; h < 2; h++) {
            __m256i isum[T], osum[T];
            for (int t = 0; t < T; t++) {
                isum[t] = _mm256_setzero_si256();
                osum[t] = _mm256_setzero_si256();
            }
            for (int p = 0; p < 8; p++) {
                // (sc_2p, sc_2p+1) of the 8 rows as int16 pairs, and each as int32
                const __m256i scp = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(blk + packed::kQ6OffSc + size_t(p) * 2 * R + 16 * h)));
                const __m256i sc_a = _mm256_srai_epi32(_mm256_slli_epi32(scp, 16), 16),
                              sc_b = _mm256_srai_epi32(scp, 16);
                __m256i Sa[T], Sb[T];
                for (int t = 0; t < T; t++) Sa[t] = Sb[t] = _mm256_setzero_si256();
                for (int g = 0; g < 4; g += 2) {  // two groups of 6-bit weights per int16 accumulation
                    __m256i pa[T], pb[T];
                    for (int t = 0; t < T; t++) pa[t] = pb[t] = _mm256_setzero_si256();
                    for (int gg = g; gg < g + 2; gg++) {
                        const __m256i l = _mm256_loadu_si256(
                            reinterpret_cast<const __m256i*>(blk + packed::q6k_ql_index(p, gg, 8 * h, 0)));
                        const __m256i hb = _mm256_loadu_si256(
                            reinterpret_cast<const __m256i*>(blk + packed::q6k_qh_index(p / 2, gg, 8 * h, 0)));
                        const __m256i ha = p % 2 ? hb : _mm256_slli_epi16(hb, 4);
                        const __m256i hh = p % 2 ? _mm256_srli_epi16(hb, 2) : _mm256_slli_epi16(hb, 2);
                        const __m256i wa = _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_and_si256(ha, m30));
                        const __m256i wb =
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), m4), _mm256_and_si256(hh, m30));
                        for (int t = 0; t < T; t++) {
                            const int8_t* qa = aq0[t] + sb * QK_K + p * 32 + 4 * gg;
                            if constexpr (kVnni) {
                                Sa[t] = dpbusd(Sa[t], wa, bcast4(qa));
                                Sb[t] = dpbusd(Sb[t], wb, bcast4(qa + 16));
                            } else {
                                pa[t] = _mm256_add_epi16(pa[t], _mm256_maddubs_epi16(wa, bcast4(qa)));
                                pb[t] = _mm256_add_epi16(pb[t], _mm256_maddubs_epi16(wb, bcast4(qa + 16)));
                            }
                        }
                    }
                    if constexpr (!kVnni)
                        for (int t = 0; t < T; t++) {
                            Sa[t] = _mm256_add_epi32(Sa[t], widen_pairs(pa[t]));
                            Sb[t] = _mm256_add_epi32(Sb[t], widen_pairs(pb[t]));
                        }
                }
                for (int t = 0; t < T; t++) {
                    isum[t] = _mm256_add_epi32(
                        isum[t], _mm256_add_epi32(_mm256_mullo_epi32(sc_a, Sa[t]), _mm256_mullo_epi32(sc_b, Sb[t])));
                    const int16_t* A = a.sum16row(t0 + t) + sb * 16 + 2 * p;
                    const int32_t pair = int32_t(uint32_t(uint16_t(A[0])) | (uint32_t(uint16_t(A[1])) << 16));
                    osum[t] = _mm256_add_epi32(osum[t], _mm256_madd_epi16(scp, _mm256_set1_epi32(pair)));
                }
            }
            const __m256 dv = load_d8(blk + packed::kQ6OffD, h);
            for (int t = 0; t < T; t++) {
                const __m256i tot = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(osum[t], 5));  // - 32 * sum sc_j A_j
                acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot),
                                            _mm256_mul_ps(dv, _mm256_set1_ps(a.drow(t0 + t)[sb * 8])), acc[h][t]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + int64_t(t0 + t) * ldy + row0 + 8 * h, acc[h][t]);
}

}  // namespace

#if !defined(__AVX512VNNI__)  // the avx512vnni level has its 512-bit kernels (packed_vnni512.cpp)
void matmul_packed(TensorType type, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                   int64_t r0, int64_t r1) {
    if (type == TensorType::Q8_0 || type == TensorType::Q4_0) {
        const int64_t nb = cols / 32;
        const size_t gbb = packed::q8_block_bytes(type == TensorType::Q4_0);
        packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
            const uint8_t* base = packed + size_t(G) * size_t(nb) * gbb;
            if (type == TensorType::Q4_0)
                q8_tile<true, decltype(tn)::value, decltype(pf)::value>(base, nb, a, t, y, ldy, G * R);
            else q8_tile<false, decltype(tn)::value, decltype(pf)::value>(base, nb, a, t, y, ldy, G * R);
        });
        return;
    }
    const int64_t nsb = cols / QK_K;
    if (type == TensorType::Q6_K) {
        packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
            q6k_tile<decltype(tn)::value, decltype(pf)::value>(packed + size_t(G) * size_t(nsb) * packed::kQ6BlockBytes,
                                                               nsb, a, t, y, ldy, G * R);
        });
        return;
    }
    const bool q5 = type == TensorType::Q5_K;
    packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        const uint8_t* base = packed + size_t(G) * size_t(nsb) * packed::q45k_block_bytes(q5);
        if (q5) q45k_tile<true, decltype(tn)::value, decltype(pf)::value>(base, nsb, a, t, y, ldy, G * R);
        else q45k_tile<false, decltype(tn)::value, decltype(pf)::value>(base, nsb, a, t, y, ldy, G * R);
    });
}
#endif

}  // namespace tandem::TD_ISA
