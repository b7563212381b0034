#include "quant/kernels.h"

#include <algorithm>
#include <cmath>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <vector>

#include "tandem/thread_pool.h"
#include "core/fp16.h"
#include "quant/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"

namespace tandem {

#if defined(__x86_64__)
namespace avx2 {
void attention_heads(const float* q, int m, const uint16_t* k, const uint16_t* v, size_t stride, int n_pos, int hd,
                     float scale, float* scores, float* out);
void matmul_f32_rows(const float* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0, int64_t r1);
void matmul_f16_rows(const uint16_t* w, int64_t cols, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0, int64_t r1);
float dot_f32(const float* a, const float* b, int64_t n);
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float w, const uint16_t* x, float* y, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n);
}  // namespace avx2
#endif

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = [] {
        CpuFeatures c;
#if defined(__x86_64__)
        // CPUID leaf 1: ECX.FMA[12], ECX.OSXSAVE[27], ECX.F16C[29]; leaf 7: EBX.AVX2[5], AVX512F[16], AVX512BW[30].
        // XGETBV(0) tells whether the OS saves the YMM (bits 1,2) and ZMM (bits 5,6,7) state.
        unsigned a, b, cx, d;
        if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
        const bool fma = cx & (1u << 12), osxsave = cx & (1u << 27), f16c = cx & (1u << 29);
        if (!osxsave) return c;
        unsigned xlo, xhi;
        __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
        const bool ymm = (xlo & 0x6) == 0x6, zmm = (xlo & 0xE6) == 0xE6;
        if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return c;
        c.avx2 = ymm && fma && f16c && (b & (1u << 5));
        c.avx512 = c.avx2 && zmm && (b & (1u << 16)) && (b & (1u << 30));
        c.avx512vnni = c.avx512 && (b & (1u << 31)) && (cx & (1u << 11));  // + AVX512VL, AVX512_VNNI
#endif
        return c;
    }();
    return f;
}

float dot_f32(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
    if (cpu_features().avx2) return avx2::dot_f32(a, b, n);
#endif
    return dot_f32_ref(a, b, n);
}

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
#if defined(__x86_64__)
    if (cpu_features().avx2) return avx2::dot_f32_f16(a, b, n);
#endif
    return dot_f32_f16_ref(a, b, n);
}

void axpy_f16(float w, const uint16_t* x, float* y, int64_t n) {
#if defined(__x86_64__)
    if (cpu_features().avx2) return avx2::axpy_f16(w, x, y, n);
#endif
    axpy_f16_ref(w, x, y, n);
}

void silu_mul(float* gate, const float* up, int64_t n) {
#if defined(__x86_64__)
    if (cpu_features().avx2) return avx2::silu_mul(gate, up, n);
#endif
    silu_mul_ref(gate, up, n);
}

void silu_mul_ref(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void attention_heads(const float* q, int m, const uint16_t* k, const uint16_t* v, size_t stride, int n_pos, int hd,
                     float scale, float* scores, float* out) {
    TD_ASSERT(m >= 1 && m <= 64);
#if defined(__x86_64__)
    if (cpu_features().avx2 && hd % 8 == 0 && hd <= 256) return avx2::attention_heads(q, m, k, v, stride, n_pos, hd, scale, scores, out);
#endif
    attention_heads_ref(q, m, k, v, stride, n_pos, hd, scale, scores, out);
}

void attention_heads_ref(const float* q, int m, const uint16_t* k, const uint16_t* v, size_t stride, int n_pos, int hd,
                         float scale, float* scores, float* out) {
    for (int r = 0; r < m; r++) {
        const float* qr = q + size_t(r) * size_t(hd);
        float* o = out + size_t(r) * size_t(hd);
        float mx = -INFINITY;
        for (int p = 0; p < n_pos; p++) {
            scores[p] = dot_f32_f16_ref(qr, k + size_t(p) * stride, hd) * scale;
            mx = std::max(mx, scores[p]);
        }
        double sum = 0;
        for (int p = 0; p < n_pos; p++) {
            scores[p] = std::exp(scores[p] - mx);
            sum += scores[p];
        }
        const float inv = float(1.0 / sum);
        std::fill(o, o + hd, 0.0f);
        for (int p = 0; p < n_pos; p++) axpy_f16_ref(scores[p] * inv, v + size_t(p) * stride, o, hd);
    }
}

float dot_f32_ref(const float* a, const float* b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

float dot_f32_f16_ref(const float* a, const uint16_t* b, int64_t n) {
    const float* tab = fp16_table();
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * tab[b[i + l]];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * tab[b[i]];
    return s;
}

void axpy_f16_ref(float w, const uint16_t* x, float* y, int64_t n) {
    const float* tab = fp16_table();
    for (int64_t i = 0; i < n; i++) y[i] += w * tab[x[i]];
}

void matmul_rows_ref(const WeightView& w, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0,
                     int64_t r1, float* scratch) {
    for (int64_t r = r0; r < r1; r++) {
        const float* row;
        if (w.type == TensorType::F32) {
            row = reinterpret_cast<const float*>(w.row(r));
        } else {
            dequantize_row_ref(w.type, w.row(r), scratch, w.cols);
            row = scratch;
        }
        for (int t = 0; t < n_tok; t++) y[int64_t(t) * ldy + r] = dot_f32(row, x + int64_t(t) * w.cols, w.cols);
    }
}

namespace {

// The activations of one matmul, quantized into the calling thread's own buffer (rows shared among the pool's
// threads when there are several). The workers use the returned reference: a thread_local named inside their
// lambda would be each worker's own (empty) instance.
const ActQ8& quantized_activations(ThreadPool& pool, const float* x, int n_tok, int64_t cols, int group) {
    thread_local ActQ8 act;
    quantize_act_q8_prepare(n_tok, cols, act);
    if (n_tok < 4) {
        quantize_act_q8_rows(x, cols, group, act, 0, n_tok);
    } else {
        ActQ8& out = act;
        pool.parallel_for(size_t(n_tok), [&](size_t b, size_t e, int) { quantize_act_q8_rows(x, cols, group, out, int(b), int(e)); });
    }
    return act;
}

#if defined(__x86_64__)
// Packed matrices sharing an input (all of one type, rows % kPackedRows == 0, count <= 8): one quantization of
// the activations and one pass of the pool, whose work items are chunks of 16 rows over the matrices laid end to
// end.
void matmul_packed_many(ThreadPool& pool, const WeightView* ws, float* const* ys, int count, const float* x, int n_tok) {
    constexpr int64_t chunk = 16;
    TD_ASSERT(count >= 1 && count <= 8);
    int64_t first[9] = {0};  // first chunk of each matrix (no allocation: this runs for every matmul of every token)
    for (int i = 0; i < count; i++) first[i + 1] = first[i] + ws[i].rows / chunk;
    const ActQ8& act = quantized_activations(pool, x, n_tok, ws[0].cols, packed_act_group(ws[0].type));
    pool.parallel_for(size_t(first[count]), [&](size_t b, size_t e, int) {
        for (int i = 0; i < count; i++) {
            const int64_t lo = std::max<int64_t>(int64_t(b), first[i]), hi = std::min<int64_t>(int64_t(e), first[i + 1]);
            if (lo < hi)
                matmul_packed_vnni(ws[i].type, ws[i].packed, ws[i].cols, act, ys[i], ws[i].rows, (lo - first[i]) * chunk,
                                   (hi - first[i]) * chunk);
        }
    });
}
#endif

}  // namespace

void matmul(ThreadPool& pool, const WeightView& w, const float* x, int n_tok, float* y) {
    // Rows are split in chunks of 16 so each thread gets whole cache lines of output.
    const int64_t chunk = 16;
    const int64_t n_chunks = (w.rows + chunk - 1) / chunk;
    auto rows_of = [&](size_t b, size_t e) {
        return std::make_pair(int64_t(b) * chunk, std::min<int64_t>(w.rows, int64_t(e) * chunk));
    };
#if defined(__x86_64__)
    if (w.packed && cpu_features().avx512vnni) return matmul_packed_many(pool, &w, &y, 1, x, n_tok);
    if (cpu_features().avx2 && matmul_q8_supported(w.type)) {
        const ActQ8& act = quantized_activations(pool, x, n_tok, w.cols, 32);
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            auto [r0, r1] = rows_of(b, e);
            if (cpu_features().avx512vnni) matmul_q8_rows_vnni(w, act, y, w.rows, r0, r1);
            else matmul_q8_rows_avx2(w, act, y, w.rows, r0, r1);
        });
        return;
    }
#endif
#if defined(__x86_64__)
    if (cpu_features().avx2 && matmul_kq_supported(w.type)) {
        const ActQ8& act = quantized_activations(pool, x, n_tok, w.cols, 256);  // one scale per 256, as llama.cpp's Q8_K
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            thread_local UnpackedRow row;
            auto [r0, r1] = rows_of(b, e);
            for (int64_t r = r0; r < r1; r++) {
                unpack_kq_row_avx2(w.type, w.row(r), w.cols, row);
                for (int t = 0; t < n_tok; t++) y[int64_t(t) * w.rows + r] = dot_unpacked_avx2(row, act, t);
            }
        });
        return;
    }
    if (cpu_features().avx2 && (w.type == TensorType::F32 || w.type == TensorType::F16)) {
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            auto [r0, r1] = rows_of(b, e);
            if (w.type == TensorType::F32)
                avx2::matmul_f32_rows(reinterpret_cast<const float*>(w.data), w.cols, x, n_tok, y, w.rows, r0, r1);
            else
                avx2::matmul_f16_rows(reinterpret_cast<const uint16_t*>(w.data), w.cols, x, n_tok, y, w.rows, r0, r1);
        });
        return;
    }
#endif
    pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
        thread_local std::vector<float> tl_scratch;
        if (tl_scratch.size() < size_t(w.cols)) tl_scratch.resize(size_t(w.cols));
        auto [r0, r1] = rows_of(b, e);
        matmul_rows_ref(w, x, n_tok, y, w.rows, r0, r1, tl_scratch.data());
    });
}

void matmul_shared_input(ThreadPool& pool, const WeightView* ws, float* const* ys, int count, const float* x, int n_tok) {
    bool fused = count > 0;
#if defined(__x86_64__)
    fused = fused && count <= 8 && cpu_features().avx512vnni;
    for (int i = 0; i < count; i++)
        fused = fused && ws[i].packed && ws[i].type == ws[0].type && ws[i].cols == ws[0].cols && ws[i].rows % kPackedRows == 0;
#else
    fused = false;
#endif
    if (!fused) {
        for (int i = 0; i < count; i++) matmul(pool, ws[i], x, n_tok, ys[i]);
        return;
    }
#if defined(__x86_64__)
    matmul_packed_many(pool, ws, ys, count, x, n_tok);
#endif
}

}  // namespace tandem
