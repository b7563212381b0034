// A model placed on a GPU (tandem/gpu.h place_on_gpu): the device's backend and the model's weights uploaded to it
// (model/device_weights.h), shared by every session of the model on that device (SessionParams::gpu), which
// allocate their caches and scratch from the same backend, so that one pass can batch them. The passes of one
// placement run from one thread at a time (a backend records one pass at a time).
#pragma once
#include <memory>

#include "backend/backend.h"
#include "model/device_weights.h"
#include "tandem/gpu.h"
#include "tandem/model.h"

namespace tandem {

class GpuModel {
public:
    // Throws tandem::Error naming the device and why: no such device, a pass the GPU cannot run yet
    // (gpu_unsupported), a weight type the backend cannot multiply, a buffer the device cannot hold.
    // layers: the model's last `layers` layers and its output on the GPU, the ones before on the CPU (a split model,
    // gpu_split_unsupported); < 0 or at least the layer count: all of them.
    GpuModel(std::shared_ptr<const Model> model, int device, int layers = -1);
    const Model& model() const { return *model_; }
    const GpuDevice& device() const { return device_; }
    std::shared_ptr<backend::Backend> backend() const { return be_; }
    const DeviceWeights& weights() const { return *weights_; }
    // the first layer the GPU runs (0: all of them); the CPU runs those before it, with the token embedding
    int first_layer() const { return first_layer_; }

private:
    std::shared_ptr<const Model> model_;
    GpuDevice device_;
    int first_layer_ = 0;
    std::shared_ptr<backend::Backend> be_;
    std::unique_ptr<DeviceWeights> weights_;  // (declared after be_: freed before it)
};

}  // namespace tandem
