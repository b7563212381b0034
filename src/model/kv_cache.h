// Per-sequence key/value cache: for each layer, n_ctx rows of kv_dim = n_head_kv * head_dim values, keys in one
// element type and values in another (llama.cpp's -ctk / -ctv): f32, f16 (the default, as llama.cpp's), bf16,
// or a 32-element block type (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl), which needs head_dim % 32 == 0 so that
// each head's slice of a row is whole blocks (head g of a row starts at g * head_bytes).
// Positions are dense from 0; rolling back (truncation) only lowers the count of valid rows, which the Session
// owns, so rejected draft tokens cost nothing to discard and the accepted prefix is never recomputed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/session.h"  // kv_cache_type_supported
#include "tandem/tensor_type.h"

namespace tandem {

class KvCache {
public:
    // Requires kv_cache_type_supported(tk / tv) and kv_dim % head_dim == 0; throws tandem::Error when a block
    // type does not divide head_dim.
    KvCache(int n_layer, int n_ctx, int kv_dim, int head_dim, TensorType tk, TensorType tv);

    // Writes the key and value rows (kv_dim floats each) of one position, converted to the cache's types.
    void store(int layer, int pos, const float* k, const float* v);
    // The row of one position as stored: row_bytes_k() / row_bytes_v() bytes.
    const uint8_t* k(int layer, int pos) const { return &k_[index(layer, pos, rk_)]; }
    const uint8_t* v(int layer, int pos) const { return &v_[index(layer, pos, rv_)]; }
    uint8_t* k_mut(int layer, int pos) { return &k_[index(layer, pos, rk_)]; }  // state files write rows as they are
    uint8_t* v_mut(int layer, int pos) { return &v_[index(layer, pos, rv_)]; }
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
    size_t bytes() const { return k_.size() + v_.size(); }

private:
    size_t index(int layer, int pos, size_t row) const { return (size_t(layer) * size_t(n_ctx_) + size_t(pos)) * row; }
    int n_ctx_, kv_dim_, head_dim_;
    TensorType tk_, tv_;
    size_t rk_, rv_;
    std::vector<uint8_t> k_, v_;
};

}  // namespace tandem
