// DeepSeek V2/V3 (deepseek2: multi-head latent attention with absorbed up-projections, YaRN's magnitude in the
// query scale) and GLM-4.5 (glm4moe), which share the sigmoid routing with a selection bias, shared experts, dense
// leading layers and DeepSeek V3's group-limited choice.
#include <cmath>

#include "model/arch/loader.h"

namespace tandem {

void deepseek2_attention(ArchLoad& a) {  // multi-head latent attention (HParams::mla), as llama.cpp's MLA files give it
    HParams& hp = a.hp;
    const Loader& L = a.L;
    if (!a.f.find(a.arch + ".attention.key_length_mla"))
        L.fail(
            "a deepseek2 file without attention.key_length_mla (an old conversion with attn_kv_b): "
            "convert it again with llama.cpp's current convert_hf_to_gguf.py");
    hp.mla = true;
    hp.n_lora_kv = L.req_int("attention.kv_lora_rank");
    hp.n_lora_q = int(a.f.get_int(a.arch + ".attention.q_lora_rank").value_or(0));
    hp.mla_k = L.req_int("attention.key_length_mla");
    hp.mla_v = L.req_int("attention.value_length_mla");
    hp.rope_offset = hp.n_lora_kv;
    if (hp.n_head_kv != 1 || hp.head_dim != hp.n_lora_kv + hp.n_rot || hp.mla_k <= hp.n_rot ||
        L.opt_int("attention.value_length", hp.n_lora_kv) != hp.n_lora_kv || hp.n_lora_q < 0)
        L.fail(
            strprintf("MLA shapes are inconsistent: head_count_kv %d (1), key_length %d (kv_lora_rank %d + "
                      "rope %d), key_length_mla %d, q_lora_rank %d",
                      hp.n_head_kv, hp.head_dim, hp.n_lora_kv, hp.n_rot, hp.mla_k, hp.n_lora_q));
    if (hp.head_dim % 8 != 0 || hp.head_dim > 576)
        L.fail(strprintf("MLA cache row %d is not supported (a multiple of 8, at most 576)", hp.head_dim));
    a.yarn_log_mul_is_mscale = true;  // its converter writes 0.1 mscale_all_dim; DeepSeek V2's mscale is that too
}

void deepseek2_features(ArchLoad& a) {
    HParams& hp = a.hp;
    // llama.cpp's deepseek2 graph: the query scale carries YaRN's magnitude, squared
    const float ln = std::log(1.0f / hp.rope_freq_scale);
    const float org = hp.rope_attn_factor * (1.0f + 0.1f * ln);
    const float ms = org * (1.0f + 0.1f * hp.yarn_log_mul * ln);
    hp.q_scale = ms * ms / std::sqrt(float(hp.mla_k));
    a.experts = true;
}

void glm4moe_features(ArchLoad& a) {
    a.hp.has_qk_norm = a.L.has("blk.0.attn_q_norm.weight");  // GLM-4.5 has it, -Air not
    a.ffn_norm_is_post_attn = true;
    a.experts = true;
    if (const GgufValue* v = a.f.find(a.arch + ".rope.dimension_sections"); v && v->type == GgufType::ARRAY)
        for (const auto& e : v->arr)
            if (e.is_integer() && e.as_int() != 0) a.L.fail("multimodal RoPE sections (GLM-4.5V) are not supported");
}

void sigmoid_routing(ArchLoad& a) {
    // GLM-4.5, DeepSeek V3: sigmoid routing with a selection bias, shared experts, dense first layers (DeepSeek
    // V2: softmax, llama.cpp's default for deepseek2 files that do not say; glm4moe's is sigmoid)
    HParams& hp = a.hp;
    const Loader& L = a.L;
    const std::string& arch = a.arch;
    const int64_t gating = a.f.get_int(arch + ".expert_gating_func").value_or(hp.arch == Arch::GLM4MOE ? 2 : 1);
    if (gating != 1 && gating != 2)
        L.fail(strprintf("expert_gating_func %lld is not supported (1 softmax, 2 sigmoid)", (long long)gating));
    hp.moe_gating = gating == 1 ? MoeGating::SOFTMAX : MoeGating::SIGMOID;
    hp.expert_weights_norm = a.f.get_bool(arch + ".expert_weights_norm").value_or(false);
    const int64_t shared = a.f.get_int(arch + ".expert_shared_count").value_or(0);
    const int64_t lead = a.f.get_int(arch + ".leading_dense_block_count").value_or(0);
    if (shared < 0 || shared > 64 || lead < 0 || lead > hp.n_layer)
        L.fail(strprintf("expert_shared_count %lld / leading_dense_block_count %lld are invalid", (long long)shared,
                         (long long)lead));
    hp.n_expert_shared = int(shared);
    hp.n_layer_dense_lead = int(lead);
    const int64_t groups = a.f.get_int(arch + ".expert_group_count").value_or(0);
    const int64_t used = a.f.get_int(arch + ".expert_group_used_count").value_or(0);
    if (groups > 1) {
        if (groups >= hp.n_expert || hp.n_expert % groups != 0 || used < 1 || used > groups ||
            used * (hp.n_expert / groups) < hp.n_expert_used)
            L.fail(strprintf("expert_group_count %lld / expert_group_used_count %lld do not fit %d experts, %d used",
                             (long long)groups, (long long)used, hp.n_expert, hp.n_expert_used));
        hp.n_expert_groups = int(groups);
        hp.n_group_used = int(used);
    }
}

}  // namespace tandem
