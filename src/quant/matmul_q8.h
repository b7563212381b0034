// Integer matmul kernels for weights whose blocks pair with 8-bit activation blocks (Q8_0, Q4_0).
// Contract: w.cols % 32 == 0; a holds the activation rows (a.n == w.cols); writes y[t * ldy + r] for every
// activation row t and weight row r in [r0, r1).
#pragma once
#include "quant/act_q8.h"
#include "quant/kernels.h"

namespace tandem {

bool matmul_q8_supported(TensorType t);
void matmul_q8_rows_ref(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1);
#if defined(__x86_64__)
void matmul_q8_rows_avx2(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1);
// AVX2 + AVX512-VL/VNNI (vpdpbusd on 256-bit vectors).
void matmul_q8_rows_vnni(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1);
#endif

}  // namespace tandem
