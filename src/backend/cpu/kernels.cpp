#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "backend/cpu/isa.h"
#include "quant/blocks.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/thread_pool.h"

namespace tandem {

float dot_f32(const float* a, const float* b, int64_t n) { return isa().dot_f32(a, b, n); }
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) { return isa().dot_f32_f16(a, b, n); }
void axpy_f16(float w, const uint16_t* x, float* y, int64_t n) { isa().axpy_f16(w, x, y, n); }
void silu_mul(float* gate, const float* up, int64_t n) { isa().silu_mul(gate, up, n); }
void delta_rule(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                float beta, int S, float* o) {
    if (S % 8 != 0) return delta_rule_ref(m_in, m_out, q, k, v, decay, beta, S, o);
    isa().delta_rule(m_in, m_out, q, k, v, decay, beta, S, o);
}

void silu_mul_ref(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void kv_tile_f32(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile) {
    TD_ASSERT(np >= 0 && np <= kAttnTile);
    const auto fn = isa().kv_tile_f32;
    if (!fn || !fn(t, rows, np, hd, tile)) kv_tile_f32_ref(t, rows, np, hd, tile);
}

void kv_tile_f32_ref(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile) {
    for (int j = 0; j < np; j++) dequantize_row_ref(t, rows[j], tile + size_t(j) * size_t(hd), hd);
    std::fill(tile + size_t(np) * size_t(hd), tile + size_t((np + 7) / 8 * 8) * size_t(hd), 0.0f);
}

void attn_tile(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
               const float* vt, int hd, float scale, float* mx, float* l, float* o) {
    if (hd % 8 == 0 && hd <= 256)
        return isa().attn_tile(q, q_stride, n_rows, group, masks, kt, vt, hd, scale, mx, l, o);
    attn_tile_ref(q, q_stride, n_rows, group, masks, kt, vt, hd, scale, mx, l, o);
}

namespace {

// The online-softmax and value step of attn_tile_ref for one query, given its scores s of the visible positions.
void online_step_ref(const float* s, uint32_t mask, const float* vt, int hd, float& mxq, float& lq, float* oq) {
    float tmax = -INFINITY;
    for (int j = 0; j < kAttnTile; j++)
        if (mask >> j & 1) tmax = std::max(tmax, s[j]);
    const float m1 = std::max(mxq, tmax);
    const float c = std::exp(mxq - m1);  // 0 before any position (mx = -inf)
    float sum = 0;
    for (int d = 0; d < hd; d++) oq[d] *= c;
    for (int j = 0; j < kAttnTile; j++) {
        if (!(mask >> j & 1)) continue;
        const float p = std::exp(s[j] - m1);
        sum += p;
        const float* vj = vt + size_t(j) * size_t(hd);
        for (int d = 0; d < hd; d++) oq[d] += p * vj[d];
    }
    lq = lq * c + sum;
    mxq = m1;
}

}  // namespace

void attn_tile_ref(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
                   const float* vt, int hd, float scale, float* mx, float* l, float* o) {
    float s[kAttnTile];
    for (int r = 0; r < n_rows; r++) {
        const uint32_t mask = masks[r];
        if (!mask) continue;
        for (int i = 0; i < group; i++) {
            const int qi = r * group + i;
            const float* qr = q + size_t(r) * q_stride + size_t(i) * size_t(hd);
            for (int j = 0; j < kAttnTile; j++)
                if (mask >> j & 1) s[j] = dot_f32_ref(qr, kt + size_t(j) * size_t(hd), hd) * scale;
            online_step_ref(s, mask, vt, hd, mx[qi], l[qi], o + size_t(qi) * size_t(hd));
        }
    }
}

bool kv_tile_i8(TensorType t, const uint8_t* const* rows, int np, int hd, uint8_t* kt, float* kd) {
    if ((t != TensorType::Q8_0 && t != TensorType::Q4_0) || hd % 32 != 0) return false;
    TD_ASSERT(np >= 0 && np <= kAttnTile);
    const int nb = hd / 32, np8 = (np + 7) / 8 * 8;
    for (int j = 0; j < np8; j++) {
        uint8_t* k = kt + size_t(j) * size_t(hd);
        for (int b = 0; b < nb; b++) {
            uint8_t* kb = k + 32 * b;
            if (j >= np) {
                std::fill(kb, kb + 32, uint8_t(128));
                kd[b * kAttnTile + j] = 0;
            } else if (t == TensorType::Q8_0) {
                const auto* blk = reinterpret_cast<const block_q8_0*>(rows[j]) + b;
                for (int i = 0; i < 32; i++) kb[i] = uint8_t(uint8_t(blk->qs[i]) ^ 0x80);  // k + 128
                kd[b * kAttnTile + j] = fp16_to_f32(blk->d);
            } else {
                const auto* blk = reinterpret_cast<const block_q4_0*>(rows[j]) + b;
                for (int i = 0; i < 16; i++) {
                    kb[i] = uint8_t((blk->qs[i] & 0x0F) + 120);  // (nibble - 8) + 128
                    kb[i + 16] = uint8_t((blk->qs[i] >> 4) + 120);
                }
                kd[b * kAttnTile + j] = fp16_to_f32(blk->d);
            }
        }
    }
    return true;
}

void quantize_query_i8(const float* x, int hd, int8_t* qs, float* qd, int32_t* qc) {
    for (int b = 0; b < hd / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = std::max(amax, std::fabs(x[32 * b + i]));
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            qs[32 * b + i] = int8_t(std::lround(x[32 * b + i] * id));
            sum += qs[32 * b + i];
        }
        qd[b] = d;
        qc[b] = 128 * sum;
    }
}

void attn_tile_i8_ref(const int8_t* qs, const float* qd, const int32_t* qc, size_t q_stride, int n_rows, int group,
                      const uint32_t* masks, const uint8_t* kt, const float* kd, const float* vt, int hd, float scale,
                      float* mx, float* l, float* o) {
    float s[kAttnTile];
    const int nb = hd / 32;
    for (int r = 0; r < n_rows; r++) {
        const uint32_t mask = masks[r];
        if (!mask) continue;
        for (int i = 0; i < group; i++) {
            const int qi = r * group + i;
            const size_t at = size_t(r) * q_stride + size_t(i) * size_t(hd);
            for (int j = 0; j < kAttnTile; j++) {
                if (!(mask >> j & 1)) continue;
                const uint8_t* kj = kt + size_t(j) * size_t(hd);
                float acc = 0;
                for (int b = 0; b < nb; b++) {
                    int32_t dot = 0;
                    for (int e = 0; e < 32; e++) dot += int32_t(kj[32 * b + e]) * qs[at + size_t(32 * b + e)];
                    acc += kd[b * kAttnTile + j] * qd[at / 32 + size_t(b)] * float(dot - qc[at / 32 + size_t(b)]);
                }
                s[j] = acc * scale;
            }
            online_step_ref(s, mask, vt, hd, mx[qi], l[qi], o + size_t(qi) * size_t(hd));
        }
    }
}

void delta_rule_ref(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                    float beta, int S, float* o) {
    const float scale = 1.0f / std::sqrt(float(S));
    for (int j = 0; j < S; j++) {
        const float* mi = m_in + size_t(j) * size_t(S);
        float* mo = m_out + size_t(j) * size_t(S);
        float sk = 0;
        for (int i = 0; i < S; i++) {
            mo[i] = mi[i] * decay;
            sk += mo[i] * k[i];
        }
        const float d = (v[j] - sk) * beta;
        float sq = 0;
        for (int i = 0; i < S; i++) {
            mo[i] += d * k[i];
            sq += mo[i] * q[i];
        }
        o[j] = sq * scale;
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

void matmul_rows_ref(const WeightView& w, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0, int64_t r1,
                     float* scratch) {
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
ActRows quantized_activations(ThreadPool& pool, const float* x, int n_tok, int64_t cols, int group) {
    thread_local ActQ8 act;
    quantize_act_q8_prepare(n_tok, cols, act);
    if (n_tok < 4) {
        quantize_act_q8_rows(x, cols, group, act, 0, n_tok);
    } else {
        ActQ8& out = act;
        pool.parallel_for(size_t(n_tok),
                          [&](size_t b, size_t e, int) { quantize_act_q8_rows(x, cols, group, out, int(b), int(e)); });
    }
    return act;
}

// Packed matrices sharing an input (all of one type, rows % kPackedRows == 0, count <= 8): one quantization of
// the activations and one pass of the pool, whose work items are chunks of 16 rows over the matrices laid end to
// end.
void matmul_packed_many(ThreadPool& pool, const WeightView* ws, float* const* ys, int count, const float* x,
                        int n_tok) {
    constexpr int64_t chunk = 16;
    TD_ASSERT(count >= 1 && count <= 8);
    int64_t first[9] = {0};  // first chunk of each matrix (no allocation: this runs for every matmul of every token)
    for (int i = 0; i < count; i++) first[i + 1] = first[i] + ws[i].rows / chunk;
    const ActRows act = quantized_activations(pool, x, n_tok, ws[0].cols, packed_act_group(ws[0].type));
    const auto kernel = isa().matmul_packed;
    pool.parallel_for(size_t(first[count]), [&](size_t b, size_t e, int) {
        for (int i = 0; i < count; i++) {
            const int64_t lo = std::max<int64_t>(int64_t(b), first[i]),
                          hi = std::min<int64_t>(int64_t(e), first[i + 1]);
            if (lo < hi)
                kernel(ws[i].type, ws[i].packed, ws[i].cols, act, ys[i], ws[i].rows, (lo - first[i]) * chunk,
                       (hi - first[i]) * chunk);
        }
    });
}

}  // namespace

void matmul(ThreadPool& pool, const WeightView& w, const float* x, int n_tok, float* y) {
    // Rows are split in chunks of 16 so each thread gets whole cache lines of output.
    const int64_t chunk = 16;
    const int64_t n_chunks = (w.rows + chunk - 1) / chunk;
    auto rows_of = [&](size_t b, size_t e) {
        return std::make_pair(int64_t(b) * chunk, std::min<int64_t>(w.rows, int64_t(e) * chunk));
    };
    const IsaKernels& k = isa();
    if (w.packed && k.matmul_packed) return matmul_packed_many(pool, &w, &y, 1, x, n_tok);
    if (k.matmul_q8_rows && matmul_q8_supported(w.type)) {
        const ActRows act = quantized_activations(pool, x, n_tok, w.cols, 32);
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            auto [r0, r1] = rows_of(b, e);
            k.matmul_q8_rows(w.type, w.data, w.row_stride, w.cols, act, y, w.rows, r0, r1);
        });
        return;
    }
    if (k.unpack_kq_row && k.dot_unpacked && matmul_kq_supported(w.type)) {
        const ActRows act =
            quantized_activations(pool, x, n_tok, w.cols, 256);  // one scale per 256, as llama.cpp's Q8_K
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            thread_local UnpackedRow row;
            row.resize(w.cols);
            auto [r0, r1] = rows_of(b, e);
            for (int64_t r = r0; r < r1; r++) {
                k.unpack_kq_row(w.type, w.row(r), w.cols, row.q.data(), row.lane_scale.data(), row.offset.data());
                for (int t = 0; t < n_tok; t++)
                    y[int64_t(t) * w.rows + r] =
                        k.dot_unpacked(row.q.data(), row.lane_scale.data(), row.offset.data(), act, t);
            }
        });
        return;
    }
    if (w.type == TensorType::F32 && k.matmul_f32_rows) {
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            auto [r0, r1] = rows_of(b, e);
            k.matmul_f32_rows(reinterpret_cast<const float*>(w.data), w.cols, x, n_tok, y, w.rows, r0, r1);
        });
        return;
    }
    const auto half_rows = w.type == TensorType::F16    ? k.matmul_f16_rows
                           : w.type == TensorType::BF16 ? k.matmul_bf16_rows
                                                        : nullptr;
    if (half_rows) {
        pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
            auto [r0, r1] = rows_of(b, e);
            half_rows(reinterpret_cast<const uint16_t*>(w.data), w.cols, x, n_tok, y, w.rows, r0, r1);
        });
        return;
    }
    pool.parallel_for(size_t(n_chunks), [&](size_t b, size_t e, int) {
        thread_local std::vector<float> tl_scratch;
        if (tl_scratch.size() < size_t(w.cols)) tl_scratch.resize(size_t(w.cols));
        auto [r0, r1] = rows_of(b, e);
        matmul_rows_ref(w, x, n_tok, y, w.rows, r0, r1, tl_scratch.data());
    });
}

void matmul_jobs(ThreadPool& pool, const MatmulJob* jobs, int count) {
    if (count <= 0) return;
    const auto kernel = isa().matmul_packed;
    bool grouped = kernel != nullptr;
    for (int i = 0; i < count && grouped; i++)
        grouped = jobs[i].w.packed && jobs[i].w.type == jobs[0].w.type && jobs[i].w.cols == jobs[0].w.cols &&
                  jobs[i].w.rows % kPackedRows == 0 && jobs[i].n_tok >= 1;
    if (!grouped) {
        for (int i = 0; i < count; i++) matmul(pool, jobs[i].w, jobs[i].x, jobs[i].n_tok, jobs[i].y);
        return;
    }
    const int64_t cols = jobs[0].w.cols;
    const int group = packed_act_group(jobs[0].w.type);
    // Distinct inputs, each quantized once; all their rows in one pass of the pool.
    thread_local std::vector<ActQ8> acts;
    std::vector<int> input_of(static_cast<size_t>(count));
    std::vector<int> first_job;  // a job of each distinct input
    for (int i = 0; i < count; i++) {
        int found = -1;
        for (size_t u = 0; u < first_job.size(); u++)
            if (jobs[first_job[u]].x == jobs[i].x && jobs[first_job[u]].n_tok == jobs[i].n_tok) found = int(u);
        if (found < 0) {
            found = int(first_job.size());
            first_job.push_back(i);
        }
        input_of[size_t(i)] = found;
    }
    if (acts.size() < first_job.size()) acts.resize(first_job.size());
    std::vector<int> row0(first_job.size() + 1, 0);
    for (size_t u = 0; u < first_job.size(); u++) {
        quantize_act_q8_prepare(jobs[first_job[u]].n_tok, cols, acts[u]);
        row0[u + 1] = row0[u] + jobs[first_job[u]].n_tok;
    }
    std::vector<ActQ8>& A = acts;
    auto quantize = [&](size_t b, size_t e) {
        for (size_t u = 0; u < first_job.size(); u++) {
            const int lo = std::max(int(b), row0[u]), hi = std::min(int(e), row0[u + 1]);
            if (lo < hi) quantize_act_q8_rows(jobs[first_job[u]].x, cols, group, A[u], lo - row0[u], hi - row0[u]);
        }
    };
    if (row0.back() < 4) quantize(0, size_t(row0.back()));
    else pool.parallel_for(size_t(row0.back()), [&](size_t b, size_t e, int) { quantize(b, e); });
    std::vector<ActRows> views(first_job.size());
    for (size_t u = 0; u < first_job.size(); u++) views[u] = A[u];
    // Chunks of 16 rows over all jobs.
    constexpr int64_t chunk = 16;
    std::vector<int64_t> first(static_cast<size_t>(count) + 1, 0);
    for (int i = 0; i < count; i++) first[size_t(i) + 1] = first[size_t(i)] + jobs[i].w.rows / chunk;
    pool.parallel_for(size_t(first.back()), [&](size_t b, size_t e, int) {
        for (int i = 0; i < count; i++) {
            const int64_t lo = std::max<int64_t>(int64_t(b), first[size_t(i)]),
                          hi = std::min<int64_t>(int64_t(e), first[size_t(i) + 1]);
            if (lo < hi)
                kernel(jobs[i].w.type, jobs[i].w.packed, cols, views[size_t(input_of[size_t(i)])], jobs[i].y,
                       jobs[i].w.rows, (lo - first[size_t(i)]) * chunk, (hi - first[size_t(i)]) * chunk);
        }
    });
}

void matmul_shared_input(ThreadPool& pool, const WeightView* ws, float* const* ys, int count, const float* x,
                         int n_tok) {
    bool fused = count > 0 && count <= 8 && isa().matmul_packed;
    for (int i = 0; i < count; i++)
        fused = fused && ws[i].packed && ws[i].type == ws[0].type && ws[i].cols == ws[0].cols &&
                ws[i].rows % kPackedRows == 0;
    if (!fused) {
        for (int i = 0; i < count; i++) matmul(pool, ws[i], x, n_tok, ys[i]);
        return;
    }
    matmul_packed_many(pool, ws, ys, count, x, n_tok);
}

}  // namespace tandem
