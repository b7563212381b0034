// Session::eagle3_forward: the EAGLE-3 head's decoder layer over a pass's rows (model/eagle3.h has the row layout).
#include "model/eagle3.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/ffn.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "tandem/error.h"

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
    Impl& S = *S0.impl_;
    backend::Backend& be = *S.be;
    const HostTensors H{be.host_memory()};
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
            if (h) {  // (the target's row, host memory of the same backend)
                const backend::Tensor hr = H.rows(h, 1, Ein), f = H.rows(&S.qg[fused.size() * size_t(Ein)], 1, Ein);
                if (ew.norm_before_fc) be.rms_norm(hr, H.vec(ew.fc_norm), Ein, hp.rms_eps, f);
                else be.copy(hr, f);
                fused.push_back(r);
            } else if (q > 0 && s.own_pos_ == q - 1) {
                std::copy_n(s.own_hidden_.data(), E, &S.x[size_t(r) * E]);
            }
        }
        g.s->note_target_rows(g.pos0, g.n, first_own);
    }
    using backend::Tensor;
    if (!fused.empty()) {
        S.rows_out.resize(fused.size() * size_t(E));
        be.matmul(H.weight(ew.fc), H.rows(S.qg.data(), int64_t(fused.size()), Ein),
                  H.rows(S.rows_out.data(), int64_t(fused.size()), E));
        for (size_t i = 0; i < fused.size(); i++)
            be.copy(H.rows(&S.rows_out[i * size_t(E)], 1, E), H.rows(&S.x[size_t(fused[i]) * E], 1, E));
    }

    // the attention's input [rmsnorm(embd(t)) * attn_norm, rmsnorm(g) * hidden_norm]; the residual g (or its norm)
    S.mtp_in.resize(size_t(n) * 2 * E);
    S.xn.resize(size_t(n) * E);
    std::vector<int32_t> toks;
    for (const auto& g : segs) toks.insert(toks.end(), g.tokens, g.tokens + g.n);
    const Tensor in = H.rows(S.mtp_in.data(), n, 2 * E), x = H.rows(S.x.data(), n, E), xn = H.rows(S.xn.data(), n, E);
    be.get_rows(H.weight(emb), toks.data(), n, xn);
    be.rms_norm(xn, H.vec(L.attn_norm), E, hp.rms_eps, in.cols_at(0, E));
    be.rms_norm(x, H.vec(ew.hidden_norm), E, hp.rms_eps, in.cols_at(E, E));
    if (ew.norm_before_residual) be.copy(in.cols_at(E, E), x);

    S.q.resize(size_t(n) * qd);
    S.k.resize(size_t(n) * kvd);
    S.v.resize(size_t(n) * kvd);
    S.att.resize(size_t(n) * qd);
    const Tensor q = H.rows(S.q.data(), n, qd), k = H.rows(S.k.data(), n, kvd), v = H.rows(S.v.data(), n, kvd);
    const Tensor att = H.rows(S.att.data(), n, qd);
    {
        const Tensor ws[3] = {H.weight(L.wq), H.weight(L.wk), H.weight(L.wv)}, ys[3] = {q, k, v};
        be.matmul_multi(ws, ys, 3, in);
    }
    // attention over each session's cache: row r at position q (the token at q + 1), seeing positions 1..q
    std::vector<backend::AttnSegment> asegs;
    std::vector<int> seg_of, pos_of, lo_of, rope_pos;
    r = 0;
    for (const auto& g : segs) {
        Session& s = *g.s;
        for (int t = 0; t < g.n; t++) {
            const int qp = g.pos0 + t;
            seg_of.push_back(int(asegs.size()));
            pos_of.push_back(qp);
            rope_pos.push_back(std::max(0, qp - 1));  // llama.cpp's position of the row
            lo_of.push_back(qp > 0 ? 1 : 0);  // row 0 is no row of llama.cpp's
        }
        backend::RopeArgs ra = s.impl_->rope[0].args(nh, hd, L.n_rot, 0, hp.rope_style);
        be.rope(ra, &rope_pos[size_t(r)], q.rows_at(r, g.n));
        ra.n_head = nkv;
        be.rope(ra, &rope_pos[size_t(r)], k.rows_at(r, g.n));
        s.impl_->kv.store_rows(0, k.rows_at(r, g.n), v.rows_at(r, g.n), &pos_of[size_t(r)]);
        asegs.push_back({s.impl_->kv.k_rows(0), s.impl_->kv.v_rows(0), g.pos0});
        r += g.n;
    }
    const backend::AttnArgs aa{
        nh,           nkv,    hd, hp.q_scale, {}, asegs.data(), int(asegs.size()), seg_of.data(), pos_of.data(),
        lo_of.data(), nullptr};
    be.attention(aa, q, att);
    S.rows_out.resize(size_t(n) * E);
    const Tensor out = H.rows(S.rows_out.data(), n, E);
    be.matmul(H.weight(L.wo), att, out);
    be.add(out, 1.0f, x);
    be.rms_norm(x, H.vec(L.ffn_norm), E, hp.rms_eps, xn);
    ffn_forward(be, ModelTensors{H.host}, hp, L, xn, out, S.pass.ffn);
    be.add(out, 1.0f, x);

    // the last row's state is the g of the next draft; logits of the rows asked for, mapped to target ids
    const int n_draft = int(out_w.rows);
    r = 0;
    for (const auto& g : segs) {
        Session& s = *g.s;
        s.own_hidden_.assign(&S.x[size_t(r + g.n - 1) * E], &S.x[size_t(r + g.n) * E]);
        s.own_pos_ = g.pos0 + g.n - 1;
        if (g.logits_out) {
            const int first = g.all_logits ? 0 : g.n - 1, m = g.n - first;
            be.rms_norm(x.rows_at(r + first, m), H.vec(hm.output_norm()), E, hp.rms_eps, xn.rows_at(0, m));
            S.logits_tmp.resize(size_t(m) * size_t(n_draft));
            float* dst = ew.d2t.empty() ? g.logits_out : S.logits_tmp.data();
            be.matmul(H.weight(out_w), xn.rows_at(0, m), H.rows(dst, m, n_draft));
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
