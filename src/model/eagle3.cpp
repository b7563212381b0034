// Session::eagle3_forward: the EAGLE-3 head's decoder layer over a pass's rows (model/eagle3.h has the row layout).
#include "model/eagle3.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/attention.h"
#include "model/ffn.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "model/weight_view.h"
#include "tandem/error.h"
#include "tandem/thread_pool.h"

namespace tandem {

std::vector<int> eagle3_target_layers(const Model& head) {
    const Eagle3Weights* w = head.eagle3();
    TD_ASSERT(w);
    return {w->target_layers[0], w->target_layers[1], w->target_layers[2]};
}

void check_eagle3_target(const Model& head, const Session& target) {
    const Eagle3Weights& w = *head.eagle3();
    const HParams &hh = head.hparams(), &ht = target.model().hparams();
    if (target.is_drafter() || target.model().eagle3() || target.model().assistant())
        throw Error(head.path() + ": an eagle3 head drafts for a target model, not for another drafter");
    if (w.n_embd_target != ht.n_embd || hh.n_vocab != ht.n_vocab)
        throw Error(
            strprintf("%s: the eagle3 head is for a target of hidden size %d and %d tokens, the target has %d "
                      "and %d",
                      head.path().c_str(), w.n_embd_target, hh.n_vocab, ht.n_embd, ht.n_vocab));
    for (int l : w.target_layers)
        if (l >= target.n_layers())
            throw Error(strprintf("%s: the eagle3 head reads the input of target layer %d, the target runs %d layers",
                                  head.path().c_str(), l, target.n_layers()));
    if ((!head.tok_embd().data || !head.output().data) && hh.n_embd != ht.n_embd)
        throw Error(strprintf("%s: the eagle3 head has no own %s and a hidden size (%d) other than its target's (%d)",
                              head.path().c_str(), head.tok_embd().data ? "output matrix" : "token embeddings",
                              hh.n_embd, ht.n_embd));
}

void Session::eagle3_forward(const std::vector<Segment>& segs) {
    Session& S0 = *segs[0].s;
    const Model& hm = *S0.model_;
    const HParams& hp = hm.hparams();
    const Eagle3Weights& ew = *hm.eagle3();
    const LayerWeights& L = hm.layer(0);
    ThreadPool& pool = S0.pool_;
    Impl& S = *S0.impl_;
    const Model& tm = S0.drafter_of_->model();
    const Weight& emb = hm.tok_embd().data ? hm.tok_embd() : tm.tok_embd();
    const Weight& out_w = hm.output().data ? hm.output() : tm.output();
    const int E = hp.n_embd, Ein = 3 * ew.n_embd_target, nh = hp.n_head, nkv = hp.n_head_kv, hd = hp.head_dim;
    const int qd = nh * hd, kvd = nkv * hd;
    int n = 0;
    for (const auto& g : segs) {
        if (g.parents || g.hidden_out) throw Error("an eagle3 head's session decodes chains only");
        TD_ASSERT(g.s->drafter_of_->hidden_width() == Ein);
        n += g.n;
    }

    // g of every row: the target's kept layer inputs at q - 1 through fc (one matmul for all such rows), else the
    // head's own output state of its previous pass at q - 1, else zeros
    S.x.assign(size_t(n) * E, 0.0f);
    S.qg.resize(size_t(n) * Ein);
    std::vector<int> fused;  // rows whose g is the target's
    int r = 0;
    for (const auto& g : segs) {
        int first_own = -1;
        for (int t = 0; t < g.n; t++, r++) {
            const Session& s = *g.s;
            const int q = g.pos0 + t;
            const float* h = q > 0 && q - 1 < s.drafter_of_->n_past() ? s.drafter_of_->hidden_row(q - 1) : nullptr;
            if (q > 0 && q - 1 >= s.drafter_of_->n_past() && first_own < 0) first_own = q;  // a drafted row
            if (h) {
                float* f = &S.qg[fused.size() * size_t(Ein)];
                if (ew.norm_before_fc) rmsnorm(h, ew.fc_norm.data(), f, Ein, hp.rms_eps);
                else std::copy_n(h, Ein, f);
                fused.push_back(r);
            } else if (q > 0 && s.own_pos_ == q - 1) {
                std::copy_n(s.own_hidden_.data(), E, &S.x[size_t(r) * E]);
            }
        }
        g.s->note_target_rows(g.pos0, g.n, first_own);
    }
    if (!fused.empty()) {
        S.rows_out.resize(fused.size() * size_t(E));
        matmul(pool, view(ew.fc), S.qg.data(), int(fused.size()), S.rows_out.data());
        for (size_t i = 0; i < fused.size(); i++)
            std::copy_n(&S.rows_out[i * size_t(E)], E, &S.x[size_t(fused[i]) * E]);
    }

    // the attention's input [rmsnorm(embd(t)) * attn_norm, rmsnorm(g) * hidden_norm]; the residual g (or its norm)
    S.mtp_in.resize(size_t(n) * 2 * E);
    S.xn.resize(size_t(n) * E);
    r = 0;
    for (const auto& g : segs)
        for (int t = 0; t < g.n; t++, r++) {
            float* in = &S.mtp_in[size_t(r) * 2 * E];
            float* x = &S.x[size_t(r) * E];
            embedding_row(emb, g.tokens[t], S.xn.data());
            rmsnorm(S.xn.data(), L.attn_norm.data(), in, E, hp.rms_eps);
            rmsnorm(x, ew.hidden_norm.data(), in + E, E, hp.rms_eps);
            if (ew.norm_before_residual) std::copy_n(in + E, E, x);
        }

    S.q.resize(size_t(n) * qd);
    S.k.resize(size_t(n) * kvd);
    S.v.resize(size_t(n) * kvd);
    S.att.resize(size_t(n) * qd);
    {
        const WeightView ws[3] = {view(L.wq), view(L.wk), view(L.wv)};
        float* const ys[3] = {S.q.data(), S.k.data(), S.v.data()};
        matmul_shared_input(pool, ws, ys, 3, S.mtp_in.data(), n);
    }
    // attention over each session's cache: row r at position q (the token at q + 1), seeing positions 1..q
    std::vector<backend::AttnSegment> asegs;
    std::vector<int> seg_of, pos_of, lo_of;
    r = 0;
    for (const auto& g : segs) {
        Session& s = *g.s;
        for (int t = 0; t < g.n; t++, r++) {
            const int q = g.pos0 + t, pos = std::max(0, q - 1);  // llama.cpp's position of the row
            const RopeTable& rt = s.impl_->rope[0];
            float* qr = &S.q[size_t(r) * qd];
            float* kr = &S.k[size_t(r) * kvd];
            for (int h = 0; h < nh; h++)
                rope_head(qr + h * hd, rt.cos_at(pos), rt.sin_at(pos), L.n_rot, hp.rope_style, rt.mscale);
            for (int h = 0; h < nkv; h++)
                rope_head(kr + h * hd, rt.cos_at(pos), rt.sin_at(pos), L.n_rot, hp.rope_style, rt.mscale);
            s.impl_->kv.store(0, q, kr, &S.v[size_t(r) * kvd]);
            seg_of.push_back(int(asegs.size()));
            pos_of.push_back(q);
            lo_of.push_back(q > 0 ? 1 : 0);  // row 0 is no row of llama.cpp's
        }
        asegs.push_back({s.impl_->kv.k_rows(0), s.impl_->kv.v_rows(0), g.pos0});
    }
    backend::Backend& be = *S.be;
    const backend::AttnArgs aa{
        nh,           nkv,    hd, hp.q_scale, {}, asegs.data(), int(asegs.size()), seg_of.data(), pos_of.data(),
        lo_of.data(), nullptr};
    const auto rows_of = [&](float* p, int64_t cols) {
        return backend::Tensor{be.host_memory(), uintptr_t(p), TensorType::F32, n, cols, size_t(cols) * sizeof(float)};
    };
    be.attention(aa, rows_of(S.q.data(), qd), rows_of(S.att.data(), qd));
    S.rows_out.resize(size_t(n) * E);
    matmul(pool, view(L.wo), S.att.data(), n, S.rows_out.data());
    for (size_t i = 0; i < size_t(n) * E; i++) S.x[i] += S.rows_out[i];
    for (int t = 0; t < n; t++) rmsnorm(&S.x[size_t(t) * E], L.ffn_norm.data(), &S.xn[size_t(t) * E], E, hp.rms_eps);
    ffn_forward(*S.be, hp, L, S.xn.data(), n, S.rows_out.data(), S.ffn);
    for (size_t i = 0; i < size_t(n) * E; i++) S.x[i] += S.rows_out[i];

    // the last row's state is the g of the next draft; logits of the rows asked for, mapped to target ids
    const int n_draft = int(out_w.rows);
    r = 0;
    for (const auto& g : segs) {
        Session& s = *g.s;
        s.own_hidden_.assign(&S.x[size_t(r + g.n - 1) * E], &S.x[size_t(r + g.n) * E]);
        s.own_pos_ = g.pos0 + g.n - 1;
        if (g.logits_out) {
            const int first = g.all_logits ? 0 : g.n - 1, m = g.n - first;
            for (int t = 0; t < m; t++)
                rmsnorm(&S.x[size_t(r + first + t) * E], hm.output_norm().data(), &S.xn[size_t(t) * E], E, hp.rms_eps);
            S.logits_tmp.resize(size_t(m) * size_t(n_draft));
            float* dst = ew.d2t.empty() ? g.logits_out : S.logits_tmp.data();
            matmul(pool, view(out_w), S.xn.data(), m, dst);
            if (!ew.d2t.empty())
                for (int t = 0; t < m; t++) {
                    float* lg = g.logits_out + size_t(t) * size_t(hp.n_vocab);
                    std::fill(lg, lg + hp.n_vocab, -std::numeric_limits<float>::infinity());
                    const float* dl = &S.logits_tmp[size_t(t) * size_t(n_draft)];
                    for (int j = 0; j < n_draft; j++) lg[ew.d2t[size_t(j)]] = dl[j];
                }
        }
        r += g.n;
    }
}

}  // namespace tandem
