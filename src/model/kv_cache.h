// Per-sequence key/value cache: for each layer, n_ctx rows of kv_dim = n_head_kv * head_dim floats.
// Positions are dense from 0; rolling back (truncation) just lowers the count of valid rows, so rejected
// draft tokens cost nothing to discard and the accepted prefix is never recomputed.
#pragma once
#include <cstddef>
#include <vector>

namespace tandem {

class KvCache {
public:
    KvCache(int n_layer, int n_ctx, int kv_dim)
        : n_layer_(n_layer), n_ctx_(n_ctx), kv_dim_(kv_dim),
          k_(size_t(n_layer) * size_t(n_ctx) * size_t(kv_dim)), v_(k_.size()) {}

    float* k(int layer, int pos) { return &k_[index(layer, pos)]; }  // (kv_dim)
    float* v(int layer, int pos) { return &v_[index(layer, pos)]; }  // (kv_dim)
    const float* k(int layer, int pos) const { return &k_[index(layer, pos)]; }
    const float* v(int layer, int pos) const { return &v_[index(layer, pos)]; }
    int n_ctx() const { return n_ctx_; }
    size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

private:
    size_t index(int layer, int pos) const { return (size_t(layer) * size_t(n_ctx_) + size_t(pos)) * size_t(kv_dim_); }
    int n_layer_, n_ctx_, kv_dim_;
    std::vector<float> k_, v_;
};

}  // namespace tandem
