// A tensor split's share of the weights (tandem/split.h, --split-mode tensor): every rank runs every layer on a
// contiguous range of its KV heads (with their query heads) and of its FFN's hidden units, or of its experts.
//
//   attention: wq, wk, wv rows and bq, bk, bv, sinks of the rank's heads; wo's columns of those heads
//   dense FFN: w_gate, w_up rows and w_down's columns of the rank's hidden units
//   MoE:       the rank's experts (the router on every rank, so every rank routes alike; a shared expert on rank 0)
// The layer's attention output and FFN output on a rank are then partial sums, which Cluster::all_reduce adds (the
// forward pass, model/forward.cpp). What is not a sum over heads, units or experts (norms, biases added after the
// sum, RoPE, residuals) runs whole on every rank.
//
// Cuts: a quantized matrix's columns are cut at its blocks (Q4_K: 256 values), so a range of heads is a whole number
// of units of heads whose columns fill blocks, and the ranks' shares (-ts) are counted in those units. Column slices
// of quantized matrices are views with the file's row stride (the repacked copy keeps the slice only); F32/F16/BF16
// slices are copied (their kernels read rows back to back).
#include <algorithm>
#include <cstring>

#include "model/weight_view.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/split.h"
#include "tandem/strings.h"

namespace tandem {

namespace {

bool is_float_type(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

template <class T>
std::vector<T> slice_vec(const std::vector<T>& v, size_t first, size_t n) {
    if (v.empty()) return v;
    TD_ASSERT(first + n <= v.size());
    return std::vector<T>(v.begin() + std::ptrdiff_t(first), v.begin() + std::ptrdiff_t(first + n));
}

}  // namespace

std::vector<int> tensor_shares(int n_units, int n_ranks, const std::vector<float>& weights, const std::string& what) {
    if (n_units < n_ranks)
        throw Error(
            strprintf("%s: %d to share out, fewer than the %d ranks of the tensor split (--split-mode layer "
                      "splits by layers)",
                      what.c_str(), n_units, n_ranks));
    return split_layers(n_units, n_ranks, weights, 0);
}

Weight Model::column_slice(const Weight& w, int64_t c0, int64_t n) {
    const TypeTraits& tt = type_traits(w.type);
    TD_ASSERT(c0 % tt.block_elems == 0 && n % tt.block_elems == 0 && c0 + n <= w.cols);
    Weight v = w;
    v.cols = n;
    v.placement = nullptr;
    const size_t skip = size_t(c0 / tt.block_elems) * size_t(tt.block_bytes);
    if (!is_float_type(w.type)) {  // a strided view: row r at data + r * row_stride + skip
        v.data = w.data + skip;
        return v;
    }
    const size_t row = row_bytes(w.type, n);
    owned_.emplace_back(row * size_t(w.rows));
    uint8_t* dst = owned_.back().data();
    for (int64_t r = 0; r < w.rows; r++)
        std::memcpy(dst + size_t(r) * row, w.data + size_t(r) * w.row_stride + skip, row);
    v.data = dst;
    v.row_stride = row;
    return v;
}

// layer_bytes: the trunk's weight bytes; head_bytes: the output head's, which rank 0 holds besides its share: without
// -ts, rank 0's share is lighter by as much (w0 = (L - H (N - 1)) / (L + H) against 1 for each other rank, which
// gives every rank L / N + ... the same bytes where the cuts allow).
void Model::bind_tensor_share(double layer_bytes, double head_bytes) {
    Cluster& c = *cluster_;
    const int N = c.size(), rank = c.rank();
    const std::string& p = path();
    auto refuse = [&](const std::string& why) {
        throw Error(p + ": " + why + ": not split by tensors across ranks (--split-mode layer splits it by layers)");
    };
    if (hp_.mla) refuse("multi-head latent attention (one latent KV head)");
    if (hp_.recurrent()) refuse("Gated DeltaNet layers");
    if (hp_.qk_norm_whole) refuse("a QK-norm over all heads at once (olmo2)");
    if (hp_.attn_gate) refuse("gated attention");
    if (hp_.n_embd_per_layer > 0) refuse("per-layer embeddings (Gemma 4 E2B/E4B)");
    for (int i = 0; i < hp_.n_layer; i++) {
        const LayerWeights& L = layers_[size_t(i)];
        if (L.kv_from >= 0) refuse(strprintf("layer %d reads another layer's cache", i));
        if (L.moe() && L.w_gate.data) refuse(strprintf("layer %d has experts beside a dense MLP (gemma4)", i));
        if (L.n_head_kv <= 0 || hp_.n_head % L.n_head_kv != 0)
            refuse(strprintf("layer %d: %d query heads over %d KV heads", i, hp_.n_head, L.n_head_kv));
    }
    c.agree(model_fingerprint(*this), hp_.n_layer, 0);
    split_lo_ = 0;
    split_hi_ = hp_.n_layer;
    std::vector<float> w = c.options().weights;
    if (w.empty() && layer_bytes > 0) {
        const double L = layer_bytes, H = head_bytes;
        w.assign(size_t(N), 1.0f);
        w[0] = float(std::max(0.05, (L - H * (N - 1)) / (L + H)));
    }
    for (int i = 0; i < hp_.n_layer; i++) {
        LayerWeights& L = layers_[size_t(i)];
        const std::string where = strprintf("%s: layer %d", p.c_str(), i);
        // Heads: units of u KV heads (with their query heads) whose wo columns fill whole blocks.
        const int nkv = L.n_head_kv, group = hp_.n_head / nkv, hd = L.head_dim;
        const int block = type_traits(L.wo.type).block_elems;
        int u = 1;
        while (u <= nkv && (nkv % u != 0 || (int64_t(u) * group * hd) % block != 0)) u++;
        if (u > nkv)
            refuse(strprintf("layer %d's heads cannot be cut at the %s blocks of its output matrix", i,
                             type_name(L.wo.type)));
        const std::vector<int> hs = tensor_shares(nkv / u, N, w,
                                                  u == 1 ? where + " KV heads"
                                                         : strprintf("%s groups of %d KV heads (whole %s blocks of wo)",
                                                                     where.c_str(), u, type_name(L.wo.type)));
        const int k0 = hs[size_t(rank)] * u, k1 = hs[size_t(rank) + 1] * u;
        const size_t q0 = size_t(k0) * group * hd, qn = size_t(k1 - k0) * group * hd;
        const size_t kv0 = size_t(k0) * hd, kvn = size_t(k1 - k0) * hd;
        L.wq = weight_rows(L.wq, int64_t(q0), int64_t(qn));
        const bool v_is_k = L.wv.data == L.wk.data;
        L.wk = weight_rows(L.wk, int64_t(kv0), int64_t(kvn));
        L.wv = v_is_k ? L.wk : weight_rows(L.wv, int64_t(kv0), int64_t(kvn));
        L.bq = slice_vec(L.bq, q0, qn);
        L.bk = slice_vec(L.bk, kv0, kvn);
        L.bv = slice_vec(L.bv, kv0, kvn);
        L.sinks = slice_vec(L.sinks, size_t(k0) * group, size_t(k1 - k0) * group);
        L.wo = column_slice(L.wo, int64_t(q0), int64_t(qn));
        L.n_head = (k1 - k0) * group;
        L.n_head_kv = k1 - k0;
        if (L.moe()) {  // whole experts per rank; the router everywhere; a shared expert on rank 0
            const std::vector<int> es = tensor_shares(hp_.n_expert, N, w, where + " experts");
            for (int e = 0; e < hp_.n_expert; e++)
                if (e < es[size_t(rank)] || e >= es[size_t(rank) + 1])
                    L.exp_gate[size_t(e)] = L.exp_up[size_t(e)] = L.exp_down[size_t(e)] = Weight{};
            if (rank != 0) L.shexp_gate = L.shexp_up = L.shexp_down = Weight{};
        } else {  // hidden units in whole blocks of w_down's columns
            const int64_t F = L.w_gate.rows, fb = type_traits(L.w_down.type).block_elems;
            const std::vector<int> fs =
                tensor_shares(int(F / fb), N, w, strprintf("%s FFN blocks of %d units", where.c_str(), int(fb)));
            const int64_t f0 = fs[size_t(rank)] * fb, fn = fs[size_t(rank) + 1] * fb - f0;
            L.w_gate = weight_rows(L.w_gate, f0, fn);
            L.w_up = weight_rows(L.w_up, f0, fn);
            L.w_down = column_slice(L.w_down, f0, fn);
        }
    }
    for (size_t i = size_t(hp_.n_layer); i < layers_.size(); i++)  // an MTP block: rank 0's, whole
        if (rank != 0) layers_[i] = LayerWeights{};
    if (rank != 0) {  // the embedding stays (every rank embeds: a row per token, read in place)
        output_ = {};
        mtp_ = {};
    }
}

}  // namespace tandem
