// The feed-forward block of one layer over a batch of rows: dense (gated) or a mixture of experts.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "model/pass_tensors.h"
#include "tandem/model.h"

namespace tandem {

// Scratch reused across calls (owned by the session's Impl).
struct FfnScratch {
    Scratch gate, up, out, router, xs;
    Scratch ids;  // the router's choice, (n, k) I32
    Scratch sel_w;  // and its weights
    std::vector<backend::Tensor> wg, wu, wd;  // the experts' matrices
    Scratch sh_gate, sh_up, sh_out;  // the shared expert's
    Scratch xn2, router_in, router_scale;  // gemma4's experts' input, router input and its scale
    std::vector<float> router_scale_host;
};

// out (n, n_embd) = FFN(xn (n, n_embd)) for layer L, overwriting out, on the backend `be` (xn and out: host rows of
// its host buffer, model/host_tensors.h).
//   dense: down(act(gate xn, up xn))                                      hidden (n, n_ff)
//   MoE:   sum over the k selected experts e of w_e * down_e(act(gate_e xn + b, up_e xn + b)) + b
//          [+ the shared expert: down_s(act(gate_s xn, up_s xn)), gated by sigmoid(xn . g) where it has g]
// Dense or MoE per layer (LayerWeights::moe(): glm4moe's first layers are dense). The mixture's rule is the ops'
// (backend/backend.h topk_route, matmul_id, moe_sum): a row's experts summed in ascending expert order, the choice
// never read back by the host.
// xn, out: (n, n_embd) tensors of the backend; M names the layer's weights there.
void ffn_forward(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                 const backend::Tensor& xn, const backend::Tensor& out, FfnScratch& s);

// gemma4's MoE layers (26B-A4B; LayerWeights::moe() with a dense w_gate too), as llama.cpp's gemma4 graph: out =
//   rmsnorm(dense(xn)) * ffn_post_norm_1  +  rmsnorm(experts(rmsnorm(x) * ffn_pre_norm_2)) * ffn_post_norm_2
// xn: x normed by ffn_norm; the router reads rmsnorm(x) / sqrt(n_embd) * router_in_scale (softmax, the top k
// renormalised), and each expert's output is times its exp_down_scale.
void ffn_dense_and_experts(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                           const backend::Tensor& x, const backend::Tensor& xn, const backend::Tensor& out,
                           FfnScratch& s);

}  // namespace tandem
