// The SIMD level the engine's kernels run at (src/backend/cpu/isa.h), for tools and embedders.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct CpuInfo {
    std::string level;  // the level in use: scalar|avx2|avx512|avxvnni|avx512vnni|neon|dotprod|i8mm
    std::string detected;  // the best level this CPU supports
    bool forced = false;  // level chosen by TANDEM_CPU
    std::vector<std::string> supported;  // every level this CPU supports, lowest first
    std::string packed_kernel;  // the quantized matmul kernel of that level
};
// Throws tandem::Error if TANDEM_CPU names an unknown level or one this CPU lacks.
CpuInfo cpu_info();
// One line: "cpu: avx2 (forced by TANDEM_CPU; detected avx512vnni) ...".
std::string cpu_info_line();

// Sum of n 64-bit words (p 64-byte aligned, n % 32 == 0) by the active level's streaming loads: the memory
// bandwidth probe of `tandem bench`.
uint64_t memory_stream_sum(const uint64_t* p, size_t n);

// The compute probe of `tandem bench`: `iters` rounds of the active level's widest int8 multiply-accumulate
// sequence (int8 = true) or float FMA; returns the multiply-accumulates done (*sink depends on all of them).
uint64_t compute_probe(bool int8, int64_t iters, uint64_t* sink);

}  // namespace tandem
