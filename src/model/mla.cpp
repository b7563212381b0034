#include "model/mla.h"

#include "model/host_tensors.h"

namespace tandem {

namespace {

// The (n, n_head) table of head ids and the heads' matrices, as matmul_id's experts.
void heads_as_experts(const HostTensors& H, const std::vector<Weight>& w, int n, MlaScratch& s,
                      std::vector<backend::Tensor>& ws) {
    const int nh = int(w.size());
    s.heads.resize(size_t(n) * size_t(nh));
    for (size_t i = 0; i < s.heads.size(); i++) s.heads[i] = int32_t(i % size_t(nh));
    ws.resize(size_t(nh));
    for (int h = 0; h < nh; h++) ws[size_t(h)] = H.weight(w[size_t(h)]);
}

}  // namespace

void mla_project(backend::Backend& be, const HParams& hp, const LayerWeights& L, const float* xn, int n, float* q,
                 float* kv, MlaScratch& s) {
    using backend::Tensor;
    const HostTensors H{be.host_memory()};
    const int nh = hp.n_head, hd = hp.head_dim, lkv = hp.n_lora_kv, rot = hp.n_rot, mk = hp.mla_k;
    const int nope = mk - rot;
    s.qf.resize(size_t(n) * nh * mk);
    s.kva.resize(size_t(n) * (lkv + rot));
    const Tensor x = H.rows(xn, n, hp.n_embd), qf = H.rows(s.qf.data(), n, nh * mk);
    const Tensor kva = H.rows(s.kva.data(), n, lkv + rot), kvt = H.rows(kv, n, hd);
    if (hp.n_lora_q > 0) {  // q = wq_b rmsnorm(wq_a x); wq_a and wkv_a read the same rows
        s.qa.resize(size_t(n) * hp.n_lora_q);
        const Tensor qa = H.rows(s.qa.data(), n, hp.n_lora_q);
        const Tensor ws[2] = {H.weight(L.wq_a), H.weight(L.wkv_a)}, ys[2] = {qa, kva};
        be.matmul_multi(ws, ys, 2, x);
        be.rms_norm(qa, H.vec(L.q_a_norm), hp.n_lora_q, hp.rms_eps, qa);
        be.matmul(H.weight(L.wq_b), qa, qf);
    } else {
        const Tensor ws[2] = {H.weight(L.wq), H.weight(L.wkv_a)}, ys[2] = {qf, kva};
        be.matmul_multi(ws, ys, 2, x);
    }
    be.rms_norm(kva.cols_at(0, lkv), H.vec(L.kv_a_norm), lkv, hp.rms_eps, kvt.cols_at(0, lkv));
    be.copy(kva.cols_at(lkv, rot), kvt.cols_at(lkv, rot));
    // Absorb wk_b into each head's query: q_nope of head h times wk_b[h], every head in one matmul_id.
    heads_as_experts(H, L.wk_b, n, s, s.wk);
    const Tensor heads_in = H.strided(s.qf.data(), int64_t(n) * nh, mk, mk);  // row (t, h): head h of row t
    const Tensor heads_q = H.strided(q, int64_t(n) * nh, hd, hd);
    be.matmul_id(s.wk.data(), nh, H.ids(s.heads.data(), n, nh), heads_in.cols_at(0, nope), true,
                 heads_q.cols_at(0, lkv));
    be.copy(heads_in.cols_at(nope, rot), heads_q.cols_at(lkv, rot));
}

void mla_values(backend::Backend& be, const HParams& hp, const LayerWeights& L, const float* att, int n, float* out,
                MlaScratch& s) {
    const HostTensors H{be.host_memory()};
    const int nh = hp.n_head, hd = hp.head_dim, lkv = hp.n_lora_kv, mv = hp.mla_v;
    heads_as_experts(H, L.wv_b, n, s, s.wv);
    be.matmul_id(s.wv.data(), nh, H.ids(s.heads.data(), n, nh), H.strided(att, int64_t(n) * nh, lkv, hd), true,
                 H.rows(out, int64_t(n) * nh, mv));
}

}  // namespace tandem
