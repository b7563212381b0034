// A mixture's router per row (backend.h TOPK_ROUTE, tandem/model.h MoeGating): probabilities, the choice scores
// (+ the choice bias; group-limited choice), the top k in score order (ties to the lower expert, as a stable sort),
// their weights renormalised and scaled. One invocation per row, every sum in expert order.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) readonly buffer B { float bias[]; };
layout(std430, binding = 2) buffer Ids { int ids[]; };
layout(std430, binding = 3) buffer W { float w[]; };
layout(push_constant) uniform P {
    uint lg_off, lg_stride, has_bias, bias_off, ids_off, ids_stride, w_off, w_stride;
    uint ne, k, gating, norm, n_groups, n_group_used, by_logits, rows;
    float scale;
} p;

const uint MAX_E = 512u;

void main() {
    const uint t = gl_GlobalInvocationID.x;
    if (t >= p.rows) return;
    const uint lo = p.lg_off + t * p.lg_stride;
    float mx = -3.0e38;
    for (uint e = 0u; e < p.ne; e++) mx = max(mx, lg[lo + e]);
    float sum = 0.0;
    for (uint e = 0u; e < p.ne; e++) sum += exp(lg[lo + e] - mx);
    float score[MAX_E];
    for (uint e = 0u; e < p.ne; e++) {
        const float v = lg[lo + e];
        const float prob = p.gating == 2u ? 1.0 / (1.0 + exp(-v)) : p.gating == 0u ? exp(v - mx) / sum : v;
        score[e] = (p.by_logits != 0u ? v : prob) + (p.has_bias != 0u ? bias[p.bias_off + e] : 0.0);
    }
    if (p.n_groups > 1u) {  // only the experts of the n_group_used groups whose top two scores sum highest
        const uint per = p.ne / p.n_groups;
        float gs[64];
        for (uint g = 0u; g < p.n_groups; g++) {
            float a = -3.0e38, b = -3.0e38;
            for (uint e = g * per; e < (g + 1u) * per; e++) {
                const float s = score[e];
                if (s > a) {
                    b = a;
                    a = s;
                } else if (s > b)
                    b = s;
            }
            gs[g] = per > 1u ? a + b : a;
        }
        for (uint g = 0u; g < p.n_groups; g++) {
            uint better = 0u;  // groups ranked before g (a stable order: ties to the lower group)
            for (uint h = 0u; h < p.n_groups; h++)
                if (gs[h] > gs[g] || (gs[h] == gs[g] && h < g)) better++;
            if (better >= p.n_group_used)
                for (uint e = g * per; e < (g + 1u) * per; e++) score[e] = -1.0 / 0.0;
        }
    }
    uint idx[64];
    for (uint j = 0u; j < p.k; j++) {  // the j-th best: the highest score not yet taken, ties to the lower expert
        uint best = 0xFFFFFFFFu;
        for (uint e = 0u; e < p.ne; e++) {
            bool taken = false;
            for (uint i = 0u; i < j; i++) taken = taken || idx[i] == e;
            if (!taken && (best == 0xFFFFFFFFu || score[e] > score[best])) best = e;
        }
        idx[j] = best;
    }
    float wt[64];
    float wsum = 0.0;
    for (uint j = 0u; j < p.k; j++) wsum += exp(lg[lo + idx[j]] - lg[lo + idx[0]]);
    for (uint j = 0u; j < p.k; j++) {
        const float v = lg[lo + idx[j]];
        wt[j] = p.gating == 1u ? exp(v - lg[lo + idx[0]]) / wsum
                               : (p.gating == 2u ? 1.0 / (1.0 + exp(-v)) : p.gating == 0u ? exp(v - mx) / sum : v);
    }
    if (p.norm != 0u) {
        float s = 0.0;
        for (uint j = 0u; j < p.k; j++) s += wt[j];
        s = max(s, 6.103515625e-5);
        for (uint j = 0u; j < p.k; j++) wt[j] /= s;
    }
    for (uint j = 0u; j < p.k; j++) {
        ids[p.ids_off + t * p.ids_stride + j] = int(idx[j]);
        w[p.w_off + t * p.w_stride + j] = p.scale != 0.0 ? wt[j] * p.scale : wt[j];
    }
}
