// y[t] += g x[t], g = sigmoid(gate_in[t] . gate_w) (a shared expert's gate; a fixed lane order and tree), or 1
// without gate_w. One workgroup per row.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Gi { float gi[]; };
layout(std430, binding = 2) readonly buffer Gw { float gw[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint x_off, x_stride, gi_off, gi_stride, gi_cols, gw_off, has_gw, y_off, y_stride, cols;
} p;

shared float red[64];

void main() {
    const uint t = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x;
    float g = 1.0;
    if (p.has_gw != 0u) {
        float d = 0.0;
        for (uint c = lane; c < p.gi_cols; c += 64u) d += gi[p.gi_off + t * p.gi_stride + c] * gw[p.gw_off + c];
        red[lane] = d;
        barrier();
        for (uint s = 32u; s > 0u; s >>= 1u) {
            if (lane < s) red[lane] += red[lane + s];
            barrier();
        }
        g = 1.0 / (1.0 + exp(-red[0]));
    }
    for (uint c = lane; c < p.cols; c += 64u) y[p.y_off + t * p.y_stride + c] += g * x[p.x_off + t * p.x_stride + c];
}
