#include "model/delta_net.h"

namespace tandem {

size_t delta_net_layer_floats(const HParams& hp) {
    if (!hp.recurrent()) return 0;
    return size_t(hp.ssm_conv - 1) * size_t(hp.ssm_conv_dim()) +
           size_t(hp.ssm_v_heads) * size_t(hp.ssm_state) * size_t(hp.ssm_state);
}

size_t recurrent_state_floats(const Model& m, int n_layers) {
    size_t n = 0;
    for (int l = 0; l < n_layers; l++)
        if (m.layer(l).recurrent) n += delta_net_layer_floats(m.hparams());
    return n;
}

void delta_net_layer(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                     const backend::Tensor& X, const backend::Tensor* state_in, const backend::Tensor* state_out,
                     const backend::Tensor& out, DeltaNetScratch& s) {
    using backend::Tensor;
    const int64_t n = X.rows;
    const int K = hp.ssm_conv, S = hp.ssm_state, hk = hp.ssm_k_heads, hv = hp.ssm_v_heads, C = hp.ssm_conv_dim();
    const int vd = hv * S, r = hv / hk;  // value heads per key head
    const int64_t conv_floats = int64_t(K - 1) * C;
    const size_t rows = size_t(n);
    const Tensor mixed = s.mixed.rows(be, n, C), z = s.z.rows(be, n, vd);
    const Tensor beta = s.beta.rows(be, n, hv), alpha = s.alpha.rows(be, n, hv);
    const Tensor conv = s.conv.rows(be, n, C), o = s.o.rows(be, n, vd);
    if (L.ssm_ba.data) {  // qwen3next: per key head g, rows [beta of its r value heads | their alpha]
        const Tensor ba = s.ba.rows(be, n, 2 * hv);
        const Tensor ws[3] = {M.weight(L.ssm_in), M.weight(L.ssm_z), M.weight(L.ssm_ba)}, ys[3] = {mixed, z, ba};
        be.matmul_multi(ws, ys, 3, X);
        for (int g = 0; g < hk; g++) {
            be.copy(ba.cols_at(int64_t(g) * 2 * r, r), beta.cols_at(int64_t(g) * r, r));
            be.copy(ba.cols_at(int64_t(g) * 2 * r + r, r), alpha.cols_at(int64_t(g) * r, r));
        }
    } else {
        const Tensor ws[4] = {M.weight(L.ssm_in), M.weight(L.ssm_z), M.weight(L.ssm_beta), M.weight(L.ssm_alpha)};
        const Tensor ys[4] = {mixed, z, beta, alpha};
        be.matmul_multi(ws, ys, 4, X);
    }
    // Each row's convolution window and state matrices: the two parts of its layer state.
    s.win_in.resize(rows);
    s.win_out.resize(rows);
    s.m_in.resize(rows);
    s.m_out.resize(rows);
    for (size_t t = 0; t < rows; t++) {
        s.win_in[t] = state_in[t].cols_at(0, conv_floats);
        s.win_out[t] = state_out[t].cols_at(0, conv_floats);
        s.m_in[t] = state_in[t].cols_at(conv_floats, int64_t(hv) * S * S);
        s.m_out[t] = state_out[t].cols_at(conv_floats, int64_t(hv) * S * S);
    }
    be.conv1d(K, true, mixed, M.table(L.ssm_conv1d, C, K), s.win_in.data(), s.win_out.data(), conv);
    const Tensor qk = conv.cols_at(0, int64_t(2) * hk * S);  // the q and k heads
    be.l2_norm(qk, S, hp.rms_eps, qk);
    be.delta_gates(M.vec(L.ssm_dt), M.vec(L.ssm_a), beta, alpha);
    be.delta_rule({S, hk, hv, hp.ssm_grouped_heads}, s.m_in.data(), s.m_out.data(), conv.cols_at(0, int64_t(hk) * S),
                  conv.cols_at(int64_t(hk) * S, int64_t(hk) * S), conv.cols_at(int64_t(2) * hk * S, vd), alpha, beta,
                  o);
    be.rms_norm_gated(o, M.vec(L.ssm_norm), S, hp.rms_eps, z);
    be.matmul(M.weight(L.ssm_out), o, out);
}

}  // namespace tandem
