// The Vulkan backend (backend.h): tensors in device memory, ops as compute shaders (shaders/, one SPIR-V per weight
// type where the op reads weights), one recorded command stream per pass, run at sync() or when the host reads.
// Every op of the seam: matmul, matmul_id and embedding rows of every weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4), norms, RoPE, the elementwise ops, caches of F32, F16, BF16, Q8_0 and Q4_0
// (stores, row copies, attention over chains, trees, windows, sinks and grouped-query heads), the mixture's ops and
// Gated DeltaNet's. Each reduction has one order per output element whatever the pass (batch invariance).
#include <algorithm>
#include <cstring>

#include "backend/backend.h"
#include "backend/vulkan/vk_device.h"
#include "tandem/error.h"

namespace tandem::backend {

namespace {

using vk::Bind;
using vk::Device;
using vk::DeviceMemory;

class VulkanBuffer : public Buffer {
public:
    VulkanBuffer(Device& d, DeviceMemory m) : dev_(d), mem_(m) {}
    ~VulkanBuffer() override { dev_.free(mem_); }
    size_t size() const override { return mem_.size; }
    const DeviceMemory& mem() const { return mem_; }

private:
    Device& dev_;
    DeviceMemory mem_;
};

const DeviceMemory& mem(const Tensor& t) { return static_cast<const VulkanBuffer&>(*t.buf).mem(); }

uint32_t u32(size_t v, const char* what) {
    if (v > UINT32_MAX) throw Error(strprintf("vulkan: %s of %zu is past 32 bits", what, v));
    return uint32_t(v);
}
// A float tensor's offset and row stride in floats
uint32_t f_off(const Tensor& t) {
    TD_ASSERT(t.offset % 4 == 0 && t.row_stride % 4 == 0);
    return u32(t.offset / 4, "a tensor's offset");
}
uint32_t f_stride(const Tensor& t) { return u32(t.row_stride / 4, "a row stride"); }
// An I32 tensor's (a router's choice) in ints: the same words
uint32_t i_off(const Tensor& t) { return f_off(t); }
uint32_t i_stride(const Tensor& t) { return f_stride(t); }

// The shaders' weight types (shaders/common.glsl WTYPE); the first five are also the cache types
// (shaders/cache_io.glsl)
int wtype(TensorType t) {
    switch (t) {
        case TensorType::F32: return 0;
        case TensorType::F16: return 1;
        case TensorType::BF16: return 2;
        case TensorType::Q8_0: return 3;
        case TensorType::Q4_0: return 4;
        case TensorType::Q4_1: return 5;
        case TensorType::Q5_0: return 6;
        case TensorType::Q5_1: return 7;
        case TensorType::Q4_K: return 8;
        case TensorType::Q5_K: return 9;
        case TensorType::Q6_K: return 10;
        case TensorType::MXFP4: return 11;
        default: return -1;
    }
}

struct MatmulPush {
    uint32_t w_off, w_stride, x_off, x_stride, y_off, y_stride, rows, cols, n, lanes;
};
struct GetRowsPush {
    uint32_t w_off, w_stride, ids_off, y_off, y_stride, cols, n;
};
struct NormPush {
    uint32_t x_off, x_stride, w_off, y_off, y_stride, width, pieces, rows, has_w, l2;
    float eps;
};
struct DeltaPush {
    uint32_t mi_off, mo_off, q_off, k_off, v_off, d_off, b_off, o_off, S, n_k_heads, n_v_heads, grouped;
};
struct ConvPush {
    uint32_t x_off, t_off, t_stride, wi_off, wo_off, y_off, C, K, silu;
};
struct GatesPush {
    uint32_t dt_off, a_off, b_off, b_stride, al_off, al_stride, heads, rows;
};
struct RowsPush {
    uint32_t mode, rows, cols, x_off, x_stride, x_bcast, y_off, y_stride;
    float s, c;
};
struct RopePush {
    uint32_t x_off, x_stride, cos_off, cos_stride, sin_off, sin_stride, n_head, head_dim, n_rot, offset, neox, rows;
    float mscale;
};
struct KvPush {
    uint32_t x_off, x_stride, c_off, c_stride, c_rows, type, cols, rows;
};
struct AttnPush {
    uint32_t q_off, q_stride, o_off, o_stride;
    uint32_t k_off, k_stride, k_rows, k_type, v_off, v_stride, v_rows, v_type;
    uint32_t n_head, n_head_kv, head_dim, pos0, has_sinks, sinks_off;
    float scale;
};
struct MatmulIdPush {
    uint32_t w_stride, x_off, x_stride, y_off, y_stride, ids_off, ids_stride, k, rows, cols, nk, x_per_choice, lanes;
};
struct RoutePush {
    uint32_t lg_off, lg_stride, has_bias, bias_off, ids_off, ids_stride, w_off, w_stride;
    uint32_t ne, k, gating, norm, n_groups, n_group_used, by_logits, rows;
    float scale;
};
struct MoeRowsPush {
    uint32_t mode, a_off, a_stride, ids_off, ids_stride, fw_off, fw_stride, k, y_off, y_stride, cols, rows;
};
struct MoeSumPush {
    uint32_t x_off, x_stride, ids_off, ids_stride, k, w_off, w_stride, has_w, b_off, b_stride, has_b, s_off, has_s;
    uint32_t y_off, y_stride, cols, rows;
};
struct GatedPush {
    uint32_t x_off, x_stride, gi_off, gi_stride, gi_cols, gw_off, has_gw, y_off, y_stride, cols;
};
enum RowsMode : uint32_t {
    COPY = 0,
    ADD,
    MUL,
    SCALE,
    SOFTCAP,
    GLU_SILU,
    GLU_GELU_TANH,
    GLU_SWIGLU_OAI,
    GLU_SIGMOID,
    GATE_SILU
};

uint32_t groups(int64_t n, int64_t per) { return uint32_t((n + per - 1) / per); }
// The lanes a matmul gives each weight row of `cols` columns (matmul_unit.glsl): about 64 columns per lane, a power of
// two from 1 to 64, so that every lane has at least one unit (a K-quant's unit is 32 columns). It depends on the
// row's width only, never on the pass: the tree of a row's sum is the same for every pass (batch invariance).
uint32_t lanes_per_row(int64_t cols) {
    uint32_t l = 1;
    while (l < 64 && int64_t(l) * 2 * 64 <= cols) l *= 2;
    return l;
}

class VulkanBackend : public Backend {
public:
    explicit VulkanBackend(int index) : dev_(index) {}
    ~VulkanBackend() override { dev_.free(readback_); }
    std::string name() const override {
        return "vulkan (" + dev_.name() +
               (dev_.subgroup_tree() ? strprintf(", subgroups of %u", dev_.subgroup_size()) : std::string()) + ")";
    }
    bool supports(Op op, TensorType type) const override {
        switch (op) {
            case Op::GET_ROWS:
            case Op::MATMUL:
            case Op::MATMUL_ID: return wtype(type) >= 0;
            case Op::TOPK_ROUTE:
            case Op::MOE_SUM:
            case Op::RMS_NORM:
            case Op::ADD:
            case Op::MUL:
            case Op::SCALE:
            case Op::GLU:
            case Op::SOFTCAP:
            case Op::COPY:
            case Op::ROPE:
            case Op::DELTA_RULE: return type == TensorType::F32;
            case Op::KV_STORE:
            case Op::ROW_COPY:
            case Op::ATTENTION: return wtype(type) >= 0 && wtype(type) <= 4;  // shaders/cache_io.glsl
            default: return false;
        }
    }

    std::unique_ptr<Buffer> alloc(size_t bytes) override {
        auto b = std::make_unique<VulkanBuffer>(dev_, dev_.alloc(bytes));
        dev_.fill_zero(b->mem());  // zeroed, as the CPU's
        return b;
    }
    std::unique_ptr<Buffer> map_host(const void* data, size_t bytes) override {
        const bool in_pass = dev_.recording();
        auto b = std::make_unique<VulkanBuffer>(dev_, dev_.alloc(bytes));
        if (bytes) dev_.copy(dev_.stage(data, bytes), 0, b->mem(), 0, bytes);
        // a weight's staging copy is released at once (a model's weights would else all be staged at the same
        // time), unless a pass is being recorded
        if (!in_pass) dev_.sync();
        return b;
    }
    void write(const Tensor& dst, const void* src) override {
        const size_t rb = row_bytes(dst.type, dst.cols);
        const DeviceMemory& s = dev_.stage(src, rb * size_t(dst.rows));
        if (dst.row_stride == rb) return dev_.copy(s, 0, mem(dst), dst.offset, rb * size_t(dst.rows));
        for (int64_t r = 0; r < dst.rows; r++)
            dev_.copy(s, size_t(r) * rb, mem(dst), dst.offset + size_t(r) * dst.row_stride, rb);
    }
    void read(const Tensor& src, void* dst) override {
        const size_t rb = row_bytes(src.type, src.cols), n = rb * size_t(src.rows);
        if (n > readback_.size || !readback_.buffer) {  // host-visible memory for reads, kept and grown
            dev_.free(readback_);
            readback_ = dev_.alloc_host(std::max<size_t>(n, 1 << 16));
        }
        const DeviceMemory& host = readback_;
        if (src.row_stride == rb) dev_.copy(mem(src), src.offset, host, 0, n);
        else
            for (int64_t r = 0; r < src.rows; r++)
                dev_.copy(mem(src), src.offset + size_t(r) * src.row_stride, host, size_t(r) * rb, rb);
        dev_.sync();
        if (n) std::memcpy(dst, host.mapped, n);
    }
    void sync() override { dev_.sync(); }

    void get_rows(const Tensor& table, const int32_t* ids, int n, const Tensor& y) override {
        const DeviceMemory& idm = dev_.stage(ids, size_t(n) * sizeof(int32_t));
        const GetRowsPush p{u32(table.offset, "a table's offset"),
                            u32(table.row_stride, "a row stride"),
                            0,
                            f_off(y),
                            f_stride(y),
                            uint32_t(table.cols),
                            uint32_t(n)};
        dev_.dispatch(typed("get_rows", table.type, 3, sizeof p), {{&mem(table)}, {&idm}, {&mem(y)}}, &p,
                      groups(table.cols, 64), uint32_t(n));
    }
    void matmul(const Tensor& w, const Tensor& x, const Tensor& y) override {
        TD_ASSERT(x.cols == w.cols && y.cols == w.rows && y.rows == x.rows);
        const MatmulPush p{u32(w.offset, "a weight's offset"),
                           u32(w.row_stride, "a row stride"),
                           f_off(x),
                           f_stride(x),
                           f_off(y),
                           f_stride(y),
                           uint32_t(w.rows),
                           uint32_t(w.cols),
                           uint32_t(x.rows),
                           lanes_per_row(w.cols)};
        const int64_t wgs = groups(w.rows, 64 / p.lanes);
        dev_.dispatch(typed("matmul", w.type, 3, sizeof p), {{&mem(w)}, {&mem(x)}, {&mem(y)}}, &p,
                      uint32_t(std::min<int64_t>(wgs, 65535)), groups(wgs, 65535));
    }
    void rms_norm(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& y) override {
        norm(x, w, width, eps, y, false);
    }
    void add(const Tensor& x, float s, const Tensor& y) override { rows(ADD, x, false, y, s, 0); }
    void add_row(const Tensor& b, const Tensor& y) override { rows(ADD, b, true, y, 1.0f, 0); }
    void mul_row(const Tensor& w, const Tensor& y) override { rows(MUL, w, true, y, 0, 0); }
    void scale(float s, const Tensor& y) override { rows(SCALE, y, false, y, s, 0); }
    void glu(Glu kind, const Tensor& gate, const Tensor& up) override {
        const RowsMode m = kind == Glu::SILU        ? GLU_SILU
                           : kind == Glu::GELU_TANH ? GLU_GELU_TANH
                           : kind == Glu::SIGMOID   ? GLU_SIGMOID
                                                    : GLU_SWIGLU_OAI;
        rows(m, up, false, gate, 0, 0);
    }
    void softcap(float div, float c, const Tensor& y) override { rows(SOFTCAP, y, false, y, div, c); }
    void copy(const Tensor& x, const Tensor& y) override { rows(COPY, x, false, y, 0, 0); }

    // --- positions, experts, routing ---
    void rope(const RopeArgs& a, const int* pos, const Tensor& x) override {
        const DeviceMemory& pm = dev_.stage(pos, size_t(x.rows) * sizeof(int));
        const RopePush p{f_off(x),
                         f_stride(x),
                         f_off(a.cos),
                         f_stride(a.cos),
                         f_off(a.sin),
                         f_stride(a.sin),
                         uint32_t(a.n_head),
                         uint32_t(a.head_dim),
                         uint32_t(a.n_rot),
                         uint32_t(a.offset),
                         a.style == RopeStyle::NEOX ? 1u : 0u,
                         uint32_t(x.rows),
                         a.mscale};
        dev_.dispatch(dev_.pipeline("rope", 4, sizeof p), {{&mem(x)}, {&mem(a.cos)}, {&mem(a.sin)}, {&pm}}, &p,
                      groups(a.n_rot / 2, 64), uint32_t(a.n_head), uint32_t(x.rows));
    }
    void matmul_id(const Tensor* ws, int n_expert, const Tensor& ids, const Tensor& x, bool x_per_choice,
                   const Tensor& y) override {
        // one dispatch per buffer holding experts (a model's experts are slices of one tensor: one dispatch)
        const Tensor* first = nullptr;
        for (int e = 0; e < n_expert && !first; e++)
            if (ws[e].buf) first = &ws[e];
        if (!first) return;
        const int64_t nk = ids.rows * ids.cols;
        std::vector<const Buffer*> done;
        for (int e0 = 0; e0 < n_expert; e0++) {
            const Buffer* buf = ws[e0].buf;
            if (!buf || std::find(done.begin(), done.end(), buf) != done.end()) continue;
            done.push_back(buf);
            std::vector<uint32_t> offs(size_t(n_expert), 0xFFFFFFFFu);
            for (int e = 0; e < n_expert; e++)
                if (ws[e].buf == buf) {
                    TD_ASSERT(ws[e].type == first->type && ws[e].rows == first->rows && ws[e].cols == first->cols &&
                              ws[e].row_stride == first->row_stride);
                    offs[size_t(e)] = u32(ws[e].offset, "an expert's offset");
                }
            const DeviceMemory& om = dev_.stage(offs.data(), offs.size() * sizeof(uint32_t));
            const MatmulIdPush p{u32(first->row_stride, "a row stride"),
                                 f_off(x),
                                 f_stride(x),
                                 f_off(y),
                                 f_stride(y),
                                 i_off(ids),
                                 i_stride(ids),
                                 uint32_t(ids.cols),
                                 uint32_t(first->rows),
                                 uint32_t(first->cols),
                                 uint32_t(nk),
                                 x_per_choice ? 1u : 0u,
                                 lanes_per_row(first->cols)};
            const int64_t wgs = groups(first->rows, 64 / p.lanes);
            dev_.dispatch(typed("matmul_id", first->type, 5, sizeof p),
                          {{&mem(ws[e0])}, {&mem(x)}, {&mem(y)}, {&mem(ids)}, {&om}}, &p,
                          uint32_t(std::min<int64_t>(wgs, 65535)), uint32_t(nk), groups(wgs, 65535));
        }
    }
    void topk_route(const RouteArgs& a, const Tensor& logits, const Tensor& choice_bias, const Tensor& ids,
                    const Tensor& weights) override {
        TD_ASSERT(a.n_expert <= 512 && a.k <= 64 && a.n_groups <= 64);
        const RoutePush p{f_off(logits),
                          f_stride(logits),
                          choice_bias ? 1u : 0u,
                          choice_bias ? f_off(choice_bias) : 0u,
                          i_off(ids),
                          i_stride(ids),
                          f_off(weights),
                          f_stride(weights),
                          uint32_t(a.n_expert),
                          uint32_t(a.k),
                          uint32_t(a.gating == MoeGating::SOFTMAX          ? 0
                                   : a.gating == MoeGating::SOFTMAX_WEIGHT ? 1
                                                                           : 2),
                          a.norm ? 1u : 0u,
                          uint32_t(a.n_groups),
                          uint32_t(a.n_group_used),
                          a.choose_by_logits ? 1u : 0u,
                          uint32_t(logits.rows),
                          a.scale};
        const DeviceMemory& bias = choice_bias ? mem(choice_bias) : mem(logits);
        dev_.dispatch(dev_.pipeline("topk_route", 4, sizeof p), {{&mem(logits)}, {&bias}, {&mem(ids)}, {&mem(weights)}},
                      &p, groups(logits.rows, 64), 1);
    }
    void add_id(const Tensor& b, const Tensor& ids, const Tensor& y) override {
        const MoeRowsPush p{0, f_off(b),           f_stride(b), i_off(ids),  i_stride(ids),    0,
                            0, uint32_t(ids.cols), f_off(y),    f_stride(y), uint32_t(y.cols), uint32_t(y.rows)};
        dev_.dispatch(dev_.pipeline("moe_rows", 4, sizeof p), {{&mem(b)}, {&mem(ids)}, {&mem(b)}, {&mem(y)}}, &p,
                      groups(y.cols, 64), uint32_t(y.rows));
    }
    void scale_choices(const Tensor& x, const Tensor& weights, const Tensor& y) override {
        const MoeRowsPush p{1,        f_off(x),       f_stride(x),       0,
                            0,        f_off(weights), f_stride(weights), uint32_t(weights.cols),
                            f_off(y), f_stride(y),    uint32_t(y.cols),  uint32_t(y.rows)};
        dev_.dispatch(dev_.pipeline("moe_rows", 4, sizeof p), {{&mem(x)}, {&mem(x)}, {&mem(weights)}, {&mem(y)}}, &p,
                      groups(y.cols, 64), uint32_t(y.rows));
    }
    void moe_sum(const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& b, const Tensor& scale,
                 const Tensor* ws, int n_expert, const Tensor& y) override {
        TD_ASSERT(ids.cols <= 32 && n_expert > 0);
        std::vector<int32_t> held;  // the experts held here: those with a matrix
        for (int e = 0; e < n_expert; e++) held.push_back(ws[e].buf ? 1 : 0);
        const DeviceMemory& hm = dev_.stage(held.data(), held.size() * sizeof(int32_t));
        const MoeSumPush p{f_off(x),
                           f_stride(x),
                           i_off(ids),
                           i_stride(ids),
                           uint32_t(ids.cols),
                           weights ? f_off(weights) : 0u,
                           weights ? f_stride(weights) : 0u,
                           weights ? 1u : 0u,
                           b ? f_off(b) : 0u,
                           b ? f_stride(b) : 0u,
                           b ? 1u : 0u,
                           scale ? f_off(scale) : 0u,
                           scale ? 1u : 0u,
                           f_off(y),
                           f_stride(y),
                           uint32_t(y.cols),
                           uint32_t(y.rows)};
        dev_.dispatch(dev_.pipeline("moe_sum", 7, sizeof p),
                      {{&mem(x)},
                       {&mem(ids)},
                       {weights ? &mem(weights) : &mem(x)},
                       {b ? &mem(b) : &mem(x)},
                       {scale ? &mem(scale) : &mem(x)},
                       {&hm},
                       {&mem(y)}},
                      &p, groups(y.cols, 64), uint32_t(y.rows));
    }
    void gated_add(const Tensor& x, const Tensor& gate_in, const Tensor& gate_w, const Tensor& y) override {
        const GatedPush p{f_off(x),
                          f_stride(x),
                          gate_w ? f_off(gate_in) : 0u,
                          gate_w ? f_stride(gate_in) : 0u,
                          gate_w ? uint32_t(gate_in.cols) : 0u,
                          gate_w ? f_off(gate_w) : 0u,
                          gate_w ? 1u : 0u,
                          f_off(y),
                          f_stride(y),
                          uint32_t(y.cols)};
        dev_.dispatch(dev_.pipeline("gated_add", 4, sizeof p),
                      {{&mem(x)}, {gate_w ? &mem(gate_in) : &mem(x)}, {gate_w ? &mem(gate_w) : &mem(x)}, {&mem(y)}}, &p,
                      uint32_t(y.rows), 1);
    }
    void kv_store(const Tensor& k, const Tensor& v, const int* slots, const Tensor& kc, const Tensor& vc) override {
        const DeviceMemory& sm = dev_.stage(slots, size_t(k.rows) * sizeof(int));
        store(k, sm, kc);
        if (vc) store(v, sm, vc);
    }
    void row_copy(const Tensor& c, int from, int to) override {
        dev_.copy(mem(c), c.offset + size_t(from % c.rows) * c.row_stride, mem(c),
                  c.offset + size_t(to % c.rows) * c.row_stride, row_bytes(c.type, c.cols));
    }
    void attention(const AttnArgs& a, const Tensor& q, const Tensor& out) override {
        TD_ASSERT(a.n_head % a.n_head_kv == 0);
        if (a.head_dim > 256)  // (attention.comp: 4 output dims per lane; MLA's 576-wide latent head needs more)
            throw Error(strprintf("the Vulkan backend's attention takes heads of up to 256 dims, not %d", a.head_dim));
        // every row's tail (the slots of its root path from pos0) in one array, each row's at its offset
        std::vector<int32_t> tails;
        std::vector<std::vector<int32_t>> meta(size_t(a.n_segs));
        for (int64_t r = 0; r < q.rows; r++) {
            int32_t toff = -1;
            if (a.tail && a.tail[r]) {
                const int len = a.pos[r] - a.segs[a.seg[r]].pos0 + 1;
                toff = int32_t(tails.size());
                tails.insert(tails.end(), a.tail[r], a.tail[r] + std::max(0, len));
            }
            meta[size_t(a.seg[r])].insert(meta[size_t(a.seg[r])].end(), {int32_t(r), a.pos[r], a.lo[r], toff});
        }
        if (tails.empty()) tails.push_back(0);
        const DeviceMemory& tm = dev_.stage(tails.data(), tails.size() * sizeof(int32_t));
        for (int s = 0; s < a.n_segs; s++) {  // one dispatch per segment: its cache is its own buffers
            if (meta[size_t(s)].empty()) continue;
            const AttnSegment& g = a.segs[s];
            const DeviceMemory& mm = dev_.stage(meta[size_t(s)].data(), meta[size_t(s)].size() * sizeof(int32_t));
            const AttnPush p{f_off(q),
                             f_stride(q),
                             f_off(out),
                             f_stride(out),
                             u32(g.k.offset, "a cache's offset"),
                             u32(g.k.row_stride, "a row stride"),
                             uint32_t(g.k.rows),
                             uint32_t(wtype(g.k.type)),
                             u32(g.v.offset, "a cache's offset"),
                             u32(g.v.row_stride, "a row stride"),
                             uint32_t(g.v.rows),
                             uint32_t(wtype(g.v.type)),
                             uint32_t(a.n_head),
                             uint32_t(a.n_head_kv),
                             uint32_t(a.head_dim),
                             uint32_t(g.pos0),
                             a.sinks ? 1u : 0u,
                             a.sinks ? f_off(a.sinks) : 0u,
                             a.scale};
            const DeviceMemory& sinks = a.sinks ? mem(a.sinks) : mem(q);
            dev_.dispatch(dev_.pipeline("attention", 7, sizeof p),
                          {{&mem(q)}, {&mem(out)}, {&mem(g.k)}, {&mem(g.v)}, {&mm}, {&tm}, {&sinks}}, &p,
                          uint32_t(meta[size_t(s)].size() / 4), uint32_t(a.n_head));
        }
    }
    void delta_rule(const DeltaArgs& a, const Tensor* m_in, const Tensor* m_out, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& decay, const Tensor& beta, const Tensor& o) override {
        for (int64_t t = 0; t < q.rows; t++) {  // a row at a time, in order: it may start from the previous row's state
            const uint32_t T = uint32_t(t);
            const DeltaPush p{f_off(m_in[t]),
                              f_off(m_out[t]),
                              f_off(q) + T * f_stride(q),
                              f_off(k) + T * f_stride(k),
                              f_off(v) + T * f_stride(v),
                              f_off(decay) + T * f_stride(decay),
                              f_off(beta) + T * f_stride(beta),
                              f_off(o) + T * f_stride(o),
                              uint32_t(a.S),
                              uint32_t(a.n_k_heads),
                              uint32_t(a.n_v_heads),
                              a.grouped ? 1u : 0u};
            dev_.dispatch(dev_.pipeline("delta_rule", 8, sizeof p),
                          {{&mem(m_in[t])},
                           {&mem(m_out[t])},
                           {&mem(q)},
                           {&mem(k)},
                           {&mem(v)},
                           {&mem(decay)},
                           {&mem(beta)},
                           {&mem(o)}},
                          &p, uint32_t(a.n_v_heads), 1);
        }
    }
    void conv1d(int K, bool silu, const Tensor& x, const Tensor& taps, const Tensor* win_in, const Tensor* win_out,
                const Tensor& y) override {
        TD_ASSERT(K >= 2 && K <= 17);
        for (int64_t t = 0; t < x.rows; t++) {  // in order: a row's window may be the previous row's output
            const ConvPush p{f_off(x) + uint32_t(t) * f_stride(x),
                             f_off(taps),
                             f_stride(taps),
                             f_off(win_in[t]),
                             f_off(win_out[t]),
                             f_off(y) + uint32_t(t) * f_stride(y),
                             uint32_t(x.cols),
                             uint32_t(K),
                             silu ? 1u : 0u};
            dev_.dispatch(dev_.pipeline("conv1d", 5, sizeof p),
                          {{&mem(x)}, {&mem(taps)}, {&mem(win_in[t])}, {&mem(win_out[t])}, {&mem(y)}}, &p,
                          groups(x.cols, 64), 1);
        }
    }
    void l2_norm(const Tensor& x, int width, float eps, const Tensor& y) override {
        norm(x, Tensor{}, width, eps, y, true);
    }
    void delta_gates(const Tensor& dt, const Tensor& a, const Tensor& beta, const Tensor& alpha) override {
        const GatesPush p{f_off(dt),    f_off(a),        f_off(beta),         f_stride(beta),
                          f_off(alpha), f_stride(alpha), uint32_t(beta.cols), uint32_t(beta.rows)};
        dev_.dispatch(dev_.pipeline("delta_gates", 4, sizeof p), {{&mem(dt)}, {&mem(a)}, {&mem(beta)}, {&mem(alpha)}},
                      &p, groups(beta.cols, 64), uint32_t(beta.rows));
    }
    void rms_norm_gated(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& z) override {
        norm(x, w, width, eps, x, false);
        rows(GATE_SILU, z, false, x, 0, 0);
    }

private:
    const vk::Pipeline& typed(const char* shader, TensorType t, uint32_t bindings, uint32_t push) {
        if (wtype(t) < 0) throw Error(strprintf("the Vulkan backend has no %s for %s weights", shader, type_name(t)));
        // the matmul shaders' subgroup variants where the device has them (the same bits: matmul_unit.glsl)
        const bool sg = dev_.subgroup_tree() && std::strncmp(shader, "matmul", 6) == 0;
        return dev_.pipeline(strprintf("%s%s_%d", shader, sg ? "_sg" : "", wtype(t)), bindings, push);
    }
    void norm(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& y, bool l2) {
        TD_ASSERT(width > 0 && x.cols % width == 0);
        const NormPush p{f_off(x),
                         f_stride(x),
                         w ? f_off(w) : 0u,
                         f_off(y),
                         f_stride(y),
                         uint32_t(width),
                         uint32_t(x.cols / width),
                         uint32_t(x.rows),
                         w ? 1u : 0u,
                         l2 ? 1u : 0u,
                         eps};
        dev_.dispatch(dev_.pipeline("rms_norm", 3, sizeof p), {{&mem(x)}, {w ? &mem(w) : &mem(x)}, {&mem(y)}}, &p,
                      uint32_t(x.cols / width), uint32_t(x.rows));
    }
    void store(const Tensor& x, const DeviceMemory& slots, const Tensor& c) {
        if (wtype(c.type) < 0 || wtype(c.type) > 4)
            throw Error(strprintf("the Vulkan backend has no %s caches", type_name(c.type)));
        const KvPush p{f_off(x),
                       f_stride(x),
                       u32(c.offset, "a cache's offset"),
                       u32(c.row_stride, "a row stride"),
                       uint32_t(c.rows),
                       uint32_t(wtype(c.type)),
                       uint32_t(c.cols),
                       uint32_t(x.rows)};
        const int64_t per = wtype(c.type) <= 2 ? 1 : 32;
        dev_.dispatch(dev_.pipeline("kv_store", 3, sizeof p), {{&mem(x)}, {&mem(c)}, {&slots}}, &p,
                      groups(c.cols / per, 64), uint32_t(x.rows));
    }
    void rows(RowsMode m, const Tensor& x, bool bcast, const Tensor& y, float s, float c) {
        const RowsPush p{
            m, uint32_t(y.rows), uint32_t(y.cols), f_off(x), f_stride(x), bcast ? 1u : 0u, f_off(y), f_stride(y), s, c};
        dev_.dispatch(dev_.pipeline("rows", 2, sizeof p), {{&mem(x)}, {&mem(y)}}, &p, groups(y.cols, 64),
                      uint32_t(y.rows));
    }

    Device dev_;
    DeviceMemory readback_;  // read()'s host-visible memory (freed before dev_ by the destructor)
};

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(int index) { return std::make_unique<VulkanBackend>(index); }

}  // namespace tandem::backend
