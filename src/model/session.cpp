// Session: a model's per-sequence state (tandem/session.h) and its bookkeeping: construction (cache layers,
// recurrent state, RoPE tables, a drafter's target, a split model's twins), truncation and prefix reuse, the
// context shift, kept paths of token trees, the states a drafter reads, and the decode entry points that cut
// their tokens into passes of the forward pass (model/forward.cpp). State files are model/session_state.cpp.
#include <algorithm>
#include <deque>

#include "model/assistant.h"
#include "model/eagle3.h"
#include "model/host_tensors.h"
#include "model/rope.h"
#include "model/session_impl.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/split.h"
#include "tandem/thread_pool.h"

namespace tandem {

namespace {

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
    if (model_->assistant() && !params.drafter_of)
        throw Error(model_->path() +
                    ": a gemma4-assistant drafts beside its gemma4 target only (as -md), from the target's cache");
    if (model_->eagle3() && !params.drafter_of)
        throw Error(model_->path() + ": an eagle3 head drafts beside its target only (as -md), from its hidden states");
    if (params.drafter_of && params.drafter_of->keep_hidden_)
        throw Error(
            "the target already keeps its states for another drafter (one MTP, assistant or EAGLE-3 "
            "session per target)");
    if (params.drafter_of && params.drafter_of->split_ && (model_->assistant() || model_->eagle3()))
        throw Error(model_->path() +
                    ": this drafter reads its target's cache or inner layers, which a split target keeps on other "
                    "ranks: use a draft model, an MTP block, n-grams or the suffix cache with --split-mode layer");
    if (params.drafter_of) {  // a drafter reading its target's states: at the target's positions, never windowed apart
        drafter_of_ = params.drafter_of;
        n_ctx_ = drafter_of_->n_ctx();
        swa_cap_ = 0;
    }
    if (drafter_of_ && model_->eagle3()) {  // an EAGLE-3 head: its one layer
        check_eagle3_target(*model_, *drafter_of_);
        layers = kv_layers(*model_, params, n_ctx_);
    } else if (drafter_of_ && !model_->assistant()) {  // an MTP draft session: the one MTP layer
        if (!model_->mtp())
            throw Error(model_->path() + ": the model has no multi-token-prediction block (--spec-type mtp)");
        if (&drafter_of_->model() != model_.get() || drafter_of_->is_drafter())
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
    if (params.gpu) {
        if (&params.gpu->model() != model_.get())
            throw Error(model_->path() + ": SessionParams::gpu is another model's placement");
        if (const std::string why = gpu_unsupported(*model_); !why.empty())
            throw Error(model_->path() + ": not on a GPU: " + why);
    }
    if (params.gpu) {  // one buffer of keys and one of values per part: each within what a GPU binding holds (a
        // split model's: each GPU's layers only)
        size_t k = 0;
        for (const GpuModel::Part& p : params.gpu->parts()) {
            const int lo = std::clamp(p.span.first - layer0_, 0, int(layers.size()));
            const int hi = p.span.last ? int(layers.size()) : std::clamp(p.span.end - layer0_, 0, int(layers.size()));
            size_t part = 0;
            for (int i = lo; i < hi; i++)
                part += size_t(layers[size_t(i)].rows) * row_bytes(params.type_k, layers[size_t(i)].kv_dim);
            k = std::max(k, part);
        }
        if (k > kMaxTensorBytes)
            throw Error(
                strprintf("%s: the KV cache's keys on the GPU would take %.2f GiB (a GPU binding holds at "
                          "most 4 GiB): a smaller context (-c %d or less) or a smaller cache type (-ctk)",
                          model_->path().c_str(), k / 1073741824.0,
                          int(double(n_ctx_) * double(kMaxTensorBytes) / double(k)) / 256 * 256));
    }
    impl_ = std::make_unique<Impl>(pool_, params.gpu, n_ctx_, layers, params.type_k, params.type_v, hp.mla, layer0_);
    // a model (or cache type) the session's backends cannot run is refused here, by name, before any pass
    if (!params.gpu) {
        if (const std::string why = backend::unsupported(*impl_->be, *model_, params.type_k, params.type_v);
            !why.empty())
            throw Error(model_->path() + ": " + why);
    } else {
        for (const GpuModel::Part& p : params.gpu->parts())
            if (const std::string why = backend::unsupported(*p.be, *model_, params.type_k, params.type_v, p.span);
                !why.empty())
                throw Error(model_->path() + ": " + why);
    }
    if (model_->assistant() && drafter_of_->impl_->gpu)
        throw Error(model_->path() +
                    ": a gemma4-assistant reads its target's cache on the CPU: the target runs on a GPU (-ngl): "
                    "use -ngl 0 with this drafter");
    if (model_->assistant()) impl_->assist_kv = assistant_cache_layers(*model_, *drafter_of_);
    // the CPU's copies of what this session runs on the CPU, once it is not refused: every layer and the head, or a
    // split model's layers below the GPU's (none on a whole GPU)
    if (!params.gpu) model_->place_on_cpu(layer0_, layer0_ + n_layers_, true);
    else model_->place_on_cpu(layer0_, std::min(layer0_ + n_layers_, params.gpu->first_layer()), false);
    // Gated DeltaNet layers: their state, kept for the last recurrent_keep positions (model/recurrent_state.h)
    // (a split model: one part per stage that runs recurrent layers, on its backend, moved in lockstep)
    impl_->rec_off.assign(size_t(n_layers_), 0);
    impl_->rec_part.assign(size_t(n_layers_), -1);
    for (size_t st = 0, part_floats = 0; st <= impl_->stages.size(); st++, part_floats = 0) {
        for (int l = 0; l < n_layers_; l++)
            if (model_->layer(layer0_ + l).recurrent && impl_->stage_of(l) == st) {
                impl_->rec_off[size_t(l)] = part_floats;
                impl_->rec_part[size_t(l)] = impl_->rec ? int(impl_->rec->parts()) : 0;
                part_floats += delta_net_layer_floats(hp);
            }
        if (part_floats == 0) continue;
        if (!impl_->rec) impl_->rec = std::make_unique<RecurrentStates>();
        impl_->rec->add(impl_->stage_backend(st), part_floats, std::max(1, params.recurrent_keep),
                        std::max(0, params.ctx_checkpoints));
    }

    // RoPE tables: one for global layers, one for sliding-window layers when the model has them. phi3's
    // LongRoPE factors: the long ones when this context exceeds the original one (as llama.cpp chooses).
    const bool long_factors = hp.has_rope_long_short && n_ctx_ > (hp.n_ctx_orig > 0 ? hp.n_ctx_orig : hp.n_ctx_train);
    const auto& factors = long_factors ? model_->rope_freqs_long() : model_->rope_freqs();
    impl_->rope[0] = make_rope_table(hp, hp.n_rot, hp.rope_theta, hp.rope_freq_scale, factors, n_ctx_);
    if (hp.n_swa > 0)  // gemma4: its own rotated dims, and rope_freqs only for the global layers
        impl_->rope[1] =
            make_rope_table(hp, hp.n_rot_swa > 0 ? hp.n_rot_swa : hp.n_rot, hp.rope_theta_swa, hp.rope_freq_scale_swa,
                            hp.rope_freqs_global_only ? std::vector<float>{} : factors, n_ctx_);
    for (RopeTable& t : impl_->rope) t.place(*impl_->be);
    for (auto& st : impl_->stages)  // a split model's other stages: the same tables, on their backends
        for (int i = 0; i < 2; i++) {
            const RopeTable& src = impl_->rope[i];
            RopeTable& t = st->rope[i];
            t.half = src.half;
            t.mscale = src.mscale;
            const int64_t n_pos = int64_t(src.cos.size()) / std::max(1, src.half);
            if (backend::Buffer* host = st->be->host_memory()) {  // the CPU's: read in place
                const HostTensors H{host};
                t.cos_t = H.rows(src.cos.data(), n_pos, src.half);
                t.sin_t = H.rows(src.sin.data(), n_pos, src.half);
            } else {  // another GPU's: a copy in its memory (the host rows are not kept)
                t.cos = src.cos;
                t.sin = src.sin;
                t.place(*st->be);
                t.cos = {};
                t.sin = {};
            }
        }
    // Last, once nothing can throw (the destructor, which turns it off, does not run for a failed construction):
    // the target keeps what this drafter reads, its final normed states or an EAGLE-3 head's layers' inputs.
    if (drafter_of_)
        drafter_of_->keep_hidden(true, model_->eagle3() ? eagle3_target_layers(*model_) : std::vector<int>{});
    // A split model's session: its twins on the other ranks (rank 0 opens them; there, this is one).
    if (model_->cluster() && !drafter_of_) {
        split_ = model_->cluster();
        if (split_->leader()) split_id_ = split_->open(params);
    }
}

std::shared_ptr<const GpuModel> Session::gpu() const { return impl_->gpu; }

Session::~Session() {
    if (drafter_of_) drafter_of_->keep_hidden(false);
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
    // Each layer's moved rows on the backend that holds them, through its ops (no row leaves a GPU): the rows at the
    // old positions gathered as floats (get_rows), the keys rotated by -n_discard (rope at a one-row table: cos is
    // even, sin odd, the layer's own table, so a layer keeps its base and scale), stored at the new positions
    // (kv_store, as a pass stores its rows). A full layer moves [n_keep + n_discard, n_past) down in chunks, in
    // ascending order (a chunk's new rows lie below every later chunk's old ones); a ring layer (sliding window)
    // moves the new positions [first, n_after) whose old ones it still holds, in one chunk (its slots wrap: every
    // old row is read before any is written).
    constexpr int kChunk = 512;
    KvCache& kv = impl_->kv;
    auto moved = [&](int l, int* first) {  // the layer's first new position and the rows it moves
        *first = kv.capacity(l) == n_ctx_ ? n_keep : std::max(n_keep, swa_new);
        return std::max(0, n_after - *first);
    };
    // The scratch rows, sized before anything is recorded (a GPU's recorded ops hold their buffers until it syncs)
    int max_rows = 0, max_dim = 0, first = 0;
    for (int l = 0; l < n_layers_; l++)
        if (kv.capacity(l) > 0) {
            const int m = moved(l, &first);
            max_rows = std::max(max_rows, kv.capacity(l) == n_ctx_ ? std::min(m, kChunk) : m);
            max_dim = std::max(max_dim, kv.kv_dim(l));
        }
    if (max_rows == 0) max_rows = 1;
    for (size_t st = 0; st <= impl_->stages.size(); st++)
        for (Scratch* a : {&impl_->stage_pass(st).k, &impl_->stage_pass(st).v})
            a->rows(impl_->stage_backend(st), max_rows, max_dim);
    std::deque<std::vector<float>> host_rows;  // the rotations' tables (kept until the backends sync)
    std::vector<std::unique_ptr<backend::Buffer>> device_rows;
    auto table_row = [&](backend::Backend& be, std::vector<float> row) {
        host_rows.push_back(std::move(row));
        const std::vector<float>& r = host_rows.back();
        if (backend::Buffer* host = be.host_memory()) return HostTensors{host}.rows(r.data(), 1, int64_t(r.size()));
        device_rows.push_back(be.alloc(std::max<size_t>(r.size() * sizeof(float), 64)));
        const backend::Tensor t{device_rows.back().get(), 0, TensorType::F32, 1, int64_t(r.size()),
                                r.size() * sizeof(float)};
        be.write(t, r.data());
        return t;
    };
    std::vector<int32_t> src, dst;
    const std::vector<int> zeros(size_t(max_rows), 0);  // every row at the table's one row
    for (int l = 0; l < n_layers_; l++) {
        if (kv.capacity(l) == 0) continue;  // no rows of its own (gemma4's shared-KV layers)
        const LayerWeights& L = model.layer(layer0_ + l);
        const int half = L.n_rot / 2, kv_dim = kv.kv_dim(l), cap = kv.capacity(l);
        const int n_moved = moved(l, &first);
        if (n_moved == 0) continue;
        backend::Backend& be = kv.be_of(l);
        PassScratch& P = impl_->stage_pass(impl_->stage_of(l));
        backend::RopeArgs by{};
        if (L.rope) {
            const RopeTable& rt = impl_->rope[L.swa ? 1 : 0];
            std::vector<float> neg_sin(static_cast<size_t>(half));
            for (int i = 0; i < half; i++) neg_sin[size_t(i)] = -rt.sin_at(n_discard)[i];
            by = {L.n_head_kv,
                  L.head_dim,
                  L.n_rot,
                  hp.rope_offset,
                  hp.rope_style,
                  1.0f,
                  table_row(be, std::vector<float>(rt.cos_at(n_discard), rt.cos_at(n_discard) + half)),
                  table_row(be, std::move(neg_sin))};
        }
        const int chunk = cap == n_ctx_ ? kChunk : n_moved;
        for (int q0 = first; q0 < n_after; q0 += chunk) {
            const int m = std::min(chunk, n_after - q0);
            src.resize(size_t(m));
            dst.resize(size_t(m));
            for (int i = 0; i < m; i++) {
                src[size_t(i)] = (q0 + i + n_discard) % cap;
                dst[size_t(i)] = (q0 + i) % cap;
            }
            const backend::Tensor k = P.k.rows(be, m, kv_dim), v = P.v.rows(be, m, kv_dim);
            be.get_rows(kv.k_rows(l), src.data(), m, k);
            be.get_rows(kv.v_rows(l), src.data(), m, v);
            if (L.rope) be.rope(by, zeros.data(), k);  // (a NoPE layer's keys carry no position)
            kv.store_rows(l, k, v, dst.data());
        }
    }
    for (size_t st = 0; st <= impl_->stages.size(); st++) impl_->stage_backend(st).sync();
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
        if (r.session->impl_->gpu != reqs[0].session->impl_->gpu)  // one backend runs the pass: the same placement
            throw Error("decode_batch: sessions on different devices (a GPU placement and the CPU, or two placements)");
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

}  // namespace tandem
