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

namespace {
struct ArchName {
    Arch arch;
    const char* name;
};
constexpr ArchName kArchs[] = {
    {Arch::LLAMA, "llama"},
    {Arch::QWEN2, "qwen2"},
    {Arch::QWEN3, "qwen3"},
    {Arch::QWEN3MOE, "qwen3moe"},
    {Arch::GEMMA3, "gemma3"},
    {Arch::PHI3, "phi3"},
    {Arch::GPT_OSS, "gpt-oss"},
    {Arch::SMOLLM3, "smollm3"},
    {Arch::GRANITE, "granite"},
    {Arch::OLMO2, "olmo2"},
    {Arch::MISTRAL3, "mistral3"},
    {Arch::GLM4MOE, "glm4moe"},
    {Arch::DEEPSEEK2, "deepseek2"},
    {Arch::QWEN35, "qwen35"},
    {Arch::QWEN35MOE, "qwen35moe"},
    {Arch::QWEN3NEXT, "qwen3next"},
    {Arch::LLAMA4, "llama4"},
    {Arch::GEMMA4, "gemma4"},
    {Arch::GEMMA4_ASSISTANT, "gemma4-assistant"},
    {Arch::EAGLE3, "eagle3"},
};
}  // namespace

const char* arch_name(Arch a) {
    for (const auto& e : kArchs)
        if (e.arch == a) return e.name;
    return "?";
}

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

namespace {

struct Loader {
    const GgufFile& f;
    std::string arch;

    [[noreturn]] void fail(const std::string& what) const { throw Error(f.path() + ": " + what); }

    int req_int(const std::string& key) const {
        auto v = f.get_int(arch + "." + key);
        if (!v) fail("missing required metadata '" + arch + "." + key + "'");
        if (*v <= 0 || *v > (int64_t(1) << 30))
            fail(strprintf("metadata '%s.%s' has invalid value %lld", arch.c_str(), key.c_str(), (long long)*v));
        return int(*v);
    }
    int opt_int(const std::string& key, int def) const {
        auto v = f.get_int(arch + "." + key);
        if (!v) return def;
        if (*v <= 0 || *v > (int64_t(1) << 30))
            fail(strprintf("metadata '%s.%s' has invalid value %lld", arch.c_str(), key.c_str(), (long long)*v));
        return int(*v);
    }
    // A per-layer value given as one number or as an array of n (gemma4's head_count_kv, feed_forward_length);
    // def 0: required.
    std::vector<int> per_layer(const std::string& key, int n, int def) const {
        const GgufValue* v = f.find(arch + "." + key);
        if (!v && def == 0) fail("missing required metadata '" + arch + "." + key + "'");
        if (!v) return std::vector<int>(size_t(n), def);
        if (v->type != GgufType::ARRAY) return std::vector<int>(size_t(n), opt_int(key, def));
        if (int(v->arr.size()) != n)
            fail(strprintf("metadata '%s.%s' has %zu entries for %d layers", arch.c_str(), key.c_str(), v->arr.size(),
                           n));
        std::vector<int> out;
        for (const GgufValue& e : v->arr) {
            if (!e.is_integer() || e.as_int() <= 0 || e.as_int() > (int64_t(1) << 30))
                fail("metadata '" + arch + "." + key + "' has an invalid entry");
            out.push_back(int(e.as_int()));
        }
        return out;
    }
    float opt_float(const std::string& key, float def) const {
        auto v = f.get_float(arch + "." + key);
        return v ? float(*v) : def;
    }

    const GgufTensor& tensor(const std::string& name, std::vector<int64_t> shape) const {
        const GgufTensor* t = f.tensor(name);
        if (!t) fail("missing tensor '" + name + "'");
        if (is_integer_type(t->type))
            fail("tensor '" + name + "' holds integers (" + type_name(t->type) + "), not weights");
        bool ok = t->n_dims <= int(shape.size());
        for (size_t d = 0; ok && d < 4; d++) ok = t->ne[d] == (d < shape.size() ? shape[d] : 1);
        if (!ok) {
            std::string want, got;
            for (size_t d = 0; d < shape.size(); d++) want += (d ? ", " : "") + std::to_string(shape[d]);
            for (int d = 0; d < t->n_dims; d++) got += (d ? ", " : "") + std::to_string(t->ne[d]);
            fail("tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
        }
        return *t;
    }
    Weight matrix(const std::string& name, int64_t rows, int64_t cols) const {
        const GgufTensor& t = tensor(name, {cols, rows});
        Weight w;
        w.data = t.data;
        w.type = t.type;
        w.rows = rows;
        w.cols = cols;
        w.row_stride = row_bytes(t.type, cols);
        return w;
    }
    std::vector<float> vec(const std::string& name, int64_t n) const {
        const GgufTensor& t = tensor(name, {n});
        std::vector<float> out(static_cast<size_t>(n));
        dequantize_row_ref(t.type, t.data, out.data(), n);
        return out;
    }
    // A (rows, cols) view of `n_rows` rows starting at row `first` of a 2-D tensor (a fused q|k|v or gate|up).
    static Weight rows_of(const Weight& w, int64_t first, int64_t n_rows) { return weight_rows(w, first, n_rows); }
    // The n_expert (rows, cols) matrices of a 3-D tensor of ggml shape [cols, rows, n_expert].
    std::vector<Weight> experts(const std::string& name, int64_t rows, int64_t cols, int64_t n_expert) const {
        const GgufTensor& t = tensor(name, {cols, rows, n_expert});
        std::vector<Weight> out(static_cast<size_t>(n_expert));
        for (int64_t e = 0; e < n_expert; e++) {
            Weight& w = out[size_t(e)];
            w.type = t.type;
            w.rows = rows;
            w.cols = cols;
            w.row_stride = row_bytes(t.type, cols);
            w.data = t.data + size_t(e) * size_t(rows) * w.row_stride;
        }
        return out;
    }
    // A [n, n_expert] bias tensor as n_expert * n floats.
    std::vector<float> expert_vec(const std::string& name, int64_t n, int64_t n_expert) const {
        const GgufTensor& t = tensor(name, {n, n_expert});
        std::vector<float> out(static_cast<size_t>(n * n_expert));
        for (int64_t e = 0; e < n_expert; e++)
            dequantize_row_ref(t.type, t.data + size_t(e) * row_bytes(t.type, n), out.data() + size_t(e * n), n);
        return out;
    }
    bool has(const std::string& name) const { return f.tensor(name) != nullptr; }
    // A 1-D table of n ids (I32 or I64, as llama.cpp's converters write them).
    std::vector<int64_t> ids(const std::string& name, int64_t n) const {
        const GgufTensor* t = f.tensor(name);
        if (!t) fail("missing tensor '" + name + "'");
        if (!is_integer_type(t->type) || t->n_dims != 1 || t->ne[0] != n)
            fail(strprintf("tensor '%s' must be %lld integers (I32 or I64), it is %s [%lld]", name.c_str(),
                           (long long)n, type_name(t->type), (long long)t->ne[0]));
        std::vector<int64_t> out(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; i++) {
            if (t->type == TensorType::I64) std::memcpy(&out[size_t(i)], t->data + 8 * size_t(i), 8);
            else {
                int32_t v;
                std::memcpy(&v, t->data + 4 * size_t(i), 4);
                out[size_t(i)] = v;
            }
        }
        return out;
    }
};

// An EAGLE-3 head's weights (Eagle3Weights; llama.cpp's eagle3 files): one layer whose attention reads 2 n_embd, the
// fusion of three target states, its own norm and output over a reduced vocabulary mapped by d2t. Its vocabulary
// is its target's tokenizer; token embeddings and output are optional (then its target's are used).
void bind_eagle3(const Loader& L, HParams& hp, Weight& tok_embd, Weight& output, std::vector<float>& output_norm,
                 std::vector<LayerWeights>& layers, Eagle3Weights& w) {
    const GgufFile& f = L.f;
    const GgufValue* toks = f.get_array("tokenizer.ggml.tokens", GgufType::STRING);
    if (!toks || toks->arr.empty()) L.fail("an eagle3 head needs its target's tokenizer (tokenizer.ggml.tokens)");
    hp.n_vocab = int(toks->arr.size());
    if (hp.n_layer != 1) L.fail(strprintf("an eagle3 head has one decoder layer, this file says %d", hp.n_layer));
    const GgufValue* tl = f.find(L.arch + ".target_layers");
    if (!tl || tl->type != GgufType::ARRAY || tl->arr.size() != 3)
        L.fail("an eagle3 head needs " + L.arch + ".target_layers: the three target layers it reads");
    for (int i = 0; i < 3; i++) {
        const GgufValue& e = tl->arr[size_t(i)];
        if (!e.is_integer() || e.as_int() < 0 || e.as_int() > 4096)
            L.fail(L.arch + ".target_layers has an invalid entry");
        w.target_layers[i] = int(e.as_int());
    }
    w.n_embd_target = L.req_int("target_hidden_size");
    w.norm_before_residual = f.get_bool(L.arch + ".norm_before_residual").value_or(false);
    w.norm_before_fc = f.get_bool(L.arch + ".norm_before_fc").value_or(false);
    const int64_t E = hp.n_embd, Ein = 3 * int64_t(w.n_embd_target), q_dim = int64_t(hp.n_head) * hp.head_dim,
                  kv_dim = int64_t(hp.n_head_kv) * hp.head_dim;
    w.fc = L.matrix("fc.weight", E, Ein);
    if (w.norm_before_fc) w.fc_norm = L.vec("enc.output_norm.weight", Ein);
    if (L.has("token_embd.weight")) tok_embd = L.matrix("token_embd.weight", hp.n_vocab, E);
    int64_t n_out = hp.n_vocab;
    if (L.has("d2t")) {
        const GgufTensor* t = f.tensor("d2t");
        n_out = t->ne[0];
        if (t->n_dims != 1 || n_out < 1 || n_out > hp.n_vocab)
            L.fail(
                strprintf("tensor 'd2t' maps %lld draft tokens into a vocabulary of %d", (long long)n_out, hp.n_vocab));
        std::vector<uint8_t> seen(size_t(hp.n_vocab), 0);
        for (int64_t id : L.ids("d2t", n_out)) {
            if (id < 0 || id >= hp.n_vocab || seen[size_t(id)])
                L.fail(strprintf("tensor 'd2t' holds %s target id %lld (vocabulary of %d)",
                                 id >= 0 && id < hp.n_vocab ? "a repeated" : "an invalid", (long long)id, hp.n_vocab));
            seen[size_t(id)] = 1;
            w.d2t.push_back(int32_t(id));
        }
        if (!L.has("output.weight")) L.fail("an eagle3 head with d2t needs its own output.weight (its vocabulary)");
    }
    if (L.has("output.weight")) output = L.matrix("output.weight", n_out, E);
    output_norm = L.vec("output_norm.weight", E);
    layers.resize(1);
    LayerWeights& l = layers[0];
    l.n_head = hp.n_head;
    l.n_head_kv = hp.n_head_kv;
    l.head_dim = hp.head_dim;
    l.n_rot = hp.n_rot;
    l.attn_norm = L.vec("blk.0.attn_norm.weight", E);
    w.hidden_norm = L.vec("blk.0.attn_norm_2.weight", E);
    l.wq = L.matrix("blk.0.attn_q.weight", q_dim, 2 * E);
    l.wk = L.matrix("blk.0.attn_k.weight", kv_dim, 2 * E);
    l.wv = L.matrix("blk.0.attn_v.weight", kv_dim, 2 * E);
    l.wo = L.matrix("blk.0.attn_output.weight", E, q_dim);
    l.ffn_norm = L.vec("blk.0.ffn_norm.weight", E);
    l.w_gate = L.matrix("blk.0.ffn_gate.weight", hp.n_ff, E);
    l.w_up = L.matrix("blk.0.ffn_up.weight", hp.n_ff, E);
    l.w_down = L.matrix("blk.0.ffn_down.weight", E, hp.n_ff);
}

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path, const LoadOptions& opt) {
    return from_gguf(GgufFile::open(path), opt);
}

std::shared_ptr<const Model> Model::from_gguf(std::shared_ptr<const GgufFile> file, const LoadOptions& opt) {
    const GgufFile& f = *file;
    auto arch = f.get_str("general.architecture");
    if (!arch) throw Error(f.path() + ": missing required metadata 'general.architecture'");
    std::shared_ptr<Model> m(new Model());
    m->file_ = file;
    for (const GgufTensor& t : file->tensors()) {  // the tensor data's extent (release_file_pages stays inside it)
        m->data_lo_ = std::min(m->data_lo_, reinterpret_cast<uintptr_t>(t.data));
        m->data_hi_ = std::max(m->data_hi_, reinterpret_cast<uintptr_t>(t.data) + t.nbytes);
    }
    HParams& hp = m->hp_;
    bool known = false;
    for (const auto& e : kArchs)
        if (*arch == e.name) {
            hp.arch = e.arch;
            known = true;
        }
    if (!known) {
        std::string list;
        for (const auto& e : kArchs) list += std::string(list.empty() ? "" : ", ") + e.name;
        throw Error(f.path() + ": unsupported architecture '" + *arch + "' (supported: " + list + ")");
    }
    const Arch A = hp.arch;
    // gemma4-assistant: gemma4's block; its every layer is a "nextn" layer (nextn_predict_layers = block_count)
    const bool g4 = A == Arch::GEMMA4 || A == Arch::GEMMA4_ASSISTANT, assistant = A == Arch::GEMMA4_ASSISTANT;
    // Qwen3.5's hybrid layout, dense or MoE, and Qwen3-Next's (the MoE one with fused beta|alpha, grouped heads)
    const bool q35 = A == Arch::QWEN35 || A == Arch::QWEN35MOE || A == Arch::QWEN3NEXT;
    const bool q35_moe = A == Arch::QWEN35MOE || A == Arch::QWEN3NEXT;

    Loader L{f, *arch};
    hp.n_embd = L.req_int("embedding_length");
    hp.n_layer = L.req_int("block_count");
    // Multi-token-prediction blocks (glm4moe, DeepSeek V3) are the file's last nextn_predict_layers blocks; the
    // forward pass runs the ones before them.
    if (auto v = f.get_int(*arch + ".nextn_predict_layers"); v && *v != 0 && !assistant) {
        if (*v < 0 || *v >= hp.n_layer)
            L.fail(strprintf("nextn_predict_layers %lld is invalid for %d blocks", (long long)*v, hp.n_layer));
        hp.n_layer_nextn = int(*v);
        hp.n_layer -= hp.n_layer_nextn;
    }
    // gemma4 gives the KV heads and FFN widths per layer (arrays); the other families one number
    const std::vector<int> ff_layer =
        L.per_layer("feed_forward_length", hp.n_layer, A == Arch::QWEN3MOE || A == Arch::GPT_OSS || q35_moe ? 1 : 0);
    hp.n_ff = *std::max_element(ff_layer.begin(), ff_layer.end());
    hp.n_head = L.req_int("attention.head_count");
    const std::vector<int> kv_heads = L.per_layer("attention.head_count_kv", hp.n_layer, hp.n_head);
    hp.n_head_kv = kv_heads[0];
    hp.n_ctx_train = L.opt_int("context_length", 2048);
    for (int nkv : kv_heads)
        if (nkv > hp.n_head || hp.n_head % nkv != 0)
            L.fail(strprintf("head_count %d is not a multiple of head_count_kv %d", hp.n_head, nkv));
    if (hp.n_embd % hp.n_head != 0 && !f.find(*arch + ".attention.key_length"))
        L.fail(strprintf("embedding_length %d is not a multiple of head_count %d", hp.n_embd, hp.n_head));
    hp.head_dim = L.opt_int("attention.key_length", hp.n_embd / hp.n_head);
    hp.n_rot = L.opt_int("rope.dimension_count", hp.head_dim);
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2)
        L.fail(strprintf("rope.dimension_count %d is invalid for head size %d", hp.n_rot, hp.head_dim));
    if (A == Arch::DEEPSEEK2) {  // multi-head latent attention (HParams::mla), as llama.cpp's MLA files give it
        if (!f.find(*arch + ".attention.key_length_mla"))
            L.fail(
                "a deepseek2 file without attention.key_length_mla (an old conversion with attn_kv_b): "
                "convert it again with llama.cpp's current convert_hf_to_gguf.py");
        hp.mla = true;
        hp.n_lora_kv = L.req_int("attention.kv_lora_rank");
        hp.n_lora_q = int(f.get_int(*arch + ".attention.q_lora_rank").value_or(0));
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
    } else {
        if (L.opt_int("attention.value_length", hp.head_dim) != hp.head_dim)
            L.fail("attention.value_length differs from key_length (not supported)");
        if (g4) {  // its sliding-window layers have their own head size and rotated dims
            hp.head_dim_swa = L.req_int("attention.key_length_swa");
            hp.n_rot_swa = L.opt_int("rope.dimension_count_swa", hp.head_dim_swa);
            if (L.opt_int("attention.value_length_swa", hp.head_dim_swa) != hp.head_dim_swa)
                L.fail("attention.value_length_swa differs from key_length_swa (not supported)");
            if (hp.n_rot_swa > hp.head_dim_swa || hp.n_rot_swa % 2)
                L.fail(strprintf("rope.dimension_count_swa %d is invalid for head size %d", hp.n_rot_swa,
                                 hp.head_dim_swa));
        }
        // attention's tiles take heads up to 576 (MLA's row); gemma4's global layers have 512
        for (int hd : {hp.head_dim, hp.head_dim_swa > 0 ? hp.head_dim_swa : hp.head_dim})
            if (hd % 8 != 0 || hd > (g4 ? 512 : 256))
                L.fail(strprintf("head size %d is not supported (a multiple of 8, at most %d)", hd, g4 ? 512 : 256));
    }
    hp.rms_eps = L.opt_float("attention.layer_norm_rms_epsilon", 1e-5f);
    hp.rope_theta = L.opt_float("rope.freq_base", 10000.0f);
    if (!(hp.rms_eps > 0) || !(hp.rope_theta > 0)) L.fail("rms epsilon and rope.freq_base must be positive");
    hp.n_ctx_orig = L.opt_int("rope.scaling.original_context_length", hp.n_ctx_train);
    hp.rope_attn_factor = L.opt_float("rope.scaling.attn_factor", 1.0f);
    if (!(hp.rope_attn_factor > 0)) L.fail("rope.scaling.attn_factor must be positive");
    const auto st = f.get_str(*arch + ".rope.scaling.type");
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
        if (A == Arch::DEEPSEEK2) {  // its converter writes 0.1 mscale_all_dim; DeepSeek V2's mscale is that too
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
    hp.rope_style = A == Arch::LLAMA || A == Arch::SMOLLM3 || A == Arch::GRANITE || A == Arch::MISTRAL3 ||
                            A == Arch::DEEPSEEK2 || A == Arch::LLAMA4 || A == Arch::EAGLE3
                        ? RopeStyle::NORM
                        : RopeStyle::NEOX;
    hp.has_qk_norm = A == Arch::QWEN3 || A == Arch::QWEN3MOE || A == Arch::GEMMA3 || g4 || A == Arch::OLMO2 || q35 ||
                     (A == Arch::GLM4MOE && L.has("blk.0.attn_q_norm.weight"));  // GLM-4.5 has it, -Air not
    hp.has_post_norms = A == Arch::GEMMA3 || g4 || A == Arch::OLMO2;
    hp.q_scale = 1.0f / std::sqrt(float(hp.head_dim));
    if (hp.mla) {  // llama.cpp's deepseek2 graph: the query scale carries YaRN's magnitude, squared
        const float ln = std::log(1.0f / hp.rope_freq_scale);
        const float org = hp.rope_attn_factor * (1.0f + 0.1f * ln);
        const float ms = org * (1.0f + 0.1f * hp.yarn_log_mul * ln);
        hp.q_scale = ms * ms / std::sqrt(float(hp.mla_k));
    }
    if (A == Arch::OLMO2) {  // OLMo 2: post-norms only, QK-norm over the whole q and k
        hp.has_pre_norms = false;
        hp.qk_norm_whole = true;
        if (f.get_int(*arch + ".attention.sliding_window"))
            L.fail("olmo2 with a sliding window (OLMo 3) is not supported yet");
    }
    if (A == Arch::MISTRAL3) {  // Mistral 3: llama-shaped, YaRN, and Llama 4's attention temperature
        hp.attn_temp_scale = L.opt_float("attention.temperature_scale", 0.0f);
        hp.attn_temp_span = hp.n_ctx_orig;
        if (!std::isfinite(hp.attn_temp_scale) || hp.attn_temp_scale < 0)
            L.fail("attention.temperature_scale must be a non-negative number");
        if (f.find(*arch + ".expert_count")) L.fail("mistral3 with experts (Mistral Large 3) is not supported yet");
    }
    if (A == Arch::GRANITE) {  // Granite 3.x: four multipliers on an otherwise llama-shaped model
        hp.logit_scale = L.opt_float("logit_scale", 1.0f);
        const float res = L.opt_float("residual_scale", 0.0f), emb = L.opt_float("embedding_scale", 0.0f);
        const float att = L.opt_float("attention.scale", 0.0f);
        if (!(hp.logit_scale > 0) || res < 0 || emb < 0 || att < 0)
            L.fail("granite's logit_scale must be positive and its residual, embedding and attention scales >= 0");
        if (res > 0) hp.residual_scale = res;  // 0 (or absent): no scaling, as llama.cpp
        if (emb > 0) hp.embd_scale = emb;
        if (att > 0) hp.q_scale = att;
    }
    if (A == Arch::GEMMA3) {
        hp.embd_scale = std::sqrt(float(hp.n_embd));
        hp.ffn_act = FfnAct::GELU_TANH;
        // llama.cpp (after gemma_pytorch): Gemma 3 27B (62 layers) scales queries by n_embd / n_head, not head_dim.
        if (hp.n_layer == 62) hp.q_scale = 1.0f / std::sqrt(float(hp.n_embd / hp.n_head));
        hp.logit_softcap = L.opt_float("final_logit_softcapping", 0.0f);
    }
    if (g4) {  // Gemma 4 (llama.cpp's gemma4): gemma3's block with the differences below
        hp.embd_scale = std::sqrt(float(hp.n_embd));
        hp.ffn_act = FfnAct::GELU_TANH;
        hp.logit_softcap = L.opt_float("final_logit_softcapping", 0.0f);
        hp.q_scale = 1.0f;  // its q/k norms carry the scale
        hp.v_norm = true;
        hp.rope_freqs_global_only = true;
        // (an assistant shares its target's cache, whatever its file says)
        if (!assistant) hp.n_kv_shared = int(f.get_int(*arch + ".attention.shared_kv_layers").value_or(0));
        hp.n_embd_per_layer = int(f.get_int(*arch + ".embedding_length_per_layer_input").value_or(0));
        if (hp.n_kv_shared < 0 || hp.n_kv_shared > hp.n_layer - 2 || hp.n_embd_per_layer < 0 ||
            hp.n_embd_per_layer > (1 << 16))
            L.fail(strprintf("attention.shared_kv_layers %d / embedding_length_per_layer_input %d are invalid",
                             hp.n_kv_shared, hp.n_embd_per_layer));
        if (assistant) {  // no soft-capping, no per-layer inputs; the target's width from embedding_length_out
            hp.logit_softcap = 0;
            hp.n_embd_per_layer = 0;
            m->asst_.n_embd_target = L.req_int("embedding_length_out");
            if (m->asst_.n_embd_target == hp.n_embd)
                L.fail("a gemma4-assistant needs embedding_length_out: its target's hidden size");
        }
    }
    if (A == Arch::GPT_OSS) hp.ffn_act = FfnAct::SWIGLU_OAI;
    std::vector<bool> recurrent_layer;
    if (q35) {
        // Qwen3.5: Gated DeltaNet layers, and gated attention in every full_attention_interval-th layer (or as the
        // file's attention.recurrent_layers says). Its multimodal RoPE sections are read by llama.cpp with the same
        // position in every section for text, which is NEOX RoPE over n_rot dims: text-only here.
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
        hp.ssm_grouped_heads = A == Arch::QWEN3NEXT;
        recurrent_layer.assign(size_t(hp.n_layer), false);
        if (const GgufValue* v = f.find(*arch + ".attention.recurrent_layers"); v && v->type == GgufType::ARRAY) {
            for (size_t i = 0; i < v->arr.size() && i < recurrent_layer.size(); i++)
                recurrent_layer[i] = v->arr[i].is_integer() ? v->arr[i].as_int() != 0 : v->arr[i].u != 0;
        } else {
            const int interval = L.opt_int("full_attention_interval", 4);
            for (int i = 0; i < hp.n_layer; i++) recurrent_layer[size_t(i)] = (i + 1) % interval != 0;
        }
    }
    if (A == Arch::GLM4MOE)
        if (const GgufValue* v = f.find(*arch + ".rope.dimension_sections"); v && v->type == GgufType::ARRAY)
            for (const auto& e : v->arr)
                if (e.is_integer() && e.as_int() != 0) L.fail("multimodal RoPE sections (GLM-4.5V) are not supported");

    // Sliding windows, as llama.cpp assigns them: gemma3 every layer but each 6th (il % 6 < 5), gpt-oss every
    // other (il % 2 == 0), or as the file's attention.sliding_window_pattern says. phi3's window is ignored, as
    // llama.cpp does (its converted files give a window the models were not trained with at every layer).
    int swa_pattern = A == Arch::GEMMA3 ? 6 : A == Arch::GPT_OSS ? 2 : 0;
    // Llama 4 (llama.cpp's llama4): three of every four layers (il % 4 < 3, or the file's sliding_window_pattern)
    // attend within chunks of 8192 positions with RoPE, and the fourth attends globally without RoPE, its queries
    // sharpened beyond each 8192 positions (temperature 0.1, offset 1) — the sizes llama.cpp fixes, whatever the
    // file's sliding_window says — unless the file sets attention.sliding_window to 0: then no chunks, and only
    // the last layer is NoPE (llama.cpp's n_no_rope_layer_step = n_layer; it has no temperature for such files).
    // The RoPE layers' q/k heads are L2-normed after RoPE (not the 128-expert model, as llama.cpp).
    int llama4_nope_step = 0;
    if (A == Arch::LLAMA4) {
        const auto w = f.get_int(*arch + ".attention.sliding_window");
        llama4_nope_step = hp.n_layer;
        if (!(w && *w == 0)) {
            hp.n_swa = 8192;
            hp.swa_chunked = true;
            swa_pattern = L.opt_int("attention.sliding_window_pattern", 4);
            hp.rope_theta_swa = L.opt_float("rope.freq_base_swa", hp.rope_theta);
            hp.rope_freq_scale_swa = hp.rope_freq_scale;
            hp.attn_temp_scale = 0.1f;
            hp.attn_temp_span = 8192;
            hp.attn_temp_offset = 1.0f;
            hp.attn_temp_nope_only = true;
            llama4_nope_step = 4;
        }
    }
    // gemma4: attention.sliding_window_pattern is one flag per layer (true: sliding window)
    std::vector<bool> swa_layer;
    if (g4) {
        const GgufValue* v = f.find(*arch + ".attention.sliding_window_pattern");
        if (!v || v->type != GgufType::ARRAY || int(v->arr.size()) < hp.n_layer)
            L.fail("gemma4 needs attention.sliding_window_pattern: one flag per layer");
        for (int i = 0; i < hp.n_layer; i++) swa_layer.push_back(v->arr[size_t(i)].u != 0);
        swa_pattern = 1;  // the window, RoPE base and scale below
        if (!f.get_int(*arch + ".attention.sliding_window"))
            L.fail("missing required metadata '" + *arch + ".attention.sliding_window'");
    }
    if (swa_pattern && A != Arch::LLAMA4) {
        auto w = f.get_int(*arch + ".attention.sliding_window");
        if (A == Arch::GPT_OSS && !w) L.fail("missing required metadata '" + *arch + ".attention.sliding_window'");
        if (w && *w > 0) {
            hp.n_swa = int(std::min<int64_t>(*w, int64_t(1) << 30));
            if (!g4) swa_pattern = L.opt_int("attention.sliding_window_pattern", swa_pattern);
            const bool gemma = A == Arch::GEMMA3 || g4;
            hp.rope_theta_swa = gemma ? 10000.0f : hp.rope_theta;
            hp.rope_freq_scale_swa = gemma ? 1.0f : hp.rope_freq_scale;
            hp.rope_theta_swa = L.opt_float("rope.freq_base_swa", hp.rope_theta_swa);
            if (!(hp.rope_theta_swa > 0)) L.fail("rope.freq_base_swa must be positive");
        }
    }

    // gemma4: the 26B-A4B's experts beside a dense MLP in every layer (ffn_dense_and_experts)
    const bool g4_moe = A == Arch::GEMMA4 && f.find(*arch + ".expert_count");
    if (A == Arch::QWEN3MOE || A == Arch::GPT_OSS || A == Arch::GLM4MOE || A == Arch::DEEPSEEK2 || q35_moe ||
        A == Arch::LLAMA4 || g4_moe) {
        hp.n_expert = L.req_int("expert_count");
        hp.n_expert_used = L.req_int("expert_used_count");
        const std::vector<int> ff_exp = L.per_layer("expert_feed_forward_length", hp.n_layer, 0);
        if (std::count(ff_exp.begin(), ff_exp.end(), ff_exp[0]) != hp.n_layer)
            L.fail("expert_feed_forward_length differs between layers (not supported)");
        hp.n_ff_exp = ff_exp[0];
        if (hp.n_expert_used > hp.n_expert || hp.n_expert > 4096)
            L.fail(strprintf("expert_used_count %d / expert_count %d are invalid", hp.n_expert_used, hp.n_expert));
        hp.moe_gating = A == Arch::GPT_OSS ? MoeGating::SOFTMAX_WEIGHT : MoeGating::SOFTMAX;
        // llama.cpp's qwen3moe and qwen35moe graphs: norm_w = true
        hp.expert_weights_norm = A == Arch::QWEN3MOE || q35_moe || g4_moe;
        if (q35_moe) {  // one shared expert of its own size, gated per token
            hp.n_expert_shared = 1;
            hp.n_ff_shexp = L.opt_int("expert_shared_feed_forward_length", hp.n_ff);
        }
        hp.expert_weights_scale = L.opt_float("expert_weights_scale", 0.0f);
        hp.has_expert_bias = A == Arch::GPT_OSS;
    }
    if (A == Arch::LLAMA4) {  // sigmoid weights of the top k by logit, on the experts' input; a shared expert
        hp.moe_gating = MoeGating::SIGMOID;
        hp.moe_weight_before_ffn = true;
        hp.n_expert_shared = 1;
        hp.n_moe_layer_step = L.opt_int("interleave_moe_layer_step", 1);
        if (hp.n_moe_layer_step < 1 || hp.n_moe_layer_step > hp.n_layer)
            L.fail(strprintf("interleave_moe_layer_step %d is invalid", hp.n_moe_layer_step));
        hp.qk_l2_norm = hp.n_expert != 128;  // as llama.cpp: Llama 4 Maverick has none
    }
    if (A == Arch::GLM4MOE || A == Arch::DEEPSEEK2) {
        // GLM-4.5, DeepSeek V3: sigmoid routing with a selection bias, shared experts, dense first layers (DeepSeek
        // V2: softmax, llama.cpp's default for deepseek2 files that do not say; glm4moe's is sigmoid)
        const int64_t gating = f.get_int(*arch + ".expert_gating_func").value_or(A == Arch::GLM4MOE ? 2 : 1);
        if (gating != 1 && gating != 2)
            L.fail(strprintf("expert_gating_func %lld is not supported (1 softmax, 2 sigmoid)", (long long)gating));
        hp.moe_gating = gating == 1 ? MoeGating::SOFTMAX : MoeGating::SIGMOID;
        hp.expert_weights_norm = f.get_bool(*arch + ".expert_weights_norm").value_or(false);
        const int64_t shared = f.get_int(*arch + ".expert_shared_count").value_or(0);
        const int64_t lead = f.get_int(*arch + ".leading_dense_block_count").value_or(0);
        if (shared < 0 || shared > 64 || lead < 0 || lead > hp.n_layer)
            L.fail(strprintf("expert_shared_count %lld / leading_dense_block_count %lld are invalid", (long long)shared,
                             (long long)lead));
        hp.n_expert_shared = int(shared);
        hp.n_layer_dense_lead = int(lead);
        const int64_t groups = f.get_int(*arch + ".expert_group_count").value_or(0);
        const int64_t used = f.get_int(*arch + ".expert_group_used_count").value_or(0);
        if (groups > 1) {
            if (groups >= hp.n_expert || hp.n_expert % groups != 0 || used < 1 || used > groups ||
                used * (hp.n_expert / groups) < hp.n_expert_used)
                L.fail(
                    strprintf("expert_group_count %lld / expert_group_used_count %lld do not fit %d experts, %d "
                              "used",
                              (long long)groups, (long long)used, hp.n_expert, hp.n_expert_used));
            hp.n_expert_groups = int(groups);
            hp.n_group_used = int(used);
        }
    }
    hp.has_attn_sinks = hp.has_out_bias = A == Arch::GPT_OSS;

    if (A == Arch::EAGLE3) {
        if (opt.cluster) L.fail("an EAGLE-3 head is not split across ranks (it drafts on rank 0, beside its target)");
        bind_eagle3(L, hp, m->tok_embd_, m->output_, m->output_norm_, m->layers_, m->eagle3_);
        if (f.tensor("rope_freqs.weight")) {
            hp.has_rope_freqs = true;
            m->rope_freqs_ = L.vec("rope_freqs.weight", hp.n_rot / 2);
        }
        if (opt.repack) m->repack_for_cpu();
        return m;
    }
    const GgufTensor* te = f.tensor("token_embd.weight");
    if (!te) L.fail("missing tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[0] != hp.n_embd) L.fail("tensor 'token_embd.weight' does not have n_embd columns");
    hp.n_vocab = int(te->ne[1]);
    m->tok_embd_ = L.matrix("token_embd.weight", hp.n_vocab, hp.n_embd);
    m->output_norm_ = L.vec("output_norm.weight", hp.n_embd);
    hp.tied_output = f.tensor("output.weight") == nullptr;
    if (hp.tied_output && A == Arch::GPT_OSS) L.fail("missing tensor 'output.weight'");
    m->output_ = hp.tied_output ? m->tok_embd_ : L.matrix("output.weight", hp.n_vocab, hp.n_embd);
    if (f.tensor("rope_freqs.weight")) {
        hp.has_rope_freqs = true;
        m->rope_freqs_ = L.vec("rope_freqs.weight", hp.n_rot / 2);
    } else if (L.has("rope_factors_short.weight") || L.has("rope_factors_long.weight")) {
        hp.has_rope_long_short = true;
        m->rope_freqs_ = L.vec("rope_factors_short.weight", hp.n_rot / 2);
        m->rope_long_ = L.vec("rope_factors_long.weight", hp.n_rot / 2);
    }

    // Granite uses rope.scaling.finetuned as a switch for RoPE (absent: on), as llama.cpp reads it.
    bool rope_on = true;
    if (A == Arch::GRANITE)
        if (const GgufValue* v = f.find(*arch + ".rope.scaling.finetuned"); v && v->type == GgufType::BOOL)
            rope_on = v->u != 0;
    hp.has_qkv_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
    // The first MTP block is bound too when the file has its tensors (llama.cpp's "trunk only" files do not).
    const bool mtp = hp.n_layer_nextn > 0 && L.has("blk." + std::to_string(hp.n_layer) + ".nextn.eh_proj.weight");
    m->layers_.resize(size_t(hp.n_layer + (mtp ? 1 : 0)));
    for (int i = 0; i < int(m->layers_.size()); i++) {
        std::string p = "blk." + std::to_string(i) + ".";
        LayerWeights& l = m->layers_[size_t(i)];
        if (hp.has_pre_norms) l.attn_norm = L.vec(p + "attn_norm.weight", hp.n_embd);
        l.swa = hp.n_swa > 0 && (!swa_layer.empty() ? i < hp.n_layer && swa_layer[size_t(i)]
                                                    : swa_pattern == 0 || i % swa_pattern < swa_pattern - 1);
        // the layer's attention shape: gemma4's sliding-window layers have their own head size, rotated dims and
        // KV heads; its last n_kv_shared layers attend to the cache of the last earlier layer of their kind
        l.n_head = hp.n_head;
        l.n_head_kv = i < hp.n_layer ? kv_heads[size_t(i)] : hp.n_head_kv;
        l.head_dim = l.swa && hp.head_dim_swa > 0 ? hp.head_dim_swa : hp.head_dim;
        l.n_rot = l.swa && hp.head_dim_swa > 0 ? hp.n_rot_swa : hp.n_rot;
        if (hp.n_kv_shared > 0 && i >= hp.n_layer - hp.n_kv_shared && i < hp.n_layer) {
            l.kv_from = hp.n_layer - hp.n_kv_shared - (l.swa ? 2 : 1);
            const LayerWeights& src = m->layers_[size_t(l.kv_from)];
            if (src.swa != l.swa || src.n_head_kv != l.n_head_kv || src.kv_from >= 0)
                L.fail(
                    strprintf("layer %d shares the cache of layer %d, which is not a layer of its kind with a cache "
                              "of its own",
                              i, l.kv_from));
        }
        const int64_t q_dim = int64_t(hp.n_head) * l.head_dim, kv_dim = int64_t(l.n_head_kv) * l.head_dim;
        const int64_t n_ff = i < hp.n_layer ? ff_layer[size_t(i)] : hp.n_ff;
        l.recurrent = i < int(recurrent_layer.size()) && recurrent_layer[size_t(i)];
        if (l.recurrent) {
            const int64_t S = hp.ssm_state, hv = hp.ssm_v_heads, conv = hp.ssm_conv_dim();
            if (!L.has(p + "attn_qkv.weight") && L.has(p + "ssm_in.weight"))
                L.fail("tensor '" + p +
                       "ssm_in.weight': a Qwen3-Next conversion with the fused q|k|v|z projection "
                       "(older llama.cpp): convert it again with llama.cpp's current convert_hf_to_gguf.py");
            l.ssm_in = L.matrix(p + "attn_qkv.weight", conv, hp.n_embd);
            l.ssm_z = L.matrix(p + "attn_gate.weight", hv * S, hp.n_embd);
            if (A == Arch::QWEN3NEXT) {
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
        } else if (hp.mla) {
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
        } else if (g4) {  // a shared-KV layer has no K/V of its own; without attn_v, v = k's rows
            l.wq = L.matrix(p + "attn_q.weight", q_dim, hp.n_embd);
            if (l.kv_from < 0 && !assistant) {  // (an assistant's layers read its target's cache)
                l.wk = L.matrix(p + "attn_k.weight", kv_dim, hp.n_embd);
                l.wv = L.has(p + "attn_v.weight") ? L.matrix(p + "attn_v.weight", kv_dim, hp.n_embd) : l.wk;
            }
        } else {
            l.wq = L.matrix(p + "attn_q.weight", hp.attn_gate ? 2 * q_dim : q_dim, hp.n_embd);
            l.wk = L.matrix(p + "attn_k.weight", kv_dim, hp.n_embd);
            l.wv = L.matrix(p + "attn_v.weight", kv_dim, hp.n_embd);
        }
        if (!l.recurrent)
            l.wo = L.matrix(p + "attn_output.weight", hp.n_embd, hp.mla ? int64_t(hp.n_head) * hp.mla_v : q_dim);
        if (hp.has_qkv_bias) {
            l.bq = L.vec(p + "attn_q.bias", q_dim);
            l.bk = L.vec(p + "attn_k.bias", kv_dim);
            l.bv = L.vec(p + "attn_v.bias", kv_dim);
        }
        if (hp.has_out_bias || ((A == Arch::GRANITE || A == Arch::MISTRAL3) && L.has(p + "attn_output.bias")))
            l.bo = L.vec(p + "attn_output.bias", hp.n_embd);
        if (hp.has_qk_norm && !l.recurrent) {
            l.q_norm = L.vec(p + "attn_q_norm.weight", hp.qk_norm_whole ? q_dim : l.head_dim);
            if (l.kv_from < 0 && !assistant)
                l.k_norm = L.vec(p + "attn_k_norm.weight", hp.qk_norm_whole ? kv_dim : l.head_dim);
        }
        if (hp.has_attn_sinks) l.sinks = L.vec(p + "attn_sinks.weight", hp.n_head);
        // gpt-oss, glm4moe and qwen35 name their pre-FFN norm post_attention_norm
        const bool ffn_norm_is_post_attn = A == Arch::GPT_OSS || A == Arch::GLM4MOE || q35;
        if (hp.has_post_norms || ffn_norm_is_post_attn)
            l.post_attn_norm = L.vec(p + "post_attention_norm.weight", hp.n_embd);
        if (!ffn_norm_is_post_attn && hp.has_pre_norms) l.ffn_norm = L.vec(p + "ffn_norm.weight", hp.n_embd);
        if (hp.has_post_norms) l.post_ffn_norm = L.vec(p + "post_ffw_norm.weight", hp.n_embd);
        if (g4) {
            if (L.has(p + "layer_output_scale.weight")) l.out_scale = L.vec(p + "layer_output_scale.weight", 1)[0];
            if (g4_moe && L.has(p + "ffn_gate_inp.weight")) {  // experts beside the dense MLP
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
        // NoPE layers: smollm3's every 4th, llama4's every llama4_nope_step-th
        const int nope_step = A == Arch::SMOLLM3 ? 4 : llama4_nope_step;
        l.rope = !(nope_step > 0 && (i + 1) % nope_step == 0) && rope_on;
        for (const char* b : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"})
            if (L.has(p + b)) L.fail("tensor '" + p + b + "': FFN biases are not supported");
        if (hp.n_expert > 0 && !g4 && i >= hp.n_layer_dense_lead &&
            (hp.n_moe_layer_step <= 1 || (i + 1) % hp.n_moe_layer_step == 0)) {
            const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
            l.router = L.matrix(p + "ffn_gate_inp.weight", ne, hp.n_embd);
            if (hp.moe_gating == MoeGating::SIGMOID && L.has(p + "exp_probs_b.bias"))
                l.exp_probs_b = L.vec(p + "exp_probs_b.bias", ne);
            if (q35_moe) l.shexp_gate_inp = L.vec(p + "ffn_gate_inp_shexp.weight", hp.n_embd);
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
        if (!l.moe() || g4) l.w_down = L.matrix(p + "ffn_down.weight", hp.n_embd, n_ff);
    }
    if (assistant) {
        const int64_t Et = m->asst_.n_embd_target;
        m->asst_.pre_proj = L.matrix("nextn.pre_projection.weight", hp.n_embd, 2 * Et);
        m->asst_.post_proj = L.matrix("nextn.post_projection.weight", Et, hp.n_embd);
    }
    if (hp.n_embd_per_layer > 0) {  // gemma4's per-layer embeddings
        const int64_t pl = int64_t(hp.n_layer) * hp.n_embd_per_layer;
        m->ple_.table = L.matrix("per_layer_token_embd.weight", hp.n_vocab, pl);
        m->ple_.proj = L.matrix("per_layer_model_proj.weight", pl, hp.n_embd);
        m->ple_.norm = L.vec("per_layer_proj_norm.weight", hp.n_embd_per_layer);
    }
    if (mtp) {
        const std::string p = "blk." + std::to_string(hp.n_layer) + ".nextn.";
        MtpWeights& w = m->mtp_;
        w.eh_proj = L.matrix(p + "eh_proj.weight", hp.n_embd, 2 * int64_t(hp.n_embd));
        w.enorm = L.vec(p + "enorm.weight", hp.n_embd);
        w.hnorm = L.vec(p + "hnorm.weight", hp.n_embd);
        w.head_norm =
            L.has(p + "shared_head_norm.weight") ? L.vec(p + "shared_head_norm.weight", hp.n_embd) : m->output_norm_;
        w.embd = L.has(p + "embed_tokens.weight") ? L.matrix(p + "embed_tokens.weight", hp.n_vocab, hp.n_embd)
                                                  : m->tok_embd_;
        w.head = L.has(p + "shared_head_head.weight") ? L.matrix(p + "shared_head_head.weight", hp.n_vocab, hp.n_embd)
                                                      : m->output_;
    }
    if (opt.cluster) {
        m->cluster_ = opt.cluster;
        m->bind_split_share();
    }
    if (opt.repack) m->repack_for_cpu();
    if (m->cluster_) {
        // A split model's rank read the first bytes of every tensor for the agreement, and the kernel mapped pages
        // around each (fault-around): the pages of other ranks' weights stay mapped unless dropped. Dropped here,
        // all of them: what this rank still reads in place (the embedding rows, unpacked matrices) faults back in.
        m->release_file_pages(nullptr, SIZE_MAX);
    }
    return m;
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
