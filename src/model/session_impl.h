// A Session's private state: its backend, cache, recurrent state, RoPE tables and the pass's scratch; shared by
// the session (session.cpp), the forward pass (forward.cpp, assistant.cpp, eagle3.cpp) and state files
// (session_state.cpp).
#pragma once
#include <memory>
#include <vector>

#include "model/delta_net.h"
#include "model/ffn.h"
#include "model/kv_cache.h"
#include "model/mla.h"
#include "model/per_layer_embd.h"
#include "model/recurrent_state.h"
#include "model/rope.h"
#include "tandem/session.h"

namespace tandem {

struct Session::Impl {
    std::unique_ptr<backend::Backend> be;  // what runs this session's passes and holds its cache (the CPU's)
    KvCache kv;
    // scratch, sized for n_batch tokens
    std::vector<float> x, xn, q, k, v, att, rows_out, logits_tmp, attn_scratch, mtp_in, mla_v, heads_q, heads_o;
    PerLayerScratch ple;  // gemma4's per-layer embeddings of the pass's rows, its scratch
    FfnScratch ffn;
    MlaScratch mla;
    // Gated DeltaNet layers (null: none): their state per position, each layer's offset in a state, scratch; gated
    // attention's raw [q | gate] rows and gates
    std::unique_ptr<RecurrentState> rec;
    std::vector<size_t> rec_off;
    DeltaNetScratch dn;
    std::vector<float> qg, gate;
    double attn_s = 0;  // seconds spent in attention, all passes (Session::attention_seconds)
    std::vector<int> assist_kv;  // a Gemma 4 assistant: the target's cache layer each of its layers reads
    RopeTable rope[2];  // [0] global layers, [1] sliding-window layers (HParams::n_swa > 0)
    Impl(ThreadPool& pool, int n_ctx, const std::vector<KvLayer>& layers, TensorType tk, TensorType tv, bool v_is_k)
        : be(backend::make_cpu_backend(pool)), kv(*be, n_ctx, layers, tk, tv, v_is_k) {}
};

}  // namespace tandem
