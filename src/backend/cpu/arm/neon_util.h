// Integer dot-product building blocks of the AArch64 levels (included after backend/cpu/isa_unit.h; inside
// tandem::TD_ISA, so each level compiles its own copy). The level's flags decide the instruction:
//   dotprod / i8mm (__ARM_FEATURE_DOTPROD): SDOT, four int8 products summed into each int32 lane;
//   neon: SMULL + SADALP, the same sums in two steps (products widened to int16, pairs added into int32).
// Both are exact for any int8 inputs.
#pragma once
#include <arm_neon.h>

namespace tandem::TD_ISA {

// Four int32 lanes, lane i += sum_k w[4i + k] * a[4i + k] (16 int8 weights: 4 rows x 4 values; a: the four
// activations broadcast, or any 16 bytes).
struct Dot4 {
#if defined(__ARM_FEATURE_DOTPROD)
    int32x4_t v;
    void zero() { v = vdupq_n_s32(0); }
    void add(int8x16_t w, int8x16_t a) { v = vdotq_s32(v, w, a); }
    int32x4_t get() const { return v; }
#else
    int32x4_t lo, hi;  // lo: lanes (row0 pair 0, row0 pair 1, row1 pair 0, row1 pair 1); hi: rows 2, 3
    void zero() { lo = hi = vdupq_n_s32(0); }
    void add(int8x16_t w, int8x16_t a) {
        lo = vpadalq_s16(lo, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
        hi = vpadalq_s16(hi, vmull_high_s8(w, a));
    }
    int32x4_t get() const { return vpaddq_s32(lo, hi); }
#endif
};

static inline int8x16_t bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

// Four half-precision scales as floats.
static inline float32x4_t load_h4(const uint8_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}

}  // namespace tandem::TD_ISA
