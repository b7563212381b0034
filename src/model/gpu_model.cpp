#include "model/gpu_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "tandem/error.h"

namespace tandem {

static double copy_probe(backend::Backend& be);

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

std::string gpu_split_unsupported(const Model& m) {
    if (const std::string why = gpu_unsupported(m); !why.empty()) return why;
    const HParams& hp = m.hparams();
    if (m.mtp()) return "a model with a multi-token-prediction block is not split between the CPU and a GPU yet";
    if (hp.n_embd_per_layer > 0) return "per-layer embeddings (gemma4) are not split between the CPU and a GPU yet";
    for (int l = 0; l < hp.n_layer; l++) {
        if (m.layer(l).recurrent) return "Gated DeltaNet layers' states are not split between the CPU and a GPU yet";
        if (m.layer(l).kv_from >= 0) return "shared-KV layers (gemma4) are not split between the CPU and a GPU yet";
    }
    return "";
}

GpuModel::GpuModel(std::shared_ptr<const Model> model, int device, int layers) : model_(std::move(model)) {
    if (const std::string why = gpu_unsupported(*model_); !why.empty())
        throw Error(model_->path() + ": not on a GPU: " + why);
    const int L = model_->hparams().n_layer;
    first_layer_ = layers < 0 || layers >= L ? 0 : L - layers;
    if (first_layer_ > 0)
        if (const std::string why = gpu_split_unsupported(*model_); !why.empty())
            throw Error(model_->path() + ": -ngl " + std::to_string(layers) + ": " + why);
    const std::vector<GpuDevice> devs = gpu_devices();
    if (devs.empty())
        throw Error("no GPU: " +
                    std::string(built_with_vulkan() ? "no Vulkan device found" : "this build has no Vulkan backend"));
    if (device >= int(devs.size()))
        throw Error(strprintf("GPU device %d does not exist (%zu found: tandem --list-devices)", device, devs.size()));
    device_ = devs[size_t(device < 0 ? 0 : device)];
    be_ = backend::make_vulkan_backend(device_.index);
    weights_ = std::make_unique<DeviceWeights>(*be_, *model_, first_layer_);
}

std::shared_ptr<const GpuModel> place_on_gpu(std::shared_ptr<const Model> model, int device, int layers) {
    return std::make_shared<const GpuModel>(std::move(model), device, layers);
}

GpuPlacementInfo gpu_placement_info(const GpuModel& g) {
    const int L = g.model().hparams().n_layer;
    return {g.device().name,
            g.device().driver,
            g.weights().bytes(),
            g.weights().matrices(),
            g.backend()->name(),
            L - g.first_layer(),
            L};
}

double gpu_copy_probe_gbps(const GpuModel& g) {
    try {
        return copy_probe(*g.backend());
    } catch (const GpuFailure& e) {
        if (e.lost) throw;
        return 0;  // no room left for the probe's buffers (the model and its caches took the device): not measured
    }
}

static double copy_probe(backend::Backend& be) {
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

GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuFlags& flags, bool draft, size_t cache_bytes,
                     const std::shared_ptr<const GpuModel>& beside, size_t cache_beside) {
    const int device = flags.device_for(draft);
    const bool same = beside && beside->device().index == (device < 0 ? 0 : device);
    size_t taken = 0;
    if (same) {  // its weights there, its GPU layers' share of its caches, its pass's scratch
        const int L = beside->model().hparams().n_layer;
        taken = beside->weights().bytes() + size_t(double(cache_beside) * (L - beside->first_layer()) / L) +
                gpu_scratch_bytes(beside->model());
    }
    return choose_gpu(model, flags.layers(draft), device, cache_bytes, draft ? "draft" : "target", taken);
}

size_t gpu_scratch_bytes(const Model& m, int n_batch) {
    const HParams& hp = m.hparams();
    int qd = 0, kvd = 0;
    for (int l = 0; l < hp.n_layer; l++) {
        qd = std::max(qd, m.layer(l).n_head * m.layer(l).head_dim);
        kvd = std::max(kvd, m.layer(l).n_head_kv * m.layer(l).head_dim);
    }
    const size_t ff = std::max(size_t(hp.n_ff), size_t(hp.n_ff_exp) * size_t(std::max(1, hp.n_expert_used)));
    const size_t per_row = 4 * size_t(hp.n_embd) + 3 * size_t(qd) + 2 * size_t(kvd) + 3 * ff;
    return (size_t(n_batch) * per_row + 16 * size_t(hp.n_vocab)) * sizeof(float);
}

GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuLayers& ngl, int device, size_t cache_bytes,
                     const char* what, size_t taken) {
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
    // The GPU's part with k layers on it (the last k, and the output): its weights and its layers' share of the
    // caches (every layer's rows are the same size but for sliding-window layers: a share is close enough here).
    const std::string split_why = gpu_split_unsupported(*model);
    auto weights_for = [&](int k) { return DeviceWeights::bytes_for(*model, L - k); };
    const size_t scratch = gpu_scratch_bytes(*model);
    auto need_for = [&](int k) { return weights_for(k) + size_t(double(cache_bytes) * k / L) + scratch + taken; };
    auto fits = [&](int k) { return d.memory_bytes == 0 || need_for(k) <= d.memory_bytes; };
    int layers = ngl.all || ngl.automatic || ngl.n >= L ? L : ngl.n;
    if (layers < L && !split_why.empty())
        return cpu(strprintf("-ngl %d of %d layers: %s (-ngl %d or all puts every layer on %s)", ngl.n, L,
                             split_why.c_str(), L + 1, d.name.c_str()));
    if (!fits(layers)) {
        const std::string why = strprintf(
            "%.0f MiB of weights, %.0f MiB of cache for %d layers and %.0f MiB of pass scratch%s do not fit %s's %.0f "
            "MiB",
            weights_for(layers) / 1048576.0, double(cache_bytes) * layers / L / 1048576.0, layers, scratch / 1048576.0,
            taken ? strprintf(" beside the %.0f MiB the target takes", taken / 1048576.0).c_str() : "", d.name.c_str(),
            d.memory_bytes / 1048576.0);
        if (!ngl.automatic) {
            throw Error(std::string(what) + ": " + why + " (fewer layers with -ngl N or auto; -c smaller takes less)");
        }
        if (!split_why.empty()) return cpu(why + "; " + split_why);
        while (layers > 0 && !fits(layers)) layers--;  // auto: as many of the last layers as fit (llama.cpp's -fit)
        if (layers == 0) return cpu(why);
    }
    // auto: a device that refuses the memory it reported free (another process took it) gets fewer layers, a
    // quarter fewer a try, while the model can split
    std::string refused;
    for (;;) {
        try {
            c.gpu = place_on_gpu(model, index, layers);
            break;
        } catch (const GpuFailure& e) {
            if (!ngl.automatic) throw;
            if (e.lost || !split_why.empty() || layers <= 1) return cpu(e.what());
            refused = strprintf(" (%d layers did not fit after all: %s)", layers, e.what());
            layers = std::min(layers - 1, layers * 3 / 4);
        } catch (const Error& e) {
            if (ngl.automatic) return cpu(e.what());
            throw;
        }
    }
    const DeviceWeights& w = c.gpu->weights();
    c.log =
        strprintf("%s: GPU %s (%s, driver %s): %d of %d layers and the output, %.1f MiB of weights%s", what,
                  d.name.c_str(), d.type.c_str(), d.driver.c_str(), layers, L, w.bytes() / 1048576.0, refused.c_str());
    if (layers < L)
        c.log += strprintf("; layers 0..%d and the token embedding on the CPU (each pass hands its rows over once)",
                           L - layers - 1);
    return c;
}

}  // namespace tandem
