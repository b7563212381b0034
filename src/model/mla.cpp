#include "model/mla.h"

#include <algorithm>

#include "model/norm.h"
#include "model/weight_view.h"
#include "backend/cpu/kernels.h"

namespace tandem {

void mla_project(ThreadPool& pool, const HParams& hp, const LayerWeights& L, const float* xn, int n, float* q,
                 float* kv, MlaScratch& s) {
    const int nh = hp.n_head, hd = hp.head_dim, lkv = hp.n_lora_kv, rot = hp.n_rot, mk = hp.mla_k;
    const int nope = mk - rot;
    s.qf.resize(size_t(n) * nh * mk);
    s.kva.resize(size_t(n) * (lkv + rot));
    if (hp.n_lora_q > 0) {  // q = wq_b rmsnorm(wq_a x); wq_a and wkv_a read the same rows
        s.qa.resize(size_t(n) * hp.n_lora_q);
        const WeightView ws[2] = {view(L.wq_a), view(L.wkv_a)};
        float* const ys[2] = {s.qa.data(), s.kva.data()};
        matmul_shared_input(pool, ws, ys, 2, xn, n);
        for (int r = 0; r < n; r++) {
            float* row = &s.qa[size_t(r) * hp.n_lora_q];
            rmsnorm(row, L.q_a_norm.data(), row, hp.n_lora_q, hp.rms_eps);
        }
        matmul(pool, view(L.wq_b), s.qa.data(), n, s.qf.data());
    } else {
        const WeightView ws[2] = {view(L.wq), view(L.wkv_a)};
        float* const ys[2] = {s.qf.data(), s.kva.data()};
        matmul_shared_input(pool, ws, ys, 2, xn, n);
    }
    for (int r = 0; r < n; r++) {
        const float* a = &s.kva[size_t(r) * (lkv + rot)];
        float* row = kv + size_t(r) * hd;
        rmsnorm(a, L.kv_a_norm.data(), row, lkv, hp.rms_eps);
        std::copy_n(a + lkv, rot, row + lkv);
    }
    // Absorb wk_b into each head's query: gather the heads' q_nope, one matmul per head (all in one pass).
    s.qn.resize(size_t(nh) * n * nope);
    s.qabs.resize(size_t(nh) * n * lkv);
    std::vector<MatmulJob> jobs;
    for (int h = 0; h < nh; h++) {
        for (int r = 0; r < n; r++)
            std::copy_n(&s.qf[(size_t(r) * nh + h) * mk], nope, &s.qn[(size_t(h) * n + r) * nope]);
        jobs.push_back({view(L.wk_b[size_t(h)]), &s.qn[size_t(h) * n * nope], n, &s.qabs[size_t(h) * n * lkv]});
    }
    matmul_jobs(pool, jobs.data(), int(jobs.size()));
    for (int r = 0; r < n; r++)
        for (int h = 0; h < nh; h++) {
            float* qh = q + (size_t(r) * nh + h) * hd;
            std::copy_n(&s.qabs[(size_t(h) * n + r) * lkv], lkv, qh);
            std::copy_n(&s.qf[(size_t(r) * nh + h) * mk + nope], rot, qh + lkv);
        }
}

void mla_values(ThreadPool& pool, const HParams& hp, const LayerWeights& L, const float* att, int n, float* out,
                MlaScratch& s) {
    const int nh = hp.n_head, hd = hp.head_dim, lkv = hp.n_lora_kv, mv = hp.mla_v;
    s.lat.resize(size_t(nh) * n * lkv);
    s.vo.resize(size_t(nh) * n * mv);
    std::vector<MatmulJob> jobs;
    for (int h = 0; h < nh; h++) {
        for (int r = 0; r < n; r++)
            std::copy_n(att + (size_t(r) * nh + h) * hd, lkv, &s.lat[(size_t(h) * n + r) * lkv]);
        jobs.push_back({view(L.wv_b[size_t(h)]), &s.lat[size_t(h) * n * lkv], n, &s.vo[size_t(h) * n * mv]});
    }
    matmul_jobs(pool, jobs.data(), int(jobs.size()));
    for (int r = 0; r < n; r++)
        for (int h = 0; h < nh; h++) std::copy_n(&s.vo[(size_t(h) * n + r) * mv], mv, out + (size_t(r) * nh + h) * mv);
}

}  // namespace tandem
