// Model: hyperparameters and immutable weights of a decoder-only transformer, loaded from GGUF. One forward pass
// (model/forward.cpp) serves every architecture's trunk and its MTP block; an architecture is the set of features
// below that it switches on (QK-norm, post-norms, sliding windows, MoE, sinks, ...), decided once at load
// (model_loader.cpp). Two drafters still have passes of their own over its attention (model/eagle3.cpp, an EAGLE-3
// head's one layer; model/assistant.cpp, a Gemma 4 assistant's query-only layers), on the same attention op.
// A Model is read-only after load and may be shared by any number of Sessions (target, draft, server slots).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/tensor_type.h"

namespace tandem {

class GgufFile;
class Cluster;
struct ArchLoad;

enum class Arch {
    LLAMA,
    QWEN2,
    QWEN3,
    QWEN3MOE,
    GEMMA3,
    PHI3,
    GPT_OSS,
    SMOLLM3,
    GRANITE,
    OLMO2,
    MISTRAL3,
    GLM4MOE,
    DEEPSEEK2,
    QWEN35,
    QWEN35MOE,
    QWEN3NEXT,
    LLAMA4,
    GEMMA4,
    GEMMA4_ASSISTANT,
    EAGLE3
};
const char* arch_name(Arch a);
struct HParams;
// The architecture features a model uses, for `tandem info`: "rope theta 1e+06, n_rot 128, NEOX, QK-norm, ...".
std::string describe_features(const HParams& hp);

enum class RopeStyle {
    NORM,  // rotate adjacent pairs (x[2i], x[2i+1]): llama (GGUF q/k weights are permuted for it)
    NEOX,  // rotate halves (x[i], x[i + n_rot/2]): qwen2, qwen3, gemma3, phi3, gpt-oss
};

enum class FfnAct {
    SILU,  // silu(gate) * up (SwiGLU)
    GELU_TANH,  // gelu_tanh(gate) * up (GEGLU): gemma3, gemma4
    SWIGLU_OAI,  // g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1): gpt-oss
};

enum class MoeGating {
    SOFTMAX,  // softmax over all experts, then the top k (qwen3moe)
    SOFTMAX_WEIGHT,  // the top k raw router logits, then softmax over those k (gpt-oss)
    SIGMOID,  // weights sigmoid(logit); the top k by sigmoid(logit) + the layer's selection bias (glm4moe, DeepSeek V3)
};

struct HParams {
    Arch arch = Arch::LLAMA;
    int n_vocab = 0;
    int n_ctx_train = 0;
    int n_embd = 0;
    int n_layer = 0;  // decoder blocks of the forward pass (the file's block_count less its MTP blocks)
    int n_layer_nextn = 0;  // multi-token-prediction blocks after them (nextn_predict_layers; Model::mtp())
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;  // per-head size of q/k/v (gemma4: of its global layers; LayerWeights has each layer's)
    int n_ff = 0;
    int n_rot = 0;  // rotated dimensions per head (<= head_dim)
    float rms_eps = 1e-5f;
    float rope_theta = 10000.0f;
    float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by this
    RopeStyle rope_style = RopeStyle::NORM;
    bool tied_output = false;  // no output.weight: logits use token_embd
    bool has_qkv_bias = false;
    bool has_rope_freqs = false;

    // Attention details
    bool has_qk_norm = false;  // RMSNorm over each q/k head (per-dimension weight shared by the heads), before RoPE
    bool qk_norm_whole = false;  // olmo2: the QK-norm is over the whole q (n_head*hd) and k (n_head_kv*hd) instead
    bool has_pre_norms = true;  // RMSNorm before attention and FFN (attn_norm, ffn_norm); olmo2 has none
    bool has_post_norms = false;  // RMSNorm on the attention and FFN outputs before each residual add (gemma3, olmo2)
    bool has_attn_sinks = false;  // one extra logit per head in the softmax denominator (gpt-oss)
    float q_scale = 0;  // q is multiplied by this before q.k (set at load: 1/sqrt(head_dim) unless the arch says)
    float embd_scale = 1.0f;  // token embeddings are multiplied by this (gemma3: sqrt(n_embd))
    float logit_softcap = 0;  // logits = c * tanh(logits / c) when > 0
    float residual_scale = 1.0f;  // granite: the attention and FFN outputs are multiplied by this before each add
    float logit_scale = 1.0f;  // granite: logits are divided by this
    // Attention temperature (mistral3, llama4): q at position p is multiplied by
    // 1 + attn_temp_scale * ln(floor((p + attn_temp_offset) / attn_temp_span) + 1) when attn_temp_scale != 0 (1 within
    // the first span): mistral3 in every layer with span n_ctx_orig and offset 0; llama4 in its NoPE layers only
    // (attn_temp_nope_only) with span 8192 and offset 1, as llama.cpp.
    float attn_temp_scale = 0;
    int attn_temp_span = 0;
    float attn_temp_offset = 0;
    bool attn_temp_nope_only = false;
    // llama4: each q and k head RMS-normed without a weight after RoPE (Llama4TextL2Norm), in the RoPE layers
    bool qk_l2_norm = false;
    // gemma4: each v head RMS-normed without a weight; rope_freqs divides the global layers' frequencies only (its
    // "proportional" RoPE: 1e30 for the dims that stay unrotated); the last n_kv_shared layers keep no cache and
    // read the last earlier layer's of their kind (LayerWeights::kv_from)
    bool v_norm = false;
    bool rope_freqs_global_only = false;
    int n_kv_shared = 0;
    // gemma4's per-layer embeddings (E2B, E4B): n_embd_per_layer values per layer and token, from a second table
    // and a projection of the input embedding (Model::per_layer_embd), fed into each layer's output (0: none)
    int n_embd_per_layer = 0;

    // Multi-head latent attention (deepseek2: DeepSeek V2/V3/R1, Kimi K2), with the up-projections absorbed: the
    // cache holds one row per token, [rmsnorm(latent) * kv_a_norm (n_lora_kv) | roped k_pe (n_rot)], as K and V
    // (head_dim = n_lora_kv + n_rot, n_head_kv = 1); each head's query is [wk_b^T q_nope (n_lora_kv) | roped q_pe],
    // scored against the whole row; its output's latent part (the first n_lora_kv) goes through wv_b to mla_v
    // values. q_nope/q_pe: the head's first mla_k - n_rot and last n_rot of q = wq_b rmsnorm(wq_a x) (or wq x).
    bool mla = false;
    int n_lora_q = 0, n_lora_kv = 0;  // n_lora_q 0: q = wq x (the lite models)
    int mla_k = 0, mla_v = 0;  // a head's q/k size before absorption (qk_nope + qk_rope) and its value size
    int rope_offset = 0;  // where in a q/k head the rotated dims start (MLA: n_lora_kv; else 0)

    // Gated DeltaNet linear attention (qwen35: Qwen3.5 and Qwen3-Next's layout) in the layers with
    // LayerWeights::recurrent (model/delta_net.h): a causal convolution of ssm_conv taps over [q | k | v] and a
    // per-head state matrix of ssm_state x ssm_state updated by the gated delta rule; ssm_k_heads query/key heads,
    // ssm_v_heads value heads (value head h reads key head h % ssm_k_heads), each of ssm_state values. The other
    // layers are gated attention (attn_gate). 0: no such layers.
    int ssm_conv = 0, ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0;
    int ssm_conv_dim() const { return (2 * ssm_k_heads + ssm_v_heads) * ssm_state; }
    // qwen3next: value head h reads key head h / (ssm_v_heads / ssm_k_heads) (grouped, as llama.cpp's qwen3next
    // repeats them), not h % ssm_k_heads
    bool ssm_grouped_heads = false;
    bool recurrent() const { return ssm_state > 0; }
    // Gated attention (qwen35): wq gives each head's query and then its gate (2 * head_dim rows per head); the
    // attention output is multiplied by sigmoid(gate) before wo.
    bool attn_gate = false;

    // Sliding-window attention: layers with LayerWeights::swa see only the last n_swa positions (key j is hidden
    // from query i when i - j >= n_swa), and use their own RoPE base/scale. swa_chunked (llama4's chunked
    // attention): they see only their chunk instead, key j hidden from query i when j < floor(i / n_swa) * n_swa.
    int n_swa = 0;
    bool swa_chunked = false;
    int head_dim_swa = 0, n_rot_swa = 0;  // gemma4: the sliding-window layers' head size and rotated dims (0: same)
    int n_head_kv_swa = 0;  // gemma4: their KV heads where the file gives a per-layer array (0: n_head_kv)
    float rope_theta_swa = 10000.0f;
    float rope_freq_scale_swa = 1.0f;

    // RoPE scaling beyond a plain linear factor
    int n_ctx_orig = 0;  // rope.scaling.original_context_length (0: n_ctx_train)
    float rope_attn_factor = 1.0f;  // multiplies cos and sin (phi3 LongRoPE, YaRN's magnitude correction)
    float yarn_ext_factor = 0;  // 1 for YaRN: frequencies ramp between interpolated and extrapolated
    float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
    float yarn_log_mul = 0;  // rope.scaling.yarn_log_multiplier (deepseek2: the file's / 0.1, as llama.cpp reads it)
    bool has_rope_long_short = false;  // phi3: rope_factors_long/short, chosen by the session's context size

    // Feed-forward
    FfnAct ffn_act = FfnAct::SILU;
    int n_expert = 0;  // > 0: the FFN is a mixture of experts (in every layer but the first n_layer_dense_lead)
    int n_layer_dense_lead = 0;  // glm4moe, DeepSeek: the first layers have a dense FFN of n_ff
    int n_moe_layer_step = 0;  // llama4: only layers with (i + 1) % step == 0 are MoE, the others dense (0: all)
    bool moe_weight_before_ffn = false;  // llama4: each expert runs on its weight times the input, outputs summed
    int n_expert_shared = 0;  // shared experts beside the routed ones: one dense FFN of n_ff_exp * this (glm4moe)
    int n_ff_shexp =
        0;  // the shared FFN's hidden size when the file gives it (qwen35moe); 0: n_ff_exp * n_expert_shared
    int n_expert_used = 0;  // experts per token (top k)
    int n_ff_exp = 0;  // hidden size of one expert
    MoeGating moe_gating = MoeGating::SOFTMAX;
    bool expert_weights_norm = false;  // renormalise the k selected weights to sum 1
    // DeepSeek V3's group-limited routing: experts in n_expert_groups equal groups, a group scored by the sum of
    // its two best choice scores; only the n_group_used best groups' experts may be chosen (0: no groups)
    int n_expert_groups = 0, n_group_used = 0;
    float expert_weights_scale = 0;  // multiplies the selected weights when != 0
    bool has_expert_bias = false;  // router and expert biases (gpt-oss)
    bool has_out_bias = false;  // attention output bias (gpt-oss)
};

// A weight matrix used in place from the mapping. (rows, cols) = (output dim, input dim).
struct Weight {
    const uint8_t* data = nullptr;
    TensorType type = TensorType::F32;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_stride = 0;
    // The backend's placement of this matrix, made at load (the CPU's interleaved copy for its packed kernels;
    // owned by the Model; its layout is the backend's own), or null: the matrix is used in place.
    const void* placement = nullptr;
    size_t nbytes() const { return row_stride * size_t(rows); }
};

struct LayerWeights {
    std::vector<float> attn_norm;  // (n_embd)
    Weight wq;  // (n_head * head_dim, n_embd)
    Weight wk;  // (n_head_kv * head_dim, n_embd)
    Weight wv;  // (n_head_kv * head_dim, n_embd)
    Weight wo;  // (n_embd, n_head * head_dim); MLA: (n_embd, n_head * mla_v)
    std::vector<float> bq, bk, bv;  // qwen2 only: (n_head*head_dim), (n_head_kv*head_dim) x2
    std::vector<float> bo;  // gpt-oss: (n_embd)
    std::vector<float> q_norm, k_norm;  // QK-norm: (head_dim) each; olmo2: (n_head*hd), (n_head_kv*hd)
    // MLA (HParams::mla; wq, wk, wv unused): q = wq_b rmsnorm(wq_a x) * q_a_norm, or wq x without n_lora_q
    Weight wq_a;  // (n_lora_q, n_embd)
    Weight wq_b;  // (n_head * mla_k, n_lora_q)
    Weight wkv_a;  // (n_lora_kv + n_rot, n_embd): the latent and k_pe
    std::vector<float> q_a_norm, kv_a_norm;  // (n_lora_q), (n_lora_kv)
    std::vector<Weight> wk_b;  // n_head: (n_lora_kv, mla_k - n_rot), absorbed into the query
    std::vector<Weight> wv_b;  // n_head: (mla_v, n_lora_kv), the head's values from its latent output
    std::vector<float> sinks;  // attention sinks: (n_head)
    std::vector<float> post_attn_norm;  // gemma3, olmo2: before the residual add; gpt-oss: the FFN's pre-norm (n_embd)
    std::vector<float> ffn_norm;  // (n_embd); empty for gpt-oss (post_attn_norm is its pre-FFN norm) and olmo2
    std::vector<float> post_ffn_norm;  // gemma3, olmo2: (n_embd)
    bool swa = false;  // a sliding-window layer (HParams::n_swa)
    // The layer's attention shape (set for every layer; gemma4's sliding-window and global layers differ). n_head:
    // its query heads here (HParams::n_head, or a tensor split's share; n_head_kv too, model/tensor_share.cpp).
    int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
    int kv_from = -1;  // gemma4's shared-KV layers: the layer whose cache rows they attend to (no K/V of their own)
    float out_scale = 1.0f;  // gemma4: the layer's output (the residual stream after it) is multiplied by this
    // gemma4's per-layer embedding input (HParams::n_embd_per_layer): x += rmsnorm(pl_proj (gelu(pl_gate x) * e_l))
    // * pl_post_norm, e_l this layer's slice of the per-layer embedding
    Weight pl_gate;  // (n_embd_per_layer, n_embd)
    Weight pl_proj;  // (n_embd, n_embd_per_layer)
    std::vector<float> pl_post_norm;  // (n_embd)
    bool rope = true;  // false: q and k are not rotated (smollm3's NoPE layers, every 4th)
    // A Gated DeltaNet layer (HParams::recurrent(); no attention weights, no KV rows): in = [q|k|v] (conv_dim),
    // z, beta, alpha projections of the normed input; conv taps (conv_dim x ssm_conv, oldest first); dt bias,
    // a = -exp(A_log) and the output norm (ssm_state) per value head; ssm_out back to n_embd.
    bool recurrent = false;
    Weight ssm_in, ssm_z, ssm_beta, ssm_alpha, ssm_out;
    Weight ssm_ba;  // qwen3next: beta and alpha in one matrix, per key head [its heads' beta | their alpha] rows
    std::vector<float> ssm_conv1d, ssm_dt, ssm_a, ssm_norm;
    // Dense FFN. Fused gate|up tensors (phi3) are bound as two views of the one tensor; so is a fused q|k|v.
    Weight w_gate;  // (n_ff, n_embd)
    Weight w_up;  // (n_ff, n_embd)
    Weight w_down;  // (n_embd, n_ff)
    // Mixture of experts: each expert's matrices are views of slices of the file's 3-D tensors.
    Weight router;  // (n_expert, n_embd)
    std::vector<float> router_b;  // (n_expert) or empty
    std::vector<Weight> exp_gate, exp_up,
        exp_down;  // n_expert each: (n_ff_exp, n_embd), (n_ff_exp, n_embd), (n_embd, n_ff_exp)
    std::vector<float> exp_gate_b, exp_up_b, exp_down_b;  // (n_expert, n_ff_exp) x2, (n_expert, n_embd); or empty
    std::vector<float> exp_probs_b;  // SIGMOID gating: added to the scores for the choice only (n_expert) or empty
    Weight shexp_gate, shexp_up, shexp_down;  // the shared expert(s), run for every row, added to the routed sum
    std::vector<float> shexp_gate_inp;  // qwen35moe: the shared expert's output times sigmoid(x . this) (n_embd)
    // gemma4's MoE layers: the router's input scale (n_embd), the experts' own pre/post norms and the dense MLP's
    // post norm (n_embd each), each expert's output scale (n_expert, or empty); the dense w_gate/w_up/w_down run too
    std::vector<float> router_in_scale, ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2, exp_down_scale;
    bool moe() const { return !exp_gate.empty(); }  // false: the dense w_gate/w_up/w_down
};

// A multi-token-prediction block (glm4moe's `blk.N.nextn.*`, N = n_layer): from the target's final normed hidden
// state h at position p - 1 and the token at p, x = eh_proj [rmsnorm(embd(token)) * enorm, rmsnorm(h) * hnorm]
// runs one decoder layer (Model::layer(n_layer), with its own KV cache), and logits = head(rmsnorm(x) * head_norm)
// predict the token at p + 1; rmsnorm(x) * head_norm is also the h of its next step (a chain of drafts).
struct MtpWeights {
    Weight eh_proj;  // (n_embd, 2 n_embd): input [embedding part | hidden part]
    std::vector<float> enorm, hnorm;  // (n_embd)
    std::vector<float> head_norm;  // (n_embd): shared_head_norm, else output_norm
    Weight embd;  // (n_vocab, n_embd): its own embed_tokens, else the model's token_embd
    Weight head;  // (n_vocab, n_embd): its own shared_head_head, else the model's output
};

// A Gemma 4 assistant (gemma4-assistant files: Gemma 4's drafter, llama.cpp's gemma4-assistant): a few decoder layers
// that have queries only and attend to its target's cache (each layer to the target's last global or last
// sliding-window layer's rows, by its kind). From the target's final normed hidden state h (n_embd_target) at
// position p - 1 and the token t at p: x = pre_proj [embd_target(t) * sqrt(n_embd_target), h]; its layers (gemma4's
// block, queries at position p); logits = tok_embd rmsnorm(x) * output_norm (tied), and h' = post_proj of that
// norm is the h of its next draft, at the same position p (model/assistant.cpp, SessionParams::drafter_of).
struct AssistantWeights {
    int n_embd_target = 0;
    Weight pre_proj;  // (n_embd, 2 n_embd_target)
    Weight post_proj;  // (n_embd_target, n_embd)
};

// An EAGLE-3 head (llama.cpp's eagle3 files; Li et al. 2025): one llama decoder layer that drafts from three of its
// target's hidden states. At position p (its row of the target's position p + 1, model/eagle3.h) it takes the token
// t at p + 1 and g = fc [h_a, h_b, h_c], the inputs of the target's layers target_layers (each n_embd_target) at p
// (rmsnorm'd by fc_norm first when norm_before_fc); the layer's attention reads [rmsnorm(embd(t)) * attn_norm,
// rmsnorm(g) * hidden_norm] (2 n_embd), its residual is g (rmsnorm(g) * hidden_norm when norm_before_residual), and
// its output h (before output_norm) is the g of its next draft, at p + 1. Logits over its own vocabulary (the rows
// of its output matrix) go to target ids through d2t; the other target tokens get -inf. Without its own token
// embeddings or output matrix it uses the target's (Model::tok_embd()/output() are then empty).
struct Eagle3Weights {
    int target_layers[3] = {0, 0, 0};
    int n_embd_target = 0;
    bool norm_before_residual = false, norm_before_fc = false;
    Weight fc;  // (n_embd, 3 n_embd_target)
    std::vector<float> fc_norm;  // (3 n_embd_target) when norm_before_fc
    std::vector<float> hidden_norm;  // (n_embd)
    std::vector<int32_t> d2t;  // its output row -> target id; empty: the rows are the target's ids
};

struct LoadOptions {
    // Let the backend place the weights in the layout its kernels read fastest (the CPU: quantized matrices copied
    // into interleaved row groups where the SIMD level has packed kernels, by Model::place_on_cpu when a session
    // that runs them on the CPU is built). Off: every matrix is used in place from the file (the tests compare the
    // two).
    bool place = true;
    // A model split across ranks (tandem/split.h): every rank loads the same file with its Cluster; the ranks agree
    // on the file (Cluster::agree, refusing a rank whose differs) and each binds only its layers (rank 0 also the
    // embedding, the output head and an MTP block). Null: the whole model here.
    std::shared_ptr<Cluster> cluster;
};

class Model {
public:
    // Loads hyperparameters and weights; throws tandem::Error naming the file and the missing/mismatched item.
    static std::shared_ptr<const Model> load(const std::string& path, const LoadOptions& opt = {});
    static std::shared_ptr<const Model> from_gguf(std::shared_ptr<const GgufFile> file, const LoadOptions& opt = {});

    const HParams& hparams() const { return hp_; }
    const GgufFile& gguf() const { return *file_; }
    std::shared_ptr<const GgufFile> gguf_ptr() const { return file_; }
    const std::string& path() const;

    const Weight& tok_embd() const { return tok_embd_; }  // (n_vocab, n_embd)
    const Weight& output() const { return output_; }  // (n_vocab, n_embd); == tok_embd when tied
    const std::vector<float>& output_norm() const { return output_norm_; }  // (n_embd)
    const std::vector<float>& rope_freqs() const { return rope_freqs_; }  // (n_rot/2) or empty: divide the frequencies
    const std::vector<float>& rope_freqs_long() const { return rope_long_; }  // phi3: used when n_ctx > n_ctx_orig
    // Layers 0..n_layer-1; with an MTP block, layer(n_layer) is its decoder layer.
    const LayerWeights& layer(int i) const { return layers_[size_t(i)]; }
    const MtpWeights* mtp() const { return mtp_.eh_proj.data ? &mtp_ : nullptr; }  // null: no MTP block
    const AssistantWeights* assistant() const { return asst_.pre_proj.data ? &asst_ : nullptr; }  // null: not one
    const Eagle3Weights* eagle3() const { return eagle3_.fc.data ? &eagle3_ : nullptr; }  // null: not one
    // gemma4's per-layer embeddings (HParams::n_embd_per_layer > 0): per token, the n_layer slices of
    // (embd_l(token) sqrt(n_pl) + rmsnorm(proj x / sqrt(n_embd)) * norm) / sqrt(2), x the scaled input embedding
    struct PerLayerEmbd {
        Weight table;  // (n_vocab, n_layer * n_embd_per_layer)
        Weight proj;  // (n_layer * n_embd_per_layer, n_embd)
        std::vector<float> norm;  // (n_embd_per_layer)
    };
    const PerLayerEmbd& per_layer_embd() const { return ple_; }

    // Every tensor of the model, visited one way (model/weights.cpp): its matrices (the layers', an expert's slice of
    // a 3-D tensor each, the embedding and output, gemma4's per-layer embedding, the MTP block's, a Gemma 4
    // assistant's and an EAGLE-3 head's projections) and its vectors (norms, biases, sinks, router biases and
    // scales, the Gated DeltaNet's per-head constants, RoPE factors). `layer`: the layer, or -1 for the model's own;
    // `index`: an expert's or head's number, else -1. A matrix that is another's view (a tied output, gemma4's v = k,
    // the MTP block's defaults) is visited once, as the first. Placement (the CPU's repacking) and the tests of
    // completeness (every 2-D tensor of the file reached) go through these.
    struct WeightVisit {
        const char* name;
        int layer;
        int index;
    };
    void for_each_matrix(const std::function<void(const WeightVisit&, const Weight&)>& fn) const;
    void for_each_vector(const std::function<void(const WeightVisit&, const std::vector<float>&)>& fn) const;

    int64_t n_params() const;
    size_t weights_bytes() const;
    // Weight bytes one forward pass over n_tok tokens reads: every matrix but the embedding tables (one row per
    // token; gemma4's per-layer table too), and of a mixture of experts the experts the batch selects, counted at their expected number under
    // uniform routing, expected_experts(n_tok) per layer. Dense models: about weights_bytes() for any n_tok.
    double bytes_per_pass(int n_tok) const;
    // Multiply-accumulates of the weight matrices per token (the output matrix when `output`: a prompt computes
    // logits for its last token only; the embedding lookup never; MoE: the n_expert_used experts a token takes).
    // Attention's own arithmetic is not counted.
    double macs_per_token(bool output = true) const;
    double expected_experts(int n_tok) const;  // n_expert * (1 - (1 - k / n_expert)^n_tok); 0 for dense models
    std::string describe_type() const;  // the most common matrix type, e.g. "Q8_0"
    // A split model's cluster (its sessions have twins on the other ranks; this rank binds the layers
    // [first_layer(), end_layer()) of it); null for a model held whole.
    Cluster* cluster() const { return cluster_.get(); }
    // Whether trunk layer i's weights (and a session's cache rows of it) are in this process: every layer of a model
    // held whole; of a split one, this rank's. (An MTP block is rank 0's.)
    bool holds_layer(int i) const { return i >= split_lo_ && i < split_hi_; }

private:
    Model() = default;
    std::shared_ptr<const GgufFile> file_;
    HParams hp_;
    Weight tok_embd_, output_;
    std::vector<float> output_norm_, rope_freqs_, rope_long_;
    std::vector<LayerWeights> layers_;
    MtpWeights mtp_;
    PerLayerEmbd ple_;
    AssistantWeights asst_;
    Eagle3Weights eagle3_;
    std::shared_ptr<Cluster> cluster_;
    int split_lo_ = 0, split_hi_ = 1 << 30;
    void bind_split_share();  // keeps the weights of this rank's share only
    void bind_tensor_share(double layer_bytes, double head_bytes);  // a tensor split's (model/tensor_share.cpp)
    // Columns [c0, c0 + n) of w: a strided view, or (F32/F16/BF16) a copy held in owned_
    Weight column_slice(const Weight& w, int64_t c0, int64_t n);
    std::vector<std::vector<uint8_t>> owned_;
    bool place_ = true;  // LoadOptions::place
    std::unique_ptr<std::mutex> place_mu_ = std::make_unique<std::mutex>();
    std::vector<std::shared_ptr<uint8_t>> packed_;  // the buffers of the repacked matrices (place_on_cpu), one a call
    size_t packed_bytes_ = 0;
    void bind_extras(const ArchLoad& a, bool mtp);  // the assistant's, per-layer embeddings', MTP's tensors
    // The visit of for_each_matrix / for_each_vector over a const or a mutable model (model/weights.cpp)
    template <class Self, class MatrixFn, class VectorFn>
    static void visit(Self& self, MatrixFn&& matrix, VectorFn&& vector);
    // Drops this process's mapping of the file's pages in [from, from + bytes) that lie wholly inside the tensor
    // data [data_lo_, data_hi_) (MADV_DONTNEED on the read-only mapping: re-read from the file if touched again;
    // (nullptr, SIZE_MAX): all of it); nothing for a model parsed from memory.
    void release_file_pages(const uint8_t* from, size_t bytes) const;
    uintptr_t data_lo_ = UINTPTR_MAX, data_hi_ = 0;

public:
    // The CPU's placement (LoadOptions::place) of what a session runs on the CPU: the repacked copies of the matrices
    // of layers [first, last) (trunk layers; an MTP block's is layer n_layer) and, with `head`, of the model's own
    // (the output, an MTP block's, an EAGLE-3 head's or an assistant's projections). Made once per matrix, when the
    // first session that runs it on the CPU is built (Session's constructor calls this), so the layers a GPU runs
    // get no host copy. Safe against concurrent calls and against passes of sessions built before: only matrices
    // no pass has read yet are written.
    void place_on_cpu(int first, int last, bool head) const;
    // The bytes place_on_cpu would still allocate, were every layer to run on the CPU (choose_context counts them
    // as taken).
    size_t unplaced_cpu_bytes() const;
    size_t packed_bytes() const;  // memory held by repacked copies
};

}  // namespace tandem
