// Integer matmul for the K-quants (Q4_K, Q5_K, Q6_K) against 8-bit activations (ActQ8).
//
// Each weight row is first unpacked, per 32-element block b, into signed integers q (|q| <= 63), eight lane
// scales (one per group of four elements; a block's lanes share a scale except Q6_K, whose 16-element sub-blocks
// have their own) and an offset o_b, so that  w_i = lane_scale(i) * q_i + o_b.  Then
//   y = sum_b d_a(b) * sum_lanes lane_scale * (sum of q*a over the lane)  +  sum_b o_b * s_a(b)
// with s_a(b) = d_a(b) * sum of the block's activations. The unpacking is shared by all tokens of a batch.
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_q8.h"

namespace tandem {

bool matmul_kq_supported(TensorType t) {
    return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K;
}

void unpack_kq_row(TensorType t, const uint8_t* row, int64_t n, UnpackedRow& out) {
    out.resize(n);
    unpack_kq_row_ref(t, row, n, out.q.data(), out.lane_scale.data(), out.offset.data());
}

void unpack_kq_row_ref(TensorType t, const uint8_t* row, int64_t n, int8_t* q, float* ls, float* off) {
    for (int64_t sb = 0; sb < n / QK_K; sb++) {
        if (t == TensorType::Q4_K || t == TensorType::Q5_K) {
            const uint8_t* scales;
            const uint8_t* qs;
            const uint8_t* qh = nullptr;
            float d, dmin;
            if (t == TensorType::Q4_K) {
                const block_q4_K* x = reinterpret_cast<const block_q4_K*>(row) + sb;
                d = fp16_to_f32(x->d);
                dmin = fp16_to_f32(x->dmin);
                scales = x->scales;
                qs = x->qs;
            } else {
                const block_q5_K* x = reinterpret_cast<const block_q5_K*>(row) + sb;
                d = fp16_to_f32(x->d);
                dmin = fp16_to_f32(x->dmin);
                scales = x->scales;
                qs = x->qs;
                qh = x->qh;
            }
            for (int j = 0; j < 8; j++) {  // sub-block j = 32 elements = activation block 8*sb + j
                uint8_t sc, m;
                get_scale_min_k4(j, scales, &sc, &m);
                const int64_t b = sb * 8 + j;
                for (int l = 0; l < 8; l++) ls[b * 8 + l] = d * sc;
                off[b] = -dmin * m;
                const uint8_t* src = qs + (j / 2) * 32;
                const int shift = (j % 2) * 4;
                int8_t* dst = q + b * 32;
                for (int l = 0; l < 32; l++) {
                    int v = (src[l] >> shift) & 0xF;
                    if (qh) v |= ((qh[l] >> j) & 1) << 4;
                    dst[l] = int8_t(v);
                }
            }
        } else {  // Q6_K
            const block_q6_K* x = reinterpret_cast<const block_q6_K*>(row) + sb;
            const float d = fp16_to_f32(x->d);
            for (int half = 0; half < 2; half++) {  // 128 elements each
                const uint8_t* ql = x->ql + 64 * half;
                const uint8_t* qh = x->qh + 32 * half;
                int8_t* dst = q + sb * QK_K + 128 * half;
                for (int l = 0; l < 32; l++) {
                    dst[l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                    dst[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                    dst[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                    dst[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                }
            }
            for (int j = 0; j < 8; j++) {  // activation block 8*sb + j covers sub-blocks 2j and 2j+1
                const int64_t b = sb * 8 + j;
                for (int l = 0; l < 4; l++) {
                    ls[b * 8 + l] = d * x->scales[2 * j];
                    ls[b * 8 + 4 + l] = d * x->scales[2 * j + 1];
                }
                off[b] = 0;
            }
        }
    }
}

float dot_unpacked_ref(const UnpackedRow& w, const ActRows& a, int t) {
    const int8_t* aq = a.qrow(t);
    const float* ad = a.drow(t);
    const float* as = a.srow(t);
    float sum = 0;
    for (int64_t b = 0; b < a.nb; b++) {
        float blk = 0;
        for (int l = 0; l < 8; l++) {
            int s = 0;
            for (int i = 0; i < 4; i++) s += int(w.q[size_t(b * 32 + l * 4 + i)]) * aq[b * 32 + l * 4 + i];
            blk += w.lane_scale[size_t(b * 8 + l)] * float(s);
        }
        sum += ad[b] * blk + w.offset[size_t(b)] * as[b];
    }
    return sum;
}

}  // namespace tandem
