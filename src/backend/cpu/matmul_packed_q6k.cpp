// Q6_K weights repacked at load into groups of R = 16 interleaved rows (layout: quant/packed_layout.h), with the
// reference kernel over that layout; the SIMD kernels are per level under src/backend/cpu/.
//
// A Q6_K super-block holds 256 weights in 16 sub-blocks j of 16: w = d * sc_j * (q - 32), q in 0..63, sc_j a
// signed byte. Against activations a = da * qa (one da per super-block) a row's dot product is
//   da * d * ( sum_j sc_j * S_j  -  32 * sum_j sc_j * A_j ),   S_j = sum_{i in j} q_i qa_i,  A_j = sum_{i in j} qa_i,
// exact in 32-bit integers. Packed layout, per group of 16 rows and super-block (3360 bytes, the same as the
// 16 rows' blocks):
//   uint16 d[16]                  the rows' half scales
//   int8   sc[8][16][2]           sc[p][row] = (sc_2p, sc_2p+1): one vpdpwssd per sub-block pair for the offsets
//   uint8  ql[8][4][16][4]        ql[p][g][row][k]: low nibble = low 4 bits of weight 4g+k of sub-block 2p,
//                                 high nibble = the same of sub-block 2p+1
//   uint8  qh[4][4][16][4]        qh[Q][g][row][k]: bits 2i, 2i+1 = high 2 bits of weight 4g+k of sub-block 4Q+i
// A 64-byte load of ql and one of qh give, after masks and shifts, the weights of two sub-blocks for 16 rows
// by 4 elements, each the operand of one vpdpbusd.
#include "core/fp16.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_packed_k.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/packed_layout.h"
#include "tandem/error.h"

namespace tandem {

namespace {
constexpr size_t kQ6D = packed::kQ6OffD, kQ6Sc = packed::kQ6OffSc, kGroupBytes = packed::kQ6BlockBytes;
static_assert(kGroupBytes == 16 * sizeof(block_q6_K));

const uint8_t* group_block(const uint8_t* packed, int64_t nsb, int64_t G, int64_t s) {
    return packed + (size_t(G) * size_t(nsb) + size_t(s)) * kGroupBytes;
}
constexpr auto ql_index = packed::q6k_ql_index;
constexpr auto qh_index = packed::q6k_qh_index;
int q_at(const uint8_t* blk, int row, int j, int i) {  // weight i (0..15) of sub-block j, 0..63
    const uint8_t lo = blk[ql_index(j / 2, i / 4, row, i % 4)], hi = blk[qh_index(j / 4, i / 4, row, i % 4)];
    return ((j % 2 ? lo >> 4 : lo) & 0xF) | (((hi >> (2 * (j % 4))) & 3) << 4);
}
int sc_at(const uint8_t* blk, int row, int j) {
    return int(int8_t(blk[kQ6Sc + (size_t(j / 2) * packed::R + size_t(row)) * 2 + size_t(j % 2)]));
}

// The 256 6-bit values of a block in element order (ggml's layout: per half of 128, ql holds the low 4 bits of
// elements l and l+64 (low/high nibble) and l+32, l+96 in ql[l+32]; qh holds their 2 high bits).
void decode_q6k(const block_q6_K& x, uint8_t* q) {
    for (int n = 0; n < 2; n++) {
        const uint8_t* ql = x.ql + 64 * n;
        const uint8_t* qh = x.qh + 32 * n;
        uint8_t* o = q + 128 * n;
        for (int l = 0; l < 32; l++) {
            o[l] = uint8_t((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            o[l + 32] = uint8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}
}  // namespace

size_t packed_bytes_q6k(int64_t rows, int64_t cols) {
    return size_t(rows / packed::R) * size_t(cols / QK_K) * kGroupBytes;
}

void repack_rows_q6k(const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst) {
    TD_ASSERT(rows % packed::R == 0 && cols % QK_K == 0);
    const int64_t nsb = cols / QK_K;
    uint8_t q[QK_K];
    for (int64_t G = 0; G < rows / packed::R; G++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t* out = dst + (size_t(G) * size_t(nsb) + size_t(s)) * kGroupBytes;
            for (int r = 0; r < packed::R; r++) {
                const block_q6_K* x =
                    reinterpret_cast<const block_q6_K*>(src + size_t(G * packed::R + r) * row_stride) + s;
                reinterpret_cast<uint16_t*>(out + kQ6D)[r] = x->d;
                for (int j = 0; j < 16; j++)
                    out[kQ6Sc + (size_t(j / 2) * packed::R + size_t(r)) * 2 + size_t(j % 2)] = uint8_t(x->scales[j]);
                decode_q6k(*x, q);
                for (int g = 0; g < 4; g++)
                    for (int k = 0; k < 4; k++) {
                        for (int p = 0; p < 8; p++)
                            out[ql_index(p, g, r, k)] =
                                uint8_t((q[32 * p + 4 * g + k] & 0xF) | ((q[32 * p + 16 + 4 * g + k] & 0xF) << 4));
                        for (int Q = 0; Q < 4; Q++) {
                            uint8_t h = 0;
                            for (int i = 0; i < 4; i++)
                                h = uint8_t(h | ((q[16 * (4 * Q + i) + 4 * g + k] >> 4) << (2 * i)));
                            out[qh_index(Q, g, r, k)] = h;
                        }
                    }
            }
        }
}

void dequantize_packed_row_q6k(const uint8_t* packed, int64_t cols, int64_t r, float* out) {
    const int64_t nsb = cols / QK_K;
    const int row = int(r % packed::R);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* blk = group_block(packed, nsb, r / packed::R, s);
        const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kQ6D)[row]);
        for (int j = 0; j < 16; j++) {
            const float sc = d * float(sc_at(blk, row, j));
            for (int i = 0; i < 16; i++) out[s * QK_K + j * 16 + i] = sc * float(q_at(blk, row, j, i) - 32);
        }
    }
}

void matmul_packed_ref_q6k(const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy, int64_t r0,
                           int64_t r1) {
    const int64_t nsb = cols / QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const int row = int(r % packed::R);
        for (int t = 0; t < a.n_rows; t++) {
            float acc = 0;
            for (int64_t s = 0; s < nsb; s++) {
                const uint8_t* blk = group_block(packed, nsb, r / packed::R, s);
                const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + kQ6D)[row]);
                for (int j = 0; j < 16; j++) {  // each 16-element sub-block with its own activation scale
                    const int8_t* qa = a.qrow(t) + s * QK_K + j * 16;
                    int S = 0;
                    for (int i = 0; i < 16; i++) S += q_at(blk, row, j, i) * qa[i];
                    const int A = a.sum16row(t)[s * 16 + j];
                    acc += a.drow(t)[s * 8 + j / 2] * d * float(sc_at(blk, row, j) * (S - 32 * A));
                }
            }
            y[int64_t(t) * ldy + r] = acc;
        }
    }
}

}  // namespace tandem
