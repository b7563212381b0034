// Model quantization: rewrite a GGUF model with its weight matrices in another type (or a llama.cpp-style mix),
// optionally keeping only the first K layers (to make layer-truncated drafts). Streams tensor by tensor.
#pragma once
#include <functional>
#include <string>

#include "tandem/tensor_type.h"

namespace tandem {

struct QuantizeParams {
    // "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M",
    // "Q4_K_S", "Q5_K_S", "F16", "BF16", "F32" (case-insensitive).
    std::string type;
    int keep_layers = 0;  // 0 = all
    // Called once per tensor whose type differs from the mix's choice because its rows do not fit a block.
    std::function<void(const std::string& message)> on_note;
};

// Throws tandem::Error for an unknown type, an unreadable input or an unwritable output.
void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeParams& params);

// The type a tensor gets under a mix (before the row-length fallback). Exposed for tests.
TensorType mix_type_for(const std::string& mix, const std::string& tensor_name, int n_layer);
// The fallback when a row of `row_len` elements does not fit `t`'s blocks: the nearest type that fits.
TensorType fallback_type(TensorType t, int64_t row_len);

}  // namespace tandem
