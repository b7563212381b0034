// The integer kernels of the x86 levels for matrices in the file's layout, and the activation quantizer, written
// with AVX2 intrinsics (plus 256-bit vpdpbusd where the level has AVX512-VNNI). A per-ISA unit (backend/cpu/isa.h).
#include "backend/cpu/isa_unit.h"

#include <cstring>

#include "backend/cpu/isa_kernels.h"

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/x86/x86_util.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_q8.h"

namespace tandem::TD_ISA {
// Same arithmetic as the reference: x * (1/d) rounded to nearest-even (vcvtps2dq and lrintf under the default
// rounding mode), so the two agree bit for bit.
void quantize_act_rows(const float* x, int64_t n, int group, const ActRows& out, int r0, int r1) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int r = r0; r < r1; r++) {
        const float* xr = x + int64_t(r) * n;
        for (int64_t g = 0; g < n; g += group) {
            __m256 m = _mm256_setzero_ps();
            for (int i = 0; i < group; i += 8)
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xr + g + i)));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float amax = _mm_cvtss_f32(m4);
            const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            const __m256 vid = _mm256_set1_ps(id);
            for (int64_t b = g / 32; b < (g + group) / 32; b++) {
                const float* xb = xr + b * 32;
                __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb), vid));
                __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8), vid));
                __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 16), vid));
                __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 24), vid));
                // Sums of the two halves of 16: lanes 0-3 of s4 from elements 0-15, lanes of h4 from 16-31.
                const __m256i s01 = _mm256_add_epi32(i0, i1), s23 = _mm256_add_epi32(i2, i3);
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s01), _mm256_extracti128_si256(s01, 1));
                __m128i h4 = _mm_add_epi32(_mm256_castsi256_si128(s23), _mm256_extracti128_si256(s23, 1));
                s4 = _mm_hadd_epi32(s4, h4);  // (a0+a1, a2+a3, b0+b1, b2+b3)
                s4 = _mm_hadd_epi32(s4, s4);  // (a, b, a, b)
                const int sum16a = _mm_cvtsi128_si32(s4), sum16b = _mm_extract_epi32(s4, 1);
                // packs work within 128-bit lanes: the permute restores element order.
                const __m256i p16a = _mm256_packs_epi32(i0, i1), p16b = _mm256_packs_epi32(i2, i3);
                const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + size_t(r) * size_t(n) + size_t(b) * 32), p8);
                const int isum = sum16a + sum16b;
                out.qsum16[(size_t(r) * size_t(out.nb) + size_t(b)) * 2] = int16_t(sum16a);
                out.qsum16[(size_t(r) * size_t(out.nb) + size_t(b)) * 2 + 1] = int16_t(sum16b);
                out.d[size_t(r) * size_t(out.nb) + size_t(b)] = d;
                out.s[size_t(r) * size_t(out.nb) + size_t(b)] = d * float(isum);
                out.qsum[size_t(r) * size_t(out.nb) + size_t(b)] = isum;
            }
        }
    }
}

namespace {
inline __m256 dot_block(__m256i w, __m256i a) {
    // sum of signed int8 products: maddubs needs an unsigned first operand, so move w's sign onto a.
    const __m256i aw = _mm256_sign_epi8(w, w);
    const __m256i sa = _mm256_sign_epi8(a, w);
    const __m256i p16 = _mm256_maddubs_epi16(aw, sa);
    const __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(p32);
}

template <bool Q4, bool Unsigned = false>
inline __m256i load_weights(const uint8_t* blk) {
    if constexpr (Q4) {
        const block_q4_0* x = reinterpret_cast<const block_q4_0*>(blk);
        __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->qs));
        __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);  // low lane: low nibbles (0..15)
        both = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
        if constexpr (Unsigned) return both;
        return _mm256_sub_epi8(both, _mm256_set1_epi8(8));
    } else {
        const block_q8_0* x = reinterpret_cast<const block_q8_0*>(blk);
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs));
    }
}

template <bool Q4, int T>
void row_tile(const uint8_t* row, int64_t nb, const ActRows& a, int t0, float* out) {
    constexpr size_t bsz = Q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    __m256 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    const int8_t* aq[T];
    const float* ad[T];
    for (int t = 0; t < T; t++) {
        aq[t] = a.qrow(t0 + t);
        ad[t] = a.drow(t0 + t);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = row + size_t(b) * bsz;
        _mm_prefetch(reinterpret_cast<const char*>(blk) + 512, _MM_HINT_T0);
        const __m256i wq = load_weights<Q4>(blk);
        uint16_t dh;
        memcpy(&dh, blk, 2);
        const float dw = _cvtsh_ss(dh);
        for (int t = 0; t < T; t++) {
            const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq[t] + b * 32));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ad[t][b]), dot_block(wq, av), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) out[t] = hsum(acc[t]);
}

#if defined(__AVX512VNNI__)
// VNNI kernel, 8 blocks per step. Weights are made unsigned (Q8_0: w ^ 0x80 = w + 128; Q4_0: the raw nibble,
// = w + 8), so vpdpbusd multiplies them with the signed activations directly; the offset comes back out as
// offset * d_w * s_a per block (s_a = d_a * sum of the block's activations). The eight per-block lane vectors are
// reduced together (transposing horizontal adds) into one vector of eight block sums, which is then scaled by
// the eight d_w * d_a products with a single FMA.
template <bool Q4, int T>
void row_tile_vnni8(const uint8_t* row, int64_t nb, const ActRows& a, int t0, float* out) {
    constexpr size_t bsz = Q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    constexpr float offset = Q4 ? 8.0f : 128.0f;
    __m256 acc[T], corr[T];
    for (int t = 0; t < T; t++) {
        acc[t] = _mm256_setzero_ps();
        corr[t] = _mm256_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256i w[8];
        uint16_t dh[8];
        for (int j = 0; j < 8; j++) {
            const uint8_t* blk = row + size_t(b + j) * bsz;
            if constexpr (Q4) {
                __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
                w[j] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
            } else {
                w[j] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                                        _mm256_set1_epi8(char(0x80)));
            }
            memcpy(&dh[j], blk, 2);
        }
        _mm_prefetch(reinterpret_cast<const char*>(row + size_t(b + 8) * bsz) + 256, _MM_HINT_T0);
        // the eight half scales, converted together (no scalar float stores feeding a vector load)
        const __m256 dw = _mm256_cvtph_ps(_mm_set_epi16(short(dh[7]), short(dh[6]), short(dh[5]), short(dh[4]),
                                                        short(dh[3]), short(dh[2]), short(dh[1]), short(dh[0])));
        for (int t = 0; t < T; t++) {
            const int8_t* aq = a.qrow(t0 + t) + b * 32;
            __m256i d[8];
            for (int j = 0; j < 8; j++)
                d[j] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[j],
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 32 * j)));
            const __m256i h01 = _mm256_hadd_epi32(d[0], d[1]), h23 = _mm256_hadd_epi32(d[2], d[3]);
            const __m256i h45 = _mm256_hadd_epi32(d[4], d[5]), h67 = _mm256_hadd_epi32(d[6], d[7]);
            const __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
            // lanes: h0123 = [b0 b1 b2 b3 | b0 b1 b2 b3] halves, h4567 likewise for b4..b7
            const __m256i lo = _mm256_permute2x128_si256(h0123, h4567, 0x20);
            const __m256i hi = _mm256_permute2x128_si256(h0123, h4567, 0x31);
            const __m256 sums = _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi));  // block sums b0..b7
            const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(a.drow(t0 + t) + b));
            acc[t] = _mm256_fmadd_ps(sums, scale, acc[t]);
            corr[t] = _mm256_fmadd_ps(dw, _mm256_loadu_ps(a.srow(t0 + t) + b), corr[t]);
        }
    }
    for (int t = 0; t < T; t++) {
        float sum = hsum(acc[t]) - offset * hsum(corr[t]);
        for (int64_t bb = b; bb < nb; bb++) {  // tail blocks (rows whose block count is not a multiple of 8)
            const uint8_t* blk = row + size_t(bb) * bsz;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            const __m256i wq = load_weights<Q4>(blk);
            const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qrow(t0 + t) + bb * 32));
            sum += _cvtsh_ss(dh) * a.drow(t0 + t)[bb] * hsum(dot_block(wq, av));
        }
        out[t] = sum;
    }
}
#endif

// Rows [r0, r1) of a Q8_0 / Q4_0 matrix in the file's layout (row-major blocks, row_stride bytes per row).
template <bool Q4>
void rows_q8(const uint8_t* w, size_t row_stride, int64_t cols, const ActRows& a, float* y, int64_t ldy, int64_t r0,
             int64_t r1) {
    const int64_t nb = cols / 32;
    float out[4];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t* row = w + size_t(r) * row_stride;
        int t = 0;
#if defined(__AVX512VNNI__)
        for (; t + 4 <= a.n_rows; t += 4) {
            row_tile_vnni8<Q4, 4>(row, nb, a, t, out);
            for (int i = 0; i < 4; i++) y[int64_t(t + i) * ldy + r] = out[i];
        }
        for (; t < a.n_rows; t++) {
            row_tile_vnni8<Q4, 1>(row, nb, a, t, out);
            y[int64_t(t) * ldy + r] = out[0];
        }
#else
        for (; t + 4 <= a.n_rows; t += 4) {
            row_tile<Q4, 4>(row, nb, a, t, out);
            for (int i = 0; i < 4; i++) y[int64_t(t + i) * ldy + r] = out[i];
        }
        for (; t + 2 <= a.n_rows; t += 2) {
            row_tile<Q4, 2>(row, nb, a, t, out);
            for (int i = 0; i < 2; i++) y[int64_t(t + i) * ldy + r] = out[i];
        }
        for (; t < a.n_rows; t++) {
            row_tile<Q4, 1>(row, nb, a, t, out);
            y[int64_t(t) * ldy + r] = out[0];
        }
#endif
    }
}

template <int NT>
static inline void mxfp4_tile(const block_mxfp4* x, int64_t nb, const ActRows& a, int t0, float* out) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i lo4 = _mm_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NT];
    for (int i = 0; i < NT; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
        const __m256i wq = _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), lo4)),
                                            _mm_shuffle_epi8(lut, _mm_and_si128(v, lo4)));
        const __m256i wabs = _mm256_sign_epi8(wq, wq);
        const uint8_t e = x[b].e;
        const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
        float dw;
        std::memcpy(&dw, &bits, 4);
        for (int i = 0; i < NT; i++) {
            const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qrow(t0 + i) + b * 32));
            const __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av, wq));
            const __m256 dp = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[i] = _mm256_fmadd_ps(dp, _mm256_set1_ps(dw * a.drow(t0 + i)[b]), acc[i]);
        }
    }
    for (int i = 0; i < NT; i++) out[i] = hsum(acc[i]);
}

// Rows [r0, r1) of an MXFP4 matrix: each block's nibbles become table values with one byte shuffle per half
// (elements 0..15 from the low nibbles, 16..31 from the high ones, as the activation block), then the signed
// 8-bit dot product of the unpacked K-quant path, scaled by 2^(e-128) * d_a; up to 4 tokens share one decoding.
void rows_mxfp4(const uint8_t* w, size_t row_stride, int64_t cols, const ActRows& a, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
    const int64_t nb = cols / 32;
    float out[4];
    for (int64_t r = r0; r < r1; r++) {
        const block_mxfp4* x = reinterpret_cast<const block_mxfp4*>(w + size_t(r) * row_stride);
        int t = 0;
        for (; t + 4 <= a.n_rows; t += 4) {
            mxfp4_tile<4>(x, nb, a, t, out);
            for (int i = 0; i < 4; i++) y[int64_t(t + i) * ldy + r] = out[i];
        }
        for (; t < a.n_rows; t++) {
            mxfp4_tile<1>(x, nb, a, t, out);
            y[int64_t(t) * ldy + r] = out[0];
        }
    }
}

}  // namespace

void matmul_q8_rows(TensorType t, const uint8_t* w, size_t row_stride, int64_t cols, const ActRows& a, float* y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    if (t == TensorType::MXFP4) return rows_mxfp4(w, row_stride, cols, a, y, ldy, r0, r1);
    if (t == TensorType::Q4_0) rows_q8<true>(w, row_stride, cols, a, y, ldy, r0, r1);
    else rows_q8<false>(w, row_stride, cols, a, y, ldy, r0, r1);
}

// The two high bits of Q6_K values, at bit 4: ((h >> shift) & 3) << 4.
static inline __m256i hi2(__m256i h, __m256i m2, int shift) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(shift)), m2), 4);
}

// AVX2 unpacking of Q4_K and Q6_K (the types of Q4_K_M files); same output as unpack_kq_row.
void unpack_kq_row(TensorType t, const uint8_t* row, int64_t n, int8_t* q, float* ls, float* off) {
    if (t == TensorType::Q5_K) return unpack_kq_row_ref(t, row, n, q, ls, off);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t sb = 0; sb < n / QK_K; sb++) {
        if (t == TensorType::Q4_K) {
            const block_q4_K* x = reinterpret_cast<const block_q4_K*>(row) + sb;
            const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
            for (int p = 0; p < 4; p++) {  // 64 elements: sub-blocks 2p (low nibbles) and 2p+1 (high nibbles)
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs + 32 * p));
                int8_t* dst = q + (sb * 8 + 2 * p) * 32;
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_and_si256(v, m4));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32),
                                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
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
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                                    _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), hi2(h, m2, 0)), c32));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32),
                                    _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), hi2(h, m2, 2)), c32));
                _mm256_storeu_si256(
                    reinterpret_cast<__m256i*>(dst + 64),
                    _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hi2(h, m2, 4)),
                                    c32));
                _mm256_storeu_si256(
                    reinterpret_cast<__m256i*>(dst + 96),
                    _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hi2(h, m2, 6)),
                                    c32));
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

float dot_unpacked(const int8_t* wq_row, const float* lane_scale, const float* offset, const ActRows& a, int t) {
    const int8_t* aq = a.qrow(t);
    const float* ad = a.drow(t);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.nb; b++) {
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq_row + b * 32));
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + b * 32));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(av, wq));
        const __m256 dp = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
        const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(lane_scale + b * 8), _mm256_set1_ps(ad[b]));
        acc = _mm256_fmadd_ps(dp, scale, acc);
    }
    __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    float sum = _mm_cvtss_f32(lo);
    const float* as = a.srow(t);
    for (int64_t b = 0; b < a.nb; b++) sum += offset[b] * as[b];
    return sum;
}

}  // namespace tandem::TD_ISA
