// How the forward pass and its blocks name their tensors on the session's backend, whichever it is: the model's
// weights and vectors (host memory lent to the CPU in place, or the device copies of model/device_weights.h), and
// the pass's scratch arrays (buffers the backend allocates, grown to the largest pass and kept). The one pass of
// every architecture runs on these, so the CPU and a GPU run the same code (docs: README "GPU").
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/device_weights.h"
#include "model/host_tensors.h"
#include "tandem/model.h"

namespace tandem {

// One scratch array of the pass, a buffer of its backend grown as needed (never shrunk). Growing it between two
// ops of a recorded pass is safe: a backend keeps a buffer freed mid-pass alive until the pass has run.
class Scratch {
public:
    // (n, cols) rows of `type`, densely packed, at the buffer's start
    backend::Tensor rows(backend::Backend& be, int64_t n, int64_t cols, TensorType type = TensorType::F32) {
        const size_t stride = row_bytes(type, cols), bytes = stride * size_t(n);
        if (!buf_ || bytes > cap_) {
            buf_.reset();
            cap_ = std::max(bytes, size_t(64));
            buf_ = be.alloc(cap_);
        }
        return {buf_.get(), 0, type, n, cols, stride};
    }

private:
    std::unique_ptr<backend::Buffer> buf_;
    size_t cap_ = 0;
};

// The model's tensors as the pass's backend reads them: on a backend with host memory (the CPU) the host data in
// place (with the backend's placement, Weight::placement), else the device copies of DeviceWeights.
struct ModelTensors {
    backend::Buffer* host = nullptr;  // Backend::host_memory()
    const DeviceWeights* dev = nullptr;  // when host is null
    backend::Tensor weight(const Weight& w) const { return dev ? dev->matrix(w) : HostTensors{host}.weight(w); }
    // a norm's weight or a bias: one row; none for an empty vector
    backend::Tensor vec(const std::vector<float>& v) const { return dev ? dev->vec(v) : HostTensors{host}.vec(v); }
    // a vector of the model read as (rows, cols) (one bias row per expert, a convolution's taps per channel)
    backend::Tensor table(const std::vector<float>& v, int64_t rows, int64_t cols) const {
        backend::Tensor t = vec(v);
        if (!t) return t;
        t.rows = rows;
        t.cols = cols;
        t.row_stride = size_t(cols) * sizeof(float);
        return t;
    }
};

}  // namespace tandem
