// Attention of listed rows of a pass over one segment's cache (backend.h ATTENTION): one workgroup per (row, head).
// Positions lo..pos are taken in chunks of 64 from lo: lane i scores position p0 + i (its dot product over the head
// in order), the chunk's maximum is one fixed tree, and the softmax is kept online over the chunks (running
// maximum m, normalizer l, and the output accumulators, lane j holding dims j, j + 64, ...), each chunk's positions
// added in position order. Every step depends on the row's own positions only, so a row's output is the same
// bits alone, in a verification chain or in a token tree (batch invariance); a sink logit starts the softmax.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer Kq { uint kq[]; };
layout(std430, binding = 3) readonly buffer Vq { uint vq[]; };
layout(std430, binding = 4) readonly buffer Meta { int meta[]; };  // per listed row: r, pos, lo, tail offset (-1)
layout(std430, binding = 5) readonly buffer Tails { int tails[]; };
layout(std430, binding = 6) readonly buffer Sinks { float sinks[]; };
layout(push_constant) uniform P {
    uint q_off, q_stride, o_off, o_stride;  // floats
    uint k_off, k_stride, k_rows, k_type, v_off, v_stride, v_rows, v_type;  // bytes, rows, cache types
    uint n_head, n_head_kv, head_dim, pos0, has_sinks, sinks_off;
    float scale;
} p;

#define BUF kq
#define BYTE_AT k_byte_at
#define F16_AT k_f16_at
#define ELEM k_elem
#include "cache_io.glsl"
#undef BUF
#undef BYTE_AT
#undef F16_AT
#undef ELEM
#define BUF vq
#define BYTE_AT v_byte_at
#define F16_AT v_f16_at
#define ELEM v_elem
#include "cache_io.glsl"

shared float sc[64];
shared uint srow_v[64];
shared float red[64];

void main() {
    const uint i = gl_WorkGroupID.x, h = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    const int r = meta[4u * i], pos = meta[4u * i + 1u], lo = meta[4u * i + 2u], toff = meta[4u * i + 3u];
    const uint kh = h / (p.n_head / p.n_head_kv), hd = p.head_dim;
    const uint qo = p.q_off + uint(r) * p.q_stride + h * hd;
    const bool sink = p.has_sinks != 0u;
    float m = sink ? sinks[p.sinks_off + h] : 0.0;
    float l = sink ? 1.0 : 0.0;
    bool started = sink;
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (int p0 = lo; p0 <= pos; p0 += 64) {
        const int ps = p0 + int(lane);
        float s = -3.0e38;
        if (ps <= pos) {
            const int slot = (ps < int(p.pos0) || toff < 0) ? ps : tails[toff + ps - int(p.pos0)];
            const uint kr = p.k_off + (uint(slot) % p.k_rows) * p.k_stride;
            float d = 0.0;
            for (uint e = 0u; e < hd; e++) d += q[qo + e] * k_elem(p.k_type, kr, kh * hd + e);
            s = d * p.scale;
            srow_v[lane] = p.v_off + (uint(slot) % p.v_rows) * p.v_stride;
        }
        sc[lane] = s;
        red[lane] = s;
        barrier();
        for (uint w = 32u; w > 0u; w >>= 1u) {
            if (lane < w) red[lane] = max(red[lane], red[lane + w]);
            barrier();
        }
        const float cmax = red[0];
        const float mn = started ? max(m, cmax) : cmax;
        const float alpha = started ? exp(m - mn) : 0.0;
        l *= alpha;
        for (uint j = 0u; j < 4u; j++) acc[j] *= alpha;
        const int count = min(64, pos - p0 + 1);
        for (int k = 0; k < count; k++) {
            const float wgt = exp(sc[k] - mn);
            l += wgt;
            const uint vr = srow_v[k];
            for (uint j = 0u; j < 4u; j++) {
                const uint e = lane + 64u * j;
                if (e < hd) acc[j] += wgt * v_elem(p.v_type, vr, kh * hd + e);
            }
        }
        m = mn;
        started = true;
        barrier();  // (sc, srow_v and red are rewritten by the next chunk)
    }
    const uint oo = p.o_off + uint(r) * p.o_stride + h * hd;
    for (uint j = 0u; j < 4u; j++) {
        const uint e = lane + 64u * j;
        if (e < hd) o[oo + e] = acc[j] / l;
    }
}
