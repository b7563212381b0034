// IEEE half and bfloat16 conversions (scalar, exact; F16C is used by the fast kernels where present).
#pragma once
#include <cstdint>
#include <cstring>

namespace tandem {

inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t bits_from_f32(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return f32_from_bits(sign);
        // subnormal: value = mant * 2^-24
        float v = float(mant) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round-to-nearest-even conversion to half.
inline uint16_t f32_to_fp16(float f) {
    uint32_t x = bits_from_f32(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow -> inf
    if (absx < 0x38800000u) {  // subnormal half or zero
        if (absx < 0x33000000u) return uint16_t(sign);
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;  // 14 + (112 - e) ... produce mant in half subnormal
        uint32_t halfm = m >> (shift);
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (halfm & 1))) halfm++;
        return uint16_t(sign | halfm);
    }
    uint32_t h = ((absx >> 13) - (112u << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return uint16_t(sign | h);
}

// 65536-entry table: fp16_table()[h] == fp16_to_f32(h). Built once, thread-safe.
const float* fp16_table();

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
    uint32_t x = bits_from_f32(f);
    if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 64);  // quiet NaN
    return uint16_t((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

}  // namespace tandem
