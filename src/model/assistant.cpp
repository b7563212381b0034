// Session::assistant_forward: one draft step of a Gemma 4 assistant per segment (see AssistantWeights), its last
// row; the rows before it are its catch-up over tokens the target has already read, which leave nothing behind
// (the assistant has no cache), so only the last is computed.
#include "model/assistant.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/attention.h"
#include "model/ffn.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "model/weight_view.h"
#include "tandem/error.h"
#include "tandem/thread_pool.h"

namespace tandem {

std::vector<int> assistant_cache_layers(const Model& a, const Session& target) {
    const Model& t = target.model();
    const HParams &ha = a.hparams(), &ht = t.hparams();
    const AssistantWeights* aw = a.assistant();
    TD_ASSERT(aw);
    if (ht.arch != Arch::GEMMA4 || target.is_drafter())
        throw Error(a.path() + ": a gemma4-assistant drafts for a gemma4 target, not " + arch_name(ht.arch));
    if (aw->n_embd_target != ht.n_embd || ha.n_vocab != ht.n_vocab)
        throw Error(
            strprintf("%s: the assistant is for a target of hidden size %d and %d tokens, the target has %d "
                      "and %d",
                      a.path().c_str(), aw->n_embd_target, ha.n_vocab, ht.n_embd, ht.n_vocab));
    if (target.n_layers() != ht.n_layer || ht.n_layer < 2)
        throw Error("a gemma4-assistant needs its target's every layer");
    std::vector<int> out;
    for (int l = 0; l < ha.n_layer; l++) {
        const LayerWeights& L = a.layer(l);
        int c = ht.n_layer - (L.swa ? 2 : 1);
        if (t.layer(c).kv_from >= 0) c = t.layer(c).kv_from;
        const LayerWeights& T = t.layer(c);
        if (T.swa != L.swa || T.head_dim != L.head_dim || ha.n_head % T.n_head_kv != 0 || ha.n_head / T.n_head_kv > 64)
            throw Error(
                strprintf("%s: assistant layer %d (%s, head size %d, %d heads) cannot attend to the target's "
                          "layer %d (%s, head size %d, %d KV heads)",
                          a.path().c_str(), l, L.swa ? "sliding-window" : "global", L.head_dim, ha.n_head, c,
                          T.swa ? "sliding-window" : "global", T.head_dim, T.n_head_kv));
        out.push_back(c);
    }
    return out;
}

void Session::assistant_forward(const std::vector<Segment>& segs) {
    for (const Segment& g : segs) {
        Session& s = *g.s;
        TD_ASSERT(!g.all_logits && !g.parents && !g.hidden_out);
        const Model& am = *s.model_;
        const HParams& hp = am.hparams();
        const AssistantWeights& aw = *am.assistant();
        const Session& T = *s.drafter_of_;
        const HParams& ht = T.model().hparams();
        ThreadPool& pool = s.pool_;
        Impl& S = *s.impl_;
        const int E = hp.n_embd, Et = aw.n_embd_target, nh = hp.n_head;
        // the row: its token, its position (a draft beyond the target's length stays at that length, as
        // llama.cpp's shared-memory drafting), and its h (the target's state before it, or its own last output's)
        const int q = g.pos0 + g.n - 1, tn = T.n_past(), pos = std::min(q, tn);
        const float* h = q >= 1 && q - 1 < tn ? T.hidden_row(q - 1) : nullptr;
        if (!h && s.own_pos_ == q - 1 && !s.own_hidden_.empty()) h = s.own_hidden_.data();
        S.mtp_in.resize(size_t(2 * Et));
        embedding_row(T.model().tok_embd(), g.tokens[g.n - 1], S.mtp_in.data());
        const float embd_scale = std::sqrt(float(Et));
        for (int i = 0; i < Et; i++) S.mtp_in[size_t(i)] *= embd_scale;
        if (h) std::copy_n(h, Et, S.mtp_in.data() + Et);
        else std::fill(S.mtp_in.begin() + Et, S.mtp_in.end(), 0.0f);
        S.x.resize(size_t(E));
        S.xn.resize(size_t(E));
        S.rows_out.resize(size_t(E));
        matmul(pool, view(aw.pre_proj), S.mtp_in.data(), 1, S.x.data());
        for (int l = 0; l < s.n_layers_; l++) {
            const LayerWeights& L = am.layer(l);
            const int hd = L.head_dim, c = S.assist_kv[size_t(l)];
            S.q.resize(size_t(nh * hd));
            S.att.assign(size_t(nh * hd), 0.0f);
            rmsnorm(S.x.data(), L.attn_norm.data(), S.xn.data(), E, hp.rms_eps);
            matmul(pool, view(L.wq), S.xn.data(), 1, S.q.data());
            const RopeTable& rt = S.rope[L.swa ? 1 : 0];
            for (int hh = 0; hh < nh; hh++) {
                float* qh = S.q.data() + size_t(hh * hd);
                rmsnorm(qh, L.q_norm.data(), qh, hd, hp.rms_eps);
                rope_head(qh, rt.cos_at(pos), rt.sin_at(pos), L.n_rot, hp.rope_style, rt.mscale);
            }
            if (tn > 0) {  // the target's rows 0..tn-1, a sliding-window layer's last n_swa of them
                const int lo = L.swa ? std::max({0, swa_first_visible(ht, pos), T.swa_lost_}) : 0;
                const KvCache& kv = T.impl_->kv;
                const backend::AttnSegment seg{kv.k_rows(c), kv.v_rows(c), tn - 1};
                const int zero = 0, at = tn - 1;
                const backend::AttnArgs aa{
                    nh, T.model().layer(c).n_head_kv, hd, hp.q_scale, {}, &seg, 1, &zero, &at, &lo, nullptr};
                backend::Backend& be = *S.be;
                const auto rows = [&](float* p, int64_t cols) {
                    return backend::Tensor{
                        be.host_memory(), uintptr_t(p), TensorType::F32, 1, cols, size_t(cols) * sizeof(float)};
                };
                be.attention(aa, rows(S.q.data(), nh * hd), rows(S.att.data(), nh * hd));
            }
            matmul(pool, view(L.wo), S.att.data(), 1, S.rows_out.data());
            rmsnorm(S.rows_out.data(), L.post_attn_norm.data(), S.rows_out.data(), E, hp.rms_eps);
            for (int i = 0; i < E; i++) S.x[size_t(i)] += S.rows_out[size_t(i)];
            rmsnorm(S.x.data(), L.ffn_norm.data(), S.xn.data(), E, hp.rms_eps);
            ffn_forward(*S.be, hp, L, S.xn.data(), 1, S.rows_out.data(), S.ffn);
            rmsnorm(S.rows_out.data(), L.post_ffn_norm.data(), S.rows_out.data(), E, hp.rms_eps);
            for (int i = 0; i < E; i++) S.x[size_t(i)] = (S.x[size_t(i)] + S.rows_out[size_t(i)]) * L.out_scale;
        }
        rmsnorm(S.x.data(), am.output_norm().data(), S.xn.data(), E, hp.rms_eps);
        if (g.logits_out) matmul(pool, view(am.output()), S.xn.data(), 1, g.logits_out);
        s.own_hidden_.resize(size_t(Et));
        matmul(pool, view(aw.post_proj), S.xn.data(), 1, s.own_hidden_.data());
        s.own_pos_ = q;
        s.note_target_rows(g.pos0, g.n, q >= 1 && q - 1 >= tn ? q : -1);
    }
}

}  // namespace tandem
