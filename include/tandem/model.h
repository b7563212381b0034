// Model: hyperparameters and immutable weights of a Llama-family transformer, loaded from GGUF.
// A Model is read-only after load and may be shared by any number of Sessions (target, draft, server slots).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/tensor_type.h"

namespace tandem {

class GgufFile;

enum class Arch { LLAMA, QWEN2 };
const char* arch_name(Arch a);

enum class RopeStyle {
    NORM,  // rotate adjacent pairs (x[2i], x[2i+1]): llama (GGUF q/k weights are permuted for it)
    NEOX,  // rotate halves (x[i], x[i + n_rot/2]): qwen2
};

struct HParams {
    Arch arch = Arch::LLAMA;
    int n_vocab = 0;
    int n_ctx_train = 0;
    int n_embd = 0;
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;  // per-head size of q/k/v
    int n_ff = 0;
    int n_rot = 0;     // rotated dimensions per head (<= head_dim)
    float rms_eps = 1e-5f;
    float rope_theta = 10000.0f;
    float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by this
    RopeStyle rope_style = RopeStyle::NORM;
    bool tied_output = false;      // no output.weight: logits use token_embd
    bool has_qkv_bias = false;
    bool has_rope_freqs = false;
};

// A weight matrix used in place from the mapping. (rows, cols) = (output dim, input dim).
struct Weight {
    const uint8_t* data = nullptr;
    TensorType type = TensorType::F32;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_stride = 0;
    const uint8_t* packed = nullptr;  // a faster layout made at load (owned by the Model), or null
    size_t nbytes() const { return row_stride * size_t(rows); }
};

struct LayerWeights {
    std::vector<float> attn_norm;  // (n_embd)
    Weight wq;                     // (n_head * head_dim, n_embd)
    Weight wk;                     // (n_head_kv * head_dim, n_embd)
    Weight wv;                     // (n_head_kv * head_dim, n_embd)
    Weight wo;                     // (n_embd, n_head * head_dim)
    std::vector<float> bq, bk, bv; // qwen2 only: (n_head*head_dim), (n_head_kv*head_dim) x2
    std::vector<float> ffn_norm;   // (n_embd)
    Weight w_gate;                 // (n_ff, n_embd)
    Weight w_up;                   // (n_ff, n_embd)
    Weight w_down;                 // (n_embd, n_ff)
};

struct LoadOptions {
    // Copy Q8_0/Q4_0 matrices into the CPU's faster interleaved layout when it has one (see repack_for_cpu).
    // Off: every matrix is used in place from the file (the tests compare the two paths).
    bool repack = true;
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

    const Weight& tok_embd() const { return tok_embd_; }       // (n_vocab, n_embd)
    const Weight& output() const { return output_; }           // (n_vocab, n_embd); == tok_embd when tied
    const std::vector<float>& output_norm() const { return output_norm_; }  // (n_embd)
    const std::vector<float>& rope_freqs() const { return rope_freqs_; }    // (n_rot/2) or empty
    const LayerWeights& layer(int i) const { return layers_[size_t(i)]; }

    int64_t n_params() const;
    size_t weights_bytes() const;
    std::string describe_type() const;  // the most common matrix type, e.g. "Q8_0"

private:
    Model() = default;
    std::shared_ptr<const GgufFile> file_;
    HParams hp_;
    Weight tok_embd_, output_;
    std::vector<float> output_norm_, rope_freqs_;
    std::vector<LayerWeights> layers_;
    std::shared_ptr<uint8_t> packed_;  // one buffer holding the repacked matrices (see Model::repack_for_cpu)
    size_t packed_bytes_ = 0;
    void repack_for_cpu();

public:
    size_t packed_bytes() const { return packed_bytes_; }  // memory held by repacked copies
};

}  // namespace tandem
