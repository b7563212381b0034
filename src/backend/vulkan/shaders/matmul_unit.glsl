// What matmul.comp and matmul_id.comp share: how a lane reads its part of a weight row, and the fixed tree that
// sums the 64 lanes' partial sums.
//
// A row is read in units: a block of 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4), one element (F32, F16, BF16), or a
// 32-element quarter-sub-block of a K-quant's 256 (so that a row of 4096 gives 128 units, two per lane, not 16 blocks
// for 16 of the 64 lanes). Lane l takes units l, l + 64, l + 128, ... in that order and sums its products element by
// element, in the unit's order; the weights are decoded to exactly weight_at's values (common.glsl), the hot types
// from whole 32-bit words rather than byte by byte.
//
// The tree: step s = 32, 16, ..., 1 adds lane l + s's partial sum into lane l's (l < s); lane 0 holds the sum. Steps
// of s >= the subgroup's size go through shared memory, the rest (in the SUBGROUP variants) through
// subgroupShuffleDown, which pairs the same lanes: both variants give the same bits, on any subgroup size (lanes are
// numbered by subgroup, gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID, so the tree does not depend on how
// a driver maps invocations to subgroups). Nothing in a lane's work or in the tree depends on the number of rows of x
// or on a row's place among them: the batch invariance of backend.h.
#if WTYPE >= 8 && WTYPE <= 10
#define UNIT 32u
#else
#define UNIT BLOCK
#endif
#define UNITS_PER_BLOCK (BLOCK / UNIT)

#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle_relative : enable
uint tree_lane() { return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID; }
uint tree_subgroup() { return min(gl_SubgroupSize, 64u); }
#else
uint tree_lane() { return gl_LocalInvocationID.x; }
uint tree_subgroup() { return 1u; }
#endif

// The 4 bytes at byte offset o, any alignment (the word after is read only when o is not aligned, and then it holds
// byte o + 3, so no read passes the buffer's end)
uint word_at(uint o) {
    const uint i = o >> 2u, sh = (o & 3u) * 8u;
    return sh == 0u ? wq[i] : (wq[i] >> sh) | (wq[i + 1u] << (32u - sh));
}

// acc[t] += the products of the unit that starts at element j0 of the block at byte offset o with row t < nt of x:
// element j of the unit times x[xc + t * xs + j], j ascending (each weight decoded once, used for every row)
void unit_dot(uint o, uint j0, uint xc, uint xs, uint nt, inout float acc[8]) {
#if WTYPE == 3
    const float d = f16_at(o);
    for (uint i = 0u; i < 8u; i++) {
        const uint q4 = word_at(o + 2u + 4u * i);
        for (uint k = 0u; k < 4u; k++) {
            precise float wv = d * float(int(q4 << (24u - 8u * k)) >> 24);
            for (uint t = 0u; t < nt; t++) acc[t] += wv * x[xc + t * xs + 4u * i + k];
        }
    }
#elif WTYPE == 4
    const float d = f16_at(o);
    for (uint h = 0u; h < 2u; h++)  // the low nibbles are elements 0..15, the high ones 16..31
        for (uint i = 0u; i < 4u; i++) {
            const uint q4 = word_at(o + 2u + 4u * i) >> (4u * h);
            for (uint k = 0u; k < 4u; k++) {
                precise float wv = float(int((q4 >> (8u * k)) & 15u) - 8) * d;
                for (uint t = 0u; t < nt; t++) acc[t] += wv * x[xc + t * xs + 16u * h + 4u * i + k];
            }
        }
#elif WTYPE == 8
    const uint c = j0 / 64u, upper = (j0 % 64u) / 32u;
    const uvec2 sm = scale_min_k4(o + 4u, 2u * c + upper);
    precise float d1 = f16_at(o) * float(sm.x);
    precise float m1 = f16_at(o + 2u) * float(sm.y);
    for (uint i = 0u; i < 8u; i++) {
        const uint q4 = word_at(o + 16u + c * 32u + 4u * i) >> (4u * upper);
        for (uint k = 0u; k < 4u; k++) {
            precise float wv = d1 * float((q4 >> (8u * k)) & 15u) - m1;
            for (uint t = 0u; t < nt; t++) acc[t] += wv * x[xc + t * xs + 4u * i + k];
        }
    }
#else
    for (uint j = 0u; j < UNIT; j++) {
        const float wv = weight_at(o, j0 + j);
        for (uint t = 0u; t < nt; t++) acc[t] += wv * x[xc + t * xs + j];
    }
#endif
}
