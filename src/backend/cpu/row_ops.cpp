#include "backend/cpu/row_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "core/fp16.h"

namespace tandem {

void rope_head(float* h, const float* cs, const float* sn, int n_rot, RopeStyle style, float mscale) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const int a = style == RopeStyle::NORM ? 2 * i : i;
        const int b = style == RopeStyle::NORM ? 2 * i + 1 : i + half;
        const float x0 = h[a], x1 = h[b];
        h[a] = (x0 * cs[i] - x1 * sn[i]) * mscale;
        h[b] = (x0 * sn[i] + x1 * cs[i]) * mscale;
    }
}

float gelu_tanh(float x) {
    const float c = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

// GELU as ggml's CPU backend evaluates it (llama.cpp's outputs, which users compare with, and our references): 0
// at or below -10, x at or above 10, else the F16 result for the F16 nearest x, from a table of all 65536 (built once;
// ~10x faster than tanhf, which took 9% of a Gemma 4 E2B token).
void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; h++) t[h] = fp16_to_f32(f32_to_fp16(gelu_tanh(fp16_to_f32(uint16_t(h)))));
        return t;
    }();
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[f32_to_fp16(x)];
        gate[i] = g * up[i];
    }
}

void swiglu_oai(float* gate, const float* up, int64_t n) {
    constexpr float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float g = std::min(gate[i], limit);
        const float u = std::min(std::max(up[i], -limit), limit);
        gate[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
}

void moe_select(const backend::RouteArgs& a, const float* logits, const float* choice_bias, int* experts,
                float* weights) {
    const int ne = a.n_expert, k = a.k;
    // per-row scratch, kept between calls (this runs for every row of every MoE layer)
    thread_local std::vector<int> idx;
    thread_local std::vector<float> prob, score;
    thread_local std::vector<std::pair<float, int>> gs;
    thread_local std::vector<uint8_t> keep;
    idx.resize(size_t(ne));
    std::iota(idx.begin(), idx.end(), 0);
    // The probabilities (softmax or sigmoid of the logits; gpt-oss: the logits themselves), and the score an expert
    // is chosen by: those plus the layer's choice bias, which the weights leave out (llama.cpp's build_moe_ffn).
    prob.assign(logits, logits + ne);
    if (a.gating == MoeGating::SIGMOID) {
        for (int e = 0; e < ne; e++) prob[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    } else if (a.gating == MoeGating::SOFTMAX) {
        const float mx = *std::max_element(logits, logits + ne);
        double sum = 0;
        for (int e = 0; e < ne; e++) sum += std::exp(double(logits[e]) - mx);
        for (int e = 0; e < ne; e++) prob[size_t(e)] = float(std::exp(double(logits[e]) - mx) / sum);
    }
    // llama4 (weights on the experts' input) chooses by the logits themselves, as llama.cpp: the same order as
    // their sigmoids, save where those round to equal values
    if (a.choose_by_logits) score.assign(logits, logits + ne);
    else score = prob;
    if (choice_bias)
        for (int e = 0; e < ne; e++) score[size_t(e)] += choice_bias[e];
    // Group-limited routing (DeepSeek V3): a group's score is the sum of its two best scores; the experts of all but
    // the n_group_used best groups are out of the choice (ties to the lower index, as everywhere here).
    if (a.n_groups > 1) {
        const int ng = a.n_groups, per = ne / ng;
        gs.clear();
        for (int g = 0; g < ng; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                const float v = score[size_t(e)];
                if (v > b1) {
                    b2 = b1;
                    b1 = v;
                } else if (v > b2) {
                    b2 = v;
                }
            }
            gs.push_back({per > 1 ? b1 + b2 : b1, g});
        }
        std::partial_sort(gs.begin(), gs.begin() + a.n_group_used, gs.end(), [](const auto& a, const auto& b) {
            return a.first > b.first || (a.first == b.first && a.second < b.second);
        });
        keep.assign(size_t(ng), 0);
        for (int j = 0; j < a.n_group_used; j++) keep[size_t(gs[size_t(j)].second)] = 1;
        for (int e = 0; e < ne; e++)
            if (!keep[size_t(e / per)]) score[size_t(e)] = -INFINITY;
    }
    // Largest first, ties to the lower index.
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
        return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    });
    if (a.gating == MoeGating::SOFTMAX_WEIGHT) {  // softmax over the selected logits only
        const float mx = logits[idx[0]];
        double sum = 0;
        for (int j = 0; j < k; j++) sum += std::exp(double(logits[idx[size_t(j)]]) - mx);
        for (int j = 0; j < k; j++) weights[j] = float(std::exp(double(logits[idx[size_t(j)]]) - mx) / sum);
    } else {
        for (int j = 0; j < k; j++) weights[j] = prob[size_t(idx[size_t(j)])];
    }
    if (a.norm) {
        float s = 0;
        for (int j = 0; j < k; j++) s += weights[j];
        s = std::max(s, 6.103515625e-5f);  // as llama.cpp: the sum clamped to the smallest normal f16
        for (int j = 0; j < k; j++) weights[j] /= s;
    }
    if (a.scale != 0.0f)
        for (int j = 0; j < k; j++) weights[j] *= a.scale;
    for (int j = 0; j < k; j++) experts[j] = idx[size_t(j)];
}

}  // namespace tandem
