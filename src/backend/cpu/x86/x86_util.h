// Small AVX2 helpers shared by the x86 per-ISA units (included after backend/cpu/isa_unit.h; everything is static and
// inside tandem::TD_ISA, so each level compiles its own copy).
#pragma once
#include <immintrin.h>

namespace tandem::TD_ISA {

// Sum of the eight lanes.
static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

// Software prefetch of every cache line of [p, p + bytes) 1 KiB ahead into L1 and 16 KiB ahead into L2: the far
// one keeps the memory streaming while a long tile computes, the near one has the lines in L1 when the loads come.
static inline void prefetch_stream(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (size_t o = 0; o < bytes; o += 64) {
        _mm_prefetch(c + 1024 + o, _MM_HINT_T0);
        _mm_prefetch(c + 16384 + o, _MM_HINT_T1);
    }
}

}  // namespace tandem::TD_ISA
