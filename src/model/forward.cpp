// The Llama-family forward pass over a batch of tokens (llama and qwen2 share it; qwen2 adds q/k/v biases and
// NEOX-style RoPE).
//
// Per layer, for n tokens at positions pos0..pos0+n-1:
//   xn = rmsnorm(x) * attn_norm                          x, xn: (n, n_embd)
//   q = xn Wq^T (+bq), k = xn Wk^T (+bk), v = xn Wv^T (+bv)  q: (n, n_head*hd), k, v: (n, n_head_kv*hd)
//   rope(q, k); append k, v to the cache
//   att = causal softmax(q k^T / sqrt(hd)) v             att: (n, n_head*hd), grouped-query heads share k/v
//   x += att Wo^T
//   xn = rmsnorm(x) * ffn_norm
//   x += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T          hidden: (n, n_ff)
// then logits = rmsnorm(x) * output_norm  Wout^T           (n_out, n_vocab)
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "model/session_impl.h"
#include "quant/kernels.h"
#include "quant/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/thread_pool.h"

namespace tandem {


namespace {

WeightView view(const Weight& w) { return WeightView{w.data, w.type, w.cols, w.rows, w.row_stride, w.packed}; }

void rmsnorm(const float* x, const float* w, float* out, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += double(x[i]) * double(x[i]);
    float scale = 1.0f / std::sqrt(float(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

// Rotate one head vector in place using precomputed cos/sin for its position.
void rope_head(float* h, const float* cs, const float* sn, int n_rot, RopeStyle style) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        int a = style == RopeStyle::NORM ? 2 * i : i;
        int b = style == RopeStyle::NORM ? 2 * i + 1 : i + half;
        float x0 = h[a], x1 = h[b];
        h[a] = x0 * cs[i] - x1 * sn[i];
        h[b] = x0 * sn[i] + x1 * cs[i];
    }
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionParams& params, ThreadPool& pool)
    : model_(std::move(model)), pool_(pool) {
    const HParams& hp = model_->hparams();
    n_ctx_ = params.n_ctx > 0 ? params.n_ctx : std::min(hp.n_ctx_train, 4096);
    n_layers_ = params.n_layers > 0 ? std::min(params.n_layers, hp.n_layer) : hp.n_layer;
    n_batch_ = std::max(1, params.n_batch);
    impl_ = std::make_unique<Impl>(n_layers_, n_ctx_, hp.n_head_kv * hp.head_dim);

    // RoPE tables: theta_i(pos) = pos * freq_scale * base^(-2i/n_rot) / freq_factor_i.
    const int half = hp.n_rot / 2;
    impl_->rope_cos.resize(size_t(n_ctx_) * half);
    impl_->rope_sin.resize(size_t(n_ctx_) * half);
    const auto& ff = model_->rope_freqs();
    for (int i = 0; i < half; i++) {
        double inv = std::pow(double(hp.rope_theta), -2.0 * i / hp.n_rot);
        if (!ff.empty()) inv /= double(ff[size_t(i)]);
        for (int p = 0; p < n_ctx_; p++) {
            double th = double(p) * double(hp.rope_freq_scale) * inv;
            impl_->rope_cos[size_t(p) * half + i] = float(std::cos(th));
            impl_->rope_sin[size_t(p) * half + i] = float(std::sin(th));
        }
    }
}

Session::~Session() = default;

size_t Session::kv_bytes() const { return impl_->kv.bytes(); }

const float* Session::logits(int i) const {
    TD_ASSERT(i >= 0 && i < n_logits_);
    return logits_.data() + size_t(i) * size_t(n_vocab());
}

void Session::truncate(int n) {
    TD_ASSERT(n >= 0 && n <= n_past());
    tokens_.resize(size_t(n));
}

void Session::shift(int n_keep, int n_discard) {
    TD_ASSERT(n_keep >= 0 && n_discard > 0 && n_keep + n_discard <= n_past() && n_discard < n_ctx_);
    const HParams& hp = model_->hparams();
    const int half = hp.n_rot / 2, kv_dim = hp.n_head_kv * hp.head_dim;
    const float* cs = &impl_->rope_cos[size_t(n_discard) * size_t(half)];  // rotation by -n_discard: cos even, sin odd
    std::vector<float> sn(static_cast<size_t>(half)), k(static_cast<size_t>(kv_dim)), v(static_cast<size_t>(kv_dim));
    for (int i = 0; i < half; i++) sn[size_t(i)] = -impl_->rope_sin[size_t(n_discard) * size_t(half) + size_t(i)];
    for (int l = 0; l < n_layers_; l++) {
        for (int p = n_keep + n_discard; p < n_past(); p++) {
            const uint16_t* kh = impl_->kv.k(l, p);
            const uint16_t* vh = impl_->kv.v(l, p);
            for (int i = 0; i < kv_dim; i++) {
                k[size_t(i)] = fp16_to_f32(kh[i]);
                v[size_t(i)] = fp16_to_f32(vh[i]);
            }
            for (int h = 0; h < hp.n_head_kv; h++) rope_head(k.data() + size_t(h) * size_t(hp.head_dim), cs, sn.data(), hp.n_rot, hp.rope_style);
            impl_->kv.store(l, p - n_discard, k.data(), v.data());
        }
    }
    tokens_.erase(tokens_.begin() + n_keep, tokens_.begin() + n_keep + n_discard);
}

void Session::decode(const int32_t* tokens, int n, bool all_logits) {
    TD_ASSERT(n >= 1);
    check_decode(tokens, n);
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
    check_decode(tokens, n);
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

void Session::check_decode(const int32_t* tokens, int n) const {
    const int nv = n_vocab();
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv) throw Error(strprintf("token id %d is out of range (vocab size %d)", tokens[i], nv));
    if (n_past() + n > n_ctx_)
        throw Error(strprintf("context overflow: %d tokens in the cache + %d new > context size %d", n_past(), n, n_ctx_));
}

void Session::decode_batch(const std::vector<DecodeRequest>& reqs) {
    if (reqs.empty()) return;
    std::vector<Segment> segs;
    for (const auto& r : reqs) {
        TD_ASSERT(r.session && r.n >= 1);
        TD_ASSERT(&r.session->model() == &reqs[0].session->model());
        TD_ASSERT(r.session->n_layers_ == reqs[0].session->n_layers_ && &r.session->pool_ == &reqs[0].session->pool_);
        r.session->check_decode(r.tokens, r.n);
    }
    for (const auto& r : reqs) {
        Session& s = *r.session;
        s.n_logits_ = r.all_logits ? r.n : 1;
        s.logits_.resize(size_t(s.n_logits_) * size_t(s.n_vocab()));
        segs.push_back({&s, r.tokens, r.n, s.n_past(), r.all_logits, s.logits_.data(), nullptr});
    }
    forward_segments(segs);
    for (const auto& r : reqs) r.session->tokens_.insert(r.session->tokens_.end(), r.tokens, r.tokens + r.n);
}

void Session::forward_segments(const std::vector<Segment>& segs) {
    // One forward pass over the rows of every segment: the weights are read once for all of them, each row
    // attends to its own session's cache.
    Session& S0 = *segs[0].s;
    const Model& model = *S0.model_;
    ThreadPool& pool = S0.pool_;
    const HParams& hp = model.hparams();
    const int E = hp.n_embd, hd = hp.head_dim, nh = hp.n_head, nkv = hp.n_head_kv;
    const int qd = nh * hd, kvd = nkv * hd, F = hp.n_ff, half = hp.n_rot / 2;
    struct Row { Session* s; int pos; };
    std::vector<Row> rows;
    for (const auto& g : segs)
        for (int t = 0; t < g.n; t++) rows.push_back({g.s, g.pos0 + t});
    const int n = int(rows.size());
    int max_pos = 0;
    for (const auto& r : rows) max_pos = std::max(max_pos, r.pos + 1);

    Impl& S = *S0.impl_;
    S.x.resize(size_t(n) * E);
    S.xn.resize(size_t(n) * E);
    S.q.resize(size_t(n) * qd);
    S.k.resize(size_t(n) * kvd);
    S.v.resize(size_t(n) * kvd);
    S.att.resize(size_t(n) * qd);
    S.gate.resize(size_t(n) * F);
    S.up.resize(size_t(n) * F);
    S.rows_out.resize(size_t(n) * std::max(E, F));

    const Weight& emb = model.tok_embd();
    {
        int r = 0;
        for (const auto& g : segs)
            for (int t = 0; t < g.n; t++, r++) {
                if (emb.packed) dequantize_packed_row(emb.type, emb.packed, E, g.tokens[t], &S.x[size_t(r) * E]);
                else dequantize_row_ref(emb.type, emb.data + size_t(g.tokens[t]) * emb.row_stride, &S.x[size_t(r) * E], E);
            }
    }

    const float att_scale = 1.0f / std::sqrt(float(hd));
    for (int l = 0; l < S0.n_layers_; l++) {
        const LayerWeights& L = model.layer(l);
        for (int t = 0; t < n; t++) rmsnorm(&S.x[size_t(t) * E], L.attn_norm.data(), &S.xn[size_t(t) * E], E, hp.rms_eps);
        {
            const WeightView ws[3] = {view(L.wq), view(L.wk), view(L.wv)};
            float* const ys[3] = {S.q.data(), S.k.data(), S.v.data()};
            matmul_shared_input(pool, ws, ys, 3, S.xn.data(), n);
        }
        for (int t = 0; t < n; t++) {
            float* q = &S.q[size_t(t) * qd];
            float* k = &S.k[size_t(t) * kvd];
            float* v = &S.v[size_t(t) * kvd];
            if (hp.has_qkv_bias) {
                for (int i = 0; i < qd; i++) q[i] += L.bq[size_t(i)];
                for (int i = 0; i < kvd; i++) { k[i] += L.bk[size_t(i)]; v[i] += L.bv[size_t(i)]; }
            }
            const Impl& R = *rows[size_t(t)].s->impl_;
            const int pos = rows[size_t(t)].pos;
            const float* cs = &R.rope_cos[size_t(pos) * half];
            const float* sn = &R.rope_sin[size_t(pos) * half];
            for (int h = 0; h < nh; h++) rope_head(q + h * hd, cs, sn, hp.n_rot, hp.rope_style);
            for (int h = 0; h < nkv; h++) rope_head(k + h * hd, cs, sn, hp.n_rot, hp.rope_style);
            rows[size_t(t)].s->impl_->kv.store(l, pos, k, v);
        }
        // Attention, parallel over (row, key/value head) pairs: the `group` query heads of a KV head are adjacent
        // in q and att and share one pass over the cache. A row at position p sees positions 0..p of its session.
        const int group = nh / nkv;
        pool.parallel_for(size_t(n) * size_t(nkv), [&](size_t b, size_t e, int) {
            thread_local std::vector<float> scores;
            if (scores.size() < size_t(group) * size_t(max_pos)) scores.resize(size_t(group) * size_t(max_pos));
            for (size_t tg = b; tg < e; tg++) {
                const int t = int(tg / size_t(nkv)), g = int(tg % size_t(nkv));
                const KvCache& kv = rows[size_t(t)].s->impl_->kv;
                const size_t koff = size_t(g) * hd;
                const size_t qoff = size_t(t) * qd + size_t(g) * size_t(group) * hd;
                attention_heads(&S.q[qoff], group, kv.k(l, 0) + koff, kv.v(l, 0) + koff, size_t(kvd), rows[size_t(t)].pos + 1,
                                hd, att_scale, scores.data(), &S.att[qoff]);
            }
        });
        matmul(pool, view(L.wo), S.att.data(), n, S.rows_out.data());
        for (size_t i = 0; i < size_t(n) * E; i++) S.x[i] += S.rows_out[i];

        for (int t = 0; t < n; t++) rmsnorm(&S.x[size_t(t) * E], L.ffn_norm.data(), &S.xn[size_t(t) * E], E, hp.rms_eps);
        {
            const WeightView ws[2] = {view(L.w_gate), view(L.w_up)};
            float* const ys[2] = {S.gate.data(), S.up.data()};
            matmul_shared_input(pool, ws, ys, 2, S.xn.data(), n);
        }
        silu_mul(S.gate.data(), S.up.data(), int64_t(n) * F);
        matmul(pool, view(L.w_down), S.gate.data(), n, S.rows_out.data());
        for (size_t i = 0; i < size_t(n) * E; i++) S.x[i] += S.rows_out[i];
    }

    // Logits of the rows asked for, all in one matmul, then handed to their segments.
    std::vector<float*> outs;
    int r0 = 0, n_out = 0;
    for (const auto& g : segs) {
        if (g.hidden_out)  // embeddings: the normed hidden state of every row (what the logits are computed from)
            for (int t = 0; t < g.n; t++)
                rmsnorm(&S.x[size_t(r0 + t) * E], model.output_norm().data(), g.hidden_out + size_t(t) * E, E, hp.rms_eps);
        if (g.logits_out) {
            const int first = g.all_logits ? 0 : g.n - 1;
            for (int t = first; t < g.n; t++, n_out++) {
                rmsnorm(&S.x[size_t(r0 + t) * E], model.output_norm().data(), &S.xn[size_t(n_out) * E], E, hp.rms_eps);
                outs.push_back(g.logits_out + size_t(t - first) * size_t(hp.n_vocab));
            }
        }
        r0 += g.n;
    }
    if (n_out == 0) return;
    if (segs.size() == 1) {
        matmul(pool, view(model.output()), S.xn.data(), n_out, outs[0]);  // rows are contiguous already
        return;
    }
    S.logits_tmp.resize(size_t(n_out) * size_t(hp.n_vocab));
    matmul(pool, view(model.output()), S.xn.data(), n_out, S.logits_tmp.data());
    for (int i = 0; i < n_out; i++)
        std::copy_n(S.logits_tmp.data() + size_t(i) * hp.n_vocab, hp.n_vocab, outs[size_t(i)]);
}

}  // namespace tandem
