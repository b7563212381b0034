// The kernel table of one AArch64 level (a per-ISA unit, built once per level: cpu/isa.h). The level follows from
// the flags it is built with.
#include "cpu/isa_unit.h"

#include "cpu/isa_kernels.h"

#include "quant/matmul_q8.h"

namespace tandem::TD_ISA {

void fill_table(IsaKernels& k) {
#if defined(__ARM_FEATURE_MATMUL_INT8) && defined(__ARM_FEATURE_DOTPROD)
    k.level = CpuLevel::I8mm;
    k.packed_kernel = "16-row packed, SMMLA for token pairs, SDOT";
#elif defined(__ARM_FEATURE_DOTPROD)
    k.level = CpuLevel::Dotprod;
    k.packed_kernel = "16-row packed, SDOT";
#else
    k.level = CpuLevel::Neon;
    k.packed_kernel = "16-row packed, SMULL+SADALP";
#endif
    k.dot_f32 = dot_f32;
    k.dot_f32_f16 = dot_f32_f16;
    k.axpy_f16 = axpy_f16;
    k.silu_mul = silu_mul;
    k.attention_heads = attention_heads;
    k.matmul_f32_rows = matmul_f32_rows;
    k.matmul_f16_rows = matmul_f16_rows;
    k.matmul_bf16_rows = matmul_bf16_rows;
    k.stream_sum = stream_sum;
    k.quantize_act_rows = quantize_act_rows;
    k.matmul_q8_rows = matmul_q8_rows;
    k.unpack_kq_row = unpack_kq_row_ref;  // scalar: only matrices that cannot be packed take this path
    k.dot_unpacked = dot_unpacked;
    k.matmul_packed = matmul_packed;
}

}  // namespace tandem::TD_ISA
