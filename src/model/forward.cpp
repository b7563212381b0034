// The decoder forward pass over a batch of tokens, shared by every architecture (model.h lists the features).
//
// x = embd(tokens) * embd_scale                              x, xn: (n, n_embd)
// Per layer, for n tokens at positions pos0..pos0+n-1:
//   xn = rmsnorm(x) * attn_norm                               [olmo2: no pre-norms, xn = x]
//   q = xn Wq^T (+bq), k = xn Wk^T (+bk), v = xn Wv^T (+bv)  q: (n, n_head*hd), k, v: (n, n_head_kv*hd)
//   [QK-norm: each head of q, k = rmsnorm(head) * q_norm / k_norm; olmo2: the whole q and k vectors]
//   [gemma4: each head of v = rmsnorm(head); its shared-KV layers compute q only and attend to an earlier
//    layer's rows; head sizes, KV heads and rotated dims are the layer's (LayerWeights)]
//   rope(q, k) (the layer's table: global or sliding-window; smollm3's, llama4's NoPE layers: none)
//   [llama4's RoPE layers: each q, k head = rmsnorm(head), no weight]; append k, v to the cache
//   [mistral3, llama4's NoPE layers: q *= 1 + attn_temp_scale ln(floor((pos + offset) / span) + 1)]
//   att = causal softmax(q_scale q k^T [+ sink]) v           att: (n, n_head*hd), grouped-query heads share k/v;
//                                                            a sliding-window layer sees the last n_swa positions
//                                                            (llama4: its chunk of n_swa, swa_first_visible)
//   a = att Wo^T (+bo)                                        [gemma3, olmo2: a = rmsnorm(a) * post_attn_norm]
//   x += residual_scale a                                     [residual_scale: granite's, else 1]
//   xn = rmsnorm(x) * ffn_norm (gpt-oss: post_attn_norm; olmo2: xn = x)
//   f = FFN(xn) (model/ffn.h: gated dense or mixture of experts)   [gemma3, olmo2: f = rmsnorm(f) * post_ffn_norm]
//   x += residual_scale f
//   [gemma4: x += its per-layer input (model/per_layer_embd.h); x *= out_scale]
// then logits = rmsnorm(x) * output_norm  Wout^T / logit_scale  (n_out, n_vocab)  [softcap: c tanh(logits / c)]
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/fp16.h"
#include "model/assistant.h"
#include "model/attention.h"
#include "model/eagle3.h"
#include "model/ffn.h"
#include "model/mla.h"
#include "model/norm.h"
#include "model/per_layer_embd.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "model/weight_view.h"
#include "quant/kernels.h"
#include "quant/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/split.h"
#include "tandem/thread_pool.h"

namespace tandem {

namespace {

// attention() for up to 64 query heads per key/value head; more (MLA's one latent head for DeepSeek V3's 128 query
// heads) in groups of heads whose query and output rows are gathered to and from the pass's rows.
struct HeadsScratch {
    std::vector<float>& attn;
    std::vector<float>& heads_q;
    std::vector<float>& heads_o;
};
void attention_heads(ThreadPool& pool, const AttnShape& sh, const std::vector<AttnRow>& rows, const float* q,
                     float* out, HeadsScratch S) {
    const int group = sh.n_head / sh.n_head_kv;
    if (group <= 64) return attention(pool, sh, rows, q, out, S.attn);
    TD_ASSERT(sh.n_head_kv == 1);
    const size_t n = rows.size(), hd = size_t(sh.head_dim), qd = size_t(sh.n_head) * hd;
    for (int h0 = 0; h0 < sh.n_head; h0 += 64) {
        const int nh = std::min(64, sh.n_head - h0);
        S.heads_q.resize(n * size_t(nh) * hd);
        S.heads_o.resize(S.heads_q.size());
        for (size_t r = 0; r < n; r++)
            std::copy_n(q + r * qd + size_t(h0) * hd, size_t(nh) * hd, &S.heads_q[r * size_t(nh) * hd]);
        AttnShape part = sh;
        part.n_head = nh;
        if (sh.sinks) part.sinks = sh.sinks + h0;
        attention(pool, part, rows, S.heads_q.data(), S.heads_o.data(), S.attn);
        for (size_t r = 0; r < n; r++)
            std::copy_n(&S.heads_o[r * size_t(nh) * hd], size_t(nh) * hd, out + r * qd + size_t(h0) * hd);
    }
}

// x += scale * y (scale 1: a plain residual add; granite's residual_scale otherwise)
void add_residual(float* x, const float* y, size_t n, float scale) {
    if (scale == 1.0f)
        for (size_t i = 0; i < n; i++) x[i] += y[i];
    else
        for (size_t i = 0; i < n; i++) x[i] += scale * y[i];
}

// The cluster's lock for a call of a split session on rank 0 (its command and its pass go out together); none else.
std::unique_lock<std::recursive_mutex> split_lock(Cluster* c, int id) {
    return c && id >= 0 ? c->lock() : std::unique_lock<std::recursive_mutex>();
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionParams& params, ThreadPool& pool)
    : model_(std::move(model)), pool_(pool) {
    const HParams& hp = model_->hparams();
    n_ctx_ = params.n_ctx > 0 ? params.n_ctx : std::min(hp.n_ctx_train, 4096);
    n_batch_ = std::max(1, params.n_batch);
    for (TensorType t : {params.type_k, params.type_v})
        if (!kv_cache_type_supported(t))
            throw Error(
                strprintf("KV cache type %s is not supported (supported: %s)", type_name(t), kv_cache_type_names()));
    // Sliding-window layers hold a ring of swa_cap_ rows unless that is the whole context (model/kv_cache.h).
    swa_cap_ = swa_cache_positions(hp, n_ctx_, params);
    std::vector<KvLayer> layers = kv_layers(*model_, params, n_ctx_);
    if (model_->assistant() && !params.mtp_of)
        throw Error(model_->path() +
                    ": a gemma4-assistant drafts beside its gemma4 target only (as -md), from the target's cache");
    if (model_->eagle3() && !params.mtp_of)
        throw Error(model_->path() + ": an eagle3 head drafts beside its target only (as -md), from its hidden states");
    if (params.mtp_of && params.mtp_of->keep_hidden_)
        throw Error(
            "the target already keeps its states for another drafter (one MTP, assistant or EAGLE-3 "
            "session per target)");
    if (params.mtp_of && params.mtp_of->split_ && (model_->assistant() || model_->eagle3()))
        throw Error(model_->path() +
                    ": this drafter reads its target's cache or inner layers, which a split target keeps on other "
                    "ranks: use a draft model, an MTP block, n-grams or the suffix cache with --split-mode layer");
    if (params.mtp_of) {  // a drafter reading its target's states: at the target's positions, never windowed apart
        mtp_of_ = params.mtp_of;
        n_ctx_ = mtp_of_->n_ctx();
        swa_cap_ = 0;
    }
    if (mtp_of_ && model_->eagle3()) {  // an EAGLE-3 head: its one layer
        check_eagle3_target(*model_, *mtp_of_);
        layers = kv_layers(*model_, params, n_ctx_);
    } else if (mtp_of_ && !model_->assistant()) {  // an MTP draft session: the one MTP layer
        if (!model_->mtp())
            throw Error(model_->path() + ": the model has no multi-token-prediction block (--spec-type mtp)");
        if (&mtp_of_->model() != model_.get() || mtp_of_->is_mtp())
            throw Error("an MTP draft session needs a target session of the same model");
        layer0_ = hp.n_layer;
        const LayerWeights& ml = model_->layer(hp.n_layer);
        layers.assign(1, {n_ctx_, ml.n_head_kv * ml.head_dim, ml.head_dim});
    }  // (a Gemma 4 assistant keeps no cache of its own: model/assistant.cpp)
    n_layers_ = int(layers.size());
    if (hp.mla && params.type_k != params.type_v)  // as llama.cpp: the latent row is cached once, as both
        throw Error(
            strprintf("this model's multi-head latent attention caches one row as key and value: the K and V "
                      "cache types must be the same (-ctk %s, -ctv %s)",
                      type_name(params.type_k), type_name(params.type_v)));
    impl_ = std::make_unique<Impl>(n_ctx_, layers, params.type_k, params.type_v, hp.mla);
    if (model_->assistant()) impl_->assist_kv = assistant_cache_layers(*model_, *mtp_of_);
    // Gated DeltaNet layers: their state, kept for the last recurrent_keep positions (model/recurrent_state.h)
    size_t rec_floats = 0;
    impl_->rec_off.assign(size_t(n_layers_), 0);
    for (int l = 0; l < n_layers_; l++)
        if (model_->layer(layer0_ + l).recurrent) {
            impl_->rec_off[size_t(l)] = rec_floats;
            rec_floats += delta_net_layer_floats(hp);
        }
    if (rec_floats > 0)
        impl_->rec = std::make_unique<RecurrentState>(rec_floats, std::max(1, params.recurrent_keep),
                                                      std::max(0, params.ctx_checkpoints));

    // RoPE tables: one for global layers, one for sliding-window layers when the model has them. phi3's
    // LongRoPE factors: the long ones when this context exceeds the original one (as llama.cpp chooses).
    const bool long_factors = hp.has_rope_long_short && n_ctx_ > (hp.n_ctx_orig > 0 ? hp.n_ctx_orig : hp.n_ctx_train);
    const auto& factors = long_factors ? model_->rope_freqs_long() : model_->rope_freqs();
    impl_->rope[0] = make_rope_table(hp, hp.n_rot, hp.rope_theta, hp.rope_freq_scale, factors, n_ctx_);
    if (hp.n_swa > 0)  // gemma4: its own rotated dims, and rope_freqs only for the global layers
        impl_->rope[1] =
            make_rope_table(hp, hp.n_rot_swa > 0 ? hp.n_rot_swa : hp.n_rot, hp.rope_theta_swa, hp.rope_freq_scale_swa,
                            hp.rope_freqs_global_only ? std::vector<float>{} : factors, n_ctx_);
    // Last, once nothing can throw (the destructor, which turns it off, does not run for a failed construction):
    // the target keeps what this drafter reads, its final normed states or an EAGLE-3 head's layers' inputs.
    if (mtp_of_) mtp_of_->keep_hidden(true, model_->eagle3() ? eagle3_target_layers(*model_) : std::vector<int>{});
    // A split model's session: its twins on the other ranks (rank 0 opens them; there, this is one).
    if (model_->cluster() && !mtp_of_) {
        split_ = model_->cluster();
        if (split_->leader()) split_id_ = split_->open(params);
    }
}

Session::~Session() {
    if (mtp_of_) mtp_of_->keep_hidden(false);
    if (split_id_ >= 0) try {
            split_->close(split_id_);
        } catch (...) {  // a broken cluster: the twins are gone with it
        }
}

void Session::note_target_rows(int pos0, int n, int first_own) {
    if (pos0 <= target_rows_) target_rows_ = first_own >= 0 ? first_own : pos0 + n;
}

void Session::keep_hidden(bool on, std::vector<int> layers) {
    for (int l : layers) TD_ASSERT(l >= 0 && l < n_layers_);
    keep_hidden_ = on;
    hidden_layers_ = std::move(layers);
    hidden_from_ = n_past();
    hidden_.clear();
}

int Session::hidden_width() const { return model_->hparams().n_embd * std::max<int>(1, int(hidden_layers_.size())); }

const float* Session::hidden_row(int p) const {
    const size_t E = size_t(hidden_width());
    if (!keep_hidden_ || p < hidden_from_ || size_t(p - hidden_from_) >= hidden_.size() / E) return nullptr;
    return hidden_.data() + size_t(p - hidden_from_) * E;
}

void Session::release_hidden(int below) {
    const size_t E = size_t(hidden_width());
    const int to = std::min(below, hidden_from_ + int(hidden_.size() / E));
    if (to <= hidden_from_) return;
    hidden_.erase(hidden_.begin(), hidden_.begin() + std::ptrdiff_t(size_t(to - hidden_from_) * E));
    hidden_from_ = to;
}

size_t Session::kv_bytes() const { return impl_->kv.bytes(); }
size_t Session::state_bytes() const { return impl_->rec ? impl_->rec->floats() * sizeof(float) : 0; }
size_t Session::kv_bytes_seen(int pos) const {
    const HParams& hp = model_->hparams();
    size_t bytes = 0;
    for (int l = 0; l < n_layers_; l++) {
        const LayerWeights& L = model_->layer(layer0_ + l);
        if (L.recurrent) continue;
        const int c = L.kv_from >= 0 ? L.kv_from - layer0_ : l;  // a shared-KV layer reads its source's rows
        const size_t rows = size_t(L.swa ? pos + 1 - std::max(0, swa_first_visible(hp, pos)) : pos + 1);
        bytes += rows * (impl_->kv.row_bytes_k(c) + impl_->kv.row_bytes_v(c));
    }
    return bytes;
}
double Session::attention_seconds() const { return impl_->attn_s; }
TensorType Session::kv_type_k() const { return impl_->kv.type_k(); }
TensorType Session::kv_type_v() const { return impl_->kv.type_v(); }

const float* Session::logits(int i) const {
    TD_ASSERT(i >= 0 && i < n_logits_);
    return logits_.data() + size_t(i) * size_t(n_vocab());
}

// The window of a token at position n starts at n - n_swa + 1: a truncation to n may go on only if the rings still
// hold every position from there (or from swa_lost_, below which a shift or state file already took positions).
bool Session::can_truncate(int n) const {
    if (impl_->rec && n != n_past() && !impl_->rec->can_rewind(n)) return false;
    if (n == 0 || n == n_past() || swa_cap_ == 0) return true;
    const int window_start = std::max(0, n - model_->hparams().n_swa + 1);
    return n >= swa_lost_ && swa_from_ <= std::max(swa_lost_, window_start);
}

void Session::truncate(int n) {
    auto lk = split_lock(split_, split_id_);
    if (split_id_ >= 0 && n != n_past()) {
        check_truncate(n);
        split_->truncate(split_id_, n);
    }
    truncate_here(n);
}

void Session::check_truncate(int n) const {
    TD_ASSERT(n >= 0 && n <= n_past());
    if (impl_->rec && n != n_past() && !impl_->rec->can_rewind(n))
        throw Error(
            strprintf("cannot roll the recurrent state back to %d tokens: it keeps the last %d positions "
                      "and the checkpoints (--ctx-checkpoints) at the ends of earlier prompts",
                      n, impl_->rec->keep()));
    if (!can_truncate(n))
        throw Error(
            strprintf("cannot roll the cache back to %d tokens: its sliding-window layers keep %d positions "
                      "and no longer hold position %d (--swa-full keeps every position)",
                      n, swa_cap_, std::max(0, n - model_->hparams().n_swa + 1)));
}

void Session::truncate_here(int n) {
    check_truncate(n);
    if (impl_->rec && n != n_past()) impl_->rec->rewind(n);
    tokens_.resize(size_t(n));
    if (n == 0) swa_from_ = swa_lost_ = 0;
    if (own_pos_ >= n) own_pos_ = -1;  // the row whose output state it was is gone
    target_rows_ = std::min(target_rows_, n);
    if (keep_hidden_) {
        if (n < hidden_from_) hidden_from_ = n;
        hidden_.resize(std::min(hidden_.size(), size_t(n - hidden_from_) * size_t(hidden_width())));
    }
}

int Session::reuse_prefix(int keep) {
    TD_ASSERT(keep >= 0 && keep <= n_past());
    if (impl_->rec && keep != n_past()) keep = impl_->rec->latest_at_most(keep);
    truncate(can_truncate(keep) ? keep : 0);
    return n_past();
}

std::vector<int> Session::checkpoint_positions() const {
    return impl_->rec ? impl_->rec->checkpoint_positions() : std::vector<int>{};
}

void Session::shift(int n_keep, int n_discard) {
    TD_ASSERT(n_keep >= 0 && n_discard > 0 && n_keep + n_discard <= n_past() && n_discard < n_ctx_);
    if (impl_->rec)  // as llama.cpp: a recurrent state cannot forget the discarded tokens
        throw Error("context shift is not possible for a model with recurrent (Gated DeltaNet) layers");
    auto lk = split_lock(split_, split_id_);
    if (split_id_ >= 0) split_->shift(split_id_, n_keep, n_discard);
    const Model& model = *model_;
    const HParams& hp = model.hparams();
    const int n_after = n_past() - n_discard;
    // Rings: the new positions [swa_new, n_after) whose old positions are all still held (old = new below n_keep,
    // new + n_discard from n_keep); what lies below is lost to the sliding-window layers.
    const int swa_new = swa_from_ <= n_keep ? swa_from_ : std::max(n_keep, std::min(n_after, swa_from_ - n_discard));
    std::vector<float> sn, k, v;
    std::vector<float> ring_k, ring_v;  // a ring layer's moved rows, read before any is written (slots wrap)
    for (int l = 0; l < n_layers_; l++) {
        if (impl_->kv.capacity(l) == 0) continue;  // no rows of its own (gemma4's shared-KV layers)
        const LayerWeights& L = model.layer(layer0_ + l);
        const int half = L.n_rot / 2, kv_dim = impl_->kv.kv_dim(l);
        sn.resize(size_t(half));
        k.resize(size_t(kv_dim));
        v.resize(size_t(kv_dim));
        // Rotation by -n_discard: cos is even, sin odd (the table's own, so a layer keeps its base and scale).
        const RopeTable& rt = impl_->rope[L.swa ? 1 : 0];
        const float* cs = rt.cos_at(n_discard);
        for (int i = 0; i < half; i++) sn[size_t(i)] = -rt.sin_at(n_discard)[i];
        auto rotate = [&](float* kr) {
            if (!L.rope) return;  // a NoPE layer's keys carry no position
            for (int h = 0; h < L.n_head_kv; h++)
                rope_head(kr + size_t(h) * size_t(L.head_dim) + size_t(hp.rope_offset), cs, sn.data(), L.n_rot,
                          hp.rope_style, 1.0f);
        };
        if (impl_->kv.capacity(l) == n_ctx_) {  // rows are positions: moved down in order, each read before written
            for (int p = n_keep + n_discard; p < n_past(); p++) {
                impl_->kv.read(l, p, k.data(), v.data());
                rotate(k.data());
                impl_->kv.store(l, p - n_discard, k.data(), v.data());
            }
            continue;
        }
        const int first = std::max(n_keep, swa_new), n_moved = n_after - first;
        ring_k.resize(size_t(std::max(0, n_moved)) * size_t(kv_dim));
        ring_v.resize(ring_k.size());
        for (int q = first; q < n_after; q++) {
            float* kr = &ring_k[size_t(q - first) * size_t(kv_dim)];
            impl_->kv.read(l, q + n_discard, kr, &ring_v[size_t(q - first) * size_t(kv_dim)]);
            rotate(kr);
        }
        for (int q = first; q < n_after; q++)
            impl_->kv.store(l, q, &ring_k[size_t(q - first) * size_t(kv_dim)],
                            &ring_v[size_t(q - first) * size_t(kv_dim)]);
    }
    if (swa_cap_ > 0) swa_from_ = swa_lost_ = std::max(swa_lost_, swa_new);
    tokens_.erase(tokens_.begin() + n_keep, tokens_.begin() + n_keep + n_discard);
    if (keep_hidden_) keep_hidden(true, hidden_layers_);  // the kept rows' positions moved: start again from here
    target_rows_ = 0;
    own_pos_ = -1;
}

void Session::decode(const int32_t* tokens, int n, bool all_logits) {
    TD_ASSERT(n >= 1);
    auto lk = split_lock(split_, split_id_);
    check_decode(tokens, n, std::min(n, n_batch_));
    if (split_id_ >= 0) split_->decode(split_id_, tokens, n, all_logits);
    const int nv = n_vocab();
    n_logits_ = all_logits ? n : 1;
    logits_.resize(size_t(n_logits_) * size_t(nv));
    for (int s = 0; s < n; s += n_batch_) {
        int m = std::min(n_batch_, n - s);
        bool last_chunk = s + m == n;
        float* out = all_logits ? logits_.data() + size_t(s) * nv : (last_chunk ? logits_.data() : nullptr);
        std::vector<Segment> seg{{this, tokens + s, m, n_past(), all_logits, out, nullptr}};
        forward_segments(seg);
        tokens_.insert(tokens_.end(), tokens + s, tokens + s + m);
    }
}

std::vector<float> Session::embed(const int32_t* tokens, int n) {
    TD_ASSERT(n >= 1);
    auto lk = split_lock(split_, split_id_);
    check_decode(tokens, n, std::min(n, n_batch_));
    if (split_id_ >= 0) split_->embed(split_id_, tokens, n);
    const int E = model_->hparams().n_embd;
    std::vector<float> out(size_t(n) * size_t(E));
    n_logits_ = 0;
    for (int s = 0; s < n; s += n_batch_) {
        int m = std::min(n_batch_, n - s);
        std::vector<Segment> seg{{this, tokens + s, m, n_past(), false, nullptr, out.data() + size_t(s) * E}};
        forward_segments(seg);
        tokens_.insert(tokens_.end(), tokens + s, tokens + s + m);
    }
    return out;
}

void Session::check_tree(const int32_t* parents, int n) {
    if (!parents) return;
    if (parents[0] != -1) throw Error(strprintf("token tree: node 0 must be the root (parent -1), not %d", parents[0]));
    for (int i = 1; i < n; i++)
        if (parents[i] < 0 || parents[i] >= i)
            throw Error(strprintf("token tree: node %d has parent %d (must be in [0, %d))", i, parents[i], i));
}

void Session::decode_tree(const int32_t* tokens, const int32_t* parents, int n) {
    TD_ASSERT(n >= 1 && parents);
    decode_batch({DecodeRequest{this, tokens, n, true, parents}});
}

void Session::keep_path(int base, const std::vector<int32_t>& path) {
    TD_ASSERT(base >= 0 && !path.empty() && path[0] == 0 && base + int(path.size()) <= n_past());
    auto lk = split_lock(split_, split_id_);
    if (split_id_ >= 0) split_->keep_path(split_id_, base, path);
    if (impl_->rec) impl_->rec->keep_path(base, path);
    for (size_t j = 1; j < path.size(); j++) {
        const int from = base + path[j], to = base + int(j);
        TD_ASSERT(path[j] > path[j - 1] && from < n_past());
        if (from == to) continue;
        impl_->kv.copy_row(from, to);
        tokens_[size_t(to)] = tokens_[size_t(from)];
        if (const float* h = hidden_row(from); h && to >= hidden_from_) {
            const size_t E = size_t(hidden_width());
            std::copy_n(h, E, hidden_.data() + size_t(to - hidden_from_) * E);
        }
    }
    truncate_here(base + int(path.size()));
}

void Session::check_decode(const int32_t* tokens, int n, int pass) const {
    const int nv = n_vocab();
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            throw Error(strprintf("token id %d is out of range (vocab size %d)", tokens[i], nv));
    if (n_past() + n > n_ctx_)
        throw Error(
            strprintf("context overflow: %d tokens in the cache + %d new > context size %d", n_past(), n, n_ctx_));
    // A pass writes its rows before any attends: the first one's window must survive the ring's wrap.
    if (swa_cap_ > 0 && swa_cap_ < n_ctx_ && pass > swa_cap_ - model_->hparams().n_swa + 1)
        throw Error(
            strprintf("a pass of %d tokens is more than the sliding-window cache of %d positions takes (at "
                      "most %d; --swa-full keeps every position)",
                      pass, swa_cap_, swa_cap_ - model_->hparams().n_swa + 1));
}

void Session::decode_batch(const std::vector<DecodeRequest>& reqs) {
    if (reqs.empty()) return;
    Session& first = *reqs[0].session;
    auto lk = split_lock(first.split_, first.split_id_);
    std::vector<Segment> segs;
    for (const auto& r : reqs) {
        TD_ASSERT(r.session && r.n >= 1);
        TD_ASSERT(&r.session->model() == &reqs[0].session->model());
        TD_ASSERT(r.session->n_layers_ == reqs[0].session->n_layers_ && &r.session->pool_ == &reqs[0].session->pool_);
        TD_ASSERT(r.session->layer0_ == reqs[0].session->layer0_);
        TD_ASSERT(!r.parents || r.all_logits);
        r.session->check_decode(r.tokens, r.n, r.n);
        check_tree(r.parents, r.n);
        TD_ASSERT((r.session->split_id_ >= 0) == (first.split_id_ >= 0));
    }
    if (first.split_id_ >= 0) {
        std::vector<Cluster::BatchItem> items;
        for (const auto& r : reqs) items.push_back({r.session->split_id_, r.tokens, r.n, r.all_logits, r.parents});
        first.split_->decode_batch(items);
    }
    for (const auto& r : reqs) {
        Session& s = *r.session;
        s.n_logits_ = r.all_logits ? r.n : 1;
        s.logits_.resize(size_t(s.n_logits_) * size_t(s.n_vocab()));
        segs.push_back({&s, r.tokens, r.n, s.n_past(), r.all_logits, s.logits_.data(), nullptr, r.parents});
    }
    forward_segments(segs);
    for (const auto& r : reqs) r.session->tokens_.insert(r.session->tokens_.end(), r.tokens, r.tokens + r.n);
}

void Session::forward_segments(const std::vector<Segment>& segs) {
    // One forward pass over the rows of every segment: the weights are read once for all of them, each row
    // attends to its own session's cache.
    Session& S0 = *segs[0].s;
    if (S0.mtp_of_ && S0.model_->assistant()) return assistant_forward(segs);
    if (S0.mtp_of_ && S0.model_->eagle3()) return eagle3_forward(segs);
    const Model& model = *S0.model_;
    ThreadPool& pool = S0.pool_;
    const HParams& hp = model.hparams();
    const int E = hp.n_embd;
    int qd_max = 0, kvd_max = 0;  // the widest layer's q and k/v rows (gemma4's layers differ)
    for (int l = 0; l < S0.n_layers_; l++) {
        const LayerWeights& L = model.layer(S0.layer0_ + l);
        qd_max = std::max(qd_max, L.n_head * L.head_dim);
        kvd_max = std::max(kvd_max, L.n_head_kv * L.head_dim);
    }
    // A row's position (RoPE, attention window) and its cache slot: the same for a chain. In a token tree the
    // position is pos0 + depth and `tail` lists the slots of its root path (root first, itself last), the
    // ancestors it attends to beside the cached positions 0..pos0-1 (model/attention.h). Built once here.
    struct Row {
        Session* s;
        int pos;
        int slot;
        int pos0;
        std::vector<int32_t> tail;
    };
    std::vector<Row> rows;
    for (const auto& g : segs) {
        const size_t r0 = rows.size();
        for (int t = 0; t < g.n; t++) {
            Row r{g.s, g.pos0 + t, g.pos0 + t, g.pos0, {}};
            if (g.parents) {
                if (t > 0) {
                    const Row& parent = rows[r0 + size_t(g.parents[t])];
                    r.tail = parent.tail;
                    r.pos = parent.pos + 1;
                }
                r.tail.push_back(r.slot);
            }
            rows.push_back(std::move(r));
        }
    }
    const int n = int(rows.size());
    // Window-only caches: the rows this pass writes overwrite the ring's oldest (check_decode bounds the pass so
    // that every window of it survives).
    for (const auto& g : segs)
        if (g.s->swa_cap_ > 0) g.s->swa_from_ = std::max(g.s->swa_from_, g.pos0 + g.n - g.s->swa_cap_);
    // The attention rows of global layers ([0]) and sliding-window layers ([1], which see the last n_swa
    // positions, and none that a context shift took from their ring).
    std::vector<AttnRow> attn_rows[2];
    for (int w = 0; w < (hp.n_swa > 0 ? 2 : 1); w++)
        for (const Row& r : rows) {
            const int lo = w ? std::max({0, swa_first_visible(hp, r.pos), r.s->swa_lost_}) : 0;
            TD_ASSERT(!w || lo >= r.s->swa_from_);
            attn_rows[w].push_back({&r.s->impl_->kv, r.pos, lo, r.pos0, r.tail.empty() ? nullptr : r.tail.data()});
        }

    Impl& S = *S0.impl_;
    S.x.resize(size_t(n) * E);
    S.xn.resize(size_t(n) * E);
    S.q.resize(size_t(n) * qd_max);
    S.k.resize(size_t(n) * kvd_max);
    S.v.resize(size_t(n) * kvd_max);
    S.att.resize(size_t(n) * qd_max);
    S.rows_out.resize(size_t(n) * E);

    // Gated DeltaNet layers: each row's state before and after it (its session's, model/recurrent_state.h)
    std::vector<const float*> rec_in, lin;
    std::vector<float*> rec_out, lout;
    if (S0.impl_->rec) {
        std::vector<const float*> gi;
        std::vector<float*> go;
        for (const auto& g : segs) {
            g.s->impl_->rec->begin_pass(g.n, g.parents, g.all_logits, gi, go);
            rec_in.insert(rec_in.end(), gi.begin(), gi.end());
            rec_out.insert(rec_out.end(), go.begin(), go.end());
        }
        lin.resize(size_t(n));
        lout.resize(size_t(n));
    }

    const MtpWeights* mtp = S0.mtp_of_ ? model.mtp() : nullptr;
    const Weight& emb = mtp ? mtp->embd : model.tok_embd();
    // A split model (tandem/split.h). Layer split: this rank's layers; the rows come from the previous rank (not
    // rank 0) and go to the next after them. Tensor split: every layer on every rank, its attention and FFN outputs
    // summed over the ranks (`reduce`); every rank embeds, rank 0 alone computes logits.
    Cluster* const cl = S0.split_;
    Cluster* const tensor = cl && cl->tensor() ? cl : nullptr;
    const int l_lo = cl ? std::min(cl->first_layer(), S0.n_layers_) : 0;
    const int l_hi = cl ? std::min(cl->end_layer(), S0.n_layers_) : S0.n_layers_;
    auto reduce = [&](float* y) {
        if (tensor) tensor->all_reduce(y, size_t(n) * E);
    };
    if (cl && !cl->leader() && !tensor) {
        cl->recv_hidden(S.x.data(), size_t(n) * E);
    } else if (mtp) {
        // x = eh_proj [rmsnorm(embd(token)) * enorm, rmsnorm(h) * hnorm], h: the state at the row's position - 1
        S.mtp_in.resize(size_t(n) * 2 * E);
        int r = 0;
        for (const auto& g : segs) {
            int first_own = -1;
            for (int t = 0; t < g.n; t++, r++) {
                float* er = &S.mtp_in[size_t(r) * 2 * E];
                embedding_row(emb, g.tokens[t], er);
                rmsnorm(er, mtp->enorm.data(), er, E, hp.rms_eps);
                const int q = rows[size_t(r)].pos;
                const Session& s = *g.s;
                const float* h = q > 0 && q - 1 < s.mtp_of_->n_past() ? s.mtp_of_->hidden_row(q - 1) : nullptr;
                if (q > 0 && q - 1 >= s.mtp_of_->n_past() && first_own < 0) first_own = q;  // a drafted row
                if (!h && q > 0 && s.own_pos_ == q - 1) h = s.own_hidden_.data();
                if (h) rmsnorm(h, mtp->hnorm.data(), er + E, E, hp.rms_eps);
                else std::fill(er + E, er + 2 * E, 0.0f);
            }
            g.s->note_target_rows(g.pos0, g.n, first_own);
        }
        matmul(pool, view(mtp->eh_proj), S.mtp_in.data(), n, S.x.data());
    } else {
        int r = 0;
        for (const auto& g : segs)
            for (int t = 0; t < g.n; t++, r++) {
                float* xr = &S.x[size_t(r) * E];
                embedding_row(emb, g.tokens[t], xr);
                if (hp.embd_scale != 1.0f)
                    for (int i = 0; i < E; i++) xr[i] *= hp.embd_scale;
            }
        if (hp.n_embd_per_layer > 0) {  // gemma4's per-layer inputs, from the tokens and their embeddings
            std::vector<int32_t> toks;
            for (const auto& g : segs) toks.insert(toks.end(), g.tokens, g.tokens + g.n);
            per_layer_inputs(pool, model, toks.data(), S.x.data(), n, S.ple);
        }
    }

    // One attention layer over the pass's rows: the normed input `in` to S.rows_out (before the residual add).
    auto attention_layer = [&](int l, const LayerWeights& L, const float* in) {
        const int rope_set = L.swa ? 1 : 0;
        const int nh = L.n_head, hd = L.head_dim, nkv = L.n_head_kv, qd = nh * hd, kvd = nkv * hd;
        const bool own_kv = L.kv_from < 0;  // gemma4's shared-KV layers: queries only, over another layer's rows
        if (hp.mla) {  // the latent row is cached once, read as K and as V (S.v unused)
            mla_project(pool, hp, L, in, n, S.q.data(), S.k.data(), S.mla);
        } else if (!own_kv) {
            matmul(pool, view(L.wq), in, n, S.q.data());
        } else {
            const WeightView ws[3] = {view(L.wq), view(L.wk), view(L.wv)};
            if (hp.attn_gate) S.qg.resize(size_t(n) * 2 * qd);
            float* const ys[3] = {hp.attn_gate ? S.qg.data() : S.q.data(), S.k.data(), S.v.data()};
            matmul_shared_input(pool, ws, ys, 3, in, n);
            if (hp.attn_gate) {  // each head's query, then its gate
                S.gate.resize(size_t(n) * qd);
                for (size_t h = 0; h < size_t(n) * nh; h++) {
                    std::copy_n(&S.qg[h * 2 * hd], hd, &S.q[h * hd]);
                    std::copy_n(&S.qg[h * 2 * hd + hd], hd, &S.gate[h * hd]);
                }
            }
        }
        for (int t = 0; t < n; t++) {
            float* q = &S.q[size_t(t) * qd];
            float* k = &S.k[size_t(t) * kvd];
            float* v = &S.v[size_t(t) * kvd];
            if (hp.has_qkv_bias) {
                for (int i = 0; i < qd; i++) q[i] += L.bq[size_t(i)];
                for (int i = 0; i < kvd; i++) {
                    k[i] += L.bk[size_t(i)];
                    v[i] += L.bv[size_t(i)];
                }
            }
            if (hp.qk_norm_whole) {
                rmsnorm(q, L.q_norm.data(), q, qd, hp.rms_eps);
                rmsnorm(k, L.k_norm.data(), k, kvd, hp.rms_eps);
            } else if (hp.has_qk_norm) {
                for (int h = 0; h < nh; h++) rmsnorm(q + h * hd, L.q_norm.data(), q + h * hd, hd, hp.rms_eps);
                if (own_kv)
                    for (int h = 0; h < nkv; h++) rmsnorm(k + h * hd, L.k_norm.data(), k + h * hd, hd, hp.rms_eps);
            }
            if (hp.v_norm && own_kv)  // gemma4: each value head RMS-normed, no weight
                for (int h = 0; h < nkv; h++) rmsnorm(v + h * hd, nullptr, v + h * hd, hd, hp.rms_eps);
            if (L.rope) {
                const RopeTable& rt = rows[size_t(t)].s->impl_->rope[rope_set];
                const int pos = rows[size_t(t)].pos;
                const float* cs = rt.cos_at(pos);
                const float* sn = rt.sin_at(pos);
                const int ro = hp.rope_offset;  // MLA: the rotated part follows the latent one
                for (int h = 0; h < nh; h++) rope_head(q + h * hd + ro, cs, sn, L.n_rot, hp.rope_style, rt.mscale);
                if (own_kv)
                    for (int h = 0; h < nkv; h++) rope_head(k + h * hd + ro, cs, sn, L.n_rot, hp.rope_style, rt.mscale);
            }
            if (L.rope && hp.qk_l2_norm) {  // llama4: each head RMS-normed, no weight, after RoPE
                for (int h = 0; h < nh; h++) rmsnorm(q + h * hd, nullptr, q + h * hd, hd, hp.rms_eps);
                for (int h = 0; h < nkv; h++) rmsnorm(k + h * hd, nullptr, k + h * hd, hd, hp.rms_eps);
            }
            if (hp.attn_temp_scale != 0.0f && !(hp.attn_temp_nope_only && L.rope)) {
                // mistral3, llama4's NoPE layers: sharper attention beyond each span of positions
                const int pos = rows[size_t(t)].pos;
                const int span = hp.attn_temp_span > 0 ? hp.attn_temp_span : hp.n_ctx_train;
                const float f =
                    1.0f +
                    hp.attn_temp_scale * std::log(std::floor((float(pos) + hp.attn_temp_offset) / float(span)) + 1.0f);
                if (f != 1.0f)
                    for (int i = 0; i < qd; i++) q[i] *= f;
            }
            if (own_kv) rows[size_t(t)].s->impl_->kv.store(l, rows[size_t(t)].slot, k, v);
        }
        const int kv_layer = own_kv ? l : L.kv_from - S0.layer0_;
        const AttnShape shape{kv_layer, nh, nkv, hd, hp.q_scale, hp.has_attn_sinks ? L.sinks.data() : nullptr};
        const auto t_attn = std::chrono::steady_clock::now();
        attention_heads(pool, shape, attn_rows[L.swa ? 1 : 0], S.q.data(), S.att.data(),
                        {S.attn_scratch, S.heads_q, S.heads_o});
        S.attn_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_attn).count();
        if (hp.mla) {  // the heads' values from their latent outputs
            S.mla_v.resize(size_t(n) * nh * hp.mla_v);
            mla_values(pool, hp, L, S.att.data(), n, S.mla_v.data(), S.mla);
        }
        if (hp.attn_gate)
            for (size_t i = 0; i < size_t(n) * qd; i++) S.att[i] *= 1.0f / (1.0f + std::exp(-S.gate[i]));
        matmul(pool, view(L.wo), hp.mla ? S.mla_v.data() : S.att.data(), n, S.rows_out.data());
        reduce(S.rows_out.data());  // a tensor split's heads: before the bias and the norm, which are not sums
        for (int t = 0; t < n; t++) {
            float* a = &S.rows_out[size_t(t) * E];
            if (!L.bo.empty())
                for (int i = 0; i < E; i++) a[i] += L.bo[size_t(i)];
            if (hp.has_post_norms) rmsnorm(a, L.post_attn_norm.data(), a, E, hp.rms_eps);
        }
    };

    // Sessions that keep layers' inputs (an EAGLE-3 head's target: keep_hidden with layers): their rows' places
    std::vector<std::pair<const Segment*, int>> keeps;  // (segment, its first row in the pass)
    {
        int r0 = 0;
        for (const auto& g : segs) {
            Session& s = *g.s;
            if (s.keep_hidden_ && !s.hidden_layers_.empty() && g.pos0 >= s.hidden_from_) {
                s.hidden_.resize(size_t(g.pos0 + g.n - s.hidden_from_) * size_t(s.hidden_width()));
                keeps.push_back({&g, r0});
            }
            r0 += g.n;
        }
    }
    for (int l = l_lo; l < l_hi; l++) {  // l: the cache's layer; the model's is layer0_ + l (MTP: n_layer)
        const LayerWeights& L = model.layer(S0.layer0_ + l);
        for (const auto& [g, r0] : keeps) {  // the layer's input, its place among the kept layers
            const std::vector<int>& ls = g->s->hidden_layers_;
            for (size_t k = 0; k < ls.size(); k++)
                if (ls[k] == S0.layer0_ + l)
                    for (int t = 0; t < g->n; t++)
                        std::copy_n(
                            &S.x[size_t(r0 + t) * E], E,
                            &g->s->hidden_[size_t(g->pos0 + t - g->s->hidden_from_) * size_t(g->s->hidden_width()) +
                                           k * size_t(E)]);
        }
        // the attention's and the FFN's input: the normed rows, or the rows themselves (olmo2: no pre-norms)
        const float* in = hp.has_pre_norms ? S.xn.data() : S.x.data();
        if (hp.has_pre_norms)
            for (int t = 0; t < n; t++)
                rmsnorm(&S.x[size_t(t) * E], L.attn_norm.data(), &S.xn[size_t(t) * E], E, hp.rms_eps);
        if (L.recurrent) {
            for (int t = 0; t < n; t++) {
                lin[size_t(t)] = rec_in[size_t(t)] + S.rec_off[size_t(l)];
                lout[size_t(t)] = rec_out[size_t(t)] + S.rec_off[size_t(l)];
            }
            delta_net_layer(pool, hp, L, in, n, lin.data(), lout.data(), S.rows_out.data(), S.dn);
        } else {
            attention_layer(l, L, in);
        }
        add_residual(S.x.data(), S.rows_out.data(), size_t(n) * E, hp.residual_scale);

        if (hp.has_pre_norms) {
            const float* ffn_norm = L.ffn_norm.empty() ? L.post_attn_norm.data() : L.ffn_norm.data();
            for (int t = 0; t < n; t++) rmsnorm(&S.x[size_t(t) * E], ffn_norm, &S.xn[size_t(t) * E], E, hp.rms_eps);
        }
        if (L.moe() && L.w_gate.data)  // gemma4: a dense MLP beside the experts
            ffn_dense_and_experts(pool, hp, L, S.x.data(), in, n, S.rows_out.data(), S.ffn);
        else ffn_forward(pool, hp, L, in, n, S.rows_out.data(), S.ffn);
        reduce(S.rows_out.data());
        if (hp.has_post_norms)
            for (int t = 0; t < n; t++)
                rmsnorm(&S.rows_out[size_t(t) * E], L.post_ffn_norm.data(), &S.rows_out[size_t(t) * E], E, hp.rms_eps);
        add_residual(S.x.data(), S.rows_out.data(), size_t(n) * E, hp.residual_scale);
        if (hp.n_embd_per_layer > 0 && !mtp)
            per_layer_apply(pool, hp, L, S0.layer0_ + l, S.ple.data(), n, S.x.data(), S.ple_gate, S.ple_out);
        if (L.out_scale != 1.0f)
            for (size_t i = 0; i < size_t(n) * E; i++) S.x[i] *= L.out_scale;
    }

    if (tensor && !tensor->leader()) return;
    if (cl && !tensor) {  // on to the next rank; rank 0 goes on with the last rank's rows
        cl->send_hidden(S.x.data(), size_t(n) * E);
        if (!cl->leader()) return;
        cl->recv_hidden(S.x.data(), size_t(n) * E);
    }

    // The final normed hidden state (MTP: its head norm), kept where asked: every row for a session that keeps
    // them (an MTP draft's target), the last row of an MTP session's segment (its next pass's h).
    const std::vector<float>& final_norm = mtp ? mtp->head_norm : model.output_norm();
    {
        int r0 = 0;
        for (const auto& g : segs) {
            Session& s = *g.s;
            if (s.keep_hidden_ && s.hidden_layers_.empty() && g.pos0 >= s.hidden_from_) {
                s.hidden_.resize(size_t(g.pos0 + g.n - s.hidden_from_) * E);
                for (int t = 0; t < g.n; t++)
                    rmsnorm(&S.x[size_t(r0 + t) * E], final_norm.data(),
                            &s.hidden_[size_t(g.pos0 + t - s.hidden_from_) * E], E, hp.rms_eps);
            }
            if (mtp) {
                s.own_hidden_.resize(size_t(E));
                rmsnorm(&S.x[size_t(r0 + g.n - 1) * E], final_norm.data(), s.own_hidden_.data(), E, hp.rms_eps);
                s.own_pos_ = rows[size_t(r0 + g.n - 1)].pos;
            }
            r0 += g.n;
        }
    }

    // Logits of the rows asked for, all in one matmul, then handed to their segments.
    const Weight& out_w = mtp ? mtp->head : model.output();
    std::vector<float*> outs;
    int r0 = 0, n_out = 0;
    for (const auto& g : segs) {
        if (g.hidden_out)  // embeddings: the normed hidden state of every row (what the logits are computed from)
            for (int t = 0; t < g.n; t++)
                rmsnorm(&S.x[size_t(r0 + t) * E], final_norm.data(), g.hidden_out + size_t(t) * E, E, hp.rms_eps);
        if (g.logits_out) {
            const int first = g.all_logits ? 0 : g.n - 1;
            for (int t = first; t < g.n; t++, n_out++) {
                rmsnorm(&S.x[size_t(r0 + t) * E], final_norm.data(), &S.xn[size_t(n_out) * E], E, hp.rms_eps);
                outs.push_back(g.logits_out + size_t(t - first) * size_t(hp.n_vocab));
            }
        }
        r0 += g.n;
    }
    if (n_out == 0) return;
    auto finish_logits = [&](float* lg) {  // granite's logit scale, then the softcap
        if (hp.logit_scale != 1.0f)
            for (int i = 0; i < hp.n_vocab; i++) lg[i] /= hp.logit_scale;
        if (hp.logit_softcap > 0)
            for (int i = 0; i < hp.n_vocab; i++) lg[i] = hp.logit_softcap * std::tanh(lg[i] / hp.logit_softcap);
    };
    if (segs.size() == 1) {
        matmul(pool, view(out_w), S.xn.data(), n_out, outs[0]);  // rows are contiguous already
        for (int i = 0; i < n_out; i++) finish_logits(outs[0] + size_t(i) * size_t(hp.n_vocab));
        return;
    }
    S.logits_tmp.resize(size_t(n_out) * size_t(hp.n_vocab));
    matmul(pool, view(out_w), S.xn.data(), n_out, S.logits_tmp.data());
    for (int i = 0; i < n_out; i++) {
        std::copy_n(S.logits_tmp.data() + size_t(i) * hp.n_vocab, hp.n_vocab, outs[size_t(i)]);
        finish_logits(outs[size_t(i)]);
    }
}

}  // namespace tandem
