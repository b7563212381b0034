// The boundary between the engine and its per-ISA kernels: one table of function pointers per SIMD level.
//
// Each level's kernels live in their own translation units, compiled with exactly that level's flags (see
// CMakeLists.txt: the x86 sources under src/backend/cpu/x86 are built once per x86 level, the AArch64 ones under
// src/backend/cpu/arm once per ARM level) and with -DTD_ISA=isa_<level>, which names the namespace every function of
// such a unit lives in. A unit exports one function, tandem::isa_<level>::fill_table, and nothing else can reach
// its code: no target attributes, no inline function shared with the baseline build, so no instruction of a
// higher level can end up on a path a lower level runs (tests/check_isa_leaks.py verifies it on the binaries).
//
// The table holds plain-data views (no std:: containers cross this boundary). The helpers (dot_f32 .. stream_sum)
// are filled at every level, the scalar one with the references; a matmul entry left null means "no kernel of
// this kind at this level": backend/cpu/kernels.cpp then takes the generic reference path.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_level.h"
#include "backend/cpu/act_q8.h"
#include "tandem/tensor_type.h"

namespace tandem {

// Cached positions per flash-attention tile (backend/cpu/kernels.h attn_tile: one bit of a 32-bit mask each).
constexpr int kAttnTile = 32;

struct IsaKernels {
    CpuLevel level = CpuLevel::Scalar;

    // --- float helpers (contracts: backend/cpu/kernels.h) ---
    float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
    float (*dot_f32_f16)(const float* a, const uint16_t* b, int64_t n) = nullptr;
    void (*axpy_f16)(float w, const uint16_t* x, float* y, int64_t n) = nullptr;
    void (*silu_mul)(float* gate, const float* up, int64_t n) = nullptr;
    void (*delta_rule)(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                       float beta, int S, float* o) = nullptr;
    // Flash-attention tiles (contracts: backend/cpu/kernels.h). attn_tile only for hd % 8 == 0 and hd <= 256 (the
    // wrapper falls back to the reference otherwise); kv_tile_f32 returns false for a type the level leaves to the
    // reference conversion (it may be null at the scalar level).
    void (*attn_tile)(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
                      const float* vt, int hd, float scale, float* mx, float* l, float* o) = nullptr;
    bool (*kv_tile_f32)(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile) = nullptr;
    // Integer scores for Q8_0 / Q4_0 keys (backend/cpu/kernels.h attn_tile_i8; hd % 32 == 0, hd <= 256); null at the
    // levels without vpdpbusd / sdot, which score every cache type in floats.
    void (*attn_tile_i8)(const int8_t* qs, const float* qd, const int32_t* qc, size_t q_stride, int n_rows, int group,
                         const uint32_t* masks, const uint8_t* kt, const float* kd, const float* vt, int hd,
                         float scale, float* mx, float* l, float* o) = nullptr;
    // y[t * ldy + r] = W.row(r) . x[t] for rows [r0, r1) of a row-major (rows, cols) F32 / F16 / BF16 matrix.
    void (*matmul_f32_rows)(const float* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                            int64_t r1) = nullptr;
    void (*matmul_f16_rows)(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy,
                            int64_t r0, int64_t r1) = nullptr;
    void (*matmul_bf16_rows)(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy,
                             int64_t r0, int64_t r1) = nullptr;

    // --- 8-bit activations (contract: backend/cpu/act_q8.h; bit-identical to the reference) ---
    void (*quantize_act_rows)(const float* x, int64_t n, int group, const ActRows& out, int r0, int r1) = nullptr;

    // --- integer matmuls (contracts: backend/cpu/matmul_q8.h) ---
    // Q8_0 / Q4_0 rows in the file's layout (matrices that are not packed).
    void (*matmul_q8_rows)(TensorType t, const uint8_t* w, size_t row_stride, int64_t cols, const ActRows& a, float* y,
                           int64_t ldy, int64_t r0, int64_t r1) = nullptr;
    // K-quant rows in the file's layout: unpack one row (q: n, lane_scale: n / 4, offset: n / 32), then dot it
    // with activation row t.
    void (*unpack_kq_row)(TensorType t, const uint8_t* row, int64_t n, int8_t* q, float* lane_scale,
                          float* offset) = nullptr;
    float (*dot_unpacked)(const int8_t* q, const float* lane_scale, const float* offset, const ActRows& a,
                          int t) = nullptr;
    // Matrices repacked into 16-row groups (backend/cpu/matmul_q8.h: packable()); null at levels that keep the file's
    // layout, and then the loader does not repack.
    void (*matmul_packed)(TensorType t, const uint8_t* packed, int64_t cols, const ActRows& a, float* y, int64_t ldy,
                          int64_t r0, int64_t r1) = nullptr;
    // What the packed kernel is, for `tandem info` and bench output ("none" when matmul_packed is null).
    const char* packed_kernel = "none";

    // --- memory bandwidth probe (tandem bench): sum of n 64-bit words, p 64-byte aligned, n % 32 == 0 ---
    uint64_t (*stream_sum)(const uint64_t* p, size_t n) = nullptr;

    // --- compute probe (tandem bench): `iters` rounds of the level's widest int8 multiply-accumulate sequence
    // (x86: vpdpbusd with VNNI, else vpmaddubsw + vpmaddwd + vpaddd; AArch64: smmla, sdot, or smull + sadalp) and
    // of its float FMA, on independent register accumulators. Each returns the multiply-accumulates it did and
    // stores a value depending on all of them in *sink (so nothing is optimized away).
    uint64_t (*probe_mac_i8)(int64_t iters, uint64_t* sink) = nullptr;
    uint64_t (*probe_mac_f32)(int64_t iters, uint64_t* sink) = nullptr;
};

// The table of the active level (cpu_level_active()).
const IsaKernels& isa();
// The table of level l, or null when this build or this CPU cannot run it. Tests
// and benchmarks use it to run every level this machine has.
const IsaKernels* isa_for(CpuLevel l);

// Fills the entries a level provides (defined in that level's units; declared here for the dispatcher only).
void fill_scalar_table(IsaKernels& t);
#if defined(__x86_64__)
namespace isa_avx2 {
void fill_table(IsaKernels& t);
}
namespace isa_avx512 {
void fill_table(IsaKernels& t);
}
namespace isa_avxvnni {
void fill_table(IsaKernels& t);
}
namespace isa_avx512vnni {
void fill_table(IsaKernels& t);
}
#elif defined(__aarch64__)
namespace isa_neon {
void fill_table(IsaKernels& t);
}
namespace isa_dotprod {
void fill_table(IsaKernels& t);
}
namespace isa_i8mm {
void fill_table(IsaKernels& t);
}
#endif

}  // namespace tandem
