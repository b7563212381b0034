// The scalar row functions the CPU backend's ops are made of (backend/cpu/cpu_backend.cpp): RMSNorm, RoPE of one
// head, the gated activations and a mixture's router. Each is the rule of its op (backend/backend.h) in float, the
// order of its sums fixed; the SIMD levels' kernels (backend/cpu/isa.h) serve the matmuls, attention and SiLU.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/backend.h"

namespace tandem {

// RMSNorm of one row, as every architecture here uses it: out = x / sqrt(mean(x^2) + eps) * w (out may be x; w
// null: no weight, llama4's L2 norm of q and k heads).
inline void rmsnorm(const float* x, const float* w, float* out, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += double(x[i]) * double(x[i]);
    const float scale = 1.0f / std::sqrt(float(ss / n) + eps);
    if (!w) {
        for (int i = 0; i < n; i++) out[i] = x[i] * scale;
        return;
    }
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

// Rotates one head vector in place: pairs (2i, 2i+1) for NORM, (i, i + n_rot/2) for NEOX; dims >= n_rot pass.
void rope_head(float* h, const float* cs, const float* sn, int n_rot, RopeStyle style, float mscale);

// gate = gelu_tanh(gate) * up, GELU as ggml evaluates it (an F16 table); gelu_tanh: the formula itself
void gelu_tanh_mul(float* gate, const float* up, int64_t n);
float gelu_tanh(float x);
void swiglu_oai(float* gate, const float* up, int64_t n);  // gpt-oss: see FfnAct::SWIGLU_OAI

// A mixture's router for one row (TOPK_ROUTE's rule): the k experts and their weights from the n_expert logits.
// `choice_bias` (SIGMOID gating; may be null) shifts the scores experts are chosen by, not their weights.
void moe_select(const backend::RouteArgs& a, const float* logits, const float* choice_bias, int* experts,
                float* weights);

}  // namespace tandem
