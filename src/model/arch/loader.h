// Reading a model from GGUF, shared by the loader (model/model_loader.cpp) and the architecture families
// (model/arch/<family>.cpp): the checked metadata and tensor reads (Loader), the state of one load that the
// families' hooks set and the shared steps read (ArchLoad), and the table entry of an architecture (ArchInfo).
#pragma once
#include <cstring>
#include <string>
#include <vector>

#include "model/weight_view.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

namespace tandem {

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

// One load in progress: what the common steps read and the families' hooks decide. A hook sets the features of its
// family in hp and the flags below; the shared steps (shapes, RoPE, windows, experts, the layer binders) read them.
struct ArchLoad {
    ArchLoad(const GgufFile& file, HParams& h, const std::string& name) : f(file), L{file, name}, hp(h), arch(name) {}
    const GgufFile& f;
    Loader L;
    HParams& hp;
    const std::string& arch;  // the metadata prefix (general.architecture)
    // shapes
    std::vector<int> ff_layer, kv_heads;  // per layer
    int max_head_dim = 256;  // attention's tiles; gemma4's global layers have 512 (MLA checks its own)
    bool yarn_log_mul_is_mscale = false;  // deepseek2: the file's yarn_log_multiplier is 0.1 mscale_all_dim
    // sliding windows (read_windows): layer i is windowed when i % swa_pattern < swa_pattern - 1, or as swa_layer
    // says; swa_fixed: the family set the window itself (llama4's chunks)
    int swa_pattern = 0;
    std::vector<bool> swa_layer;
    bool swa_fixed = false, swa_required = false;
    bool gemma_swa_rope = false;  // windowed layers at base 10000, scale 1 unless the file says
    // experts (read_experts, then the family's routing hook)
    bool experts = false;
    // layers
    std::vector<bool> recurrent_layer;  // Gated DeltaNet layers
    int nope_step = 0;  // layer i has no RoPE when (i + 1) % nope_step == 0
    bool rope_on = true;
    bool ffn_norm_is_post_attn = false;  // the pre-FFN norm is named post_attention_norm (gpt-oss, glm4moe, qwen35)
    bool optional_out_bias = false;  // attn_output.bias when the file has it (granite, mistral3)
    bool fused_ssm_ba = false;  // qwen3next: beta and alpha in one matrix
    bool shexp_gated = false;  // qwen35moe: the shared expert's output gated per row
    bool gemma4 = false, assistant = false, gemma4_experts = false;
    bool require_output = false;  // no tied output (gpt-oss)
    int n_embd_target = 0;  // a Gemma 4 assistant's target width
};

// An architecture: its GGUF name, its fixed traits and its family's hooks (null: none), called in this order by
// Model::from_gguf: attention (after the common shapes: MLA, gemma4's window heads), features (after RoPE scaling:
// norms, scales, activation, windows, experts, recurrent layers), routing (after the expert counts).
struct ArchInfo {
    Arch arch;
    const char* name;
    RopeStyle rope_style;
    bool ff_optional;  // feed_forward_length may be absent (models whose every layer has experts)
    void (*attention)(ArchLoad&);
    void (*features)(ArchLoad&);
    void (*routing)(ArchLoad&);
};
const ArchInfo* find_arch(const std::string& name);  // null: not supported
std::string arch_names();  // the supported names, for the error that names them

// The families' hooks (model/arch/<family>.cpp)
void smollm3_features(ArchLoad& a);
void granite_features(ArchLoad& a);
void mistral3_features(ArchLoad& a);
void olmo2_features(ArchLoad& a);
void qwen3_features(ArchLoad& a);
void qwen3moe_routing(ArchLoad& a);
void qwen35_features(ArchLoad& a);
void qwen35moe_routing(ArchLoad& a);
void gemma3_features(ArchLoad& a);
void gemma4_attention(ArchLoad& a);
void gemma4_features(ArchLoad& a);
void gemma4_routing(ArchLoad& a);
void deepseek2_attention(ArchLoad& a);
void deepseek2_features(ArchLoad& a);
void glm4moe_features(ArchLoad& a);
void sigmoid_routing(ArchLoad& a);  // glm4moe, deepseek2
void llama4_features(ArchLoad& a);
void llama4_routing(ArchLoad& a);
void gpt_oss_features(ArchLoad& a);
void gpt_oss_routing(ArchLoad& a);
// An EAGLE-3 head's tensors (model/arch/llama.cpp: one llama layer over a fused input)
void bind_eagle3(const Loader& L, HParams& hp, Weight& tok_embd, Weight& output, std::vector<float>& output_norm,
                 std::vector<LayerWeights>& layers, Eagle3Weights& w);

}  // namespace tandem
