// Q4_K, Q5_K and Q6_K repacked into groups of 16 interleaved rows (layouts in quant/packed_layout.h); reached through the generic packed entry points of matmul_q8.h, which dispatch on the
// type. Activations: ActQ8 quantized with group 256 (one scale per super-block, as llama.cpp's Q8_K), whose
// block sums (32 for Q4_K/Q5_K's mins, 16 for Q6_K's offsets) complete the integer sums.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/act_q8.h"
#include "tandem/tensor_type.h"

namespace tandem {

// t: Q4_K or Q5_K.
size_t packed_bytes_q45k(TensorType t, int64_t rows, int64_t cols);
void repack_rows_q45k(TensorType t, const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst);
void dequantize_packed_row_q45k(TensorType t, const uint8_t* packed, int64_t cols, int64_t r, float* out);
void matmul_packed_ref_q45k(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                            int64_t r0, int64_t r1);

size_t packed_bytes_q6k(int64_t rows, int64_t cols);
void repack_rows_q6k(const uint8_t* src, size_t row_stride, int64_t rows, int64_t cols, uint8_t* dst);
void dequantize_packed_row_q6k(const uint8_t* packed, int64_t cols, int64_t r, float* out);
void matmul_packed_ref_q6k(const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy, int64_t r0,
                           int64_t r1);

}  // namespace tandem
