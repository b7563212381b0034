// What matmul.comp and matmul_id.comp share: how a lane reads its part of a weight row, and the fixed tree that
// sums the row's lanes' partial sums.
//
// A row of C columns gets L lanes (p.lanes: the host's lanes_per_row, a power of two from 1 to 64 that depends on C
// only, about 64 columns per lane), and a workgroup of 64 lanes takes 64 / L consecutive rows: lanes g L .. g L + L - 1
// row r0 + g. A 4096-wide row gets the whole workgroup; a narrow row (a small model's, an expert's) shares it, so
// that narrow products are not one workgroup per row each summing a handful of products through six steps.
//
// A row is read in units: a block of 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4), one element (F32, F16, BF16), or a
// 32-element quarter-sub-block of a K-quant's 256 (so that a row of 4096 gives 128 units, two per lane, not 16 blocks
// for 16 of the 64 lanes). Lane l (of the row's L) takes units l, l + L, l + 2L, ... in that order and sums its
// products element by element, in the unit's order; the weights are decoded to exactly weight_at's values
// (common.glsl), the hot types from whole 32-bit words rather than byte by byte.
//
// The tree: step s = L / 2, ..., 2, 1 adds lane l + s's partial sum into lane l's (l < s); lane 0 holds the sum. Steps
// of s >= the subgroup's size go through shared memory, the rest (in the SUBGROUP variants) through
// subgroupShuffleDown, which pairs the same lanes (a row's lanes are within one subgroup when L is at most its size):
// both variants give the same bits, on any subgroup size (lanes are numbered by subgroup, gl_SubgroupID *
// gl_SubgroupSize + gl_SubgroupInvocationID, so the tree does not depend on how a driver maps invocations to
// subgroups). Nothing in a lane's work or in the tree depends on the number of rows of x or on a row's place among
// them, nor on which other weight rows share the workgroup: the batch invariance of backend.h.
#if WTYPE >= 8 && WTYPE <= 10
#define UNIT 32u
#else
#define UNIT BLOCK
#endif
#define UNITS_PER_BLOCK (BLOCK / UNIT)

#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle_relative : enable
// (only where the workgroup is whole subgroups, as on every driver known: else the shared-memory tree alone)
bool whole_subgroups() { return gl_NumSubgroups * gl_SubgroupSize == 64u; }
uint tree_lane() {
    return whole_subgroups() ? gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID : gl_LocalInvocationID.x;
}
uint tree_subgroup() { return whole_subgroups() ? gl_SubgroupSize : 1u; }
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

// Runs BODY for each weight of the unit that starts at element j0 of the block at byte offset o, j ascending, with
// `wv` the weight and `j` its place in the unit (each weight decoded once, whatever BODY does with it: matmul.comp
// uses it for every row of its pass, matmul_id.comp for its one row).
#if WTYPE == 3
#define FOR_UNIT_WEIGHTS(o, j0, BODY)                                                \
    {                                                                                \
        const float d_ = f16_at(o);                                                  \
        for (uint i_ = 0u; i_ < 8u; i_++) {                                          \
            const uint q4_ = word_at((o) + 2u + 4u * i_);                            \
            for (uint k_ = 0u; k_ < 4u; k_++) {                                      \
                precise float wv = d_ * float(int(q4_ << (24u - 8u * k_)) >> 24);    \
                const uint j = 4u * i_ + k_;                                         \
                BODY                                                                 \
            }                                                                        \
        }                                                                            \
    }
#elif WTYPE == 4
#define FOR_UNIT_WEIGHTS(o, j0, BODY)                                                \
    {                                                                                \
        const float d_ = f16_at(o);                                                  \
        for (uint h_ = 0u; h_ < 2u; h_++)                                            \
            for (uint i_ = 0u; i_ < 4u; i_++) {                                      \
                const uint q4_ = word_at((o) + 2u + 4u * i_) >> (4u * h_);           \
                for (uint k_ = 0u; k_ < 4u; k_++) {                                  \
                    precise float wv = float(int((q4_ >> (8u * k_)) & 15u) - 8) * d_; \
                    const uint j = 16u * h_ + 4u * i_ + k_;                          \
                    BODY                                                             \
                }                                                                    \
            }                                                                        \
    }
#elif WTYPE == 8
#define FOR_UNIT_WEIGHTS(o, j0, BODY)                                                \
    {                                                                                \
        const uint c_ = (j0) / 64u, upper_ = ((j0) % 64u) / 32u;                     \
        const uvec2 sm_ = scale_min_k4((o) + 4u, 2u * c_ + upper_);                  \
        precise float d1_ = f16_at(o) * float(sm_.x);                                \
        precise float m1_ = f16_at((o) + 2u) * float(sm_.y);                         \
        for (uint i_ = 0u; i_ < 8u; i_++) {                                          \
            const uint q4_ = word_at((o) + 16u + c_ * 32u + 4u * i_) >> (4u * upper_); \
            for (uint k_ = 0u; k_ < 4u; k_++) {                                      \
                precise float wv = d1_ * float((q4_ >> (8u * k_)) & 15u) - m1_;      \
                const uint j = 4u * i_ + k_;                                         \
                BODY                                                                 \
            }                                                                        \
        }                                                                            \
    }
#else
#define FOR_UNIT_WEIGHTS(o, j0, BODY)                                                \
    for (uint j = 0u; j < UNIT; j++) {                                               \
        const float wv = weight_at(o, (j0) + j);                                     \
        BODY                                                                         \
    }
#endif
