// The host memory the forward pass and its blocks still use (scratch rows, the model's weights, norms and biases),
// named as tensors of the backend's host buffer (backend/backend.h host_memory(); the CPU backend's, whose offsets
// are addresses). What a GPU backend cannot take: it is the part of the pass that has yet to move onto tensors the
// backend allocates and places.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "tandem/model.h"

namespace tandem {

struct HostTensors {
    backend::Buffer* host;
    backend::Tensor rows(const float* p, int64_t n, int64_t cols) const {
        return {host, uintptr_t(p), TensorType::F32, n, cols, size_t(cols) * sizeof(float)};
    }
    // n rows of `cols` floats, `stride` floats apart (a slice of each row of a wider table)
    backend::Tensor strided(const float* p, int64_t n, int64_t cols, int64_t stride) const {
        return {host, uintptr_t(p), TensorType::F32, n, cols, size_t(stride) * sizeof(float)};
    }
    // an (n, k) table of I32 ids (a router's choice)
    backend::Tensor ids(const int32_t* p, int64_t n, int64_t k) const {
        return {host, uintptr_t(p), TensorType::I32, n, k, size_t(k) * sizeof(int32_t)};
    }
    // a weight matrix, with its repacked copy as the CPU's placement of it; none for a matrix this process lacks
    // (a tensor split's other rank's expert)
    backend::Tensor weight(const Weight& w) const {
        if (!w.data) return {};
        return {host, uintptr_t(w.data), w.type, w.rows, w.cols, w.row_stride, w.placement};
    }
    // a norm's weight or a bias: one row; none for an empty vector
    backend::Tensor vec(const std::vector<float>& v) const {
        return v.empty() ? backend::Tensor{} : rows(v.data(), 1, int64_t(v.size()));
    }
};

}  // namespace tandem
