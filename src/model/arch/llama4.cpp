// Llama 4 (llama.cpp's llama4): chunked attention with RoPE in three of every four layers, the fourth global
// without RoPE and with a temperature; experts every interleave_moe_layer_step layers, one chosen by logit and
// weighted by its sigmoid on the expert's input, beside a shared expert.
#include "model/arch/loader.h"

namespace tandem {

void llama4_features(ArchLoad& a) {
    // Three of every four layers (il % 4 < 3, or the file's sliding_window_pattern) attend within chunks of 8192
    // positions with RoPE, and the fourth attends globally without RoPE, its queries sharpened beyond each 8192
    // positions (temperature 0.1, offset 1) — the sizes llama.cpp fixes, whatever the file's sliding_window says —
    // unless the file sets attention.sliding_window to 0: then no chunks, and only the last layer is NoPE
    // (llama.cpp's n_no_rope_layer_step = n_layer; it has no temperature for such files). The RoPE layers' q/k heads
    // are L2-normed after RoPE (not the 128-expert model, as llama.cpp: llama4_routing).
    HParams& hp = a.hp;
    const auto w = a.f.get_int(a.arch + ".attention.sliding_window");
    a.nope_step = hp.n_layer;
    a.swa_fixed = true;
    a.experts = true;
    if (!(w && *w == 0)) {
        hp.n_swa = 8192;
        hp.swa_chunked = true;
        a.swa_pattern = a.L.opt_int("attention.sliding_window_pattern", 4);
        hp.rope_theta_swa = a.L.opt_float("rope.freq_base_swa", hp.rope_theta);
        hp.rope_freq_scale_swa = hp.rope_freq_scale;
        hp.attn_temp_scale = 0.1f;
        hp.attn_temp_span = 8192;
        hp.attn_temp_offset = 1.0f;
        hp.attn_temp_nope_only = true;
        a.nope_step = 4;
    }
}

void llama4_routing(ArchLoad& a) {  // sigmoid weights of the top k by logit, on the experts' input; a shared expert
    HParams& hp = a.hp;
    hp.moe_gating = MoeGating::SIGMOID;
    hp.moe_weight_before_ffn = true;
    hp.n_expert_shared = 1;
    hp.n_moe_layer_step = a.L.opt_int("interleave_moe_layer_step", 1);
    if (hp.n_moe_layer_step < 1 || hp.n_moe_layer_step > hp.n_layer)
        a.L.fail(strprintf("interleave_moe_layer_step %d is invalid", hp.n_moe_layer_step));
    hp.qk_l2_norm = hp.n_expert != 128;  // as llama.cpp: Llama 4 Maverick has none
}

}  // namespace tandem
