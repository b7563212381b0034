// Scalar reference quantizers for every supported type. Each writes the block layout documented in blocks.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "tandem/error.h"

namespace tandem {

namespace {

int nearest_int(float x) { return int(std::lrintf(x)); }

// Value of largest magnitude, keeping its sign.
float signed_absmax(const float* x, int n) {
    float amax = 0, maxv = 0;
    for (int i = 0; i < n; i++)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            maxv = x[i];
        }
    return maxv;
}

void q_q4_0(const float* x, block_q4_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        float d = signed_absmax(x, QK4_0) / -8.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            uint8_t a = uint8_t(std::min(15, int(x[j] * id + 8.5f)));
            uint8_t b = uint8_t(std::min(15, int(x[j + QK4_0 / 2] * id + 8.5f)));
            y[i].qs[j] = uint8_t(a | (b << 4));
        }
    }
}

void q_q4_1(const float* x, block_q4_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        float mn = *std::min_element(x, x + QK4_1), mx = *std::max_element(x, x + QK4_1);
        float d = (mx - mn) / 15.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            uint8_t a = uint8_t(std::min(15, int((x[j] - mn) * id + 0.5f)));
            uint8_t b = uint8_t(std::min(15, int((x[j + QK4_1 / 2] - mn) * id + 0.5f)));
            y[i].qs[j] = uint8_t(a | (b << 4));
        }
    }
}

void q_q5_0(const float* x, block_q5_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK5_0) {
        float d = signed_absmax(x, QK5_0) / -16.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int a = std::min(31, int(x[j] * id + 16.5f));
            int b = std::min(31, int(x[j + QK5_0 / 2] * id + 16.5f));
            y[i].qs[j] = uint8_t((a & 0xF) | ((b & 0xF) << 4));
            qh |= uint32_t((a & 0x10) >> 4) << j;
            qh |= uint32_t((b & 0x10) >> 4) << (j + QK5_0 / 2);
        }
        std::memcpy(y[i].qh, &qh, 4);
    }
}

void q_q5_1(const float* x, block_q5_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK5_1) {
        float mn = *std::min_element(x, x + QK5_1), mx = *std::max_element(x, x + QK5_1);
        float d = (mx - mn) / 31.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            int a = std::min(31, int((x[j] - mn) * id + 0.5f));
            int b = std::min(31, int((x[j + QK5_1 / 2] - mn) * id + 0.5f));
            y[i].qs[j] = uint8_t((a & 0xF) | ((b & 0xF) << 4));
            qh |= uint32_t((a & 0x10) >> 4) << j;
            qh |= uint32_t((b & 0x10) >> 4) << (j + QK5_1 / 2);
        }
        std::memcpy(y[i].qh, &qh, 4);
    }
}

void q_q8_0(const float* x, block_q8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = int8_t(nearest_int(x[j] * id));
    }
}

// Asymmetric fit of sub-blocks: per sub-block scale = (max - min') / qmax and min = -min' >= 0 with
// min' = min(0, min). Returns the two arrays (length n_sub).
void fit_scale_min(const float* x, int n_sub, int sub_len, int qmax, float* scale, float* mins) {
    for (int s = 0; s < n_sub; s++) {
        const float* v = x + s * sub_len;
        float mn = std::min(0.0f, *std::min_element(v, v + sub_len));
        float mx = *std::max_element(v, v + sub_len);
        scale[s] = (mx - mn) / float(qmax);
        mins[s] = -mn;
    }
}

// Quantize per-element values given an effective scale dl and min ml: q = round((x + ml) / dl) in [0, qmax].
void quant_affine(const float* x, int n, float dl, float ml, int qmax, uint8_t* L) {
    for (int i = 0; i < n; i++) {
        int q = dl > 0 ? nearest_int((x[i] + ml) / dl) : 0;
        L[i] = uint8_t(std::clamp(q, 0, qmax));
    }
}

void q_q2_K(const float* x, block_q2_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float scale[16], mins[16];
        fit_scale_min(x, 16, 16, 3, scale, mins);
        float max_scale = *std::max_element(scale, scale + 16), max_min = *std::max_element(mins, mins + 16);
        float d = max_scale / 15.0f, dmin = max_min / 15.0f;
        y[i].d = f32_to_fp16(d);
        y[i].dmin = f32_to_fp16(dmin);
        d = fp16_to_f32(y[i].d);
        dmin = fp16_to_f32(y[i].dmin);
        uint8_t L[QK_K];
        for (int s = 0; s < 16; s++) {
            int ls = d > 0 ? std::clamp(nearest_int(scale[s] / d), 0, 15) : 0;
            int lm = dmin > 0 ? std::clamp(nearest_int(mins[s] / dmin), 0, 15) : 0;
            y[i].scales[s] = uint8_t(ls | (lm << 4));
            quant_affine(x + 16 * s, 16, d * float(ls), dmin * float(lm), 3, L + 16 * s);
        }
        for (int n = 0; n < QK_K; n += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[n / 4 + l] =
                    uint8_t(L[n + l] | (L[n + l + 32] << 2) | (L[n + l + 64] << 4) | (L[n + l + 96] << 6));
    }
}

void q_q3_K(const float* x, block_q3_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float scale[16];
        float max_scale = 0, amax = 0;
        for (int s = 0; s < 16; s++) {
            scale[s] = signed_absmax(x + 16 * s, 16) / -4.0f;
            if (std::fabs(scale[s]) > amax) {
                amax = std::fabs(scale[s]);
                max_scale = scale[s];
            }
        }
        std::memset(y[i].scales, 0, 12);
        float iscale = max_scale ? -32.0f / max_scale : 0.0f;
        y[i].d = f32_to_fp16(iscale ? 1.0f / iscale : 0.0f);
        float d = fp16_to_f32(y[i].d);
        uint8_t L[QK_K];
        for (int s = 0; s < 16; s++) {
            int ls = std::clamp(nearest_int(iscale * scale[s]), -32, 31);
            int l = ls + 32;
            if (s < 8) y[i].scales[s] = uint8_t(l & 0xF);
            else y[i].scales[s - 8] |= uint8_t((l & 0xF) << 4);
            y[i].scales[s % 4 + 8] |= uint8_t((l >> 4) << (2 * (s / 4)));
            float dl = d * float(ls);
            for (int k = 0; k < 16; k++) {
                int q = dl != 0 ? nearest_int(x[16 * s + k] / dl) : 0;
                L[16 * s + k] = uint8_t(std::clamp(q, -4, 3) + 4);
            }
        }
        std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= uint8_t(1 << (j / 32));
                L[j] = uint8_t(L[j] - 4);
            }
        }
        for (int n = 0; n < QK_K; n += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[n / 4 + l] =
                    uint8_t(L[n + l] | (L[n + l + 32] << 2) | (L[n + l + 64] << 4) | (L[n + l + 96] << 6));
    }
}

// Shared by Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins. Writes d, dmin, scales and the
// per-element levels L (0..qmax).
void fit_k4_scales(const float* x, int qmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
    float scale[8], mins[8];
    fit_scale_min(x, 8, 32, qmax, scale, mins);
    float max_scale = *std::max_element(scale, scale + 8), max_min = *std::max_element(mins, mins + 8);
    *d_out = f32_to_fp16(max_scale / 63.0f);
    *dmin_out = f32_to_fp16(max_min / 63.0f);
    float d = fp16_to_f32(*d_out), dmin = fp16_to_f32(*dmin_out);
    std::memset(packed, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        int ls = d > 0 ? std::clamp(nearest_int(scale[j] / d), 0, 63) : 0;
        int lm = dmin > 0 ? std::clamp(nearest_int(mins[j] / dmin), 0, 63) : 0;
        if (j < 4) {
            packed[j] = uint8_t(ls);
            packed[j + 4] = uint8_t(lm);
        } else {
            packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= uint8_t((ls >> 4) << 6);
            packed[j] |= uint8_t((lm >> 4) << 6);
        }
        quant_affine(x + 32 * j, 32, d * float(ls), dmin * float(lm), qmax, L + 32 * j);
    }
}

void q_q4_K(const float* x, block_q4_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        fit_k4_scales(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t* q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
    }
}

void q_q5_K(const float* x, block_q5_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        fit_k4_scales(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        std::memset(y[i].qh, 0, sizeof(y[i].qh));
        uint8_t* ql = y[i].qs;
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[j] |= m2;
                }
                ql[j] = uint8_t(l1 | (l2 << 4));
            }
            m1 = uint8_t(m1 << 2);
            m2 = uint8_t(m2 << 2);
        }
    }
}

void q_q6_K(const float* x, block_q6_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float scale[16], max_scale = 0, amax = 0;
        for (int s = 0; s < 16; s++) {
            scale[s] = signed_absmax(x + 16 * s, 16) / -32.0f;
            if (std::fabs(scale[s]) > amax) {
                amax = std::fabs(scale[s]);
                max_scale = scale[s];
            }
        }
        float iscale = max_scale ? -128.0f / max_scale : 0.0f;
        y[i].d = f32_to_fp16(iscale ? 1.0f / iscale : 0.0f);
        float d = fp16_to_f32(y[i].d);
        uint8_t L[QK_K];
        for (int s = 0; s < 16; s++) {
            int ls = std::clamp(nearest_int(iscale * scale[s]), -128, 127);
            y[i].scales[s] = int8_t(ls);
            float dl = d * float(ls);
            for (int k = 0; k < 16; k++) {
                int q = dl != 0 ? nearest_int(x[16 * s + k] / dl) : 0;
                L[16 * s + k] = uint8_t(std::clamp(q, -32, 31) + 32);
            }
        }
        uint8_t* ql = y[i].ql;
        uint8_t* qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
                ql[l] = uint8_t((a & 0xF) | ((c & 0xF) << 4));
                ql[l + 32] = uint8_t((b & 0xF) | ((e & 0xF) << 4));
                qh[l] = uint8_t((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
            }
        }
    }
}

// As ggml's reference: the scale is the power of two that puts the block's largest magnitude in [4, 8) (the
// table's top values), each value the nearest table entry (ties to the lower index).
void q_mxfp4(const float* x, block_mxfp4* y, int64_t nb) {
    static const int8_t kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int64_t i = 0; i < nb; i++, x += QK_MXFP4) {
        float amax = 0;
        for (int j = 0; j < QK_MXFP4; j++) amax = std::max(amax, std::fabs(x[j]));
        const int e = amax > 0 ? std::clamp(int(std::floor(std::log2(amax))) - 2 + 127, 0, 255) : 0;
        const float d = std::ldexp(1.0f, e - 128);
        y[i].e = uint8_t(e);
        auto best = [&](float v) {
            int bi = 0;
            float be = std::fabs(float(kvalues[0]) * d - v);
            for (int k = 1; k < 16; k++) {
                const float err = std::fabs(float(kvalues[k]) * d - v);
                if (err < be) {
                    be = err;
                    bi = k;
                }
            }
            return bi;
        };
        for (int j = 0; j < QK_MXFP4 / 2; j++) y[i].qs[j] = uint8_t(best(x[j]) | (best(x[j + QK_MXFP4 / 2]) << 4));
    }
}

// IQ4_NL: for a few candidate scales (the value of largest magnitude on the table's outermost level -127, and
// near it), each element takes the nearest level, then the scale is refit by least squares for those levels;
// the candidate of least squared error wins.
int nearest_iq4nl(float v) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (std::fabs(v - float(kvalues_iq4nl[k])) < std::fabs(v - float(kvalues_iq4nl[best]))) best = k;
    return best;
}

void q_iq4_nl(const float* x, block_iq4_nl* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_NL) {
        const float maxv = signed_absmax(x, QK4_NL);
        float best_d = 0, best_err = INFINITY;
        uint8_t best_l[QK4_NL] = {};
        for (int t = -6; t <= 6 && maxv != 0; t++) {
            const float d0 = maxv / (-127.0f + float(t) * 2.0f);
            uint8_t l[QK4_NL];
            double sxv = 0, svv = 0;
            for (int j = 0; j < QK4_NL; j++) {
                l[j] = uint8_t(nearest_iq4nl(x[j] / d0));
                sxv += double(x[j]) * kvalues_iq4nl[l[j]];
                svv += double(kvalues_iq4nl[l[j]]) * kvalues_iq4nl[l[j]];
            }
            const float d = svv > 0 ? float(sxv / svv) : d0;
            const float dh = fp16_to_f32(f32_to_fp16(d));
            double err = 0;
            for (int j = 0; j < QK4_NL; j++) {
                const double e = double(x[j]) - double(dh) * kvalues_iq4nl[l[j]];
                err += e * e;
            }
            if (err < best_err) {
                best_err = float(err);
                best_d = d;
                std::memcpy(best_l, l, sizeof l);
            }
        }
        y[i].d = f32_to_fp16(best_d);
        for (int j = 0; j < QK4_NL / 2; j++) y[i].qs[j] = uint8_t(best_l[j] | (best_l[j + QK4_NL / 2] << 4));
    }
}

}  // namespace

void quantize_row_ref(TensorType t, const float* src, void* dst, int64_t n) {
    const int64_t nb = n / type_traits(t).block_elems;
    TD_ASSERT(n % type_traits(t).block_elems == 0);
    switch (t) {
        case TensorType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
        case TensorType::F16: {
            uint16_t* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; i++) d[i] = f32_to_fp16(src[i]);
            return;
        }
        case TensorType::BF16: {
            uint16_t* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
            return;
        }
        case TensorType::Q4_0: q_q4_0(src, static_cast<block_q4_0*>(dst), nb); return;
        case TensorType::Q4_1: q_q4_1(src, static_cast<block_q4_1*>(dst), nb); return;
        case TensorType::Q5_0: q_q5_0(src, static_cast<block_q5_0*>(dst), nb); return;
        case TensorType::Q5_1: q_q5_1(src, static_cast<block_q5_1*>(dst), nb); return;
        case TensorType::Q8_0: q_q8_0(src, static_cast<block_q8_0*>(dst), nb); return;
        case TensorType::Q2_K: q_q2_K(src, static_cast<block_q2_K*>(dst), nb); return;
        case TensorType::Q3_K: q_q3_K(src, static_cast<block_q3_K*>(dst), nb); return;
        case TensorType::Q4_K: q_q4_K(src, static_cast<block_q4_K*>(dst), nb); return;
        case TensorType::Q5_K: q_q5_K(src, static_cast<block_q5_K*>(dst), nb); return;
        case TensorType::Q6_K: q_q6_K(src, static_cast<block_q6_K*>(dst), nb); return;
        case TensorType::MXFP4: q_mxfp4(src, static_cast<block_mxfp4*>(dst), nb); return;
        case TensorType::IQ4_NL: q_iq4_nl(src, static_cast<block_iq4_nl*>(dst), nb); return;
    }
    TD_ASSERT(false && "quantize_row_ref: unhandled type");
}

}  // namespace tandem
