// Experts (backend.h matmul_id): y[i] (R) = x[i or i / k] W_e^T for choice i = t k + j of expert e = ids[t][j],
// p.lanes lanes per (weight row, choice), 64 / p.lanes rows of one choice per workgroup: the same units, lanes and
// tree as matmul.comp (matmul_unit.glsl: batch invariant). The experts of one dispatch are those in one buffer: offs[e] is expert e's byte offset there, or ~0
// for one elsewhere (another dispatch's) or held by no one here (a tensor split's other rank), whose rows of y are
// left as they were.
#version 450
#extension GL_GOOGLE_include_directive : enable
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wq { uint wq[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Ids { int ids[]; };
layout(std430, binding = 4) readonly buffer Offs { uint offs[]; };
layout(push_constant) uniform P {
    uint w_stride;  // bytes
    uint x_off, x_stride, y_off, y_stride, ids_off, ids_stride;  // floats, ints
    uint k, rows, cols, nk, x_per_choice;
    uint lanes;  // per weight row (matmul_unit.glsl)
} p;
#include "common.glsl"
#include "matmul_unit.glsl"

shared float red[64];

void main() {
    const uint L = p.lanes, lane = tree_lane(), sg = tree_subgroup(), l = lane % L;
    const uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * 65535u) * (64u / L), i = gl_WorkGroupID.y;
    if (r0 >= p.rows || i >= p.nk) return;
    const uint e = uint(ids[p.ids_off + (i / p.k) * p.ids_stride + i % p.k]);
    const uint off = offs[e];
    if (off == 0xFFFFFFFFu) return;  // (uniform over the workgroup)
    const uint r = r0 + lane / L;
    const bool live = r < p.rows;
    const uint row = off + r * p.w_stride;
    const uint xr = p.x_off + (p.x_per_choice != 0u ? i : i / p.k) * p.x_stride;
    const uint nu = (p.cols / BLOCK) * UNITS_PER_BLOCK;
    const uint ts = min(sg, L);
    float acc = 0.0;
    if (live)
        for (uint u = l; u < nu; u += L) {
            const uint b = u / UNITS_PER_BLOCK, j0 = (u % UNITS_PER_BLOCK) * UNIT;
            const uint o = row + b * BLOCK_BYTES, xc = xr + b * BLOCK + j0;
            FOR_UNIT_WEIGHTS(o, j0, acc += wv * x[xc + j];)
        }
    if (ts < L) {
        red[lane] = acc;
        barrier();
        for (uint s = L / 2u; s >= ts; s >>= 1u) {
            if (l < s) red[lane] += red[lane + s];
            barrier();
        }
        acc = red[lane];
    }
#ifdef SUBGROUP
    for (uint s = ts / 2u; s > 0u; s >>= 1u) acc += subgroupShuffleDown(acc, s);
#endif
    if (l == 0u && live) y[p.y_off + i * p.y_stride + r] = acc;
}
