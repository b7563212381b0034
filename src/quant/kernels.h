// Compute kernels: what the model calls. Each dispatches to the active SIMD level's table (cpu/isa.h); the
// scalar functions here are the reference every level's kernel is tested against.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tandem/tensor_type.h"

namespace tandem {

class ThreadPool;

// A 2-D weight matrix stored row-major in one of the tensor types, used in place from the file mapping.
struct WeightView {
    const uint8_t* data = nullptr;
    TensorType type = TensorType::F32;
    int64_t cols = 0;  // row length = input dimension (GGUF ne[0])
    int64_t rows = 0;  // number of rows = output dimension (GGUF ne[1])
    size_t row_stride = 0;  // bytes per row
    const uint8_t* packed = nullptr;  // optional repacked copy (quant/packed_layout.h); null: none
    const uint8_t* row(int64_t r) const { return data + size_t(r) * row_stride; }
};

// Dot product of n floats. Dispatches to SIMD; *_ref is the scalar reference (8-lane float accumulation).
float dot_f32(const float* a, const float* b, int64_t n);
float dot_f32_ref(const float* a, const float* b, int64_t n);

// Attention helpers over half-precision cache rows (reference: exact conversion, float accumulation).
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
float dot_f32_f16_ref(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float w, const uint16_t* x, float* y, int64_t n);  // y += w * x
void axpy_f16_ref(float w, const uint16_t* x, float* y, int64_t n);

// gate[i] = silu(gate[i]) * up[i] (the SwiGLU of the feed-forward block), silu(g) = g / (1 + exp(-g)).
void silu_mul(float* gate, const float* up, int64_t n);
void silu_mul_ref(float* gate, const float* up, int64_t n);

// Causal attention of m query heads that share one key/value head (grouped-query attention; m = 1 for
// plain multi-head attention) over n_pos cached positions, keys and values in half precision:
//   out[r] = sum_p softmax_p(scale * q[r] . k_p) v_p,   q, out: (m, hd) row-major;  k_p = k + row(p) * stride, v_p
// likewise, row(p) = p when rows is null, else rows[p] (n_pos entries: a token-tree node sees the prompt and its
// ancestors only, whose rows are not contiguous). The arithmetic does not depend on where the rows lie, so a
// gathered key set gives bit-identical results to the same keys stored contiguously.
// `scores` holds at least m * n_pos floats of scratch; m <= 64.
void attention_heads(const float* q, int m, const uint16_t* k, const uint16_t* v, size_t stride, const int32_t* rows,
                     int n_pos, int hd, float scale, float* scores, float* out);
void attention_heads_ref(const float* q, int m, const uint16_t* k, const uint16_t* v, size_t stride,
                         const int32_t* rows, int n_pos, int hd, float scale, float* scores, float* out);

// y[t * ldy + r] = dot(W.row(r), x[t * W.cols ...]) for t in [0, n_tok), r in [r0, r1).
// Generic path (any type): dequantize each row once, apply it to all n_tok inputs (so a verification batch
// streams the weights once). `scratch` holds at least W.cols floats.
void matmul_rows_ref(const WeightView& w, const float* x, int n_tok, float* y, int64_t ldy, int64_t r0, int64_t r1,
                     float* scratch);

// Multi-threaded matmul over all rows of W: y[n_tok][W.rows] = x[n_tok][W.cols] * W^T.
void matmul(ThreadPool& pool, const WeightView& w, const float* x, int n_tok, float* y);

// Several matrices applied to the same input (q/k/v, gate/up): ys[i] (n_tok, ws[i].rows) = x * ws[i]^T. When all
// are packed, the activations are quantized once and one pass of the pool covers every matrix (fewer
// fork-joins per token); otherwise one matmul each.
void matmul_shared_input(ThreadPool& pool, const WeightView* ws, float* const* ys, int count, const float* x,
                         int n_tok);

// Independent matmuls in one pass of the pool: jobs[i].y (n_tok, w.rows) = jobs[i].x (n_tok, w.cols) * w^T. Jobs with
// the same input pointer share one quantization of it. When every matrix is packed and of one type, the work
// items are chunks of 16 rows over all jobs laid end to end (one fork-join for all: the experts of an MoE layer);
// otherwise one matmul each.
struct MatmulJob {
    WeightView w;
    const float* x;
    int n_tok;
    float* y;
};
void matmul_jobs(ThreadPool& pool, const MatmulJob* jobs, int count);

}  // namespace tandem
