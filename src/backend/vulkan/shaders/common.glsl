// Helpers of every shader: weights are read as 32-bit words (no 8/16-bit storage extension needed), their
// blocks' bytes and halves picked out by offset, so any block layout at any byte offset can be read.
#extension GL_GOOGLE_include_directive : enable

uint byte_at(uint o) { return (wq[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
uint u16_at(uint o) { return byte_at(o) | (byte_at(o + 1u) << 8u); }
float f16_at(uint o) { return unpackHalf2x16(u16_at(o)).x; }
float bf16_at(uint o) { return uintBitsToFloat(u16_at(o) << 16u); }
int i8_at(uint o) { return int(byte_at(o) << 24u) >> 24; }

// The elements of a weight row (llama.cpp's block layouts, tandem/tensor_type.h): WTYPE 0 F32, 1 F16, 2 BF16,
// 3 Q8_0 (f16 d, 32 int8), 4 Q4_0 (f16 d, 16 bytes: low nibbles 0..15, high 16..31, minus 8).
#if WTYPE <= 2
#define BLOCK 1u
#else
#define BLOCK 32u
#endif
#if WTYPE == 0
#define BLOCK_BYTES 4u
#elif WTYPE <= 2
#define BLOCK_BYTES 2u
#elif WTYPE == 3
#define BLOCK_BYTES 34u
#elif WTYPE == 4
#define BLOCK_BYTES 18u
#endif

// Element j (< BLOCK) of the block at byte offset o
float weight_at(uint o, uint j) {
#if WTYPE == 0
    return uintBitsToFloat(wq[o >> 2]);
#elif WTYPE == 1
    return f16_at(o);
#elif WTYPE == 2
    return bf16_at(o);
#elif WTYPE == 3
    return f16_at(o) * float(i8_at(o + 2u + j));
#elif WTYPE == 4
    uint q = byte_at(o + 2u + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4u);
    return f16_at(o) * float(int(q) - 8);
#endif
}
