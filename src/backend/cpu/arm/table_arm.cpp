// The kernel table of one AArch64 level (a per-ISA unit, built once per level: backend/cpu/isa.h). The level follows from
// the flags it is built with.
#include "backend/cpu/isa_unit.h"

#include "backend/cpu/isa_kernels.h"

#include "backend/cpu/matmul_q8.h"

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
    fill_common(k);
    k.unpack_kq_row = unpack_kq_row_ref;  // scalar: only matrices that cannot be packed take this path
}

}  // namespace tandem::TD_ISA
