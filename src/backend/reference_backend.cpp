// The scalar reference backend: every op of backend/backend.h computed as its contract says, one row and one
// element at a time, in double precision where it sums, from the formats' own (de)quantization (quant/quant.h)
// and nothing of a SIMD level. What the CPU's ops (and a GPU's shaders) are tested against, at named tolerances
// (tests/test_backend.cpp); never used to run a model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "quant/quant.h"
#include "tandem/error.h"

namespace tandem::backend {

namespace {

class RefBuffer : public Buffer {
public:
    explicit RefBuffer(size_t n) : own_(n), p_(own_.data()), n_(n) {}
    RefBuffer(const void* p, size_t n) : p_(static_cast<uint8_t*>(const_cast<void*>(p))), n_(n) {}
    size_t size() const override { return n_; }
    uint8_t* ref_at(size_t off) const { return p_ + off; }

private:
    std::vector<uint8_t> own_;
    uint8_t* p_;
    size_t n_;
};

uint8_t* ref_bytes(const Tensor& t) { return static_cast<RefBuffer&>(*t.buf).ref_at(t.offset); }
// element (r, c) of an F32 tensor
float& ref_at(const Tensor& t, int64_t r, int64_t c) {
    return reinterpret_cast<float*>(ref_bytes(t) + size_t(r) * t.row_stride)[c];
}
std::vector<float> ref_row(const Tensor& t, int64_t r) {
    std::vector<float> out(static_cast<size_t>(t.cols));
    dequantize_row_ref(t.type, ref_bytes(t) + size_t(r) * t.row_stride, out.data(), t.cols);
    return out;
}
int32_t& ref_id(const Tensor& ids, int64_t i) {  // choice i (row i / k, column i % k) of an (n, k) I32 tensor
    TD_ASSERT(ids.type == TensorType::I32);
    return reinterpret_cast<int32_t*>(ref_bytes(ids) + size_t(i / ids.cols) * ids.row_stride)[i % ids.cols];
}
int64_t ref_slot_row(const Tensor& c, int slot) { return slot < c.rows ? slot : slot % c.rows; }

class ReferenceBackend : public Backend {
public:
    std::string name() const override { return "reference"; }
    bool supports(Op op, TensorType type) const override {
        (void)op;
        return !is_integer_type(type);
    }
    std::unique_ptr<Buffer> alloc(size_t n) override { return std::make_unique<RefBuffer>(n); }
    std::unique_ptr<Buffer> map_host(const void* p, size_t n) override { return std::make_unique<RefBuffer>(p, n); }
    void write(const Tensor& dst, const void* src) override {
        const size_t rb = row_bytes(dst.type, dst.cols);
        for (int64_t r = 0; r < dst.rows; r++)
            std::memcpy(ref_bytes(dst) + size_t(r) * dst.row_stride, static_cast<const uint8_t*>(src) + size_t(r) * rb,
                        rb);
    }
    void read(const Tensor& src, void* dst) override {
        const size_t rb = row_bytes(src.type, src.cols);
        for (int64_t r = 0; r < src.rows; r++)
            std::memcpy(static_cast<uint8_t*>(dst) + size_t(r) * rb, ref_bytes(src) + size_t(r) * src.row_stride, rb);
    }

    void get_rows(const Tensor& table, const int32_t* ids, int n, const Tensor& y) override {
        for (int t = 0; t < n; t++) {
            const std::vector<float> r = ref_row(table, ids[t]);
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) = r[size_t(c)];
        }
    }
    void matmul(const Tensor& w, const Tensor& x, const Tensor& y) override {
        for (int64_t o = 0; o < w.rows; o++) {
            const std::vector<float> wr = ref_row(w, o);
            for (int64_t t = 0; t < x.rows; t++) {
                double s = 0;
                for (int64_t c = 0; c < w.cols; c++) s += double(wr[size_t(c)]) * double(ref_at(x, t, c));
                ref_at(y, t, o) = float(s);
            }
        }
    }
    void matmul_id(const Tensor* ws, int n_expert, const Tensor& ids, const Tensor& x, bool x_per_choice,
                   const Tensor& y) override {
        const int64_t k = ids.cols, n = ids.rows;
        for (int64_t i = 0; i < n * k; i++) {
            const int32_t e = ref_id(ids, i);
            TD_ASSERT(e >= 0 && e < n_expert);
            const Tensor& w = ws[e];
            if (!w.buf) continue;
            const int64_t src = x_per_choice ? i : i / k;
            for (int64_t o = 0; o < w.rows; o++) {
                const std::vector<float> wr = ref_row(w, o);
                double s = 0;
                for (int64_t c = 0; c < w.cols; c++) s += double(wr[size_t(c)]) * double(ref_at(x, src, c));
                ref_at(y, i, o) = float(s);
            }
        }
    }
    void rms_norm(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& y) override {
        for (int64_t t = 0; t < x.rows; t++)
            for (int64_t c0 = 0; c0 < x.cols; c0 += width) {
                double ss = 0;
                for (int i = 0; i < width; i++) ss += double(ref_at(x, t, c0 + i)) * double(ref_at(x, t, c0 + i));
                const double inv = 1.0 / std::sqrt(ss / width + double(eps));
                for (int i = 0; i < width; i++)
                    ref_at(y, t, c0 + i) =
                        float(double(ref_at(x, t, c0 + i)) * inv * (w ? double(ref_at(w, 0, i)) : 1.0));
            }
    }
    void rope(const RopeArgs& a, const int* pos, const Tensor& x) override {
        const int half = a.n_rot / 2;
        for (int64_t t = 0; t < x.rows; t++)
            for (int h = 0; h < a.n_head; h++) {
                const int64_t base = int64_t(h) * a.head_dim + a.offset;
                for (int i = 0; i < half; i++) {
                    const double c = double(ref_at(a.cos, pos[t], i)) * a.mscale,
                                 s = double(ref_at(a.sin, pos[t], i)) * a.mscale;
                    const int64_t i0 = a.style == RopeStyle::NORM ? base + 2 * i : base + i;
                    const int64_t i1 = a.style == RopeStyle::NORM ? base + 2 * i + 1 : base + i + half;
                    const double x0 = ref_at(x, t, i0), x1 = ref_at(x, t, i1);
                    ref_at(x, t, i0) = float(x0 * c - x1 * s);
                    ref_at(x, t, i1) = float(x0 * s + x1 * c);
                }
            }
    }
    void add(const Tensor& x, float s, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) += s * ref_at(x, t, c);
    }
    void add_row(const Tensor& b, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) += ref_at(b, 0, c);
    }
    void mul_row(const Tensor& w, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) *= ref_at(w, 0, c);
    }
    void scale(float s, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) *= s;
    }
    void glu(Glu kind, const Tensor& gate, const Tensor& up) override {
        for (int64_t t = 0; t < gate.rows; t++)
            for (int64_t c = 0; c < gate.cols; c++) {
                const double g = ref_at(gate, t, c), u = ref_at(up, t, c);
                double r = 0;
                switch (kind) {
                    case Glu::SILU: r = g / (1.0 + std::exp(-g)) * u; break;
                    case Glu::GELU_TANH:
                        r = 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
                        break;
                    case Glu::SIGMOID: r = u / (1.0 + std::exp(-g)); break;
                    case Glu::SWIGLU_OAI: {
                        const double gc = std::min(g, 7.0), uc = std::clamp(u, -7.0, 7.0);
                        r = gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0);
                        break;
                    }
                }
                ref_at(gate, t, c) = float(r);
            }
    }
    void softcap(float div, float c, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++)
            for (int64_t i = 0; i < y.cols; i++) {
                const double v = double(ref_at(y, t, i)) / div;
                ref_at(y, t, i) = float(c > 0 ? c * std::tanh(v / c) : v);
            }
    }
    void topk_route(const RouteArgs& a, const Tensor& logits, const Tensor& choice_bias, const Tensor& ids,
                    const Tensor& weights) override {
        const int ne = a.n_expert, k = a.k;
        for (int64_t t = 0; t < logits.rows; t++) {
            std::vector<double> lg(static_cast<size_t>(ne)), prob(lg), score(lg);
            for (int e = 0; e < ne; e++) lg[size_t(e)] = ref_at(logits, t, e);
            const double mx = *std::max_element(lg.begin(), lg.end());
            double sum = 0;
            for (double v : lg) sum += std::exp(v - mx);
            for (int e = 0; e < ne; e++)
                prob[size_t(e)] = a.gating == MoeGating::SIGMOID   ? 1.0 / (1.0 + std::exp(-lg[size_t(e)]))
                                  : a.gating == MoeGating::SOFTMAX ? std::exp(lg[size_t(e)] - mx) / sum
                                                                   : lg[size_t(e)];
            for (int e = 0; e < ne; e++)
                score[size_t(e)] = (a.choose_by_logits ? lg[size_t(e)] : prob[size_t(e)]) +
                                   (choice_bias ? double(ref_at(choice_bias, 0, e)) : 0.0);
            if (a.n_groups > 1) {  // only the experts of the n_group_used groups of best top-two sums
                const int per = ne / a.n_groups;
                std::vector<std::pair<double, int>> gs;
                for (int g = 0; g < a.n_groups; g++) {
                    std::vector<double> v(score.begin() + g * per, score.begin() + (g + 1) * per);
                    std::sort(v.rbegin(), v.rend());
                    gs.push_back({per > 1 ? v[0] + v[1] : v[0], g});
                }
                std::stable_sort(gs.begin(), gs.end(), [](auto& x, auto& y) { return x.first > y.first; });
                for (size_t j = size_t(a.n_group_used); j < gs.size(); j++)
                    for (int e = gs[j].second * per; e < (gs[j].second + 1) * per; e++) score[size_t(e)] = -INFINITY;
            }
            std::vector<int> idx(static_cast<size_t>(ne));
            std::iota(idx.begin(), idx.end(), 0);
            std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return score[size_t(x)] > score[size_t(y)]; });
            std::vector<double> w(static_cast<size_t>(k));
            double wsum = 0;
            for (int j = 0; j < k; j++) wsum += std::exp(lg[size_t(idx[size_t(j)])] - lg[size_t(idx[0])]);
            for (int j = 0; j < k; j++)
                w[size_t(j)] = a.gating == MoeGating::SOFTMAX_WEIGHT
                                   ? std::exp(lg[size_t(idx[size_t(j)])] - lg[size_t(idx[0])]) / wsum
                                   : prob[size_t(idx[size_t(j)])];
            if (a.norm) {
                const double s = std::max(std::accumulate(w.begin(), w.end(), 0.0), 6.103515625e-5);
                for (double& v : w) v /= s;
            }
            for (int j = 0; j < k; j++) {
                ref_id(ids, t * k + j) = idx[size_t(j)];
                ref_at(weights, t, j) = float(a.scale != 0 ? w[size_t(j)] * a.scale : w[size_t(j)]);
            }
        }
    }
    void add_id(const Tensor& b, const Tensor& ids, const Tensor& y) override {
        for (int64_t i = 0; i < y.rows; i++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, i, c) += ref_at(b, ref_id(ids, i), c);
    }
    void scale_choices(const Tensor& x, const Tensor& weights, const Tensor& y) override {
        const int64_t k = weights.cols;
        for (int64_t i = 0; i < y.rows; i++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, i, c) = ref_at(x, i / k, c) * ref_at(weights, i / k, i % k);
    }
    void moe_sum(const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& b, const Tensor& scale,
                 const Tensor* ws, int n_expert, const Tensor& y) override {
        const int64_t k = ids.cols;
        for (int64_t t = 0; t < y.rows; t++) {
            std::vector<std::pair<int32_t, int64_t>> order;  // (expert, choice)
            for (int64_t j = 0; j < k; j++) order.push_back({ref_id(ids, t * k + j), j});
            std::sort(order.begin(), order.end());
            for (int64_t c = 0; c < y.cols; c++) {
                double s = 0;
                for (const auto& [e, j] : order) {
                    TD_ASSERT(e >= 0 && e < n_expert);
                    if (!ws[e].buf) continue;
                    const double w =
                        (weights ? double(ref_at(weights, t, j)) : 1.0) * (scale ? double(ref_at(scale, 0, e)) : 1.0);
                    s += w * (double(ref_at(x, t * k + j, c)) + (b ? double(ref_at(b, e, c)) : 0.0));
                }
                ref_at(y, t, c) = float(s);
            }
        }
    }
    void gated_add(const Tensor& x, const Tensor& gate_in, const Tensor& gate_w, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++) {
            double g = 1.0;
            if (gate_w) {
                double d = 0;
                for (int64_t c = 0; c < gate_in.cols; c++) d += double(ref_at(gate_in, t, c)) * ref_at(gate_w, 0, c);
                g = 1.0 / (1.0 + std::exp(-d));
            }
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) = float(ref_at(y, t, c) + g * ref_at(x, t, c));
        }
    }
    void kv_store(const Tensor& k, const Tensor& v, const int* slots, const Tensor& kc, const Tensor& vc) override {
        for (int64_t t = 0; t < k.rows; t++) {
            quantize_row_ref(kc.type, &ref_at(k, t, 0),
                             ref_bytes(kc) + size_t(ref_slot_row(kc, slots[t])) * kc.row_stride, kc.cols);
            if (vc)
                quantize_row_ref(vc.type, &ref_at(v, t, 0),
                                 ref_bytes(vc) + size_t(ref_slot_row(vc, slots[t])) * vc.row_stride, vc.cols);
        }
    }
    void row_copy(const Tensor& c, int from, int to) override {
        std::memcpy(ref_bytes(c) + size_t(ref_slot_row(c, to)) * c.row_stride,
                    ref_bytes(c) + size_t(ref_slot_row(c, from)) * c.row_stride, row_bytes(c.type, c.cols));
    }
    void attention(const AttnArgs& a, const Tensor& q, const Tensor& out) override {
        const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
        for (int64_t r = 0; r < q.rows; r++) {
            const AttnSegment& g = a.segs[a.seg[r]];
            const int32_t* tail = a.tail ? a.tail[r] : nullptr;
            auto slot = [&](int p) { return p < g.pos0 || !tail ? p : tail[p - g.pos0]; };
            for (int h = 0; h < a.n_head; h++) {
                const int kh = h / group;
                std::vector<double> s;
                double mx = -INFINITY;
                for (int p = a.lo[r]; p <= a.pos[r]; p++) {
                    const std::vector<float> kr = ref_row(g.k, ref_slot_row(g.k, slot(p)));
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += double(ref_at(q, r, int64_t(h) * hd + i)) * kr[size_t(kh * hd + i)];
                    s.push_back(d * a.scale);
                    mx = std::max(mx, s.back());
                }
                const double sink = a.sinks ? double(ref_at(a.sinks, 0, h)) : -INFINITY;
                if (a.sinks) mx = std::max(mx, sink);
                double sum = a.sinks ? std::exp(sink - mx) : 0.0;
                std::vector<double> acc(static_cast<size_t>(hd), 0.0);
                for (int p = a.lo[r]; p <= a.pos[r]; p++) {
                    const double w = std::exp(s[size_t(p - a.lo[r])] - mx);
                    sum += w;
                    const std::vector<float> vr = ref_row(g.v, ref_slot_row(g.v, slot(p)));
                    for (int i = 0; i < hd; i++) acc[size_t(i)] += w * vr[size_t(kh * hd + i)];
                }
                for (int i = 0; i < hd; i++) ref_at(out, r, int64_t(h) * hd + i) = float(acc[size_t(i)] / sum);
            }
        }
    }
    void delta_rule(const DeltaArgs& a, const Tensor* m_in, const Tensor* m_out, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& decay, const Tensor& beta, const Tensor& o) override {
        const int S = a.S, hv = a.n_v_heads, r = hv / a.n_k_heads;
        for (int64_t t = 0; t < q.rows; t++)  // rows in order: a row may start from the one before it
            for (int h = 0; h < hv; h++) {
                const int kh = a.grouped ? h / r : h % a.n_k_heads;
                const double dc = ref_at(decay, t, h), b = ref_at(beta, t, h);
                std::vector<double> M(static_cast<size_t>(S) * S);
                for (int j = 0; j < S; j++)
                    for (int i = 0; i < S; i++)
                        M[size_t(j) * S + i] = dc * ref_at(m_in[t], 0, int64_t(h) * S * S + int64_t(j) * S + i);
                for (int j = 0; j < S; j++) {
                    double mk = 0, mq = 0;
                    for (int i = 0; i < S; i++) mk += M[size_t(j) * S + i] * ref_at(k, t, int64_t(kh) * S + i);
                    const double d = (ref_at(v, t, int64_t(h) * S + j) - mk) * b;
                    for (int i = 0; i < S; i++) {
                        M[size_t(j) * S + i] += d * ref_at(k, t, int64_t(kh) * S + i);
                        mq += M[size_t(j) * S + i] * ref_at(q, t, int64_t(kh) * S + i);
                    }
                    ref_at(o, t, int64_t(h) * S + j) = float(mq / std::sqrt(double(S)));
                }
                for (size_t i = 0; i < M.size(); i++)
                    ref_at(m_out[t], 0, int64_t(h) * S * S + int64_t(i)) = float(M[i]);
            }
    }
    void conv1d(int K, bool silu, const Tensor& x, const Tensor& taps, const Tensor* win_in, const Tensor* win_out,
                const Tensor& y) override {
        const int64_t C = x.cols;
        for (int64_t t = 0; t < x.rows; t++) {
            std::vector<double> win(size_t((K - 1) * C));
            for (int64_t i = 0; i < (K - 1) * C; i++) win[size_t(i)] = ref_at(win_in[t], 0, i);
            for (int64_t c = 0; c < C; c++) {
                double acc = double(ref_at(taps, c, K - 1)) * ref_at(x, t, c);
                for (int j = 0; j < K - 1; j++) acc += double(ref_at(taps, c, j)) * win[size_t(j * C + c)];
                ref_at(y, t, c) = float(silu ? acc / (1.0 + std::exp(-acc)) : acc);
            }
            for (int64_t i = 0; i < (K - 2) * C; i++) ref_at(win_out[t], 0, i) = float(win[size_t(C + i)]);
            for (int64_t c = 0; c < C; c++) ref_at(win_out[t], 0, (K - 2) * C + c) = ref_at(x, t, c);
        }
    }
    void l2_norm(const Tensor& x, int width, float eps, const Tensor& y) override {
        for (int64_t t = 0; t < x.rows; t++)
            for (int64_t c0 = 0; c0 < x.cols; c0 += width) {
                double ss = 0;
                for (int i = 0; i < width; i++) ss += double(ref_at(x, t, c0 + i)) * ref_at(x, t, c0 + i);
                const double r = 1.0 / std::sqrt(ss + double(eps));
                for (int i = 0; i < width; i++) ref_at(y, t, c0 + i) = float(ref_at(x, t, c0 + i) * r);
            }
    }
    void delta_gates(const Tensor& dt, const Tensor& a, const Tensor& beta, const Tensor& alpha) override {
        for (int64_t t = 0; t < beta.rows; t++)
            for (int64_t h = 0; h < beta.cols; h++) {
                ref_at(beta, t, h) = float(1.0 / (1.0 + std::exp(-double(ref_at(beta, t, h)))));
                const double x = double(ref_at(alpha, t, h)) + ref_at(dt, 0, h);
                ref_at(alpha, t, h) = float(std::exp((x > 20.0 ? x : std::log1p(std::exp(x))) * ref_at(a, 0, h)));
            }
    }
    void rms_norm_gated(const Tensor& x, const Tensor& w, int width, float eps, const Tensor& z) override {
        rms_norm(x, w, width, eps, x);
        for (int64_t t = 0; t < x.rows; t++)
            for (int64_t c = 0; c < x.cols; c++) {
                const double g = ref_at(z, t, c);
                ref_at(x, t, c) = float(ref_at(x, t, c) * g / (1.0 + std::exp(-g)));
            }
    }
    void copy(const Tensor& x, const Tensor& y) override {
        for (int64_t t = 0; t < y.rows; t++)
            for (int64_t c = 0; c < y.cols; c++) ref_at(y, t, c) = ref_at(x, t, c);
    }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace tandem::backend
