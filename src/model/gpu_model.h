// A model placed on a GPU, or split over several (tandem/gpu.h place_on_gpu, place_on_gpus): each device's part, its
// backend and its part of the model's weights uploaded to it (model/device_weights.h), shared by every session of
// the model (SessionParams::gpu), which allocate their caches and scratch from the same backends, so that one pass
// can batch them. The passes of one
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
    // One device's part of the model: its backend (shared by every session of the model), the weights uploaded
    // there, and the part of the model they are (backend.h LayerSpan: its layers; the last part also the output).
    struct Part {
        GpuDevice device;
        std::shared_ptr<backend::Backend> be;
        std::unique_ptr<DeviceWeights> weights;  // (declared after be: freed before it)
        backend::LayerSpan span;
    };
    // Throws tandem::Error naming the device and why: no such device, a pass the GPU cannot run yet
    // (gpu_unsupported), a weight type the backend cannot multiply, a buffer the device cannot hold.
    // layers: the model's last `layers` layers and its output on the GPUs, the ones before on the CPU (a split model,
    // gpu_split_unsupported); < 0 or at least the layer count: all of them. devices: the devices of gpu_devices()
    // those layers are split over, in order (tandem/gpu.h place_on_gpus), in proportion to `shares` (empty: equal).
    GpuModel(std::shared_ptr<const Model> model, const std::vector<int>& devices, int layers = -1,
             const std::vector<float>& shares = {});
    const Model& model() const { return *model_; }
    const std::vector<Part>& parts() const { return parts_; }
    // The last part's device, backend and weights: those of the output, where a session's own stage runs
    const GpuDevice& device() const { return parts_.back().device; }
    std::shared_ptr<backend::Backend> backend() const { return parts_.back().be; }
    const DeviceWeights& weights() const { return *parts_.back().weights; }
    // the first layer the GPUs run (0: all of them); the CPU runs those before it, with the token embedding
    int first_layer() const { return parts_.front().span.first; }
    size_t weight_bytes() const;  // every part's
    // the bytes of the weights on device `index` of gpu_devices() (its parts')
    size_t bytes_on(int index) const;

private:
    std::shared_ptr<const Model> model_;
    std::vector<Part> parts_;
};

// The first layer of each of n devices' parts of the layers [first_layer, n_layer) (n + 1 entries, the last
// n_layer): contiguous, in proportion to `shares` (empty: equal; each > 0), the last part's share counting the
// output head too (in layers' worth of bytes), each part at least one layer (tandem/split.h split_layers' rule).
// Throws tandem::Error when there are fewer layers than devices.
std::vector<int> gpu_layer_split(const Model& m, int first_layer, int n, const std::vector<float>& shares);

}  // namespace tandem
