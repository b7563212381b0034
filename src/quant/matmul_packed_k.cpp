// Q4_K weights repacked at load into groups of R = 16 interleaved rows for the AVX512-VNNI kernel.
//
// A Q4_K super-block holds 256 weights in 8 sub-blocks j of 32: w = d * sc_j * q - dmin * m_j, q in 0..15, with
// 6-bit sc_j, m_j. Against activations a = da * qa (one da per super-block, integer qa) a row's dot product is
//   da * ( d * sum_j sc_j * S_j  -  dmin * sum_j m_j * A_j ),   S_j = sum_{i in j} q_i qa_i,  A_j = sum_{i in j} qa_i,
// all sums exact in 32-bit integers. Packed layout, per group of 16 rows and super-block (2368 bytes, 2.8% more
// than the 16 rows' 2304):
//   uint16 d[16], dmin[16]        the rows' half scales
//   uint8  sc[8][16]              sc[j][row]
//   uint8  m[4][16][2]            m[p][row] = (m_2p, m_2p+1): one vpdpwssd per sub-block pair
//   uint8  q[4][8][16][4]         q[p][g][row][k]: low nibble = weight 4g+k of sub-block 2p, high nibble = the
//                                 same of sub-block 2p+1 (this is Q4_K's own nibble pairing, so a plain copy)
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
constexpr size_t kGroupBytes = kOffQ + 4 * 8 * R * 4;  // 2368
static_assert(kGroupBytes == 2368);

const uint8_t* group_block(const uint8_t* packed, int64_t nsb, int64_t G, int64_t s) {
    return packed + (size_t(G) * size_t(nsb) + size_t(s)) * kGroupBytes;
}
int q_at(const uint8_t* blk, int row, int j, int i) {  // weight i (0..31) of sub-block j
    const uint8_t byte = blk[kOffQ + ((size_t(j / 2) * 8 + size_t(i / 4)) * R + size_t(row)) * 4 + size_t(i % 4)];
    return j % 2 == 0 ? (byte & 0xF) : (byte >> 4);
}
}  // namespace

size_t packed_bytes_q4k(int64_t rows, int64_t cols) { return size_t(rows / R) * size_t(cols / QK_K) * kGroupBytes; }

void repack_rows_q4k(const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst) {
    TD_ASSERT(rows % R == 0 && cols % QK_K == 0);
    const int64_t nsb = cols / QK_K;
    for (int64_t G = 0; G < rows / R; G++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t* out = dst + (size_t(G) * size_t(nsb) + size_t(s)) * kGroupBytes;
            for (int r = 0; r < R; r++) {
                const block_q4_K* x = reinterpret_cast<const block_q4_K*>(src + size_t(G * R + r) * row_stride) + s;
                reinterpret_cast<uint16_t*>(out + kOffD)[r] = x->d;
                reinterpret_cast<uint16_t*>(out + kOffDmin)[r] = x->dmin;
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, m;
                    get_scale_min_k4(j, x->scales, &sc, &m);
                    out[kOffSc + size_t(j) * R + size_t(r)] = sc;
                    out[kOffM + (size_t(j / 2) * R + size_t(r)) * 2 + size_t(j % 2)] = m;
                }
                for (int p = 0; p < 4; p++)
                    for (int g = 0; g < 8; g++)
                        for (int k = 0; k < 4; k++) out[kOffQ + ((size_t(p) * 8 + size_t(g)) * R + size_t(r)) * 4 + size_t(k)] = x->qs[32 * p + 4 * g + k];
            }
        }
}

void dequantize_packed_row_q4k(const uint8_t* packed, int64_t cols, int64_t r, float* out) {
    const int64_t nsb = cols / QK_K;
    const int row = int(r % R);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = group_block(packed, nsb, r / R, s);
        const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffD)[row]);
        const float dmin = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffDmin)[row]);
        for (int j = 0; j < 8; j++) {
            const float sc = d * blk[kOffSc + size_t(j) * R + size_t(row)];
            const float m = dmin * blk[kOffM + (size_t(j / 2) * R + size_t(row)) * 2 + size_t(j % 2)];
            for (int i = 0; i < 32; i++) out[s * QK_K + j * 32 + i] = sc * float(q_at(blk, row, j, i)) - m;
        }
    }
}

void matmul_packed_ref_q4k(const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nsb = cols / QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const int row = int(r % R);
        for (int t = 0; t < a.n_rows; t++) {
            float acc = 0;
            for (int64_t s = 0; s < nsb; s++) {
                const uint8_t* blk = group_block(packed, nsb, r / R, s);
                const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffD)[row]);
                const float dmin = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffDmin)[row]);
                // Each 32-element block keeps its own activation scale (equal within a super-block for group 256).
                for (int j = 0; j < 8; j++) {
                    const int8_t* qa = a.qrow(t) + s * QK_K + j * 32;
                    int S = 0;
                    for (int i = 0; i < 32; i++) S += q_at(blk, row, j, i) * qa[i];
                    const int A = a.sumrow(t)[s * 8 + j];
                    const int sc = blk[kOffSc + size_t(j) * R + size_t(row)];
                    const int m = blk[kOffM + (size_t(j / 2) * R + size_t(row)) * 2 + size_t(j % 2)];
                    acc += a.drow(t)[s * 8 + j] * (d * float(sc * S) - dmin * float(m * A));
                }
            }
            y[int64_t(t) * ldy + r] = acc;
        }
    }
}

#if defined(__x86_64__)
namespace {

// y[t][row0 .. row0+15] for tokens t0 .. t0+T-1, over one group's nsb super-blocks.
template <int T, bool PF>
TD_VNNI512 void q4k_tile(const uint8_t* base, int64_t nsb, const ActQ8& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr int C = T == 1 ? 2 : 1;  // independent vpdpbusd chains per token and sub-block
    __m512 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
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
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
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

TD_VNNI512 void matmul_packed_vnni_q4k(const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy, int64_t r0,
                                       int64_t r1) {
    const int64_t nsb = cols / QK_K;
    packed_tiles<4>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        q4k_tile<decltype(tn)::value, decltype(pf)::value>(group_block(packed, nsb, G, 0), nsb, a, t, y, ldy, G * R);
    });
}
#endif

}  // namespace tandem
