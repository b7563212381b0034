// y (n, E) = rows ids[0..n) of a table of weight type WTYPE, dequantized (exact: the same products as the CPU's).
#version 450
#extension GL_GOOGLE_include_directive : enable
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wq { uint wq[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint w_off, w_stride;  // bytes
    uint ids_off;  // ints
    uint y_off, y_stride;  // floats
    uint cols, n;
} p;
#include "common.glsl"

void main() {
    const uint c = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    if (c >= p.cols || t >= p.n) return;
    const uint row = p.w_off + uint(ids[p.ids_off + t]) * p.w_stride;
    y[p.y_off + t * p.y_stride + c] = weight_at(row + (c / BLOCK) * BLOCK_BYTES, c % BLOCK);
}
