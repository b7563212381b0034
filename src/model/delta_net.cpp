#include "model/delta_net.h"

#include <algorithm>
#include <cmath>

#include "model/norm.h"
#include "model/weight_view.h"
#include "backend/cpu/kernels.h"
#include "tandem/thread_pool.h"

namespace tandem {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // ggml's threshold

// x / sqrt(sum x^2 + eps), as llama.cpp's build_gdn_l2_norm (rms_norm with eps / n, times 1 / sqrt(n))
void l2_normalize(float* x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += double(x[i]) * double(x[i]);
    const float r = 1.0f / std::sqrt(float(ss / n) + eps / float(n)) / std::sqrt(float(n));
    for (int i = 0; i < n; i++) x[i] *= r;
}

}  // namespace

size_t delta_net_layer_floats(const HParams& hp) {
    if (!hp.recurrent()) return 0;
    return size_t(hp.ssm_conv - 1) * size_t(hp.ssm_conv_dim()) +
           size_t(hp.ssm_v_heads) * size_t(hp.ssm_state) * size_t(hp.ssm_state);
}

size_t recurrent_state_floats(const Model& m, int n_layers) {
    size_t n = 0;
    for (int l = 0; l < n_layers; l++)
        if (m.layer(l).recurrent) n += delta_net_layer_floats(m.hparams());
    return n;
}

void delta_net_layer(ThreadPool& pool, const HParams& hp, const LayerWeights& L, const float* x, int n,
                     const float* const* state_in, float* const* state_out, float* out, DeltaNetScratch& s) {
    const int K = hp.ssm_conv, S = hp.ssm_state, hk = hp.ssm_k_heads, hv = hp.ssm_v_heads, C = hp.ssm_conv_dim();
    const int vd = hv * S;
    const size_t conv_floats = size_t(K - 1) * size_t(C), rows = size_t(n);
    s.mixed.resize(rows * size_t(C));
    s.z.resize(rows * size_t(vd));
    s.beta.resize(rows * size_t(hv));
    s.alpha.resize(rows * size_t(hv));
    const int r = hv / hk;  // value heads per key head
    s.conv.resize(rows * size_t(C));
    s.o.resize(rows * size_t(vd));
    if (L.ssm_ba.data) {  // qwen3next: per key head g, rows [beta of its r value heads | their alpha]
        s.ba.resize(rows * size_t(2 * hv));
        const WeightView ws[3] = {view(L.ssm_in), view(L.ssm_z), view(L.ssm_ba)};
        float* const ys[3] = {s.mixed.data(), s.z.data(), s.ba.data()};
        matmul_shared_input(pool, ws, ys, 3, x, n);
        for (size_t t = 0; t < rows; t++)
            for (int h = 0; h < hv; h++) {
                const float* g = &s.ba[t * size_t(2 * hv) + size_t(h / r) * size_t(2 * r)];
                s.beta[t * size_t(hv) + size_t(h)] = g[h % r];
                s.alpha[t * size_t(hv) + size_t(h)] = g[r + h % r];
            }
    } else {
        const WeightView ws[4] = {view(L.ssm_in), view(L.ssm_z), view(L.ssm_beta), view(L.ssm_alpha)};
        float* const ys[4] = {s.mixed.data(), s.z.data(), s.beta.data(), s.alpha.data()};
        matmul_shared_input(pool, ws, ys, 4, x, n);
    }
    // The causal convolution over a range of channels per thread, rows in order (each reads the window the row
    // before it wrote; in place when they share a buffer), the channels of a row contiguous in the inner loops.
    pool.parallel_for(size_t(C), [&](size_t c0, size_t c1, int) {
        const size_t nc = c1 - c0;
        for (size_t t = 0; t < rows; t++) {
            const float* win = state_in[t] + c0;
            float* wout = state_out[t] + c0;
            const float* xt = &s.mixed[t * size_t(C) + c0];
            float* y = &s.conv[t * size_t(C) + c0];
            for (size_t c = 0; c < nc; c++) {
                const float* taps = &L.ssm_conv1d[(c0 + c) * size_t(K)];
                float acc = taps[K - 1] * xt[c];
                for (int r = 0; r < K - 1; r++) acc += taps[r] * win[size_t(r) * size_t(C) + c];
                y[c] = acc;
            }
            for (int r = 0; r + 1 < K - 1; r++)  // the window moves up one row (forward: safe in place)
                std::copy_n(win + size_t(r + 1) * size_t(C), nc, wout + size_t(r) * size_t(C));
            std::copy_n(xt, nc, wout + size_t(K - 2) * size_t(C));
            for (size_t c = 0; c < nc; c++) y[c] = silu(y[c]);
        }
    });
    for (size_t t = 0; t < rows; t++) {
        float* c = &s.conv[t * size_t(C)];
        for (int h = 0; h < 2 * hk; h++) l2_normalize(c + size_t(h) * size_t(S), S, hp.rms_eps);  // q and k heads
        for (int h = 0; h < hv; h++) {
            float& b = s.beta[t * size_t(hv) + size_t(h)];
            float& a = s.alpha[t * size_t(hv) + size_t(h)];
            b = sigmoid(b);
            a = std::exp(softplus(a + L.ssm_dt[size_t(h)]) * L.ssm_a[size_t(h)]);  // the decay exp(g)
        }
    }
    // The delta rule, value head by value head (rows in order within a head).
    const size_t mat = size_t(S) * size_t(S);
    pool.parallel_for(size_t(hv), [&](size_t h0, size_t h1, int) {
        for (size_t h = h0; h < h1; h++) {
            const size_t kh = hp.ssm_grouped_heads ? h / size_t(r) : h % size_t(hk);
            for (size_t t = 0; t < rows; t++) {
                const float* c = &s.conv[t * size_t(C)];
                delta_rule(state_in[t] + conv_floats + h * mat, state_out[t] + conv_floats + h * mat,
                           c + kh * size_t(S), c + (size_t(hk) + kh) * size_t(S), c + (2 * size_t(hk) + h) * size_t(S),
                           s.alpha[t * size_t(hv) + h], s.beta[t * size_t(hv) + h], S,
                           &s.o[t * size_t(vd) + h * size_t(S)]);
            }
        }
    });
    for (size_t t = 0; t < rows; t++)
        for (int h = 0; h < hv; h++) {
            float* o = &s.o[t * size_t(vd) + size_t(h) * size_t(S)];
            const float* z = &s.z[t * size_t(vd) + size_t(h) * size_t(S)];
            rmsnorm(o, L.ssm_norm.data(), o, S, hp.rms_eps);
            for (int j = 0; j < S; j++) o[j] *= silu(z[j]);
        }
    matmul(pool, view(L.ssm_out), s.o.data(), n, out);
}

}  // namespace tandem
