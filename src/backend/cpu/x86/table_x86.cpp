// The kernel table of one x86 level (a per-ISA unit, built once per level: backend/cpu/isa.h). Which kernels a level
// gets follows from the flags it is built with.
#include "backend/cpu/isa_unit.h"

#include "backend/cpu/isa_kernels.h"

namespace tandem::TD_ISA {

void unpack_kq_row(TensorType t, const uint8_t* row, int64_t n, int8_t* q, float* ls, float* off);  // quant_avx2.cpp
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
void attn_tile_i8(const int8_t* qs, const float* qd, const int32_t* qc, size_t q_stride, int n_rows, int group,
                  const uint32_t* masks, const uint8_t* kt, const float* kd, const float* vt, int hd, float scale,
                  float* mx, float* l, float* o);  // float_avx2.cpp
#endif

void fill_table(IsaKernels& k) {
#if defined(__AVX512VNNI__)
    k.level = CpuLevel::Avx512Vnni;
    k.packed_kernel = "16-row packed, 512-bit vpdpbusd";
#elif defined(__AVXVNNI__)
    k.level = CpuLevel::AvxVnni;
    k.packed_kernel = "16-row packed, 256-bit vpdpbusd (AVX-VNNI)";
#elif defined(__AVX512F__)
    k.level = CpuLevel::Avx512;
    k.packed_kernel = "16-row packed, 256-bit vpmaddubsw (EVEX)";
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    k.level = CpuLevel::Avx2;
    k.packed_kernel = "16-row packed, 256-bit vpmaddubsw";
#else
#error "an x86 level unit built without AVX2+FMA+F16C"
#endif
    fill_common(k);
    k.unpack_kq_row = unpack_kq_row;
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
    k.attn_tile_i8 = attn_tile_i8;
#endif
}

}  // namespace tandem::TD_ISA
