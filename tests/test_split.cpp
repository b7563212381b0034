// A model split across ranks (tandem/split.h), with the ranks as threads of this process (local_transports): the
// layer plan and flags, twin sessions whose every pass and state change gives the logits of the whole model bit for
// bit, each rank's share of the weights, and the faults (a rank that does not answer, a rank with another file, a
// rank that fails). The same protocol over MPI runs in tests/split/run.sh (mpirun, several processes).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <cstring>
#include <thread>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/split.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::test;

TEST(Split, LayersFollowTheShares) {
    EXPECT_EQ(split_layers(5, 2, {}), (std::vector<int>{0, 3, 5}));  // equal shares: the remainder to rank 0
    EXPECT_EQ(split_layers(32, 2, {3, 1}), (std::vector<int>{0, 24, 32}));
    EXPECT_EQ(split_layers(32, 4, {}), (std::vector<int>{0, 8, 16, 24, 32}));
    EXPECT_EQ(split_layers(3, 3, {100, 1, 1}), (std::vector<int>{0, 1, 2, 3}));  // every rank at least one layer
    EXPECT_EQ(split_layers(80, 3, {2, 1, 1}), (std::vector<int>{0, 40, 60, 80}));
    EXPECT_THROW(split_layers(2, 3, {}), Error);  // fewer layers than ranks
    EXPECT_THROW(split_layers(8, 2, {1, 0}), Error);  // a rank without a share
    EXPECT_THROW(split_layers(8, 2, {1, 1, 1}), Error);  // more shares than ranks
    // rank 0's output head counted in layers: it takes fewer
    EXPECT_EQ(split_layers(22, 2, {}, 2.0), (std::vector<int>{0, 10, 22}));
    EXPECT_EQ(split_layers(4, 2, {}, 10.0), (std::vector<int>{0, 1, 4}));  // at least one each
    EXPECT_EQ(split_layers(22, 2, {3, 1}, 2.0), (std::vector<int>{0, 16, 22}));
    EXPECT_EQ(parse_split_weights("3,1"), (std::vector<float>{3, 1}));
    EXPECT_EQ(parse_split_weights("3/1"), (std::vector<float>{3, 1}));  // llama.cpp's other spelling
    EXPECT_THROW(parse_split_weights("3,x"), Error);
    EXPECT_THROW(parse_split_weights("0,0"), Error);
    EXPECT_EQ(parse_split_mode("layer"), SplitMode::LAYER);
    EXPECT_EQ(parse_split_mode("none"), SplitMode::NONE);
    EXPECT_EQ(parse_split_mode("tensor"), SplitMode::TENSOR);
    EXPECT_EQ(parse_split_mode("row"), SplitMode::TENSOR);  // llama.cpp's name for it
    EXPECT_THROW(parse_split_mode("sideways"), Error);
    // a tensor split's shares of heads, FFN blocks or experts: split_layers' rule, fewer parts than ranks refused
    EXPECT_EQ(tensor_shares(4, 2, {}, "heads"), (std::vector<int>{0, 2, 4}));
    EXPECT_EQ(tensor_shares(8, 2, {3, 1}, "blocks"), (std::vector<int>{0, 6, 8}));
    EXPECT_THROW(tensor_shares(2, 3, {}, "heads"), Error);
}

namespace {

// N ranks over one file (or a file per rank): rank 0's model and cluster here, the others in threads that load
// their share and serve until rank 0's cluster goes (or breaks). `stall`: rank 1 loads and then never serves.
struct Ranks {
    std::vector<std::shared_ptr<Transport>> ts;
    std::shared_ptr<Cluster> c0;
    std::shared_ptr<const Model> m0;
    std::vector<std::thread> threads;
    std::vector<std::string> errors;
    std::vector<std::shared_ptr<const Model>> models;  // each rank's, to inspect its share (after wait_loaded)
    std::atomic<int> loaded{0};

    // `others`: the options of ranks > 0 when they differ from rank 0's (a rank started with other flags).
    Ranks(const std::vector<std::string>& files, const SplitOptions& opt = {}, bool stall = false,
          const SplitOptions* others = nullptr)
        : ts(local_transports(int(files.size()))), errors(files.size()), models(files.size()) {
        const SplitOptions opt_r = others ? *others : opt;
        for (size_t r = 1; r < files.size(); r++)
            threads.emplace_back([this, r, files, opt_r, stall] {
                auto c = std::make_shared<Cluster>(ts[r], opt_r);
                try {
                    LoadOptions lo;
                    lo.cluster = c;
                    models[r] = Model::load(files[r], lo);
                    loaded++;
                    if (stall) return;
                    ThreadPool p(1);
                    c->serve(models[r], p);
                } catch (const std::exception& e) {
                    errors[r] = e.what();
                }
            });
        c0 = std::make_shared<Cluster>(ts[0], opt);
        LoadOptions lo;
        lo.cluster = c0;
        try {
            m0 = Model::load(files[0], lo);
            models[0] = m0;
        } catch (...) {
            finish(true);
            throw;
        }
    }
    void wait_loaded() {
        while (loaded < int(threads.size())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Rank 0 stops the others (or, after a failure, ends the world so that none waits) and joins them.
    void finish(bool abort = false) {
        if (abort || !c0 || c0->broken()) ts[0]->abort(1);
        else c0->stop();
        for (auto& t : threads) t.join();
        threads.clear();
    }
    ~Ranks() {
        if (!threads.empty()) finish();
    }
};

// A layer split: the whole model's logits bit for bit. A tensor split (g_tol > 0): its sums run in another order,
// which moves a value across a rounding boundary now and then (8-bit activations, the F16 cache, gemma's F16 GELU
// table) and that by a quantum: the reference tests' rule for another engine's kernels (test_reference.cpp) holds,
// every logit within g_tol of the whole model's and the same greedy token wherever its best two differ by more than
// kMargin.
double g_tol = 0;
double g_worst = 0;  // the largest difference seen
constexpr double kMargin = 0.25;
void expect_same_logits(const Session& a, const Session& b, const char* what) {
    ASSERT_EQ(a.n_logits(), b.n_logits()) << what;
    const int nv = a.n_vocab();
    for (int i = 0; i < a.n_logits(); i++) {
        const float *x = a.logits(i), *y = b.logits(i);
        if (g_tol == 0) {
            ASSERT_EQ(0, std::memcmp(x, y, sizeof(float) * size_t(nv)))
                << what << ": row " << i << " differs from the whole model's";
            continue;
        }
        float scale = 0, diff = 0;
        int best = 0, best_b = 0;
        for (int v = 0; v < nv; v++) {
            scale = std::max(scale, std::fabs(x[v]));
            diff = std::max(diff, std::fabs(x[v] - y[v]));
            if (x[v] > x[best]) best = v;
            if (y[v] > y[best_b]) best_b = v;
        }
        (void)scale;
        g_worst = std::max(g_worst, double(diff));
        ASSERT_LE(diff, g_tol) << what << ": row " << i << " is not the whole model's within " << g_tol;
        float second = -INFINITY;
        for (int v = 0; v < nv; v++)
            if (v != best) second = std::max(second, x[v]);
        if (x[best] - second > kMargin)
            EXPECT_EQ(best, best_b) << what << ": row " << i << " chooses another greedy token";
    }
}

// The same calls on a session of the whole model and on one of the split model, logits compared bit for bit after
// each: prompt chunks, a chain, a batch of two sessions, a token tree and its kept path, a truncation, a context
// shift.
void expect_split_equals_whole(const std::string& file, int n_ranks, const std::vector<float>& shares = {},
                               SplitMode mode = SplitMode::LAYER, double tol = 0) {
    SCOPED_TRACE(file + " on " + std::to_string(n_ranks) + " ranks");
    SplitOptions opt;
    opt.mode = mode;
    g_tol = tol;
    opt.weights = shares;
    opt.timeout_s = 60;
    Ranks ranks(std::vector<std::string>(size_t(n_ranks), file), opt);
    auto whole = Model::load(file);
    ThreadPool pool(1);
    SessionParams sp;
    sp.n_ctx = 128;
    sp.n_batch = 8;  // a prompt in several chunks, each a pass through every rank
    Session a(whole, sp, pool), b(ranks.m0, sp, pool);
    Session a2(whole, sp, pool), b2(ranks.m0, sp, pool);
    const int nv = a.n_vocab();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 21; i++) prompt.push_back(int32_t((i * 37 + 5) % nv));
    a.decode(prompt, false);
    b.decode(prompt, false);
    expect_same_logits(a, b, "prompt");
    a.decode({7, 8, 9}, true);
    b.decode({7, 8, 9}, true);
    expect_same_logits(a, b, "verification chain");
    a2.decode({1, 2, 3, 4}, false);
    b2.decode({1, 2, 3, 4}, false);
    // two sessions in one pass (server slots), one of them a token tree
    const int32_t tree_tokens[5] = {11, 12, 13, 14, 15}, parents[5] = {-1, 0, 0, 1, 2};
    const int32_t chain[2] = {21, 22};
    Session::decode_batch({{&a, tree_tokens, 5, true, parents}, {&a2, chain, 2, true}});
    Session::decode_batch({{&b, tree_tokens, 5, true, parents}, {&b2, chain, 2, true}});
    expect_same_logits(a, b, "token tree in a batch");
    expect_same_logits(a2, b2, "chain beside a tree");
    const int base = a.n_past() - 5;
    a.keep_path(base, {0, 2, 4});
    b.keep_path(base, {0, 2, 4});
    a.decode({30}, false);
    b.decode({30}, false);
    expect_same_logits(a, b, "after the kept path");
    a.truncate(20);
    b.truncate(20);
    a.decode({31, 32}, true);
    b.decode({31, 32}, true);
    expect_same_logits(a, b, "after a truncation");
    a.shift(4, 6);
    b.shift(4, 6);
    a.decode({33}, false);
    b.decode({33}, false);
    expect_same_logits(a, b, "after a context shift");
    ASSERT_EQ(a.tokens(), b.tokens());
    if (mode == SplitMode::TENSOR) {  // a given N gives the same bits every time: a new session, the same calls
        Session c(ranks.m0, sp, pool);
        c.decode(b.tokens(), true);
        Session d(ranks.m0, sp, pool);
        d.decode(b.tokens(), true);
        g_tol = 0;
        expect_same_logits(c, d, "the same tokens again");
    }
    EXPECT_THROW(b.save_state(temp_dir() + "/split.state"), Error);  // each rank holds a part: refused
    ranks.finish();
    for (size_t r = 1; r < ranks.errors.size(); r++) EXPECT_EQ(ranks.errors[r], "") << "rank " << r;
}

}  // namespace

TEST(Split, TwinSessionsGiveTheWholeModelsLogits) {
    expect_split_equals_whole(shared_file("models/stories260K.gguf"), 2);
    expect_split_equals_whole(shared_file("models/stories260K.gguf"), 3, {1, 2, 2});
    expect_split_equals_whole(shared_file("models/synth-qwen2-gpt2bpe-bf16.gguf"), 2);  // biases, BF16
}

TEST(Split, MixtureOfExpertsAndWindowsSplitToo) {
    expect_split_equals_whole(shared_file("models-modern/synth-qwen3moe-spm-q8_0.gguf"), 2);
    expect_split_equals_whole(shared_file("models-modern/synth-gemma3-spm-q8_0.gguf"), 2);  // sliding windows
    expect_split_equals_whole(shared_file("models-modern/synth-gptoss-spm-f16-mxfp4.gguf"), 2);  // sinks, MXFP4
}

// Tensor split: every rank runs every layer on its heads and FFN units (or experts); the outputs summed.
// Tolerances: the reference tests' 0.4 for 8-bit activations (test_reference.cpp), 0.003 for float weights (measured 3e-4: gemma's F16 GELU table).
TEST(Split, TensorSplitGivesTheWholeModelsLogitsToRounding) {
    const SplitMode T = SplitMode::TENSOR;
    g_worst = 0;
    expect_split_equals_whole(shared_file("models/stories260K.gguf"), 2, {}, T, 0.003);  // F32 slices: copies
    expect_split_equals_whole(shared_file("models/synth-qwen2-gpt2bpe-bf16.gguf"), 2, {}, T, 0.003);  // biases
    std::printf("tensor split, float weights: the largest logit difference from the whole model %.2g\n", g_worst);
    g_worst = 0;
    expect_split_equals_whole(shared_file("models/synth-llama-spm-q8_0.gguf"), 2, {}, T, 0.4);
    expect_split_equals_whole(shared_file("models/synth-llama-spm-q4_0.gguf"), 2, {3, 1}, T, 0.4);
    std::printf("tensor split, quantized: the largest logit difference from the whole model %.2g\n", g_worst);
}

TEST(Split, TensorSplitOfExpertsSinksAndWindows) {
    const SplitMode T = SplitMode::TENSOR;
    g_worst = 0;
    expect_split_equals_whole(synth_file("tiny-test-qwen3moe", "F32"), 2, {}, T, 0.003);
    expect_split_equals_whole(synth_file("tiny-test-gptoss", "F32"), 2, {}, T, 0.003);  // sinks, biases
    expect_split_equals_whole(synth_file("tiny-test-gemma3", "F32"), 2, {}, T, 0.003);  // windows, post-norms
    expect_split_equals_whole(synth_file("tiny-ref-glm4moe", "F32"), 2, {}, T,
                              0.003);  // a shared expert, a dense layer
    std::printf("tensor split, float weights: the largest logit difference from the whole model %.2g\n", g_worst);
    g_worst = 0;
    expect_split_equals_whole(shared_file("models-modern/synth-qwen3moe-spm-q8_0.gguf"), 2, {}, T, 0.4);
    expect_split_equals_whole(shared_file("models-modern/synth-gemma3-spm-q8_0.gguf"), 2, {}, T, 0.4);
    expect_split_equals_whole(shared_file("models-modern/synth-gptoss-spm-f16-mxfp4.gguf"), 2, {}, T, 0.4);
    std::printf("tensor split, quantized: the largest logit difference from the whole model %.2g\n", g_worst);
}

TEST(Split, TensorSplitBindsEachRanksHeadsAndUnits) {
    const std::string file = shared_file("models/synth-llama-spm-q8_0.gguf");
    SplitOptions opt;
    opt.mode = SplitMode::TENSOR;
    Ranks ranks({file, file}, opt);
    ranks.wait_loaded();
    auto whole = Model::load(file);
    const HParams& hp = whole->hparams();
    for (int l = 0; l < hp.n_layer; l++) {
        const LayerWeights &L0 = ranks.models[0]->layer(l), &L1 = ranks.models[1]->layer(l), &W = whole->layer(l);
        // the heads (2 KV heads: one each) and the FFN units add up to the whole; rank 0, which also holds the
        // output head, takes fewer FFN units (bind_tensor_share's default shares)
        EXPECT_EQ(L0.n_head, hp.n_head / 2);
        EXPECT_EQ(L0.n_head_kv + L1.n_head_kv, W.n_head_kv);
        EXPECT_EQ(L0.wq.rows + L1.wq.rows, W.wq.rows);
        EXPECT_EQ(L0.wo.cols + L1.wo.cols, W.wo.cols);
        EXPECT_EQ(L0.wo.rows, W.wo.rows);
        EXPECT_EQ(L0.w_gate.rows + L1.w_gate.rows, W.w_gate.rows);
        EXPECT_EQ(L0.w_down.cols + L1.w_down.cols, W.w_down.cols);
        EXPECT_LT(L0.w_gate.rows, L1.w_gate.rows);
        EXPECT_EQ(L0.w_down.cols % 32, 0);  // cut at a Q8_0 block
        EXPECT_EQ(L1.w_down.row_stride, W.w_down.row_stride);  // a view of the file's rows, not a copy
    }
    EXPECT_NE(ranks.models[1]->tok_embd().data, nullptr);  // every rank embeds
    EXPECT_EQ(ranks.models[1]->output().data, nullptr);  // rank 0 computes the logits
    ThreadPool pool(1);
    SessionParams sp;
    sp.n_ctx = 64;
    Session s(ranks.m0, sp, pool), w(whole, sp, pool);
    EXPECT_EQ(s.kv_bytes() * 2, w.kv_bytes());  // half the KV heads: half the cache
}

TEST(Split, TensorSplitRefusesWhatItCannotCut) {
    const std::string file = synth_file("tiny-ref-qwen35", "Q8_0");
    SplitOptions opt;
    opt.mode = SplitMode::TENSOR;
    try {
        Ranks ranks({file, file}, opt);
        FAIL() << "a tensor split of Gated DeltaNet layers was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("Gated DeltaNet layers: not split by tensors"), std::string::npos)
            << e.what();
    }
    // more ranks than KV heads (the synth llama has 2 per layer... or its block cuts give fewer parts)
    const std::string llama = shared_file("models/stories260K.gguf");
    const int kv = Model::load(llama)->layer(0).n_head_kv;
    try {
        Ranks ranks(std::vector<std::string>(size_t(kv + 1), llama), opt);
        FAIL() << "a tensor split into more ranks than KV heads was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("fewer than the"), std::string::npos) << e.what();
    }
}

// A tensor split's column slice of a quantized matrix is a view with the file's row stride (model/tensor_share.cpp):
// every kernel path must give what a contiguous copy of the same blocks gives — unpacked, repacked (the copy holds
// the slice), and in grouped jobs. The K-quants reach this path on real models (128-wide heads), not on the test
// files, whose cuts are refused (a Q4_K block spans both ranks' heads).
TEST(Split, StridedColumnViewsMatchCopies) {
    ThreadPool pool(2);
    for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                         TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                         TensorType::MXFP4, TensorType::IQ4_NL}) {
        SCOPED_TRACE(type_name(t));
        const int64_t be = type_traits(t).block_elems, rows = 48, cols = be * 8, c0 = be * 3, n = be * 4;
        std::mt19937 rng(1);
        std::normal_distribution<float> nd;
        std::vector<float> src(size_t(rows * cols));
        for (float& v : src) v = nd(rng);
        const size_t rb = row_bytes(t, cols), nrb = row_bytes(t, n);
        std::vector<uint8_t> q(rb * size_t(rows)), copy(nrb * size_t(rows));
        for (int64_t r = 0; r < rows; r++) quantize_row_ref(t, &src[size_t(r * cols)], q.data() + size_t(r) * rb, cols);
        const size_t skip = size_t(c0 / be) * size_t(type_traits(t).block_bytes);
        for (int64_t r = 0; r < rows; r++)
            std::memcpy(copy.data() + size_t(r) * nrb, q.data() + size_t(r) * rb + skip, nrb);
        const WeightView strided{q.data() + skip, t, n, rows, rb, nullptr},
            whole{copy.data(), t, n, rows, nrb, nullptr};
        for (int ntok : {1, 5}) {
            std::vector<float> x(size_t(ntok * n));
            for (float& v : x) v = nd(rng);
            std::vector<float> y1(size_t(ntok * rows)), y2(y1.size()), y3(y1.size()), y4(y1.size());
            matmul(pool, strided, x.data(), ntok, y1.data());
            matmul(pool, whole, x.data(), ntok, y2.data());
            EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << "unpacked, " << ntok;
            MatmulJob jobs[2] = {{strided, x.data(), ntok, y3.data()}, {whole, x.data(), ntok, y4.data()}};
            matmul_jobs(pool, jobs, 2);
            EXPECT_EQ(0, std::memcmp(y3.data(), y4.data(), y3.size() * sizeof(float))) << "jobs, " << ntok;
            if (!isa().matmul_packed || !packable(t, rows, n)) continue;
            std::vector<uint8_t> p1(packed_bytes(t, rows, n)), p2(p1.size());
            repack_rows(t, strided.data, strided.row_stride, rows, n, p1.data());
            repack_rows(t, whole.data, whole.row_stride, rows, n, p2.data());
            EXPECT_EQ(p1, p2) << "the repacked copies differ";
        }
    }
}

TEST(Split, EachRankBindsOnlyItsLayers) {
    const std::string file = shared_file("models/stories260K.gguf");
    Ranks ranks({file, file});
    ranks.wait_loaded();
    const Model& m0 = *ranks.models[0];
    const Model& m1 = *ranks.models[1];
    const int n = m0.hparams().n_layer, cut = ranks.c0->end_layer();
    ASSERT_GT(cut, 0);
    ASSERT_LT(cut, n);
    for (int l = 0; l < n; l++) {
        EXPECT_EQ(m0.holds_layer(l), l < cut);
        EXPECT_EQ(m0.layer(l).wq.data != nullptr, l < cut) << "rank 0, layer " << l;
        EXPECT_EQ(m1.layer(l).wq.data != nullptr, l >= cut) << "rank 1, layer " << l;
        EXPECT_EQ(m1.layer(l).w_down.data != nullptr, l >= cut) << "rank 1, layer " << l;
        EXPECT_EQ(m1.layer(l).head_dim, m0.layer(l).head_dim);  // shapes stay everywhere
    }
    EXPECT_NE(m0.tok_embd().data, nullptr);
    EXPECT_EQ(m1.tok_embd().data, nullptr);  // rank 0's: the embedding and the output head
    EXPECT_EQ(m1.output().data, nullptr);
    ThreadPool pool(1);
    SessionParams sp;
    sp.n_ctx = 64;
    Session s(ranks.m0, sp, pool);
    Session whole(Model::load(file), sp, pool);
    EXPECT_LT(s.kv_bytes(), whole.kv_bytes());  // rank 0 keeps the cache of its layers only
    EXPECT_GT(s.kv_bytes(), 0u);
}

TEST(Split, ARankWithAnotherFileIsRefusedByName) {
    const std::string a = shared_file("models/synth-llama-spm-q8_0.gguf"),
                      b = shared_file("models/synth-llama-spm-q4_0.gguf");
    try {
        Ranks ranks({a, b});
        FAIL() << "a rank with another file was accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("rank 1 (local) has another model file or binary"), std::string::npos) << msg;
        EXPECT_NE(msg.find("synth-llama-spm-q4_0.gguf"), std::string::npos) << msg;
    }
}

namespace {

// Ranks 1 and 2 load and then never serve: rank 0's pass (a layer split's hidden states, a tensor split's first
// reduction) waits timeout_s and names rank 1.
void stall_test(SplitMode mode) {
    SCOPED_TRACE(mode == SplitMode::TENSOR ? "tensor split" : "layer split");
    const std::string file = shared_file("models/stories260K.gguf");
    SplitOptions opt;
    opt.mode = mode;
    opt.timeout_s = 0.5;
    Ranks ranks({file, file, file}, opt, /*stall=*/true);
    ThreadPool pool(1);
    SessionParams sp;
    sp.n_ctx = 64;
    Session s(ranks.m0, sp, pool);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        s.decode({1, 2, 3}, false);
        FAIL() << "a pass through ranks that do not answer returned";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 (local) did not answer within 0.5 s"), std::string::npos)
            << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    EXPECT_TRUE(ranks.c0->broken());
    EXPECT_THROW(s.decode({4}, false), Error);  // at once from now on
    EXPECT_THROW(Session(ranks.m0, sp, pool), Error);  // a new session's twins cannot be opened
    ranks.finish();
}

// A command rank 1 cannot run (its twin of session 99 does not exist): it reports, rank 0 names it.
void fail_test(SplitMode mode) {
    SCOPED_TRACE(mode == SplitMode::TENSOR ? "tensor split" : "layer split");
    const std::string file = shared_file("models/stories260K.gguf");
    SplitOptions opt;
    opt.mode = mode;
    opt.timeout_s = 30;
    Ranks ranks({file, file}, opt);
    ThreadPool pool(1);
    SessionParams sp;
    sp.n_ctx = 64;
    Session s(ranks.m0, sp, pool);
    s.decode({1, 2, 3}, false);
    ranks.c0->truncate(99, 0);
    try {
        s.decode({4}, false);
        FAIL() << "rank 1's failure went unnoticed";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 (local) failed: rank 0 named session 99"), std::string::npos)
            << e.what();
    }
    EXPECT_TRUE(ranks.c0->broken());
    ranks.finish();
    EXPECT_NE(ranks.errors[1].find("session 99"), std::string::npos);
}

}  // namespace

// Every rank computes its plan or shares from its own flags: a rank started with other ones would cut the model
// elsewhere (overlapping shares that the sums would add without a word, or a layer split facing a tensor split).
TEST(Split, ARankWithOtherSplitFlagsIsRefusedByName) {
    const std::string file = shared_file("models/synth-llama-spm-q8_0.gguf");
    SplitOptions tensor, tensor31, layer;
    tensor.mode = tensor31.mode = SplitMode::TENSOR;
    tensor31.weights = {3, 1};
    for (const auto& [a, b] : {std::pair{tensor31, tensor}, std::pair{tensor, layer}}) {
        try {
            Ranks ranks({file, file}, a, false, &b);
            FAIL() << "a rank with other split flags was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("rank 1 (local) was started with other split flags than rank 0"),
                      std::string::npos)
                << e.what();
        }
    }
}

TEST(Split, ARankThatDoesNotAnswerBreaksTheClusterByName) {
    for (SplitMode mode : {SplitMode::LAYER, SplitMode::TENSOR}) stall_test(mode);
}

TEST(Split, ARankThatFailsIsNamedByRankZero) {
    for (SplitMode mode : {SplitMode::LAYER, SplitMode::TENSOR}) fail_test(mode);
}

// Emulated links (benchmarks): a message is held for the one-way delay plus its bytes over the rate, in order.
TEST(Split, EmulatedLinksHoldMessagesForTheirDelay) {
    auto ts = local_transports(2);
    auto a = emulate_links(ts[0], 40.0, 0.0), b = emulate_links(ts[1], 40.0, 0.0);  // 20 ms each way
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t one = 1, two = 2;
    ASSERT_TRUE(a->send(1, 7, &one, sizeof one, 0));
    ASSERT_TRUE(a->send(1, 7, &two, sizeof two, 0));
    std::vector<uint8_t> m;
    int src = -1;
    EXPECT_FALSE(b->try_recv(0, 7, m, &src));  // not there yet
    while (!b->try_recv(0, 7, m, &src)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(waited_ms, 20.0);
    ASSERT_EQ(m.size(), sizeof one);
    EXPECT_EQ(std::memcmp(m.data(), &one, sizeof one), 0);  // in order
    EXPECT_EQ(src, 0);
    while (!b->try_recv(-1, 7, m, &src)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    EXPECT_EQ(std::memcmp(m.data(), &two, sizeof two), 0);
}
