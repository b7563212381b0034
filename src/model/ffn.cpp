#include "model/ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/fp16.h"
#include "model/host_tensors.h"

namespace tandem {

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

backend::RouteArgs route_args(const HParams& hp) {
    backend::RouteArgs a;
    a.n_expert = hp.n_expert;
    a.k = hp.n_expert_used;
    a.gating = hp.moe_gating;
    a.norm = hp.expert_weights_norm;
    a.scale = hp.expert_weights_scale;
    a.n_groups = hp.n_expert_groups;
    a.n_group_used = hp.n_group_used;
    a.choose_by_logits = hp.moe_weight_before_ffn;
    return a;
}

// The experts (and a shared expert) over xn, routed by the router's logits of router_in, on the backend: the
// router's choice stays a tensor of the backend from topk_route to the experts' products and their sum.
void moe_ffn(backend::Backend& be, const HParams& hp, const LayerWeights& L, const float* xn, const float* router_in,
             int n, float* out, FfnScratch& s) {
    using backend::Tensor;
    const HostTensors H{be.host_memory()};
    const int E = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used, F = hp.n_ff_exp, nk = n * k;
    // Route: router logits (n, n_expert) (+ bias), then k experts and weights per row.
    s.router.resize(size_t(n) * ne);
    const Tensor logits = H.rows(s.router.data(), n, ne), x = H.rows(xn, n, E);
    be.matmul(H.weight(L.router), H.rows(router_in, n, E), logits);
    if (!L.router_b.empty()) be.add_row(H.vec(L.router_b), logits);
    s.ids.resize(size_t(nk));
    s.sel_w.resize(size_t(nk));
    const Tensor ids = H.ids(s.ids.data(), n, k), w = H.rows(s.sel_w.data(), n, k);
    be.topk_route(route_args(hp), logits, H.vec(L.exp_probs_b), ids, w);
    // Each choice's gate and up (+ the expert's biases), the activation, and down.
    s.wg.resize(size_t(ne));
    s.wu.resize(size_t(ne));
    s.wd.resize(size_t(ne));
    for (int e = 0; e < ne; e++) {  // (a tensor split's rank holds some experts: the others are null here)
        s.wg[size_t(e)] = H.weight(L.exp_gate[size_t(e)]);
        s.wu[size_t(e)] = H.weight(L.exp_up[size_t(e)]);
        s.wd[size_t(e)] = H.weight(L.exp_down[size_t(e)]);
    }
    Tensor in = x;
    if (hp.moe_weight_before_ffn) {  // llama4: an expert runs on its weight times the input
        s.xs.resize(size_t(nk) * E);
        in = H.rows(s.xs.data(), nk, E);
        be.scale_choices(x, w, in);
    }
    s.gate.resize(size_t(nk) * F);
    s.up.resize(size_t(nk) * std::max(F, E));
    const Tensor gate = H.rows(s.gate.data(), nk, F), up = H.rows(s.up.data(), nk, F);
    be.matmul_id(s.wg.data(), ne, ids, in, hp.moe_weight_before_ffn, gate);
    be.matmul_id(s.wu.data(), ne, ids, in, hp.moe_weight_before_ffn, up);
    if (!L.exp_gate_b.empty()) {
        be.add_id(H.rows(L.exp_gate_b.data(), ne, F), ids, gate);
        be.add_id(H.rows(L.exp_up_b.data(), ne, F), ids, up);
    }
    be.glu(glu_of(hp.ffn_act), gate, up);
    const Tensor d = H.rows(s.up.data(), nk, E);  // the up values are consumed
    be.matmul_id(s.wd.data(), ne, ids, gate, true, d);
    const Tensor y = H.rows(out, n, E);
    be.moe_sum(d, ids, hp.moe_weight_before_ffn ? Tensor{} : w,
               L.exp_down_b.empty() ? Tensor{} : H.rows(L.exp_down_b.data(), ne, E), H.vec(L.exp_down_scale),
               s.wd.data(), ne, y);
    // The shared expert (glm4moe, qwen35moe, qwen3next) reads every row; qwen's output gated by sigmoid(x . g).
    if (L.shexp_gate.data) {
        const int SF = int(L.shexp_gate.rows);
        s.sh_gate.resize(size_t(n) * SF);
        s.sh_up.resize(size_t(n) * SF);
        s.sh_out.resize(size_t(n) * E);
        const Tensor sg = H.rows(s.sh_gate.data(), n, SF), su = H.rows(s.sh_up.data(), n, SF);
        const Tensor sw[2] = {H.weight(L.shexp_gate), H.weight(L.shexp_up)}, sy[2] = {sg, su};
        be.matmul_multi(sw, sy, 2, x);
        be.glu(glu_of(hp.ffn_act), sg, su);
        const Tensor so = H.rows(s.sh_out.data(), n, E);
        be.matmul(H.weight(L.shexp_down), sg, so);
        be.gated_add(so, x, H.vec(L.shexp_gate_inp), y);
    }
}

}  // namespace

void ffn_forward(backend::Backend& be, const HParams& hp, const LayerWeights& L, const float* xn, int n, float* out,
                 FfnScratch& s) {
    if (L.moe()) moe_ffn(be, hp, L, xn, xn, n, out, s);
    else dense_ffn(be, hp, L, xn, n, out, s);
}

void ffn_dense_and_experts(backend::Backend& be, const HParams& hp, const LayerWeights& L, const float* x,
                           const float* xn, int n, float* out, FfnScratch& s) {
    using backend::Tensor;
    const HostTensors H{be.host_memory()};
    const int E = hp.n_embd;
    dense_ffn(be, hp, L, xn, n, out, s);
    s.xn2.resize(size_t(n) * E);
    s.router_in.resize(size_t(n) * E);
    s.out.resize(size_t(n) * E);
    s.router_scale.resize(size_t(E));
    const float r = 1.0f / std::sqrt(float(E));
    for (int c = 0; c < E; c++) s.router_scale[size_t(c)] = r * L.router_in_scale[size_t(c)];
    const Tensor X = H.rows(x, n, E), y = H.rows(out, n, E), xn2 = H.rows(s.xn2.data(), n, E);
    const Tensor ri = H.rows(s.router_in.data(), n, E), experts = H.rows(s.out.data(), n, E);
    be.rms_norm(y, H.vec(L.ffn_post_norm_1), E, hp.rms_eps, y);
    be.rms_norm(X, H.vec(L.ffn_pre_norm_2), E, hp.rms_eps, xn2);
    be.rms_norm(X, Tensor{}, E, hp.rms_eps, ri);
    be.mul_row(H.vec(s.router_scale), ri);
    moe_ffn(be, hp, L, s.xn2.data(), s.router_in.data(), n, s.out.data(), s);
    be.rms_norm(experts, H.vec(L.ffn_post_norm_2), E, hp.rms_eps, experts);
    be.add(experts, 1.0f, y);
}

}  // namespace tandem
