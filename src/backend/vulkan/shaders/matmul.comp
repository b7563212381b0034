// y (n, R) = x (n, C) W^T for one weight type (WTYPE, common.glsl). Each weight row r gets p.lanes lanes of a
// workgroup (64 / p.lanes rows per workgroup: matmul_unit.glsl), which read the row once for up to 8 rows of x at a
// time (a verification pass of k rows costs one pass over W per 8 rows).
// Batch invariance: y[t][r] is the sum of the row's lanes' partial sums in one fixed tree, each lane's over the same
// units in the same order (matmul_unit.glsl), whatever n is and wherever row t sits among the rows: the same bits
// for a row alone or among k.
#version 450
#extension GL_GOOGLE_include_directive : enable
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wq { uint wq[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint w_off, w_stride;  // bytes
    uint x_off, x_stride, y_off, y_stride;  // floats
    uint rows, cols, n;
    uint lanes;  // per weight row (matmul_unit.glsl)
} p;
#include "common.glsl"
#include "matmul_unit.glsl"

shared float red[8][64];

void main() {
    const uint L = p.lanes, lane = tree_lane(), sg = tree_subgroup(), l = lane % L;
    const uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u) * (64u / L);
    if (r0 >= p.rows) return;  // (the whole workgroup: no barrier is skipped by some lanes only)
    const uint r = r0 + lane / L;
    const bool live = r < p.rows;  // (a row past the end: its lanes still take part in the barriers)
    const uint nu = (p.cols / BLOCK) * UNITS_PER_BLOCK;
    const uint row = p.w_off + r * p.w_stride;
    const uint ts = min(sg, L);  // the tree's steps of s >= ts go through shared memory, the others through shuffles
    for (uint t0 = 0u; t0 < p.n; t0 += 8u) {
        const uint nt = min(8u, p.n - t0);
        float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        if (live)
            for (uint u = l; u < nu; u += L) {
                const uint b = u / UNITS_PER_BLOCK, j0 = (u % UNITS_PER_BLOCK) * UNIT;
                const uint o = row + b * BLOCK_BYTES, xc = p.x_off + t0 * p.x_stride + b * BLOCK + j0;
                FOR_UNIT_WEIGHTS(o, j0, for (uint t = 0u; t < nt; t++) acc[t] += wv * x[xc + t * p.x_stride + j];)
            }
        if (ts < L) {
            for (uint t = 0u; t < 8u; t++) red[t][lane] = acc[t];
            barrier();
            for (uint s = L / 2u; s >= ts; s >>= 1u) {
                if (l < s)
                    for (uint t = 0u; t < 8u; t++) red[t][lane] += red[t][lane + s];
                barrier();
            }
            for (uint t = 0u; t < 8u; t++) acc[t] = red[t][lane];
        }
#ifdef SUBGROUP
        for (uint s = ts / 2u; s > 0u; s >>= 1u)  // the rest, within a subgroup
            for (uint t = 0u; t < 8u; t++) acc[t] += subgroupShuffleDown(acc[t], s);
#endif
        if (l == 0u && live)
            for (uint t = 0u; t < nt; t++) y[p.y_off + (t0 + t) * p.y_stride + r] = acc[t];
        if (ts < L) barrier();
    }
}
