#include "model/ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/fp16.h"

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
void dense_ffn(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
               const backend::Tensor& xn, const backend::Tensor& out, FfnScratch& s) {
    const int64_t n = xn.rows, F = L.w_gate.rows;  // gemma4's widths differ by layer
    const backend::Tensor gate = s.gate.rows(be, n, F), up = s.up.rows(be, n, F);
    const backend::Tensor ws[2] = {M.weight(L.w_gate), M.weight(L.w_up)}, ys[2] = {gate, up};
    be.matmul_multi(ws, ys, 2, xn);
    be.glu(glu_of(hp.ffn_act), gate, up);
    be.matmul(M.weight(L.w_down), gate, out);
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
void moe_ffn(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
             const backend::Tensor& x, const backend::Tensor& router_in, const backend::Tensor& y, FfnScratch& s) {
    using backend::Tensor;
    const int64_t n = x.rows;
    const int E = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used, F = hp.n_ff_exp;
    const int64_t nk = n * k;
    // Route: router logits (n, n_expert) (+ bias), then k experts and weights per row.
    const Tensor logits = s.router.rows(be, n, ne);
    be.matmul(M.weight(L.router), router_in, logits);
    if (!L.router_b.empty()) be.add_row(M.vec(L.router_b), logits);
    const Tensor ids = s.ids.rows(be, n, k, TensorType::I32), w = s.sel_w.rows(be, n, k);
    be.topk_route(route_args(hp), logits, M.vec(L.exp_probs_b), ids, w);
    // Each choice's gate and up (+ the expert's biases), the activation, and down.
    s.wg.resize(size_t(ne));
    s.wu.resize(size_t(ne));
    s.wd.resize(size_t(ne));
    for (int e = 0; e < ne; e++) {  // (a tensor split's rank holds some experts: the others are null here)
        s.wg[size_t(e)] = M.weight(L.exp_gate[size_t(e)]);
        s.wu[size_t(e)] = M.weight(L.exp_up[size_t(e)]);
        s.wd[size_t(e)] = M.weight(L.exp_down[size_t(e)]);
    }
    Tensor in = x;
    if (hp.moe_weight_before_ffn) {  // llama4: an expert runs on its weight times the input
        in = s.xs.rows(be, nk, E);
        be.scale_choices(x, w, in);
    }
    const Tensor gate = s.gate.rows(be, nk, F), up_all = s.up.rows(be, nk, std::max(F, E));
    const Tensor up{up_all.buf, 0, TensorType::F32, nk, F, size_t(F) * sizeof(float)};
    be.matmul_id(s.wg.data(), ne, ids, in, hp.moe_weight_before_ffn, gate);
    be.matmul_id(s.wu.data(), ne, ids, in, hp.moe_weight_before_ffn, up);
    if (!L.exp_gate_b.empty()) {
        be.add_id(M.table(L.exp_gate_b, ne, F), ids, gate);
        be.add_id(M.table(L.exp_up_b, ne, F), ids, up);
    }
    be.glu(glu_of(hp.ffn_act), gate, up);
    const Tensor d{up_all.buf, 0, TensorType::F32, nk, E, size_t(E) * sizeof(float)};  // the up values are consumed
    be.matmul_id(s.wd.data(), ne, ids, gate, true, d);
    be.moe_sum(d, ids, hp.moe_weight_before_ffn ? Tensor{} : w,
               L.exp_down_b.empty() ? Tensor{} : M.table(L.exp_down_b, ne, E), M.vec(L.exp_down_scale), s.wd.data(), ne,
               y);
    // The shared expert (glm4moe, qwen35moe, qwen3next) reads every row; qwen's output gated by sigmoid(x . g).
    if (L.shexp_gate.data) {
        const int64_t SF = L.shexp_gate.rows;
        const Tensor sg = s.sh_gate.rows(be, n, SF), su = s.sh_up.rows(be, n, SF);
        const Tensor sw[2] = {M.weight(L.shexp_gate), M.weight(L.shexp_up)}, sy[2] = {sg, su};
        be.matmul_multi(sw, sy, 2, x);
        be.glu(glu_of(hp.ffn_act), sg, su);
        const Tensor so = s.sh_out.rows(be, n, E);
        be.matmul(M.weight(L.shexp_down), sg, so);
        be.gated_add(so, x, M.vec(L.shexp_gate_inp), y);
    }
}

}  // namespace

void ffn_forward(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                 const backend::Tensor& xn, const backend::Tensor& out, FfnScratch& s) {
    if (L.moe()) moe_ffn(be, M, hp, L, xn, xn, out, s);
    else dense_ffn(be, M, hp, L, xn, out, s);
}

void ffn_dense_and_experts(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                           const backend::Tensor& X, const backend::Tensor& xn, const backend::Tensor& y,
                           FfnScratch& s) {
    using backend::Tensor;
    const int64_t n = X.rows;
    const int E = hp.n_embd;
    dense_ffn(be, M, hp, L, xn, y, s);
    // the router's input scale: 1 / sqrt(n_embd) times the layer's, computed on the host, written once per pass
    s.router_scale_host.resize(size_t(E));
    const float r = 1.0f / std::sqrt(float(E));
    for (int c = 0; c < E; c++) s.router_scale_host[size_t(c)] = r * L.router_in_scale[size_t(c)];
    const Tensor scale = s.router_scale.rows(be, 1, E);
    be.write(scale, s.router_scale_host.data());
    const Tensor xn2 = s.xn2.rows(be, n, E), ri = s.router_in.rows(be, n, E), experts = s.out.rows(be, n, E);
    be.rms_norm(y, M.vec(L.ffn_post_norm_1), E, hp.rms_eps, y);
    be.rms_norm(X, M.vec(L.ffn_pre_norm_2), E, hp.rms_eps, xn2);
    be.rms_norm(X, Tensor{}, E, hp.rms_eps, ri);
    be.mul_row(scale, ri);
    moe_ffn(be, M, hp, L, xn2, ri, experts, s);
    be.rms_norm(experts, M.vec(L.ffn_post_norm_2), E, hp.rms_eps, experts);
    be.add(experts, 1.0f, y);
}

}  // namespace tandem
