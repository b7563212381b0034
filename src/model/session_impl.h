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

// A model split between the CPU and a GPU (GpuModel::first_layer() > 0): the CPU's part of a session's passes, the
// token embedding and the cache layers below the split (n_layers of them), on a CPU backend of its own, with its
// own scratch and RoPE tables (forward.cpp hands the rows over to the GPU's part once per pass).
struct LowerStage {
    std::shared_ptr<backend::Backend> be;
    int n_layers = 0;
    PassScratch pass;
    RopeTable rope[2];
    // the stage of a session whose cache layers are layer0.. (of n) on `gpu`, or null when none runs on the CPU
    static std::unique_ptr<LowerStage> make(ThreadPool& pool, const GpuModel* gpu, int layer0, int n) {
        const int below = gpu ? std::clamp(gpu->first_layer() - layer0, 0, n) : 0;
        if (below == 0) return nullptr;
        auto s = std::make_unique<LowerStage>();
        s->be = backend::make_cpu_backend(pool);
        s->n_layers = below;
        return s;
    }
};

struct Session::Impl {
    // What runs this session's passes and holds its cache: the CPU's backend (one per session), or a GPU's, shared
    // with every session of the model on that device together with the model's weights there (model/gpu_model.h)
    std::shared_ptr<backend::Backend> be;
    std::shared_ptr<const GpuModel> gpu;  // null on the CPU
    std::unique_ptr<LowerStage> lower;  // a split model's CPU part (null: the whole pass on `be`)
    KvCache kv;
    PassScratch pass;
    std::vector<float> xfer;  // rows through host memory: a split model's exchange, a drafter's kept inputs
    // the EAGLE-3 head's and the Gemma 4 assistant's passes' host arrays (they run on the CPU's backend)
    std::vector<float> x, xn, q, k, v, att, rows_out, logits_tmp, mtp_in;
    // Gated DeltaNet layers (null: none): their state per position, each layer's offset in a state; gated
    // attention's raw [q | gate] rows and gates
    std::unique_ptr<RecurrentState> rec;
    std::vector<size_t> rec_off;
    std::vector<float> qg;
    double attn_s = 0;  // seconds spent in attention, all passes (Session::attention_seconds)
    std::vector<int> assist_kv;  // a Gemma 4 assistant: the target's cache layer each of its layers reads
    RopeTable rope[2];  // [0] global layers, [1] sliding-window layers (HParams::n_swa > 0)
    Impl(ThreadPool& pool, std::shared_ptr<const GpuModel> on_gpu, int n_ctx, const std::vector<KvLayer>& layers,
         TensorType tk, TensorType tv, bool v_is_k, int layer0)
        : be(on_gpu ? on_gpu->backend() : std::shared_ptr<backend::Backend>(backend::make_cpu_backend(pool))),
          gpu(std::move(on_gpu)),
          lower(LowerStage::make(pool, gpu.get(), layer0, int(layers.size()))),
          kv(*be, n_ctx, layers, tk, tv, v_is_k, lower ? lower->be.get() : nullptr, lower ? lower->n_layers : 0) {}
    // the model's weights as this session's backend reads them
    ModelTensors tensors() const { return {be->host_memory(), gpu ? &gpu->weights() : nullptr}; }
};

}  // namespace tandem
