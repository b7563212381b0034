// The activation quantizer and the integer dot-product matmul for Q8_0 and Q4_0 weights in the file's layout:
// the scalar references and the level dispatch (the SIMD versions are under src/backend/cpu/). Per 32-element block:
// y += (d_w * d_a) * sum_i w_i * a_i, with w_i in [-128, 127] (Q8_0) or [-8, 7] (Q4_0: nibble - 8).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "backend/cpu/act_q8.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_q8.h"
#include "backend/cpu/isa.h"
#include "tandem/error.h"

namespace tandem {

namespace {

void act_resize(ActQ8& out, int n_rows, int64_t n) {
    out.n_rows = n_rows;
    out.n = n;
    out.nb = n / 32;
    out.q.resize(size_t(n_rows) * size_t(n));
    out.d.resize(size_t(n_rows) * size_t(out.nb));
    out.s.resize(out.d.size());
    out.qsum.resize(out.d.size());
    out.qsum16.resize(2 * out.d.size());
}

}  // namespace

ActQ8::operator ActRows() const {
    // The kernels write through the view of a buffer its owner sized (quantize_act_q8_prepare).
    ActRows v;
    v.q = const_cast<int8_t*>(q.data());
    v.d = const_cast<float*>(d.data());
    v.s = const_cast<float*>(s.data());
    v.qsum = const_cast<int32_t*>(qsum.data());
    v.qsum16 = const_cast<int16_t*>(qsum16.data());
    v.n_rows = n_rows;
    v.n = n;
    v.nb = nb;
    return v;
}

void quantize_act_rows_ref(const float* x, int64_t n, int group, const ActRows& out, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        const float* xr = x + int64_t(r) * n;
        for (int64_t g = 0; g < n; g += group) {
            float amax = 0;
            for (int i = 0; i < group; i++) amax = std::max(amax, std::fabs(xr[g + i]));
            const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            for (int64_t b = g / 32; b < (g + group) / 32; b++) {
                int8_t* q = out.q + size_t(r) * size_t(n) + size_t(b) * 32;
                int sum = 0, sum16 = 0;
                for (int i = 0; i < 32; i++) {
                    q[i] = int8_t(std::lrintf(xr[b * 32 + i] * id));
                    sum += q[i];
                    if (i == 15) sum16 = sum;
                }
                out.qsum16[(size_t(r) * size_t(out.nb) + size_t(b)) * 2] = int16_t(sum16);
                out.qsum16[(size_t(r) * size_t(out.nb) + size_t(b)) * 2 + 1] = int16_t(sum - sum16);
                out.d[size_t(r) * size_t(out.nb) + size_t(b)] = d;
                out.s[size_t(r) * size_t(out.nb) + size_t(b)] = d * float(sum);
                out.qsum[size_t(r) * size_t(out.nb) + size_t(b)] = sum;
            }
        }
    }
}

void quantize_act_q8_ref(const float* x, int n_rows, int64_t n, ActQ8& out, int group) {
    TD_ASSERT(n % group == 0 && group % 32 == 0);
    act_resize(out, n_rows, n);
    quantize_act_rows_ref(x, n, group, out, 0, n_rows);
}

void quantize_act_q8(const float* x, int n_rows, int64_t n, ActQ8& out, int group) {
    TD_ASSERT(n % group == 0 && group % 32 == 0);
    act_resize(out, n_rows, n);
    quantize_act_q8_rows(x, n, group, out, 0, n_rows);
}

void quantize_act_q8_rows(const float* x, int64_t n, int group, ActQ8& out, int r0, int r1) {
    isa().quantize_act_rows(x, n, group, out, r0, r1);
}

void quantize_act_q8_prepare(int n_rows, int64_t n, ActQ8& out) { act_resize(out, n_rows, n); }

float e8m0_half_to_f32(uint8_t e) {
    // 2^(e - 128) exactly, denormals included (as ggml_e8m0_to_fp32_half)
    const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

bool matmul_q8_supported(TensorType t) {
    return t == TensorType::Q8_0 || t == TensorType::Q4_0 || t == TensorType::MXFP4;
}

void matmul_q8_rows_ref(const WeightView& w, const ActRows& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w.cols / 32;
    for (int64_t r = r0; r < r1; r++) {
        for (int t = 0; t < a.n_rows; t++) {
            const int8_t* aq = a.qrow(t);
            const float* ad = a.drow(t);
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                int sum = 0;
                float dw;
                if (w.type == TensorType::Q8_0) {
                    const block_q8_0* x = reinterpret_cast<const block_q8_0*>(w.row(r)) + b;
                    dw = fp16_to_f32(x->d);
                    for (int i = 0; i < 32; i++) sum += int(x->qs[i]) * aq[b * 32 + i];
                } else if (w.type == TensorType::MXFP4) {
                    static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
                    const block_mxfp4* x = reinterpret_cast<const block_mxfp4*>(w.row(r)) + b;
                    dw = e8m0_half_to_f32(x->e);
                    for (int i = 0; i < 16; i++) {
                        sum += kv[x->qs[i] & 0xF] * aq[b * 32 + i];
                        sum += kv[x->qs[i] >> 4] * aq[b * 32 + i + 16];
                    }
                } else {
                    const block_q4_0* x = reinterpret_cast<const block_q4_0*>(w.row(r)) + b;
                    dw = fp16_to_f32(x->d);
                    for (int i = 0; i < 16; i++) {
                        sum += ((x->qs[i] & 0xF) - 8) * aq[b * 32 + i];
                        sum += ((x->qs[i] >> 4) - 8) * aq[b * 32 + i + 16];
                    }
                }
                acc += dw * ad[b] * float(sum);
            }
            y[int64_t(t) * ldy + r] = acc;
        }
    }
}

}  // namespace tandem
