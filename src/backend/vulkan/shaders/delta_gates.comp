// Gated DeltaNet's gates per row and head: beta = sigmoid(beta), alpha = exp(softplus(alpha + dt[h]) a[h])
// (softplus(x) = x above 20), in place.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Dt { float dt[]; };
layout(std430, binding = 1) readonly buffer A { float av[]; };
layout(std430, binding = 2) buffer B { float beta[]; };
layout(std430, binding = 3) buffer Al { float alpha[]; };
layout(push_constant) uniform P {
    uint dt_off, a_off, b_off, b_stride, al_off, al_stride, heads, rows;
} p;

void main() {
    const uint h = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    if (h >= p.heads || t >= p.rows) return;
    const uint bi = p.b_off + t * p.b_stride + h, ai = p.al_off + t * p.al_stride + h;
    beta[bi] = 1.0 / (1.0 + exp(-beta[bi]));
    const float x = alpha[ai] + dt[p.dt_off + h];
    alpha[ai] = exp((x > 20.0 ? x : log(1.0 + exp(x))) * av[p.a_off + h]);
}
