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
// Why a model cannot be split between the CPU and a GPU (-ngl below its layer count) or over several GPUs yet (""
// when it can): what gpu_unsupported names, and the layers whose inputs cross the split (gemma4's shared-KV layers
// and per-layer embeddings). (An MTP block runs on the last part, with the output; Gated DeltaNet states are kept by
// each part for its layers, moved in lockstep.)
std::string gpu_split_unsupported(const Model& m);
// Places the weights of `model` on device `device` of gpu_devices() (< 0: the first): with `layers` < 0 or at least
// the layer count, every weight; else the last `layers` layers and the output (llama.cpp's -ngl: the layers before,
// with the token embedding, run on the CPU, and a pass hands its rows from the one to the other). Throws
// tandem::Error naming the device and why not (no device, gpu_unsupported / gpu_split_unsupported, a weight type,
// memory the device lacks).
std::shared_ptr<const GpuModel> place_on_gpu(std::shared_ptr<const Model> model, int device, int layers = -1);
// The same over several devices (llama.cpp's -sm layer): the GPUs' layers split into contiguous parts in the order
// of `devices`, in proportion to `shares` (-ts; empty: equal), the first device's part the first of them (and the
// token embedding, when the CPU runs none), the last's the last and the output. A pass hands its rows from one part
// to the next through host memory, once per part. Each part is batch invariant on its own, so a row's logits do not
// depend on its pass, and they are bit-identical to the same layers on one device of that kind. The same index
// twice opens that device twice (two queues and two memories of one GPU: how the split is tested on one device).
// One device: place_on_gpu. gpu_split_unsupported names what cannot split.
std::shared_ptr<const GpuModel> place_on_gpus(std::shared_ptr<const Model> model, const std::vector<int>& devices,
                                              int layers = -1, const std::vector<float>& shares = {});
struct GpuPartInfo {
    int index = 0;  // of gpu_devices()
    std::string device;  // its name
    int first = 0, end = 0;  // its layers [first, end)
    size_t weight_bytes = 0;
    bool output = false;  // it holds the output head
};
struct GpuPlacementInfo {
    std::string device, driver;  // the output's device (the last part's)
    size_t weight_bytes = 0, matrices = 0;  // of every part
    std::string backend;  // the backend's name
    int layers = 0, n_layer = 0;  // the layers on the GPUs, of the model's
    std::vector<GpuPartInfo> parts;  // one per device of the split, in the pass's order
};
GpuPlacementInfo gpu_placement_info(const GpuModel& g);
// "layers 0..3 on Vulkan0 (12.0 MiB), layers 4..7 and the output on Vulkan1 (15.5 MiB)" for logs
std::string gpu_parts_text(const GpuPlacementInfo& g);
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
// llama.cpp's -dev / --device value: "none" ({-1}: the CPU), or a comma list of "VulkanN" or N ({N, ...}, in that
// order; a device may be listed twice: place_on_gpus). Throws tandem::Error for a name no device could have.
std::vector<int> parse_gpu_devices(const std::string& value);
// The first of parse_gpu_devices (the draft's -devd names one device)
int parse_gpu_device(const std::string& value);

// Where a command runs a model, from -ngl, -dev / -mg / -sm / -ts and the memory its caches will take there (as
// llama.cpp decides): -ngl N below the layer count puts the last N layers and the output on the GPUs and runs the
// ones before, with the token embedding, on the CPU (a split model: gpu_split_unsupported names what cannot split
// yet); N at least the layer count, or "all": every layer; "auto": every layer when the weights and caches fit the
// devices' memory, else as many of the last layers as fit (and, should a device then refuse that memory, a quarter
// fewer at a time). Several devices share the GPU layers as place_on_gpus does. `log` says which and why for the
// start-up log (the devices, their driver, the layers, the memory the weights take there). Errors (tandem::Error):
// an -ngl layer count the devices cannot hold (naming the sizes), a device that fails. A model whose pass cannot run
// on a GPU yet (or cannot split, for N below the layer count), or no usable device: the CPU with a warning, as
// llama.cpp's -ngl without a GPU.
struct GpuChoice {
    std::shared_ptr<const GpuModel> gpu;  // null: the CPU
    std::string log;  // empty when -ngl was not given
    bool warning = false;  // log is a warning (the GPU was asked for and is not used)
};
// devices: gpu_devices() indices, in the split's order ({-1}: none, the CPU; empty: every device of the first one's
// kind, e.g. every discrete GPU but not a software driver beside them, as llama.cpp's default). shares: each
// device's share of the layers (-ts; a device of share 0 takes none; empty: in proportion to their memory, as
// llama.cpp). The fit counts each device's part of the weights, its layers' share of cache_bytes, the pass's scratch
// arrays (gpu_scratch_bytes) and, on the first device, `taken`: what another model of the command already holds
// there.
GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuLayers& ngl, const std::vector<int>& devices,
                     size_t cache_bytes, const char* what, size_t taken = 0, const std::vector<float>& shares = {});
// The device memory of a pass's scratch arrays, for passes of up to n_batch rows (an estimate for the fit: the
// hidden rows, q / k / v and attention rows, the FFN's or the chosen experts' hidden rows, 16 rows of logits).
size_t gpu_scratch_bytes(const Model& m, int n_batch = 512);

// llama.cpp's GPU flags of a command, as given (-ngl, -ngld, -dev, -devd, -mg, and in a process of its own -sm and
// -ts), and the one rule by which every command (generate, serve, bench, perplexity) places its target and its draft
// model: the draft's -ngld, else -ngl; the target's layers over every device of -dev (default: every GPU of the best
// kind) with -sm layer, the default, or on one device (-dev's first, else -mg, else the first) with -sm none; the
// draft on one device: its -devd, else -dev's first, else -mg, else the first (a small draft gains nothing from a
// split: its short passes would wait on each hand-over).
struct GpuFlags {
    GpuLayers ngl, ngld;
    std::vector<int> devices;  // -dev: empty when not given; {-1}: none (the CPU)
    int device_draft = -2, main_gpu = -2;  // -2: not given; -1: none (the CPU)
    bool split = true;  // -sm layer (true) or none
    std::vector<float> shares;  // -ts: each device's share of the target's layers
    bool row_asked = false;  // -sm row (tensor): said in the log, and the layers split (a row split is not built)
    const GpuLayers& layers(bool draft) const { return draft && ngld.given ? ngld : ngl; }
    // choose_gpu's devices for the target or the draft ({-1}: none; empty: the default split)
    std::vector<int> devices_for(bool draft) const {
        const int first = devices.empty() ? -2 : devices[0];
        if (draft) {
            const int d = device_draft != -2 ? device_draft : first != -2 ? first : main_gpu;
            return {d == -2 ? 0 : d};
        }
        if (first == -1) return {-1};
        if (split) return devices;
        return {first != -2 ? first : main_gpu != -2 ? main_gpu : 0};
    }
    // the first device the target or the draft would use (-1: none; -2: the default, the first device)
    int device_for(bool draft) const {
        const std::vector<int> d = devices_for(draft);
        return d.empty() ? -2 : d[0];
    }
};
// choose_gpu for the target (draft false) or the draft model, by the flags' rule ("target" / "draft" in the log).
// `beside`: the target's placement when choosing for the draft; on the draft's device, its weights there, its
// layers' share of cache_beside (its caches' bytes) and its scratch count as taken.
GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuFlags& flags, bool draft, size_t cache_bytes,
                     const std::shared_ptr<const GpuModel>& beside = nullptr, size_t cache_beside = 0);

}  // namespace tandem
