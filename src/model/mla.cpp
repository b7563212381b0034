#include "model/mla.h"

namespace tandem {

namespace {

// Each row's heads as matmul_id's choices: ids (n, n_head) = 0..n_head-1 in every row, and the heads' matrices
backend::Tensor heads_as_experts(backend::Backend& be, const ModelTensors& M, const std::vector<Weight>& w, int64_t n,
                                 MlaScratch& s, std::vector<backend::Tensor>& ws) {
    const int nh = int(w.size());
    s.heads_host.resize(size_t(n) * size_t(nh));
    for (size_t i = 0; i < s.heads_host.size(); i++) s.heads_host[i] = int32_t(i % size_t(nh));
    const backend::Tensor ids = s.heads.rows(be, n, nh, TensorType::I32);
    be.write(ids, s.heads_host.data());
    ws.resize(size_t(nh));
    for (int h = 0; h < nh; h++) ws[size_t(h)] = M.weight(w[size_t(h)]);
    return ids;
}

// a view of t's rows as `rows` rows of `cols` floats, `stride` floats apart (heads of each row)
backend::Tensor reshaped(const backend::Tensor& t, int64_t rows, int64_t cols, int64_t stride) {
    return {t.buf, t.offset, TensorType::F32, rows, cols, size_t(stride) * sizeof(float)};
}

}  // namespace

void mla_project(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                 const backend::Tensor& x, const backend::Tensor& q, const backend::Tensor& kvt, MlaScratch& s) {
    using backend::Tensor;
    const int64_t n = x.rows;
    const int nh = hp.n_head, hd = hp.head_dim, lkv = hp.n_lora_kv, rot = hp.n_rot, mk = hp.mla_k;
    const int nope = mk - rot;
    const Tensor qf = s.qf.rows(be, n, int64_t(nh) * mk), kva = s.kva.rows(be, n, lkv + rot);
    if (hp.n_lora_q > 0) {  // q = wq_b rmsnorm(wq_a x); wq_a and wkv_a read the same rows
        const Tensor qa = s.qa.rows(be, n, hp.n_lora_q);
        const Tensor ws[2] = {M.weight(L.wq_a), M.weight(L.wkv_a)}, ys[2] = {qa, kva};
        be.matmul_multi(ws, ys, 2, x);
        be.rms_norm(qa, M.vec(L.q_a_norm), hp.n_lora_q, hp.rms_eps, qa);
        be.matmul(M.weight(L.wq_b), qa, qf);
    } else {
        const Tensor ws[2] = {M.weight(L.wq), M.weight(L.wkv_a)}, ys[2] = {qf, kva};
        be.matmul_multi(ws, ys, 2, x);
    }
    be.rms_norm(kva.cols_at(0, lkv), M.vec(L.kv_a_norm), lkv, hp.rms_eps, kvt.cols_at(0, lkv));
    be.copy(kva.cols_at(lkv, rot), kvt.cols_at(lkv, rot));
    // Absorb wk_b into each head's query: q_nope of head h times wk_b[h], every head in one matmul_id.
    const Tensor ids = heads_as_experts(be, M, L.wk_b, n, s, s.wk);
    const Tensor heads_in = reshaped(qf, n * nh, mk, mk);  // row (t, h): head h of row t
    const Tensor heads_q = reshaped(q, n * nh, hd, hd);
    be.matmul_id(s.wk.data(), nh, ids, heads_in.cols_at(0, nope), true, heads_q.cols_at(0, lkv));
    be.copy(heads_in.cols_at(nope, rot), heads_q.cols_at(lkv, rot));
}

void mla_values(backend::Backend& be, const ModelTensors& M, const HParams& hp, const LayerWeights& L,
                const backend::Tensor& att, const backend::Tensor& out, MlaScratch& s) {
    const int64_t n = att.rows;
    const int nh = hp.n_head, hd = hp.head_dim, lkv = hp.n_lora_kv, mv = hp.mla_v;
    const backend::Tensor ids = heads_as_experts(be, M, L.wv_b, n, s, s.wv);
    be.matmul_id(s.wv.data(), nh, ids, reshaped(att, n * nh, lkv, hd), true, reshaped(out, n * nh, mv, mv));
}

}  // namespace tandem
