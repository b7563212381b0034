// y = x / sqrt(mean(x^2) + eps) * w (or, l2, x / sqrt(sum x^2 + eps)) per piece of `width` values of a row (heads); one workgroup per piece. The
// sum of squares: lane i sums i, i + 64, ... in order, then one fixed tree (batch invariant). w: a row, or none.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint x_off, x_stride, w_off, y_off, y_stride;  // floats
    uint width, pieces, rows, has_w, l2;  // l2: x / sqrt(sum x^2 + eps) (the L2 norm), no weight
    float eps;
} p;

shared float red[64];

void main() {
    const uint piece = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    if (piece >= p.pieces || t >= p.rows) return;
    const uint xo = p.x_off + t * p.x_stride + piece * p.width;
    const uint yo = p.y_off + t * p.y_stride + piece * p.width;
    float ss = 0.0;
    for (uint c = lane; c < p.width; c += 64u) ss += x[xo + c] * x[xo + c];
    red[lane] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1u) {
        if (lane < s) red[lane] += red[lane + s];
        barrier();
    }
    const float k = p.l2 != 0u ? 1.0 / sqrt(red[0] + p.eps) : 1.0 / sqrt(red[0] / float(p.width) + p.eps);
    barrier();  // (every lane has read red[0] before any writes y, which may be x)
    for (uint c = lane; c < p.width; c += 64u) {
        const float v = x[xo + c] * k;
        y[yo + c] = p.has_w != 0u ? v * w[p.w_off + c] : v;
    }
}
