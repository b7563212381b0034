// gpt-oss: a clamped SwiGLU, attention sinks and an output bias, every other layer windowed, experts with biases
// whose top k logits are softmaxed.
#include "model/arch/loader.h"

namespace tandem {

void gpt_oss_features(ArchLoad& a) {
    HParams& hp = a.hp;
    hp.ffn_act = FfnAct::SWIGLU_OAI;
    hp.has_attn_sinks = hp.has_out_bias = true;
    a.ffn_norm_is_post_attn = true;
    a.swa_pattern = 2;  // every other layer (il % 2 == 0), unless the file's pattern says
    a.swa_required = true;
    a.experts = true;
    a.require_output = true;
}

void gpt_oss_routing(ArchLoad& a) {
    a.hp.moe_gating = MoeGating::SOFTMAX_WEIGHT;
    a.hp.has_expert_bias = true;
}

}  // namespace tandem
