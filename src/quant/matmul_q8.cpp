// Integer dot-product matmul for Q8_0 and Q4_0 weights against 8-bit activations (ActQ8): a scalar reference and
// an AVX2 kernel. Per 32-element block: y += (d_w * d_a) * sum_i w_i * a_i, with w_i in [-128, 127] (Q8_0) or
// [-8, 7] (Q4_0: nibble - 8).
//
// Batches: for each weight row the kernel walks the tokens in tiles of 4, so a verification batch of k tokens
// streams the row from memory once and re-reads it from L1 for the other tiles.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/act_q8.h"
#include "quant/blocks.h"
#include "quant/matmul_q8.h"
#include "tandem/error.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

void quantize_act_rows_ref(const float* x, int64_t n, int group, ActQ8& out, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        const float* xr = x + int64_t(r) * n;
        for (int64_t g = 0; g < n; g += group) {
            float amax = 0;
            for (int i = 0; i < group; i++) amax = std::max(amax, std::fabs(xr[g + i]));
            const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            for (int64_t b = g / 32; b < (g + group) / 32; b++) {
                int8_t* q = out.q.data() + size_t(r) * size_t(n) + size_t(b) * 32;
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

#if defined(__x86_64__)
// Same arithmetic as the reference: x * (1/d) rounded to nearest-even (vcvtps2dq and lrintf under the default
// rounding mode), so the two agree bit for bit.
__attribute__((target("avx2,fma"))) void quantize_act_rows_avx2(const float* x, int64_t n, int group, ActQ8& out, int r0,
                                                                int r1) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int r = r0; r < r1; r++) {
        const float* xr = x + int64_t(r) * n;
        for (int64_t g = 0; g < n; g += group) {
            __m256 m = _mm256_setzero_ps();
            for (int i = 0; i < group; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xr + g + i)));
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
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + size_t(r) * size_t(n) + size_t(b) * 32), p8);
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
#endif

}  // namespace

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
#if defined(__x86_64__)
    if (cpu_features().avx2) return quantize_act_rows_avx2(x, n, group, out, r0, r1);
#endif
    quantize_act_rows_ref(x, n, group, out, r0, r1);
}

void quantize_act_q8_prepare(int n_rows, int64_t n, ActQ8& out) { act_resize(out, n_rows, n); }

bool matmul_q8_supported(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0; }

void matmul_q8_rows_ref(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
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

#if defined(__x86_64__)
namespace {

__attribute__((target("avx2,fma"))) inline __m256 dot_block(__m256i w, __m256i a) {
    // sum of signed int8 products: maddubs needs an unsigned first operand, so move w's sign onto a.
    const __m256i aw = _mm256_sign_epi8(w, w);
    const __m256i sa = _mm256_sign_epi8(a, w);
    const __m256i p16 = _mm256_maddubs_epi16(aw, sa);
    const __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(p32);
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma,avx512vl,avx512vnni"))) inline __m256 dot_block_vnni(__m256i w, __m256i a) {
    const __m256i aw = _mm256_sign_epi8(w, w);
    const __m256i sa = _mm256_sign_epi8(a, w);
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sa));
}

// Q4_0 with VNNI: the nibbles are unsigned already, so sum (q - 8) a = sum q a - 8 sum a, and the second term
// comes from the activation block sums (ActQ8::s) outside the loop.
__attribute__((target("avx2,fma,avx512vl,avx512vnni"))) inline __m256 dot_block_vnni_u(__m256i qu, __m256i a) {
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), qu, a));
}

template <bool Q4, bool Unsigned = false>
__attribute__((target("avx2,fma,f16c"))) inline __m256i load_weights(const uint8_t* blk) {
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

template <bool Q4, int T, bool Vnni>
__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))) void row_tile(const uint8_t* row, int64_t nb, const ActQ8& a, int t0, float* out) {
    constexpr size_t bsz = Q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    __m256 acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    float corr[T] = {};
    const int8_t* aq[T];
    const float* ad[T];
    for (int t = 0; t < T; t++) { aq[t] = a.qrow(t0 + t); ad[t] = a.drow(t0 + t); }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = row + size_t(b) * bsz;
        _mm_prefetch(reinterpret_cast<const char*>(blk) + 512, _MM_HINT_T0);
        const __m256i wq = load_weights<Q4, Q4 && Vnni>(blk);
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float dw = _cvtsh_ss(dh);
        for (int t = 0; t < T; t++) {
            const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq[t] + b * 32));
            __m256 dot;
            if constexpr (!Vnni) dot = dot_block(wq, av);
            else if constexpr (Q4) dot = dot_block_vnni_u(wq, av);
            else dot = dot_block_vnni(wq, av);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * ad[t][b]), dot, acc[t]);
            if constexpr (Q4 && Vnni) corr[t] += dw * a.srow(t0 + t)[b];
        }
    }
    for (int t = 0; t < T; t++) out[t] = hsum(acc[t]) - 8.0f * corr[t];
}

// VNNI kernel, 8 blocks per step. Weights are made unsigned (Q8_0: w ^ 0x80 = w + 128; Q4_0: the raw nibble,
// = w + 8), so vpdpbusd multiplies them with the signed activations directly; the offset comes back out as
// offset * d_w * s_a per block (s_a = d_a * sum of the block's activations). The eight per-block lane vectors are
// reduced together (transposing horizontal adds) into one vector of eight block sums, which is then scaled by
// the eight d_w * d_a products with a single FMA.
template <bool Q4, int T>
__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))) void row_tile_vnni8(const uint8_t* row, int64_t nb, const ActQ8& a, int t0, float* out) {
    constexpr size_t bsz = Q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    constexpr float offset = Q4 ? 8.0f : 128.0f;
    __m256 acc[T], corr[T];
    for (int t = 0; t < T; t++) { acc[t] = _mm256_setzero_ps(); corr[t] = _mm256_setzero_ps(); }
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
                w[j] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), _mm256_set1_epi8(char(0x80)));
            }
            std::memcpy(&dh[j], blk, 2);
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
            std::memcpy(&dh, blk, 2);
            const __m256i wq = load_weights<Q4>(blk);
            const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qrow(t0 + t) + bb * 32));
            sum += _cvtsh_ss(dh) * a.drow(t0 + t)[bb] * hsum(dot_block(wq, av));
        }
        out[t] = sum;
    }
}

template <bool Q4, bool Vnni>
__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))) void rows_avx2(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w.cols / 32;
    float out[4];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t* row = w.row(r);
        int t = 0;
        if constexpr (Vnni) {
            for (; t + 4 <= a.n_rows; t += 4) {
                row_tile_vnni8<Q4, 4>(row, nb, a, t, out);
                for (int i = 0; i < 4; i++) y[int64_t(t + i) * ldy + r] = out[i];
            }
            for (; t < a.n_rows; t++) {
                row_tile_vnni8<Q4, 1>(row, nb, a, t, out);
                y[int64_t(t) * ldy + r] = out[0];
            }
            continue;
        }
        for (; t + 4 <= a.n_rows; t += 4) {
            row_tile<Q4, 4, Vnni>(row, nb, a, t, out);
            for (int i = 0; i < 4; i++) y[int64_t(t + i) * ldy + r] = out[i];
        }
        for (; t + 2 <= a.n_rows; t += 2) {
            row_tile<Q4, 2, Vnni>(row, nb, a, t, out);
            for (int i = 0; i < 2; i++) y[int64_t(t + i) * ldy + r] = out[i];
        }
        for (; t < a.n_rows; t++) {
            row_tile<Q4, 1, Vnni>(row, nb, a, t, out);
            y[int64_t(t) * ldy + r] = out[0];
        }
    }
}

}  // namespace

void matmul_q8_rows_avx2(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    if (w.type == TensorType::Q4_0) rows_avx2<true, false>(w, a, y, ldy, r0, r1);
    else rows_avx2<false, false>(w, a, y, ldy, r0, r1);
}

void matmul_q8_rows_vnni(const WeightView& w, const ActQ8& a, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    if (w.type == TensorType::Q4_0) rows_avx2<true, true>(w, a, y, ldy, r0, r1);
    else rows_avx2<false, true>(w, a, y, ldy, r0, r1);
}
#endif

}  // namespace tandem
