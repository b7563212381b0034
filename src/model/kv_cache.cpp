#include "model/kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

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
    const HParams& hp = m.hparams();
    const int64_t kvd = int64_t(hp.n_head_kv) * hp.head_dim;
    return size_t(hp.n_layer) * (row_bytes(tk, kvd) + row_bytes(tv, kvd));
}

ContextChoice choose_context(const Model& m, TensorType tk, TensorType tv, size_t budget_bytes, int n_seq,
                             size_t extra_per_position) {
    const int train = m.hparams().n_ctx_train > 0 ? m.hparams().n_ctx_train : 4096;
    const size_t per_pos = kv_bytes_per_position(m, tk, tv) * size_t(std::max(1, n_seq)) + extra_per_position;
    ContextChoice c{train, false, strprintf("context %d: the model's training context", train)};
    if (budget_bytes == 0 || size_t(train) * per_pos <= budget_bytes) return c;
    const size_t fits = budget_bytes / per_pos / 256 * 256;
    c.n_ctx = int(std::max<size_t>(256, fits));
    c.bounded = true;
    c.note = strprintf(
        "context %d of the model's %d: its KV caches would take %.1f GiB, the memory budget is %.1f GiB (use -c)",
        c.n_ctx, train, double(size_t(train) * per_pos) / 1073741824.0, double(budget_bytes) / 1073741824.0);
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

KvCache::KvCache(int n_layer, int n_ctx, int kv_dim, int head_dim, TensorType tk, TensorType tv)
    : n_ctx_(n_ctx), kv_dim_(kv_dim), head_dim_(head_dim), tk_(tk), tv_(tv) {
    TD_ASSERT(kv_cache_type_supported(tk) && kv_cache_type_supported(tv) && head_dim > 0 && kv_dim % head_dim == 0);
    for (TensorType t : {tk, tv})
        if (head_dim % type_traits(t).block_elems != 0)
            throw Error(strprintf("KV cache type %s needs a head size that is a multiple of %d (this model's is %d)",
                                  type_name(t), type_traits(t).block_elems, head_dim));
    rk_ = row_bytes(tk, kv_dim);
    rv_ = row_bytes(tv, kv_dim);
    k_.resize(size_t(n_layer) * size_t(n_ctx) * rk_);
    v_.resize(size_t(n_layer) * size_t(n_ctx) * rv_);
}

void KvCache::store(int layer, int pos, const float* k, const float* v) {
    quantize_row_ref(tk_, k, k_mut(layer, pos), kv_dim_);
    quantize_row_ref(tv_, v, v_mut(layer, pos), kv_dim_);
}

void KvCache::read(int layer, int pos, float* k, float* v) const {
    dequantize_row_ref(tk_, this->k(layer, pos), k, kv_dim_);
    dequantize_row_ref(tv_, this->v(layer, pos), v, kv_dim_);
}

void KvCache::copy_row(int n_layer, int from, int to) {
    for (int l = 0; l < n_layer; l++) {
        std::memcpy(k_mut(l, to), k(l, from), rk_);
        std::memcpy(v_mut(l, to), v(l, from), rv_);
    }
}

}  // namespace tandem
