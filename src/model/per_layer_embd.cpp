#include "model/per_layer_embd.h"

#include <cmath>

#include "model/host_tensors.h"

namespace tandem {

void per_layer_inputs(backend::Backend& be, const Model& m, const int32_t* tokens, const float* x, int n,
                      PerLayerScratch& s) {
    using backend::Tensor;
    const HostTensors H{be.host_memory()};
    const HParams& hp = m.hparams();
    const Model::PerLayerEmbd& w = m.per_layer_embd();
    const int P = hp.n_embd_per_layer, W = hp.n_layer * P;
    s.e.resize(size_t(n) * size_t(W));
    s.rows.resize(size_t(n) * size_t(W));
    const Tensor e = H.rows(s.e.data(), n, W), rows = H.rows(s.rows.data(), n, W);
    be.matmul(H.weight(w.proj), H.rows(x, n, hp.n_embd), e);  // proj x, then scaled, normed and added to the row
    be.get_rows(H.weight(w.table), tokens, n, rows);
    be.scale(1.0f / std::sqrt(float(hp.n_embd)), e);
    be.rms_norm(e, H.vec(w.norm), P, hp.rms_eps, e);
    be.scale(std::sqrt(float(P)), rows);
    be.add(rows, 1.0f, e);
    be.scale(1.0f / std::sqrt(2.0f), e);
}

void per_layer_apply(backend::Backend& be, const HParams& hp, const LayerWeights& L, int l, int n, float* x,
                     PerLayerScratch& s) {
    using backend::Tensor;
    const HostTensors H{be.host_memory()};
    const int P = hp.n_embd_per_layer, W = hp.n_layer * P, E = hp.n_embd;
    s.gate.resize(size_t(n) * size_t(P));
    s.el.resize(size_t(n) * size_t(P));
    s.proj.resize(size_t(n) * size_t(E));
    const Tensor xt = H.rows(x, n, E), gate = H.rows(s.gate.data(), n, P), el = H.rows(s.el.data(), n, P);
    const Tensor proj = H.rows(s.proj.data(), n, E);
    be.matmul(H.weight(L.pl_gate), xt, gate);
    be.copy(H.rows(s.e.data(), n, W).cols_at(int64_t(l) * P, P), el);  // e_l
    be.glu(backend::Glu::GELU_TANH, gate, el);  // gelu(gate) * e_l
    be.matmul(H.weight(L.pl_proj), gate, proj);
    be.rms_norm(proj, H.vec(L.pl_post_norm), E, hp.rms_eps, proj);
    be.add(proj, 1.0f, xt);
}

}  // namespace tandem
