// Elementwise ops over (rows, cols) with row strides (column slices allowed), x optionally one broadcast row:
//   0 copy y = x   1 add y += s x   2 mul y *= x   3 scale y *= s   4 softcap y = c tanh(y / div / c) or y / div
//   5 glu silu: y = silu(y) * x (y the gate, x the up)   6 glu gelu_tanh   7 glu swiglu_oai   8 glu sigmoid
//   9 gated by silu(x): y = y x / (1 + exp(-x))
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint mode, rows, cols;
    uint x_off, x_stride, x_bcast, y_off, y_stride;  // floats
    float s, c;
} p;

float gelu_tanh(float v) {
    const float k = 0.7978845608028654;  // sqrt(2 / pi)
    return 0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v)));
}

void main() {
    const uint col = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    if (col >= p.cols || t >= p.rows) return;
    const uint yi = p.y_off + t * p.y_stride + col;
    const uint xi = p.x_off + (p.x_bcast != 0u ? 0u : t * p.x_stride) + col;
    float v = y[yi];
    if (p.mode == 0u) v = x[xi];
    else if (p.mode == 1u) v += p.s * x[xi];
    else if (p.mode == 2u) v *= x[xi];
    else if (p.mode == 3u) v *= p.s;
    else if (p.mode == 4u) v = p.c > 0.0 ? p.c * tanh((v / p.s) / p.c) : v / p.s;
    else if (p.mode == 5u) v = v / (1.0 + exp(-v)) * x[xi];
    else if (p.mode == 6u) v = gelu_tanh(v) * x[xi];
    else if (p.mode == 7u) {  // gpt-oss: gate clamped above at 7, up to [-7, 7]; gate sigmoid(1.702 gate) (up + 1)
        const float g = min(v, 7.0), u = clamp(x[xi], -7.0, 7.0);
        v = g / (1.0 + exp(-1.702 * g)) * (u + 1.0);
    } else if (p.mode == 8u) v = 1.0 / (1.0 + exp(-v)) * x[xi];
    else if (p.mode == 9u) v = v * x[xi] / (1.0 + exp(-x[xi]));
    y[yi] = v;
}
