// Compute kernels: what the model calls. Each dispatches to the active SIMD level's table (backend/cpu/isa.h); the
// scalar functions here are the reference every level's kernel is tested against.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.h"
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

// The gated delta rule of one value head over one row (Gated DeltaNet, model/delta_net.h): M_in -> M_out (S x S,
// row j for value dimension j; they may alias) and o (S), with q and k L2-normalised:
//   M = decay M_in;  d_j = (v_j - M_j . k) beta;  M_out_j = M_j + d_j k;  o_j = (M_out_j . q) / sqrt(S)
// The reference computes it as written. The SIMD levels read each row of M_in once: a = M_in_j . k and b = M_in_j . q
// in one pass, then d_j = (v_j - decay a) beta, M_out_j = decay M_in_j + d_j k and o_j = (decay b + d_j (k . q)) /
// sqrt(S): the same values up to float rounding (one read and one write of the state instead of three and two).
// A row's arithmetic depends only on its own inputs, so batches and one token at a time agree exactly.
// S % 8 == 0 at the SIMD levels (the wrapper takes the reference otherwise).
void delta_rule(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                float beta, int S, float* o);
void delta_rule_ref(const float* m_in, float* m_out, const float* q, const float* k, const float* v, float decay,
                    float beta, int S, float* o);

// Flash-style attention works on tiles of kAttnTile (backend/cpu/isa.h) cached positions of one key/value head
// (backend/cpu/attention.h).
// Converts np <= kAttnTile cached rows of one head (rows[j]: hd elements of type t, a whole number of blocks)
// into the float tile (kAttnTile, hd); tile rows np.. up to the next multiple of 8 are zeroed (the rest are
// not read: attn_tile reads only the groups of 8 positions that hold a visible one). Every conversion is exact (a block's scale
// times its integer), so every level gives the same tile.
void kv_tile_f32(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile);
void kv_tile_f32_ref(TensorType t, const uint8_t* const* rows, int np, int hd, float* tile);

// The online-softmax step of attention over one tile for n_rows * group query vectors: query qi = r * group + i
// is q + r * q_stride + i * hd (the group heads of row r that share this key/value head) and sees tile
// position j iff bit j of masks[r]. Its running state is mx[qi] (max score so far, -inf before any), l[qi]
// (sum of exp(score - mx)) and o[qi * hd ..] (unnormalized output): with s_j = scale * q . kt[j],
//   m' = max(mx, max_visible s_j), c = exp(mx - m'), l = c l + sum_visible exp(s_j - m'),
//   o = c o + sum_visible exp(s_j - m') vt[j]     (visible j in increasing order; a row with mask 0 is untouched)
// Only groups of 8 positions that hold a visible one are read (scores of the others are never computed).
// The arithmetic of a query depends only on its own visible positions and the tile contents, never on the
// other queries or masks: a batch, a tree and one token at a time give bit-identical results. hd % 8 == 0,
// hd <= 256 at the SIMD levels (the wrapper takes the reference otherwise).
void attn_tile(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
               const float* vt, int hd, float scale, float* mx, float* l, float* o);
void attn_tile_ref(const float* q, size_t q_stride, int n_rows, int group, const uint32_t* masks, const float* kt,
                   const float* vt, int hd, float scale, float* mx, float* l, float* o);

// Keys of an 8-bit integer form (Q8_0, Q4_0) scored with integer dot products, as llama.cpp's flash attention
// scores such a cache (its query goes through the key type's 8-bit quantization):
// - kv_tile_i8 (exact, every level alike): np <= kAttnTile cached rows of one head to kt (kAttnTile, hd), each
//   key integer offset to unsigned (k + 128), and kd (hd / 32, kAttnTile) the block scales; rows np.. up to the
//   next multiple of 8 are k = 0 with scale 0. False (nothing written) for another type or hd % 32 != 0.
// - quantize_query_i8: a query vector (hd % 32 == 0) in blocks of 32 as d = amax / 127, q = round(x / d), with
//   qd = d and qc = 128 * sum(q) per block (the offset's share of the dot product).
// - attn_tile_i8: attn_tile's step (same state, masks and order) with s_j = scale * sum over blocks b of
//   (kd[b][j] * qd[b]) * (sum_i kt[j][i] q_i - qc[b]), the integer part exact (= sum_i k_i q_i). Query
//   qi = r * group + i is qs + r * q_stride + i * hd, its qd and qc at (r * q_stride + i * hd) / 32 (q_stride % 32
//   == 0). hd % 32 == 0, hd <= 256. The SIMD levels with vpdpbusd have it (IsaKernels::attn_tile_i8); the others
//   score every cache in floats (attn_tile).
bool kv_tile_i8(TensorType t, const uint8_t* const* rows, int np, int hd, uint8_t* kt, float* kd);
void quantize_query_i8(const float* x, int hd, int8_t* qs, float* qd, int32_t* qc);
void attn_tile_i8_ref(const int8_t* qs, const float* qd, const int32_t* qc, size_t q_stride, int n_rows, int group,
                      const uint32_t* masks, const uint8_t* kt, const float* kd, const float* vt, int hd, float scale,
                      float* mx, float* l, float* o);

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
