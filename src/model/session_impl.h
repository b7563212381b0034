// A Session's private state, shared by the forward pass (forward.cpp) and state files (session_state.cpp).
#pragma once
#include <memory>
#include <vector>

#include "model/delta_net.h"
#include "model/ffn.h"
#include "model/kv_cache.h"
#include "model/mla.h"
#include "model/recurrent_state.h"
#include "model/rope.h"
#include "tandem/session.h"

namespace tandem {

struct Session::Impl {
    KvCache kv;
    // scratch, sized for n_batch tokens
    std::vector<float> x, xn, q, k, v, att, rows_out, logits_tmp, attn_scratch, mtp_in, mla_v, heads_q, heads_o;
    std::vector<float> ple, ple_gate, ple_out;  // gemma4's per-layer embeddings of the pass's rows, its scratch
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
    Impl(int n_ctx, const std::vector<KvLayer>& layers, TensorType tk, TensorType tv, bool v_is_k)
        : kv(n_ctx, layers, tk, tv, v_is_k) {}
};

}  // namespace tandem
