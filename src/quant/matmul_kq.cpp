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
#include "quant/matmul_q8.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tandem {

bool matmul_kq_supported(TensorType t) {
    return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K;
}

void unpack_kq_row(TensorType t, const uint8_t* row, int64_t n, UnpackedRow& out) {
    out.resize(n);
    int8_t* q = out.q.data();
    float* ls = out.lane_scale.data();
    float* off = out.offset.data();
    for (int64_t sb = 0; sb < n / QK_K; sb++) {
        if (t == TensorType::Q4_K || t == TensorType::Q5_K) {
            const uint8_t* scales;
            const uint8_t* qs;
            const uint8_t* qh = nullptr;
            float d, dmin;
            if (t == TensorType::Q4_K) {
                const block_q4_K* x = reinterpret_cast<const block_q4_K*>(row) + sb;
                d = fp16_to_f32(x->d); dmin = fp16_to_f32(x->dmin); scales = x->scales; qs = x->qs;
            } else {
                const block_q5_K* x = reinterpret_cast<const block_q5_K*>(row) + sb;
                d = fp16_to_f32(x->d); dmin = fp16_to_f32(x->dmin); scales = x->scales; qs = x->qs; qh = x->qh;
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

float dot_unpacked_ref(const UnpackedRow& w, const ActQ8& a, int t) {
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

#if defined(__x86_64__)
// The two high bits of Q6_K values, at bit 4: ((h >> shift) & 3) << 4.
__attribute__((target("avx2"))) static inline __m256i hi2(__m256i h, __m256i m2, int shift) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(shift)), m2), 4);
}

// AVX2 unpacking of Q4_K and Q6_K (the types of Q4_K_M files); same output as unpack_kq_row.
__attribute__((target("avx2,fma,f16c"))) void unpack_kq_row_avx2(TensorType t, const uint8_t* row, int64_t n, UnpackedRow& out) {
    if (t == TensorType::Q5_K) return unpack_kq_row(t, row, n, out);
    out.resize(n);
    int8_t* q = out.q.data();
    float* ls = out.lane_scale.data();
    float* off = out.offset.data();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t sb = 0; sb < n / QK_K; sb++) {
        if (t == TensorType::Q4_K) {
            const block_q4_K* x = reinterpret_cast<const block_q4_K*>(row) + sb;
            const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
            for (int p = 0; p < 4; p++) {  // 64 elements: sub-blocks 2p (low nibbles) and 2p+1 (high nibbles)
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs + 32 * p));
                int8_t* dst = q + (sb * 8 + 2 * p) * 32;
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_and_si256(v, m4));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                get_scale_min_k4(j, x->scales, &sc, &m);
                const int64_t b = sb * 8 + j;
                _mm256_storeu_ps(ls + b * 8, _mm256_set1_ps(d * sc));
                off[b] = -dmin * m;
            }
        } else {
            const block_q6_K* x = reinterpret_cast<const block_q6_K*>(row) + sb;
            const float d = _cvtsh_ss(x->d);
            const __m256i m2 = _mm256_set1_epi8(3), c32 = _mm256_set1_epi8(32);
            for (int half = 0; half < 2; half++) {
                const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->ql + 64 * half));
                const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->ql + 64 * half + 32));
                const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qh + 32 * half));
                int8_t* dst = q + sb * QK_K + 128 * half;
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), hi2(h, m2, 0)), c32));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), hi2(h, m2, 2)), c32));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64), _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hi2(h, m2, 4)), c32));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 96), _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hi2(h, m2, 6)), c32));
            }
            for (int j = 0; j < 8; j++) {
                const int64_t b = sb * 8 + j;
                const __m128 s0 = _mm_set1_ps(d * x->scales[2 * j]), s1 = _mm_set1_ps(d * x->scales[2 * j + 1]);
                _mm256_storeu_ps(ls + b * 8, _mm256_set_m128(s1, s0));
                off[b] = 0;
            }
        }
    }
}

__attribute__((target("avx2,fma"))) float dot_unpacked_avx2(const UnpackedRow& w, const ActQ8& a, int t) {
    const int8_t* aq = a.qrow(t);
    const float* ad = a.drow(t);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.nb; b++) {
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q.data() + b * 32));
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + b * 32));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(av, wq));
        const __m256 dp = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
        const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(w.lane_scale.data() + b * 8), _mm256_set1_ps(ad[b]));
        acc = _mm256_fmadd_ps(dp, scale, acc);
    }
    __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    float sum = _mm_cvtss_f32(lo);
    const float* as = a.srow(t);
    for (int64_t b = 0; b < a.nb; b++) sum += w.offset[size_t(b)] * as[b];
    return sum;
}
#endif

}  // namespace tandem
