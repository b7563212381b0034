// The gated delta rule for one row of a pass (backend.h DELTA_RULE; dispatched once per row, in order, since a row
// may start from the state the previous row wrote): one workgroup per value head, lane j holding the state's rows
// j, j + 64, ... Each state row is independent: with decay d and beta b, M_j = d M_in_j; mk = M_j . k;
// M_j += (v_j - mk) b k; o_j = (M_j . q) / sqrt(S); its sums in column order. In place when m_in is m_out.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Mi { float mi[]; };
layout(std430, binding = 1) buffer Mo { float mo[]; };
layout(std430, binding = 2) readonly buffer Q { float q[]; };
layout(std430, binding = 3) readonly buffer K { float k[]; };
layout(std430, binding = 4) readonly buffer V { float v[]; };
layout(std430, binding = 5) readonly buffer D { float dcy[]; };
layout(std430, binding = 6) readonly buffer B { float bta[]; };
layout(std430, binding = 7) buffer O { float o[]; };
layout(push_constant) uniform P {
    uint mi_off, mo_off, q_off, k_off, v_off, d_off, b_off, o_off;  // floats, this row's
    uint S, n_k_heads, n_v_heads, grouped;
} p;

void main() {
    const uint h = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x, S = p.S;
    const uint kh = p.grouped != 0u ? h / (p.n_v_heads / p.n_k_heads) : h % p.n_k_heads;
    const float dc = dcy[p.d_off + h], b = bta[p.b_off + h];
    const uint ko = p.k_off + kh * S, qo = p.q_off + kh * S;
    for (uint j = lane; j < S; j += 64u) {
        const uint mrow = h * S * S + j * S;
        float mk = 0.0;
        for (uint i = 0u; i < S; i++) mk += (dc * mi[p.mi_off + mrow + i]) * k[ko + i];
        const float d = (v[p.v_off + h * S + j] - mk) * b;
        float mq = 0.0;
        for (uint i = 0u; i < S; i++) {
            const float m = dc * mi[p.mi_off + mrow + i] + d * k[ko + i];
            mo[p.mo_off + mrow + i] = m;
            mq += m * q[qo + i];
        }
        o[p.o_off + h * S + j] = mq / sqrt(float(S));
    }
}
