#include "model/kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "model/delta_net.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/session.h"

namespace tandem {

namespace {
// llama.cpp's -ctk / -ctv set (common/arg.cpp kv_cache_types), in its order.
constexpr TensorType kKvTypes[] = {TensorType::F32,    TensorType::F16,  TensorType::BF16,
                                   TensorType::Q8_0,   TensorType::Q4_0, TensorType::Q4_1,
                                   TensorType::IQ4_NL, TensorType::Q5_0, TensorType::Q5_1};
}  // namespace

bool kv_cache_type_supported(TensorType t) {
    for (TensorType k : kKvTypes)
        if (k == t) return true;
    return false;
}

const char* kv_cache_type_names() { return "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"; }

TensorType parse_kv_cache_type(const std::string& name, const char* flag) {
    const auto t = tensor_type_from_name(name);
    if (!t || !kv_cache_type_supported(*t))
        throw Error(strprintf("%s %s: not a KV cache type (supported: %s)", flag, name.c_str(), kv_cache_type_names()));
    return *t;
}

size_t kv_bytes_per_position(const Model& m, TensorType tk, TensorType tv) {
    SessionParams p;
    p.type_k = tk;
    p.type_v = tv;
    return kv_cache_bytes(m, p, 1);  // one row of every layer that keeps rows
}

int swa_cache_positions(const HParams& hp, int n_ctx, const SessionParams& p) {
    if (hp.n_swa <= 0) return 0;
    if (p.swa_full) return n_ctx;
    const int64_t ring = int64_t(hp.n_swa) + std::max(p.n_batch, kSwaSlack);
    return int(std::min<int64_t>(n_ctx, ring));
}

std::vector<KvLayer> kv_layers(const Model& m, const SessionParams& p, int n_ctx) {
    const HParams& hp = m.hparams();
    const int n_layer = p.n_layers > 0 ? std::min(p.n_layers, hp.n_layer) : hp.n_layer;
    const int swa = swa_cache_positions(hp, n_ctx, p);
    std::vector<KvLayer> layers;
    for (int l = 0; l < n_layer; l++) {
        const LayerWeights& L = m.layer(l);
        // no rows: a Gated DeltaNet layer, a shared-KV layer, a Gemma 4 assistant's (it reads its target's), a layer
        // of a split model that another rank runs
        const int rows = L.recurrent || L.kv_from >= 0 || m.assistant() || !m.holds_layer(l) ? 0 : L.swa ? swa : n_ctx;
        layers.push_back({rows, L.n_head_kv * L.head_dim, L.head_dim});
    }
    return layers;
}

size_t kv_cache_bytes(const Model& m, const SessionParams& p, int n_ctx) {
    const bool one_copy = m.hparams().mla;  // MLA: the latent row is key and value
    size_t bytes = 0;
    for (const KvLayer& l : kv_layers(m, p, n_ctx))
        bytes += size_t(l.rows) * (row_bytes(p.type_k, l.kv_dim) + (one_copy ? 0 : row_bytes(p.type_v, l.kv_dim)));
    return bytes;
}

ContextChoice choose_context(const Model& m, const SessionParams& p, size_t budget_bytes, int n_seq,
                             size_t extra_per_position) {
    const int train = m.hparams().n_ctx_train > 0 ? m.hparams().n_ctx_train : 4096;
    // a recurrent model's states, whatever the context: the rollback window, the current one and the checkpoints
    const size_t states = recurrent_state_floats(m, p.n_layers > 0 ? p.n_layers : m.hparams().n_layer) * sizeof(float) *
                          size_t(std::max(1, p.recurrent_keep) + 1 + std::max(0, p.ctx_checkpoints));
    auto bytes = [&](int n) {
        return (kv_cache_bytes(m, p, n) + states) * size_t(std::max(1, n_seq)) + size_t(n) * extra_per_position;
    };
    ContextChoice c{train, false, strprintf("context %d: the model's training context", train)};
    if (budget_bytes == 0) return c;
    // the CPU's copies of the weights, not made yet (Model::place_on_cpu), are taken from the budget as they were
    // when the loader made them
    const size_t unplaced = m.unplaced_cpu_bytes();
    budget_bytes = budget_bytes > unplaced ? budget_bytes - unplaced : 1;
    if (bytes(train) <= budget_bytes) return c;
    int lo = 1,
        hi = std::max(1, train / 256);  // the most 256-position steps that fit (the bytes grow with the context)
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (bytes(mid * 256) <= budget_bytes) lo = mid;
        else hi = mid - 1;
    }
    c.n_ctx = lo * 256;
    c.bounded = true;
    c.note = strprintf(
        "context %d of the model's %d: its KV caches%s would take %.1f GiB, the memory budget is %.1f GiB (use -c)",
        c.n_ctx, train, states > 0 ? " and recurrent states" : "", double(bytes(train)) / 1073741824.0,
        double(budget_bytes) / 1073741824.0);
    return c;
}

size_t memory_budget_bytes() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %zu kB", &kib) == 1) break;
    std::fclose(f);
    return kib / 4 * 3 * 1024;
}

KvCache::KvCache(backend::Backend& be, int n_ctx, const std::vector<KvLayer>& layers, TensorType tk, TensorType tv,
                 bool v_is_k, const std::vector<KvPart>& before)
    : n_ctx_(n_ctx), tk_(tk), tv_(tv), v_is_k_(v_is_k) {
    for (const KvPart& p : before) {
        TD_ASSERT(p.be && (be_.empty() || p.end >= before[be_.size() - 1].end));
        be_.push_back(p.be);
    }
    be_.push_back(&be);
    k_bytes_.assign(be_.size(), 0);
    v_bytes_.assign(be_.size(), 0);
    TD_ASSERT(!v_is_k || tk == tv);
    TD_ASSERT(kv_cache_type_supported(tk) && kv_cache_type_supported(tv));
    for (const KvLayer& shape : layers) {
        TD_ASSERT(shape.rows >= 0 && shape.rows <= n_ctx && shape.head_dim > 0 && shape.kv_dim % shape.head_dim == 0);
        for (TensorType t : {tk, tv})
            if (shape.head_dim % type_traits(t).block_elems != 0)
                throw Error(
                    strprintf("KV cache type %s needs a head size that is a multiple of %d (this model's is %d)",
                              type_name(t), type_traits(t).block_elems, shape.head_dim));
        int part = 0;  // the first part whose end is past this layer, else the last
        while (size_t(part) < before.size() && int(layers_.size()) >= before[size_t(part)].end) part++;
        Layer L{shape, row_bytes(tk, shape.kv_dim), row_bytes(tv, shape.kv_dim),
                part,  k_bytes_[size_t(part)],      v_bytes_[size_t(part)]};
        k_bytes_[size_t(part)] += size_t(shape.rows) * L.rk;
        if (!v_is_k) v_bytes_[size_t(part)] += size_t(shape.rows) * L.rv;
        layers_.push_back(L);
    }
    for (size_t part = 0; part < be_.size(); part++) {
        k_.push_back(be_[part]->alloc(k_bytes_[part]));
        v_.push_back(be_[part]->alloc(v_bytes_[part]));
    }
}

size_t KvCache::bytes() const {
    size_t b = 0;
    for (size_t p = 0; p < be_.size(); p++) b += k_bytes_[p] + v_bytes_[p];
    return b;
}

backend::Tensor KvCache::k_rows(int layer) const {
    const Layer& L = layers_[size_t(layer)];
    TD_ASSERT(L.shape.rows > 0);
    return {k_[size_t(L.part)].get(), L.k0, tk_, L.shape.rows, L.shape.kv_dim, L.rk};
}

backend::Tensor KvCache::v_rows(int layer) const {
    if (v_is_k_) return k_rows(layer);
    const Layer& L = layers_[size_t(layer)];
    TD_ASSERT(L.shape.rows > 0);
    return {v_[size_t(L.part)].get(), L.v0, tv_, L.shape.rows, L.shape.kv_dim, L.rv};
}

backend::Tensor KvCache::row(int layer, int pos, bool v) const {
    const backend::Tensor t = v ? v_rows(layer) : k_rows(layer);
    return t.rows_at(pos < t.rows ? pos : pos % t.rows, 1);
}

void KvCache::store(int layer, int pos, const float* k, const float* v) {
    thread_local std::vector<uint8_t> raw;
    raw.resize(std::max(row_bytes_k(layer), row_bytes_v(layer)));
    quantize_row_ref(tk_, k, raw.data(), kv_dim(layer));
    be_of(layer).write(row(layer, pos, false), raw.data());
    if (v_is_k_) return;
    quantize_row_ref(tv_, v, raw.data(), kv_dim(layer));
    be_of(layer).write(row(layer, pos, true), raw.data());
}

void KvCache::read(int layer, int pos, float* k, float* v) const {
    thread_local std::vector<uint8_t> raw;
    raw.resize(std::max(row_bytes_k(layer), row_bytes_v(layer)));
    be_of(layer).read(row(layer, pos, false), raw.data());
    dequantize_row_ref(tk_, raw.data(), k, kv_dim(layer));
    be_of(layer).read(row(layer, pos, true), raw.data());
    dequantize_row_ref(tv_, raw.data(), v, kv_dim(layer));
}

void KvCache::get_raw(int layer, int pos, bool v, uint8_t* dst) const { be_of(layer).read(row(layer, pos, v), dst); }

void KvCache::put_raw(int layer, int pos, bool v, const uint8_t* src) {
    if (v && v_is_k_) return;  // one copy: written as the key
    be_of(layer).write(row(layer, pos, v), src);
}

void KvCache::copy_row(int from, int to) {
    for (int l = 0; l < n_layer(); l++) {
        if (capacity(l) == 0) continue;
        be_of(l).row_copy(k_rows(l), from, to);
        if (!v_is_k_) be_of(l).row_copy(v_rows(l), from, to);
    }
}

}  // namespace tandem
