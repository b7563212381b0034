// RoPE of each head of a row at its position, in place (backend.h RopeArgs): pairs (2i, 2i+1) (NORM) or (i,
// i + n_rot/2) (NEOX) of dims [offset, offset + n_rot), angles from the cos / sin tables' row pos, times mscale.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Cs { float cs[]; };
layout(std430, binding = 2) readonly buffer Sn { float sn[]; };
layout(std430, binding = 3) readonly buffer Pos { int pos[]; };
layout(push_constant) uniform P {
    uint x_off, x_stride, cos_off, cos_stride, sin_off, sin_stride;  // floats
    uint n_head, head_dim, n_rot, offset, neox, rows;
    float mscale;
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x, h = gl_GlobalInvocationID.y, t = gl_GlobalInvocationID.z;
    const uint half_rot = p.n_rot / 2u;
    if (i >= half_rot || h >= p.n_head || t >= p.rows) return;
    const uint ps = uint(pos[t]);
    const float c = cs[p.cos_off + ps * p.cos_stride + i] * p.mscale;
    const float s = sn[p.sin_off + ps * p.sin_stride + i] * p.mscale;
    const uint base = p.x_off + t * p.x_stride + h * p.head_dim + p.offset;
    const uint i0 = p.neox != 0u ? base + i : base + 2u * i;
    const uint i1 = p.neox != 0u ? base + i + half_rot : base + 2u * i + 1u;
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * c - x1 * s;
    x[i1] = x0 * s + x1 * c;
}
