// Multi-head latent attention (deepseek2; HParams::mla describes the shapes): the projections into the cached
// latent rows and absorbed queries, and from the attention's latent outputs to the heads' values. The attention
// itself is the ordinary one (backend/cpu/attention.h) with one key/value head of head_dim = n_lora_kv + n_rot.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "model/pass_tensors.h"
#include "tandem/model.h"

namespace tandem {

struct MlaScratch {
    Scratch qa, qf, kva;
    std::vector<int32_t> heads_host;
    Scratch heads;  // (n, n_head) I32: row t's head h is "expert" h of matmul_id
    std::vector<backend::Tensor> wk, wv;  // wk_b, wv_b per head
};

// From n normed rows xn (n, n_embd):
//   q (n, n_head * head_dim): per head [wk_b[h] q_nope (n_lora_kv) | q_pe (n_rot)]
//   kv (n, head_dim): [rmsnorm(latent) * kv_a_norm (n_lora_kv) | k_pe (n_rot)], the row cached as K and as V
// before RoPE (the caller rotates the last n_rot of each q head and of kv: HParams::rope_offset). On the backend
// `be` (host rows of its host buffer): the heads' products are one matmul_id, a head an expert every row chose.
// xn (n, n_embd) -> q (n, n_head head_dim), kv (n, head_dim): tensors of the backend
void mla_project(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                 const backend::Tensor& xn, const backend::Tensor& q, const backend::Tensor& kv, MlaScratch& s);

// out (n, n_head * mla_v): per head wv_b[h] times the first n_lora_kv of its attention output (n, n_head * head_dim).
// att (n, n_head head_dim) -> out (n, n_head mla_v)
void mla_values(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                const backend::Tensor& att, const backend::Tensor& out, MlaScratch& s);

}  // namespace tandem
