// Block layouts of the quantized types, bit-compatible with GGUF/ggml. Each layout is pinned by static_assert.
// d/dmin/m are IEEE half (uint16_t bits). QK_K = 256 for the K-quants.
#pragma once
#include <cstdint>

namespace tandem {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK_K = 256, K_SCALE_SIZE = 12;

// x[j] = (nibble - 8) * d; low nibbles hold elements 0..15, high nibbles 16..31.
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18);

// x[j] = nibble * d + m.
struct block_q4_1 {
    uint16_t d, m;
    uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20);

// 5-bit: low 4 bits in qs as Q4_0, the fifth bit of element j in bit j of qh. x = (q - 16) * d.
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22);

// x = q * d + m.
struct block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24);

// x = q * d.
struct block_q8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
};

// MXFP4: 32 E2M1 values (low nibbles: elements 0..15, high nibbles: 16..31) and an E8M0 power-of-two scale.
// value = kvalues_mxfp4[nibble] * 2^(e - 128)  (the table holds twice the E2M1 values, hence 2^(e-127) / 2).
constexpr int QK_MXFP4 = 32;
struct block_mxfp4 {
    uint8_t e;
    uint8_t qs[QK_MXFP4 / 2];
};
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

static_assert(sizeof(block_q8_0) == 34);

// IQ4_NL: 4-bit indices (low nibbles: elements 0..15, high nibbles: 16..31) into a fixed non-linear table of
// 16 levels, times d. x[j] = kvalues_iq4nl[nibble] * d.
constexpr int QK4_NL = 32;
struct block_iq4_nl {
    uint16_t d;
    uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 18);
constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// 16 sub-blocks of 16; 4-bit scale and 4-bit min per sub-block; 2-bit quants. x = d*sc*q - dmin*m.
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
};
static_assert(sizeof(block_q2_K) == 84);

// 16 sub-blocks of 16; 6-bit signed scales (packed in 12 bytes); 2 low bits in qs, high bit in hmask.
// x = d * (sc - 32) * (q - (hbit ? 0 : 4)).
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(block_q3_K) == 110);

// 8 sub-blocks of 32; 6-bit scale and min per sub-block packed in 12 bytes; 4-bit quants. x = d*sc*q - dmin*m.
struct block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144);

// As Q4_K plus a fifth bit per element in qh.
struct block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176);

// 16 sub-blocks of 16 with int8 scales; 6-bit quants (4 low bits in ql, 2 high in qh). x = d * sc * (q - 32).
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210);

// Unpack the 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K.
static inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

}  // namespace tandem
