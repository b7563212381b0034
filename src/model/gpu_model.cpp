#include "model/gpu_model.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>

#include "tandem/error.h"
#include "tandem/split.h"

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
    if (hp.n_embd_per_layer > 0)
        return "per-layer embeddings (gemma4) are not split yet (between the CPU and a GPU, or over GPUs)";
    for (int l = 0; l < hp.n_layer; l++) {
        if (m.layer(l).kv_from >= 0)
            return "shared-KV layers (gemma4) are not split yet (between the CPU and a GPU, or over GPUs)";
    }
    return "";
}

std::vector<int> gpu_layer_split(const Model& m, int first_layer, int n, const std::vector<float>& shares) {
    const int L = m.hparams().n_layer, k = L - first_layer;
    if (n < 1 || k < n)
        throw Error(strprintf("%d layers on the GPUs cannot be split over %d devices (each takes at least one)", k, n));
    // the output head's bytes in layers' worth: the last part's share holds it too (split_layers counts it on its
    // first rank: the parts are split in reverse)
    const size_t out = DeviceWeights::bytes_for(m, {L, L, true});
    const size_t layers = DeviceWeights::bytes_for(m, {first_layer, L, false}) -
                          (first_layer == 0 ? DeviceWeights::bytes_for(m, {0, 0, false}) : 0);  // (less the embedding)
    const double extra = layers > 0 ? double(out) * k / double(layers) : 0;
    const std::vector<float> rev(shares.rbegin(), shares.rend());
    const std::vector<int> r = split_layers(k, n, rev, extra);  // reversed parts' starts, from 0
    std::vector<int> starts(size_t(n) + 1);
    for (int i = 0; i <= n; i++) starts[size_t(i)] = first_layer + (k - r[size_t(n - i)]);
    return starts;
}

GpuModel::GpuModel(std::shared_ptr<const Model> model, const std::vector<int>& devices, int layers,
                   const std::vector<float>& shares)
    : model_(std::move(model)) {
    if (const std::string why = gpu_unsupported(*model_); !why.empty())
        throw Error(model_->path() + ": not on a GPU: " + why);
    TD_ASSERT(!devices.empty());
    if (!shares.empty() && shares.size() != devices.size())
        throw Error(strprintf("%zu shares for %zu devices", shares.size(), devices.size()));
    const int L = model_->hparams().n_layer;
    const int first_layer = layers < 0 || layers >= L ? 0 : L - layers;
    if (first_layer > 0 || devices.size() > 1)
        if (const std::string why = gpu_split_unsupported(*model_); !why.empty())
            throw Error(model_->path() + ": " +
                        (first_layer > 0 ? "-ngl " + std::to_string(layers) : std::string("a split over GPUs")) + ": " +
                        why);
    const std::vector<GpuDevice> devs = gpu_devices();
    if (devs.empty())
        throw Error("no GPU: " +
                    std::string(built_with_vulkan() ? "no Vulkan device found" : "this build has no Vulkan backend"));
    for (int d : devices)
        if (d >= int(devs.size()))
            throw Error(strprintf("GPU device %d does not exist (%zu found: tandem --list-devices)", d, devs.size()));
    const std::vector<int> starts = gpu_layer_split(*model_, first_layer, int(devices.size()), shares);
    parts_.resize(devices.size());
    for (size_t i = 0; i < devices.size(); i++) {
        Part& p = parts_[i];
        const bool last = i + 1 == devices.size();
        p.device = devs[size_t(devices[i] < 0 ? 0 : devices[i])];
        p.span = {starts[i], last ? INT_MAX : starts[i + 1], last};
        p.be = backend::make_vulkan_backend(p.device.index);
        p.weights = std::make_unique<DeviceWeights>(*p.be, *model_, p.span);
    }
}

size_t GpuModel::weight_bytes() const {
    size_t b = 0;
    for (const Part& p : parts_) b += p.weights->bytes();
    return b;
}

size_t GpuModel::bytes_on(int index) const {
    size_t b = 0;
    for (const Part& p : parts_) b += p.device.index == index ? p.weights->bytes() : 0;
    return b;
}

std::shared_ptr<const GpuModel> place_on_gpu(std::shared_ptr<const Model> model, int device, int layers) {
    return std::make_shared<const GpuModel>(std::move(model), std::vector<int>{device}, layers);
}

std::shared_ptr<const GpuModel> place_on_gpus(std::shared_ptr<const Model> model, const std::vector<int>& devices,
                                              int layers, const std::vector<float>& shares) {
    if (devices.empty()) throw Error("place_on_gpus: no device given");
    return std::make_shared<const GpuModel>(std::move(model), devices, layers, shares);
}

GpuPlacementInfo gpu_placement_info(const GpuModel& g) {
    const int L = g.model().hparams().n_layer;
    GpuPlacementInfo info{
        g.device().name, g.device().driver, g.weight_bytes(), 0, g.backend()->name(), L - g.first_layer(), L, {}};
    for (const GpuModel::Part& p : g.parts()) {
        info.matrices += p.weights->matrices();
        info.parts.push_back({p.device.index, p.device.name, p.span.first, p.span.last ? L : p.span.end,
                              p.weights->bytes(), p.span.last});
    }
    return info;
}

std::string gpu_parts_text(const GpuPlacementInfo& g) {
    std::string s;
    for (const GpuPartInfo& p : g.parts)
        s += strprintf("%s%s%s on Vulkan%d (%.1f MiB)", s.empty() ? "" : ", ",
                       p.end - p.first == 1 ? strprintf("layer %d", p.first).c_str()
                                            : strprintf("layers %d..%d", p.first, p.end - 1).c_str(),
                       p.output ? " and the output" : "", p.index, p.weight_bytes / 1048576.0);
    return s;
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

std::vector<int> parse_gpu_devices(const std::string& value) {
    if (value == "none" || value == "cpu" || value == "CPU") return {-1};
    std::vector<int> out;
    size_t at = 0;
    for (;;) {
        const size_t comma = value.find(',', at);
        std::string digits = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (digits.rfind("Vulkan", 0) == 0) digits = digits.substr(6);
        char* end = nullptr;
        const long n = std::strtol(digits.c_str(), &end, 10);
        if (digits.empty() || *end || n < 0 || n > 1024)
            throw Error("--device '" + value + "': not a device list (none, or VulkanN or N, comma-separated: tandem " +
                        "--list-devices)");
        out.push_back(int(n));
        if (comma == std::string::npos) return out;
        at = comma + 1;
    }
}

int parse_gpu_device(const std::string& value) { return parse_gpu_devices(value)[0]; }

GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuFlags& flags, bool draft, size_t cache_bytes,
                     const std::shared_ptr<const GpuModel>& beside, size_t cache_beside) {
    const std::vector<int> devices = flags.devices_for(draft);
    const int device = devices.empty() ? 0 : std::max(0, devices[0]);
    size_t taken = 0;
    if (beside && beside->bytes_on(device) > 0) {  // its weights there, its layers' share of its caches, its scratch
        const int L = beside->model().hparams().n_layer;
        int layers_there = 0;
        for (const GpuModel::Part& p : beside->parts())
            if (p.device.index == device) layers_there += (p.span.last ? L : p.span.end) - p.span.first;
        taken = beside->bytes_on(device) + size_t(double(cache_beside) * layers_there / L) +
                gpu_scratch_bytes(beside->model());
    }
    GpuChoice c = choose_gpu(model, flags.layers(draft), devices, cache_bytes, draft ? "draft" : "target", taken,
                             draft ? std::vector<float>{} : flags.shares);
    if (!draft && flags.row_asked && c.gpu && c.gpu->parts().size() > 1)
        c.log += " (-sm row: a row split over GPUs is not built; the layers are split)";
    return c;
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

GpuChoice choose_gpu(const std::shared_ptr<const Model>& model, const GpuLayers& ngl, const std::vector<int>& asked,
                     size_t cache_bytes, const char* what, size_t taken, const std::vector<float>& shares) {
    GpuChoice c;
    if (!ngl.given || (asked.size() == 1 && asked[0] == -1)) return c;
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
    // The devices, in the split's order: as asked, else every one of the best one's kind (llama.cpp's default);
    // each one's share of the layers: -ts (a device of share 0 takes none), else its memory (llama.cpp's default)
    std::vector<int> devices = asked;
    if (devices.empty())
        for (const GpuDevice& d : devs)
            if (d.type == devs[0].type) devices.push_back(d.index);
    for (int d : devices)
        if (d < 0 || d >= int(devs.size()))
            throw Error(strprintf("device %d does not exist (%zu found: tandem --list-devices)", d, devs.size()));
    std::vector<float> w;
    if (!shares.empty() && devices.size() > 1) {
        if (shares.size() > devices.size())
            throw Error(strprintf("-ts gives %zu shares for %zu devices", shares.size(), devices.size()));
        std::vector<int> kept;
        for (size_t i = 0; i < shares.size(); i++)  // (devices beyond the list get none, as llama.cpp)
            if (shares[i] > 0) {
                kept.push_back(devices[i]);
                w.push_back(shares[i]);
            }
        if (kept.empty()) throw Error("-ts gives no device a share");
        devices = kept;
    } else if (devices.size() > 1) {
        for (int d : devices) w.push_back(float(double(devs[size_t(d)].memory_bytes) / 1048576.0));
        if (std::find(w.begin(), w.end(), 0.0f) != w.end()) w.clear();  // a size unknown: equal shares
    }
    const std::string split_why = gpu_split_unsupported(*model);
    std::string one_device;  // why a split over several devices was not made
    if (devices.size() > 1 && !split_why.empty()) {
        one_device = strprintf(" (not split over %zu devices: %s)", devices.size(), split_why.c_str());
        devices.resize(1);
        w.clear();
    }
    int layers = ngl.all || ngl.automatic || ngl.n >= L ? L : ngl.n;
    if (layers < L && !split_why.empty())
        return cpu(strprintf("-ngl %d of %d layers: %s (-ngl %d or all puts every layer on %s)", ngl.n, L,
                             split_why.c_str(), L + 1, devs[size_t(devices[0])].name.c_str()));
    // The devices that take k layers (each takes one at least: with fewer layers than devices, those of the largest
    // shares, the later on a tie, in their order) and their shares
    auto chosen = [&](int k) {
        std::vector<size_t> idx(devices.size());
        for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
        if (size_t(k) < idx.size()) {
            std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
                const float wa = w.empty() ? 1.0f : w[a], wb = w.empty() ? 1.0f : w[b];
                return wa != wb ? wa > wb : a > b;
            });
            idx.resize(size_t(k));
            std::sort(idx.begin(), idx.end());
        }
        return idx;
    };
    auto devices_for = [&](int k) {
        std::vector<int> out;
        for (size_t i : chosen(k)) out.push_back(devices[i]);
        return out;
    };
    auto shares_for = [&](int k) {
        std::vector<float> out;
        if (!w.empty())
            for (size_t i : chosen(k)) out.push_back(w[i]);
        return out;
    };
    // The parts with k layers on the GPUs (the last k, and the output): each device's weights and its layers' share
    // of the caches (every layer's rows are the same size but for sliding-window layers: a share is close enough)
    // against its memory; "" when they fit, else what does not
    const size_t scratch = gpu_scratch_bytes(*model);
    auto misfit = [&](int k) -> std::string {
        const std::vector<int> ds = devices_for(k);
        const std::vector<int> starts = gpu_layer_split(*model, L - k, int(ds.size()), shares_for(k));
        std::vector<size_t> weights(devs.size()), cache(devs.size()), other(devs.size()), scratches(devs.size());
        std::vector<int> n_layers(devs.size());
        for (size_t i = 0; i < ds.size(); i++) {
            const bool last = i + 1 == ds.size();
            const size_t d = size_t(ds[i]);
            weights[d] += DeviceWeights::bytes_for(*model, {starts[i], last ? INT_MAX : starts[i + 1], last});
            n_layers[d] += starts[i + 1] - starts[i];
            cache[d] += size_t(double(cache_bytes) * (starts[i + 1] - starts[i]) / L);
            other[d] += scratch + (i == 0 ? taken : 0);
            scratches[d] += scratch;
        }
        for (int d : ds) {
            const GpuDevice& dev = devs[size_t(d)];
            const size_t D = size_t(d);
            if (dev.memory_bytes == 0 || weights[D] + cache[D] + other[D] <= dev.memory_bytes) continue;
            return strprintf(
                "%.0f MiB of weights, %.0f MiB of cache for %d layers and %.0f MiB of pass scratch%s do not fit "
                "%s's %.0f MiB%s",
                weights[D] / 1048576.0, cache[D] / 1048576.0, n_layers[D], scratches[D] / 1048576.0,
                taken && d == ds[0] ? strprintf(" beside the %.0f MiB the target takes", taken / 1048576.0).c_str()
                                    : "",
                dev.name.c_str(), dev.memory_bytes / 1048576.0,
                ds.size() > 1 ? strprintf(" (its part of %d layers over %zu devices)", k, ds.size()).c_str() : "");
        }
        return "";
    };
    if (const std::string why = misfit(layers); !why.empty()) {
        if (!ngl.automatic) {
            throw Error(std::string(what) + ": " + why +
                        " (fewer layers with -ngl N or auto; -c smaller takes less; -ts shares them out otherwise)");
        }
        if (!split_why.empty()) return cpu(why + "; " + split_why);
        while (layers > 0 && !misfit(layers).empty()) layers--;  // auto: as many of the last layers as fit
        if (layers == 0) return cpu(why);
    }
    // auto: a device that refuses the memory it reported free (another process took it) gets fewer layers, a
    // quarter fewer a try, while the model can split
    std::string refused;
    for (;;) {
        try {
            c.gpu = place_on_gpus(model, devices_for(layers), layers, shares_for(layers));
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
    const GpuPlacementInfo info = gpu_placement_info(*c.gpu);
    const GpuDevice& d = c.gpu->device();
    if (info.parts.size() == 1)
        c.log = strprintf("%s: GPU %s (%s, driver %s): %d of %d layers and the output, %.1f MiB of weights%s%s", what,
                          d.name.c_str(), d.type.c_str(), d.driver.c_str(), layers, L, info.weight_bytes / 1048576.0,
                          refused.c_str(), one_device.c_str());
    else {
        std::string names;  // each device once: Vulkan0 name (type, driver), ...
        std::vector<int> named;
        for (const GpuPartInfo& p : info.parts) {
            if (std::find(named.begin(), named.end(), p.index) != named.end()) continue;
            named.push_back(p.index);
            const GpuDevice& pd = devs[size_t(p.index)];
            names += strprintf("%sVulkan%d %s (%s, driver %s)", names.empty() ? "" : ", ", p.index, pd.name.c_str(),
                               pd.type.c_str(), pd.driver.c_str());
        }
        c.log = strprintf("%s: %zu parts on GPUs %s: %d of %d layers split by layers: %s; %.1f MiB of weights%s", what,
                          info.parts.size(), names.c_str(), layers, L, gpu_parts_text(info).c_str(),
                          info.weight_bytes / 1048576.0, refused.c_str());
    }
    if (layers < L)
        c.log += strprintf("; layers 0..%d and the token embedding on the CPU (each pass hands its rows over once)",
                           L - layers - 1);
    return c;
}

}  // namespace tandem
