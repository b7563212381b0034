// A Session's private state: its backend, cache, recurrent state, RoPE tables and the pass's scratch; shared by
// the session (session.cpp), the forward pass (forward.cpp, assistant.cpp, eagle3.cpp) and state files
// (session_state.cpp).
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "model/delta_net.h"
#include "model/ffn.h"
#include "model/gpu_model.h"
#include "model/kv_cache.h"
#include "model/mla.h"
#include "model/pass_tensors.h"
#include "model/per_layer_embd.h"
#include "model/recurrent_state.h"
#include "model/rope.h"
#include "tandem/session.h"

namespace tandem {

// The forward pass's scratch arrays on one backend (model/forward.cpp), its buffers: the pass's rows and its blocks'
// (FFN and mixture, MLA, Gated DeltaNet, gemma4's per-layer inputs)
struct PassScratch {
    Scratch x, xn, q, k, v, att, rows_out, logits, mtp_in, mla_v, qg, gate, hidden;
    FfnScratch ffn;
    MlaScratch mla;
    DeltaNetScratch dn;
    PerLayerScratch ple;
};

// A stage of a split model's pass other than its last (the session's own backend, which holds the output): the
// CPU's part of a model split between the CPU and GPUs (GpuModel::first_layer() > 0, on a CPU backend of the
// session's own), or a GPU's part but the last of a model split over several GPUs (the part's backend, shared by the
// model's sessions). Each has its backend, the session's cache layers before `end` that no earlier stage runs, the
// weights it reads there (null: host memory), and its own scratch and RoPE tables; forward.cpp runs the stages in
// order and hands the rows from each to the next once per pass. The first stage embeds the tokens.
struct Stage {
    std::shared_ptr<backend::Backend> be;
    const DeviceWeights* weights = nullptr;
    int end = 0;
    PassScratch pass;
    RopeTable rope[2];
    ModelTensors tensors() const { return {be->host_memory(), weights}; }
    // The stages before the last of a session whose cache layers are layer0.. (of n) on `gpu` (none without one):
    // parts of no layer of the session's are left out (an MTP session's one layer is the last part's).
    static std::vector<std::unique_ptr<Stage>> make(ThreadPool& pool, const GpuModel* gpu, int layer0, int n) {
        std::vector<std::unique_ptr<Stage>> out;
        if (!gpu) return out;
        auto add = [&](std::shared_ptr<backend::Backend> be, const DeviceWeights* w, int end_layer) {
            const int end = std::clamp(end_layer - layer0, 0, n);
            if (end <= (out.empty() ? 0 : out.back()->end)) return;
            out.push_back(std::make_unique<Stage>());
            out.back()->be = std::move(be);
            out.back()->weights = w;
            out.back()->end = end;
        };
        if (gpu->first_layer() > layer0) add(backend::make_cpu_backend(pool), nullptr, gpu->first_layer());
        const auto& parts = gpu->parts();
        for (size_t i = 0; i + 1 < parts.size(); i++) add(parts[i].be, parts[i].weights.get(), parts[i].span.end);
        return out;
    }
    static std::vector<KvPart> kv_parts(const std::vector<std::unique_ptr<Stage>>& stages) {
        std::vector<KvPart> p;
        for (const auto& s : stages) p.push_back({s->be.get(), s->end});
        return p;
    }
};

struct Session::Impl {
    // What runs this session's passes (of a split model: its last stage, with the output) and holds its cache (of a
    // split model: its last stage's layers'): the CPU's backend (one per session), or a GPU's, shared with every
    // session of the model on that device together with the model's weights there (model/gpu_model.h)
    std::shared_ptr<backend::Backend> be;
    std::shared_ptr<const GpuModel> gpu;  // null on the CPU
    // a split model's stages before the last, in the pass's order (empty: the whole pass on `be`)
    std::vector<std::unique_ptr<Stage>> stages;
    KvCache kv;
    PassScratch pass;
    std::vector<float> xfer;  // rows through host memory: a split model's exchange, a drafter's kept inputs
    // the EAGLE-3 head's and the Gemma 4 assistant's passes' host arrays (they run on the CPU's backend)
    std::vector<float> x, xn, q, k, v, att, rows_out, logits_tmp, mtp_in;
    // Gated DeltaNet layers (null: none): their state per position, each layer's offset in its part's state; gated
    // attention's raw [q | gate] rows and gates
    std::unique_ptr<RecurrentStates> rec;
    std::vector<size_t> rec_off;
    std::vector<int> rec_part;  // each layer's part of rec (a split model's stages that run recurrent layers)
    std::vector<float> qg;
    double attn_s = 0;  // seconds spent in attention, all passes (Session::attention_seconds)
    std::vector<int> assist_kv;  // a Gemma 4 assistant: the target's cache layer each of its layers reads
    RopeTable rope[2];  // [0] global layers, [1] sliding-window layers (HParams::n_swa > 0)
    Impl(ThreadPool& pool, std::shared_ptr<const GpuModel> on_gpu, int n_ctx, const std::vector<KvLayer>& layers,
         TensorType tk, TensorType tv, bool v_is_k, int layer0)
        : be(on_gpu ? on_gpu->backend() : std::shared_ptr<backend::Backend>(backend::make_cpu_backend(pool))),
          gpu(std::move(on_gpu)),
          stages(Stage::make(pool, gpu.get(), layer0, int(layers.size()))),
          kv(*be, n_ctx, layers, tk, tv, v_is_k, Stage::kv_parts(stages)) {}
    // The stage that runs cache layer l: an index of `stages`, or stages.size() for the session's own
    size_t stage_of(int l) const {
        size_t i = 0;
        while (i < stages.size() && l >= stages[i]->end) i++;
        return i;
    }
    backend::Backend& stage_backend(size_t i) const { return i < stages.size() ? *stages[i]->be : *be; }
    PassScratch& stage_pass(size_t i) { return i < stages.size() ? stages[i]->pass : pass; }
    // the model's weights as this session's backend reads them
    ModelTensors tensors() const { return {be->host_memory(), gpu ? &gpu->weights() : nullptr}; }
};

}  // namespace tandem
