// Random-weight models of real shapes, for speed measurements (speed does not depend on the weights' values).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem {

struct SynthShape {
    std::string name;
    std::string
        arch;  // any architecture the loader knows (model.h): llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss,
    // smollm3, granite, olmo2, mistral3, glm4moe, deepseek2, qwen35, qwen35moe, qwen3next, llama4, gemma4,
    // gemma4-assistant
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_theta;
    bool tied_output;
    bool rope_freqs;  // Llama-3.1-style per-dimension RoPE factors
    int head_dim = 0;  // 0: n_embd / n_head
    int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // mixture of experts (qwen3moe, gpt-oss)
    int n_swa = 0;  // sliding window (gemma3, gpt-oss)
    // Weights ~ N(0, weight_std); norm weights ~ N(1, norm_std) (0: exactly 1). The reference shapes use noisy
    // norms, so a norm weight applied to the wrong tensor shows, and larger weights, so logits have real margins.
    float weight_std = 0.02f;
    float norm_std = 0.0f;
    // deepseek2's multi-head latent attention: q rank (0: q = wq x), latent rank, a head's rotated / not rotated
    // query-key dims and its value dims
    int q_lora = 0, kv_lora = 0, qk_rope = 0, qk_nope = 0, v_head = 0;
    int mtp_blocks =
        -1;  // multi-token-prediction blocks after the layers; -1: the architecture's (glm4moe, deepseek2: 1)
    // qwen35's Gated DeltaNet layers: state (head) size, key and value heads; gated attention in every
    // full_attn_interval-th layer, DeltaNet in the others
    int ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0, full_attn_interval = 4;
    int moe_layer_step = 1;  // llama4: MoE in the layers with (l + 1) % step == 0, dense (n_ff) in the others
    // gemma4: every swa_pattern-th layer global (head_dim, n_head_kv_global KV heads, no attn_v: v = k's rows, a
    // quarter of its dims rotated), the others sliding-window (head_dim_swa, n_head_kv); the last n_kv_shared
    // layers without a cache of their own and twice n_ff wide; per-layer embeddings of n_embd_per_layer
    int swa_pattern = 0, head_dim_swa = 0, n_head_kv_global = 0, n_kv_shared = 0, n_embd_per_layer = 0;
    // gemma4-assistant (a Gemma 4 drafter): its target's hidden size (its layers' shapes are the target's attention
    // shapes of the same kind; queries only)
    int n_embd_target = 0;
    // eagle3 (an EAGLE-3 head, one layer; n_embd_target as above): the three target layers it reads, its own
    // vocabulary (n_draft_vocab rows of its output and a d2t table; 0: the target's every token, no d2t), whether
    // it has its own token embeddings and output matrix (else its target's), norm_before_residual
    int eagle_layers[3] = {0, 0, 0};
    int n_draft_vocab = 0;
    bool own_embd = false, own_output = true, norm_before_residual = false;
};

// Known shapes: tinyllama-1.1b, llama-3.2-1b, qwen2.5-0.5b, llama-2-7b, llama-3.1-8b, qwen3-0.6b, qwen3-8b,
// qwen3-30b-a3b, gemma3-1b, phi-4-mini, gpt-oss-20b, smollm3-3b, granite-3.3-2b, olmo2-1b, glm-4.5-air-6l,
// deepseek-v3-2l, qwen3.5-9b, qwen3.5-35b-a3b-8l, llama4-scout-4l, llama4-draft, gemma4-e2b, gemma4-e2b-assistant,
// llama-3.1-8b-eagle3,
// and tiny-test* (for
// tests; tiny-ref-* are the shapes of the llama.cpp references in tests/data/reference-arch).
const std::vector<SynthShape>& synth_shapes();
const SynthShape& synth_shape(const std::string& name);  // throws tandem::Error listing the known names

struct SynthParams {
    std::string shape;
    std::string type = "Q8_0";  // any type or mix `tandem quantize` accepts; 1-D tensors stay F32
    uint64_t seed = 1;
    std::string vocab_path;  // copy tokenizer.* from this GGUF (its vocab size wins); empty: generate one
    std::function<void(const std::string&)> on_progress;
};

// Streams the model to `out_path` tensor by tensor (memory use is one row). Throws tandem::Error.
void synth_model(const std::string& out_path, const SynthParams& params);

}  // namespace tandem
