// The integer kernels of the AArch64 levels for matrices in the file's layout, and the activation quantizer
// (bit-identical to the reference: FCVTNS rounds to nearest even, as lrintf). A per-ISA unit (backend/cpu/isa.h).
#include "backend/cpu/isa_unit.h"

#include <cstring>

#include "backend/cpu/isa_kernels.h"

#include <arm_neon.h>

#include "backend/cpu/arm/neon_util.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_q8.h"

namespace tandem::TD_ISA {

void quantize_act_rows(const float* x, int64_t n, int group, const ActRows& out, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        const float* xr = x + int64_t(r) * n;
        for (int64_t g = 0; g < n; g += group) {
            float32x4_t m = vdupq_n_f32(0);
            for (int i = 0; i < group; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xr + g + i)));
            const float amax = vmaxvq_f32(m);
            const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            for (int64_t b = g / 32; b < (g + group) / 32; b++) {
                const float* xb = xr + b * 32;
                int32x4_t q[8];
                for (int j = 0; j < 8; j++) q[j] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xb + 4 * j), id));
                const int sum16a = vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
                const int sum16b = vaddvq_s32(vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7])));
                int16x8_t h[4];
                for (int j = 0; j < 4; j++) h[j] = vcombine_s16(vqmovn_s32(q[2 * j]), vqmovn_s32(q[2 * j + 1]));
                int8_t* dst = out.q + size_t(r) * size_t(n) + size_t(b) * 32;
                vst1q_s8(dst, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
                vst1q_s8(dst + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
                const size_t at = size_t(r) * size_t(out.nb) + size_t(b);
                out.qsum16[2 * at] = int16_t(sum16a);
                out.qsum16[2 * at + 1] = int16_t(sum16b);
                out.d[at] = d;
                out.s[at] = d * float(sum16a + sum16b);
                out.qsum[at] = sum16a + sum16b;
            }
        }
    }
}

// Q8_0 / Q4_0 / MXFP4 rows in the file's layout, one row against every token (the row is re-read from L1).
void matmul_q8_rows(TensorType t, const uint8_t* w, size_t row_stride, int64_t cols, const ActRows& a, float* y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = cols / 32;
    const bool q4 = t == TensorType::Q4_0, mx = t == TensorType::MXFP4;
    static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int8x16_t lut = vld1q_s8(kv);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t* row = w + size_t(r) * row_stride;
        for (int tk = 0; tk < a.n_rows; tk++) {
            const int8_t* aq = a.qrow(tk);
            float32x4_t acc = vdupq_n_f32(0);
            for (int64_t b = 0; b < nb; b++) {
                int8x16_t w0, w1;
                float dw;
                if (mx) {  // MXFP4: table values by byte lookup, scale 2^(e-128)
                    const block_mxfp4* x = reinterpret_cast<const block_mxfp4*>(row) + b;
                    const uint8x16_t raw = vld1q_u8(x->qs);
                    w0 = vqtbl1q_s8(lut, vandq_u8(raw, vdupq_n_u8(0x0F)));
                    w1 = vqtbl1q_s8(lut, vshrq_n_u8(raw, 4));
                    const uint32_t bits = x->e < 2 ? uint32_t(0x00200000) << x->e : uint32_t(x->e - 1) << 23;
                    std::memcpy(&dw, &bits, 4);
                } else if (q4) {
                    const block_q4_0* x = reinterpret_cast<const block_q4_0*>(row) + b;
                    const uint8x16_t raw = vld1q_u8(x->qs);
                    w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
                    w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), vdupq_n_s8(8));
                    dw = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(x->d))), 0);
                } else {
                    const block_q8_0* x = reinterpret_cast<const block_q8_0*>(row) + b;
                    w0 = vld1q_s8(x->qs);
                    w1 = vld1q_s8(x->qs + 16);
                    dw = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(x->d))), 0);
                }
                Dot4 s;
                s.zero();
                s.add(w0, vld1q_s8(aq + b * 32));
                s.add(w1, vld1q_s8(aq + b * 32 + 16));
                acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s.get()), dw * a.drow(tk)[b]);
            }
            y[int64_t(tk) * ldy + r] = vaddvq_f32(acc);
        }
    }
}

// K-quant rows unpacked by unpack_kq_row_ref: w_i = lane_scale[i / 4] * q[i] + offset[i / 32].
float dot_unpacked(const int8_t* q, const float* lane_scale, const float* offset, const ActRows& a, int t) {
    const int8_t* aq = a.qrow(t);
    const float* ad = a.drow(t);
    const float* as = a.srow(t);
    float32x4_t acc = vdupq_n_f32(0);
    float off = 0;
    for (int64_t b = 0; b < a.nb; b++) {
        Dot4 s0, s1;  // lanes 0-3 and 4-7 (four values each)
        s0.zero();
        s1.zero();
        s0.add(vld1q_s8(q + b * 32), vld1q_s8(aq + b * 32));
        s1.add(vld1q_s8(q + b * 32 + 16), vld1q_s8(aq + b * 32 + 16));
        const float32x4_t sc = vmulq_n_f32(vld1q_f32(lane_scale + b * 8), ad[b]);
        const float32x4_t sc1 = vmulq_n_f32(vld1q_f32(lane_scale + b * 8 + 4), ad[b]);
        acc = vfmaq_f32(acc, vcvtq_f32_s32(s0.get()), sc);
        acc = vfmaq_f32(acc, vcvtq_f32_s32(s1.get()), sc1);
        off += offset[b] * as[b];
    }
    return vaddvq_f32(acc) + off;
}

}  // namespace tandem::TD_ISA
