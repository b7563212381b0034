// The kernels every SIMD level defines (in its own units, namespace tandem::isa_<level>) for its fill_table; the
// contracts are those of the matching IsaKernels entries (backend/cpu/isa.h). Included after backend/cpu/isa_unit.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.h"

namespace tandem::TD_ISA {

float dot_f32(const float* a, const float* b, int64_t n);
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float w, const uint16_t* x, float* y, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n);
void delta_rule(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                float beta, int S, float* o);
void attn_tile(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
               const float* vt, int hd, float scale, float* mx, float* l, float* o);
bool kv_tile_f32(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile);
void matmul_f32_rows(const float* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1);
void matmul_f16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1);
void matmul_bf16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                      int64_t r1);
uint64_t stream_sum(const uint64_t* p, size_t n);
uint64_t probe_mac_i8(int64_t iters, uint64_t* sink);
uint64_t probe_mac_f32(int64_t iters, uint64_t* sink);
void quantize_act_rows(const float* x, int64_t n, int group, const ActRows& out, int r0, int r1);
void matmul_q8_rows(TensorType t, const uint8_t* w, size_t row_stride, int64_t cols, const ActRows& a, float* y,
                    int64_t ldy, int64_t r0, int64_t r1);
float dot_unpacked(const int8_t* q, const float* lane_scale, const float* offset, const ActRows& a, int t);
// The level's packed kernel (x86: packed_avx2.cpp / packed_vnni512.cpp; AArch64: packed_neon.cpp).
void matmul_packed(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                   int64_t r0, int64_t r1);

// The entries every level takes from the functions above; the level's table unit sets the rest (level,
// packed_kernel, unpack_kq_row).
static inline void fill_common(IsaKernels& k) {
    k.dot_f32 = dot_f32;
    k.dot_f32_f16 = dot_f32_f16;
    k.axpy_f16 = axpy_f16;
    k.silu_mul = silu_mul;
    k.delta_rule = delta_rule;
    k.attn_tile = attn_tile;
    k.kv_tile_f32 = kv_tile_f32;
    k.matmul_f32_rows = matmul_f32_rows;
    k.matmul_f16_rows = matmul_f16_rows;
    k.matmul_bf16_rows = matmul_bf16_rows;
    k.stream_sum = stream_sum;
    k.probe_mac_i8 = probe_mac_i8;
    k.probe_mac_f32 = probe_mac_f32;
    k.quantize_act_rows = quantize_act_rows;
    k.matmul_q8_rows = matmul_q8_rows;
    k.dot_unpacked = dot_unpacked;
    k.matmul_packed = matmul_packed;
}

}  // namespace tandem::TD_ISA
