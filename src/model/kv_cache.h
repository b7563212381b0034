// Per-sequence key/value cache: for each layer, n_ctx rows of kv_dim = n_head_kv * head_dim values, stored as
// IEEE half (as llama.cpp does by default: half the memory of F32 and the same values the reference engine sees).
// Positions are dense from 0; rolling back (truncation) only lowers the count of valid rows, which the Session
// owns, so rejected draft tokens cost nothing to discard and the accepted prefix is never recomputed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

class KvCache {
public:
    KvCache(int n_layer, int n_ctx, int kv_dim)
        : n_ctx_(n_ctx), kv_dim_(kv_dim), k_(size_t(n_layer) * size_t(n_ctx) * size_t(kv_dim)), v_(k_.size()) {}

    // Writes the key and value rows (kv_dim floats each) of one position.
    void store(int layer, int pos, const float* k, const float* v);
    const uint16_t* k(int layer, int pos) const { return &k_[index(layer, pos)]; }  // (kv_dim) half
    const uint16_t* v(int layer, int pos) const { return &v_[index(layer, pos)]; }  // (kv_dim) half
    uint16_t* k_mut(int layer, int pos) { return &k_[index(layer, pos)]; }  // state files write rows as they are
    uint16_t* v_mut(int layer, int pos) { return &v_[index(layer, pos)]; }
    int kv_dim() const { return kv_dim_; }
    int n_ctx() const { return n_ctx_; }
    size_t bytes() const { return (k_.size() + v_.size()) * sizeof(uint16_t); }

private:
    size_t index(int layer, int pos) const { return (size_t(layer) * size_t(n_ctx_) + size_t(pos)) * size_t(kv_dim_); }
    int n_ctx_, kv_dim_;
    std::vector<uint16_t> k_, v_;
};

}  // namespace tandem
