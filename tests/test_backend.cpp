// The backend seam (backend/backend.h): every op of the CPU backend against the scalar reference backend at named
// tolerances (matmul and embedding rows for every weight type, attention for every cache type, chains and trees,
// windows and sinks), and the batch-invariance contract that every backend is held to: a row's result alone, among
// k = 2..16 other rows and inside a token tree is the same, bit for bit. A backend that sums one row one way and k
// rows another (planted below) fails it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "model/device_weights.h"
#include "model/host_tensors.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::backend;

using tandem::test::gaussian;

namespace {

// A tensor of a backend holding `rows` rows of `cols` floats, stored as `type`.
struct Held {
    std::unique_ptr<Buffer> buf;
    Tensor t;
};
Held make(Backend& b, TensorType type, int64_t rows, int64_t cols, const std::vector<float>& vals = {}) {
    Held h;
    const size_t rb = row_bytes(type, cols);
    h.buf = b.alloc(rb * size_t(rows));
    h.t = {h.buf.get(), 0, type, rows, cols, rb};
    if (!vals.empty()) {
        std::vector<uint8_t> raw(rb * size_t(rows));
        for (int64_t r = 0; r < rows; r++)
            quantize_row_ref(type, vals.data() + size_t(r) * size_t(cols), raw.data() + size_t(r) * rb, cols);
        b.write(h.t, raw.data());
    }
    return h;
}
std::vector<float> get(Backend& b, const Tensor& t) {
    std::vector<float> out(size_t(t.rows) * size_t(t.cols));
    b.read(t, out.data());
    return out;
}

// An (n, k) I32 table of expert choices
Held make_ids(Backend& b, int64_t n, int64_t k, const int32_t* vals = nullptr) {
    Held h;
    h.buf = b.alloc(size_t(n * k) * sizeof(int32_t));
    h.t = {h.buf.get(), 0, TensorType::I32, n, k, size_t(k) * sizeof(int32_t)};
    if (vals) b.write(h.t, vals);
    return h;
}
std::vector<int32_t> get_ids(Backend& b, const Tensor& t) {
    std::vector<int32_t> out(size_t(t.rows) * size_t(t.cols));
    b.read(t, out.data());
    return out;
}

// max |a - r| / rms(r)
double rel_err(const std::vector<float>& a, const std::vector<float>& r) {
    double e = 0, ss = 0;
    for (size_t i = 0; i < r.size(); i++) {
        e = std::max(e, std::fabs(double(a[i]) - double(r[i])));
        ss += double(r[i]) * double(r[i]);
    }
    return e / std::max(1e-30, std::sqrt(ss / double(r.size())));
}

// An op over x, y (n, C) (random rows) and a (1, C) row w, run on be and on ref: the error of y against ref's
using ElementOp = std::function<void(Backend&, const Tensor&, const Tensor&, const Tensor&)>;
double op_error(Backend& be, Backend& ref, int64_t n, int64_t C, const ElementOp& op) {
    const auto x = gaussian(size_t(n * C), 3), y = gaussian(size_t(n * C), 4), w = gaussian(size_t(C), 5);
    std::vector<float> out[2];
    Backend* bs[2] = {&be, &ref};
    for (int i = 0; i < 2; i++) {
        Held hx = make(*bs[i], TensorType::F32, n, C, x), hy = make(*bs[i], TensorType::F32, n, C, y);
        Held hw = make(*bs[i], TensorType::F32, 1, C, w);
        op(*bs[i], hx.t, hy.t, hw.t);
        out[i] = get(*bs[i], hy.t);
    }
    return rel_err(out[0], out[1]);
}

const TensorType kWeightTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                   TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                   TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::MXFP4};
// The CPU's error against the reference: float weights are exact up to summation order; quantized ones meet
// activations quantized to 8 bits per 32 values (the integer kernels), which costs ~1% of a product's scale.
double matmul_tolerance(TensorType t) {
    if (t == TensorType::F32) return 1e-5;
    if (t == TensorType::F16 || t == TensorType::BF16) return 1e-4;
    return 3e-2;
}

struct Backends {
    ThreadPool pool{2};
    std::unique_ptr<Backend> cpu = make_cpu_backend(pool);
    std::unique_ptr<Backend> ref = make_reference_backend();
};

}  // namespace

TEST(Backend, OpNamesCoverEveryOp) {
    for (int i = 0; i < int(Op::COUNT); i++) EXPECT_NE(std::string(op_name(Op(i))), "");
    Backends B;
    EXPECT_EQ(B.ref->name(), "reference");
    EXPECT_EQ(B.cpu->name().rfind("cpu (", 0), 0u);
    EXPECT_TRUE(B.cpu->supports(Op::MATMUL, TensorType::Q4_K));
    EXPECT_FALSE(B.cpu->supports(Op::MATMUL, TensorType::I32));
    EXPECT_TRUE(B.cpu->supports(Op::ATTENTION, TensorType::Q8_0));
    EXPECT_FALSE(B.cpu->supports(Op::ATTENTION, TensorType::Q4_K));  // no K-quant caches
}

// Matmul and embedding rows of every weight type, placed (the CPU's interleaved copy) and in place.
TEST(Backend, MatmulAndGetRowsMatchTheReferenceForEveryType) {
    Backends B;
    const int64_t R = 48, C = 256;
    const int n = 5;
    const auto w = gaussian(size_t(R * C), 1, 0.05f), x = gaussian(size_t(n * C), 2);
    for (TensorType t : kWeightTypes)
        for (bool place : {false, true}) {
            SCOPED_TRACE(std::string(type_name(t)) + (place ? " placed" : " in place"));
            Held wc = make(*B.cpu, t, R, C, w), wr = make(*B.ref, t, R, C, w);
            if (place) B.cpu->place_weight(wc.t);
            Held xc = make(*B.cpu, TensorType::F32, n, C, x), xr = make(*B.ref, TensorType::F32, n, C, x);
            Held yc = make(*B.cpu, TensorType::F32, n, R), yr = make(*B.ref, TensorType::F32, n, R);
            B.cpu->matmul(wc.t, xc.t, yc.t);
            B.ref->matmul(wr.t, xr.t, yr.t);
            EXPECT_LE(rel_err(get(*B.cpu, yc.t), get(*B.ref, yr.t)), matmul_tolerance(t));
            const int32_t ids[3] = {7, 0, 47};
            Held ec = make(*B.cpu, TensorType::F32, 3, C), er = make(*B.ref, TensorType::F32, 3, C);
            B.cpu->get_rows(wc.t, ids, 3, ec.t);
            B.ref->get_rows(wr.t, ids, 3, er.t);
            EXPECT_EQ(get(*B.cpu, ec.t), get(*B.ref, er.t));  // dequantization is exact on both
        }
}

TEST(Backend, ElementwiseOpsMatchTheReference) {
    Backends B;
    auto both = [&](const ElementOp& op, double tol) { EXPECT_LE(op_error(*B.cpu, *B.ref, 4, 128, op), tol); };
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor& w) { b.rms_norm(x, w, 128, 1e-6f, y); }, 1e-6);
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.rms_norm(x, Tensor{}, 32, 1e-5f, y); },
         1e-6);
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.add(x, 0.5f, y); }, 0);
    both([](Backend& b, const Tensor&, const Tensor& y, const Tensor& w) { b.add_row(w, y); }, 0);
    both([](Backend& b, const Tensor&, const Tensor& y, const Tensor& w) { b.mul_row(w, y); }, 0);
    both([](Backend& b, const Tensor&, const Tensor& y, const Tensor&) { b.scale(1.5f, y); }, 0);
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.copy(x, y); }, 0);
    both([](Backend& b, const Tensor&, const Tensor& y, const Tensor&) { b.softcap(2.0f, 1.5f, y); }, 1e-6);
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.glu(Glu::SILU, y, x); }, 1e-6);
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.glu(Glu::SWIGLU_OAI, y, x); }, 1e-6);
    // GEGLU: the CPU evaluates GELU through ggml's F16 table (model/ffn.cpp: half an F16 step of the GELU, times
    // up), the reference the formula
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.glu(Glu::GELU_TANH, y, x); }, 1e-2);
    both([](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.glu(Glu::SIGMOID, y, x); }, 1e-6);
}

namespace {
// RoPE of 3 heads of 5 rows against the reference, NORM and NEOX, whole and partial rotation: the largest error.
double rope_error(Backend& be, Backend& ref) {
    const int n_ctx = 64, hd = 64, nh = 3;
    double worst = 0;
    for (RopeStyle style : {RopeStyle::NORM, RopeStyle::NEOX})
        for (int n_rot : {64, 32}) {
            const int half = n_rot / 2;
            std::vector<float> cs(size_t(n_ctx * half)), sn(cs.size());
            for (int p = 0; p < n_ctx; p++)
                for (int i = 0; i < half; i++) {
                    const double th = p * std::pow(10000.0, -2.0 * i / n_rot);
                    cs[size_t(p * half + i)] = float(std::cos(th));
                    sn[size_t(p * half + i)] = float(std::sin(th));
                }
            const auto x = gaussian(size_t(5 * nh * hd), 6);
            const int pos[5] = {0, 1, 17, 40, 63};
            std::vector<float> out[2];
            Backend* bs[2] = {&be, &ref};
            for (int i = 0; i < 2; i++) {
                Held c = make(*bs[i], TensorType::F32, n_ctx, half, cs),
                     s = make(*bs[i], TensorType::F32, n_ctx, half, sn);
                Held hx = make(*bs[i], TensorType::F32, 5, nh * hd, x);
                bs[i]->rope({nh, hd, n_rot, 0, style, 1.25f, c.t, s.t}, pos, hx.t);
                out[i] = get(*bs[i], hx.t);
            }
            worst = std::max(worst, rel_err(out[0], out[1]));
        }
    return worst;
}
}  // namespace

TEST(Backend, RopeMatchesTheReference) {
    Backends B;
    EXPECT_LE(rope_error(*B.cpu, *B.ref), 1e-6);
}

namespace {
// The router's choice and weights against the reference, for each gating (and groups, a choice bias, a choice by
// the logits): the same experts, weights within tol.
void expect_routing_matches(Backend& be, Backend& ref, double tol) {
    const int n = 6, ne = 16, k = 4;
    const auto lg = gaussian(size_t(n * ne), 7), bias = gaussian(size_t(ne), 8, 0.3f);
    const RouteArgs cases[] = {{ne, k, MoeGating::SOFTMAX, true, 0, 0, 0, false},
                               {ne, k, MoeGating::SOFTMAX_WEIGHT, false, 0, 0, 0, false},
                               {ne, k, MoeGating::SIGMOID, true, 2.5f, 4, 2, false},
                               {ne, 1, MoeGating::SIGMOID, false, 0, 0, 0, true}};
    for (const RouteArgs& a : cases) {
        std::vector<int32_t> ids[2];
        std::vector<float> w[2];
        Backend* bs[2] = {&be, &ref};
        for (int i = 0; i < 2; i++) {
            Held hl = make(*bs[i], TensorType::F32, n, ne, lg), hb = make(*bs[i], TensorType::F32, 1, ne, bias);
            Held hw = make(*bs[i], TensorType::F32, n, a.k);
            Held hi = make_ids(*bs[i], n, a.k);
            bs[i]->topk_route(a, hl.t, a.gating == MoeGating::SIGMOID ? hb.t : Tensor{}, hi.t, hw.t);
            w[i] = get(*bs[i], hw.t);
            ids[i] = get_ids(*bs[i], hi.t);
        }
        EXPECT_EQ(ids[0], ids[1]) << int(a.gating);
        EXPECT_LE(rel_err(w[0], w[1]), tol);
    }
}
}  // namespace

TEST(Backend, RoutingMatchesTheReference) {
    Backends B;
    expect_routing_matches(*B.cpu, *B.ref, 1e-6);
}

namespace {
// Experts chosen per row, each in its own buffer, against the reference: within tol(type).
void expect_matmul_id_matches(Backend& be, Backend& ref, const std::function<double(TensorType)>& tol) {
    const int ne = 4, R = 32, C = 64, n = 5, k = 2;
    const int32_t ids[n * k] = {0, 3, 1, 3, 3, 2, 0, 1, 2, 0};
    for (TensorType t : {TensorType::F32, TensorType::Q8_0, TensorType::MXFP4}) {
        std::vector<float> out[2];
        Backend* bs[2] = {&be, &ref};
        for (int i = 0; i < 2; i++) {
            std::vector<Held> ws;
            std::vector<Tensor> wt;
            for (int e = 0; e < ne; e++) {
                ws.push_back(make(*bs[i], t, R, C, gaussian(size_t(R * C), 20 + e, 0.1f)));
                wt.push_back(ws.back().t);
            }
            Held x = make(*bs[i], TensorType::F32, n, C, gaussian(size_t(n * C), 9));
            Held y = make(*bs[i], TensorType::F32, n * k, R), hi = make_ids(*bs[i], n, k, ids);
            bs[i]->matmul_id(wt.data(), ne, hi.t, x.t, false, y.t);
            out[i] = get(*bs[i], y.t);
        }
        EXPECT_LE(rel_err(out[0], out[1]), tol(t)) << type_name(t);
    }
}
}  // namespace

TEST(Backend, MatmulIdMatchesTheReference) {
    Backends B;
    expect_matmul_id_matches(*B.cpu, *B.ref, matmul_tolerance);
}

// The mixture's other ops: expert biases by choice, llama4's weighted inputs, the weighted sum in expert order (an
// expert another rank holds left out, a per-expert scale), a shared expert's gated add.
namespace {
// add_id, scale_choices, moe_sum (with and without weights, biases and scales; an expert another rank holds left
// out) and gated_add against the reference.
void expect_mixture_ops_match(Backend& be, Backend& ref) {
    const int ne = 4, C = 48, n = 5, k = 2;
    const int32_t ids[n * k] = {3, 0, 1, 3, 2, 3, 0, 1, 1, 2};
    std::vector<float> out[2][6];
    Backend* bs[2] = {&be, &ref};
    for (int i = 0; i < 2; i++) {
        Backend& b = *bs[i];
        Held hi = make_ids(b, n, k, ids), bias = make(b, TensorType::F32, ne, C, gaussian(size_t(ne * C), 30));
        Held w = make(b, TensorType::F32, n, k, gaussian(size_t(n * k), 31)),
             x = make(b, TensorType::F32, n, C, gaussian(size_t(n * C), 32));
        Held xk = make(b, TensorType::F32, n * k, C, gaussian(size_t(n * k * C), 33));
        b.add_id(bias.t, hi.t, xk.t);
        out[i][0] = get(b, xk.t);
        Held sc = make(b, TensorType::F32, n * k, C);
        b.scale_choices(x.t, w.t, sc.t);
        out[i][1] = get(b, sc.t);
        Held escale = make(b, TensorType::F32, 1, ne, gaussian(size_t(ne), 34));
        std::vector<Held> ws;
        std::vector<Tensor> wt;
        for (int e = 0; e < ne; e++) {
            ws.push_back(make(b, TensorType::F32, C, 16));
            wt.push_back(e == 2 ? Tensor{} : ws.back().t);  // expert 2: another rank's
        }
        Held y = make(b, TensorType::F32, n, C);
        b.moe_sum(xk.t, hi.t, w.t, bias.t, escale.t, wt.data(), ne, y.t);
        out[i][2] = get(b, y.t);
        b.moe_sum(xk.t, hi.t, Tensor{}, Tensor{}, Tensor{}, wt.data(), ne, y.t);
        out[i][3] = get(b, y.t);
        Held gw = make(b, TensorType::F32, 1, C, gaussian(size_t(C), 35, 0.2f));
        b.gated_add(x.t, x.t, gw.t, y.t);
        out[i][4] = get(b, y.t);
        b.gated_add(x.t, x.t, Tensor{}, y.t);
        out[i][5] = get(b, y.t);
    }
    for (int j = 0; j < 6; j++) EXPECT_LE(rel_err(out[0][j], out[1][j]), 2e-6) << j;
    // the sum leaves expert 2 out: row 2 chose 2 and 3, so its sum is its choice of 3 alone
    for (int c = 0; c < C; c++) {
        EXPECT_EQ(out[0][3][size_t(2 * C + c)], out[0][0][size_t(5 * C + c)]) << c;
    }
}
}  // namespace

TEST(Backend, MixtureOpsMatchTheReference) {
    Backends B;
    expect_mixture_ops_match(*B.cpu, *B.ref);
}

namespace {

// A cache layer of n_ctx rows of kv_dim values (keys and values) filled with random rows, and attention of the
// rows `pos` (a chain from pos0, or a tree through `tails`) over it.
struct CacheCase {
    int n_ctx = 96, nh = 4, nkv = 2, hd = 64;
    TensorType tk = TensorType::F16, tv = TensorType::F16;
    int window = 0;
    bool sinks = false;
};
std::vector<float> run_attention(Backend& b, const CacheCase& c, const std::vector<int>& pos, int pos0,
                                 const std::vector<std::vector<int32_t>>& tails, const std::vector<float>& q) {
    const int kvd = c.nkv * c.hd, n = int(pos.size());
    Held k = make(b, c.tk, c.n_ctx, kvd, gaussian(size_t(c.n_ctx * kvd), 11));
    Held v = make(b, c.tv, c.n_ctx, kvd, gaussian(size_t(c.n_ctx * kvd), 12));
    Held hs = make(b, TensorType::F32, 1, c.nh, gaussian(size_t(c.nh), 13));
    Held hq = make(b, TensorType::F32, n, c.nh * c.hd, q), out = make(b, TensorType::F32, n, c.nh * c.hd);
    const AttnSegment seg{k.t, v.t, pos0};
    std::vector<int> segi(static_cast<size_t>(n), 0), lo(static_cast<size_t>(n));
    std::vector<const int32_t*> tp(static_cast<size_t>(n), nullptr);
    for (int r = 0; r < n; r++) {
        lo[size_t(r)] = c.window > 0 ? std::max(0, pos[size_t(r)] - c.window + 1) : 0;
        if (!tails.empty()) tp[size_t(r)] = tails[size_t(r)].data();
    }
    AttnArgs a{c.nh, c.nkv,       c.hd,       0.125f,    c.sinks ? hs.t : Tensor{},          &seg,
               1,    segi.data(), pos.data(), lo.data(), tails.empty() ? nullptr : tp.data()};
    b.attention(a, hq.t, out.t);
    return get(b, out.t);
}

}  // namespace

TEST(Backend, AttentionMatchesTheReferenceForEveryCacheType) {
    Backends B;
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
                         TensorType::Q5_1, TensorType::IQ4_NL})
        for (int window : {0, 40})
            for (bool sinks : {false, true}) {
                CacheCase c;
                c.tk = c.tv = t;
                c.window = window;
                c.sinks = sinks;
                const std::vector<int> pos = {88, 89, 90, 91, 92};
                const auto q = gaussian(pos.size() * size_t(c.nh * c.hd), 14);
                const double err =
                    rel_err(run_attention(*B.cpu, c, pos, 88, {}, q), run_attention(*B.ref, c, pos, 88, {}, q));
                // Q8_0 / Q4_0 keys are scored in integers against an 8-bit query where the level has vpdpbusd/sdot
                // (as llama.cpp's flash attention does): the query's rounding moves the scores by ~1%, the outputs
                // by up to ~3% of their scale here; the other types are exact up to summation order
                const bool i8 = (t == TensorType::Q8_0 || t == TensorType::Q4_0) && isa().attn_tile_i8;
                EXPECT_LE(err, i8 ? 5e-2 : 1e-5) << type_name(t) << " window " << window << " sinks " << sinks;
            }
}

namespace {

// The batch-invariance contract, for backend b: op(rows) computed for one row alone, and for the same row placed
// at every index of passes of k = 2..16 rows (the others random), gives bit-identical output rows.
// `op(b, X, n)` runs the op on the n rows X (n, cols_in) and returns the (n, cols_out) result.
using RowOp = std::function<std::vector<float>(Backend&, const std::vector<float>&, int)>;
testing::AssertionResult rows_are_batch_invariant(Backend& b, const RowOp& op, int cols_in) {
    const auto row = gaussian(size_t(cols_in), 100);
    const std::vector<float> alone = op(b, row, 1);
    const size_t w = alone.size();
    for (int k = 2; k <= 16; k++)
        for (int at : {0, k / 2, k - 1}) {
            auto X = gaussian(size_t(k) * size_t(cols_in), 200 + uint32_t(k));
            std::copy(row.begin(), row.end(), X.begin() + std::ptrdiff_t(size_t(at) * size_t(cols_in)));
            const std::vector<float> Y = op(b, X, k);
            if (std::memcmp(&Y[size_t(at) * w], alone.data(), w * sizeof(float)) != 0)
                return testing::AssertionFailure()
                       << b.name() << ": the row alone differs from the same row at " << at << " of " << k;
        }
    return testing::AssertionSuccess();
}

RowOp matmul_op(TensorType t, int64_t R, int64_t C, bool place) {
    return [=](Backend& b, const std::vector<float>& X, int n) {
        Held w = make(b, t, R, C, gaussian(size_t(R * C), 300, 0.05f));
        if (place) b.place_weight(w.t);
        Held x = make(b, TensorType::F32, n, C, X), y = make(b, TensorType::F32, n, R);
        b.matmul(w.t, x.t, y.t);
        return get(b, y.t);
    };
}

// A mixture's routed sum of a row: its router logits, choice, experts' products and their sum in expert order
RowOp mixture_op(int64_t C) {
    return [=](Backend& b, const std::vector<float>& X, int n) {
        const int ne = 8, k = 3, R = 32;
        Held router = make(b, TensorType::F32, ne, C, gaussian(size_t(ne * C), 600, 0.1f));
        std::vector<Held> ws;
        std::vector<Tensor> up, down;
        for (int e = 0; e < ne; e++) {
            ws.push_back(make(b, TensorType::Q8_0, R, C, gaussian(size_t(R * C), 610 + uint32_t(e), 0.05f)));
            up.push_back(ws.back().t);
            ws.push_back(make(b, TensorType::F32, C, R, gaussian(size_t(R * C), 620 + uint32_t(e), 0.05f)));
            down.push_back(ws.back().t);
        }
        Held x = make(b, TensorType::F32, n, C, X), lg = make(b, TensorType::F32, n, ne), hi = make_ids(b, n, k);
        Held w = make(b, TensorType::F32, n, k), h = make(b, TensorType::F32, n * k, R);
        Held d = make(b, TensorType::F32, n * k, C), y = make(b, TensorType::F32, n, C);
        b.matmul(router.t, x.t, lg.t);
        b.topk_route({ne, k, MoeGating::SOFTMAX, true, 0, 0, 0, false}, lg.t, Tensor{}, hi.t, w.t);
        b.matmul_id(up.data(), ne, hi.t, x.t, false, h.t);
        b.matmul_id(down.data(), ne, hi.t, h.t, true, d.t);
        b.moe_sum(d.t, hi.t, w.t, Tensor{}, Tensor{}, down.data(), ne, y.t);
        return get(b, y.t);
    };
}

// Every backend of this build, and a CPU backend with a planted bug: its matmul of more than one row sums each
// product in a different order (pairs of halves) than one row alone, as a GPU kernel that switches paths would.
class SplitSumBackend : public Backend {
public:
    explicit SplitSumBackend(ThreadPool& pool) : inner_(make_cpu_backend(pool)) {}
    std::string name() const override { return "cpu with a k-row reduction order"; }
    bool supports(Op op, TensorType t) const override { return inner_->supports(op, t); }
    std::unique_ptr<Buffer> alloc(size_t n) override { return inner_->alloc(n); }
    std::unique_ptr<Buffer> map_host(const void* p, size_t n) override { return inner_->map_host(p, n); }
    void write(const Tensor& d, const void* s) override { inner_->write(d, s); }
    void read(const Tensor& s, void* d) override { inner_->read(s, d); }
    void get_rows(const Tensor& t, const int32_t* ids, int n, const Tensor& y) override {
        inner_->get_rows(t, ids, n, y);
    }
    void matmul(const Tensor& w, const Tensor& x, const Tensor& y) override {
        if (x.rows == 1) return inner_->matmul(w, x, y);
        // y = x_lo W_lo^T + x_hi W_hi^T: the two halves of every dot product summed apart
        const int64_t h = w.cols / 2;
        std::vector<float> X(size_t(x.rows * x.cols)), Y(size_t(y.rows * y.cols));
        inner_->read(x, X.data());
        std::vector<float> W(size_t(w.rows * w.cols));
        std::vector<uint8_t> raw(w.nbytes());
        inner_->read(w, raw.data());
        for (int64_t r = 0; r < w.rows; r++)
            dequantize_row_ref(w.type, raw.data() + size_t(r) * row_bytes(w.type, w.cols), &W[size_t(r * w.cols)],
                               w.cols);
        for (int64_t t = 0; t < x.rows; t++)
            for (int64_t r = 0; r < w.rows; r++) {
                float a = 0, c = 0;
                for (int64_t i = 0; i < h; i++) a += X[size_t(t * x.cols + i)] * W[size_t(r * w.cols + i)];
                for (int64_t i = h; i < w.cols; i++) c += X[size_t(t * x.cols + i)] * W[size_t(r * w.cols + i)];
                Y[size_t(t * y.cols + r)] = a + c;
            }
        inner_->write(y, Y.data());
    }
    void matmul_id(const Tensor* ws, int ne, const Tensor& ids, const Tensor& x, bool pc, const Tensor& y) override {
        inner_->matmul_id(ws, ne, ids, x, pc, y);
    }
    void rms_norm(const Tensor& x, const Tensor& w, int wd, float eps, const Tensor& y) override {
        inner_->rms_norm(x, w, wd, eps, y);
    }
    void rope(const RopeArgs& a, const int* pos, const Tensor& x) override { inner_->rope(a, pos, x); }
    void add(const Tensor& x, float s, const Tensor& y) override { inner_->add(x, s, y); }
    void add_row(const Tensor& b, const Tensor& y) override { inner_->add_row(b, y); }
    void mul_row(const Tensor& w, const Tensor& y) override { inner_->mul_row(w, y); }
    void scale(float s, const Tensor& y) override { inner_->scale(s, y); }
    void glu(Glu g, const Tensor& a, const Tensor& u) override { inner_->glu(g, a, u); }
    void softcap(float d, float c, const Tensor& y) override { inner_->softcap(d, c, y); }
    void topk_route(const RouteArgs& a, const Tensor& l, const Tensor& cb, const Tensor& ids,
                    const Tensor& w) override {
        inner_->topk_route(a, l, cb, ids, w);
    }
    void add_id(const Tensor& b, const Tensor& ids, const Tensor& y) override { inner_->add_id(b, ids, y); }
    void scale_choices(const Tensor& x, const Tensor& w, const Tensor& y) override { inner_->scale_choices(x, w, y); }
    void moe_sum(const Tensor& x, const Tensor& ids, const Tensor& w, const Tensor& b, const Tensor& sc,
                 const Tensor* ws, int ne, const Tensor& y) override {
        inner_->moe_sum(x, ids, w, b, sc, ws, ne, y);
    }
    void gated_add(const Tensor& x, const Tensor& gi, const Tensor& gw, const Tensor& y) override {
        inner_->gated_add(x, gi, gw, y);
    }
    void kv_store(const Tensor& k, const Tensor& v, const int* s, const Tensor& kc, const Tensor& vc) override {
        inner_->kv_store(k, v, s, kc, vc);
    }
    void row_copy(const Tensor& c, int f, int t) override { inner_->row_copy(c, f, t); }
    void attention(const AttnArgs& a, const Tensor& q, const Tensor& o) override { inner_->attention(a, q, o); }
    void delta_rule(const DeltaArgs& a, const Tensor* mi, const Tensor* mo, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& d, const Tensor& be, const Tensor& o) override {
        inner_->delta_rule(a, mi, mo, q, k, v, d, be, o);
    }
    void conv1d(int K, bool silu, const Tensor& x, const Tensor& taps, const Tensor* wi, const Tensor* wo,
                const Tensor& y) override {
        inner_->conv1d(K, silu, x, taps, wi, wo, y);
    }
    void l2_norm(const Tensor& x, int w, float eps, const Tensor& y) override { inner_->l2_norm(x, w, eps, y); }
    void delta_gates(const Tensor& dt, const Tensor& a, const Tensor& b, const Tensor& al) override {
        inner_->delta_gates(dt, a, b, al);
    }
    void rms_norm_gated(const Tensor& x, const Tensor& w, int wd, float eps, const Tensor& z) override {
        inner_->rms_norm_gated(x, w, wd, eps, z);
    }
    void copy(const Tensor& x, const Tensor& y) override { inner_->copy(x, y); }

private:
    std::unique_ptr<Backend> inner_;
};

}  // namespace

// A backend without K-quant kernels: what a model it cannot run is refused with.
class NoKQuants : public SplitSumBackend {
public:
    using SplitSumBackend::SplitSumBackend;
    std::string name() const override { return "no-k-quants"; }
    bool supports(Op op, TensorType t) const override {
        return t != TensorType::Q4_K && t != TensorType::Q5_K && t != TensorType::Q6_K &&
               SplitSumBackend::supports(op, t);
    }
};

namespace {
// Attention: the query of the row at position 90 alone (a decode step), as the last row of a verification chain
// of k rows from 91 - k, and as a node of a token tree whose ancestors are the chain's slots, bit for bit.
void expect_attention_batch_invariant(Backend& b) {
    for (TensorType t : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_0}) {
        CacheCase c;
        c.tk = c.tv = t;
        const size_t qd = size_t(c.nh * c.hd);
        const auto q = gaussian(16 * qd, 500);
        const std::vector<float> q_last(q.end() - std::ptrdiff_t(qd), q.end());
        const auto alone = run_attention(b, c, {90}, 90, {}, q_last);
        for (int k = 2; k <= 16; k++) {
            std::vector<int> pos;
            for (int i = 0; i < k; i++) pos.push_back(91 - k + i);
            const std::vector<float> qk(q.end() - std::ptrdiff_t(size_t(k) * qd), q.end());
            const auto chain = run_attention(b, c, pos, 91 - k, {}, qk);
            EXPECT_EQ(0, std::memcmp(&chain[size_t(k - 1) * qd], alone.data(), qd * sizeof(float)))
                << type_name(t) << " chain of " << k;
            // a tree: row i at depth i (position 91 - k + i) with its ancestors at the chain's slots
            std::vector<std::vector<int32_t>> tails;
            for (int i = 0; i < k; i++) {
                std::vector<int32_t> tl;
                for (int j = 0; j <= i; j++) tl.push_back(91 - k + j);
                tails.push_back(tl);
            }
            const auto tree = run_attention(b, c, pos, 91 - k, tails, qk);
            EXPECT_EQ(0, std::memcmp(&tree[size_t(k - 1) * qd], alone.data(), qd * sizeof(float)))
                << type_name(t) << " tree of " << k;
        }
    }
}

}  // namespace

namespace {
// Every op kind's batch invariance on one backend: matmul of every weight type (and, where the backend places
// weights, placed), a norm-and-gate chain, a whole mixture, attention over chains and trees.
void expect_batch_invariant(Backend& b, bool placed_too) {
    const int64_t R = 64, C = 256;
    for (TensorType t : kWeightTypes) {
        EXPECT_TRUE(rows_are_batch_invariant(b, matmul_op(t, R, C, false), int(C))) << type_name(t);
        if (placed_too)
            EXPECT_TRUE(rows_are_batch_invariant(b, matmul_op(t, R, C, true), int(C))) << type_name(t) << " placed";
    }
    const auto w = gaussian(size_t(C), 400);
    EXPECT_TRUE(rows_are_batch_invariant(
        b,
        [&](Backend& be, const std::vector<float>& X, int n) {
            Held x = make(be, TensorType::F32, n, C, X), hw = make(be, TensorType::F32, 1, C, w);
            be.rms_norm(x.t, hw.t, int(C), 1e-6f, x.t);
            be.glu(Glu::SILU, x.t, x.t);
            return get(be, x.t);
        },
        int(C)));
    EXPECT_TRUE(rows_are_batch_invariant(b, mixture_op(C), int(C))) << "mixture";
    expect_attention_batch_invariant(b);
}
}  // namespace

// The contract every backend is held to (a new backend adds itself to `all`, or, optional, a test of its own).
TEST(Backend, BatchInvariance) {
    Backends B;
    Backend* all[] = {B.cpu.get(), B.ref.get()};
    for (Backend* b : all) {
        SCOPED_TRACE(b->name());
        expect_batch_invariant(*b, true);
    }
}

// The test above can fail: a backend whose matmul sums k rows in another order than one row is caught.
TEST(Backend, BatchInvarianceCatchesAPlantedReductionOrder) {
    ThreadPool pool(2);
    SplitSumBackend bad(pool);
    EXPECT_FALSE(rows_are_batch_invariant(bad, matmul_op(TensorType::F32, 64, 256, false), 256));
    EXPECT_FALSE(rows_are_batch_invariant(bad, matmul_op(TensorType::Q8_0, 64, 256, false), 256));
}

namespace {
// kv_store into a ring of 8 rows at slots 3, 9 (row 1), 12 (row 4), then row_copy 4 -> 6: the caches' bytes.
std::vector<uint8_t> kv_store_bytes(Backend& b, TensorType tk, TensorType tv) {
    Held k = make(b, TensorType::F32, 3, 64, gaussian(192, 15)), v = make(b, TensorType::F32, 3, 64, gaussian(192, 16));
    Held kc = make(b, tk, 8, 64, std::vector<float>(512, 0.0f));
    Held vc = make(b, tv, 8, 64, std::vector<float>(512, 0.0f));
    const int slots[3] = {3, 9, 12};
    b.kv_store(k.t, v.t, slots, kc.t, vc.t);
    b.row_copy(kc.t, 4, 6);
    b.row_copy(vc.t, 4, 6);
    std::vector<uint8_t> raw(kc.t.nbytes() + vc.t.nbytes());
    b.read(kc.t, raw.data());
    b.read(vc.t, raw.data() + kc.t.nbytes());
    return raw;
}
}  // namespace

TEST(Backend, KvStoreAndRowCopyMatchTheReference) {
    Backends B;
    EXPECT_EQ(kv_store_bytes(*B.cpu, TensorType::Q8_0, TensorType::F16),
              kv_store_bytes(*B.ref, TensorType::Q8_0, TensorType::F16));
}

// A Gated DeltaNet layer's ops over 3 rows of a chain: row 0 from a state, row 1 from row 0's (in order), row 2 in
// place on row 1's; the convolution's windows the same way.
namespace {
// Gated DeltaNet's ops over a chain of 3 rows whose last runs in place: conv1d, l2_norm, delta_gates, delta_rule,
// rms_norm_gated, every output and the states against the reference.
void expect_recurrent_ops_match(Backend& be, Backend& ref) {
    Backend* bs[2] = {&be, &ref};
    const int S = 16, hv = 4, hk = 2, n = 3, K = 4, C = 2 * hk * S + hv * S;
    const int64_t mat = int64_t(hv) * S * S, win = int64_t(K - 1) * C;
    std::vector<float> res[2][8];
    for (int i = 0; i < 2; i++) {
        Backend& b = *bs[i];
        // states: [window | matrices] of 3 buffers (row 2 runs in place on buffer 2)
        Held st = make(b, TensorType::F32, 3, win + mat, gaussian(size_t(3 * (win + mat)), 17, 0.1f));
        const Tensor s0 = st.t.rows_at(0, 1), s1 = st.t.rows_at(1, 1), s2 = st.t.rows_at(2, 1);
        const Tensor in[n] = {s0, s1, s2}, out[n] = {s1, s2, s2};
        std::vector<Tensor> wi, wo, mi, mo;
        for (int t = 0; t < n; t++) {
            wi.push_back(in[t].cols_at(0, win));
            wo.push_back(out[t].cols_at(0, win));
            mi.push_back(in[t].cols_at(win, mat));
            mo.push_back(out[t].cols_at(win, mat));
        }
        Held x = make(b, TensorType::F32, n, C, gaussian(size_t(n * C), 18));
        Held taps = make(b, TensorType::F32, C, K, gaussian(size_t(C * K), 19, 0.5f));
        Held conv = make(b, TensorType::F32, n, C);
        b.conv1d(K, true, x.t, taps.t, wi.data(), wo.data(), conv.t);
        res[i][0] = get(b, conv.t);
        const Tensor qk = conv.t.cols_at(0, 2 * hk * S);
        b.l2_norm(qk, S, 1e-6f, qk);
        res[i][1] = get(b, conv.t);
        Held beta = make(b, TensorType::F32, n, hv, gaussian(size_t(n * hv), 20));
        Held alpha = make(b, TensorType::F32, n, hv, gaussian(size_t(n * hv), 21));
        Held dt = make(b, TensorType::F32, 1, hv, gaussian(size_t(hv), 22)),
             a = make(b, TensorType::F32, 1, hv, gaussian(size_t(hv), 23, 0.3f));
        b.delta_gates(dt.t, a.t, beta.t, alpha.t);
        res[i][2] = get(b, beta.t);
        res[i][3] = get(b, alpha.t);
        Held o = make(b, TensorType::F32, n, hv * S);
        b.delta_rule({S, hk, hv, true}, mi.data(), mo.data(), conv.t.cols_at(0, hk * S), conv.t.cols_at(hk * S, hk * S),
                     conv.t.cols_at(2 * hk * S, hv * S), alpha.t, beta.t, o.t);
        res[i][4] = get(b, o.t);
        res[i][5] = get(b, st.t);
        Held z = make(b, TensorType::F32, n, hv * S, gaussian(size_t(n * hv * S), 24));
        Held w = make(b, TensorType::F32, 1, S, gaussian(size_t(S), 25));
        b.rms_norm_gated(o.t, w.t, S, 1e-6f, z.t);
        res[i][6] = get(b, o.t);
    }
    for (int j = 0; j < 7; j++) EXPECT_LE(rel_err(res[0][j], res[1][j]), 1e-5) << j;
}
}  // namespace

TEST(Backend, RecurrentOpsMatchTheReference) {
    Backends B;
    expect_recurrent_ops_match(*B.cpu, *B.ref);
}

TEST(Backend, AModelABackendCannotRunIsNamed) {
    auto m = Model::load(test::shared_file("models/synth-llama-spm-q4_k_m.gguf"));
    ThreadPool pool(1);
    NoKQuants b(pool);
    const std::string why = unsupported(b, *m, TensorType::F16, TensorType::F16);
    EXPECT_NE(why.find("no-k-quants"), std::string::npos) << why;
    EXPECT_NE(why.find("_K weights ("), std::string::npos) << why;
    Backends B;
    EXPECT_EQ(unsupported(*B.cpu, *m, TensorType::F16, TensorType::Q8_0), "");
    EXPECT_NE(unsupported(*B.cpu, *m, TensorType::F16, TensorType::Q4_K), "");  // no K-quant caches
}

// --- The Vulkan backend (src/backend/vulkan/), on the first Vulkan device: in CI Mesa's lavapipe, which proves
// correctness and never speed. Optional where there is no device (each test says so and skips); required where
// TANDEM_REQUIRE_VULKAN=1 (the README's test command sets it when lavapipe is installed), and then run with the
// validation layer (TANDEM_VK_VALIDATION=1), every message of which fails the test.
namespace {

std::unique_ptr<Backend> vulkan_backend(std::string& why) {
    why = test::vulkan_unavailable();
    return why.empty() ? make_vulkan_backend(-1) : nullptr;
}

}  // namespace

#define VULKAN_OR_SKIP(var)                                                                                       \
    std::string vk_why;                                                                                           \
    std::unique_ptr<Backend> var = vulkan_backend(vk_why);                                                        \
    if (!var) {                                                                                                   \
        if (test::vulkan_required()) FAIL() << vk_why << " (TANDEM_REQUIRE_VULKAN is set)";                       \
        GTEST_SKIP() << vk_why << ": the Vulkan tests are optional here (TANDEM_REQUIRE_VULKAN=1 requires them)"; \
    }                                                                                                             \
    const uint64_t vk_messages0 = vulkan_validation_messages()
#define VULKAN_NO_MESSAGES() EXPECT_EQ(vulkan_validation_messages(), vk_messages0) << "Vulkan validation messages"

// every weight type of the seam (kWeightTypes); the cache types it takes
const TensorType kVulkanCacheTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                                        TensorType::Q4_0};

TEST(Vulkan, NamesItsDeviceAndWhatItRuns) {
    VULKAN_OR_SKIP(vk);
    EXPECT_EQ(vk->name().rfind("vulkan (", 0), 0u) << vk->name();
    const auto devs = gpu_devices();
    ASSERT_FALSE(devs.empty());
    EXPECT_FALSE(devs[0].name.empty());
    EXPECT_FALSE(devs[0].driver.empty());
    for (TensorType t : kWeightTypes) EXPECT_TRUE(vk->supports(Op::MATMUL, t)) << type_name(t);
    EXPECT_FALSE(vk->supports(Op::ATTENTION, TensorType::Q4_K));  // no K-quant caches (nor on the CPU)
    EXPECT_TRUE(vk->supports(Op::DELTA_RULE, TensorType::F32));
    EXPECT_TRUE(vk->supports(Op::ATTENTION, TensorType::Q8_0));
    VULKAN_NO_MESSAGES();
}

// Matmul of every type it runs against the reference (float sums of the same dequantized weights: within float
// rounding), over column slices of x and y too; embedding rows exact; more weight rows than one dispatch row.
TEST(Vulkan, MatmulAndGetRowsMatchTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    const int64_t R = 80, C = 256;
    const int n = 11;
    const auto w = gaussian(size_t(R * C), 1, 0.05f), x = gaussian(size_t(n * (C + 32)), 2);
    for (TensorType t : kWeightTypes) {
        SCOPED_TRACE(type_name(t));
        std::vector<float> out[2], emb[2];
        Backend* bs[2] = {vk.get(), ref.get()};
        for (int i = 0; i < 2; i++) {
            Held hw = make(*bs[i], t, R, C, w);
            Held hx = make(*bs[i], TensorType::F32, n, C + 32, x), hy = make(*bs[i], TensorType::F32, n, R + 8);
            bs[i]->matmul(hw.t, hx.t.cols_at(32, C), hy.t.cols_at(8, R));
            out[i] = get(*bs[i], hy.t);
            const int32_t ids[4] = {7, 0, 79, 7};
            Held he = make(*bs[i], TensorType::F32, 4, C);
            bs[i]->get_rows(hw.t, ids, 4, he.t);
            emb[i] = get(*bs[i], he.t);
        }
        EXPECT_LE(rel_err(out[0], out[1]), 2e-6);
        EXPECT_EQ(emb[0], emb[1]);
    }
    VULKAN_NO_MESSAGES();
}

// The matmul shaders' two trees (shaders/matmul_unit.glsl: the last steps through subgroup shuffles, or all through
// shared memory, TANDEM_VK_SUBGROUP=0) pair the same lanes: the same bits, for every type, dense and expert rows, rows
// long enough that lanes take several units, in passes of more than 8 rows.
TEST(Vulkan, TheSubgroupTreeGivesTheSharedMemoryTreesBits) {
    VULKAN_OR_SKIP(vk);
    if (vk->name().find("subgroups of") == std::string::npos)
        GTEST_SKIP() << vk->name()
                     << " has no subgroup shuffles in compute shaders: the one tree is the shared memory's";
    setenv("TANDEM_VK_SUBGROUP", "0", 1);
    std::unique_ptr<Backend> plain = make_vulkan_backend(-1);
    unsetenv("TANDEM_VK_SUBGROUP");
    ASSERT_EQ(plain->name().find("subgroups of"), std::string::npos) << plain->name();
    const int n = 11, k = 2, n_exp = 3;
    const int32_t ids[n * k] = {0, 2, 1, 0, 2, 2, 1, 1, 0, 1, 2, 0, 0, 0, 1, 2, 2, 1, 0, 2, 1, 0};
    // rows of 64 lanes (several units each), of 16 (steps through shared memory and shuffles) and of 4 (shuffles
    // only), with workgroups ending past the last row
    for (auto [R, C] : {std::pair<int64_t, int64_t>{6, 256 * 33}, {37, 1024}, {70, 256}})
        for (TensorType t : kWeightTypes) {
            SCOPED_TRACE(std::string(type_name(t)) + ", " + std::to_string(R) + " rows of " + std::to_string(C));
            const auto w = gaussian(size_t(R * C * n_exp), 11, 0.05f), x = gaussian(size_t(n * C), 12);
            std::vector<float> out[2], outid[2];
            Backend* bs[2] = {vk.get(), plain.get()};
            for (int i = 0; i < 2; i++) {
                Held hw = make(*bs[i], t, R * n_exp, C, w);
                Held hx = make(*bs[i], TensorType::F32, n, C, x), hy = make(*bs[i], TensorType::F32, n, R);
                bs[i]->matmul(hw.t.rows_at(0, R), hx.t, hy.t);
                out[i] = get(*bs[i], hy.t);
                Tensor experts[n_exp];
                for (int e = 0; e < n_exp; e++) experts[e] = hw.t.rows_at(e * R, R);
                Held hid = make_ids(*bs[i], n, k, ids);
                Held hyid = make(*bs[i], TensorType::F32, n * k, R);
                bs[i]->matmul_id(experts, n_exp, hid.t, hx.t, false, hyid.t);
                outid[i] = get(*bs[i], hyid.t);
            }
            EXPECT_EQ(out[0], out[1]);
            EXPECT_EQ(outid[0], outid[1]);
        }
    VULKAN_NO_MESSAGES();
}

// Device memory is suballocated: small buffers are ranges of shared blocks (vk_device.h Device::alloc). Many of
// them, freed and reallocated in between, each keep their own bytes (no two ranges overlap, a freed range is reused
// whole or in part); buffers past the suballocation limit stand alone; zeroing a new one touches no neighbour.
TEST(Vulkan, SmallBuffersShareBlocksWithoutOverlapping) {
    VULKAN_OR_SKIP(vk);
    std::vector<Held> held;
    std::vector<std::vector<float>> want;
    auto add = [&](int64_t cols, uint32_t seed) {
        held.push_back(make(*vk, TensorType::F32, 1, cols, gaussian(size_t(cols), seed)));
        want.push_back(gaussian(size_t(cols), seed));
    };
    for (int i = 0; i < 300; i++) add(1 + (i * 37) % 700, uint32_t(i));
    for (int i = 0; i < 300; i += 2) held[size_t(i)] = make(*vk, TensorType::F32, 1, 1);  // freed, replaced
    for (int i = 0; i < 300; i += 2) {
        const auto v = gaussian(1, uint32_t(1000 + i));
        vk->write(held[size_t(i)].t, v.data());
        want[size_t(i)] = v;
    }
    for (int i = 0; i < 40; i++) add(2000 + i * 97, uint32_t(2000 + i));  // reuses the freed ranges
    add(int64_t(5) << 20, 77);  // 20 MiB: an allocation of its own
    Held z = make(*vk, TensorType::F32, 1, 333);  // zeroed by alloc, in a range between written ones
    for (size_t i = 0; i < held.size(); i++) ASSERT_EQ(get(*vk, held[i].t), want[i]) << "buffer " << i;
    EXPECT_EQ(get(*vk, z.t), std::vector<float>(333, 0.0f));
    VULKAN_NO_MESSAGES();
}

TEST(Vulkan, NormsAndElementwiseOpsMatchTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    auto both = [&](const char* what, const ElementOp& op, double tol) {
        EXPECT_LE(op_error(*vk, *ref, 5, 192, op), tol) << what;
    };
    both(
        "rms_norm",
        [](Backend& b, const Tensor& x, const Tensor& y, const Tensor& w) { b.rms_norm(x, w, 192, 1e-6f, y); }, 1e-6);
    both(
        "rms_norm of heads, in place",
        [](Backend& b, const Tensor&, const Tensor& y, const Tensor&) { b.rms_norm(y, Tensor{}, 64, 1e-5f, y); }, 1e-6);
    both(
        "rms_norm of a column slice",
        [](Backend& b, const Tensor& x, const Tensor& y, const Tensor& w) {
            b.rms_norm(x.cols_at(64, 128), w.cols_at(0, 128), 128, 1e-6f, y.cols_at(32, 128));
        },
        1e-6);
    both(
        "add", [](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.add(x, 0.5f, y); }, 1e-7);
    both(
        "add_row", [](Backend& b, const Tensor&, const Tensor& y, const Tensor& w) { b.add_row(w, y); }, 0);
    both(
        "mul_row", [](Backend& b, const Tensor&, const Tensor& y, const Tensor& w) { b.mul_row(w, y); }, 0);
    both(
        "scale of a slice",
        [](Backend& b, const Tensor&, const Tensor& y, const Tensor&) { b.scale(1.5f, y.cols_at(5, 7)); }, 0);
    both(
        "copy",
        [](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) {
            b.copy(x.cols_at(1, 100), y.cols_at(50, 100));
        },
        0);
    both(
        "softcap", [](Backend& b, const Tensor&, const Tensor& y, const Tensor&) { b.softcap(2.0f, 1.5f, y); }, 1e-6);
    both(
        "softcap 0", [](Backend& b, const Tensor&, const Tensor& y, const Tensor&) { b.softcap(3.0f, 0.0f, y); }, 1e-7);
    for (Glu g : {Glu::SILU, Glu::GELU_TANH, Glu::SWIGLU_OAI, Glu::SIGMOID})
        both(
            "glu", [g](Backend& b, const Tensor& x, const Tensor& y, const Tensor&) { b.glu(g, y, x); }, 1e-6);
    VULKAN_NO_MESSAGES();
}

// The contract on the Vulkan backend: a row's matmul result alone = among k = 2..16 rows, bit for bit, for every
// weight type (one pass over W per 8 rows, whatever the count), and the norm-then-gate chain of a layer.
// The shaders give a weight row lanes by its width (matmul_unit.glsl), so the matmul is held to it at every
// lane count, with workgroups that end past the last row: 1 lane a row (64 columns; a K-quant's 256: 4), 16 (1024)
// and the whole workgroup (4096). (Quick mode, the sanitizer's run: those shapes for one type of each unit kind,
// one element, a block of 32, a K-quant's quarter-sub-block; the release suite runs every type.)
TEST(Vulkan, BatchInvariance) {
    VULKAN_OR_SKIP(vk);
    expect_batch_invariant(*vk, false);
    for (TensorType t : kWeightTypes) {
        if (test::quick_mode() && t != TensorType::F32 && t != TensorType::Q8_0 && t != TensorType::Q4_K) continue;
        const int64_t narrow = type_traits(t).block_elems == 256 ? 256 : 64;
        for (auto [R, C] : {std::pair<int64_t, int64_t>{70, narrow}, {37, 1024}, {9, 4096}})
            EXPECT_TRUE(rows_are_batch_invariant(*vk, matmul_op(t, R, C, false), int(C)))
                << type_name(t) << ", " << R << " rows of " << C;
    }
    VULKAN_NO_MESSAGES();
}

// What the backend does not run yet is said, by name, before any pass: a model needing it is refused at load.
TEST(Vulkan, RecurrentOpsMatchTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    expect_recurrent_ops_match(*vk, *ref);
    VULKAN_NO_MESSAGES();
}

// A cache type it does not take is refused by name, before any pass (as on the CPU: no K-quant caches).
TEST(Vulkan, ACacheTypeItDoesNotTakeIsRefusedByName) {
    VULKAN_OR_SKIP(vk);
    EXPECT_FALSE(vk->supports(Op::KV_STORE, TensorType::Q4_K));
    Held k = make(*vk, TensorType::F32, 1, 256), kc = make(*vk, TensorType::Q4_K, 4, 256);
    const int slot = 0;
    try {
        vk->kv_store(k.t, k.t, &slot, kc.t, Tensor{});
        FAIL() << "a Q4_K cache was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no Q4_K caches"), std::string::npos) << e.what();
    }
    VULKAN_NO_MESSAGES();
}

TEST(Vulkan, RopeKvStoreAndRowCopyMatchTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    EXPECT_LE(rope_error(*vk, *ref), 1e-6);
    // the caches' bytes exactly as tandem's quantize_row_ref writes them, for every cache type it takes
    for (TensorType t : kVulkanCacheTypes)
        EXPECT_EQ(kv_store_bytes(*vk, t, TensorType::F16), kv_store_bytes(*ref, t, TensorType::F16)) << type_name(t);
    EXPECT_EQ(kv_store_bytes(*vk, TensorType::Q4_0, TensorType::Q8_0),
              kv_store_bytes(*ref, TensorType::Q4_0, TensorType::Q8_0));
    VULKAN_NO_MESSAGES();
}

// Attention over every cache type it takes (and a mixed pair), windows and sinks, grouped-query heads, a chain and
// a tree: within float rounding of the reference's double sums.
TEST(Vulkan, AttentionMatchesTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    std::vector<std::pair<TensorType, TensorType>> types;
    for (TensorType t : kVulkanCacheTypes) types.push_back({t, t});
    types.push_back({TensorType::Q8_0, TensorType::F16});
    for (auto [tk, tv] : types)
        for (int window : {0, 40})
            for (bool sinks : {false, true}) {
                CacheCase c;
                c.tk = tk;
                c.tv = tv;
                c.window = window;
                c.sinks = sinks;
                const std::vector<int> pos = {88, 89, 90, 91, 92};
                const auto q = gaussian(pos.size() * size_t(c.nh * c.hd), 14);
                EXPECT_LE(rel_err(run_attention(*vk, c, pos, 88, {}, q), run_attention(*ref, c, pos, 88, {}, q)), 1e-5)
                    << type_name(tk) << "/" << type_name(tv) << " window " << window << " sinks " << sinks;
                // a tree: rows 88..92 where 90 and 91 are siblings under 89 (slots 88, 89, 90 | 91, 92)
                const std::vector<std::vector<int32_t>> tails = {
                    {88}, {88, 89}, {88, 89, 90}, {88, 89, 91}, {88, 89, 91, 92}};
                const std::vector<int> tpos = {88, 89, 90, 90, 91};
                EXPECT_LE(
                    rel_err(run_attention(*vk, c, tpos, 88, tails, q), run_attention(*ref, c, tpos, 88, tails, q)),
                    1e-5)
                    << "tree " << type_name(tk);
            }
    VULKAN_NO_MESSAGES();
}

// The mixture of experts on the device: the router's choice (an I32 tensor of the backend, never read back), the
// experts' products of every weight type, their biases, weights and sum, the shared expert's gate.
TEST(Vulkan, MixtureOpsMatchTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    expect_routing_matches(*vk, *ref, 1e-6);
    expect_matmul_id_matches(*vk, *ref, [](TensorType) { return 2e-6; });
    expect_mixture_ops_match(*vk, *ref);
    VULKAN_NO_MESSAGES();
}

// Two sessions in one pass (continuous batching): each segment's rows attend over its own cache, in its own
// buffers, one dispatch per segment on Vulkan; rows of the two interleaved in the pass's order.
TEST(Vulkan, AttentionOverSeveralSessionsMatchesTheReference) {
    VULKAN_OR_SKIP(vk);
    auto ref = make_reference_backend();
    const int nh = 4, nkv = 2, hd = 64, n_ctx = 64, kvd = nkv * hd;
    const std::vector<int> seg = {0, 1, 1, 0, 1}, pos = {40, 10, 11, 41, 12}, lo = {0, 0, 0, 0, 0};
    const auto q = gaussian(seg.size() * size_t(nh * hd), 40);
    std::vector<float> out[2];
    Backend* bs[2] = {vk.get(), ref.get()};
    for (int i = 0; i < 2; i++) {
        Held k0 = make(*bs[i], TensorType::F16, n_ctx, kvd, gaussian(size_t(n_ctx * kvd), 41)),
             v0 = make(*bs[i], TensorType::F16, n_ctx, kvd, gaussian(size_t(n_ctx * kvd), 42));
        Held k1 = make(*bs[i], TensorType::Q8_0, n_ctx, kvd, gaussian(size_t(n_ctx * kvd), 43)),
             v1 = make(*bs[i], TensorType::Q8_0, n_ctx, kvd, gaussian(size_t(n_ctx * kvd), 44));
        Held hq = make(*bs[i], TensorType::F32, int64_t(seg.size()), nh * hd, q),
             ho = make(*bs[i], TensorType::F32, int64_t(seg.size()), nh * hd);
        const AttnSegment segs[2] = {{k0.t, v0.t, 40}, {k1.t, v1.t, 10}};
        const AttnArgs a{nh, nkv, hd, 0.125f, Tensor{}, segs, 2, seg.data(), pos.data(), lo.data(), nullptr};
        bs[i]->attention(a, hq.t, ho.t);
        out[i] = get(*bs[i], ho.t);
    }
    EXPECT_LE(rel_err(out[0], out[1]), 1e-5);
    VULKAN_NO_MESSAGES();
}

// A model's weights placed on the device through the registry: every matrix's rows read back are the file's bytes,
// the output head multiplies as the CPU's does, a view (tied output) names its first visit's copy.
TEST(Vulkan, AModelsWeightsArePlacedThroughTheRegistry) {
    VULKAN_OR_SKIP(vk);
    ThreadPool pool(1);
    auto cpu = make_cpu_backend(pool);
    for (const char* rel : {"models/stories260K.gguf", "models/synth-llama-spm-q8_0.gguf"}) {
        SCOPED_TRACE(rel);
        auto model = Model::load(test::shared_file(rel));
        DeviceWeights dw(*vk, *model);
        EXPECT_GT(dw.matrices(), 0u);
        EXPECT_GE(dw.bytes(), model->weights_bytes() / 2);
        int checked = 0;
        model->for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
            if (!w.data || checked++ % 3) return;  // every third matrix, to keep the test short
            const backend::Tensor t = dw.matrix(w);
            std::vector<uint8_t> got(row_bytes(w.type, w.cols) * size_t(w.rows));
            vk->read(t, got.data());
            for (int64_t r = 0; r < w.rows; r++)
                ASSERT_EQ(0, std::memcmp(got.data() + size_t(r) * row_bytes(w.type, w.cols),
                                         w.data + size_t(r) * w.row_stride, row_bytes(w.type, w.cols)))
                    << v.name << " layer " << v.layer << " row " << r;
        });
        const Weight& out = model->output();
        const int64_t E = out.cols;
        const auto x = gaussian(size_t(3 * E), 50);
        Held xv = make(*vk, TensorType::F32, 3, E, x), yv = make(*vk, TensorType::F32, 3, out.rows);
        vk->matmul(dw.matrix(out), xv.t, yv.t);
        const HostTensors H{cpu->host_memory()};
        std::vector<float> yc(size_t(3 * out.rows));
        cpu->matmul(H.weight(out), H.rows(x.data(), 3, E), H.rows(yc.data(), 3, out.rows));
        EXPECT_LE(rel_err(get(*vk, yv.t), yc), matmul_tolerance(out.type));
        EXPECT_EQ(dw.vec(model->output_norm()).cols, E);
    }
    VULKAN_NO_MESSAGES();
}

// A pass of more dispatches than one descriptor pool holds is run in pieces: the piece that ends inside an op must
// keep that op's staged host arrays (row ids here) alive for the dispatch that follows.
TEST(Vulkan, ALongPassRunsInPiecesWithoutLosingStagedArrays) {
    VULKAN_OR_SKIP(vk);
    const int64_t R = 16, C = 64;
    const auto w = gaussian(size_t(R * C), 60);
    Held table = make(*vk, TensorType::F32, R, C, w), y = make(*vk, TensorType::F32, 4, C);
    for (int i = 0; i < 2600; i++) {  // 2.5 pools' worth of dispatches, no read in between
        const int32_t id = int32_t((i * 7) % R);
        vk->get_rows(table.t, &id, 1, y.t.rows_at(i % 4, 1));
    }
    const auto got = get(*vk, y.t);
    for (int i = 2596; i < 2600; i++) {
        const int32_t id = int32_t((i * 7) % R);
        for (int64_t c = 0; c < C; c++) ASSERT_EQ(got[size_t((i % 4) * C + c)], w[size_t(id * C + c)]) << i;
    }
    VULKAN_NO_MESSAGES();
}
