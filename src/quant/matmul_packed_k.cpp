// Q4_K and Q5_K weights repacked at load into groups of R = 16 interleaved rows for the AVX512-VNNI kernel.
//
// A Q4_K super-block holds 256 weights in 8 sub-blocks j of 32: w = d * sc_j * q - dmin * m_j, q in 0..15, with
// 6-bit sc_j, m_j; Q5_K is the same with q in 0..31 (a fifth bit per weight). Against activations a = da * qa (one da per super-block, integer qa) a row's dot product is
//   da * ( d * sum_j sc_j * S_j  -  dmin * sum_j m_j * A_j ),   S_j = sum_{i in j} q_i qa_i,  A_j = sum_{i in j} qa_i,
// all sums exact in 32-bit integers. Packed layout, per group of 16 rows and super-block (2368 bytes, 2.8% more
// than the 16 rows' 2304):
//   uint16 d[16], dmin[16]        the rows' half scales
//   uint8  sc[8][16]              sc[j][row]
//   uint8  m[4][16][2]            m[p][row] = (m_2p, m_2p+1): one vpdpwssd per sub-block pair
//   uint8  q[4][8][16][4]         q[p][g][row][k]: low nibble = weight 4g+k of sub-block 2p, high nibble = the
//                                 same of sub-block 2p+1 (this is Q4_K's own nibble pairing, so a plain copy)
//   Q5_K only: uint8 qh[8][16][4]  qh[g][row][k]: bit j = fifth bit of weight 4g+k of sub-block j (Q5_K's own
//                                 qh bytes, copied), 512 bytes more (2880, against 2816 for the 16 rows' blocks)
// so one 64-byte load feeds two vpdpbusd (16 rows x 4 weights each) after a mask and a shift.
#include "quant/matmul_packed_k.h"

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/matmul_q8.h"
#include "quant/packed_driver.h"
#include "tandem/error.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tandem {

namespace {
constexpr int R = kPackedRows;
constexpr size_t kOffD = 0, kOffDmin = 2 * R, kOffSc = 4 * R, kOffM = kOffSc + 8 * R, kOffQ = kOffM + 8 * R;
constexpr size_t kOffQh = kOffQ + 4 * 8 * R * 4;
constexpr size_t group_bytes(bool q5) { return q5 ? kOffQh + 8 * R * 4 : kOffQh; }  // 2880 : 2368
static_assert(group_bytes(false) == 2368 && group_bytes(true) == 2880);

const uint8_t* group_block(bool q5, const uint8_t* packed, int64_t nsb, int64_t G, int64_t s) {
    return packed + (size_t(G) * size_t(nsb) + size_t(s)) * group_bytes(q5);
}
int q_at(bool q5, const uint8_t* blk, int row, int j, int i) {  // weight i (0..31) of sub-block j
    const uint8_t byte = blk[kOffQ + ((size_t(j / 2) * 8 + size_t(i / 4)) * R + size_t(row)) * 4 + size_t(i % 4)];
    const int lo = j % 2 == 0 ? (byte & 0xF) : (byte >> 4);
    if (!q5) return lo;
    return lo | (((blk[kOffQh + (size_t(i / 4) * R + size_t(row)) * 4 + size_t(i % 4)] >> j) & 1) << 4);
}
bool is_q5(TensorType t) {
    TD_ASSERT(t == TensorType::Q4_K || t == TensorType::Q5_K);
    return t == TensorType::Q5_K;
}
}  // namespace

size_t packed_bytes_q45k(TensorType t, int64_t rows, int64_t cols) {
    return size_t(rows / R) * size_t(cols / QK_K) * group_bytes(is_q5(t));
}

void repack_rows_q45k(TensorType t, const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst) {
    TD_ASSERT(rows % R == 0 && cols % QK_K == 0);
    const bool q5 = is_q5(t);
    const int64_t nsb = cols / QK_K;
    for (int64_t G = 0; G < rows / R; G++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t* out = dst + (size_t(G) * size_t(nsb) + size_t(s)) * group_bytes(q5);
            for (int r = 0; r < R; r++) {
                const uint8_t* row = src + size_t(G * R + r) * row_stride;
                uint16_t d, dmin;
                const uint8_t *scales, *qs;
                if (q5) {
                    const block_q5_K* x = reinterpret_cast<const block_q5_K*>(row) + s;
                    d = x->d, dmin = x->dmin, scales = x->scales, qs = x->qs;
                    for (int i = 0; i < 32; i++) out[kOffQh + (size_t(i / 4) * R + size_t(r)) * 4 + size_t(i % 4)] = x->qh[i];
                } else {
                    const block_q4_K* x = reinterpret_cast<const block_q4_K*>(row) + s;
                    d = x->d, dmin = x->dmin, scales = x->scales, qs = x->qs;
                }
                reinterpret_cast<uint16_t*>(out + kOffD)[r] = d;
                reinterpret_cast<uint16_t*>(out + kOffDmin)[r] = dmin;
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, m;
                    get_scale_min_k4(j, scales, &sc, &m);
                    out[kOffSc + size_t(j) * R + size_t(r)] = sc;
                    out[kOffM + (size_t(j / 2) * R + size_t(r)) * 2 + size_t(j % 2)] = m;
                }
                for (int p = 0; p < 4; p++)
                    for (int g = 0; g < 8; g++)
                        for (int k = 0; k < 4; k++) out[kOffQ + ((size_t(p) * 8 + size_t(g)) * R + size_t(r)) * 4 + size_t(k)] = qs[32 * p + 4 * g + k];
            }
        }
}

void dequantize_packed_row_q45k(TensorType t, const uint8_t* packed, int64_t cols, int64_t r, float* out) {
    const bool q5 = is_q5(t);
    const int64_t nsb = cols / QK_K;
    const int row = int(r % R);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = group_block(q5, packed, nsb, r / R, s);
        const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffD)[row]);
        const float dmin = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffDmin)[row]);
        for (int j = 0; j < 8; j++) {
            const float sc = d * blk[kOffSc + size_t(j) * R + size_t(row)];
            const float m = dmin * blk[kOffM + (size_t(j / 2) * R + size_t(row)) * 2 + size_t(j % 2)];
            for (int i = 0; i < 32; i++) out[s * QK_K + j * 32 + i] = sc * float(q_at(q5, blk, row, j, i)) - m;
        }
    }
}

void matmul_packed_ref_q45k(TensorType t, const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy,
                            int64_t r0, int64_t r1) {
    const bool q5 = is_q5(t);
    const int64_t nsb = cols / QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const int row = int(r % R);
        for (int tk = 0; tk < a.n_rows; tk++) {
            float acc = 0;
            for (int64_t s = 0; s < nsb; s++) {
                const uint8_t* blk = group_block(q5, packed, nsb, r / R, s);
                const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffD)[row]);
                const float dmin = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffDmin)[row]);
                // Each 32-element block keeps its own activation scale (equal within a super-block for group 256).
                for (int j = 0; j < 8; j++) {
                    const int8_t* qa = a.qrow(tk) + s * QK_K + j * 32;
                    int S = 0;
                    for (int i = 0; i < 32; i++) S += q_at(q5, blk, row, j, i) * qa[i];
                    const int A = a.sumrow(tk)[s * 8 + j];
                    const int sc = blk[kOffSc + size_t(j) * R + size_t(row)];
                    const int m = blk[kOffM + (size_t(j / 2) * R + size_t(row)) * 2 + size_t(j % 2)];
                    acc += a.drow(tk)[s * 8 + j] * (d * float(sc * S) - dmin * float(m * A));
                }
            }
            y[int64_t(tk) * ldy + r] = acc;
        }
    }
}

#if defined(__x86_64__)
namespace {

// y[t][row0 .. row0+15] for tokens t0 .. t0+T-1, over one group's nsb super-blocks.
// Bit b (0..7) of every byte moved to bit 4 (16-bit shifts; the bits that cross a byte boundary are masked off
// by the caller's 0x10 mask).
TD_VNNI512 inline __m512i bit_to_4(__m512i h, int b) {
    return b <= 4 ? _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - b)) : _mm512_srl_epi16(h, _mm_cvtsi32_si128(b - 4));
}

template <bool Q5, int T, bool PF>
TD_VNNI512 void q45k_tile(const uint8_t* base, int64_t nsb, const ActQ8& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t kGroupBytes = group_bytes(Q5);
    constexpr int C = T == 1 ? 2 : 1;  // independent vpdpbusd chains per token and sub-block
    __m512 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = base + size_t(s) * kGroupBytes;
        if constexpr (PF) prefetch_stream(blk, kGroupBytes);
        __m512i isum[T], msum[T];
        for (int t = 0; t < T; t++) { isum[t] = _mm512_setzero_si512(); msum[t] = _mm512_setzero_si512(); }
        for (int p = 0; p < 4; p++) {
            __m512i slo[T][C], shi[T][C];
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) { slo[t][c] = _mm512_setzero_si512(); shi[t][c] = _mm512_setzero_si512(); }
            for (int g = 0; g < 8; g++) {
                const __m512i v = _mm512_loadu_si512(blk + kOffQ + size_t(p * 8 + g) * 64);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if constexpr (Q5) {  // the fifth bits of sub-blocks 2p and 2p+1
                    const __m512i h = _mm512_loadu_si512(blk + kOffQh + size_t(g) * 64);
                    lo = _mm512_or_si512(lo, _mm512_and_si512(bit_to_4(h, 2 * p), m10));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(bit_to_4(h, 2 * p + 1), m10));
                }
                for (int t = 0; t < T; t++) {
                    const int8_t* qa = a.qrow(t0 + t) + s * QK_K + p * 64 + 4 * g;
                    slo[t][g % C] = _mm512_dpbusd_epi32(slo[t][g % C], lo, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qa)));
                    shi[t][g % C] = _mm512_dpbusd_epi32(shi[t][g % C], hi, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qa + 32)));
                }
            }
            const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffSc + size_t(2 * p) * R)));
            const __m512i sc_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffSc + size_t(2 * p + 1) * R)));
            const __m512i mp = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffM + size_t(p) * 2 * R)));
            for (int t = 0; t < T; t++) {
                __m512i sl = slo[t][0], sh = shi[t][0];
                if constexpr (C > 1) { sl = _mm512_add_epi32(sl, slo[t][1]); sh = _mm512_add_epi32(sh, shi[t][1]); }
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(sc_lo, sl), _mm512_mullo_epi32(sc_hi, sh)));
                const int32_t* A = a.sumrow(t0 + t) + s * 8 + 2 * p;
                const int32_t pair = int32_t((uint32_t(A[0]) & 0xFFFFu) | (uint32_t(A[1]) << 16));
                msum[t] = _mm512_dpwssd_epi32(msum[t], mp, _mm512_set1_epi32(pair));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffD)));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffDmin)));
        for (int t = 0; t < T; t++) {
            const __m512 da = _mm512_set1_ps(a.drow(t0 + t)[s * 8]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, da), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(mv, da), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + int64_t(t0 + t) * ldy + row0, acc[t]);
}

}  // namespace

TD_VNNI512 void matmul_packed_vnni_q45k(TensorType type, const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy,
                                        int64_t r0, int64_t r1) {
    const bool q5 = is_q5(type);
    const int64_t nsb = cols / QK_K;
    packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        const uint8_t* base = group_block(q5, packed, nsb, G, 0);
        // Q5_K's single-token tiles prefetch too (measured: tg 33 against 22 t/s without; for Q4_K it costs 12%):
        // its two streams within each block, weights and fifth bits, seem to defeat the hardware prefetcher.
        if (q5 && t == 0) q45k_tile<true, decltype(tn)::value, true>(base, nsb, a, t, y, ldy, G * R);
        else if (q5) q45k_tile<true, decltype(tn)::value, decltype(pf)::value>(base, nsb, a, t, y, ldy, G * R);
        else q45k_tile<false, decltype(tn)::value, decltype(pf)::value>(base, nsb, a, t, y, ldy, G * R);
    });
}
#endif

}  // namespace tandem
