// The mixture's row ops (backend.h), one invocation per element of y:
//   mode 0 add_id:        y[i][c] += b[ids[i]][c]         (a: b, (n_expert, C))
//   mode 1 scale_choices: y[i][c] = x[i / k][c] w[i / k][i % k]   (a: x, fw: the weights)
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) readonly buffer Fw { float fw[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint mode, a_off, a_stride, ids_off, ids_stride, fw_off, fw_stride, k, y_off, y_stride, cols, rows;
} p;

void main() {
    const uint c = gl_GlobalInvocationID.x, i = gl_GlobalInvocationID.y;
    if (c >= p.cols || i >= p.rows) return;
    const uint yi = p.y_off + i * p.y_stride + c;
    if (p.mode == 0u) {
        const uint e = uint(ids[p.ids_off + (i / p.k) * p.ids_stride + i % p.k]);
        y[yi] += a[p.a_off + e * p.a_stride + c];
    } else {
        y[yi] = a[p.a_off + (i / p.k) * p.a_stride + c] * fw[p.fw_off + (i / p.k) * p.fw_stride + i % p.k];
    }
}
