// Reading and writing rows of a cache of any of its types, chosen at run time (a push constant: uniform for the
// whole dispatch): CT_F32 0, CT_F16 1, CT_BF16 2, CT_Q8_0 3, CT_Q4_0 4 (llama.cpp's block layouts). The including
// shader declares the buffer as BUF (uint words) and defines CACHE_PREFIX-free names by #define before including:
//   #define BUF kq  /  #define ELEM k_elem  /  #define BLOCK_OF k_block  /  #define BYTES_OF k_bytes
uint BYTE_AT(uint o) { return (BUF[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
float F16_AT(uint o) { return unpackHalf2x16(BYTE_AT(o) | (BYTE_AT(o + 1u) << 8u)).x; }

// Element e of the row at byte offset o
float ELEM(uint type, uint o, uint e) {
    if (type == 0u) return uintBitsToFloat(BUF[(o >> 2) + e]);
    if (type == 1u) return F16_AT(o + 2u * e);
    if (type == 2u) return uintBitsToFloat((BYTE_AT(o + 2u * e) | (BYTE_AT(o + 2u * e + 1u) << 8u)) << 16u);
    const uint b = e / 32u, j = e % 32u;
    if (type == 3u) {
        const uint bo = o + b * 34u;
        return F16_AT(bo) * float(int(BYTE_AT(bo + 2u + j) << 24u) >> 24);
    }
    const uint bo = o + b * 18u;
    uint q = BYTE_AT(bo + 2u + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4u);
    return F16_AT(bo) * float(int(q) - 8);
}
