// Byte layouts of the 16-row packed matrices (the repacking and the reference kernels are in
// backend/cpu/matmul_packed*.cpp, the SIMD kernels of each level under src/backend/cpu/). One layout per type, shared by every
// level: 16 rows fill one 512-bit register (AVX512-VNNI), two 256-bit halves (AVX2) or four 128-bit quarters
// (NEON), four consecutive weights of each row side by side.
//
// Everything here is a constant or a `static` function, so a unit built for one SIMD level never shares a
// compiled copy of it with another level (see backend/cpu/isa.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace tandem::packed {

constexpr int R = 16;  // rows per group (= kPackedRows)

// --- Q8_0 / Q4_0: per group and 32-element block b ---
//   uint16 d[16]              half scales of the 16 rows' block b
//   Q8_0: uint8 q[8][16][4]   q[g][j][k] = (int8 value of row j, element 4g+k) ^ 0x80   (= value + 128)
//   Q4_0: uint8 q[4][16][4]   low nibble of q[g][j][k] = element 4g+k of row j (0..15, value + 8), high nibble =
//                             element 16+4g+k
static constexpr size_t q8_q_bytes(bool q4) { return q4 ? size_t(R) * 16 : size_t(R) * 32; }
static constexpr size_t q8_block_bytes(bool q4) { return 2 * R + q8_q_bytes(q4); }  // 544 (Q8_0), 288 (Q4_0)

// --- Q4_K / Q5_K: per group and 256-element super-block ---
//   uint16 d[16], dmin[16]        the rows' half scales
//   uint8  sc[8][16]              6-bit scale of sub-block j, row r: sc[j][r]
//   uint8  m[4][16][2]            m[p][r] = (m_2p, m_2p+1)
//   uint8  q[4][8][16][4]         q[p][g][r][k]: low nibble = weight 4g+k of sub-block 2p, high = of 2p+1
//   Q5_K only: uint8 qh[8][16][4] qh[g][r][k]: bit j = fifth bit of weight 4g+k of sub-block j
constexpr size_t kQ45OffD = 0, kQ45OffDmin = 2 * R, kQ45OffSc = 4 * R, kQ45OffM = kQ45OffSc + 8 * R;
constexpr size_t kQ45OffQ = kQ45OffM + 8 * R, kQ45OffQh = kQ45OffQ + 4 * 8 * R * 4;
static constexpr size_t q45k_block_bytes(bool q5) { return q5 ? kQ45OffQh + 8 * R * 4 : kQ45OffQh; }  // 2880 : 2368

// --- Q6_K: per group and 256-element super-block (16 sub-blocks of 16) ---
//   uint16 d[16]                  the rows' half scales
//   int8   sc[8][16][2]           sc[p][r] = (sc_2p, sc_2p+1)
//   uint8  ql[8][4][16][4]        ql[p][g][r][k]: low nibble = low 4 bits of weight 4g+k of sub-block 2p, high
//                                 nibble = the same of sub-block 2p+1
//   uint8  qh[4][4][16][4]        qh[Q][g][r][k]: bits 2i, 2i+1 = high 2 bits of weight 4g+k of sub-block 4Q+i
constexpr size_t kQ6OffD = 0, kQ6OffSc = 2 * R, kQ6OffQl = kQ6OffSc + 16 * R, kQ6OffQh = kQ6OffQl + 8 * 4 * R * 4;
constexpr size_t kQ6BlockBytes = kQ6OffQh + 4 * 4 * R * 4;  // 3360, the same as 16 rows of block_q6_K
static constexpr size_t q6k_ql_index(int p, int g, int row, int k) {
    return kQ6OffQl + ((size_t(p) * 4 + size_t(g)) * R + size_t(row)) * 4 + size_t(k);
}
static constexpr size_t q6k_qh_index(int Q, int g, int row, int k) {
    return kQ6OffQh + ((size_t(Q) * 4 + size_t(g)) * R + size_t(row)) * 4 + size_t(k);
}

}  // namespace tandem::packed
