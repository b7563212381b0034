#include "model/per_layer_embd.h"

#include <cmath>

namespace tandem {

void per_layer_inputs(backend::Backend& be, const ModelTensors& M, const Model& m, const int32_t* tokens,
                      const backend::Tensor& x, PerLayerScratch& s) {
    using backend::Tensor;
    const int n = int(x.rows);
    const HParams& hp = m.hparams();
    const Model::PerLayerEmbd& w = m.per_layer_embd();
    const int P = hp.n_embd_per_layer, W = hp.n_layer * P;
    const Tensor e = s.e.rows(be, n, W), rows = s.rows.rows(be, n, W);
    be.matmul(M.weight(w.proj), x, e);  // proj x, then scaled, normed and added to the row
    be.get_rows(M.weight(w.table), tokens, n, rows);
    be.scale(1.0f / std::sqrt(float(hp.n_embd)), e);
    be.rms_norm(e, M.vec(w.norm), P, hp.rms_eps, e);
    be.scale(std::sqrt(float(P)), rows);
    be.add(rows, 1.0f, e);
    be.scale(1.0f / std::sqrt(2.0f), e);
}

void per_layer_apply(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L, int l,
                     const backend::Tensor& xt, PerLayerScratch& s) {
    using backend::Tensor;
    const int64_t n = xt.rows;
    const int P = hp.n_embd_per_layer, W = hp.n_layer * P, E = hp.n_embd;
    const Tensor gate = s.gate.rows(be, n, P), el = s.el.rows(be, n, P), proj = s.proj.rows(be, n, E);
    be.matmul(M.weight(L.pl_gate), xt, gate);
    be.copy(s.e.rows(be, n, W).cols_at(int64_t(l) * P, P), el);  // e_l
    be.glu(backend::Glu::GELU_TANH, gate, el);  // gelu(gate) * e_l
    be.matmul(M.weight(L.pl_proj), gate, proj);
    be.rms_norm(proj, M.vec(L.pl_post_norm), E, hp.rms_eps, proj);
    be.add(proj, 1.0f, xt);
}

}  // namespace tandem
