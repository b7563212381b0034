// The float kernels of the x86 levels, written with AVX2 + FMA + F16C intrinsics. A per-ISA unit (backend/cpu/isa.h):
// built once for each of avx2, avx512 and avx512vnni with that level's flags (the AVX-512 builds get the EVEX
// encodings and 32 vector registers from the compiler).
#include "backend/cpu/isa_unit.h"

#include <immintrin.h>
#include <math.h>

#include "backend/cpu/isa_kernels.h"
#include "backend/cpu/x86/x86_util.h"

namespace tandem::TD_ISA {

float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 bv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), bv, s0);
    }
    float s = hsum(s0);
    for (; i < n; i++) s += a[i] * _cvtsh_ss(b[i]);
    return s;
}

void axpy_f16(float w, const uint16_t* x, float* y, int64_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += w * _cvtsh_ss(x[i]);
}

static inline __m256 load8_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// exp(x) for x <= 0 (softmax after subtracting the max): Cody-Waite range reduction x = n ln2 + r and a degree-6
// polynomial for exp(r) on |r| <= ln2/2 (relative error below 2e-7); underflows to 0 below -87.
static inline __m256 exp_ps(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// gate[i] = silu(gate[i]) * up[i], silu(g) = g * sigmoid(g); the exponential only of -|g| (<= 0, where exp_ps
// is valid), sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e) below.
static inline __m256 silu_mul8(__m256 g, __m256 up) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp_ps(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));  // exp(-|g|)
    const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 sig = _mm256_blendv_ps(r, _mm256_mul_ps(e, r), g);  // g's sign bit picks e / (1 + e)
    return _mm256_mul_ps(_mm256_mul_ps(g, sig), up);
}

// The tail (n % 8 values) goes through the same vector arithmetic in a padded buffer, so every value is computed
// the same way wherever it sits: a batch of rows gives bit-identical results to one row at a time.
void silu_mul(float* gate, const float* up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i == n) return;
    float g8[8] = {0, 0, 0, 0, 0, 0, 0, 0}, u8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = i; j < n; j++) {
        g8[j - i] = gate[j];
        u8[j - i] = up[j];
    }
    _mm256_storeu_ps(g8, silu_mul8(_mm256_loadu_ps(g8), _mm256_loadu_ps(u8)));
    for (int64_t j = i; j < n; j++) gate[j] = g8[j - i];
}

// The eight horizontal sums of v[0..7] as one vector: result[i] = sum of the lanes of v[i].
static inline __m256 hsum8(const __m256* v) {
    const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    // s0123 = [v0..v3 sums of lanes 0-3 | v0..v3 sums of lanes 4-7], s4567 likewise for v4..v7.
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// The delta rule (contract: backend/cpu/kernels.h delta_rule; S % 8 == 0): four rows of the state at a time, each read
// once for its dot products with k and q (eight sums reduced together), then written once.
void delta_rule(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                float beta, int S, float* o) {
    const float kq = dot_f32(k, q, S), scale = 1.0f / sqrtf(float(S));
    const __m256 dv = _mm256_set1_ps(decay);
    for (int j = 0; j < S; j += 4) {
        const float* mi[4];
        __m256 acc[8];
        for (int r = 0; r < 4; r++) mi[r] = m_in + size_t(j + r) * size_t(S);
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int i = 0; i < S; i += 8) {
            const __m256 kv = _mm256_loadu_ps(k + i), qv = _mm256_loadu_ps(q + i);
            for (int r = 0; r < 4; r++) {
                const __m256 m = _mm256_loadu_ps(mi[r] + i);
                acc[r] = _mm256_fmadd_ps(m, kv, acc[r]);
                acc[4 + r] = _mm256_fmadd_ps(m, qv, acc[4 + r]);
            }
        }
        alignas(32) float s[8];
        _mm256_store_ps(s, hsum8(acc));  // s[r] = M_in_j+r . k, s[4 + r] = M_in_j+r . q
        for (int r = 0; r < 4; r++) {
            const float d = (v[j + r] - decay * s[r]) * beta;
            o[j + r] = (decay * s[4 + r] + d * kq) * scale;
            const __m256 dd = _mm256_set1_ps(d);
            float* mo = m_out + size_t(j + r) * size_t(S);
            for (int i = 0; i < S; i += 8)
                _mm256_storeu_ps(
                    mo + i, _mm256_fmadd_ps(dd, _mm256_loadu_ps(k + i), _mm256_mul_ps(dv, _mm256_loadu_ps(mi[r] + i))));
        }
    }
}

// o[0 .. 8*CH) = c * o + sum over the set bits j of mask of p[j] * tile[j][0 .. 8*CH), in increasing j; CH
// accumulator registers (a compile-time count, so they stay in registers).
template <int CH>
static inline void pv_chunk(const float* p, uint32_t mask, float c, const float* tile, int hd, float* o) {
    __m256 acc[CH];
    const __m256 cv = _mm256_set1_ps(c);
    for (int i = 0; i < CH; i++) acc[i] = _mm256_mul_ps(cv, _mm256_loadu_ps(o + 8 * i));
    for (uint32_t m = mask; m; m &= m - 1) {
        const int j = __builtin_ctz(m);
        const __m256 w = _mm256_set1_ps(p[j]);
        for (int i = 0; i < CH; i++) acc[i] = _mm256_fmadd_ps(w, _mm256_load_ps(tile + j * hd + 8 * i), acc[i]);
    }
    for (int i = 0; i < CH; i++) _mm256_storeu_ps(o + 8 * i, acc[i]);
}

// The online-softmax and value step of one query over a tile, given its scores s of the groups of 8 positions
// [g0, g1) (the visible ones among them by mask).
static inline void online_step(float* s, uint32_t mask, int g0, int g1, const float* vt, int hd, float& mxq, float& lq,
                               float* oq) {
    const int nv = hd / 8;
    // lane i of group j0 is visible iff bit j0 + i of mask: the max over visible scores and the sum of their
    // exponentials in vectors (invisible lanes are -inf for the max and exactly 0 in the sum and in s)
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    auto visible = [&](int j0) {
        const __m256i bits = _mm256_set1_epi32(int((mask >> j0) & 0xFFu));
        return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(bits, lane_bit), lane_bit));
    };
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 vmax = ninf;
    for (int j0 = g0; j0 < g1; j0 += 8)
        vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(ninf, _mm256_load_ps(s + j0), visible(j0)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float tmax = _mm_cvtss_f32(m4);
    const float m1 = mxq > tmax ? mxq : tmax;
    const float c = expf(mxq - m1);  // 0 before any position (mx = -inf)
    const __m256 vm1 = _mm256_set1_ps(m1);
    __m256 vsum = _mm256_setzero_ps();
    for (int j0 = g0; j0 < g1; j0 += 8) {
        const __m256 p = _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_load_ps(s + j0), vm1)), visible(j0));
        _mm256_store_ps(s + j0, p);
        vsum = _mm256_add_ps(vsum, p);
    }
    lq = lq * c + hsum(vsum);
    mxq = m1;
    int i0 = 0;
    for (; i0 + 8 <= nv; i0 += 8) pv_chunk<8>(s, mask, c, vt + 8 * i0, hd, oq + 8 * i0);
    if (nv - i0 >= 4) {
        pv_chunk<4>(s, mask, c, vt + 8 * i0, hd, oq + 8 * i0);
        i0 += 4;
    }
    if (nv - i0 >= 2) {
        pv_chunk<2>(s, mask, c, vt + 8 * i0, hd, oq + 8 * i0);
        i0 += 2;
    }
    if (nv - i0 >= 1) pv_chunk<1>(s, mask, c, vt + 8 * i0, hd, oq + 8 * i0);
}

// The groups of 8 tile positions [g0, g1) that hold a visible one (each group's scores are the same either way).
static inline int first_group(uint32_t mask) { return __builtin_ctz(mask) / 8 * 8; }
static inline int end_group(uint32_t mask) { return (31 - __builtin_clz(mask)) / 8 * 8 + 8; }

// The tile step of every query of the rows that see part of the tile: scores(r, g, g0, g1, s) writes the scores of
// query g of row r for the groups of 8 positions [g0, g1), then the online step folds them in.
template <class Scores>
static inline void tile_step(int n_rows, int group, const uint32_t* masks, const float* vt, int hd, float* mx, float* l,
                             float* o, Scores scores) {
    alignas(32) float s[kAttnTile];
    for (int r = 0; r < n_rows; r++) {
        const uint32_t mask = masks[r];
        if (!mask) continue;
        const int g0 = first_group(mask), g1 = end_group(mask);
        for (int g = 0; g < group; g++) {
            const int qi = r * group + g;
            scores(r, g, g0, g1, s);
            online_step(s, mask, g0, g1, vt, hd, mx[qi], l[qi], o + size_t(qi) * size_t(hd));
        }
    }
}

// The tile step (contract: backend/cpu/kernels.h attn_tile). Scores of 8 positions come out of one reduction (hsum8);
// every position's score is computed whatever the mask, so a query's arithmetic never depends on it.
void attn_tile(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
               const float* vt, int hd, float scale, float* mx, float* l, float* o) {
    const int nv = hd / 8;
    const __m256 vscale = _mm256_set1_ps(scale);
    tile_step(n_rows, group, masks, vt, hd, mx, l, o, [&](int r, int g, int g0, int g1, float* s) {
        const float* qr = q + size_t(r) * q_stride + size_t(g) * size_t(hd);
        for (int j0 = g0; j0 < g1; j0 += 8) {
            __m256 acc[8];
            for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
            for (int i = 0; i < nv; i++) {
                const __m256 qv = _mm256_loadu_ps(qr + 8 * i);
                for (int j = 0; j < 8; j++)
                    acc[j] = _mm256_fmadd_ps(qv, _mm256_load_ps(kt + (j0 + j) * hd + 8 * i), acc[j]);
            }
            _mm256_store_ps(s + j0, _mm256_mul_ps(hsum8(acc), vscale));
        }
    });
}

#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
static inline __m256i dpbusd8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}

// The eight horizontal sums of v[0..7] as one vector (exact): result[i] = sum of the lanes of v[i].
static inline __m256i hsum8_epi32(const __m256i* v) {
    const __m256i s0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i s4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20),
                            _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

// The integer-scored tile step (contract: backend/cpu/kernels.h attn_tile_i8): per block of 32, vpdpbusd of each
// position's unsigned keys against the query's signed bytes, eight positions' sums in one reduction, less the
// offset term, times the two scales.
void attn_tile_i8(const int8_t* qs, const float* qd, const int32_t* qc, size_t q_stride, int n_rows, int group,
                  const uint32_t* masks, const uint8_t* kt, const float* kd, const float* vt, int hd, float scale,
                  float* mx, float* l, float* o) {
    const int nb = hd / 32;
    const __m256 vscale = _mm256_set1_ps(scale);
    tile_step(n_rows, group, masks, vt, hd, mx, l, o, [&](int r, int g, int g0, int g1, float* s) {
        const size_t at = size_t(r) * q_stride + size_t(g) * size_t(hd);
        const int8_t* qr = qs + at;
        const float* dr = qd + at / 32;
        const int32_t* cr = qc + at / 32;
        for (int j0 = g0; j0 < g1; j0 += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qr + 32 * b));
                __m256i a[8];
                for (int j = 0; j < 8; j++)
                    a[j] =
                        dpbusd8(_mm256_setzero_si256(),
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(kt + (j0 + j) * hd + 32 * b)), qv);
                const __m256i dot = _mm256_sub_epi32(hsum8_epi32(a), _mm256_set1_epi32(cr[b]));
                const __m256 w = _mm256_mul_ps(_mm256_load_ps(kd + b * kAttnTile + j0), _mm256_set1_ps(dr[b]));
                acc = _mm256_fmadd_ps(w, _mm256_cvtepi32_ps(dot), acc);
            }
            _mm256_store_ps(s + j0, _mm256_mul_ps(acc, vscale));
        }
    });
}
#endif

// Cache rows to a float tile (contract: backend/cpu/kernels.h kv_tile_f32) for the types decode at depth streams most:
// f32, f16, bf16, q8_0, q4_0. The block types: x = float(q) * d, one rounding, as the reference.
static inline __m256 load8_bf16_tile(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

bool kv_tile_f32(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile) {
    const int nv = hd / 8;
    if (hd % 32 != 0) return false;
    switch (t) {
        case TensorType::F32:
            for (int j = 0; j < np; j++)
                for (int i = 0; i < nv; i++)
                    _mm256_store_ps(tile + j * hd + 8 * i,
                                    _mm256_loadu_ps(reinterpret_cast<const float*>(rows[j]) + 8 * i));
            break;
        case TensorType::F16:
            for (int j = 0; j < np; j++)
                for (int i = 0; i < nv; i++)
                    _mm256_store_ps(tile + j * hd + 8 * i,
                                    load8_f16(reinterpret_cast<const uint16_t*>(rows[j]) + 8 * i));
            break;
        case TensorType::BF16:
            for (int j = 0; j < np; j++)
                for (int i = 0; i < nv; i++)
                    _mm256_store_ps(tile + j * hd + 8 * i,
                                    load8_bf16_tile(reinterpret_cast<const uint16_t*>(rows[j]) + 8 * i));
            break;
        case TensorType::Q8_0:
            for (int j = 0; j < np; j++) {
                const uint8_t* b = rows[j];
                for (int k = 0; k < hd / 32; k++, b += 34) {
                    uint16_t dh;
                    __builtin_memcpy(&dh, b, 2);
                    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
                    for (int i = 0; i < 4; i++) {
                        const __m256i q =
                            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * i)));
                        _mm256_store_ps(tile + j * hd + 32 * k + 8 * i, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
                    }
                }
            }
            break;
        case TensorType::Q4_0:
            for (int j = 0; j < np; j++) {
                const uint8_t* b = rows[j];
                for (int k = 0; k < hd / 32; k++, b += 18) {
                    uint16_t dh;
                    __builtin_memcpy(&dh, b, 2);
                    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
                    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
                    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
                    const __m128i hi =
                        _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
                    float* out = tile + j * hd + 32 * k;
                    _mm256_store_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
                    _mm256_store_ps(out + 8,
                                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
                    _mm256_store_ps(out + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
                    _mm256_store_ps(out + 24,
                                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
                }
            }
            break;
        default: return false;
    }
    for (int j = np; j < (np + 7) / 8 * 8; j++)
        for (int i = 0; i < nv; i++) _mm256_store_ps(tile + j * hd + 8 * i, _mm256_setzero_ps());
    return true;
}

static inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }
static inline float scalar_f32(float v) { return v; }
static inline float scalar_f16(uint16_t h) { return _cvtsh_ss(h); }
// bfloat16 is the high half of a float: widen to 32 bits and shift left by 16.
static inline __m256 load8_bf16(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
static inline float scalar_bf16(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

// F32 / F16 / BF16 weights: four rows per pass share each load of the activations.
template <typename W, __m256 (*Load)(const W*), float (*Scalar)(W)>
static inline void rows4(const W* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                         int64_t r1) {
    int64_t r = r0;
    const int64_t cols8 = cols / 8 * 8;
    for (; r + 4 <= r1; r += 4) {
        const W* w0 = w + r * cols;
        for (int t = 0; t < n_tok; t++) {
            const float* xt = x + int64_t(t) * cols;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t i = 0; i < cols8; i += 8) {
                const __m256 xv = _mm256_loadu_ps(xt + i);
                a0 = _mm256_fmadd_ps(Load(w0 + i), xv, a0);
                a1 = _mm256_fmadd_ps(Load(w0 + cols + i), xv, a1);
                a2 = _mm256_fmadd_ps(Load(w0 + 2 * cols + i), xv, a2);
                a3 = _mm256_fmadd_ps(Load(w0 + 3 * cols + i), xv, a3);
            }
            // transpose-reduce the four accumulators into four sums
            const __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
            const __m256 h = _mm256_hadd_ps(h01, h23);
            const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            float o[4];
            _mm_storeu_ps(o, sum4);
            for (int64_t i = cols8; i < cols; i++)  // column remainder (rows whose length is not a multiple of 8)
                for (int j = 0; j < 4; j++) o[j] += Scalar(w0[j * cols + i]) * xt[i];
            for (int j = 0; j < 4; j++) y[int64_t(t) * ldy + r + j] = o[j];
        }
    }
    for (; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            const W* wr = w + r * cols;
            const float* xt = x + int64_t(t) * cols;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t i = 0; i < cols8; i += 8) acc = _mm256_fmadd_ps(Load(wr + i), _mm256_loadu_ps(xt + i), acc);
            float s = hsum(acc);
            for (int64_t i = cols8; i < cols; i++) s += Scalar(wr[i]) * xt[i];
            y[int64_t(t) * ldy + r] = s;
        }
}

void matmul_f32_rows(const float* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
    rows4<float, load_f32, scalar_f32>(w, cols, x, n_tok, y, ldy, r0, r1);
}

void matmul_f16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
    rows4<uint16_t, load8_f16, scalar_f16>(w, cols, x, n_tok, y, ldy, r0, r1);
}

void matmul_bf16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                      int64_t r1) {
    rows4<uint16_t, load8_bf16, scalar_bf16>(w, cols, x, n_tok, y, ldy, r0, r1);
}

// Streaming sum for the bandwidth probe: four independent accumulators, software prefetch 4 KiB ahead into L1
// and 16 KiB ahead into L2 for every line (the best of the variants tried on the development machine).
uint64_t stream_sum(const uint64_t* p, size_t n) {
#if defined(__AVX512F__)  // 512-bit loads where the level has them (measured faster on Zen 4)
    __m512i b0 = _mm512_setzero_si512(), b1 = b0, b2 = b0, b3 = b0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        const char* c = reinterpret_cast<const char*>(p + i);
        for (int o = 0; o < 256; o += 64) {
            _mm_prefetch(c + 4096 + o, _MM_HINT_T0);
            _mm_prefetch(c + 16384 + o, _MM_HINT_T1);
        }
        b0 = _mm512_add_epi64(b0, _mm512_load_si512(p + i));
        b1 = _mm512_add_epi64(b1, _mm512_load_si512(p + i + 8));
        b2 = _mm512_add_epi64(b2, _mm512_load_si512(p + i + 16));
        b3 = _mm512_add_epi64(b3, _mm512_load_si512(p + i + 24));
    }
    alignas(64) uint64_t t[8];
    _mm512_store_si512(t, _mm512_add_epi64(_mm512_add_epi64(b0, b1), _mm512_add_epi64(b2, b3)));
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
#else
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        const char* c = reinterpret_cast<const char*>(p + i);
        for (int o = 0; o < 128; o += 64) {
            _mm_prefetch(c + 4096 + o, _MM_HINT_T0);
            _mm_prefetch(c + 16384 + o, _MM_HINT_T1);
        }
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(t), a0);
    return t[0] + t[1] + t[2] + t[3];
#endif
}

// The compute probe (contract: backend/cpu/isa.h). Eight independent accumulators hide the instructions' latency.
uint64_t probe_mac_i8(int64_t iters, uint64_t* sink) {
#if defined(__AVX512F__)
    __m512i acc[16];  // 32 registers: 16 chains cover two ports' latency
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (int j = 0; j < 16; j++) acc[j] = _mm512_set1_epi32(j);
    for (int64_t i = 0; i < iters; i++) {
        for (int j = 0; j < 16; j++) {
#if defined(__AVX512VNNI__)
            acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
#else
            acc[j] = _mm512_add_epi32(acc[j], _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1)));
#endif
        }
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));
    }
    __m512i s = acc[0];
    for (int j = 1; j < 16; j++) s = _mm512_add_epi32(s, acc[j]);
    *sink = uint64_t(_mm512_reduce_add_epi32(s));
    return uint64_t(iters) * 16 * 64;
#else
    __m256i acc[8];
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    for (int j = 0; j < 8; j++) acc[j] = _mm256_set1_epi32(j);
    for (int64_t i = 0; i < iters; i++) {
        for (int j = 0; j < 8; j++) {
#if defined(__AVXVNNI__)
            acc[j] = _mm256_dpbusd_avx_epi32(acc[j], a, b);
#else
            acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
#endif
        }
        __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]));
    }
    __m256i s = acc[0];
    for (int j = 1; j < 8; j++) s = _mm256_add_epi32(s, acc[j]);
    alignas(32) int32_t l[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(l), s);
    *sink = uint64_t(l[0] + l[7]);
    return uint64_t(iters) * 8 * 32;
#endif
}

uint64_t probe_mac_f32(int64_t iters, uint64_t* sink) {
#if defined(__AVX512F__)
    __m512 acc[16];
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (int j = 0; j < 16; j++) acc[j] = _mm512_set1_ps(float(j));
    for (int64_t i = 0; i < iters; i++) {
        for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));
    }
    __m512 s = acc[0];
    for (int j = 1; j < 16; j++) s = _mm512_add_ps(s, acc[j]);
    *sink = uint64_t(_mm512_reduce_add_ps(s));
    return uint64_t(iters) * 16 * 16;
#else
    __m256 acc[10];
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (int j = 0; j < 10; j++) acc[j] = _mm256_set1_ps(float(j));
    for (int64_t i = 0; i < iters; i++) {
        for (int j = 0; j < 10; j++) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
        __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]));
    }
    __m256 s = acc[0];
    for (int j = 1; j < 10; j++) s = _mm256_add_ps(s, acc[j]);
    *sink = uint64_t(hsum(s));
    return uint64_t(iters) * 10 * 8;
#endif
}

}  // namespace tandem::TD_ISA
