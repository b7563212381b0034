// GPUs this build can use: the Vulkan backend's devices (src/backend/vulkan/; CMake option TANDEM_VULKAN).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem {

struct GpuDevice {
    int index = 0;  // as --device / -mg name it
    std::string name, driver, type;  // type: "discrete GPU", "integrated GPU", "virtual GPU", "CPU (software)"
    uint64_t memory_bytes = 0;  // its largest device-local heap
};

// Best first (discrete, integrated, virtual, then a CPU driver such as Mesa's lavapipe); empty in a build without
// the Vulkan backend or on a machine without a Vulkan driver.
std::vector<GpuDevice> gpu_devices();
bool built_with_vulkan();

// The GPU failed during a run: the device was lost (a driver reset, a hung or removed card: `lost`, it cannot be
// used again by this process) or ran out of memory. The server answers the requests it affects with 503, and on a
// lost device stops and exits non-zero (tandem serve); the CPU commands exit with its message.
class GpuFailure : public Error {
public:
    GpuFailure(const std::string& msg, bool lost) : Error(msg), lost(lost) {}
    bool lost;
};

class Model;
// A model placed on a GPU: its weights uploaded to the device once, shared by every session of the model there
// (SessionParams::gpu). The forward pass is the CPU's code on the device's ops (README "GPU"). Its sessions share
// one device queue: their passes must run from one thread at a time (the server's engine thread runs them all),
// unlike CPU sessions, which may run concurrently.
class GpuModel;

// Why a model's forward pass cannot run on a GPU yet ("" when it can): the passes that still run on the CPU only
// (an EAGLE-3 head's, a Gemma 4 assistant's, a model split over processes) and heads wider than the GPU's attention.
std::string gpu_unsupported(const Model& m);
// Why a model cannot be split between the CPU and a GPU (-ngl below its layer count) yet ("" when it can): what
// gpu_unsupported names, and the layers whose state or inputs cross the split (Gated DeltaNet states, gemma4's
// shared-KV layers and per-layer embeddings, an MTP block).
std::string gpu_split_unsupported(const Model& m);
// Places the weights of `model` on device `device` of gpu_devices() (< 0: the first): with `layers` < 0 or at least
// the layer count, every weight; else the last `layers` layers and the output (llama.cpp's -ngl: the layers before,
// with the token embedding, run on the CPU, and a pass hands its rows from the one to the other). Throws
// tandem::Error naming the device and why not (no device, gpu_unsupported / gpu_split_unsupported, a weight type,
// memory the device lacks).
std::shared_ptr<const GpuModel> place_on_gpu(std::shared_ptr<const Model> model, int device, int layers = -1);
struct GpuPlacementInfo {
    std::string device, driver;
    size_t weight_bytes = 0, matrices = 0;
    std::string backend;  // the backend's name
    int layers = 0, n_layer = 0;  // the layers on the GPU, of the model's
};
GpuPlacementInfo gpu_placement_info(const GpuModel& g);
// The device's memory bandwidth in GB/s, as `tandem bench` compares a pass's bytes with it: a shader copies one
// 64 MiB buffer into another 8 times in one submission, (bytes read + bytes written) / time, best of 3 (the first
// run untimed); 0 when the device has no room left for the two buffers. Throws tandem::GpuFailure on a lost device.
double gpu_copy_probe_gbps(const GpuModel& g);

// llama.cpp's -ngl / -ngld value: a layer count, "all" or "auto" (also -1). Throws tandem::Error for anything else.
struct GpuLayers {
    bool given = false;  // the flag was given (else: the CPU, as before)
    int n = 0;  // layers asked for (n >= the model's layers: all of them)
    bool all = false, automatic = false;
};
GpuLayers parse_gpu_layers(const std::string& value, const char* flag);
// llama.cpp's -dev / --device value: "none" (-1: the CPU), "VulkanN" or N (N), a comma list's first entry; -2 when
// not given (then -mg or the first). Throws tandem::Error for a name no device has.
int parse_gpu_device(const std::string& value);

// Where a command runs a model, from -ngl, -dev / -mg and the memory its caches will take there (as llama.cpp
// decides): -ngl N below the layer count puts the last N layers and the output on the GPU and runs the ones before,
// with the token embedding, on the CPU (a split model: gpu_split_unsupported names what cannot split yet); N at
// least the layer count, or "all": every layer; "auto": every layer when the weights and caches fit the device's
// memory, else as many of the last layers as fit (and, should the device then refuse that memory, a quarter fewer
// at a time). `log` says which and why for the start-up log (the device, its
// driver, the layers, the memory the weights take there). Errors (tandem::Error): an -ngl layer count the device
// cannot hold (naming the sizes), a device that fails. A model whose pass cannot run on a GPU yet (or cannot split,
// for N below the layer count), or no usable device: the CPU with a warning, as llama.cpp's -ngl without a GPU.
struct GpuChoice {
    std::shared_ptr<const GpuModel> gpu;  // null: the CPU
    std::string log;  // empty when -ngl was not given
    bool warning = false;  // log is a warning (the GPU was asked for and is not used)
};
// The fit counts the GPU part's weights, its layers' share of cache_bytes, the pass's scratch arrays
// (gpu_scratch_bytes) and `taken`: what another model of the command already holds on that device.
GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuLayers& ngl, int device, size_t cache_bytes,
                     const char* what, size_t taken = 0);
// The device memory of a pass's scratch arrays, for passes of up to n_batch rows (an estimate for the fit: the
// hidden rows, q / k / v and attention rows, the FFN's or the chosen experts' hidden rows, 16 rows of logits).
size_t gpu_scratch_bytes(const Model& m, int n_batch = 512);

// llama.cpp's GPU flags of a command, as given (-ngl, -ngld, -dev, -devd, -mg), and the one rule by which every
// command (generate, serve, bench, perplexity) places its target and its draft model: the draft's -ngld, else -ngl;
// its -devd, else -dev, else -mg, else the first device.
struct GpuFlags {
    GpuLayers ngl, ngld;
    int device = -2, device_draft = -2, main_gpu = -2;  // -2: not given; -1: none (the CPU)
    const GpuLayers& layers(bool draft) const { return draft && ngld.given ? ngld : ngl; }
    int device_for(bool draft) const {
        if (draft && device_draft != -2) return device_draft;
        return device != -2 ? device : main_gpu;
    }
};
// choose_gpu for the target (draft false) or the draft model, by the flags' rule ("target" / "draft" in the log).
// `beside`: the target's placement when choosing for the draft; on the same device, its weights and cache_beside
// (its caches' bytes) count as taken.
GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuFlags& flags, bool draft, size_t cache_bytes,
                     const std::shared_ptr<const GpuModel>& beside = nullptr, size_t cache_beside = 0);

}  // namespace tandem
