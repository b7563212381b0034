// Gemma 4's per-layer embeddings (E2B, E4B; HParams::n_embd_per_layer = P > 0), as llama.cpp's gemma4 graph:
//   e(token) = (table(token) * sqrt(P) + rmsnorm_P(proj x / sqrt(n_embd)) * norm) / sqrt(2)   (n_layer * P)
// x the input embedding (already times sqrt(n_embd)), rmsnorm_P over each layer's slice of P. After layer l's FFN:
//   x += rmsnorm(pl_proj (gelu(pl_gate x) * e_l)) * pl_post_norm                              e_l: slice l of e
#pragma once
#include <cstdint>
#include <vector>

#include "tandem/model.h"
#include "tandem/thread_pool.h"

namespace tandem {

// out (n, n_layer * P): e of each row, from its token and its input embedding x (n, n_embd).
void per_layer_inputs(ThreadPool& pool, const Model& m, const int32_t* tokens, const float* x, int n,
                      std::vector<float>& out);

// Layer l's per-layer input added to the rows x (n, n_embd); e as per_layer_inputs wrote it. `gate`, `proj`:
// scratch.
void per_layer_apply(ThreadPool& pool, const HParams& hp, const LayerWeights& L, int l, const float* e, int n, float* x,
                     std::vector<float>& gate, std::vector<float>& proj);

}  // namespace tandem
