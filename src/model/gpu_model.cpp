#include "model/gpu_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "tandem/error.h"

namespace tandem {

std::string gpu_unsupported(const Model& m) {
    const HParams& hp = m.hparams();
    if (m.eagle3()) return "an EAGLE-3 head's pass runs on the CPU only";
    if (m.assistant()) return "a Gemma 4 assistant's pass runs on the CPU only";
    if (m.cluster()) return "a model split over processes (--split-mode) runs on the CPUs only";
    if (hp.mla)
        return "multi-head latent attention's cached head (kv_lora_rank + rope dims) is wider than the Vulkan "
               "attention's 256";
    for (int l = 0; l < hp.n_layer; l++)
        if (m.layer(l).head_dim > 256)
            return strprintf("layer %d's heads have %d dims (the Vulkan attention takes at most 256)", l,
                             m.layer(l).head_dim);
    return "";
}

GpuModel::GpuModel(std::shared_ptr<const Model> model, int device) : model_(std::move(model)) {
    if (const std::string why = gpu_unsupported(*model_); !why.empty())
        throw Error(model_->path() + ": not on a GPU: " + why);
    const std::vector<GpuDevice> devs = gpu_devices();
    if (devs.empty())
        throw Error("no GPU: " +
                    std::string(built_with_vulkan() ? "no Vulkan device found" : "this build has no Vulkan backend"));
    if (device >= int(devs.size()))
        throw Error(strprintf("GPU device %d does not exist (%zu found: tandem --list-devices)", device, devs.size()));
    device_ = devs[size_t(device < 0 ? 0 : device)];
    be_ = backend::make_vulkan_backend(device_.index);
    weights_ = std::make_unique<DeviceWeights>(*be_, *model_);
}

std::shared_ptr<const GpuModel> place_on_gpu(std::shared_ptr<const Model> model, int device) {
    return std::make_shared<const GpuModel>(std::move(model), device);
}

GpuPlacementInfo gpu_placement_info(const GpuModel& g) {
    return {g.device().name, g.device().driver, g.weights().bytes(), g.weights().matrices(), g.backend()->name()};
}

double gpu_copy_probe_gbps(const GpuModel& g) {
    backend::Backend& be = *g.backend();
    const int64_t cols = 4096, rows = (int64_t(64) << 20) / (cols * int64_t(sizeof(float)));
    const size_t bytes = size_t(rows * cols) * sizeof(float);
    const auto a = be.alloc(bytes), b = be.alloc(bytes);
    const backend::Tensor ta{a.get(), 0, TensorType::F32, rows, cols, size_t(cols) * sizeof(float)},
        tb{b.get(), 0, TensorType::F32, rows, cols, size_t(cols) * sizeof(float)};
    const int copies = 8;
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < copies; i++) i % 2 ? be.copy(tb, ta) : be.copy(ta, tb);
        be.sync();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0 && s > 0) best = std::max(best, 2.0 * double(bytes) * copies / s / 1e9);
    }
    return best;
}

GpuLayers parse_gpu_layers(const std::string& v, const char* flag) {
    GpuLayers g;
    g.given = true;
    if (v == "all") g.all = true;
    else if (v == "auto" || v == "-1") g.automatic = true;
    else {
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || n < 0 || n > 1000000)
            throw Error(strprintf("%s: '%s' is not a layer count, 'auto' or 'all'", flag, v.c_str()));
        g.n = int(n);
    }
    return g;
}

int parse_gpu_device(const std::string& value) {
    const std::string v = value.substr(0, value.find(','));
    if (v == "none" || v == "cpu" || v == "CPU") return -1;
    std::string digits = v;
    if (digits.rfind("Vulkan", 0) == 0) digits = digits.substr(6);
    char* end = nullptr;
    const long n = std::strtol(digits.c_str(), &end, 10);
    if (digits.empty() || *end || n < 0)
        throw Error("--device '" + value + "': not a device (none, VulkanN or N: tandem --list-devices)");
    return int(n);
}

GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuFlags& flags, bool draft, size_t cache_bytes) {
    return choose_gpu(model, flags.layers(draft), flags.device_for(draft), cache_bytes, draft ? "draft" : "target");
}

GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuLayers& ngl, int device, size_t cache_bytes,
                     const char* what) {
    GpuChoice c;
    if (!ngl.given || device == -1) return c;
    const int L = model->hparams().n_layer;
    if (!ngl.all && !ngl.automatic && ngl.n == 0) {
        c.log = strprintf("%s: -ngl 0: every layer on the CPU", what);
        return c;
    }
    auto cpu = [&](const std::string& why) {
        c.log = strprintf("warning: %s: %s: every layer runs on the CPU", what, why.c_str());
        c.warning = true;
        return c;
    };
    if (const std::string why = gpu_unsupported(*model); !why.empty()) return cpu("not on a GPU: " + why);
    const std::vector<GpuDevice> devs = gpu_devices();
    if (devs.empty())
        return cpu(built_with_vulkan() ? "no usable GPU (no Vulkan device found: tandem --list-devices)"
                                       : "no usable GPU (this build has no Vulkan backend)");
    const int index = device < 0 ? 0 : device;
    if (index >= int(devs.size()))
        throw Error(strprintf("device %d does not exist (%zu found: tandem --list-devices)", index, devs.size()));
    const GpuDevice& d = devs[size_t(index)];
    if (!ngl.all && !ngl.automatic && ngl.n < L)
        return cpu(
            strprintf("-ngl %d of %d layers: a model split between the GPU and the CPU is not built yet "
                      "(-ngl %d or all puts every layer on %s)",
                      ngl.n, L, L + 1, d.name.c_str()));
    const size_t need = model->weights_bytes() + cache_bytes;
    if (d.memory_bytes > 0 && need > d.memory_bytes) {
        const std::string why = strprintf("%.0f MiB of weights and %.0f MiB of cache do not fit %s's %.0f MiB",
                                          model->weights_bytes() / 1048576.0, cache_bytes / 1048576.0, d.name.c_str(),
                                          d.memory_bytes / 1048576.0);
        if (ngl.automatic) return cpu(why);
        throw Error(std::string(what) + ": " + why + " (-ngl auto or 0 runs it on the CPU; -c smaller takes less)");
    }
    try {
        c.gpu = place_on_gpu(model, index);
    } catch (const Error& e) {
        if (ngl.automatic) return cpu(e.what());
        throw;
    }
    const DeviceWeights& w = c.gpu->weights();
    c.log = strprintf("%s: GPU %s (%s, driver %s): %d of %d layers and the output, %.1f MiB of weights", what,
                      d.name.c_str(), d.type.c_str(), d.driver.c_str(), L, L, w.bytes() / 1048576.0);
    return c;
}

}  // namespace tandem
