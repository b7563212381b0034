// Per-sequence key/value cache: for each layer, rows of kv_dim = n_head_kv * head_dim values, keys in one
// element type and values in another (llama.cpp's -ctk / -ctv): f32, f16 (the default, as llama.cpp's), bf16,
// or a 32-element block type (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl), which needs head_dim % 32 == 0 so that
// each head's slice of a row is whole blocks (head g of a row starts at g * head_bytes).
// Rows are addressed by slot (a position, or a token tree's row): a layer of capacity n_ctx holds slot s at row
// s; a window-only layer (a sliding-window layer without --swa-full) holds `capacity` rows as a ring, slot s at
// row s % capacity, so it keeps only the most recent slots written. Which positions a ring still holds is the
// Session's to track (Session::truncate); the cache only maps slots to rows.
// Rolling back (truncation) only lowers the count of valid rows, which the Session owns, so rejected draft tokens
// cost nothing to discard and the accepted prefix is never recomputed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tandem/error.h"
#include "tandem/session.h"  // kv_cache_type_supported
#include "tandem/tensor_type.h"

namespace tandem {

// One layer of a session's cache: its row count (n_ctx, swa_cache_positions() for a sliding-window layer, 0 for a
// layer that keeps none: gemma4's shared-KV layers read an earlier layer's rows, a Gated DeltaNet layer has a state
// instead), its row width (n_head_kv * head_dim) and head size. Layers differ in width where the model's do (gemma4).
struct KvLayer {
    int rows = 0;
    int kv_dim = 0;
    int head_dim = 0;
};

// The layers of a session's cache (its layer count: SessionParams::n_layers, else the model's): what Session gives
// KvCache and kv_cache_bytes counts.
std::vector<KvLayer> kv_layers(const Model& m, const SessionParams& p, int n_ctx);

// The first position a sliding-window layer's query at `pos` sees: pos - n_swa + 1, or its chunk's start
// (floor(pos / n_swa) * n_swa, llama4's chunked attention); either may be below 0 (then 0).
inline int swa_first_visible(const HParams& hp, int pos) {
    return hp.swa_chunked ? pos / hp.n_swa * hp.n_swa : pos - hp.n_swa + 1;
}

// Storage comes from the session's backend (backend/backend.h): one buffer of key rows and one of value rows,
// each layer a (capacity, kv_dim) tensor of them; rows are written and read through the backend's ops. A model split
// between the CPU and GPUs, or over several GPUs (tandem/gpu.h) keeps each layer's rows on the backend that runs the
// layer: those of the parts `before` the session's own backend, each up to its `end` (a cache layer index,
// increasing), then the rest on `be`.
struct KvPart {
    backend::Backend* be;
    int end;
};
class KvCache {
public:
    // Requires kv_cache_type_supported(tk / tv), and of each layer rows in 0..n_ctx and kv_dim % head_dim == 0;
    // throws tandem::Error when a block type does not divide a head size. A layer of n_ctx rows holds every slot, one
    // of fewer is a ring. `v_is_k` (MLA: the latent row is both): one copy of each row, read as the key and as the
    // value (tk == tv; store() keeps the key).
    KvCache(backend::Backend& be, int n_ctx, const std::vector<KvLayer>& layers, TensorType tk, TensorType tv,
            bool v_is_k = false, const std::vector<KvPart>& before = {});

    // The layer's key / value rows as tensors (capacity(layer), kv_dim(layer)) of type_k() / type_v(); MLA: the
    // same tensor twice. The layer keeps rows (capacity(layer) > 0).
    backend::Tensor k_rows(int layer) const;
    backend::Tensor v_rows(int layer) const;
    // Writes the key and value rows (kv_dim(layer) floats each) of one position, converted to the cache's types.
    void store(int layer, int pos, const float* k, const float* v);
    // The same for the rows of a pass: k, v (n, kv_dim) at slots[0..n) (MLA: k only), through the backend's op
    void store_rows(int layer, const backend::Tensor& k, const backend::Tensor& v, const int* slots) {
        be_of(layer).kv_store(k, v, slots, k_rows(layer), v_is_k_ ? backend::Tensor{} : v_rows(layer));
    }
    // Row `from` copied onto row `to` in every layer that keeps rows (a token tree's accepted path moved into place).
    void copy_row(int from, int to);
    // The key / value row of one position as floats (kv_dim(layer)).
    void read(int layer, int pos, float* k, float* v) const;
    // The row of one slot as stored (row_bytes_k / row_bytes_v bytes), to and from host memory: state files.
    void get_raw(int layer, int pos, bool v, uint8_t* dst) const;
    void put_raw(int layer, int pos, bool v, const uint8_t* src);

    TensorType type_k() const { return tk_; }
    TensorType type_v() const { return tv_; }
    int n_layer() const { return int(layers_.size()); }
    size_t row_bytes_k(int layer) const { return layers_[size_t(layer)].rk; }
    size_t row_bytes_v(int layer) const { return layers_[size_t(layer)].rv; }
    int kv_dim(int layer) const { return layers_[size_t(layer)].shape.kv_dim; }
    int head_dim(int layer) const { return layers_[size_t(layer)].shape.head_dim; }
    int n_ctx() const { return n_ctx_; }
    // rows of that layer (n_ctx: not a ring; 0: it keeps none)
    int capacity(int layer) const { return layers_[size_t(layer)].shape.rows; }
    size_t bytes() const;
    // the backend that holds the layer's rows
    backend::Backend& be_of(int layer) const { return *be_[size_t(layers_[size_t(layer)].part)]; }

private:
    struct Layer {
        KvLayer shape;
        size_t rk, rv;  // row bytes
        int part;  // its part's buffers (the last: the session backend's)
        size_t k0, v0;  // its first byte in its part's key / value buffer
    };
    // the one row of a slot (row pos % capacity of a ring)
    backend::Tensor row(int layer, int pos, bool v) const;
    std::vector<backend::Backend*> be_;  // each part's
    int n_ctx_;
    TensorType tk_, tv_;
    std::vector<Layer> layers_;
    std::vector<std::unique_ptr<backend::Buffer>> k_, v_;
    std::vector<size_t> k_bytes_, v_bytes_;
    bool v_is_k_ = false;
};

}  // namespace tandem
