// Scalar reference dequantization of every supported type. These define what each block means; fast kernels
// are tested against them.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "tandem/error.h"

namespace tandem {

namespace {

void dq_q4_0(const block_q4_0* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = float((x[i].qs[j] & 0xF) - 8) * d;
            y[j + QK4_0 / 2] = float((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dq_q4_1(const block_q4_1* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_1) {
        float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = float(x[i].qs[j] & 0xF) * d + m;
            y[j + QK4_1 / 2] = float(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void dq_q5_0(const block_q5_0* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK5_0) {
        float d = fp16_to_f32(x[i].d);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int h0 = ((qh >> j) << 4) & 0x10;
            int h1 = (qh >> (j + 12)) & 0x10;
            y[j] = float(((x[i].qs[j] & 0xF) | h0) - 16) * d;
            y[j + QK5_0 / 2] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void dq_q5_1(const block_q5_1* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK5_1) {
        float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int h0 = ((qh >> j) << 4) & 0x10;
            int h1 = (qh >> (j + 12)) & 0x10;
            y[j] = float((x[i].qs[j] & 0xF) | h0) * d + m;
            y[j + QK5_1 / 2] = float((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void dq_q8_0(const block_q8_0* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = float(x[i].qs[j]) * d;
    }
}

void dq_iq4_nl(const block_iq4_nl* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_NL) {
        float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = float(kvalues_iq4nl[x[i].qs[j] & 0xF]) * d;
            y[j + QK4_NL / 2] = float(kvalues_iq4nl[x[i].qs[j] >> 4]) * d;
        }
    }
}

void dq_q2_K(const block_q2_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; j++) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = x[i].scales[is++];
                    float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * float((q[l + 16 * half] >> shift) & 3) - ml;
                }
                shift += 2;
            }
            q += 32;
        }
    }
}

// Unpack the twelve packed bytes of Q3_K into sixteen 6-bit scales (still biased by 32).
void unpack_q3_K_scales(const uint8_t* packed, int8_t out[16]) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    std::memcpy(aux, packed, 12);
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(out, aux, 16);
}

void dq_q3_K(const block_q3_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d_all = fp16_to_f32(x[i].d);
        int8_t scales[16];
        unpack_q3_K_scales(x[i].scales, scales);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; j++) {
                for (int half = 0; half < 2; half++) {
                    float dl = d_all * float(scales[is++] - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * float(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
                shift += 2;
                m = uint8_t(m << 1);
            }
            q += 32;
        }
    }
}

void dq_q4_K(const block_q4_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * float(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * float(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void dq_q5_K(const block_q5_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = uint8_t(u1 << 2);
            u2 = uint8_t(u2 << 2);
        }
    }
}

void dq_q6_K(const block_q6_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[is + 0]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void dq_mxfp4(const block_mxfp4* b, float* y, int64_t nb) {
    static const int8_t kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int64_t i = 0; i < nb; i++, y += QK_MXFP4) {
        const float d = std::ldexp(1.0f, int(b[i].e) - 128);  // exact, also for e < 2 (denormals)
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[j] = float(kvalues[b[i].qs[j] & 0x0F]) * d;
            y[j + QK_MXFP4 / 2] = float(kvalues[b[i].qs[j] >> 4]) * d;
        }
    }
}

}  // namespace

void dequantize_row_ref(TensorType t, const void* src, float* dst, int64_t n) {
    const int64_t nb = n / type_traits(t).block_elems;
    TD_ASSERT(n % type_traits(t).block_elems == 0);
    switch (t) {
        case TensorType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
        case TensorType::F16: {
            const uint16_t* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32(s[i]);
            return;
        }
        case TensorType::BF16: {
            const uint16_t* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
            return;
        }
        case TensorType::Q4_0: dq_q4_0(static_cast<const block_q4_0*>(src), dst, nb); return;
        case TensorType::Q4_1: dq_q4_1(static_cast<const block_q4_1*>(src), dst, nb); return;
        case TensorType::Q5_0: dq_q5_0(static_cast<const block_q5_0*>(src), dst, nb); return;
        case TensorType::Q5_1: dq_q5_1(static_cast<const block_q5_1*>(src), dst, nb); return;
        case TensorType::Q8_0: dq_q8_0(static_cast<const block_q8_0*>(src), dst, nb); return;
        case TensorType::Q2_K: dq_q2_K(static_cast<const block_q2_K*>(src), dst, nb); return;
        case TensorType::Q3_K: dq_q3_K(static_cast<const block_q3_K*>(src), dst, nb); return;
        case TensorType::Q4_K: dq_q4_K(static_cast<const block_q4_K*>(src), dst, nb); return;
        case TensorType::Q5_K: dq_q5_K(static_cast<const block_q5_K*>(src), dst, nb); return;
        case TensorType::Q6_K: dq_q6_K(static_cast<const block_q6_K*>(src), dst, nb); return;
        case TensorType::MXFP4: dq_mxfp4(static_cast<const block_mxfp4*>(src), dst, nb); return;
        case TensorType::IQ4_NL: dq_iq4_nl(static_cast<const block_iq4_nl*>(src), dst, nb); return;
    }
    TD_ASSERT(false && "dequantize_row_ref: unhandled type");
}

}  // namespace tandem
