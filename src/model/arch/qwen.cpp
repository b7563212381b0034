// The Qwen families: qwen3 and qwen3moe (QK-norm; the MoE's weights renormalised), and Qwen3.5's hybrid layout
// (qwen35, qwen35moe) with Qwen3-Next's (qwen3next): Gated DeltaNet layers and gated attention. qwen2 (Q/K/V
// biases, which the file shows) has no hook.
#include "model/arch/loader.h"

namespace tandem {

void qwen3_features(ArchLoad& a) {
    a.hp.has_qk_norm = true;
    a.experts = a.hp.arch == Arch::QWEN3MOE;
}

void qwen3moe_routing(ArchLoad& a) { a.hp.expert_weights_norm = true; }  // llama.cpp's qwen3moe graph: norm_w

void qwen35_features(ArchLoad& a) {
    // Qwen3.5: Gated DeltaNet layers, and gated attention in every full_attention_interval-th layer (or as the
    // file's attention.recurrent_layers says). Its multimodal RoPE sections are read by llama.cpp with the same
    // position in every section for text, which is NEOX RoPE over n_rot dims: text-only here.
    HParams& hp = a.hp;
    const Loader& L = a.L;
    hp.has_qk_norm = true;
    a.ffn_norm_is_post_attn = true;
    a.experts = hp.arch == Arch::QWEN35MOE || hp.arch == Arch::QWEN3NEXT;
    hp.ssm_conv = L.req_int("ssm.conv_kernel");
    hp.ssm_state = L.req_int("ssm.state_size");
    hp.ssm_k_heads = L.req_int("ssm.group_count");
    hp.ssm_v_heads = L.req_int("ssm.time_step_rank");
    if (hp.ssm_conv < 2 || hp.ssm_conv > 16 || hp.ssm_state > 512 || hp.ssm_v_heads % hp.ssm_k_heads != 0 ||
        L.req_int("ssm.inner_size") != hp.ssm_v_heads * hp.ssm_state)
        L.fail(
            strprintf("Gated DeltaNet shapes are inconsistent: conv kernel %d, state %d, %d key heads, %d value "
                      "heads, inner size %d",
                      hp.ssm_conv, hp.ssm_state, hp.ssm_k_heads, hp.ssm_v_heads, L.req_int("ssm.inner_size")));
    hp.attn_gate = true;
    hp.ssm_grouped_heads = a.fused_ssm_ba = hp.arch == Arch::QWEN3NEXT;  // (and beta|alpha in one matrix)
    a.recurrent_layer.assign(size_t(hp.n_layer), false);
    if (const GgufValue* v = a.f.find(a.arch + ".attention.recurrent_layers"); v && v->type == GgufType::ARRAY) {
        for (size_t i = 0; i < v->arr.size() && i < a.recurrent_layer.size(); i++)
            a.recurrent_layer[i] = v->arr[i].is_integer() ? v->arr[i].as_int() != 0 : v->arr[i].u != 0;
    } else {
        const int interval = L.opt_int("full_attention_interval", 4);
        for (int i = 0; i < hp.n_layer; i++) a.recurrent_layer[size_t(i)] = (i + 1) % interval != 0;
    }
}

void qwen35moe_routing(ArchLoad& a) {  // softmax, renormalised, and one shared expert of its own size gated per token
    HParams& hp = a.hp;
    hp.expert_weights_norm = true;
    hp.n_expert_shared = 1;
    hp.n_ff_shexp = a.L.opt_int("expert_shared_feed_forward_length", hp.n_ff);
    a.shexp_gated = true;
}

}  // namespace tandem
