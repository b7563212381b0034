// Helpers of every shader: weights are read as 32-bit words (no 8/16-bit storage extension needed), their
// blocks' bytes and halves picked out by offset, so any block layout at any byte offset can be read.
#extension GL_GOOGLE_include_directive : enable

uint byte_at(uint o) { return (wq[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
uint u16_at(uint o) {
    return (o & 1u) == 0u ? (wq[o >> 2u] >> ((o & 2u) * 8u)) & 0xFFFFu : byte_at(o) | (byte_at(o + 1u) << 8u);
}
float f16_at(uint o) { return unpackHalf2x16(u16_at(o)).x; }
float bf16_at(uint o) { return uintBitsToFloat(u16_at(o) << 16u); }
int i8_at(uint o) { return int(byte_at(o) << 24u) >> 24; }

// The elements of a weight row (llama.cpp's block layouts, src/quant/blocks.h), decoded as tandem's
// dequantize_row_ref does, products in the same order and never contracted into an FMA (`precise`), so embedding
// rows are the CPU's bits: WTYPE 0 F32, 1 F16, 2 BF16, 3 Q8_0, 4 Q4_0, 5 Q4_1, 6 Q5_0, 7 Q5_1 (blocks of 32),
// 8 Q4_K, 9 Q5_K, 10 Q6_K (blocks of 256), 11 MXFP4 (32).
#if WTYPE <= 2
#define BLOCK 1u
#elif WTYPE >= 8 && WTYPE <= 10
#define BLOCK 256u
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
#elif WTYPE == 5
#define BLOCK_BYTES 20u
#elif WTYPE == 6
#define BLOCK_BYTES 22u
#elif WTYPE == 7
#define BLOCK_BYTES 24u
#elif WTYPE == 8
#define BLOCK_BYTES 144u
#elif WTYPE == 9
#define BLOCK_BYTES 176u
#elif WTYPE == 10
#define BLOCK_BYTES 210u
#elif WTYPE == 11
#define BLOCK_BYTES 17u
#endif

// The 6-bit scale (x) and min (y) of sub-block j of a Q4_K / Q5_K block whose 12 scale bytes start at s
uvec2 scale_min_k4(uint s, uint j) {
    if (j < 4u) return uvec2(byte_at(s + j) & 63u, byte_at(s + j + 4u) & 63u);
    return uvec2((byte_at(s + j + 4u) & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u),
                 (byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u));
}

// Element j (< BLOCK) of the block at byte offset o
float weight_at(uint o, uint j) {
#if WTYPE == 0
    return uintBitsToFloat(wq[o >> 2]);
#elif WTYPE == 1
    return f16_at(o);
#elif WTYPE == 2
    return bf16_at(o);
#elif WTYPE == 3
    precise float r = f16_at(o) * float(i8_at(o + 2u + j));
    return r;
#elif WTYPE == 4 || WTYPE == 5 || WTYPE == 11
    const uint qo = WTYPE == 4 ? 2u : WTYPE == 5 ? 4u : 1u;
    uint q = byte_at(o + qo + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4u);
#if WTYPE == 4
    precise float r = float(int(q) - 8) * f16_at(o);
#elif WTYPE == 5
    precise float r = float(q) * f16_at(o) + f16_at(o + 2u);
#else
    const int kv[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    precise float r = float(kv[q]) * ldexp(1.0, int(byte_at(o)) - 128);
#endif
    return r;
#elif WTYPE == 6 || WTYPE == 7
    const uint hb = WTYPE == 6 ? 2u : 4u;  // qh, then qs
    const uint qh = byte_at(o + hb) | (byte_at(o + hb + 1u) << 8u) | (byte_at(o + hb + 2u) << 16u) |
                    (byte_at(o + hb + 3u) << 24u);
    const uint l = j & 15u, ql = byte_at(o + hb + 4u + l);
    const uint q = j < 16u ? ((ql & 15u) | (((qh >> l) << 4u) & 16u)) : ((ql >> 4u) | ((qh >> (l + 12u)) & 16u));
#if WTYPE == 6
    precise float r = float(int(q) - 16) * f16_at(o);
#else
    precise float r = float(q) * f16_at(o) + f16_at(o + 2u);
#endif
    return r;
#elif WTYPE == 8 || WTYPE == 9
    const uint c = j / 64u, w = j % 64u, l = w % 32u;
    const uvec2 sm = scale_min_k4(o + 4u, 2u * c + (w < 32u ? 0u : 1u));
    precise float d1 = f16_at(o) * float(sm.x);
    precise float m1 = f16_at(o + 2u) * float(sm.y);
#if WTYPE == 8
    const uint qb = byte_at(o + 16u + c * 32u + l);
    const uint q = w < 32u ? (qb & 15u) : (qb >> 4u);
#else
    const uint qb = byte_at(o + 48u + c * 32u + l);
    const uint hbit = (byte_at(o + 16u + l) & ((w < 32u ? 1u : 2u) << (2u * c))) != 0u ? 16u : 0u;
    const uint q = (w < 32u ? (qb & 15u) : (qb >> 4u)) + hbit;
#endif
    precise float r = d1 * float(q) - m1;
    return r;
#elif WTYPE == 10
    const uint n = j / 128u, w = j % 128u, k = w / 32u, l = w % 32u;
    const uint ql = byte_at(o + n * 64u + l + ((k & 1u) != 0u ? 32u : 0u));
    const uint qh = byte_at(o + 128u + n * 32u + l);
    const uint q = (k < 2u ? (ql & 15u) : (ql >> 4u)) | (((qh >> (2u * k)) & 3u) << 4u);
    const int sc = i8_at(o + 192u + n * 8u + l / 16u + 2u * k);
    precise float r = f16_at(o + 208u) * float(sc) * float(int(q) - 32);
    return r;
#endif
}
