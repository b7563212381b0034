// The decoder forward pass over a batch of tokens, shared by every architecture's trunk and MTP block (model.h lists
// the features; the EAGLE-3 head and the Gemma 4 assistant have passes of their own, eagle3.cpp and assistant.cpp).
// It runs on the session's backend (backend/backend.h), the CPU's or a GPU's, as the same code (a model split between
// the CPU and GPUs, or over GPUs: each stage's layers on its backend, model/session_impl.h Stage): every step is an op
// on tensors of that backend (model/pass_tensors.h: the model's weights as the backend holds them, the pass's
// scratch arrays in its buffers); the host reads back only the logits and the rows a drafter or a split model's
// next rank or stage needs (and a kept layer's input for an EAGLE-3 head).
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

#include "model/assistant.h"
#include "model/eagle3.h"
#include "model/ffn.h"
#include "model/pass_tensors.h"
#include "model/mla.h"
#include "model/per_layer_embd.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/split.h"

namespace tandem {

void Session::forward_segments(const std::vector<Segment>& segs) {
    // One forward pass over the rows of every segment: the weights are read once for all of them, each row
    // attends to its own session's cache.
    Session& S0 = *segs[0].s;
    if (S0.drafter_of_ && S0.model_->assistant()) return assistant_forward(segs);
    if (S0.drafter_of_ && S0.model_->eagle3()) return eagle3_forward(segs);
    const Model& model = *S0.model_;
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
    // ancestors it attends to beside the cached positions 0..pos0-1 (backend/cpu/attention.h). Built once here.
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
    // Each row's segment, position and cache slot, and the first position it sees in global layers ([0]) and in
    // sliding-window layers ([1], which see the last n_swa positions, and none that a context shift took from
    // their ring); a tree node's ancestors' slots.
    std::vector<int> row_seg, row_pos, row_slot, row_lo[2];
    std::vector<const int32_t*> row_tail;
    bool any_tree = false;
    for (size_t g = 0, r = 0; g < segs.size(); g++)
        for (int t = 0; t < segs[g].n; t++, r++) {
            const Row& row = rows[r];
            row_seg.push_back(int(g));
            row_pos.push_back(row.pos);
            row_slot.push_back(row.slot);
            row_tail.push_back(row.tail.empty() ? nullptr : row.tail.data());
            any_tree |= !row.tail.empty();
            row_lo[0].push_back(0);
            if (hp.n_swa > 0) {
                const int lo = std::max({0, swa_first_visible(hp, row.pos), row.s->swa_lost_});
                TD_ASSERT(lo >= row.s->swa_from_);
                row_lo[1].push_back(lo);
            }
        }

    Impl& S = *S0.impl_;
    backend::Backend& be = *S.be;
    const ModelTensors M = S.tensors();
    PassScratch& P = S.pass;
    const backend::Tensor x = P.x.rows(be, n, E), xn = P.xn.rows(be, n, E), out_rows = P.rows_out.rows(be, n, E);
    for (Scratch* a : {&P.q, &P.att}) a->rows(be, n, qd_max);  // sized for the widest layer before recording
    for (Scratch* a : {&P.k, &P.v}) a->rows(be, n, kvd_max);
    // A split model (model/session_impl.h Stage): the first stage embeds the tokens; each runs its cache layers on
    // its own backend, weights, scratch and RoPE tables, then hands the rows to the next, the last being the
    // session's backend, which runs the rest and the output. Each stage runs the same layer code on its own tensors.
    Stage* const first = S.stages.empty() ? nullptr : S.stages.front().get();
    backend::Backend& be_in = first ? *first->be : be;  // the embedding's stage
    const ModelTensors M_in = first ? first->tensors() : M;
    const backend::Tensor x_in = first ? first->pass.x.rows(be_in, n, E) : x;
    for (auto& st : S.stages) {
        for (Scratch* a : {&st->pass.q, &st->pass.att}) a->rows(*st->be, n, qd_max);
        for (Scratch* a : {&st->pass.k, &st->pass.v}) a->rows(*st->be, n, kvd_max);
    }

    // Gated DeltaNet layers: each row's state before and after it (its session's, model/recurrent_state.h)
    // (a split model: [part][row], one part per stage that runs recurrent layers)
    std::vector<std::vector<backend::Tensor>> rec_in, rec_out;
    std::vector<backend::Tensor> lin, lout;
    if (S0.impl_->rec) {
        const size_t parts = S0.impl_->rec->parts();
        rec_in.resize(parts);
        rec_out.resize(parts);
        std::vector<backend::Tensor> gi, go;
        for (size_t p = 0; p < parts; p++)
            for (const auto& g : segs) {
                g.s->impl_->rec->part(p).begin_pass(g.n, g.parents, g.all_logits, gi, go);
                rec_in[p].insert(rec_in[p].end(), gi.begin(), gi.end());
                rec_out[p].insert(rec_out[p].end(), go.begin(), go.end());
            }
        lin.resize(size_t(n));
        lout.resize(size_t(n));
    }

    const MtpWeights* mtp = S0.drafter_of_ ? model.mtp() : nullptr;
    const Weight& emb = mtp ? mtp->embd : model.tok_embd();
    // A split model (tandem/split.h). Layer split: this rank's layers; the rows come from the previous rank (not
    // rank 0) and go to the next after them. Tensor split: every layer on every rank, its attention and FFN outputs
    // summed over the ranks (`reduce`); every rank embeds, rank 0 alone computes logits. The rows travel through
    // host memory (S.xfer).
    Cluster* const cl = S0.split_;
    Cluster* const tensor = cl && cl->tensor() ? cl : nullptr;
    const int l_lo = cl ? std::min(cl->first_layer(), S0.n_layers_) : 0;
    const int l_hi = cl ? std::min(cl->end_layer(), S0.n_layers_) : S0.n_layers_;
    S.xfer.resize(size_t(n) * E);
    auto reduce = [&](const backend::Tensor& y) {
        if (!tensor) return;
        be.read(y, S.xfer.data());
        tensor->all_reduce(S.xfer.data(), size_t(n) * E);
        be.write(y, S.xfer.data());
    };
    if (cl && !cl->leader() && !tensor) {
        cl->recv_hidden(S.xfer.data(), size_t(n) * E);
        be.write(x, S.xfer.data());
    } else if (mtp) {
        // x = eh_proj [rmsnorm(embd(token)) * enorm, rmsnorm(h) * hnorm], h: the state at the row's position - 1
        const backend::Tensor in = P.mtp_in.rows(be, n, 2 * E), er = in.cols_at(0, E);
        std::vector<int32_t> toks;
        for (const auto& g : segs) toks.insert(toks.end(), g.tokens, g.tokens + g.n);
        be.get_rows(M.weight(emb), toks.data(), n, er);
        be.rms_norm(er, M.vec(mtp->enorm), E, hp.rms_eps, er);
        const std::vector<float> zeros(size_t(E), 0.0f);
        int r = 0;
        for (const auto& g : segs) {
            int first_own = -1;
            for (int t = 0; t < g.n; t++, r++) {  // h: the target's row or the draft's own (host memory)
                const int q = rows[size_t(r)].pos;
                const Session& s = *g.s;
                const float* h = q > 0 && q - 1 < s.drafter_of_->n_past() ? s.drafter_of_->hidden_row(q - 1) : nullptr;
                if (q > 0 && q - 1 >= s.drafter_of_->n_past() && first_own < 0) first_own = q;  // a drafted row
                if (!h && q > 0 && s.own_pos_ == q - 1) h = s.own_hidden_.data();
                const backend::Tensor hr = in.rows_at(r, 1).cols_at(E, E);
                be.write(hr, h ? h : zeros.data());
                if (h) be.rms_norm(hr, M.vec(mtp->hnorm), E, hp.rms_eps, hr);
            }
            g.s->note_target_rows(g.pos0, g.n, first_own);
        }
        be.matmul(M.weight(mtp->eh_proj), in, x);
    } else {
        std::vector<int32_t> toks;
        for (const auto& g : segs) toks.insert(toks.end(), g.tokens, g.tokens + g.n);
        be_in.get_rows(M_in.weight(emb), toks.data(), n, x_in);
        if (hp.embd_scale != 1.0f) be_in.scale(hp.embd_scale, x_in);
        if (hp.n_embd_per_layer > 0)  // gemma4's per-layer inputs, from the tokens and their embeddings
            per_layer_inputs(be_in, M_in, model, toks.data(), x_in, (first ? first->pass : P).ple);
    }

    // Drafter tap: sessions that keep layers' inputs (an EAGLE-3 head's target: keep_hidden with layers) get each
    // kept layer's input rows (the head reads them as its g), copied into their hidden rows before the layer runs.
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
    // The layers [from, to) of the pass on one stage: its backend, its view of the weights, its scratch, its RoPE
    // tables (stage: the index of a split model's stage before the last; -1: the session's own), the rows x and their
    // normed copy and output.
    auto run_layers = [&](backend::Backend& be, const ModelTensors& M, PassScratch& P, int stage,
                          const backend::Tensor& x, const backend::Tensor& xn, const backend::Tensor& out_rows,
                          int from, int to) {
        // One attention layer over the pass's rows: the normed input `in` to out_rows (before the residual add).
        std::vector<backend::AttnSegment> aseg;  // each segment's cache rows of the layer (reused by every layer)
        aseg.reserve(segs.size());
        auto attention_layer = [&](int l, const LayerWeights& L, const backend::Tensor& in) {
            const int wset = L.swa ? 1 : 0;  // the layer's RoPE table and window
            const int nh = L.n_head, hd = L.head_dim, nkv = L.n_head_kv, qd = nh * hd, kvd = nkv * hd;
            const bool own_kv = L.kv_from < 0;  // gemma4's shared-KV layers: queries only, over another layer's rows
            const backend::Tensor q = P.q.rows(be, n, qd), k = P.k.rows(be, n, kvd), v = P.v.rows(be, n, kvd),
                                  att = P.att.rows(be, n, qd);
            backend::Tensor gate;  // qwen35's gated attention: each head's gate
            if (hp.mla) {  // the latent row is cached once, read as K and as V (v unused)
                mla_project(be, M, hp, L, in, q, k, P.mla);
            } else if (!own_kv) {
                be.matmul(M.weight(L.wq), in, q);
            } else {
                const backend::Tensor qg = hp.attn_gate ? P.qg.rows(be, n, 2 * qd) : q;
                const backend::Tensor ws[3] = {M.weight(L.wq), M.weight(L.wk), M.weight(L.wv)};
                const backend::Tensor ys[3] = {qg, k, v};
                be.matmul_multi(ws, ys, 3, in);
                if (hp.attn_gate) {  // each head's query, then its gate
                    gate = P.gate.rows(be, n, qd);
                    const size_t stride = 2 * size_t(hd) * sizeof(float);
                    const backend::Tensor heads{qg.buf, qg.offset, TensorType::F32, int64_t(n) * nh, hd, stride};
                    be.copy(heads, P.q.rows(be, int64_t(n) * nh, hd));
                    be.copy(heads.cols_at(hd, hd), P.gate.rows(be, int64_t(n) * nh, hd));
                }
            }
            if (hp.has_qkv_bias) {
                be.add_row(M.vec(L.bq), q);
                be.add_row(M.vec(L.bk), k);
                be.add_row(M.vec(L.bv), v);
            }
            if (hp.qk_norm_whole) {
                be.rms_norm(q, M.vec(L.q_norm), qd, hp.rms_eps, q);
                be.rms_norm(k, M.vec(L.k_norm), kvd, hp.rms_eps, k);
            } else if (hp.has_qk_norm) {
                be.rms_norm(q, M.vec(L.q_norm), hd, hp.rms_eps, q);
                if (own_kv) be.rms_norm(k, M.vec(L.k_norm), hd, hp.rms_eps, k);
            }
            if (hp.v_norm && own_kv) be.rms_norm(v, backend::Tensor{}, hd, hp.rms_eps, v);  // gemma4: no weight
            int r0 = 0;
            for (const auto& g : segs) {  // RoPE at each session's table (phi3: its context picks the factors)
                if (L.rope) {
                    const Session::Impl& gi = *g.s->impl_;
                    backend::RopeArgs ra = (stage >= 0 ? gi.stages[size_t(stage)]->rope : gi.rope)[wset].args(
                        nh, hd, L.n_rot, hp.rope_offset, hp.rope_style);
                    be.rope(ra, &row_pos[size_t(r0)], q.rows_at(r0, g.n));
                    if (own_kv) {
                        ra.n_head = nkv;
                        be.rope(ra, &row_pos[size_t(r0)], k.rows_at(r0, g.n));
                    }
                }
                r0 += g.n;
            }
            if (L.rope && hp.qk_l2_norm) {  // llama4: each head RMS-normed, no weight, after RoPE
                be.rms_norm(q, backend::Tensor{}, hd, hp.rms_eps, q);
                be.rms_norm(k, backend::Tensor{}, hd, hp.rms_eps, k);
            }
            if (hp.attn_temp_scale != 0.0f && !(hp.attn_temp_nope_only && L.rope))
                for (int t = 0; t < n; t++) {  // mistral3, llama4's NoPE layers: sharper attention beyond each span
                    const int span = hp.attn_temp_span > 0 ? hp.attn_temp_span : hp.n_ctx_train;
                    const float f =
                        1.0f +
                        hp.attn_temp_scale *
                            std::log(std::floor((float(row_pos[size_t(t)]) + hp.attn_temp_offset) / float(span)) +
                                     1.0f);
                    if (f != 1.0f) be.scale(f, q.rows_at(t, 1));
                }
            const int kv_layer = own_kv ? l : L.kv_from - S0.layer0_;
            aseg.clear();
            r0 = 0;
            for (const auto& g : segs) {
                KvCache& kv = g.s->impl_->kv;
                if (own_kv) kv.store_rows(l, k.rows_at(r0, g.n), v.rows_at(r0, g.n), &row_slot[size_t(r0)]);
                aseg.push_back({kv.k_rows(kv_layer), kv.v_rows(kv_layer), g.pos0});
                r0 += g.n;
            }
            const backend::AttnArgs aa{nh,
                                       nkv,
                                       hd,
                                       hp.q_scale,
                                       hp.has_attn_sinks ? M.vec(L.sinks) : backend::Tensor{},
                                       aseg.data(),
                                       int(aseg.size()),
                                       row_seg.data(),
                                       row_pos.data(),
                                       row_lo[wset].data(),
                                       any_tree ? row_tail.data() : nullptr};
            const auto t_attn = std::chrono::steady_clock::now();
            be.attention(aa, q, att);
            S.attn_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_attn).count();
            backend::Tensor wo_in = att;
            if (hp.mla) {  // the heads' values from their latent outputs
                wo_in = P.mla_v.rows(be, n, int64_t(nh) * hp.mla_v);
                mla_values(be, M, hp, L, att, wo_in, P.mla);
            }
            if (hp.attn_gate) {  // att * sigmoid(gate), into gate
                be.glu(backend::Glu::SIGMOID, gate, att);
                wo_in = gate;
            }
            be.matmul(M.weight(L.wo), wo_in, out_rows);
            reduce(out_rows);  // a tensor split's heads: before the bias and the norm, which are not sums
            if (!L.bo.empty()) be.add_row(M.vec(L.bo), out_rows);
            if (hp.has_post_norms) be.rms_norm(out_rows, M.vec(L.post_attn_norm), E, hp.rms_eps, out_rows);
        };

        auto tap_layer_input = [&](int model_layer) {
            for (const auto& [g, r0] : keeps) {
                const std::vector<int>& ls = g->s->hidden_layers_;
                for (size_t k = 0; k < ls.size(); k++)
                    if (ls[k] == model_layer) {  // its place among the kept layers: columns k E .. (k + 1) E of a row
                        be.read(x.rows_at(r0, g->n), S.xfer.data());
                        const size_t w = size_t(g->s->hidden_width());
                        float* dst = &g->s->hidden_[size_t(g->pos0 - g->s->hidden_from_) * w + k * size_t(E)];
                        for (int t = 0; t < g->n; t++) std::copy_n(&S.xfer[size_t(t) * E], E, dst + size_t(t) * w);
                    }
            }
        };
        for (int l = from; l < to; l++) {  // l: the cache's layer; the model's is layer0_ + l (MTP: n_layer)
            const LayerWeights& L = model.layer(S0.layer0_ + l);
            if (!keeps.empty()) tap_layer_input(S0.layer0_ + l);
            // the attention's and the FFN's input: the normed rows, or the rows themselves (olmo2: no pre-norms)
            const backend::Tensor& in = hp.has_pre_norms ? xn : x;
            if (hp.has_pre_norms) be.rms_norm(x, M.vec(L.attn_norm), E, hp.rms_eps, xn);
            if (L.recurrent) {
                const int64_t lf = int64_t(delta_net_layer_floats(hp));
                const size_t part = size_t(S.rec_part[size_t(l)]);
                for (int t = 0; t < n; t++) {  // the layer's part of each row's state
                    lin[size_t(t)] = rec_in[part][size_t(t)].cols_at(int64_t(S.rec_off[size_t(l)]), lf);
                    lout[size_t(t)] = rec_out[part][size_t(t)].cols_at(int64_t(S.rec_off[size_t(l)]), lf);
                }
                delta_net_layer(be, M, hp, L, in, lin.data(), lout.data(), out_rows, P.dn);
            } else {
                attention_layer(l, L, in);
            }
            be.add(out_rows, hp.residual_scale, x);

            if (hp.has_pre_norms)
                be.rms_norm(x, M.vec(L.ffn_norm.empty() ? L.post_attn_norm : L.ffn_norm), E, hp.rms_eps, xn);
            if (L.moe() && L.w_gate.data)  // gemma4: a dense MLP beside the experts
                ffn_dense_and_experts(be, M, hp, L, x, in, out_rows, P.ffn);
            else ffn_forward(be, M, hp, L, in, out_rows, P.ffn);
            reduce(out_rows);
            if (hp.has_post_norms) be.rms_norm(out_rows, M.vec(L.post_ffn_norm), E, hp.rms_eps, out_rows);
            be.add(out_rows, hp.residual_scale, x);
            if (hp.n_embd_per_layer > 0 && !mtp) per_layer_apply(be, M, hp, L, S0.layer0_ + l, x, P.ple);
            if (L.out_scale != 1.0f) be.scale(L.out_scale, x);
        }
    };
    {  // each stage's layers, then its rows handed to the next stage
        int from = l_lo;
        backend::Backend* prev = nullptr;
        backend::Tensor prev_x;
        for (size_t i = 0; i <= S.stages.size(); i++) {
            Stage* const st = i < S.stages.size() ? S.stages[i].get() : nullptr;
            backend::Backend& sb = st ? *st->be : be;
            PassScratch& SP = st ? st->pass : P;
            const backend::Tensor sx = st ? (i == 0 ? x_in : SP.x.rows(sb, n, E)) : x;
            if (prev) {
                prev->read(prev_x, S.xfer.data());
                sb.write(sx, S.xfer.data());
            }
            const int to = st ? std::min(l_hi, std::max(from, st->end)) : l_hi;
            run_layers(sb, st ? st->tensors() : M, SP, st ? int(i) : -1, sx, st ? SP.xn.rows(sb, n, E) : xn,
                       st ? SP.rows_out.rows(sb, n, E) : out_rows, from, to);
            from = to;
            prev = &sb;
            prev_x = sx;
        }
    }

    if (tensor && !tensor->leader()) return be.sync();
    if (cl && !tensor) {  // on to the next rank; rank 0 goes on with the last rank's rows
        be.read(x, S.xfer.data());
        cl->send_hidden(S.xfer.data(), size_t(n) * E);
        if (!cl->leader()) return;
        cl->recv_hidden(S.xfer.data(), size_t(n) * E);
        be.write(x, S.xfer.data());
    }

    // The final normed hidden state (MTP: its head norm), kept where asked: every row for a session that keeps
    // them (an MTP draft's target), the last row of an MTP session's segment (its next pass's h); read back into
    // the sessions' host rows, which their drafters read.
    const std::vector<float>& final_norm = mtp ? mtp->head_norm : model.output_norm();
    auto normed_to_host = [&](int r0, int rows_n, float* dst) {
        const backend::Tensor h = P.hidden.rows(be, rows_n, E);
        be.rms_norm(x.rows_at(r0, rows_n), M.vec(final_norm), E, hp.rms_eps, h);
        be.read(h, dst);
    };
    {
        int r0 = 0;
        for (const auto& g : segs) {
            Session& s = *g.s;
            if (s.keep_hidden_ && s.hidden_layers_.empty() && g.pos0 >= s.hidden_from_) {
                s.hidden_.resize(size_t(g.pos0 + g.n - s.hidden_from_) * E);
                normed_to_host(r0, g.n, &s.hidden_[size_t(g.pos0 - s.hidden_from_) * E]);
            }
            if (mtp) {
                s.own_hidden_.resize(size_t(E));
                normed_to_host(r0 + g.n - 1, 1, s.own_hidden_.data());
                s.own_pos_ = rows[size_t(r0 + g.n - 1)].pos;
            }
            if (g.hidden_out)  // embeddings: the normed hidden state of every row (what the logits are computed from)
                normed_to_host(r0, g.n, g.hidden_out);
            r0 += g.n;
        }
    }

    // Logits of the rows asked for, all in one matmul, then read back into their segments.
    const Weight& out_w = mtp ? mtp->head : model.output();
    int r0 = 0, n_out = 0;
    for (const auto& g : segs) {
        if (g.logits_out) {
            const int first = g.all_logits ? 0 : g.n - 1;
            be.rms_norm(x.rows_at(r0 + first, g.n - first), M.vec(final_norm), E, hp.rms_eps,
                        xn.rows_at(n_out, g.n - first));
            n_out += g.n - first;
        }
        r0 += g.n;
    }
    if (n_out == 0) return be.sync();
    // one matmul for every row asked; granite's logit scale, then the softcap
    // (on the CPU, one segment's logits go straight into its rows: no copy, no scratch of n_out x n_vocab)
    const bool direct = be.host_memory() && segs.size() == 1;
    const backend::Tensor logits = direct ? HostTensors{be.host_memory()}.rows(segs[0].logits_out, n_out, hp.n_vocab)
                                          : P.logits.rows(be, n_out, hp.n_vocab);
    be.matmul(M.weight(out_w), xn.rows_at(0, n_out), logits);
    if (hp.logit_scale != 1.0f || hp.logit_softcap > 0) be.softcap(hp.logit_scale, hp.logit_softcap, logits);
    if (direct) return;
    n_out = 0;
    for (const auto& g : segs)
        if (g.logits_out) {
            const int rows_n = g.all_logits ? g.n : 1;
            be.read(logits.rows_at(n_out, rows_n), g.logits_out);
            n_out += rows_n;
        }
}

}  // namespace tandem
