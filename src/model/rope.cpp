#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace tandem {

namespace {

// ggml_rope_yarn_corr_dim: the dimension at which `n_rot_turns` full turns fit in the original context.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot_turns, float base) {
    return float(n_dims) * std::log(float(n_ctx_orig) / (n_rot_turns * 2.0f * float(M_PI))) / (2.0f * std::log(base));
}

}  // namespace

RopeTable make_rope_table(const HParams& hp, int n_rot, float theta, float freq_scale,
                          const std::vector<float>& factors, int n_ctx) {
    RopeTable t;
    t.half = n_rot / 2;
    t.mscale = hp.rope_attn_factor;
    t.cos.resize(size_t(n_ctx) * size_t(t.half));
    t.sin.resize(t.cos.size());
    float corr[2] = {0, 0};
    const bool yarn = hp.yarn_ext_factor != 0.0f;
    if (yarn) {
        const int orig = hp.n_ctx_orig > 0 ? hp.n_ctx_orig : hp.n_ctx_train;
        corr[0] = std::max(0.0f, std::floor(yarn_corr_dim(n_rot, orig, hp.yarn_beta_fast, theta)));
        corr[1] = std::min(float(n_rot - 1), std::ceil(yarn_corr_dim(n_rot, orig, hp.yarn_beta_slow, theta)));
        t.mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
    }
    for (int i = 0; i < t.half; i++) {
        double inv = std::pow(double(theta), -2.0 * i / n_rot);
        if (!factors.empty()) inv /= double(factors[size_t(i)]);
        double mix = 0;  // weight of the extrapolated angle
        if (yarn) {
            const float y = (float(i) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
            mix = double((1.0f - std::min(1.0f, std::max(0.0f, y))) * hp.yarn_ext_factor);
        }
        for (int p = 0; p < n_ctx; p++) {
            const double extrap = double(p) * inv;
            const double th = extrap * double(freq_scale) * (1.0 - mix) + extrap * mix;
            t.cos[size_t(p) * size_t(t.half) + size_t(i)] = float(std::cos(th));
            t.sin[size_t(p) * size_t(t.half) + size_t(i)] = float(std::sin(th));
        }
    }
    return t;
}

void RopeTable::place(backend::Backend& be) {
    const int64_t n_pos = int64_t(cos.size()) / std::max<int64_t>(1, half);
    if (backend::Buffer* host = be.host_memory()) {
        const HostTensors H{host};
        cos_t = H.rows(cos.data(), n_pos, half);
        sin_t = H.rows(sin.data(), n_pos, half);
        return;
    }
    const size_t bytes = cos.size() * sizeof(float);
    copy = be.alloc(std::max<size_t>(2 * bytes, 64));
    cos_t = {copy.get(), 0, TensorType::F32, n_pos, half, size_t(half) * sizeof(float)};
    sin_t = cos_t;
    sin_t.offset = bytes;
    if (n_pos > 0 && half > 0) {
        be.write(cos_t, cos.data());
        be.write(sin_t, sin.data());
    }
}

}  // namespace tandem
