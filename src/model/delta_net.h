// Gated DeltaNet linear attention (qwen35: Qwen3.5 / Qwen3-Next's layer; HParams::ssm_* give the shapes), as
// llama.cpp 2026-09 computes it (src/models/qwen35.cpp, delta-net-base.cpp, ggml's gated_delta_net and ssm_conv).
// For each row t (a token) of a layer, from its normed input x:
//   m = W_in x ([q | k | v], conv_dim = (2 Hk + Hv) S), z = W_z x (Hv S), b = W_beta x, a = W_alpha x (Hv)
//   c = silu(conv(m)): channel i is sum_r taps[i][r] * window[r][i] over the last ssm_conv rows of m (the
//       ssm_conv - 1 before this one are the layer's convolution state, zeros before the first token)
//   q, k: each key head of c's q and k parts L2-normalised (x / sqrt(sum x^2 + eps)); v: c's v part
//   per value head h (key head h % Hk; qwen3next: h / (Hv / Hk)), state M (S x S, M[j][i]: value dim j, key dim i):
//       g = softplus(a_h + dt_h) * A_h (A = -exp(A_log): a decay), beta = sigmoid(b_h)
//       M *= exp(g);  d[j] = (v[j] - sum_i M[j][i] k[i]) beta;  M[j][i] += d[j] k[i]
//       o[j] = sum_i M[j][i] q[i] / sqrt(S)
//   o_h = rmsnorm(o_h) * ssm_norm * silu(z_h);  out = W_out o
// (the delta rule of one value head over one row is backend/cpu/kernels.h delta_rule, a kernel per SIMD level)
// A layer's state per sequence: the convolution window ((ssm_conv - 1) x conv_dim, oldest row first) and the
// Hv state matrices; model/recurrent_state.h keeps them per position for exact rollback.
#pragma once
#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "model/pass_tensors.h"
#include "tandem/model.h"

namespace tandem {

// Floats of one recurrent layer's state, and of a state of a session running the model's first n_layers layers
// (every recurrent one's, in layer order; 0 for a model without such layers).
size_t delta_net_layer_floats(const HParams& hp);
size_t recurrent_state_floats(const Model& m, int n_layers);

struct DeltaNetScratch {
    Scratch mixed, z, beta, alpha, ba, conv, o;
    std::vector<backend::Tensor> win_in, win_out, m_in, m_out;  // each row's parts of its state
};

// One layer over n rows on the backend `be`: x (n, n_embd) normed input -> out (n, n_embd) (host rows of its host
// buffer). state_in[t] / state_out[t]: this layer's state before and after row t, (1, delta_net_layer_floats) rows
// of the backend's memory (model/recurrent_state.h; equal for a row that runs in place; row t's state_in is the
// state_out of the row it follows, which precedes it). Rows of several sequences may share the pass: each row's
// state says whose. The ops (backend/backend.h): matmuls, conv1d, l2_norm, delta_gates, delta_rule,
// rms_norm_gated.
void delta_net_layer(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                     const backend::Tensor& x, const backend::Tensor* state_in, const backend::Tensor* state_out,
                     const backend::Tensor& out, DeltaNetScratch& s);

}  // namespace tandem
