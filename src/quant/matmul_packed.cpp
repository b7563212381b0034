// Q8_0 / Q4_0 weights repacked at load into groups of R = 16 interleaved rows, for the AVX512-VNNI kernel.
//
// Packed layout, for each group of 16 rows and each 32-element block b (bytes, in this order):
//   uint16 d[16]              half scales of the 16 rows' block b
//   Q8_0: uint8 q[8][16][4]   q[g][j][k] = (int8 value of row j, element 4g+k) ^ 0x80   (= value + 128)
//   Q4_0: uint8 q[4][16][4]   low nibble of q[g][j][k] = element 4g+k of row j, high nibble = element 16+4g+k
// so one 64-byte load holds four consecutive values of each of the 16 rows, and vpdpbusd against the four
// matching activation bytes (broadcast) accumulates the 16 rows' dot products in one register: no horizontal
// sums, and one scale multiply per 16 rows. The unsigned offset (128, or 8 for Q4_0 nibbles) comes back out
// through the activation block sums (ActQ8::qsum), as the starting value of the integer sum.
//
// Why 16 rows in 512-bit registers rather than 8 in 256-bit ones: on Zen 4 both run vpdpbusd at the same MACs
// per cycle, but a verification batch issues one activation broadcast per vpdpbusd and a scale multiply per
// block and token, and with 8 rows those instructions alone kept the front end as busy as the multiplier.
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/matmul_packed_k.h"
#include "quant/matmul_q8.h"
#include "quant/packed_driver.h"
#include "tandem/error.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tandem {

namespace {
constexpr int R = kPackedRows;
constexpr size_t q_bytes(TensorType t) { return t == TensorType::Q8_0 ? size_t(R) * 32 : size_t(R) * 16; }
constexpr size_t group_block_bytes(TensorType t) { return 2 * R + q_bytes(t); }
}  // namespace

bool packable(TensorType t, int64_t rows, int64_t cols) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K) return rows % R == 0 && cols % QK_K == 0;
    return (t == TensorType::Q8_0 || t == TensorType::Q4_0) && rows % R == 0 && cols % 32 == 0;
}

size_t packed_bytes(TensorType t, int64_t rows, int64_t cols) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) return packed_bytes_q45k(t, rows, cols);
    if (t == TensorType::Q6_K) return packed_bytes_q6k(rows, cols);
    return size_t(rows / R) * size_t(cols / 32) * group_block_bytes(t);
}

void repack_rows(TensorType t, const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst) {
    TD_ASSERT(packable(t, rows, cols));
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) return repack_rows_q45k(t, src, row_stride, rows, cols, dst);
    if (t == TensorType::Q6_K) return repack_rows_q6k(src, row_stride, rows, cols, dst);
    const int64_t nb = cols / 32;
    const size_t gbb = group_block_bytes(t);
    for (int64_t G = 0; G < rows / R; G++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t* out = dst + (size_t(G) * size_t(nb) + size_t(b)) * gbb;
            uint16_t* d = reinterpret_cast<uint16_t*>(out);
            uint8_t* q = out + 2 * R;
            for (int j = 0; j < R; j++) {
                const uint8_t* row = src + size_t(G * R + j) * row_stride;
                if (t == TensorType::Q8_0) {
                    const block_q8_0* x = reinterpret_cast<const block_q8_0*>(row) + b;
                    d[j] = x->d;
                    for (int g = 0; g < 8; g++)
                        for (int k = 0; k < 4; k++) q[(g * R + j) * 4 + k] = uint8_t(x->qs[4 * g + k]) ^ 0x80;
                } else {
                    const block_q4_0* x = reinterpret_cast<const block_q4_0*>(row) + b;
                    d[j] = x->d;
                    // qs[i] holds element i (low nibble) and element i + 16 (high nibble)
                    for (int g = 0; g < 4; g++)
                        for (int k = 0; k < 4; k++) q[(g * R + j) * 4 + k] = x->qs[4 * g + k];
                }
            }
        }
    }
}

// Weight i of row j (0 <= j < R) in one packed block.
static int packed_weight(TensorType t, const uint8_t* q, int j, int i) {
    if (t == TensorType::Q8_0) return int(int8_t(q[((i / 4) * R + j) * 4 + i % 4] ^ 0x80));
    const int e = i % 16;
    const uint8_t byte = q[((e / 4) * R + j) * 4 + e % 4];
    return (i < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
}

void dequantize_packed_row(TensorType t, const uint8_t* packed, int64_t cols, int64_t r, float* out) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) return dequantize_packed_row_q45k(t, packed, cols, r, out);
    if (t == TensorType::Q6_K) return dequantize_packed_row_q6k(packed, cols, r, out);
    const int64_t nb = cols / 32;
    const size_t gbb = group_block_bytes(t);
    const int j = int(r % R);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = packed + (size_t(r / R) * size_t(nb) + size_t(b)) * gbb;
        const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk)[j]);
        for (int i = 0; i < 32; i++) out[b * 32 + i] = d * float(packed_weight(t, blk + 2 * R, j, i));
    }
}

void matmul_packed_ref(TensorType t, const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) return matmul_packed_ref_q45k(t, packed, cols, a, y, ldy, r0, r1);
    if (t == TensorType::Q6_K) return matmul_packed_ref_q6k(packed, cols, a, y, ldy, r0, r1);
    const int64_t nb = cols / 32;
    const size_t gbb = group_block_bytes(t);
    for (int64_t G = r0 / R; G < r1 / R; G++)
        for (int tk = 0; tk < a.n_rows; tk++)
            for (int j = 0; j < R; j++) {
                float acc = 0;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t* blk = packed + (size_t(G) * size_t(nb) + size_t(b)) * gbb;
                    const uint16_t* d = reinterpret_cast<const uint16_t*>(blk);
                    const int8_t* aq = a.qrow(tk) + b * 32;
                    int sum = 0;
                    for (int i = 0; i < 32; i++) sum += packed_weight(t, blk + 2 * R, j, i) * aq[i];
                    acc += fp16_to_f32(d[j]) * a.drow(tk)[b] * float(sum);
                }
                y[int64_t(tk) * ldy + G * R + j] = acc;
            }
}

#if defined(__x86_64__)
namespace {

// y[t][row0 .. row0+15] for tokens t0 .. t0+T-1, over one group's nb blocks.
template <bool Q4, int T, bool PF>
TD_VNNI512 void group_tile(const uint8_t* base, int64_t nb, const ActQ8& a, int t0, float* y, int64_t ldy, int64_t row0) {
    constexpr size_t gbb = group_block_bytes(Q4 ? TensorType::Q4_0 : TensorType::Q8_0);
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
TD_VNNI512 void packed_rows(const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy, int64_t r0,
                            int64_t r1) {
    const int64_t nb = cols / 32;
    constexpr size_t gbb = group_block_bytes(Q4 ? TensorType::Q4_0 : TensorType::Q8_0);
    packed_tiles<8>(a.n_rows, r0 / R, r1 / R, [&](auto tn, int64_t G, int t, auto pf) {
        group_tile<Q4, decltype(tn)::value, decltype(pf)::value>(packed + size_t(G) * size_t(nb) * gbb, nb, a, t, y, ldy, G * R);
    });
}

}  // namespace

void matmul_packed_vnni(TensorType t, const uint8_t* packed, int64_t cols, const ActQ8& a, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) matmul_packed_vnni_q45k(t, packed, cols, a, y, ldy, r0, r1);
    else if (t == TensorType::Q6_K) matmul_packed_vnni_q6k(packed, cols, a, y, ldy, r0, r1);
    else if (t == TensorType::Q4_0) packed_rows<true>(packed, cols, a, y, ldy, r0, r1);
    else packed_rows<false>(packed, cols, a, y, ldy, r0, r1);
}
#endif

}  // namespace tandem
