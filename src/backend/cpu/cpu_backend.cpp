// The CPU backend (backend/backend.h): buffers are host memory (a file mapping lent to it is read in place), every
// op runs when it is called, on the kernels of the active SIMD level (backend/cpu/isa.h) and the threads of the
// session's pool. Its ops are the very functions the forward pass calls today (matmul and its packed layouts,
// the flash attention tiles, the delta rule kernel, the norms, RoPE, the gated activations, the router), so a pass
// written on the seam computes the same bits as the pass that calls them directly.
// The scalar row functions of its norms, RoPE, activations and router are backend/cpu/row_ops.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_q8.h"
#include "backend/cpu/row_ops.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/session.h"  // kv_cache_type_supported
#include "tandem/thread_pool.h"

namespace tandem::backend {

namespace {

class HostBuffer : public Buffer {
public:
    HostBuffer(size_t n) : own_(new uint8_t[n ? n : 1]()), p_(own_.get()), n_(n) {}
    HostBuffer(const void* p, size_t n) : p_(static_cast<uint8_t*>(const_cast<void*>(p))), n_(n) {}
    HostBuffer() : p_(nullptr), n_(SIZE_MAX) {}  // the whole address space: offsets are addresses
    size_t size() const override { return n_; }
    uint8_t* at(size_t off) const { return p_ ? p_ + off : reinterpret_cast<uint8_t*>(uintptr_t(off)); }
    // the interleaved copies of the weights placed in this buffer
    std::vector<std::unique_ptr<uint8_t[]>> packed;

private:
    std::unique_ptr<uint8_t[]> own_;
    uint8_t* p_;
    size_t n_;
};

HostBuffer& host(const Tensor& t) {
    TD_ASSERT(t.buf);
    return static_cast<HostBuffer&>(*t.buf);
}
uint8_t* host_ptr(const Tensor& t) { return host(t).at(t.offset); }
float* f32(const Tensor& t) {
    TD_ASSERT(t.type == TensorType::F32);
    return reinterpret_cast<float*>(host_ptr(t));
}
// a contiguous F32 tensor (row_stride == cols floats): the layout activations have
int32_t* ids_of(const Tensor& t) {  // an (n, k) I32 tensor of expert choices, contiguous
    TD_ASSERT(t.type == TensorType::I32 && t.row_stride == size_t(t.cols) * sizeof(int32_t));
    return reinterpret_cast<int32_t*>(host_ptr(t));
}
// row r of an F32 tensor (a column slice's too)
float* row(const Tensor& t, int64_t r) {
    TD_ASSERT(t.type == TensorType::F32);
    return reinterpret_cast<float*>(host_ptr(t) + size_t(r) * t.row_stride);
}
float silu_of(float x) { return x / (1.0f + std::exp(-x)); }  // the scalar formula (conv1d, rms_norm_gated)
float* rows_f32(const Tensor& t) {
    TD_ASSERT(t.type == TensorType::F32 && t.row_stride == size_t(t.cols) * sizeof(float));
    return f32(t);
}

class CpuBackend : public Backend {
public:
    explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}

    std::string name() const override { return std::string("cpu (") + cpu_level_name(isa().level) + ")"; }

    bool supports(Op op, TensorType type) const override {
        switch (op) {
            case Op::GET_ROWS:
            case Op::MATMUL:
            case Op::MATMUL_ID: return !is_integer_type(type);
            case Op::KV_STORE:
            case Op::ROW_COPY:
            case Op::ATTENTION: return kv_cache_type_supported(type);
            default: return type == TensorType::F32;
        }
    }

    std::unique_ptr<Buffer> alloc(size_t n) override { return std::make_unique<HostBuffer>(n); }
    Buffer* host_memory() override { return &host_; }
    std::unique_ptr<Buffer> map_host(const void* p, size_t n) override { return std::make_unique<HostBuffer>(p, n); }

    // Q8_0 / Q4_0 / K-quant matrices get the level's interleaved copy (Tensor::extra; held by w's buffer) where the
    // level has a packed kernel; the rest stay as they are.
    void place_weight(Tensor& w) override {
        if (w.extra || !isa().matmul_packed || !packable(w.type, w.rows, w.cols)) return;
        auto copy = std::unique_ptr<uint8_t[]>(new uint8_t[packed_bytes(w.type, w.rows, w.cols)]);
        repack_rows(w.type, host_ptr(w), w.row_stride, w.rows, w.cols, copy.get());
        w.extra = copy.get();
        host(w).packed.push_back(std::move(copy));
    }

    void write(const Tensor& dst, const void* src) override { copy_rows(dst, static_cast<const uint8_t*>(src)); }
    void read(const Tensor& src, void* dst) override {
        const size_t rb = row_bytes(src.type, src.cols);
        for (int64_t r = 0; r < src.rows; r++)
            std::memcpy(static_cast<uint8_t*>(dst) + size_t(r) * rb, host_ptr(src) + size_t(r) * src.row_stride, rb);
    }

    void get_rows(const Tensor& table, const int32_t* ids, int n, const Tensor& y) override {
        const uint8_t* pk = static_cast<const uint8_t*>(table.extra);
        for (int t = 0; t < n; t++) {
            float* out = row(y, t);
            if (pk) dequantize_packed_row(table.type, pk, table.cols, ids[t], out);
            else dequantize_row_ref(table.type, host_ptr(table) + size_t(ids[t]) * table.row_stride, out, table.cols);
        }
    }

    void matmul(const Tensor& w, const Tensor& x, const Tensor& y) override {
        TD_ASSERT(x.cols == w.cols && y.cols == w.rows && x.rows == y.rows);
        tandem::matmul(pool_, view(w), rows_f32(x), int(x.rows), rows_f32(y));
    }
    void matmul_multi(const Tensor* ws, const Tensor* ys, int count, const Tensor& x) override {
        TD_ASSERT(count <= 4);
        WeightView wv[4];
        float* yp[4];
        for (int i = 0; i < count; i++) {
            TD_ASSERT(x.cols == ws[i].cols && ys[i].cols == ws[i].rows && ys[i].rows == x.rows);
            wv[i] = view(ws[i]);
            yp[i] = rows_f32(ys[i]);
        }
        matmul_shared_input(pool_, wv, yp, count, rows_f32(x), int(x.rows));
    }

    void matmul_id(const Tensor* ws, int n_expert, const Tensor& ids, const Tensor& x, bool x_per_choice,
                   const Tensor& y) override {
        // The choices of each expert gathered (in row order), one job per expert that is used, one fork-join for
        // all: each row's product is the kernel's for that row alone.
        const int64_t k = ids.cols, n = ids.rows, C = x.cols, R = y.cols;
        const int32_t* id = ids_of(ids);
        std::vector<std::vector<int>>& of = id_rows_;
        of.resize(static_cast<size_t>(n_expert));
        for (auto& v : of) v.clear();
        for (int64_t i = 0; i < n * k; i++) {
            TD_ASSERT(id[i] >= 0 && id[i] < n_expert);
            if (ws[id[i]].buf) of[size_t(id[i])].push_back(int(i));
        }
        std::vector<size_t> off(static_cast<size_t>(n_expert) + 1, 0);
        for (int e = 0; e < n_expert; e++) off[size_t(e) + 1] = off[size_t(e)] + of[size_t(e)].size();
        gx_.resize(off.back() * size_t(C));
        gy_.resize(off.back() * size_t(R));
        const uint8_t* xs = host_ptr(x);  // (rows may be strided: MLA's heads)
        TD_ASSERT(x.type == TensorType::F32 && y.type == TensorType::F32);
        std::vector<MatmulJob> jobs;
        for (int e = 0; e < n_expert; e++) {
            if (of[size_t(e)].empty()) continue;
            for (size_t j = 0; j < of[size_t(e)].size(); j++) {
                const int i = of[size_t(e)][j];
                const int64_t src = x_per_choice ? i : i / k;
                std::copy_n(reinterpret_cast<const float*>(xs + size_t(src) * x.row_stride), size_t(C),
                            &gx_[(off[size_t(e)] + j) * size_t(C)]);
            }
            jobs.push_back({view(ws[e]), &gx_[off[size_t(e)] * size_t(C)], int(of[size_t(e)].size()),
                            &gy_[off[size_t(e)] * size_t(R)]});
        }
        matmul_jobs(pool_, jobs.data(), int(jobs.size()));
        uint8_t* ys = host_ptr(y);
        for (int e = 0; e < n_expert; e++)
            for (size_t j = 0; j < of[size_t(e)].size(); j++)
                std::copy_n(&gy_[(off[size_t(e)] + j) * size_t(R)], size_t(R),
                            reinterpret_cast<float*>(ys + size_t(of[size_t(e)][j]) * y.row_stride));
    }

    void rms_norm(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& y) override {
        TD_ASSERT(x.cols % width == 0 && y.cols == x.cols && y.rows == x.rows);
        const float* wp = w ? f32(w) : nullptr;
        for (int64_t t = 0; t < x.rows; t++) {  // (rows may be strided: a slice of each row)
            const float* xp = reinterpret_cast<const float*>(host_ptr(x) + size_t(t) * x.row_stride);
            float* yp = reinterpret_cast<float*>(host_ptr(y) + size_t(t) * y.row_stride);
            for (int64_t at = 0; at < x.cols; at += width) rmsnorm(xp + at, wp, yp + at, width, eps);
        }
    }

    void rope(const RopeArgs& a, const int* pos, const Tensor& x) override {
        const int half = a.n_rot / 2;
        const float *cos0 = f32(a.cos), *sin0 = f32(a.sin);
        float* xp = rows_f32(x);
        for (int64_t t = 0; t < x.rows; t++) {
            const float* cs = cos0 + size_t(pos[t]) * size_t(half);
            const float* sn = sin0 + size_t(pos[t]) * size_t(half);
            float* row = xp + size_t(t) * size_t(x.cols);
            for (int h = 0; h < a.n_head; h++)
                rope_head(row + size_t(h) * size_t(a.head_dim) + size_t(a.offset), cs, sn, a.n_rot, a.style, a.mscale);
        }
    }

    void add(const Tensor& x, float s, const Tensor& y) override {
        const size_t n = size_t(y.rows) * size_t(y.cols);
        const float* xs = rows_f32(x);
        float* ys = rows_f32(y);
        if (s == 1.0f)
            for (size_t i = 0; i < n; i++) ys[i] += xs[i];
        else
            for (size_t i = 0; i < n; i++) ys[i] += s * xs[i];
    }
    void add_row(const Tensor& b, const Tensor& y) override {
        const float* bs = f32(b);
        float* yp = rows_f32(y);
        for (int64_t t = 0; t < y.rows; t++) {
            float* r = yp + size_t(t) * size_t(y.cols);
            for (int64_t i = 0; i < y.cols; i++) r[i] += bs[i];
        }
    }
    void mul_row(const Tensor& w, const Tensor& y) override {
        const float* ws = f32(w);
        float* yp = rows_f32(y);
        for (int64_t t = 0; t < y.rows; t++) {
            float* r = yp + size_t(t) * size_t(y.cols);
            for (int64_t i = 0; i < y.cols; i++) r[i] *= ws[i];
        }
    }
    void scale(float s, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++) {  // (a column slice too)
            float* ys = row(y, t);
            for (int64_t i = 0; i < y.cols; i++) ys[i] *= s;
        }
    }
    void glu(Glu kind, const Tensor& gate, const Tensor& up) override {
        const int64_t n = gate.rows * gate.cols;
        switch (kind) {
            case Glu::SILU: silu_mul(rows_f32(gate), rows_f32(up), n); break;
            case Glu::GELU_TANH: gelu_tanh_mul(rows_f32(gate), rows_f32(up), n); break;
            case Glu::SWIGLU_OAI: swiglu_oai(rows_f32(gate), rows_f32(up), n); break;
            case Glu::SIGMOID: {
                float* g = rows_f32(gate);
                const float* u = rows_f32(up);
                for (int64_t i = 0; i < n; i++) g[i] = u[i] * (1.0f / (1.0f + std::exp(-g[i])));
                break;
            }
        }
    }
    void softcap(float div, float c, const Tensor& y) override {
        float* ys = rows_f32(y);
        const size_t n = size_t(y.rows) * size_t(y.cols);
        if (div != 1.0f)
            for (size_t i = 0; i < n; i++) ys[i] /= div;
        if (c > 0)
            for (size_t i = 0; i < n; i++) ys[i] = c * std::tanh(ys[i] / c);
    }
    void topk_route(const RouteArgs& a, const Tensor& logits, const Tensor& choice_bias, const Tensor& ids,
                    const Tensor& weights) override {
        std::vector<int> sel(static_cast<size_t>(a.k));
        for (int64_t t = 0; t < logits.rows; t++) {
            moe_select(a, rows_f32(logits) + size_t(t) * size_t(a.n_expert), choice_bias ? f32(choice_bias) : nullptr,
                       sel.data(), rows_f32(weights) + size_t(t) * size_t(a.k));
            for (int j = 0; j < a.k; j++) ids_of(ids)[size_t(t) * size_t(a.k) + size_t(j)] = sel[size_t(j)];
        }
    }
    void add_id(const Tensor& b, const Tensor& ids, const Tensor& y) override {
        const int32_t* id = ids_of(ids);
        float* yp = rows_f32(y);
        for (int64_t i = 0; i < y.rows; i++) {
            const float* bp = rows_f32(b) + size_t(id[i]) * size_t(y.cols);
            float* r = yp + size_t(i) * size_t(y.cols);
            for (int64_t c = 0; c < y.cols; c++) r[c] += bp[c];
        }
    }
    void scale_choices(const Tensor& x, const Tensor& weights, const Tensor& y) override {
        const int64_t k = weights.cols, C = y.cols;
        const float *xp = rows_f32(x), *wp = rows_f32(weights);
        float* yp = rows_f32(y);
        for (int64_t i = 0; i < y.rows; i++)
            for (int64_t c = 0; c < C; c++) yp[size_t(i * C + c)] = xp[size_t((i / k) * C + c)] * wp[size_t(i)];
    }
    void moe_sum(const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& b, const Tensor& scale,
                 const Tensor* ws, int n_expert, const Tensor& y) override {
        const int64_t k = ids.cols, C = y.cols;
        const int32_t* id = ids_of(ids);
        const float *xp = rows_f32(x), *wp = weights ? rows_f32(weights) : nullptr;
        const float *bp = b ? rows_f32(b) : nullptr, *sp = scale ? f32(scale) : nullptr;
        std::vector<std::pair<int32_t, int64_t>> order(static_cast<size_t>(k));  // (expert, choice)
        for (int64_t t = 0; t < y.rows; t++) {
            float* o = rows_f32(y) + size_t(t * C);
            std::fill(o, o + C, 0.0f);
            for (int64_t j = 0; j < k; j++) order[size_t(j)] = {id[t * k + j], j};
            std::sort(order.begin(), order.end());
            for (const auto& [e, j] : order) {
                TD_ASSERT(e >= 0 && e < n_expert);
                if (!ws[e].buf) continue;
                float w = wp ? wp[t * k + j] : 1.0f;
                if (sp) w *= sp[e];
                const float* xi = xp + size_t((t * k + j) * C);
                const float* be = bp ? bp + size_t(e) * size_t(C) : nullptr;
                for (int64_t c = 0; c < C; c++) o[c] += w * (xi[c] + (be ? be[c] : 0.0f));
            }
        }
    }
    void gated_add(const Tensor& x, const Tensor& gate_in, const Tensor& gate_w, const Tensor& y) override {
        const int64_t C = y.cols;
        const float* xp = rows_f32(x);
        float* yp = rows_f32(y);
        for (int64_t t = 0; t < y.rows; t++) {
            const float g = gate_w ? 1.0f / (1.0f + std::exp(-dot_f32(rows_f32(gate_in) + size_t(t * gate_in.cols),
                                                                      f32(gate_w), gate_in.cols)))
                                   : 1.0f;
            for (int64_t c = 0; c < C; c++) yp[size_t(t * C + c)] += g * xp[size_t(t * C + c)];
        }
    }
    void kv_store(const Tensor& k, const Tensor& v, const int* slots, const Tensor& kc, const Tensor& vc) override {
        for (int64_t t = 0; t < k.rows; t++) {
            quantize_row_ref(kc.type, rows_f32(k) + size_t(t) * size_t(k.cols), slot_row(kc, slots[t]), kc.cols);
            if (vc)
                quantize_row_ref(vc.type, rows_f32(v) + size_t(t) * size_t(v.cols), slot_row(vc, slots[t]), vc.cols);
        }
    }
    void row_copy(const Tensor& c, int from, int to) override {
        std::memcpy(slot_row(c, to), slot_row(c, from), row_bytes(c.type, c.cols));
    }
    void attention(const AttnArgs& a, const Tensor& q, const Tensor& out) override {
        std::vector<KvRows>& kv = attn_kv_;  // (kept between calls: no allocation per layer)
        std::vector<AttnRow>& rows = attn_rows_;
        kv.resize(static_cast<size_t>(a.n_segs));
        rows.resize(static_cast<size_t>(q.rows));
        for (int s = 0; s < a.n_segs; s++) kv[size_t(s)] = kv_rows(a.segs[s].k, a.segs[s].v, a.n_head_kv);
        for (int64_t r = 0; r < q.rows; r++)
            rows[size_t(r)] = {kv[size_t(a.seg[r])], a.pos[r], a.lo[r], a.segs[a.seg[r]].pos0,
                               a.tail ? a.tail[r] : nullptr};
        const AttnShape sh{a.n_head, a.n_head_kv, a.head_dim, a.scale, a.sinks ? f32(a.sinks) : nullptr};
        const float* qp = rows_f32(q);
        float* op = rows_f32(out);
        if (a.n_head / a.n_head_kv <= 64) return tandem::attention(pool_, sh, rows, qp, op, attn_scratch_);
        // More query heads per KV head (MLA's one latent head for DeepSeek V3's 128): groups of 64 heads, their
        // query and output rows gathered to and from the pass's rows.
        TD_ASSERT(a.n_head_kv == 1);
        const size_t n = rows.size(), hd = size_t(a.head_dim), qd = size_t(a.n_head) * hd;
        for (int h0 = 0; h0 < a.n_head; h0 += 64) {
            const int nh = std::min(64, a.n_head - h0);
            heads_q_.resize(n * size_t(nh) * hd);
            heads_o_.resize(heads_q_.size());
            for (size_t r = 0; r < n; r++)
                std::copy_n(qp + r * qd + size_t(h0) * hd, size_t(nh) * hd, &heads_q_[r * size_t(nh) * hd]);
            AttnShape part = sh;
            part.n_head = nh;
            if (sh.sinks) part.sinks = sh.sinks + h0;
            tandem::attention(pool_, part, rows, heads_q_.data(), heads_o_.data(), attn_scratch_);
            for (size_t r = 0; r < n; r++)
                std::copy_n(&heads_o_[r * size_t(nh) * hd], size_t(nh) * hd, op + r * qd + size_t(h0) * hd);
        }
    }
    void delta_rule(const DeltaArgs& a, const Tensor* m_in, const Tensor* m_out, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& decay, const Tensor& beta, const Tensor& o) override {
        const int S = a.S, hv = a.n_v_heads, hk = a.n_k_heads, r = hv / hk;
        const size_t mat = size_t(S) * size_t(S);
        // value head by value head, the rows of a head in order (a row may start from the one before it)
        pool_.parallel_for(size_t(hv), [&](size_t h0, size_t h1, int) {
            for (size_t h = h0; h < h1; h++) {
                const size_t kh = a.grouped ? h / size_t(r) : h % size_t(hk);
                for (int64_t t = 0; t < q.rows; t++)
                    tandem::delta_rule(f32(m_in[t]) + h * mat, f32(m_out[t]) + h * mat, row(q, t) + kh * size_t(S),
                                       row(k, t) + kh * size_t(S), row(v, t) + h * size_t(S), row(decay, t)[h],
                                       row(beta, t)[h], S, row(o, t) + h * size_t(S));
            }
        });
    }
    void conv1d(int K, bool silu, const Tensor& x, const Tensor& taps, const Tensor* win_in, const Tensor* win_out,
                const Tensor& y) override {
        TD_ASSERT(K >= 2 && taps.cols == K && taps.rows == x.cols);
        const size_t C = size_t(x.cols);
        const float* tp = rows_f32(taps);
        // a range of channels per thread, rows in order (each reads the window the row before it wrote; in place
        // when they share a buffer), the channels of a row contiguous in the inner loops
        pool_.parallel_for(C, [&](size_t c0, size_t c1, int) {
            const size_t nc = c1 - c0;
            for (int64_t t = 0; t < x.rows; t++) {
                const float* win = f32(win_in[t]) + c0;
                float* wout = f32(win_out[t]) + c0;
                const float* xt = row(x, t) + c0;
                float* yt = row(y, t) + c0;
                for (size_t c = 0; c < nc; c++) {
                    const float* tc = tp + (c0 + c) * size_t(K);
                    float acc = tc[K - 1] * xt[c];
                    for (int j = 0; j < K - 1; j++) acc += tc[j] * win[size_t(j) * C + c];
                    yt[c] = acc;
                }
                for (int j = 0; j + 1 < K - 1; j++)  // the window moves up one row (forward: safe in place)
                    std::copy_n(win + size_t(j + 1) * C, nc, wout + size_t(j) * C);
                std::copy_n(xt, nc, wout + size_t(K - 2) * C);
                if (silu)
                    for (size_t c = 0; c < nc; c++) yt[c] = silu_of(yt[c]);
            }
        });
    }
    void l2_norm(const Tensor& x, int width, float eps, const Tensor& y) override {
        TD_ASSERT(x.cols % width == 0 && y.cols == x.cols && y.rows == x.rows);
        for (int64_t t = 0; t < x.rows; t++)
            for (int64_t at = 0; at < x.cols; at += width) {
                const float* xp = row(x, t) + at;
                float* yp = row(y, t) + at;
                double ss = 0;
                for (int i = 0; i < width; i++) ss += double(xp[i]) * double(xp[i]);
                const float r = 1.0f / std::sqrt(float(ss / width) + eps / float(width)) / std::sqrt(float(width));
                for (int i = 0; i < width; i++) yp[i] = xp[i] * r;
            }
    }
    void delta_gates(const Tensor& dt, const Tensor& a, const Tensor& beta, const Tensor& alpha) override {
        const float *dp = f32(dt), *ap = f32(a);
        for (int64_t t = 0; t < beta.rows; t++) {
            float *b = row(beta, t), *al = row(alpha, t);
            for (int64_t h = 0; h < beta.cols; h++) {
                b[h] = 1.0f / (1.0f + std::exp(-b[h]));
                const float x = al[h] + dp[h], sp = x > 20.0f ? x : std::log1p(std::exp(x));  // ggml's threshold
                al[h] = std::exp(sp * ap[h]);
            }
        }
    }
    void rms_norm_gated(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& z) override {
        const float* wp = w ? f32(w) : nullptr;
        for (int64_t t = 0; t < x.rows; t++)
            for (int64_t at = 0; at < x.cols; at += width) {
                float* o = row(x, t) + at;
                const float* zp = row(z, t) + at;
                rmsnorm(o, wp, o, width, eps);
                for (int j = 0; j < width; j++) o[j] *= silu_of(zp[j]);
            }
    }
    void copy(const Tensor& x, const Tensor& y) override {
        TD_ASSERT(x.rows == y.rows && x.cols == y.cols);
        for (int64_t r = 0; r < x.rows; r++)
            std::copy_n(reinterpret_cast<const float*>(host_ptr(x) + size_t(r) * x.row_stride), size_t(x.cols),
                        reinterpret_cast<float*>(host_ptr(y) + size_t(r) * y.row_stride));
    }

private:
    ThreadPool& pool_;
    HostBuffer host_;  // host_memory()
    std::vector<float> gx_, gy_, attn_scratch_, heads_q_, heads_o_;
    std::vector<KvRows> attn_kv_;
    std::vector<AttnRow> attn_rows_;
    std::vector<std::vector<int>> id_rows_;  // matmul_id's choices of each expert

    static WeightView view(const Tensor& w) {
        return WeightView{host_ptr(w), w.type, w.cols, w.rows, w.row_stride, static_cast<const uint8_t*>(w.extra)};
    }
    static uint8_t* slot_row(const Tensor& c, int slot) {
        return host_ptr(c) + size_t(slot < c.rows ? slot : slot % c.rows) * c.row_stride;
    }
    void copy_rows(const Tensor& dst, const uint8_t* src) {
        const size_t rb = row_bytes(dst.type, dst.cols);
        for (int64_t r = 0; r < dst.rows; r++)
            std::memcpy(host_ptr(dst) + size_t(r) * dst.row_stride, src + size_t(r) * rb, rb);
    }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }

}  // namespace tandem::backend

namespace tandem {

KvRows kv_rows(const backend::Tensor& k, const backend::Tensor& v, int n_head_kv) {
    return {backend::host_ptr(k),
            backend::host_ptr(v),
            k.row_stride,
            v.row_stride,
            row_bytes(k.type, k.cols) / size_t(n_head_kv),
            row_bytes(v.type, v.cols) / size_t(n_head_kv),
            int(k.rows),
            k.type,
            v.type};
}

}  // namespace tandem
