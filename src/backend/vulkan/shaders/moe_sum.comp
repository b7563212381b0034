// A mixture's output (backend.h moe_sum): y[t][c] = the sum over row t's k choices in ascending expert order (ties
// by choice), from 0, of w (x[t k + j][c] + b[e][c]), w = weights[t][j] (1 without) * scale[e] (1 without); a
// choice of an expert not held here (held[e] == 0) is left out. One invocation per element.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };
layout(std430, binding = 3) readonly buffer B { float b[]; };
layout(std430, binding = 4) readonly buffer S { float sc[]; };
layout(std430, binding = 5) readonly buffer H { int held[]; };
layout(std430, binding = 6) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint x_off, x_stride, ids_off, ids_stride, k, w_off, w_stride, has_w, b_off, b_stride, has_b, s_off, has_s;
    uint y_off, y_stride, cols, rows;
} p;

void main() {
    const uint c = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    if (c >= p.cols || t >= p.rows) return;
    uint order[32];  // choices j, sorted by (expert, j)
    for (uint j = 0u; j < p.k; j++) {
        const int e = ids[p.ids_off + t * p.ids_stride + j];
        uint at = j;
        while (at > 0u && ids[p.ids_off + t * p.ids_stride + order[at - 1u]] > e) {
            order[at] = order[at - 1u];
            at--;
        }
        order[at] = j;
    }
    float s = 0.0;
    for (uint n = 0u; n < p.k; n++) {
        const uint j = order[n], e = uint(ids[p.ids_off + t * p.ids_stride + j]);
        if (held[e] == 0) continue;
        const float wt = (p.has_w != 0u ? w[p.w_off + t * p.w_stride + j] : 1.0) * (p.has_s != 0u ? sc[p.s_off + e] : 1.0);
        s += wt * (x[p.x_off + (t * p.k + j) * p.x_stride + c] + (p.has_b != 0u ? b[p.b_off + e * p.b_stride + c] : 0.0));
    }
    y[p.y_off + t * p.y_stride + c] = s;
}
