// Flash-style attention of a forward pass over the KV cache (quantized or not): tiled over the cache with an
// online softmax, no score buffer of the context's size, threads over (rows, key/value head) pairs and, when
// those are few (one token decoding at depth), over chunks of the cache too (split-K).
//
// The rows of one segment (a session's tokens in this pass) are taken in blocks that share each tile of the
// cache: a tile is converted once for every query of the block (all grouped-query heads of all its rows), so a
// verification pass of k drafted tokens reads the cache once, not k times. Values become floats; keys too, except
// Q8_0 and Q4_0 keys at the levels with integer dot products (scores_in_integers), which stay integers and are
// scored against the 8-bit form of each query. A token tree's rows share
// the cached prefix the same way; only the tile holding the tree itself is read per node (its ancestors).
//
// Exactness: a query's result is a function of the keys and values it sees, in position order, and nothing
// else. Tiles are aligned at positions that are multiples of kAttnTile (backend/cpu/isa.h) and chunks at multiples of
// kAttnChunk, counted in positions (a tree node's ancestors at positions pos0 + depth, wherever their slots
// are), every chunk starts a fresh softmax state and the chunk states are merged in order whether the chunks
// ran in one task or many. So one token at a time, a verification batch, a token tree (after its accepted
// path is moved into place) and any thread count give bit-identical results.
#pragma once
#include <cstdint>
#include <vector>

#include "tandem/tensor_type.h"

namespace tandem {

class ThreadPool;

constexpr int kAttnChunk = 1024;  // positions per split-K chunk (a multiple of kAttnTile)

// One layer's rows of one session's cache as attention reads them (model/kv_cache.h KvCache::rows): keys and values
// of types tk / tv, rk / rv bytes a row, hk / hv bytes a KV head; slot s at row s % capacity (a ring) or s.
struct KvRows {
    const uint8_t* k = nullptr;
    const uint8_t* v = nullptr;
    size_t rk = 0, rv = 0, hk = 0, hv = 0;
    int capacity = 0;
    TensorType tk = TensorType::F32, tv = TensorType::F32;
    const uint8_t* krow(int s) const { return k + size_t(s < capacity ? s : s % capacity) * rk; }
    const uint8_t* vrow(int s) const { return v + size_t(s < capacity ? s : s % capacity) * rv; }
};

namespace backend {
struct Tensor;
}
// The rows of a layer's key and value tensors of the CPU backend (backend/cpu/cpu_backend.cpp), n_head_kv heads a row.
KvRows kv_rows(const backend::Tensor& k, const backend::Tensor& v, int n_head_kv);

// One query row: a token of the pass.
struct AttnRow {
    KvRows kv;  // its session's cache rows of the layer (those of the pass already stored)
    int pos;  // its position; it sees positions lo..pos
    int lo;  // the first position it sees: 0, or the first of a sliding window
    int pos0;  // the first position of its segment; every position below is the cache slot of that number
    // null: a chain, position v is slot v. A token-tree node: tail[v - pos0] is the slot of its ancestor at
    // position v for v in [pos0, pos] (root first, itself last).
    const int32_t* tail;
};

struct AttnShape {
    int n_head, n_head_kv, head_dim;  // n_head % n_head_kv == 0, n_head / n_head_kv <= 64, head_dim <= 576
    float scale;  // applied to q . k
    const float* sinks;  // (n_head) attention-sink logits added to each head's softmax denominator; null: none
};

// out (n, n_head * head_dim) = attention of q (n, n_head * head_dim) for rows[0..n). Rows of one segment are
// adjacent and share their cache and pos0. `scratch` is reused between calls (split-K partial states).
void attention(ThreadPool& pool, const AttnShape& shape, const std::vector<AttnRow>& rows, const float* q, float* out,
               std::vector<float>& scratch);

// Whether attention scores keys of this type in integers at the active level (Q8_0 and Q4_0 caches where the level
// has attn_tile_i8): each query vector is then quantized to 8 bits per 32 values, as llama.cpp's flash attention
// does for such caches, and q . k is an exact integer dot product times the two scales.
bool scores_in_integers(TensorType type_k, int head_dim);

// The same, one row and one head at a time in double precision over the dequantized cache, two passes (max,
// then sum), with the query the level scores (quantized where scores_in_integers): what the tiled attention is
// tested against.
void attention_ref(const AttnShape& shape, const std::vector<AttnRow>& rows, const float* q, float* out);

}  // namespace tandem
