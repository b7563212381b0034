// Rotary position embedding tables, computed once per session for the positions 0..n_ctx-1.
//
// For pair i (0 <= i < n_rot/2) at position p (as ggml's rope computes it, llama.cpp's reference):
//   theta_extrap = p * base^(-2i/n_rot) / factor_i          factor_i: rope_freqs / LongRoPE factors, or 1
//   theta        = freq_scale * theta_extrap                (linear scaling)
//   YaRN (ext_factor != 0): theta = mix(theta, theta_extrap, ramp(i) * ext_factor), and the magnitude is
//   multiplied by 1 + 0.1 ln(1 / freq_scale)
//   cos/sin are multiplied by attn_factor (phi3's LongRoPE factor, YaRN's correction) when applied.
// The tables hold the plain cos/sin; `mscale` is applied by rope_head so a cache shift can rotate by -n exactly.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "model/host_tensors.h"
#include "tandem/model.h"

namespace tandem {

struct RopeTable {
    int half = 0;  // n_rot / 2
    float mscale = 1.0f;  // magnitude applied to the rotated dims of q and k
    std::vector<float> cos, sin;  // (n_ctx, half)
    const float* cos_at(int pos) const { return &cos[size_t(pos) * size_t(half)]; }
    const float* sin_at(int pos) const { return &sin[size_t(pos) * size_t(half)]; }
    // The tables as tensors of the session's backend (place()): host rows on a backend with host memory, else a
    // copy in its memory
    backend::Tensor cos_t, sin_t;
    std::shared_ptr<backend::Buffer> copy;
    void place(backend::Backend& be);
    // The backend's rope op over n_head heads of head_dim at this table (placed)
    backend::RopeArgs args(int n_head, int head_dim, int n_rot, int offset, RopeStyle style) const {
        return {n_head, head_dim, n_rot, offset, style, mscale, cos_t, sin_t};
    }
};

// n_rot / theta / freq_scale: the rotated dims, base and linear factor of the layer kind (global or
// sliding-window). `factors` divides the frequencies (may be empty).
RopeTable make_rope_table(const HParams& hp, int n_rot, float theta, float freq_scale,
                          const std::vector<float>& factors, int n_ctx);

}  // namespace tandem
