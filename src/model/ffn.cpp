#include "model/ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/fp16.h"
#include "model/host_tensors.h"
#include "model/norm.h"
#include "model/weight_view.h"
#include "backend/cpu/kernels.h"
#include "tandem/thread_pool.h"

namespace tandem {

namespace {

void activate(FfnAct act, float* gate, const float* up, int64_t n) {
    switch (act) {
        case FfnAct::SILU: silu_mul(gate, up, n); return;
        case FfnAct::GELU_TANH: gelu_tanh_mul(gate, up, n); return;
        case FfnAct::SWIGLU_OAI: swiglu_oai(gate, up, n); return;
    }
}

}  // namespace

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

void moe_select(const HParams& hp, const float* logits, const float* choice_bias, int* experts, float* weights) {
    const int ne = hp.n_expert, k = hp.n_expert_used;
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
    if (hp.moe_gating == MoeGating::SIGMOID) {
        for (int e = 0; e < ne; e++) prob[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    } else if (hp.moe_gating == MoeGating::SOFTMAX) {
        const float mx = *std::max_element(logits, logits + ne);
        double sum = 0;
        for (int e = 0; e < ne; e++) sum += std::exp(double(logits[e]) - mx);
        for (int e = 0; e < ne; e++) prob[size_t(e)] = float(std::exp(double(logits[e]) - mx) / sum);
    }
    // llama4 (weights on the experts' input) chooses by the logits themselves, as llama.cpp: the same order as
    // their sigmoids, save where those round to equal values
    if (hp.moe_weight_before_ffn) score.assign(logits, logits + ne);
    else score = prob;
    if (choice_bias)
        for (int e = 0; e < ne; e++) score[size_t(e)] += choice_bias[e];
    // Group-limited routing (DeepSeek V3): a group's score is the sum of its two best scores; the experts of all but
    // the n_group_used best groups are out of the choice (ties to the lower index, as everywhere here).
    if (hp.n_expert_groups > 1) {
        const int ng = hp.n_expert_groups, per = ne / ng;
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
        std::partial_sort(gs.begin(), gs.begin() + hp.n_group_used, gs.end(), [](const auto& a, const auto& b) {
            return a.first > b.first || (a.first == b.first && a.second < b.second);
        });
        keep.assign(size_t(ng), 0);
        for (int j = 0; j < hp.n_group_used; j++) keep[size_t(gs[size_t(j)].second)] = 1;
        for (int e = 0; e < ne; e++)
            if (!keep[size_t(e / per)]) score[size_t(e)] = -INFINITY;
    }
    // Largest first, ties to the lower index.
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
        return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    });
    if (hp.moe_gating == MoeGating::SOFTMAX_WEIGHT) {  // softmax over the selected logits only
        const float mx = logits[idx[0]];
        double sum = 0;
        for (int j = 0; j < k; j++) sum += std::exp(double(logits[idx[size_t(j)]]) - mx);
        for (int j = 0; j < k; j++) weights[j] = float(std::exp(double(logits[idx[size_t(j)]]) - mx) / sum);
    } else {
        for (int j = 0; j < k; j++) weights[j] = prob[size_t(idx[size_t(j)])];
    }
    if (hp.expert_weights_norm) {
        float s = 0;
        for (int j = 0; j < k; j++) s += weights[j];
        s = std::max(s, 6.103515625e-5f);  // as llama.cpp: the sum clamped to the smallest normal f16
        for (int j = 0; j < k; j++) weights[j] /= s;
    }
    if (hp.expert_weights_scale != 0.0f)
        for (int j = 0; j < k; j++) weights[j] *= hp.expert_weights_scale;
    for (int j = 0; j < k; j++) experts[j] = idx[size_t(j)];
}

namespace {

backend::Glu glu_of(FfnAct act) {
    switch (act) {
        case FfnAct::GELU_TANH: return backend::Glu::GELU_TANH;
        case FfnAct::SWIGLU_OAI: return backend::Glu::SWIGLU_OAI;
        case FfnAct::SILU: break;
    }
    return backend::Glu::SILU;
}

// down(act(gate xn, up xn)) on the backend
void dense_ffn(backend::Backend& be, const HParams& hp, const LayerWeights& L, const float* xn, int n, float* out,
               FfnScratch& s) {
    const int F = int(L.w_gate.rows);  // gemma4's widths differ by layer
    s.gate.resize(size_t(n) * F);
    s.up.resize(size_t(n) * F);
    const HostTensors H{be.host_memory()};
    const backend::Tensor gate = H.rows(s.gate.data(), n, F), up = H.rows(s.up.data(), n, F);
    const backend::Tensor ws[2] = {H.weight(L.w_gate), H.weight(L.w_up)}, ys[2] = {gate, up};
    be.matmul_multi(ws, ys, 2, H.rows(xn, n, hp.n_embd));
    be.glu(glu_of(hp.ffn_act), gate, up);
    be.matmul(H.weight(L.w_down), gate, H.rows(out, n, hp.n_embd));
}

// The experts (and a shared expert) over xn, routed by the router's logits of router_in.
void moe_ffn(ThreadPool& pool, const HParams& hp, const LayerWeights& L, const float* xn, const float* router_in, int n,
             float* out, FfnScratch& s) {
    const int E = hp.n_embd;
    // Route: router logits (n, n_expert) (+ bias), then k experts and weights per row.
    const int ne = hp.n_expert, k = hp.n_expert_used, F = hp.n_ff_exp;
    s.router.resize(size_t(n) * ne);
    matmul(pool, view(L.router), router_in, n, s.router.data());
    s.sel.resize(size_t(n) * k);
    s.sel_w.resize(size_t(n) * k);
    for (int t = 0; t < n; t++) {
        float* lg = &s.router[size_t(t) * ne];
        if (!L.router_b.empty())
            for (int e = 0; e < ne; e++) lg[e] += L.router_b[size_t(e)];
        moe_select(hp, lg, L.exp_probs_b.empty() ? nullptr : L.exp_probs_b.data(), &s.sel[size_t(t) * k],
                   &s.sel_w[size_t(t) * k]);
    }
    std::fill(out, out + size_t(n) * E, 0.0f);

    // Group the (row, slot) pairs by expert, gather each expert's rows into one block of xs, and run every selected
    // expert over its block: gate and up of all experts in one pass of the pool, then down in another.
    std::vector<std::vector<int>> rows_of(static_cast<size_t>(ne));  // entries t * k + j
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) rows_of[size_t(s.sel[size_t(t) * k + j])].push_back(t * k + j);
    const int total = n * k;
    s.xs.resize(size_t(total) * E);
    s.gate.resize(size_t(total) * F);
    s.up.resize(size_t(total) * std::max(F, E));
    std::vector<int> used, off;  // selected experts and the first row of each one's block
    std::vector<int> order;  // block row -> (t * k + j)
    for (int e = 0; e < ne; e++) {  // (a tensor split's rank holds some experts: the others add nothing here)
        if (rows_of[size_t(e)].empty() || !L.exp_down[size_t(e)].data) continue;
        used.push_back(e);
        off.push_back(int(order.size()));
        for (int tj : rows_of[size_t(e)]) {
            float* xe = &s.xs[order.size() * E];
            std::copy_n(xn + size_t(tj / k) * E, E, xe);
            if (hp.moe_weight_before_ffn)  // llama4: the expert runs on its weight times the input
                for (int c = 0; c < E; c++) xe[c] *= s.sel_w[size_t(tj)];
            order.push_back(tj);
        }
    }
    const int routed = int(order.size());  // total, less the rows of experts another rank holds
    off.push_back(routed);
    // The shared expert (glm4moe) reads every row: its gate and up join the first pass, its down the second.
    const bool shared = L.shexp_gate.data != nullptr;
    const int SF = shared ? int(L.shexp_gate.rows) : 0;
    if (shared) {
        s.sh_gate.resize(size_t(n) * SF);
        s.sh_up.resize(size_t(n) * SF);
        s.sh_out.resize(size_t(n) * E);
    }
    std::vector<MatmulJob> jobs;
    if (shared) {
        jobs.push_back({view(L.shexp_gate), xn, n, s.sh_gate.data()});
        jobs.push_back({view(L.shexp_up), xn, n, s.sh_up.data()});
    }
    for (size_t u = 0; u < used.size(); u++) {
        const int e = used[u], m = off[u + 1] - off[u];
        const float* x = &s.xs[size_t(off[u]) * E];
        jobs.push_back({view(L.exp_gate[size_t(e)]), x, m, &s.gate[size_t(off[u]) * F]});
        jobs.push_back({view(L.exp_up[size_t(e)]), x, m, &s.up[size_t(off[u]) * F]});
    }
    matmul_jobs(pool, jobs.data(), int(jobs.size()));
    if (!L.exp_gate_b.empty())
        for (size_t u = 0; u < used.size(); u++)
            for (int i = off[u]; i < off[u + 1]; i++)
                for (int c = 0; c < F; c++) {
                    s.gate[size_t(i) * F + c] += L.exp_gate_b[size_t(used[u]) * F + c];
                    s.up[size_t(i) * F + c] += L.exp_up_b[size_t(used[u]) * F + c];
                }
    activate(hp.ffn_act, s.gate.data(), s.up.data(), int64_t(routed) * F);
    if (shared) activate(hp.ffn_act, s.sh_gate.data(), s.sh_up.data(), int64_t(n) * SF);
    float* d = s.up.data();  // (total, E): the up values are consumed
    jobs.clear();
    if (shared) jobs.push_back({view(L.shexp_down), s.sh_gate.data(), n, s.sh_out.data()});
    for (size_t u = 0; u < used.size(); u++)
        jobs.push_back({view(L.exp_down[size_t(used[u])]), &s.gate[size_t(off[u]) * F], off[u + 1] - off[u],
                        d + size_t(off[u]) * E});
    matmul_jobs(pool, jobs.data(), int(jobs.size()));
    for (size_t u = 0; u < used.size(); u++) {
        const float* b = L.exp_down_b.empty() ? nullptr : &L.exp_down_b[size_t(used[u]) * E];
        for (int i = off[u]; i < off[u + 1]; i++) {
            const int tj = order[size_t(i)];
            float w = hp.moe_weight_before_ffn ? 1.0f : s.sel_w[size_t(tj)];
            if (!L.exp_down_scale.empty()) w *= L.exp_down_scale[size_t(used[u])];  // gemma4's per-expert scale
            float* o = out + size_t(tj / k) * E;
            const float* di = d + size_t(i) * E;
            for (int c = 0; c < E; c++) o[c] += w * (di[c] + (b ? b[c] : 0.0f));
        }
    }
    if (shared)  // qwen35moe, qwen3next: its output gated by sigmoid(x . g) per row; else as it is (x 1, exact)
        for (int t = 0; t < n; t++) {
            const float g = L.shexp_gate_inp.empty()
                                ? 1.0f
                                : 1.0f / (1.0f + std::exp(-dot_f32(xn + size_t(t) * E, L.shexp_gate_inp.data(), E)));
            for (int c = 0; c < E; c++) out[size_t(t) * E + c] += g * s.sh_out[size_t(t) * E + c];
        }
}

}  // namespace

void ffn_forward(backend::Backend& be, ThreadPool& pool, const HParams& hp, const LayerWeights& L, const float* xn,
                 int n, float* out, FfnScratch& s) {
    if (L.moe()) moe_ffn(pool, hp, L, xn, xn, n, out, s);
    else dense_ffn(be, hp, L, xn, n, out, s);
}

void ffn_dense_and_experts(backend::Backend& be, ThreadPool& pool, const HParams& hp, const LayerWeights& L,
                           const float* x, const float* xn, int n, float* out, FfnScratch& s) {
    const int E = hp.n_embd;
    dense_ffn(be, hp, L, xn, n, out, s);
    s.xn2.resize(size_t(n) * E);
    s.router_in.resize(size_t(n) * E);
    s.out.resize(size_t(n) * E);
    const float r = 1.0f / std::sqrt(float(E));
    for (int t = 0; t < n; t++) {
        const size_t o = size_t(t) * E;
        rmsnorm(out + o, L.ffn_post_norm_1.data(), out + o, E, hp.rms_eps);
        rmsnorm(x + o, L.ffn_pre_norm_2.data(), &s.xn2[o], E, hp.rms_eps);
        rmsnorm(x + o, nullptr, &s.router_in[o], E, hp.rms_eps);
        for (int c = 0; c < E; c++) s.router_in[o + size_t(c)] *= r * L.router_in_scale[size_t(c)];
    }
    moe_ffn(pool, hp, L, s.xn2.data(), s.router_in.data(), n, s.out.data(), s);
    for (int t = 0; t < n; t++) {
        const size_t o = size_t(t) * E;
        rmsnorm(&s.out[o], L.ffn_post_norm_2.data(), &s.out[o], E, hp.rms_eps);
        for (int c = 0; c < E; c++) out[o + size_t(c)] += s.out[o + size_t(c)];
    }
}

}  // namespace tandem
