// The Gemma families: gemma3 (GEGLU, scaled embeddings, post-norms, five sliding-window layers of six) and gemma4
// (llama.cpp's gemma4: window and global layers of their own head sizes, shared-KV layers, per-layer embeddings,
// value norms, the 26B-A4B's experts beside a dense MLP) with its drafter, gemma4-assistant.
#include <cmath>

#include "model/arch/loader.h"

namespace tandem {

void gemma3_features(ArchLoad& a) {
    HParams& hp = a.hp;
    hp.has_qk_norm = hp.has_post_norms = true;
    hp.embd_scale = std::sqrt(float(hp.n_embd));
    hp.ffn_act = FfnAct::GELU_TANH;
    // llama.cpp (after gemma_pytorch): Gemma 3 27B (62 layers) scales queries by n_embd / n_head, not head_dim.
    if (hp.n_layer == 62) hp.q_scale = 1.0f / std::sqrt(float(hp.n_embd / hp.n_head));
    hp.logit_softcap = a.L.opt_float("final_logit_softcapping", 0.0f);
    a.swa_pattern = 6;  // every layer but each 6th (il % 6 < 5), unless the file's pattern says
    a.gemma_swa_rope = true;
}

void gemma4_attention(ArchLoad& a) {  // its sliding-window layers have their own head size and rotated dims
    HParams& hp = a.hp;
    const Loader& L = a.L;
    a.gemma4 = true;
    a.assistant = hp.arch == Arch::GEMMA4_ASSISTANT;
    a.max_head_dim = 512;  // its global layers' heads
    hp.head_dim_swa = L.req_int("attention.key_length_swa");
    hp.n_rot_swa = L.opt_int("rope.dimension_count_swa", hp.head_dim_swa);
    if (L.opt_int("attention.value_length_swa", hp.head_dim_swa) != hp.head_dim_swa)
        L.fail("attention.value_length_swa differs from key_length_swa (not supported)");
    if (hp.n_rot_swa > hp.head_dim_swa || hp.n_rot_swa % 2)
        L.fail(strprintf("rope.dimension_count_swa %d is invalid for head size %d", hp.n_rot_swa, hp.head_dim_swa));
}

void gemma4_features(ArchLoad& a) {  // Gemma 4 (llama.cpp's gemma4): gemma3's block with the differences below
    HParams& hp = a.hp;
    const Loader& L = a.L;
    hp.has_qk_norm = hp.has_post_norms = true;
    hp.embd_scale = std::sqrt(float(hp.n_embd));
    hp.ffn_act = FfnAct::GELU_TANH;
    hp.logit_softcap = L.opt_float("final_logit_softcapping", 0.0f);
    hp.q_scale = 1.0f;  // its q/k norms carry the scale
    hp.v_norm = true;
    hp.rope_freqs_global_only = true;
    // (an assistant shares its target's cache, whatever its file says)
    if (!a.assistant) hp.n_kv_shared = int(a.f.get_int(a.arch + ".attention.shared_kv_layers").value_or(0));
    hp.n_embd_per_layer = int(a.f.get_int(a.arch + ".embedding_length_per_layer_input").value_or(0));
    if (hp.n_kv_shared < 0 || hp.n_kv_shared > hp.n_layer - 2 || hp.n_embd_per_layer < 0 ||
        hp.n_embd_per_layer > (1 << 16))
        L.fail(strprintf("attention.shared_kv_layers %d / embedding_length_per_layer_input %d are invalid",
                         hp.n_kv_shared, hp.n_embd_per_layer));
    if (a.assistant) {  // no soft-capping, no per-layer inputs; the target's width from embedding_length_out
        hp.logit_softcap = 0;
        hp.n_embd_per_layer = 0;
        a.n_embd_target = L.req_int("embedding_length_out");
        if (a.n_embd_target == hp.n_embd)
            L.fail("a gemma4-assistant needs embedding_length_out: its target's hidden size");
    }
    // attention.sliding_window_pattern is one flag per layer (true: sliding window)
    const GgufValue* v = a.f.find(a.arch + ".attention.sliding_window_pattern");
    if (!v || v->type != GgufType::ARRAY || int(v->arr.size()) < hp.n_layer)
        L.fail("gemma4 needs attention.sliding_window_pattern: one flag per layer");
    for (int i = 0; i < hp.n_layer; i++) a.swa_layer.push_back(v->arr[size_t(i)].u != 0);
    a.swa_pattern = 1;  // the window, RoPE base and scale of read_windows
    if (!a.f.get_int(a.arch + ".attention.sliding_window"))
        L.fail("missing required metadata '" + a.arch + ".attention.sliding_window'");
    a.gemma_swa_rope = true;
    // the 26B-A4B's experts beside a dense MLP in every layer (ffn_dense_and_experts)
    a.experts = a.gemma4_experts = hp.arch == Arch::GEMMA4 && a.f.find(a.arch + ".expert_count");
}

void gemma4_routing(ArchLoad& a) { a.hp.expert_weights_norm = true; }

}  // namespace tandem
