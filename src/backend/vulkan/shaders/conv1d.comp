// A causal convolution of K taps for one row (backend.h conv1d; dispatched once per row, in order): per channel c,
// y = taps[c][K-1] x[c] + sum_{r < K-1} taps[c][r] win_in[r][c] (this order), then win_out = win_in moved up one
// row with x last (one invocation owns a channel: in place is safe), y = silu(y) when asked.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer T { float taps[]; };
layout(std430, binding = 2) readonly buffer Wi { float wi[]; };
layout(std430, binding = 3) buffer Wo { float wo[]; };
layout(std430, binding = 4) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint x_off, t_off, t_stride, wi_off, wo_off, y_off, C, K, silu;
} p;

void main() {
    const uint c = gl_GlobalInvocationID.x;
    if (c >= p.C) return;
    const uint K = p.K, C = p.C, tr = p.t_off + c * p.t_stride;
    const float xc = x[p.x_off + c];
    float acc = taps[tr + K - 1u] * xc;
    float win[16];
    for (uint j = 0u; j + 1u < K; j++) {
        win[j] = wi[p.wi_off + j * C + c];
        acc += taps[tr + j] * win[j];
    }
    for (uint j = 0u; j + 2u < K; j++) wo[p.wo_off + j * C + c] = win[j + 1u];
    wo[p.wo_off + (K - 2u) * C + c] = xc;
    y[p.y_off + c] = p.silu != 0u ? acc / (1.0 + exp(-acc)) : acc;
}
