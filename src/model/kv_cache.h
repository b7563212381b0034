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
#include <string>
#include <vector>

#include "tandem/session.h"  // kv_cache_type_supported
#include "tandem/tensor_type.h"

namespace tandem {

// The rows each layer of a session keeps (its layer count: SessionParams::n_layers, else the model's): n_ctx, or
// swa_cache_positions() for a sliding-window layer. What Session gives KvCache and kv_cache_bytes counts.
std::vector<int> kv_layer_rows(const Model& m, const SessionParams& p, int n_ctx);

// The first position a sliding-window layer's query at `pos` sees: pos - n_swa + 1, or its chunk's start
// (floor(pos / n_swa) * n_swa, llama4's chunked attention); either may be below 0 (then 0).
inline int swa_first_visible(const HParams& hp, int pos) {
    return hp.swa_chunked ? pos / hp.n_swa * hp.n_swa : pos - hp.n_swa + 1;
}

class KvCache {
public:
    // Requires kv_cache_type_supported(tk / tv) and kv_dim % head_dim == 0; throws tandem::Error when a block
    // type does not divide head_dim. `capacity` (n_layer entries, each in 1..n_ctx) gives the layers that are
    // rings their row count; empty: every layer holds n_ctx rows. `v_is_k` (MLA: the latent row is both): one
    // copy of each row, read as the key and as the value (tk == tv; store() keeps the key).
    KvCache(int n_layer, int n_ctx, int kv_dim, int head_dim, TensorType tk, TensorType tv,
            const std::vector<int>& capacity = {}, bool v_is_k = false);

    // Writes the key and value rows (kv_dim floats each) of one position, converted to the cache's types.
    void store(int layer, int pos, const float* k, const float* v);
    // The row of one slot as stored: row_bytes_k() / row_bytes_v() bytes.
    const uint8_t* k(int layer, int pos) const { return &k_[index(layer, pos, rk_)]; }
    const uint8_t* v(int layer, int pos) const { return v_is_k_ ? k(layer, pos) : &v_[index(layer, pos, rv_)]; }
    uint8_t* k_mut(int layer, int pos) { return &k_[index(layer, pos, rk_)]; }  // state files write rows as they are
    uint8_t* v_mut(int layer, int pos) { return v_is_k_ ? k_mut(layer, pos) : &v_[index(layer, pos, rv_)]; }
    // Row `from` copied onto row `to` in every layer (a token tree's accepted path moved into place).
    void copy_row(int n_layer, int from, int to);
    // The key / value row of one position as floats (kv_dim).
    void read(int layer, int pos, float* k, float* v) const;

    TensorType type_k() const { return tk_; }
    TensorType type_v() const { return tv_; }
    size_t row_bytes_k() const { return rk_; }
    size_t row_bytes_v() const { return rv_; }
    size_t head_bytes_k() const { return rk_ / size_t(kv_dim_ / head_dim_); }  // one head's slice of a row
    size_t head_bytes_v() const { return rv_ / size_t(kv_dim_ / head_dim_); }
    int kv_dim() const { return kv_dim_; }
    int head_dim() const { return head_dim_; }
    int n_ctx() const { return n_ctx_; }
    int capacity(int layer) const { return cap_[size_t(layer)]; }  // rows of that layer (n_ctx: not a ring)
    size_t bytes() const { return k_.size() + v_.size(); }

private:
    size_t index(int layer, int pos, size_t row) const {
        const int c = cap_[size_t(layer)];
        return (first_[size_t(layer)] + size_t(pos < c ? pos : pos % c)) * row;
    }
    int n_ctx_, kv_dim_, head_dim_;
    TensorType tk_, tv_;
    size_t rk_, rv_;
    std::vector<int> cap_;  // rows per layer
    std::vector<size_t> first_;  // the layer's first row in k_ / v_ (rows of the layers before it)
    std::vector<uint8_t> k_, v_;
    bool v_is_k_ = false;
};

}  // namespace tandem
