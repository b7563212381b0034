// The seam between the forward pass and the machines that run it: a backend owns buffers and runs ops on tensor
// views of them. The CPU (backend/cpu/cpu_backend.cpp, the SIMD levels of backend/cpu/isa.h) is the first
// backend; the scalar reference (backend/reference_backend.cpp) computes every op as its contract below says, in
// the plainest code, and is what every backend's ops are tested against (tests/test_backend.cpp).
//
// A pass is recorded, not called: a backend may run each op at once (the CPU does) or record the ops of one pass
// into one command stream and run them at sync() (a GPU). The host reads a buffer only through read(), which
// syncs first; it writes through write(). So the only host round trips of a pass are the reads the caller asks for
// (logits, kept rows, a split model's exchange), never one inside a layer: every op's inputs that decide its
// work are tensors or small host arrays given at recording (positions, a pass's row layout), never values a
// previous op of the same pass computed.
//
// BATCH INVARIANCE (every backend, every op): the result of a row is a function of that row's inputs (and for
// attention, of the cache positions it sees, in position order), never of the other rows of the pass, of their
// number, or of the row's place in a chain, a batch of sessions or a token tree. One reduction order per output
// element whatever the number of rows: a kernel that switches its summation order between one row and k rows breaks
// this and with it greedy speculation's token identity (llama.cpp's GPU backends do). The test every backend runs:
// tests/test_backend.cpp BatchInvariance (one row alone = the same row among k = 2..16 = inside a tree, bit for bit).
//
// Shapes: a Tensor is a 2-D view, `rows` rows of `cols` elements of `type`, `row_stride` bytes apart (the row
// stride of a column slice is its parent's). Activations are F32 rows; weights any type the backend supports().
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/gpu.h"
#include "tandem/model.h"
#include "tandem/tensor_type.h"

namespace tandem {
class ThreadPool;
}

namespace tandem::backend {

// Memory of one backend (host memory for the CPU, device memory for a GPU), or host memory lent to it (a file
// mapping: the CPU reads weights in place).
class Buffer {
public:
    virtual ~Buffer() = default;
    virtual size_t size() const = 0;
};

struct Tensor {
    Buffer* buf = nullptr;
    size_t offset = 0;  // of row 0 in buf
    TensorType type = TensorType::F32;
    int64_t rows = 0, cols = 0;
    size_t row_stride = 0;  // bytes
    // A backend's own data about this tensor, carried with the view (as ggml's tensor->extra): the CPU's
    // interleaved copy of a placed quantized matrix (backend/cpu/matmul_q8.h), null for most views.
    const void* extra = nullptr;
    size_t nbytes() const { return row_stride * size_t(rows); }
    // Rows [r0, r0 + n) of this view.
    Tensor rows_at(int64_t r0, int64_t n) const {
        Tensor t = *this;
        t.offset += size_t(r0) * row_stride;
        t.rows = n;
        return t;
    }
    // Columns [c0, c0 + n) of every row (a slice of each row: the same rows and stride)
    Tensor cols_at(int64_t c0, int64_t n) const {
        Tensor t = *this;
        t.offset += row_bytes(type, c0);
        t.cols = n;
        return t;
    }
    explicit operator bool() const { return buf != nullptr; }
};

// The ops of a forward pass. supports(op, type) says whether a backend runs an op with a weight / cache of that
// type (for the other ops, the type is F32): asked at load, so a model a backend cannot run is refused by name.
enum class Op : int {
    GET_ROWS,  // embedding rows
    MATMUL,  // y = x W^T
    MATMUL_ID,  // experts: y = x W_e^T for the experts each row chose
    RMS_NORM,
    ROPE,
    ADD,  // y += s x, and a broadcast row (biases)
    MUL,  // y *= a broadcast row (a norm's weight, a scale vector)
    SCALE,
    GLU,  // gated activations (SwiGLU, GEGLU, gpt-oss's)
    SOFTCAP,  // c tanh(x / c) after a division by a logit scale
    TOPK_ROUTE,  // a mixture's router: the top k experts and their weights
    KV_STORE,  // k and v rows into a cache's slots, converted to its types
    ROW_COPY,  // cache rows copied (a token tree's accepted path moved into place)
    ATTENTION,  // over a cache, chains and trees, windows, grouped-query heads, sinks
    DELTA_RULE,  // the gated delta rule of Gated DeltaNet layers, its convolution, norms and gates
    COPY,  // F32 rows copied
    MOE_SUM,  // a mixture's weighted sum of its experts' outputs, in expert order
    COUNT
};
const char* op_name(Op op);

// FfnAct's three (tandem/model.h), and SIGMOID: gate = sigmoid(gate) * up (qwen35's gated attention output)
enum class Glu { SILU, GELU_TANH, SWIGLU_OAI, SIGMOID };

// ROPE: each of n_head heads of head_dim values in a row is rotated at its row's position; the rotated dims are
// [offset, offset + n_rot) of the head (MLA: after the latent part), NORM pairs (2i, 2i+1), NEOX (i, i + n_rot/2);
// the angle tables are (n_ctx, n_rot / 2) F32 rows of cos and sin; the magnitude mscale multiplies both.
struct RopeArgs {
    int n_head = 0, head_dim = 0, n_rot = 0, offset = 0;
    RopeStyle style = RopeStyle::NORM;
    float mscale = 1.0f;
    Tensor cos, sin;
};

// TOPK_ROUTE: the routing rule of tandem/model.h MoeGating (softmax / softmax over the top k / sigmoid with a
// choice bias and group-limited choice), the k weights renormalised and scaled as asked.
struct RouteArgs {
    int n_expert = 0, k = 0;
    MoeGating gating = MoeGating::SOFTMAX;
    bool norm = false;  // renormalise the k weights to sum 1
    float scale = 0;  // multiplies the weights when != 0
    int n_groups = 0, n_group_used = 0;
    bool choose_by_logits = false;  // llama4: the choice by the raw logits (their order; weights as the gating says)
};

// ATTENTION. n_head / n_head_kv query heads share a KV head (any number: MLA's one latent head serves them all).
// The pass's rows come in segments, one per session: a segment's keys and values are its cache
// tensors of this layer (rows: the ring's capacity, a slot s at row s % capacity; cols: n_head_kv * head_dim, of
// the cache types). Row r of the pass is a token at position pos[r] of segment seg[r]; it sees the positions
// lo[r]..pos[r]: those below its segment's pos0 at their own slots, and from pos0 on those of its chain (slot =
// position) or, in a token tree, of its root path (tail[r][v - pos0] the slot of its ancestor at position v).
// q (n, n_head * head_dim) -> out (n, n_head * head_dim); softmax of scale q.k (+ a sink logit per head, sinks: a
// (1, n_head) row, or none), grouped-query heads (head h reads KV head h / (n_head / n_head_kv)).
struct AttnSegment {
    Tensor k, v;
    int pos0 = 0;
};
struct AttnArgs {
    int n_head = 0, n_head_kv = 0, head_dim = 0;
    float scale = 1.0f;
    Tensor sinks;
    const AttnSegment* segs = nullptr;
    int n_segs = 0;
    const int* seg = nullptr;  // (n)
    const int* pos = nullptr;  // (n)
    const int* lo = nullptr;  // (n)
    const int32_t* const* tail = nullptr;  // (n) null pointers for chains; null: every row a chain
};

// DELTA_RULE, per row t and value head h (S = state size; the rule of backend/cpu/kernels.h delta_rule): the state
// m_in[t] (a (1, Hv S S) row: Hv matrices S x S) -> m_out[t] and o (Hv S), with q, k (Hk S, L2-normed) the key
// head h % n_k_heads (or h / (Hv / Hk) when grouped), v (Hv S), decay and beta (Hv) per head. A row's state may be
// the previous row's output (m_in[t + 1] == m_out[t]: a chain) or its own input (in place): the rows of a head run
// in order. The same ordering holds for conv1d's windows.
struct DeltaArgs {
    int S = 0, n_k_heads = 0, n_v_heads = 0;
    bool grouped = false;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;  // "cpu (avx512vnni)", "reference", a device's name
    virtual bool supports(Op op, TensorType type) const = 0;

    // --- memory ---
    virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
    // Host memory the backend may read for as long as the buffer lives (weights from a file mapping): the CPU
    // uses it in place, a GPU copies it. Never written through.
    virtual std::unique_ptr<Buffer> map_host(const void* data, size_t bytes) = 0;
    // A weight matrix's placement: the backend's preferred layout of it (the CPU's interleaved copy of a
    // quantized matrix, a GPU's upload), made once at load and recorded in w (Tensor::extra), which then names
    // it in every later op; the backend keeps what it made for as long as w's buffer lives.
    virtual void place_weight(Tensor& w) { (void)w; }
    // The host's memory as one buffer of this backend, for a backend that reads and writes it in place (the CPU:
    // a tensor's offset is its address); null for one that does not (a GPU). While the forward pass still keeps
    // some activations and weights in host memory (its blocks' own arrays), it names them through this buffer;
    // a backend without one runs a pass whose every tensor it placed or allocated.
    virtual Buffer* host_memory() { return nullptr; }
    virtual void write(const Tensor& dst, const void* src) = 0;  // rows of dst from host memory (nbytes())
    virtual void read(const Tensor& src, void* dst) = 0;  // syncs, then src's rows to host memory
    virtual void sync() {}  // runs what was recorded; returns when it is done

    // --- ops (y: outputs; every tensor F32 unless said) ---
    // y (n, E) = rows ids[0..n) of table (any supported type); y may be a column slice
    virtual void get_rows(const Tensor& table, const int32_t* ids, int n, const Tensor& y) = 0;
    // y (n, W.rows) = x (n, W.cols) W^T
    virtual void matmul(const Tensor& w, const Tensor& x, const Tensor& y) = 0;
    // Several matrices applied to one input (q/k/v, gate/up): ys[i] (n, ws[i].rows) = x ws[i]^T (one quantization
    // of x and one pass over all of them where the backend can)
    virtual void matmul_multi(const Tensor* ws, const Tensor* ys, int count, const Tensor& x) {
        for (int i = 0; i < count; i++) matmul(ws[i], x, ys[i]);
    }
    // Experts: ws[e] (R, C) for e < n_expert; ids (n, k) I32, as topk_route wrote them (a tensor of the backend:
    // a GPU reads the choice where the router made it, no read-back); x: (n, C) shared by a row's k choices, or
    // (n k, C) one per choice (x_per_choice); y (n k, R): y[t k + j] = x[t or t k + j] ws[ids[t k + j]]^T (x and
    // y may be column slices: MLA's heads are experts of one choice each).
    // An expert this process lacks (ws[e].buf null: a tensor split's other rank holds it) leaves its rows of y as
    // they were (moe_sum leaves them out).
    virtual void matmul_id(const Tensor* ws, int n_expert, const Tensor& ids, const Tensor& x, bool x_per_choice,
                           const Tensor& y) = 0;
    // y = x / sqrt(mean(x^2) + eps) * w, per row of `width` values (a row of x may hold several: heads); w: a
    // (1, width) row or none. x and y may be the same tensor, either a column slice (strided rows).
    virtual void rms_norm(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& y) = 0;
    // x rows rotated in place at positions pos[0..x.rows)
    virtual void rope(const RopeArgs& a, const int* pos, const Tensor& x) = 0;
    virtual void add(const Tensor& x, float s, const Tensor& y) = 0;  // y += s x (same shape)
    virtual void add_row(const Tensor& b, const Tensor& y) = 0;  // y[t] += b (a (1, y.cols) row)
    virtual void mul_row(const Tensor& w, const Tensor& y) = 0;  // y[t] *= w (a (1, y.cols) row)
    virtual void scale(float s, const Tensor& y) = 0;  // y *= s (y may be a column slice)
    // gate = act(gate) * up, elementwise over equal shapes
    virtual void glu(Glu kind, const Tensor& gate, const Tensor& up) = 0;
    // y = c tanh((y / div) / c) (c > 0), or y / div when c == 0
    virtual void softcap(float div, float c, const Tensor& y) = 0;
    // logits (n, n_expert) [+ a (1, n_expert) choice bias for the choice only] -> ids (n, k) I32, weights (n, k)
    virtual void topk_route(const RouteArgs& a, const Tensor& logits, const Tensor& choice_bias, const Tensor& ids,
                            const Tensor& weights) = 0;
    // y[i] += b[ids[i]] for the n k choices i: b (n_expert, C) one bias row per expert, y (n k, C)
    virtual void add_id(const Tensor& b, const Tensor& ids, const Tensor& y) = 0;
    // y[t k + j] = x[t] * weights[t][j]: x (n, C), weights (n, k), y (n k, C) (llama4 weighs an expert's input)
    virtual void scale_choices(const Tensor& x, const Tensor& weights, const Tensor& y) = 0;
    // A mixture's output, y (n, C) = the sum over row t's k choices, in ascending expert order (one order of a
    // row's terms whatever the pass), of w * (x[t k + j] + b[e]), e = ids[t k + j], w = weights[t][j] (1 when
    // none) * scale[e] (when given); starting from 0. b: (n_expert, C) or none; scale: (1, n_expert) or none.
    // ws: the n_expert experts' matrices of matmul_id (a choice of an expert with ws[e].buf null is left out).
    virtual void moe_sum(const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& b,
                         const Tensor& scale, const Tensor* ws, int n_expert, const Tensor& y) = 0;
    // y[t] += g_t x[t], g_t = sigmoid(gate_in[t] . gate_w) (gate_w a (1, gate_in.cols) row: a shared expert's
    // gate), or g_t = 1 without gate_w
    virtual void gated_add(const Tensor& x, const Tensor& gate_in, const Tensor& gate_w, const Tensor& y) = 0;
    // Cache rows: k, v (n, kv_dim) F32 converted into kc, vc (any cache type) at slots[0..n) (row slot % rows)
    virtual void kv_store(const Tensor& k, const Tensor& v, const int* slots, const Tensor& kc, const Tensor& vc) = 0;
    // Row `from` of c copied onto row `to`
    virtual void row_copy(const Tensor& c, int from, int to) = 0;
    virtual void attention(const AttnArgs& a, const Tensor& q, const Tensor& out) = 0;
    // m_in, m_out: n state rows (above); q, k (n, Hk S); v, o (n, Hv S); decay, beta (n, Hv) (column slices allowed)
    virtual void delta_rule(const DeltaArgs& a, const Tensor* m_in, const Tensor* m_out, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& decay, const Tensor& beta,
                            const Tensor& o) = 0;
    // A causal convolution of K taps over the rows, in order (Gated DeltaNet's): x, y (n, C), taps (C, K) F32;
    // win_in[t], win_out[t]: (1, (K - 1) C) rows, the previous K - 1 inputs, oldest first.
    //   y[t][c] = taps[c][K-1] x[t][c] + sum_{r < K-1} taps[c][r] win_in[t][r][c]   (this order of the sum)
    //   win_out[t] = win_in[t] moved up one row, x[t] last; then y = y / (1 + exp(-y)) when silu
    virtual void conv1d(int K, bool silu, const Tensor& x, const Tensor& taps, const Tensor* win_in,
                        const Tensor* win_out, const Tensor& y) = 0;
    // y = x / sqrt(sum x^2 + eps) per `width` values, as llama.cpp computes it (an RMS norm with eps / width,
    // times 1 / sqrt(width)); x, y may be the same tensor or column slices
    virtual void l2_norm(const Tensor& x, int width, float eps, const Tensor& y) = 0;
    // Gated DeltaNet's gates, per row and head h: beta = sigmoid(beta), alpha = exp(softplus(alpha + dt[h]) a[h])
    // (softplus(x) = x above 20); beta, alpha (n, Hv), dt and a (1, Hv) rows
    virtual void delta_gates(const Tensor& dt, const Tensor& a, const Tensor& beta, const Tensor& alpha) = 0;
    // x = rms_norm(x, w, width, eps) * silu(z), silu(z) = z / (1 + exp(-z)) (a normed output gated by z)
    virtual void rms_norm_gated(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& z) = 0;
    virtual void copy(const Tensor& x, const Tensor& y) = 0;  // F32 rows, same shape (either may be strided)
};

// The part of a model one backend holds and runs when the model is split by layers (between the CPU and GPUs, or
// over several GPUs; tandem/gpu.h): the layers [first, end), the token embedding when first is 0, and, on the last
// part (`last`), the rest: the output head and norm, an MTP block's layer (a tied output is visited as the output
// first: the last part holds it then). The default holds the whole model.
struct LayerSpan {
    int first = 0, end = INT_MAX;
    bool last = true;
    bool holds(const Model::WeightVisit& v) const {
        if (v.layer >= 0) return v.layer >= first && (v.layer < end || last);
        return std::string(v.name) == "token_embd" ? first == 0 : last;
    }
};
// What a backend cannot run of a model with these cache types: "" when it runs all of it, else the first weight
// (by its registry name, tandem/model.h for_each_matrix) or cache type it does not support, named. Asked when a
// session is made, so that a model a backend cannot run is refused by name before any pass.
// `span`: the part of a split model b runs (the whole model by default).
std::string unsupported(const Backend& b, const Model& m, TensorType type_k, TensorType type_v,
                        const LayerSpan& span = {});

// The backends of this build: the CPU's (the active SIMD level, threads of `pool`) and the scalar reference.
std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);
std::unique_ptr<Backend> make_reference_backend();

// The Vulkan backend (src/backend/vulkan/) on device `index` of tandem/gpu.h's gpu_devices() (< 0: the first). Throws tandem::Error naming why not.
std::unique_ptr<Backend> make_vulkan_backend(int index);
// Messages of the Vulkan validation layer so far (enabled by TANDEM_VK_VALIDATION=1; each is printed to stderr).
uint64_t vulkan_validation_messages();

}  // namespace tandem::backend
