// RMSNorm of one row, as every architecture here uses it: out = x / sqrt(mean(x^2) + eps) * w (out may be x; w
// null: no weight, llama4's L2 norm of q and k heads).
#pragma once
#include <cmath>

namespace tandem {

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

}  // namespace tandem
