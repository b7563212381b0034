// Reads hyperparameters from GGUF metadata and binds weight tensors by name, checking every shape.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "core/mmap.h"
#include "model/arch/loader.h"
#include "backend/cpu/isa.h"
#include "model/weight_view.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/split.h"

namespace tandem {

std::string describe_features(const HParams& hp) {
    std::string s = strprintf("rope theta %g, n_rot %d (%s)", hp.rope_theta, hp.n_rot,
                              hp.rope_style == RopeStyle::NEOX ? "neox" : "norm");
    auto add = [&](const std::string& f) { s += ", " + f; };
    if (hp.rope_freq_scale != 1.0f) add(strprintf("rope scale 1/%g", 1.0 / hp.rope_freq_scale));
    if (hp.yarn_ext_factor != 0.0f) add(strprintf("YaRN (original ctx %d)", hp.n_ctx_orig));
    if (hp.rope_attn_factor != 1.0f) add(strprintf("rope attn factor %.4g", hp.rope_attn_factor));
    if (hp.has_rope_freqs) add("rope_freqs");
    if (hp.has_rope_long_short) add(strprintf("LongRoPE factors (original ctx %d)", hp.n_ctx_orig));
    if (hp.tied_output) add("tied output");
    if (hp.has_qkv_bias) add("qkv bias");
    if (hp.has_qk_norm) add(hp.qk_norm_whole ? "QK-norm (whole q and k)" : "QK-norm");
    if (hp.mla)
        add(strprintf("MLA (latent %d + rope %d cached per token, q rank %d, head k %d / v %d, absorbed)", hp.n_lora_kv,
                      hp.n_rot, hp.n_lora_q, hp.mla_k, hp.mla_v));
    if (!hp.has_pre_norms) add("no pre-norms");
    if (hp.has_post_norms) add("post-norms");
    if (hp.residual_scale != 1.0f) add(strprintf("residual x %g", hp.residual_scale));
    if (hp.logit_scale != 1.0f) add(strprintf("logits / %g", hp.logit_scale));
    if (hp.attn_temp_scale != 0.0f)
        add(strprintf("attention temperature %g beyond each %d positions%s", hp.attn_temp_scale, hp.attn_temp_span,
                      hp.attn_temp_nope_only ? " (NoPE layers)" : ""));
    if (hp.qk_l2_norm) add("QK L2-norm after RoPE");
    if (hp.has_attn_sinks) add("attention sinks");
    if (hp.n_swa > 0)
        add(strprintf("%s %d (base %g)", hp.swa_chunked ? "chunked attention" : "sliding window", hp.n_swa,
                      hp.rope_theta_swa));
    if (hp.embd_scale != 1.0f) add(strprintf("embeddings x %g", hp.embd_scale));
    if (hp.logit_softcap > 0) add(strprintf("logit softcap %g", hp.logit_softcap));
    add(hp.ffn_act == FfnAct::SILU ? "SwiGLU" : hp.ffn_act == FfnAct::GELU_TANH ? "GEGLU" : "clamped SwiGLU-OAI");
    if (hp.n_expert > 0) {
        add(strprintf("MoE %d experts, %d used, expert n_ff %d, %s%s", hp.n_expert, hp.n_expert_used, hp.n_ff_exp,
                      hp.moe_gating == MoeGating::SOFTMAX          ? "softmax then top-k"
                      : hp.moe_gating == MoeGating::SOFTMAX_WEIGHT ? "top-k then softmax"
                                                                   : "sigmoid, top-k by biased score",
                      hp.expert_weights_norm ? ", renormalised" : ""));
        if (hp.expert_weights_scale != 0.0f) add(strprintf("expert weights x %g", hp.expert_weights_scale));
        if (hp.n_expert_shared > 0) add(strprintf("%d shared expert(s)", hp.n_expert_shared));
        if (hp.n_layer_dense_lead > 0) add(strprintf("first %d layer(s) dense", hp.n_layer_dense_lead));
        if (hp.n_moe_layer_step > 1) add(strprintf("MoE every %d layers", hp.n_moe_layer_step));
        if (hp.moe_weight_before_ffn) add("expert weight on the input");
        if (hp.n_expert_groups > 1) add(strprintf("%d of %d expert groups", hp.n_group_used, hp.n_expert_groups));
    }
    if (hp.recurrent())
        add(strprintf("Gated DeltaNet (conv %d, state %d, %d key / %d value heads) and gated attention", hp.ssm_conv,
                      hp.ssm_state, hp.ssm_k_heads, hp.ssm_v_heads));
    if (hp.n_layer_nextn > 0)
        add(strprintf("%d MTP block(s) (--spec-type mtp drafts with the first)", hp.n_layer_nextn));
    return s;
}

std::shared_ptr<const Model> Model::load(const std::string& path, const LoadOptions& opt) {
    return from_gguf(GgufFile::open(path), opt);
}

namespace {

// The shapes every family has: widths, layers (less the MTP blocks), heads, head size, rotated dims; then the
// family's attention hook (MLA, gemma4's window heads) and the head-size checks of the others.
void read_shapes(ArchLoad& a, const ArchInfo& info) {
    HParams& hp = a.hp;
    const Loader& L = a.L;
    const std::string& arch = a.arch;
    hp.n_embd = L.req_int("embedding_length");
    hp.n_layer = L.req_int("block_count");
    // Multi-token-prediction blocks (glm4moe, DeepSeek V3) are the file's last nextn_predict_layers blocks; the
    // forward pass runs the ones before them. (gemma4-assistant: its every layer is a "nextn" layer.)
    if (auto v = a.f.get_int(arch + ".nextn_predict_layers"); v && *v != 0 && info.arch != Arch::GEMMA4_ASSISTANT) {
        if (*v < 0 || *v >= hp.n_layer)
            L.fail(strprintf("nextn_predict_layers %lld is invalid for %d blocks", (long long)*v, hp.n_layer));
        hp.n_layer_nextn = int(*v);
        hp.n_layer -= hp.n_layer_nextn;
    }
    // gemma4 gives the KV heads and FFN widths per layer (arrays); the other families one number
    a.ff_layer = L.per_layer("feed_forward_length", hp.n_layer, info.ff_optional ? 1 : 0);
    hp.n_ff = *std::max_element(a.ff_layer.begin(), a.ff_layer.end());
    hp.n_head = L.req_int("attention.head_count");
    a.kv_heads = L.per_layer("attention.head_count_kv", hp.n_layer, hp.n_head);
    hp.n_head_kv = a.kv_heads[0];
    hp.n_ctx_train = L.opt_int("context_length", 2048);
    for (int nkv : a.kv_heads)
        if (nkv > hp.n_head || hp.n_head % nkv != 0)
            L.fail(strprintf("head_count %d is not a multiple of head_count_kv %d", hp.n_head, nkv));
    if (hp.n_embd % hp.n_head != 0 && !a.f.find(arch + ".attention.key_length"))
        L.fail(strprintf("embedding_length %d is not a multiple of head_count %d", hp.n_embd, hp.n_head));
    hp.head_dim = L.opt_int("attention.key_length", hp.n_embd / hp.n_head);
    hp.n_rot = L.opt_int("rope.dimension_count", hp.head_dim);
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2)
        L.fail(strprintf("rope.dimension_count %d is invalid for head size %d", hp.n_rot, hp.head_dim));
    if (info.arch != Arch::DEEPSEEK2)  // (MLA: its hook checks the value length)
        if (L.opt_int("attention.value_length", hp.head_dim) != hp.head_dim)
            L.fail("attention.value_length differs from key_length (not supported)");
    if (info.attention) info.attention(a);
    if (hp.mla) return;  // its hook checked its cache row
    // attention's tiles take heads up to 576 (MLA's row); gemma4's global layers have 512
    for (int hd : {hp.head_dim, hp.head_dim_swa > 0 ? hp.head_dim_swa : hp.head_dim})
        if (hd % 8 != 0 || hd > a.max_head_dim)
            L.fail(strprintf("head size %d is not supported (a multiple of 8, at most %d)", hd, a.max_head_dim));
}

// The norms' epsilon and RoPE: base, linear scaling and YaRN.
void read_rope(ArchLoad& a) {
    HParams& hp = a.hp;
    const Loader& L = a.L;
    hp.rms_eps = L.opt_float("attention.layer_norm_rms_epsilon", 1e-5f);
    hp.rope_theta = L.opt_float("rope.freq_base", 10000.0f);
    if (!(hp.rms_eps > 0) || !(hp.rope_theta > 0)) L.fail("rms epsilon and rope.freq_base must be positive");
    hp.n_ctx_orig = L.opt_int("rope.scaling.original_context_length", hp.n_ctx_train);
    hp.rope_attn_factor = L.opt_float("rope.scaling.attn_factor", 1.0f);
    if (!(hp.rope_attn_factor > 0)) L.fail("rope.scaling.attn_factor must be positive");
    const auto st = a.f.get_str(a.arch + ".rope.scaling.type");
    if (st && (*st == "linear" || *st == "yarn")) {
        float factor = L.opt_float("rope.scaling.factor", 1.0f);
        if (!(factor > 0)) L.fail("rope.scaling.factor must be positive");
        hp.rope_freq_scale = 1.0f / factor;
    } else if (st && *st != "none") {
        L.fail("unsupported rope.scaling.type '" + *st + "'");
    }
    if (st && *st == "yarn" && hp.rope_freq_scale < 1.0f) {
        // YaRN as llama.cpp applies it (llama-context.cpp, ggml rope_yarn): frequencies ramp between the
        // interpolated and the extrapolated ones over the correction dims; cos/sin are scaled by
        // attn_factor * (1 + 0.1 ln factor), where llama.cpp's own mscale (with yarn_log_multiplier) enters the
        // attn_factor and the ext-factor correction divides its (1 + 0.1 ln factor) back out.
        const float factor = 1.0f / hp.rope_freq_scale;
        auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
        float log_mul = L.opt_float("rope.scaling.yarn_log_multiplier", 0.0f), m = 1.0f;
        if (a.yarn_log_mul_is_mscale) {
            log_mul /= 0.1f;
            if (log_mul != 1.0f) m = log_mul;
        }
        hp.yarn_log_mul = log_mul;
        float af = log_mul != 0 ? mscale(factor, m) / mscale(factor, log_mul) : mscale(factor, 1.0f);
        af /= 1.0f + 0.1f * std::log(factor);
        hp.rope_attn_factor *= af;
        hp.yarn_ext_factor = L.opt_float("rope.scaling.yarn_ext_factor", 1.0f);
        hp.yarn_beta_fast = L.opt_float("rope.scaling.yarn_beta_fast", 32.0f);
        hp.yarn_beta_slow = L.opt_float("rope.scaling.yarn_beta_slow", 1.0f);
    }
}

// Sliding windows as llama.cpp assigns them: the family's pattern (gemma3 every layer but each 6th, gpt-oss every
// other) unless the file's attention.sliding_window_pattern says, or gemma4's per-layer flags. phi3's window is
// ignored, as llama.cpp does (its converted files give a window the models were not trained with at every layer).
void read_windows(ArchLoad& a) {
    HParams& hp = a.hp;
    if (!a.swa_pattern || a.swa_fixed) return;
    auto w = a.f.get_int(a.arch + ".attention.sliding_window");
    if (a.swa_required && !w) a.L.fail("missing required metadata '" + a.arch + ".attention.sliding_window'");
    if (!w || *w <= 0) return;
    hp.n_swa = int(std::min<int64_t>(*w, int64_t(1) << 30));
    if (a.swa_layer.empty()) a.swa_pattern = a.L.opt_int("attention.sliding_window_pattern", a.swa_pattern);
    hp.rope_theta_swa = a.gemma_swa_rope ? 10000.0f : hp.rope_theta;
    hp.rope_freq_scale_swa = a.gemma_swa_rope ? 1.0f : hp.rope_freq_scale;
    hp.rope_theta_swa = a.L.opt_float("rope.freq_base_swa", hp.rope_theta_swa);
    if (!(hp.rope_theta_swa > 0)) a.L.fail("rope.freq_base_swa must be positive");
}

// The experts' counts and size (the routing is the family's hook).
void read_experts(ArchLoad& a) {
    HParams& hp = a.hp;
    const Loader& L = a.L;
    hp.n_expert = L.req_int("expert_count");
    hp.n_expert_used = L.req_int("expert_used_count");
    const std::vector<int> ff_exp = L.per_layer("expert_feed_forward_length", hp.n_layer, 0);
    if (std::count(ff_exp.begin(), ff_exp.end(), ff_exp[0]) != hp.n_layer)
        L.fail("expert_feed_forward_length differs between layers (not supported)");
    hp.n_ff_exp = ff_exp[0];
    if (hp.n_expert_used > hp.n_expert || hp.n_expert > 4096)
        L.fail(strprintf("expert_used_count %d / expert_count %d are invalid", hp.n_expert_used, hp.n_expert));
    hp.moe_gating = MoeGating::SOFTMAX;
    hp.expert_weights_scale = L.opt_float("expert_weights_scale", 0.0f);
}

// A layer's attention shape: gemma4's sliding-window layers have their own head size, rotated dims and KV heads;
// its last n_kv_shared layers attend to the cache of the last earlier layer of their kind.
void bind_layer_shape(const ArchLoad& a, const std::vector<LayerWeights>& layers, int i, LayerWeights& l) {
    const HParams& hp = a.hp;
    const int pattern = a.swa_pattern;
    l.swa = hp.n_swa > 0 && (!a.swa_layer.empty() ? i < hp.n_layer && a.swa_layer[size_t(i)]
                                                  : pattern == 0 || i % pattern < pattern - 1);
    l.n_head = hp.n_head;
    l.n_head_kv = i < hp.n_layer ? a.kv_heads[size_t(i)] : hp.n_head_kv;
    l.head_dim = l.swa && hp.head_dim_swa > 0 ? hp.head_dim_swa : hp.head_dim;
    l.n_rot = l.swa && hp.head_dim_swa > 0 ? hp.n_rot_swa : hp.n_rot;
    if (hp.n_kv_shared > 0 && i >= hp.n_layer - hp.n_kv_shared && i < hp.n_layer) {
        l.kv_from = hp.n_layer - hp.n_kv_shared - (l.swa ? 2 : 1);
        const LayerWeights& src = layers[size_t(l.kv_from)];
        if (src.swa != l.swa || src.n_head_kv != l.n_head_kv || src.kv_from >= 0)
            a.L.fail(
                strprintf("layer %d shares the cache of layer %d, which is not a layer of its kind with a cache "
                          "of its own",
                          i, l.kv_from));
    }
    l.recurrent = i < int(a.recurrent_layer.size()) && a.recurrent_layer[size_t(i)];
    l.rope = !(a.nope_step > 0 && (i + 1) % a.nope_step == 0) && a.rope_on;  // NoPE layers: smollm3's, llama4's
}

// A Gated DeltaNet layer's tensors (HParams::recurrent()).
void bind_recurrent(const ArchLoad& a, const std::string& p, LayerWeights& l) {
    const HParams& hp = a.hp;
    const Loader& L = a.L;
    const int64_t S = hp.ssm_state, hv = hp.ssm_v_heads, conv = hp.ssm_conv_dim();
    if (!L.has(p + "attn_qkv.weight") && L.has(p + "ssm_in.weight"))
        L.fail("tensor '" + p +
               "ssm_in.weight': a Qwen3-Next conversion with the fused q|k|v|z projection "
               "(older llama.cpp): convert it again with llama.cpp's current convert_hf_to_gguf.py");
    l.ssm_in = L.matrix(p + "attn_qkv.weight", conv, hp.n_embd);
    l.ssm_z = L.matrix(p + "attn_gate.weight", hv * S, hp.n_embd);
    if (a.fused_ssm_ba) {
        l.ssm_ba = L.matrix(p + "ssm_ba.weight", 2 * hv, hp.n_embd);
    } else {
        l.ssm_beta = L.matrix(p + "ssm_beta.weight", hv, hp.n_embd);
        l.ssm_alpha = L.matrix(p + "ssm_alpha.weight", hv, hp.n_embd);
    }
    l.ssm_out = L.matrix(p + "ssm_out.weight", hp.n_embd, hv * S);
    l.ssm_conv1d = L.expert_vec(p + "ssm_conv1d.weight", hp.ssm_conv, conv);
    l.ssm_dt = L.vec(p + "ssm_dt.bias", hv);
    l.ssm_a = L.vec(p + "ssm_a", hv);
    l.ssm_norm = L.vec(p + "ssm_norm.weight", S);
}

// An attention layer's projections, biases, QK-norms and sinks: MLA's, a fused q|k|v (phi3), gemma4's (a shared-KV
// layer has no K/V of its own; without attn_v, v = k's rows), or q, k, v (gated attention: q with its gates).
void bind_attention(const ArchLoad& a, const std::string& p, LayerWeights& l) {
    const HParams& hp = a.hp;
    const Loader& L = a.L;
    const int64_t q_dim = int64_t(hp.n_head) * l.head_dim, kv_dim = int64_t(l.n_head_kv) * l.head_dim;
    if (hp.mla) {
        if (hp.n_lora_q > 0) {
            l.q_a_norm = L.vec(p + "attn_q_a_norm.weight", hp.n_lora_q);
            l.wq_a = L.matrix(p + "attn_q_a.weight", hp.n_lora_q, hp.n_embd);
            l.wq_b = L.matrix(p + "attn_q_b.weight", int64_t(hp.n_head) * hp.mla_k, hp.n_lora_q);
        } else {
            l.wq = L.matrix(p + "attn_q.weight", int64_t(hp.n_head) * hp.mla_k, hp.n_embd);
        }
        l.kv_a_norm = L.vec(p + "attn_kv_a_norm.weight", hp.n_lora_kv);
        l.wkv_a = L.matrix(p + "attn_kv_a_mqa.weight", hp.n_lora_kv + hp.n_rot, hp.n_embd);
        l.wk_b = L.experts(p + "attn_k_b.weight", hp.n_lora_kv, hp.mla_k - hp.n_rot, hp.n_head);
        l.wv_b = L.experts(p + "attn_v_b.weight", hp.mla_v, hp.n_lora_kv, hp.n_head);
    } else if (L.has(p + "attn_qkv.weight")) {  // fused q|k|v rows (phi3)
        Weight qkv = L.matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, hp.n_embd);
        l.wq = Loader::rows_of(qkv, 0, q_dim);
        l.wk = Loader::rows_of(qkv, q_dim, kv_dim);
        l.wv = Loader::rows_of(qkv, q_dim + kv_dim, kv_dim);
    } else if (a.gemma4) {
        l.wq = L.matrix(p + "attn_q.weight", q_dim, hp.n_embd);
        if (l.kv_from < 0 && !a.assistant) {  // (an assistant's layers read its target's cache)
            l.wk = L.matrix(p + "attn_k.weight", kv_dim, hp.n_embd);
            l.wv = L.has(p + "attn_v.weight") ? L.matrix(p + "attn_v.weight", kv_dim, hp.n_embd) : l.wk;
        }
    } else {
        l.wq = L.matrix(p + "attn_q.weight", hp.attn_gate ? 2 * q_dim : q_dim, hp.n_embd);
        l.wk = L.matrix(p + "attn_k.weight", kv_dim, hp.n_embd);
        l.wv = L.matrix(p + "attn_v.weight", kv_dim, hp.n_embd);
    }
    l.wo = L.matrix(p + "attn_output.weight", hp.n_embd, hp.mla ? int64_t(hp.n_head) * hp.mla_v : q_dim);
    if (hp.has_qkv_bias) {
        l.bq = L.vec(p + "attn_q.bias", q_dim);
        l.bk = L.vec(p + "attn_k.bias", kv_dim);
        l.bv = L.vec(p + "attn_v.bias", kv_dim);
    }
    if (hp.has_out_bias || (a.optional_out_bias && L.has(p + "attn_output.bias")))
        l.bo = L.vec(p + "attn_output.bias", hp.n_embd);
    if (hp.has_qk_norm) {
        l.q_norm = L.vec(p + "attn_q_norm.weight", hp.qk_norm_whole ? q_dim : l.head_dim);
        if (l.kv_from < 0 && !a.assistant)
            l.k_norm = L.vec(p + "attn_k_norm.weight", hp.qk_norm_whole ? kv_dim : l.head_dim);
    }
    if (hp.has_attn_sinks) l.sinks = L.vec(p + "attn_sinks.weight", hp.n_head);
}

// The norms around a layer's attention and FFN (gpt-oss, glm4moe and qwen35 name their pre-FFN norm
// post_attention_norm).
void bind_norms(const ArchLoad& a, const std::string& p, LayerWeights& l) {
    const HParams& hp = a.hp;
    const Loader& L = a.L;
    if (hp.has_pre_norms) l.attn_norm = L.vec(p + "attn_norm.weight", hp.n_embd);
    if (hp.has_post_norms || a.ffn_norm_is_post_attn)
        l.post_attn_norm = L.vec(p + "post_attention_norm.weight", hp.n_embd);
    if (!a.ffn_norm_is_post_attn && hp.has_pre_norms) l.ffn_norm = L.vec(p + "ffn_norm.weight", hp.n_embd);
    if (hp.has_post_norms) l.post_ffn_norm = L.vec(p + "post_ffw_norm.weight", hp.n_embd);
}

// gemma4's own per-layer tensors: the output scale, the experts beside the dense MLP, the per-layer input.
void bind_gemma4_layer(const ArchLoad& a, const std::string& p, LayerWeights& l) {
    const HParams& hp = a.hp;
    const Loader& L = a.L;
    if (L.has(p + "layer_output_scale.weight")) l.out_scale = L.vec(p + "layer_output_scale.weight", 1)[0];
    if (a.gemma4_experts && L.has(p + "ffn_gate_inp.weight")) {  // experts beside the dense MLP
        const int64_t ne = hp.n_expert, fe = hp.n_ff_exp, E = hp.n_embd;
        l.router = L.matrix(p + "ffn_gate_inp.weight", ne, E);
        l.router_in_scale = L.vec(p + "ffn_gate_inp.scale", E);
        l.ffn_pre_norm_2 = L.vec(p + "pre_ffw_norm_2.weight", E);
        l.ffn_post_norm_1 = L.vec(p + "post_ffw_norm_1.weight", E);
        l.ffn_post_norm_2 = L.vec(p + "post_ffw_norm_2.weight", E);
        if (L.has(p + "ffn_gate_up_exps.weight")) {  // gate and up rows of each expert in one tensor
            for (const Weight& gu : L.experts(p + "ffn_gate_up_exps.weight", 2 * fe, E, ne)) {
                l.exp_gate.push_back(Loader::rows_of(gu, 0, fe));
                l.exp_up.push_back(Loader::rows_of(gu, fe, fe));
            }
        } else {
            l.exp_gate = L.experts(p + "ffn_gate_exps.weight", fe, E, ne);
            l.exp_up = L.experts(p + "ffn_up_exps.weight", fe, E, ne);
        }
        l.exp_down = L.experts(p + "ffn_down_exps.weight", E, fe, ne);
        if (L.has(p + "ffn_down_exps.scale")) l.exp_down_scale = L.vec(p + "ffn_down_exps.scale", ne);
    }
    if (hp.n_embd_per_layer > 0) {
        l.pl_gate = L.matrix(p + "inp_gate.weight", hp.n_embd_per_layer, hp.n_embd);
        l.pl_proj = L.matrix(p + "proj.weight", hp.n_embd, hp.n_embd_per_layer);
        l.pl_post_norm = L.vec(p + "post_norm.weight", hp.n_embd);
    }
}

// A layer's FFN: experts (the router, shared experts, biases) in the layers that have them, else a dense gated
// FFN of n_ff (a fused gate|up in phi3); gemma4 has its dense MLP beside its experts.
void bind_ffn(const ArchLoad& a, const std::string& p, int i, int64_t n_ff, LayerWeights& l) {
    const HParams& hp = a.hp;
    const Loader& L = a.L;
    for (const char* b : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"})
        if (L.has(p + b)) L.fail("tensor '" + p + b + "': FFN biases are not supported");
    if (hp.n_expert > 0 && !a.gemma4 && i >= hp.n_layer_dense_lead &&
        (hp.n_moe_layer_step <= 1 || (i + 1) % hp.n_moe_layer_step == 0)) {
        const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
        l.router = L.matrix(p + "ffn_gate_inp.weight", ne, hp.n_embd);
        if (hp.moe_gating == MoeGating::SIGMOID && L.has(p + "exp_probs_b.bias"))
            l.exp_probs_b = L.vec(p + "exp_probs_b.bias", ne);
        if (a.shexp_gated) l.shexp_gate_inp = L.vec(p + "ffn_gate_inp_shexp.weight", hp.n_embd);
        if (hp.n_expert_shared > 0) {
            const int64_t fs = hp.n_ff_shexp > 0 ? hp.n_ff_shexp : fe * hp.n_expert_shared;
            l.shexp_gate = L.matrix(p + "ffn_gate_shexp.weight", fs, hp.n_embd);
            l.shexp_up = L.matrix(p + "ffn_up_shexp.weight", fs, hp.n_embd);
            l.shexp_down = L.matrix(p + "ffn_down_shexp.weight", hp.n_embd, fs);
        }
        l.exp_gate = L.experts(p + "ffn_gate_exps.weight", fe, hp.n_embd, ne);
        l.exp_up = L.experts(p + "ffn_up_exps.weight", fe, hp.n_embd, ne);
        l.exp_down = L.experts(p + "ffn_down_exps.weight", hp.n_embd, fe, ne);
        if (hp.has_expert_bias) {
            l.router_b = L.vec(p + "ffn_gate_inp.bias", ne);
            l.exp_gate_b = L.expert_vec(p + "ffn_gate_exps.bias", fe, ne);
            l.exp_up_b = L.expert_vec(p + "ffn_up_exps.bias", fe, ne);
            l.exp_down_b = L.expert_vec(p + "ffn_down_exps.bias", hp.n_embd, ne);
        }
    } else if (!L.has(p + "ffn_gate.weight") && L.has(p + "ffn_up.weight")) {  // fused gate|up rows (phi3)
        Weight gu = L.matrix(p + "ffn_up.weight", 2 * n_ff, hp.n_embd);
        l.w_gate = Loader::rows_of(gu, 0, n_ff);
        l.w_up = Loader::rows_of(gu, n_ff, n_ff);
    } else {
        l.w_gate = L.matrix(p + "ffn_gate.weight", n_ff, hp.n_embd);
        l.w_up = L.matrix(p + "ffn_up.weight", n_ff, hp.n_embd);
    }
    if (!l.moe() || a.gemma4) l.w_down = L.matrix(p + "ffn_down.weight", hp.n_embd, n_ff);
}

}  // namespace

std::shared_ptr<const Model> Model::from_gguf(std::shared_ptr<const GgufFile> file, const LoadOptions& opt) {
    const GgufFile& f = *file;
    auto arch = f.get_str("general.architecture");
    if (!arch) throw Error(f.path() + ": missing required metadata 'general.architecture'");
    const ArchInfo* info = find_arch(*arch);
    if (!info) throw Error(f.path() + ": unsupported architecture '" + *arch + "' (supported: " + arch_names() + ")");
    std::shared_ptr<Model> m(new Model());
    m->file_ = file;
    m->place_ = opt.place;
    for (const GgufTensor& t : file->tensors()) {  // the tensor data's extent (release_file_pages stays inside it)
        m->data_lo_ = std::min(m->data_lo_, reinterpret_cast<uintptr_t>(t.data));
        m->data_hi_ = std::max(m->data_hi_, reinterpret_cast<uintptr_t>(t.data) + t.nbytes);
    }
    HParams& hp = m->hp_;
    hp.arch = info->arch;
    ArchLoad a(f, hp, *arch);
    const Loader& L = a.L;
    // The hyperparameters: the shapes, RoPE, the family's features, windows, experts and their routing.
    read_shapes(a, *info);
    read_rope(a);
    hp.rope_style = info->rope_style;
    hp.q_scale = 1.0f / std::sqrt(float(hp.head_dim));
    if (info->features) info->features(a);
    read_windows(a);
    if (a.experts) {
        read_experts(a);
        if (info->routing) info->routing(a);
    }
    m->asst_.n_embd_target = a.n_embd_target;

    if (hp.arch == Arch::EAGLE3) {
        if (opt.cluster) L.fail("an EAGLE-3 head is not split across ranks (it drafts on rank 0, beside its target)");
        bind_eagle3(L, hp, m->tok_embd_, m->output_, m->output_norm_, m->layers_, m->eagle3_);
        if (f.tensor("rope_freqs.weight")) {
            hp.has_rope_freqs = true;
            m->rope_freqs_ = L.vec("rope_freqs.weight", hp.n_rot / 2);
        }
        return m;
    }
    // The model's own tensors: embedding, output, RoPE factors.
    const GgufTensor* te = f.tensor("token_embd.weight");
    if (!te) L.fail("missing tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[0] != hp.n_embd) L.fail("tensor 'token_embd.weight' does not have n_embd columns");
    hp.n_vocab = int(te->ne[1]);
    m->tok_embd_ = L.matrix("token_embd.weight", hp.n_vocab, hp.n_embd);
    m->output_norm_ = L.vec("output_norm.weight", hp.n_embd);
    hp.tied_output = f.tensor("output.weight") == nullptr;
    if (hp.tied_output && a.require_output) L.fail("missing tensor 'output.weight'");
    m->output_ = hp.tied_output ? m->tok_embd_ : L.matrix("output.weight", hp.n_vocab, hp.n_embd);
    if (f.tensor("rope_freqs.weight")) {
        hp.has_rope_freqs = true;
        m->rope_freqs_ = L.vec("rope_freqs.weight", hp.n_rot / 2);
    } else if (L.has("rope_factors_short.weight") || L.has("rope_factors_long.weight")) {
        hp.has_rope_long_short = true;
        m->rope_freqs_ = L.vec("rope_factors_short.weight", hp.n_rot / 2);
        m->rope_long_ = L.vec("rope_factors_long.weight", hp.n_rot / 2);
    }
    hp.has_qkv_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
    // The layers, and the first MTP block when the file has its tensors (llama.cpp's "trunk only" files do not).
    const bool mtp = hp.n_layer_nextn > 0 && L.has("blk." + std::to_string(hp.n_layer) + ".nextn.eh_proj.weight");
    m->layers_.resize(size_t(hp.n_layer + (mtp ? 1 : 0)));
    for (int i = 0; i < int(m->layers_.size()); i++) {
        const std::string p = "blk." + std::to_string(i) + ".";
        LayerWeights& l = m->layers_[size_t(i)];
        bind_layer_shape(a, m->layers_, i, l);
        if (l.recurrent) bind_recurrent(a, p, l);
        else bind_attention(a, p, l);
        bind_norms(a, p, l);
        if (a.gemma4) bind_gemma4_layer(a, p, l);
        bind_ffn(a, p, i, i < hp.n_layer ? a.ff_layer[size_t(i)] : hp.n_ff, l);
    }
    m->bind_extras(a, mtp);
    if (opt.cluster) {
        m->cluster_ = opt.cluster;
        m->bind_split_share();
    }
    if (m->cluster_) {
        // A split model's rank read the first bytes of every tensor for the agreement, and the kernel mapped pages
        // around each (fault-around): the pages of other ranks' weights stay mapped unless dropped. Dropped here,
        // all of them: what this rank still reads in place (the embedding rows, unpacked matrices) faults back in.
        m->release_file_pages(nullptr, SIZE_MAX);
    }
    return m;
}

// A Gemma 4 assistant's projections, gemma4's per-layer embeddings, the MTP block's own tensors.
void Model::bind_extras(const ArchLoad& a, bool mtp) {
    const HParams& hp = hp_;
    const Loader& L = a.L;
    if (a.assistant) {
        const int64_t Et = asst_.n_embd_target;
        asst_.pre_proj = L.matrix("nextn.pre_projection.weight", hp.n_embd, 2 * Et);
        asst_.post_proj = L.matrix("nextn.post_projection.weight", Et, hp.n_embd);
    }
    if (hp.n_embd_per_layer > 0) {  // gemma4's per-layer embeddings
        const int64_t pl = int64_t(hp.n_layer) * hp.n_embd_per_layer;
        ple_.table = L.matrix("per_layer_token_embd.weight", hp.n_vocab, pl);
        ple_.proj = L.matrix("per_layer_model_proj.weight", pl, hp.n_embd);
        ple_.norm = L.vec("per_layer_proj_norm.weight", hp.n_embd_per_layer);
    }
    if (mtp) {
        const std::string p = "blk." + std::to_string(hp.n_layer) + ".nextn.";
        MtpWeights& w = mtp_;
        w.eh_proj = L.matrix(p + "eh_proj.weight", hp.n_embd, 2 * int64_t(hp.n_embd));
        w.enorm = L.vec(p + "enorm.weight", hp.n_embd);
        w.hnorm = L.vec(p + "hnorm.weight", hp.n_embd);
        w.head_norm =
            L.has(p + "shared_head_norm.weight") ? L.vec(p + "shared_head_norm.weight", hp.n_embd) : output_norm_;
        w.embd =
            L.has(p + "embed_tokens.weight") ? L.matrix(p + "embed_tokens.weight", hp.n_vocab, hp.n_embd) : tok_embd_;
        w.head = L.has(p + "shared_head_head.weight") ? L.matrix(p + "shared_head_head.weight", hp.n_vocab, hp.n_embd)
                                                      : output_;
    }
}

// A split model (LoadOptions::cluster): the ranks agree on the file, then the weights of the layers other ranks run
// are dropped before anything reads or repacks them (their shapes stay: caches and passes are laid out by them), so
// a rank touches only its share of the mapping. Rank 0 keeps the embedding, the output head and an MTP block.
void Model::bind_split_share() {
    Cluster& c = *cluster_;
    if (hp_.n_embd_per_layer > 0)
        throw Error(path() + ": a model with per-layer embeddings (Gemma 4 E2B/E4B) is not split across ranks yet");
    // Rank 0's output head in layers' worth of weight bytes: the plan gives it fewer layers for it.
    double layer_bytes = 0, head_bytes = 0;
    for (const GgufTensor& t : file_->tensors()) {
        if (t.name.rfind("blk.", 0) == 0 && std::atoi(t.name.c_str() + 4) < hp_.n_layer)
            layer_bytes += double(t.nbytes);
        if (t.name == (hp_.tied_output ? "token_embd.weight" : "output.weight")) head_bytes = double(t.nbytes);
    }
    if (c.tensor()) return bind_tensor_share(layer_bytes, head_bytes);
    const double per_layer = layer_bytes / std::max(1, hp_.n_layer);
    c.agree(model_fingerprint(*this), hp_.n_layer, per_layer > 0 ? head_bytes / per_layer : 0.0);
    split_lo_ = c.first_layer();
    split_hi_ = c.end_layer();
    for (int i = split_lo_; i < split_hi_; i++)
        if (const int src = layers_[size_t(i)].kv_from; src >= 0 && src < split_lo_)
            throw Error(
                strprintf("%s: layer %d (rank %d's) attends to the cache of layer %d, which an earlier rank runs: "
                          "choose other shares (-ts) so that they stay on one rank",
                          path().c_str(), i, c.rank(), src));
    for (int i = 0; i < int(layers_.size()); i++) {
        const bool mine = i < hp_.n_layer ? holds_layer(i) : c.leader();  // an MTP block: rank 0's
        if (mine) continue;
        LayerWeights& L = layers_[size_t(i)];
        LayerWeights shape;
        shape.swa = L.swa;
        shape.n_head = L.n_head;
        shape.n_head_kv = L.n_head_kv;
        shape.head_dim = L.head_dim;
        shape.n_rot = L.n_rot;
        shape.kv_from = L.kv_from;
        shape.out_scale = L.out_scale;
        shape.rope = L.rope;
        shape.recurrent = L.recurrent;
        L = std::move(shape);
    }
    if (!c.leader()) {
        tok_embd_ = {};
        output_ = {};
        mtp_ = {};
    }
}

// At levels with a packed kernel (backend/cpu/isa.h: every SIMD level), Q8_0/Q4_0/Q4_K/Q5_K/Q6_K matrices are copied once into the 16-row interleaved layouts of the
// fast kernels (matmul_packed.cpp, matmul_packed_k.cpp, matmul_packed_q6k.cpp); the file's pages of those tensors are then released
// (MADV_DONTNEED on the read-only mapping: they are re-read from the file if ever touched again), so memory stays
// about the file size (the copies are 0-3% larger than the blocks they replace).
void Model::release_file_pages(const uint8_t* from, size_t bytes) const {
    if (!file_->owns_mapping()) return;
    // (only the file's tensor data: a tensor split's strided column views reach past their tensor's end)
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = std::max(data_lo_, reinterpret_cast<uintptr_t>(from));
    const uintptr_t hi = std::min(data_hi_, reinterpret_cast<uintptr_t>(from) + bytes);
    if (hi <= lo) return;
    const uintptr_t b = (lo + page - 1) / page * page, e = hi / page * page;
    if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

const std::string& Model::path() const { return file_->path(); }

int64_t Model::n_params() const {
    int64_t n = 0;
    for (const auto& t : file_->tensors()) n += t.n_elements();
    return n;
}

size_t Model::weights_bytes() const {
    size_t n = 0;
    for (const auto& t : file_->tensors()) n += t.nbytes;
    return n;
}

double Model::expected_experts(int n_tok) const {
    if (hp_.n_expert == 0) return 0;
    const double e = hp_.n_expert, k = hp_.n_expert_used;
    return e * (1.0 - std::pow(1.0 - k / e, double(std::max(1, n_tok))));
}

namespace {
// A tensor of a block the forward pass does not run (an MTP block: blk.N. with N >= n_layer).
bool outside_trunk(const std::string& name, int n_layer) {
    if (name.rfind("blk.", 0) != 0) return false;
    return std::atoi(name.c_str() + 4) >= n_layer;
}
}  // namespace

double Model::bytes_per_pass(int n_tok) const {
    double dense = 0, experts = 0;
    const size_t row_embd = tok_embd_.row_stride;
    for (const auto& t : file_->tensors()) {
        if (outside_trunk(t.name, hp_.n_layer)) continue;
        if (t.name == "token_embd.weight") {
            dense += hp_.tied_output ? double(t.nbytes) : double(row_embd) * n_tok;
            continue;
        }
        if (t.name == "per_layer_token_embd.weight") {  // gemma4's per-layer table: a row per token too
            dense += double(ple_.table.row_stride) * n_tok;
            continue;
        }
        if (t.name.find("_exps.") != std::string::npos) experts += double(t.nbytes);
        else dense += double(t.nbytes);
    }
    if (hp_.n_expert > 0) experts *= expected_experts(n_tok) / hp_.n_expert;
    return dense + experts;
}

double Model::macs_per_token(bool output) const {
    double dense = 0, experts = 0;
    for (const auto& t : file_->tensors()) {
        if (t.n_dims < 2 || outside_trunk(t.name, hp_.n_layer)) continue;
        if (t.name == "token_embd.weight") {
            if (hp_.tied_output && output) dense += double(t.n_elements());
            continue;
        }
        if (t.name == "output.weight" && !output) continue;
        if (t.name == "per_layer_token_embd.weight") continue;  // a lookup
        if (t.name.find("_exps.") != std::string::npos) experts += double(t.n_elements());
        else dense += double(t.n_elements());
    }
    if (hp_.n_expert > 0) experts *= double(hp_.n_expert_used) / hp_.n_expert;
    return dense + experts;
}

std::string Model::describe_type() const {
    std::map<std::string, int64_t> by_type;
    for (const auto& t : file_->tensors())
        if (t.n_dims >= 2) by_type[type_name(t.type)] += t.n_elements();
    std::string best;
    int64_t most = -1;
    for (auto& [k, v] : by_type)
        if (v > most) {
            most = v;
            best = k;
        }
    return best.empty() ? "F32" : best;
}

}  // namespace tandem
