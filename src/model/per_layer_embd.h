// Gemma 4's per-layer embeddings (E2B, E4B; HParams::n_embd_per_layer = P > 0), as llama.cpp's gemma4 graph:
//   e(token) = (table(token) * sqrt(P) + rmsnorm_P(proj x / sqrt(n_embd)) * norm) / sqrt(2)   (n_layer * P)
// x the input embedding (already times sqrt(n_embd)), rmsnorm_P over each layer's slice of P. After layer l's FFN:
//   x += rmsnorm(pl_proj (gelu(pl_gate x) * e_l)) * pl_post_norm                              e_l: slice l of e
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/pass_tensors.h"
#include "tandem/model.h"

namespace tandem {

struct PerLayerScratch {
    Scratch e;  // (n, n_layer * P): every layer's input of the pass's rows
    Scratch rows, gate, el, proj;
};

// s.e (n, n_layer * P): e of each row, from its token and its input embedding x (n, n_embd), on the backend `be`
// (host rows of its host buffer).
void per_layer_inputs(backend::Backend& be, const ModelTensors& M, const Model& m, const int32_t* tokens,
                      const backend::Tensor& x, PerLayerScratch& s);

// Layer l's per-layer input (s.e as per_layer_inputs wrote it) added to the rows x (n, n_embd).
void per_layer_apply(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L, int l,
                     const backend::Tensor& x, PerLayerScratch& s);

}  // namespace tandem
