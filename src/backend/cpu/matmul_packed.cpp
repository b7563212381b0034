// Q8_0 / Q4_0 weights repacked at load into groups of R = 16 interleaved rows (quant/packed_layout.h), the
// reference kernel over them, and the dispatch of packing by type. SIMD kernels: per level under src/backend/cpu/.
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
#include "backend/cpu/matmul_packed_k.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/packed_layout.h"
#include "tandem/error.h"

namespace tandem {

namespace {
constexpr int R = packed::R;
constexpr size_t group_block_bytes(TensorType t) { return packed::q8_block_bytes(t == TensorType::Q4_0); }
}  // namespace

bool packable(TensorType t, int64_t rows, int64_t cols) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K)
        return rows % R == 0 && cols % QK_K == 0;
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

void matmul_packed_ref(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
    if (t == TensorType::Q4_K || t == TensorType::Q5_K)
        return matmul_packed_ref_q45k(t, packed, cols, a, y, ldy, r0, r1);
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

}  // namespace tandem
