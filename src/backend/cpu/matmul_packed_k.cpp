// Q4_K and Q5_K weights repacked at load into groups of 16 interleaved rows (layout: quant/packed_layout.h),
// the reference kernel over that layout, and the row read-back of tied embeddings. The SIMD kernels are per level
// under src/backend/cpu/.
//
// A Q4_K super-block holds 256 weights in 8 sub-blocks j of 32: w = d * sc_j * q - dmin * m_j, q in 0..15, with
// 6-bit sc_j, m_j; Q5_K is the same with q in 0..31 (a fifth bit per weight). Against activations a = da * qa
// (one da per super-block, integer qa) a row's dot product is
//   da * ( d * sum_j sc_j * S_j  -  dmin * sum_j m_j * A_j ),   S_j = sum_{i in j} q_i qa_i,  A_j = sum_{i in j} qa_i,
// all sums exact in 32-bit integers. A packed group block is 2368 bytes (2.8% more than the 16 rows' 2304); the
// nibbles keep Q4_K's own pairing (a plain copy), Q5_K adds its own qh bytes (2880 against 2816).
#include "backend/cpu/matmul_packed_k.h"

#include "core/fp16.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/packed_layout.h"
#include "tandem/error.h"

namespace tandem {

namespace {
constexpr size_t kOffD = packed::kQ45OffD, kOffDmin = packed::kQ45OffDmin, kOffSc = packed::kQ45OffSc;
constexpr size_t kOffM = packed::kQ45OffM, kOffQ = packed::kQ45OffQ, kOffQh = packed::kQ45OffQh;
constexpr size_t group_bytes(bool q5) { return packed::q45k_block_bytes(q5); }
static_assert(group_bytes(false) == 2368 && group_bytes(true) == 2880);

const uint8_t* group_block(bool q5, const uint8_t* packed, int64_t nsb, int64_t G, int64_t s) {
    return packed + (size_t(G) * size_t(nsb) + size_t(s)) * group_bytes(q5);
}
int q_at(bool q5, const uint8_t* blk, int row, int j, int i) {  // weight i (0..31) of sub-block j
    const uint8_t byte =
        blk[kOffQ + ((size_t(j / 2) * 8 + size_t(i / 4)) * packed::R + size_t(row)) * 4 + size_t(i % 4)];
    const int lo = j % 2 == 0 ? (byte & 0xF) : (byte >> 4);
    if (!q5) return lo;
    return lo | (((blk[kOffQh + (size_t(i / 4) * packed::R + size_t(row)) * 4 + size_t(i % 4)] >> j) & 1) << 4);
}
bool is_q5(TensorType t) {
    TD_ASSERT(t == TensorType::Q4_K || t == TensorType::Q5_K);
    return t == TensorType::Q5_K;
}
}  // namespace

size_t packed_bytes_q45k(TensorType t, int64_t rows, int64_t cols) {
    return size_t(rows / packed::R) * size_t(cols / QK_K) * group_bytes(is_q5(t));
}

void repack_rows_q45k(TensorType t, const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst) {
    TD_ASSERT(rows % packed::R == 0 && cols % QK_K == 0);
    const bool q5 = is_q5(t);
    const int64_t nsb = cols / QK_K;
    for (int64_t G = 0; G < rows / packed::R; G++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t* out = dst + (size_t(G) * size_t(nsb) + size_t(s)) * group_bytes(q5);
            for (int r = 0; r < packed::R; r++) {
                const uint8_t* row = src + size_t(G * packed::R + r) * row_stride;
                uint16_t d, dmin;
                const uint8_t *scales, *qs;
                if (q5) {
                    const block_q5_K* x = reinterpret_cast<const block_q5_K*>(row) + s;
                    d = x->d, dmin = x->dmin, scales = x->scales, qs = x->qs;
                    for (int i = 0; i < 32; i++)
                        out[kOffQh + (size_t(i / 4) * packed::R + size_t(r)) * 4 + size_t(i % 4)] = x->qh[i];
                } else {
                    const block_q4_K* x = reinterpret_cast<const block_q4_K*>(row) + s;
                    d = x->d, dmin = x->dmin, scales = x->scales, qs = x->qs;
                }
                reinterpret_cast<uint16_t*>(out + kOffD)[r] = d;
                reinterpret_cast<uint16_t*>(out + kOffDmin)[r] = dmin;
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, m;
                    get_scale_min_k4(j, scales, &sc, &m);
                    out[kOffSc + size_t(j) * packed::R + size_t(r)] = sc;
                    out[kOffM + (size_t(j / 2) * packed::R + size_t(r)) * 2 + size_t(j % 2)] = m;
                }
                for (int p = 0; p < 4; p++)
                    for (int g = 0; g < 8; g++)
                        for (int k = 0; k < 4; k++)
                            out[kOffQ + ((size_t(p) * 8 + size_t(g)) * packed::R + size_t(r)) * 4 + size_t(k)] =
                                qs[32 * p + 4 * g + k];
            }
        }
}

void dequantize_packed_row_q45k(TensorType t, const uint8_t* packed, int64_t cols, int64_t r, float* out) {
    const bool q5 = is_q5(t);
    const int64_t nsb = cols / QK_K;
    const int row = int(r % packed::R);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = group_block(q5, packed, nsb, r / packed::R, s);
        const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffD)[row]);
        const float dmin = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffDmin)[row]);
        for (int j = 0; j < 8; j++) {
            const float sc = d * blk[kOffSc + size_t(j) * packed::R + size_t(row)];
            const float m = dmin * blk[kOffM + (size_t(j / 2) * packed::R + size_t(row)) * 2 + size_t(j % 2)];
            for (int i = 0; i < 32; i++) out[s * QK_K + j * 32 + i] = sc * float(q_at(q5, blk, row, j, i)) - m;
        }
    }
}

void matmul_packed_ref_q45k(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                            int64_t r0, int64_t r1) {
    const bool q5 = is_q5(t);
    const int64_t nsb = cols / QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const int row = int(r % packed::R);
        for (int tk = 0; tk < a.n_rows; tk++) {
            float acc = 0;
            for (int64_t s = 0; s < nsb; s++) {
                const uint8_t* blk = group_block(q5, packed, nsb, r / packed::R, s);
                const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffD)[row]);
                const float dmin = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kOffDmin)[row]);
                // Each 32-element block keeps its own activation scale (equal within a super-block for group 256).
                for (int j = 0; j < 8; j++) {
                    const int8_t* qa = a.qrow(tk) + s * QK_K + j * 32;
                    int S = 0;
                    for (int i = 0; i < 32; i++) S += q_at(q5, blk, row, j, i) * qa[i];
                    const int A = a.sumrow(tk)[s * 8 + j];
                    const int sc = blk[kOffSc + size_t(j) * packed::R + size_t(row)];
                    const int m = blk[kOffM + (size_t(j / 2) * packed::R + size_t(row)) * 2 + size_t(j % 2)];
                    acc += a.drow(tk)[s * 8 + j] * (d * float(sc * S) - dmin * float(m * A));
                }
            }
            y[int64_t(tk) * ldy + r] = acc;
        }
    }
}

}  // namespace tandem
