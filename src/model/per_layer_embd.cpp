#include "model/per_layer_embd.h"

#include <cmath>

#include "model/ffn.h"
#include "model/norm.h"
#include "model/weight_view.h"

namespace tandem {

void per_layer_inputs(ThreadPool& pool, const Model& m, const int32_t* tokens, const float* x, int n,
                      std::vector<float>& out) {
    const HParams& hp = m.hparams();
    const Model::PerLayerEmbd& w = m.per_layer_embd();
    const int P = hp.n_embd_per_layer, W = hp.n_layer * P;
    out.resize(size_t(n) * size_t(W));
    matmul(pool, view(w.proj), x, n, out.data());  // proj x, then scaled, normed and added to the table's row
    std::vector<float> row(static_cast<size_t>(W));
    const float proj_scale = 1.0f / std::sqrt(float(hp.n_embd)), table_scale = std::sqrt(float(P));
    const float input_scale = 1.0f / std::sqrt(2.0f);
    for (int t = 0; t < n; t++) {
        float* e = &out[size_t(t) * size_t(W)];
        embedding_row(w.table, tokens[t], row.data());
        for (int i = 0; i < W; i++) e[i] *= proj_scale;
        for (int l = 0; l < hp.n_layer; l++) rmsnorm(e + l * P, w.norm.data(), e + l * P, P, hp.rms_eps);
        for (int i = 0; i < W; i++) e[i] = (e[i] + row[size_t(i)] * table_scale) * input_scale;
    }
}

void per_layer_apply(ThreadPool& pool, const HParams& hp, const LayerWeights& L, int l, const float* e, int n, float* x,
                     std::vector<float>& gate, std::vector<float>& proj) {
    const int P = hp.n_embd_per_layer, W = hp.n_layer * P, E = hp.n_embd;
    gate.resize(size_t(n) * size_t(P));
    proj.resize(size_t(n) * size_t(E));
    matmul(pool, view(L.pl_gate), x, n, gate.data());
    for (int t = 0; t < n; t++)  // gelu(gate) * e_l
        gelu_tanh_mul(&gate[size_t(t) * size_t(P)], e + size_t(t) * size_t(W) + size_t(l) * size_t(P), P);
    matmul(pool, view(L.pl_proj), gate.data(), n, proj.data());
    for (int t = 0; t < n; t++) {
        float* p = &proj[size_t(t) * size_t(E)];
        rmsnorm(p, L.pl_post_norm.data(), p, E, hp.rms_eps);
        float* xr = x + size_t(t) * size_t(E);
        for (int i = 0; i < E; i++) xr[i] += p[i];
    }
}

}  // namespace tandem
