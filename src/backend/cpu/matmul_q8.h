// Integer matmul kernels for weights whose blocks pair with 8-bit activation blocks (Q8_0, Q4_0, MXFP4).
// Contract: w.cols % 32 == 0; a holds the activation rows (a.n == w.cols); writes y[t * ldy + r] for every
// activation row t and weight row r in [r0, r1).
#pragma once
#include <vector>

#include "backend/cpu/act_q8.h"
#include "backend/cpu/kernels.h"

namespace tandem {

bool matmul_q8_supported(TensorType t);
float e8m0_half_to_f32(uint8_t e);  // MXFP4's block scale: 2^(e - 128), exactly
void matmul_q8_rows_ref(const WeightView& w, const ActRows& a, float* y, int64_t ldy, int64_t r0, int64_t r1);

// Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K repacked into groups of kPackedRows interleaved rows (layouts in matmul_packed.cpp and
// matmul_packed_k.cpp); r0, r1 of the kernels are multiples of kPackedRows. Activations: quantized with
// packed_act_group(t) values per scale.
constexpr int kPackedRows = 16;
inline int packed_act_group(TensorType t) {
    return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K ? 256 : 32;
}
bool packable(TensorType t, int64_t rows, int64_t cols);
size_t packed_bytes(TensorType t, int64_t rows, int64_t cols);
void repack_rows(TensorType t, const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst);
// Row r of a packed matrix as floats (out: cols values), e.g. an embedding row of a tied output matrix.
void dequantize_packed_row(TensorType t, const uint8_t* packed, int64_t cols, int64_t r, float* out);
void matmul_packed_ref(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                       int64_t r0, int64_t r1);

// K-quants (Q4_K, Q5_K, Q6_K): a weight row unpacked to signed integers with lane scales and block offsets,
// w_i = lane_scale[i / 4] * q[i] + offset[i / 32]; the unpacking is shared by every token of a batch.
struct UnpackedRow {
    std::vector<int8_t> q;  // (n)
    std::vector<float> lane_scale;  // (n / 4)
    std::vector<float> offset;  // (n / 32)
    void resize(int64_t n) {
        q.resize(size_t(n));
        lane_scale.resize(size_t(n / 4));
        offset.resize(size_t(n / 32));
    }
};
bool matmul_kq_supported(TensorType t);
void unpack_kq_row(TensorType t, const uint8_t* row, int64_t n, UnpackedRow& out);
// The same into caller-sized buffers (q: n, ls: n / 4, off: n / 32).
void unpack_kq_row_ref(TensorType t, const uint8_t* row, int64_t n, int8_t* q, float* ls, float* off);
float dot_unpacked_ref(const UnpackedRow& w, const ActRows& a, int t);

}  // namespace tandem
