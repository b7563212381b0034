// A model's weights placed on a backend that does not read host memory (a GPU: backend.h host_memory() null):
// every matrix and vector of the model's registry (Model::for_each_matrix / for_each_vector) uploaded once through
// Backend::map_host, then named by the host weight or vector it came from. The first piece of a pass on such a
// backend (README "GPU": the pass's scratch rows and RoPE tables come next).
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "tandem/model.h"

namespace tandem {

// The largest tensor a GPU backend binds (Vulkan: 32-bit offsets in the shaders, maxStorageBufferRange)
constexpr size_t kMaxTensorBytes = size_t(UINT32_MAX);

class DeviceWeights {
public:
    // Uploads every matrix and vector of m that `span` holds (a split model's part: backend.h LayerSpan). Throws tandem::Error naming the first
    // matrix whose type the backend cannot multiply (backend::unsupported's rule) or one past kMaxTensorBytes,
    // before uploading anything.
    DeviceWeights(backend::Backend& be, const Model& m, const backend::LayerSpan& span = {});
    // The device copy of a matrix or vector of the model (a view's, its first visit's); a null tensor for a matrix
    // this process does not hold (w.data null) or an empty vector. Throws tandem::Error for one not of the model.
    backend::Tensor matrix(const Weight& w) const;
    // The bytes DeviceWeights(be, m, span) would upload (the fit check, before any upload)
    static size_t bytes_for(const Model& m, const backend::LayerSpan& span);
    backend::Tensor vec(const std::vector<float>& v) const;
    size_t bytes() const { return bytes_; }
    size_t matrices() const { return n_matrices_; }

private:
    std::unordered_map<const void*, backend::Tensor> placed_;  // host data -> device tensor
    std::vector<std::unique_ptr<backend::Buffer>> buffers_;
    size_t bytes_ = 0, n_matrices_ = 0;
};

}  // namespace tandem
