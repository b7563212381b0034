// Session::assistant_forward: one draft step of a Gemma 4 assistant per segment (see AssistantWeights), its last
// row; the rows before it are its catch-up over tokens the target has already read, which leave nothing behind
// (the assistant has no cache), so only the last is computed.
#include "model/assistant.h"

#include <algorithm>
#include <cmath>

#include "model/ffn.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "tandem/error.h"

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
        Impl& S = *s.impl_;
        const int E = hp.n_embd, Et = aw.n_embd_target, nh = hp.n_head;
        // the row: its token, its position (a draft beyond the target's length stays at that length, as
        // llama.cpp's shared-memory drafting), and its h (the target's state before it, or its own last output's)
        const int q = g.pos0 + g.n - 1, tn = T.n_past(), pos = std::min(q, tn);
        const float* h = q >= 1 && q - 1 < tn ? T.hidden_row(q - 1) : nullptr;
        if (!h && s.own_pos_ == q - 1 && !s.own_hidden_.empty()) h = s.own_hidden_.data();
        using backend::Tensor;
        backend::Backend& be = *S.be;
        const HostTensors H{be.host_memory()};
        S.mtp_in.resize(size_t(2 * Et));
        const Tensor in = H.rows(S.mtp_in.data(), 1, 2 * Et);
        be.get_rows(H.weight(T.model().tok_embd()), &g.tokens[g.n - 1], 1, in.cols_at(0, Et));
        be.scale(std::sqrt(float(Et)), in.cols_at(0, Et));
        if (h) std::copy_n(h, Et, S.mtp_in.data() + Et);  // (the target's row or its own: host memory)
        else std::fill(S.mtp_in.begin() + Et, S.mtp_in.end(), 0.0f);
        S.x.resize(size_t(E));
        S.xn.resize(size_t(E));
        S.rows_out.resize(size_t(E));
        const Tensor x = H.rows(S.x.data(), 1, E), xn = H.rows(S.xn.data(), 1, E),
                     out = H.rows(S.rows_out.data(), 1, E);
        be.matmul(H.weight(aw.pre_proj), in, x);
        for (int l = 0; l < s.n_layers_; l++) {
            const LayerWeights& L = am.layer(l);
            const int hd = L.head_dim, c = S.assist_kv[size_t(l)];
            S.q.resize(size_t(nh * hd));
            S.att.assign(size_t(nh * hd), 0.0f);
            const Tensor qt = H.rows(S.q.data(), 1, nh * hd), att = H.rows(S.att.data(), 1, nh * hd);
            be.rms_norm(x, H.vec(L.attn_norm), E, hp.rms_eps, xn);
            be.matmul(H.weight(L.wq), xn, qt);
            be.rms_norm(qt, H.vec(L.q_norm), hd, hp.rms_eps, qt);
            be.rope(S.rope[L.swa ? 1 : 0].args(nh, hd, L.n_rot, 0, hp.rope_style), &pos, qt);
            if (tn > 0) {  // the target's rows 0..tn-1, a sliding-window layer's last n_swa of them
                const int lo = L.swa ? std::max({0, swa_first_visible(ht, pos), T.swa_lost_}) : 0;
                const KvCache& kv = T.impl_->kv;
                const backend::AttnSegment seg{kv.k_rows(c), kv.v_rows(c), tn - 1};
                const int zero = 0, at = tn - 1;
                const backend::AttnArgs aa{
                    nh, T.model().layer(c).n_head_kv, hd, hp.q_scale, {}, &seg, 1, &zero, &at, &lo, nullptr};
                be.attention(aa, qt, att);
            }
            be.matmul(H.weight(L.wo), att, out);
            be.rms_norm(out, H.vec(L.post_attn_norm), E, hp.rms_eps, out);
            be.add(out, 1.0f, x);
            be.rms_norm(x, H.vec(L.ffn_norm), E, hp.rms_eps, xn);
            ffn_forward(be, ModelTensors{H.host}, hp, L, xn, out, S.pass.ffn);
            be.rms_norm(out, H.vec(L.post_ffn_norm), E, hp.rms_eps, out);
            be.add(out, 1.0f, x);
            be.scale(L.out_scale, x);
        }
        be.rms_norm(x, H.vec(am.output_norm()), E, hp.rms_eps, xn);
        if (g.logits_out) be.matmul(H.weight(am.output()), xn, H.rows(g.logits_out, 1, int64_t(am.output().rows)));
        s.own_hidden_.resize(size_t(Et));
        be.matmul(H.weight(aw.post_proj), xn, H.rows(s.own_hidden_.data(), 1, Et));
        s.own_pos_ = q;
        s.note_target_rows(g.pos0, g.n, q >= 1 && q - 1 >= tn ? q : -1);
    }
}

}  // namespace tandem
