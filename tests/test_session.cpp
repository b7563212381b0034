#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cpu/isa.h"
#include "model/delta_net.h"
#include "backend/cpu/kernels.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/sampling.h"
#include "tandem/session.h"
#include "tandem/synth.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

std::shared_ptr<const Model> session_stories() {
    static auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    return m;
}

const std::vector<int32_t> kSeq = {1, 403, 407, 261, 378, 432, 269, 300, 262, 301, 350, 280, 270, 290, 310, 320};

}  // namespace

TEST(Session, BatchedLogitsEqualOneTokenAtATime) {
    ThreadPool pool(2);
    Session a(session_stories(), {}, pool), b(session_stories(), {}, pool);
    a.decode(kSeq, true);
    ASSERT_EQ(a.n_logits(), int(kSeq.size()));
    for (size_t i = 0; i < kSeq.size(); i++) {
        b.decode(&kSeq[i], 1, false);
        for (int v = 0; v < b.n_vocab(); v++)
            ASSERT_NEAR(a.logits(int(i))[v], b.last_logits()[v], 1e-4) << "position " << i << " token " << v;
    }
}

TEST(Session, TruncateThenRedecodeEqualsFreshDecode) {
    ThreadPool pool(1);
    Session s(session_stories(), {}, pool);
    s.decode(kSeq, false);
    std::vector<float> want(s.last_logits(), s.last_logits() + s.n_vocab());
    // Roll back 6 tokens, feed different ones, roll back again, feed the original tail.
    s.truncate(10);
    EXPECT_EQ(s.n_past(), 10);
    std::vector<int32_t> junk = {5, 6, 7};
    s.decode(junk, false);
    s.truncate(10);
    s.decode(std::vector<int32_t>(kSeq.begin() + 10, kSeq.end()), false);
    EXPECT_EQ(s.tokens(), kSeq);
    for (int v = 0; v < s.n_vocab(); v++) ASSERT_EQ(s.last_logits()[v], want[size_t(v)]);
}

TEST(Session, LongPromptIsProcessedInChunks) {
    ThreadPool pool(2);
    SessionParams small;
    small.n_batch = 5;
    Session a(session_stories(), small, pool), b(session_stories(), {}, pool);
    a.decode(kSeq, true);
    b.decode(kSeq, true);
    for (size_t i = 0; i < kSeq.size(); i++)
        for (int v = 0; v < a.n_vocab(); v++) ASSERT_NEAR(a.logits(int(i))[v], b.logits(int(i))[v], 1e-4);
}

TEST(Session, ContextOverflowIsAClearErrorAndLeavesTheCacheIntact) {
    ThreadPool pool(1);
    SessionParams p;
    p.n_ctx = 8;
    Session s(session_stories(), p, pool);
    s.decode(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 6), false);
    try {
        s.decode(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 3), false);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("context"), std::string::npos);
    }
    EXPECT_EQ(s.n_past(), 6);
    EXPECT_THROW(s.decode(std::vector<int32_t>{100000}, false), Error);  // out-of-range id
}

TEST(Session, SharedModelManySessions) {
    ThreadPool pool(1);
    Session a(session_stories(), {}, pool), b(session_stories(), {}, pool);
    a.decode(kSeq, false);
    b.decode(std::vector<int32_t>{1, 2, 3}, false);
    Session c(session_stories(), {}, pool);
    c.decode(kSeq, false);
    for (int v = 0; v < a.n_vocab(); v++) ASSERT_EQ(a.last_logits()[v], c.last_logits()[v]);
}

TEST(Session, DecodeBatchOfSeveralSessionsEqualsSeparateDecodes) {
    ThreadPool pool(2);
    Session a(session_stories(), {}, pool), b(session_stories(), {}, pool), c(session_stories(), {}, pool);
    Session a2(session_stories(), {}, pool), b2(session_stories(), {}, pool), c2(session_stories(), {}, pool);
    // Different histories and positions; a gets 3 new tokens with all logits, b 1, c 2 with the last only.
    a.decode(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 5), false);
    a2.decode(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 5), false);
    b.decode(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 11), false);
    b2.decode(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 11), false);
    const std::vector<int32_t> ta = {300, 301, 302}, tb = {303}, tc = {1, 304};
    Session::decode_batch({{&a, ta.data(), 3, true}, {&b, tb.data(), 1, true}, {&c, tc.data(), 2, false}});
    a2.decode(ta, true);
    b2.decode(tb, true);
    c2.decode(tc, false);
    ASSERT_EQ(a.n_logits(), 3);
    ASSERT_EQ(c.n_logits(), 1);
    for (int v = 0; v < a.n_vocab(); v++) {
        for (int i = 0; i < 3; i++) ASSERT_NEAR(a.logits(i)[v], a2.logits(i)[v], 1e-4);
        ASSERT_NEAR(b.last_logits()[v], b2.last_logits()[v], 1e-4);
        ASSERT_NEAR(c.last_logits()[v], c2.last_logits()[v], 1e-4);
    }
    EXPECT_EQ(a.tokens(), a2.tokens());
    EXPECT_EQ(c.n_past(), 2);
    // An overflow anywhere refuses the whole batch before anything runs.
    SessionParams tiny;
    tiny.n_ctx = 4;
    Session d(session_stories(), tiny, pool);
    const std::vector<int32_t> five = {1, 2, 3, 4, 5};
    EXPECT_THROW(Session::decode_batch({{&a, ta.data(), 1, false}, {&d, five.data(), 5, false}}), Error);
    EXPECT_EQ(a.n_past(), 8);
}

TEST(Session, RepackedWeightsGiveTheSameLogits) {
    // Matrices copied into the interleaved layout (at every SIMD level, backend/cpu/isa.h) compute the same integer
    // sums as the in-place kernels; only float summation order differs. Covers an untied llama model and a tied
    // qwen2 model, whose embedding rows are then read back from the packed output matrix.
    ThreadPool pool(2);
    const std::vector<int32_t> toks = {1, 17, 400, 2, 999, 3, 3, 512, 77, 998, 5, 6};
    for (const char* shape : {"tiny-test", "tiny-test-tied", "tiny-test-qwen3moe", "tiny-test-gemma3", "tiny-test-phi3",
                              "tiny-test-gptoss"}) {
        for (const char* type : {"Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M"}) {
            const std::string path = test::synth_file(shape, type);
            auto packed = Model::load(path), plain = Model::load(path, LoadOptions{false});
            EXPECT_EQ(packed->packed_bytes(), 0u);  // (placed by the first session that runs it on the CPU)
            Session a(packed, {}, pool), b(plain, {}, pool);
            EXPECT_EQ(plain->packed_bytes(), 0u);
            if (packed->packed_bytes() == 0)
                std::printf("[ note ] %s %s: this CPU has no packed layout; both sides use the in-place kernels\n",
                            shape, type);
            else EXPECT_EQ(packed->unplaced_cpu_bytes(), 0u);
            a.decode(toks, true);
            b.decode(toks, true);
            // A last-bit difference in one layer's output can flip the rounding of an 8-bit activation in the
            // next, so the paths agree to within a few percent of the largest logit (measured: up to 1%; 2.7% on gemma3,
            // whose post-norms amplify it) rather than bit for bit;
            // a wrong row order or scale would be off by the spread itself.
            double max_diff = 0, max_abs = 0;
            for (size_t i = 0; i < toks.size(); i++)
                for (int v = 0; v < a.n_vocab(); v++) {
                    max_diff = std::max(max_diff, double(std::fabs(a.logits(int(i))[v] - b.logits(int(i))[v])));
                    max_abs = std::max(max_abs, double(std::fabs(b.logits(int(i))[v])));
                }
            std::printf("[ repack ] %s %s: %zu bytes repacked, max |logit| %.3f, max difference %.5f\n", shape, type,
                        packed->packed_bytes(), max_abs, max_diff);
            EXPECT_GT(max_abs, 0.1);
            EXPECT_LT(max_diff, 0.05 * max_abs) << shape << " " << type;
        }
    }
}

// Hidden states kept for an MTP draft (Session::keep_hidden): every decoded row's final normed state, equal to what
// embed() returns for the same tokens; a tree's kept path holds its nodes' states at their new rows; truncate and
// release_hidden drop rows.
TEST(Session, KeptHiddenStatesFollowTheCache) {
    ThreadPool pool(2);
    auto m = Model::load(test::synth_file("tiny-ref-glm4moe", "Q8_0"));
    const int E = m->hparams().n_embd;
    const std::vector<int32_t> toks = {1, 300, 301, 302, 517, 640, 12, 99};
    Session s(m, {}, pool), e(m, {}, pool);
    s.keep_hidden(true);
    s.decode(toks, false);
    const std::vector<float> want = e.embed(toks.data(), int(toks.size()));
    for (int p = 0; p < int(toks.size()); p++) {
        ASSERT_NE(s.hidden_row(p), nullptr) << p;
        EXPECT_TRUE(std::equal(s.hidden_row(p), s.hidden_row(p) + E, want.begin() + std::ptrdiff_t(p) * E)) << p;
    }
    EXPECT_EQ(s.hidden_row(int(toks.size())), nullptr);
    // a tree: root 7 -> {8, 9}, 9 -> 10; keep the path root, 9, 10
    const int base = s.n_past();
    const std::vector<int32_t> tree = {7, 8, 9, 10}, parents = {-1, 0, 0, 2};
    s.decode_tree(tree.data(), parents.data(), 4);
    s.keep_path(base, {0, 2, 3});
    const std::vector<int32_t> path = {7, 9, 10};
    const std::vector<float> want_path = e.embed(path.data(), 3);
    for (int j = 0; j < 3; j++) {
        ASSERT_NE(s.hidden_row(base + j), nullptr) << j;
        EXPECT_TRUE(
            std::equal(s.hidden_row(base + j), s.hidden_row(base + j) + E, want_path.begin() + std::ptrdiff_t(j) * E))
            << "tree row " << j;
    }
    EXPECT_EQ(s.hidden_row(base + 3), nullptr);
    s.truncate(base + 1);
    EXPECT_EQ(s.hidden_row(base + 1), nullptr);
    EXPECT_NE(s.hidden_row(base), nullptr);
    s.release_hidden(4);
    EXPECT_EQ(s.hidden_row(3), nullptr);
    EXPECT_NE(s.hidden_row(4), nullptr);
    // an MTP draft session needs a model with an MTP block
    auto plain = Model::load(test::synth_file("tiny-ref-smollm3", "Q8_0"));
    Session t(plain, {}, pool);
    SessionParams mp;
    mp.drafter_of = &t;
    EXPECT_THROW(Session(plain, mp, pool), Error);
}

// Every architecture's batch path against its one-token path: a prompt of 24 tokens in one decode (rows of one
// batch: sliding windows that start inside the batch, MoE rows grouped by expert, sinks) gives the logits of
// feeding it one token at a time, and several sessions in one decode_batch those of separate decodes.
TEST(Session, EveryArchitectureBatchesLikeOneTokenAtATime) {
    ThreadPool pool(2);
    std::vector<int32_t> toks;
    for (int i = 0; i < 24; i++) toks.push_back(int32_t(3 + (i * 37) % 990));
    for (const char* shape :
         {"tiny-test-qwen3moe", "tiny-test-gemma3", "tiny-test-phi3", "tiny-test-gptoss", "tiny-ref-smollm3",
          "tiny-ref-granite", "tiny-ref-olmo2", "tiny-ref-mistral3", "tiny-ref-glm4moe", "tiny-ref-qwen35",
          "tiny-ref-qwen35moe", "tiny-ref-qwen3next", "tiny-ref-llama4", "tiny-ref-gemma4", "tiny-ref-gemma4moe"}) {
        for (const char* type : {"Q8_0", "Q4_K_M", "MXFP4_MOE"}) {
            if (std::string(type) == "MXFP4_MOE" && std::string(shape).find("moe") == std::string::npos &&
                std::string(shape).find("gptoss") == std::string::npos)
                continue;  // no experts: the same as Q8_0
            auto m = Model::load(test::synth_file(shape, type));
            Session a(m, {}, pool), b(m, {}, pool);
            a.decode(toks, true);
            double worst = 0, scale = 0;
            for (size_t i = 0; i < toks.size(); i++) {
                b.decode(&toks[i], 1, false);
                for (int v = 0; v < b.n_vocab(); v++) {
                    worst = std::max(worst, double(std::fabs(a.logits(int(i))[v] - b.last_logits()[v])));
                    scale = std::max(scale, double(std::fabs(b.last_logits()[v])));
                }
            }
            std::printf("[ batch vs single ] %s %s: max |logit| %.3f, max difference %.2g\n", shape, type, scale,
                        worst);
            EXPECT_GT(scale, 0.01) << shape;
            EXPECT_LT(worst, 1e-3 * scale) << shape << " " << type;
            // Two sessions at different positions in one pass.
            Session c(m, {}, pool), d(m, {}, pool), c2(m, {}, pool), d2(m, {}, pool);
            c.decode(std::vector<int32_t>(toks.begin(), toks.begin() + 15), false);
            c2.decode(std::vector<int32_t>(toks.begin(), toks.begin() + 15), false);
            const std::vector<int32_t> tc = {5, 6, 7}, td = {8, 9};
            Session::decode_batch({{&c, tc.data(), 3, true}, {&d, td.data(), 2, true}});
            c2.decode(tc, true);
            d2.decode(td, true);
            for (int v = 0; v < c.n_vocab(); v++) {
                for (int i = 0; i < 3; i++) ASSERT_NEAR(c.logits(i)[v], c2.logits(i)[v], 1e-3 * scale) << shape;
                for (int i = 0; i < 2; i++) ASSERT_NEAR(d.logits(i)[v], d2.logits(i)[v], 1e-3 * scale) << shape;
            }
        }
    }
}

// Both sessions decode `next`: the largest difference of their logits, and the largest logit of b's.
static std::pair<float, float> next_logit_difference(Session& a, Session& b, int32_t next) {
    a.decode(&next, 1, false);
    b.decode(&next, 1, false);
    float worst = 0, scale = 0;
    for (int v = 0; v < a.n_vocab(); v++) {
        worst = std::max(worst, std::fabs(a.last_logits()[v] - b.last_logits()[v]));
        scale = std::max(scale, std::fabs(b.last_logits()[v]));
    }
    return {worst, scale};
}

// Context shift (issue 11): after forgetting [n_keep, n_keep + n_discard) and re-rotating the later keys, the
// cache must attend like a fresh one that saw only the kept tokens. That holds exactly only for the first
// layer, whose keys and values depend on the token and its position alone (deeper layers keep what they
// computed while the forgotten tokens were there, as in llama.cpp), so the sessions run one layer; the rest is
// F16 rounding of the re-rotated keys. A wrong rotation (sign, or position) is far outside the bound.
TEST(Session, ShiftAttendsLikeAFreshCacheOfTheKeptTokens) {
    ThreadPool pool(1);
    std::vector<int32_t> seq = {1};
    for (int i = 0; i < 60; i++) seq.push_back(int32_t(260 + (i * 53) % 240));
    const int n_keep = 5, n_discard = 20;
    for (int next : {300, 417}) {
        Session a(session_stories(), SessionParams{0, 1, 256}, pool),
            b(session_stories(), SessionParams{0, 1, 256}, pool);
        a.decode(seq, false);
        a.shift(n_keep, n_discard);
        std::vector<int32_t> kept(seq.begin(), seq.begin() + n_keep);
        kept.insert(kept.end(), seq.begin() + n_keep + n_discard, seq.end());
        ASSERT_EQ(a.tokens(), kept);
        b.decode(kept, false);
        const auto [worst, scale] = next_logit_difference(a, b, next);
        EXPECT_LT(worst, 0.01f * scale + 1e-3f)
            << "largest logit difference " << worst << " (logits up to " << scale << ")";
        EXPECT_EQ(argmax(a.last_logits(), a.n_vocab()), argmax(b.last_logits(), b.n_vocab()));
    }
}

// MLA's cache (deepseek2): one copy of each latent row, read as key and value (half of two copies' bytes); a
// context shift re-rotates only its rope part (the last n_rot of the row), so the first layer attends like a fresh
// cache of the kept tokens, as above; a state file restores it exactly; K and V types must agree.
TEST(Session, MlaCacheIsOneRowPerTokenThatShiftsAndRestores) {
    ThreadPool pool(1);
    auto m = Model::load(test::synth_file("tiny-ref-deepseek2", "Q8_0"));
    const HParams& hp = m->hparams();
    {
        Session s(m, SessionParams{64, 0, 256}, pool);
        EXPECT_EQ(s.kv_bytes(), size_t(64) * size_t(hp.n_layer) * row_bytes(TensorType::F16, hp.head_dim));
    }
    std::vector<int32_t> seq = {1};
    for (int i = 0; i < 40; i++) seq.push_back(int32_t(260 + (i * 53) % 700));
    const int n_keep = 5, n_discard = 12;
    SessionParams one{0, 1, 256};  // the first layer only, F32 rows: no rounding, so the shift must be exact
    one.type_k = one.type_v = TensorType::F32;
    Session a(m, one, pool), b(m, one, pool);
    a.decode(seq, false);
    a.shift(n_keep, n_discard);
    std::vector<int32_t> kept(seq.begin(), seq.begin() + n_keep);
    kept.insert(kept.end(), seq.begin() + n_keep + n_discard, seq.end());
    b.decode(kept, false);
    const int32_t x = 417;
    const auto [worst, scale] = next_logit_difference(a, b, x);
    EXPECT_LT(worst, 1e-4f * scale) << "largest logit difference " << worst << " (logits up to " << scale << ")";
    const std::string path = test::temp_dir() + "/mla-slot.bin";
    Session c(m, {}, pool), d(m, {}, pool);
    c.decode(seq, false);
    c.save_state(path);
    d.load_state(path);
    c.decode(&x, 1, false);
    d.decode(&x, 1, false);
    for (int v = 0; v < c.n_vocab(); v++) ASSERT_EQ(c.last_logits()[v], d.last_logits()[v]) << v;
    SessionParams mixed;
    mixed.type_v = TensorType::Q8_0;
    EXPECT_THROW(Session(m, mixed, pool), Error);
}

// Slot save/restore (issue 11): a restored session continues exactly like the one that was saved; files of
// another model, truncated or foreign files are refused with the cache left empty.
TEST(Session, StateFileRestoresTheCacheExactly) {
    ThreadPool pool(1);
    const std::string path = test::temp_dir() + "/slot.bin";
    Session a(session_stories(), {}, pool), b(session_stories(), {}, pool);
    a.decode(kSeq, false);
    const size_t written = a.save_state(path);
    b.decode(std::vector<int32_t>{1, 300, 301}, false);  // something else, replaced by the restore
    EXPECT_EQ(b.load_state(path), written);
    EXPECT_EQ(b.tokens(), kSeq);
    const int32_t next = 333;
    a.decode(&next, 1, false);
    b.decode(&next, 1, false);
    for (int v = 0; v < a.n_vocab(); v++) ASSERT_EQ(a.last_logits()[v], b.last_logits()[v]) << v;

    // another model (same file layout, other weights)
    auto other = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"));
    Session c(other, {}, pool);
    c.decode(std::vector<int32_t>{1, 2}, false);
    try {
        c.load_state(path);
        FAIL() << "a state file of another model was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.n_past(), 0);
    // truncated, and not a state file at all
    std::string bytes;
    {
        std::FILE* f = std::fopen(path.c_str(), "rb");
        ASSERT_TRUE(f);
        bytes.resize(written);
        ASSERT_EQ(std::fread(bytes.data(), 1, written, f), written);
        std::fclose(f);
    }
    for (const std::string& bad :
         {bytes.substr(0, bytes.size() - 7), std::string("GGUF and more bytes than a header")}) {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        std::fwrite(bad.data(), 1, bad.size(), f);
        std::fclose(f);
        EXPECT_THROW(b.load_state(path), Error);
        EXPECT_EQ(b.n_past(), 0);
    }
    EXPECT_THROW(b.load_state(test::temp_dir() + "/missing.bin"), Error);
}

// Issue 26, defect 6: saving onto a FIFO blocked the server's inference thread until a reader came (every other
// request waited, SIGTERM too). A FIFO, a symbolic link or a directory at the name is refused at once; a regular
// file that was longer is replaced, not left with a stale tail.
TEST(Session, StateIsSavedOnlyOntoRegularFiles) {
    ThreadPool pool(1);
    Session a(session_stories(), {}, pool);
    a.decode(kSeq, false);
    const std::string dir = test::temp_dir();
    const std::string fifo = dir + "/slot.fifo", link = dir + "/slot.link", file = dir + "/slot.ok";
    ::unlink(fifo.c_str());
    ::unlink(link.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
    for (const std::string& p : {fifo, link, dir}) {
        try {
            a.save_state(p);
            ADD_FAILURE() << "saved onto " << p;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
        }
    }
    test::write_file(file, std::string(1 << 20, 'x'));  // longer than the state: truncated by the save
    const size_t written = a.save_state(file);
    EXPECT_EQ(test::read_file(file).size(), written);
    Session b(session_stories(), {}, pool);
    EXPECT_EQ(b.load_state(file), written);
    EXPECT_EQ(b.tokens(), kSeq);
    ::unlink(fifo.c_str());
    ::unlink(link.c_str());
}

// Token trees (speculative verification of several candidates in one pass): every node's logits are those of
// decoding its root path as a chain, and keep_path leaves a cache that continues exactly like one that decoded
// the path. Covers sliding windows (gemma3), sinks (gpt-oss), experts (qwen3moe) and the real stories260K.
TEST(Session, TokenTreeNodesSeeOnlyTheirAncestors) {
    ThreadPool pool(2);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 11; i++) prompt.push_back(int32_t(3 + (i * 37) % 250));
    // node:         0   1   2   3   4   5   6   7   8   9  10  11
    const std::vector<int32_t> parents = {-1, 0, 1, 2, 0, 4, 1, 3, 7, 7, 4, 0};
    const std::vector<int32_t> tree = {17, 40, 41, 42, 50, 51, 60, 70, 80, 81, 52, 99};
    auto path_of = [&](int node) {
        std::vector<int32_t> p;
        for (int x = node; x >= 0; x = parents[size_t(x)]) p.insert(p.begin(), x);
        return p;
    };
    std::vector<std::pair<std::string, std::shared_ptr<const Model>>> models = {{"stories260K", session_stories()}};
    for (const char* shape : {"tiny-test-gemma3", "tiny-test-gptoss", "tiny-test-qwen3moe"}) {
        models.emplace_back(shape, Model::load(test::synth_file(shape, "Q8_0")));
    }
    for (const auto& [name, m] : models) {
        // gemma3 and gpt-oss have windows of 8: the deeper nodes see a window that starts inside the prompt.
        Session t(m, SessionParams{64, 0, 256}, pool);
        t.decode(prompt, false);
        t.decode_tree(tree.data(), parents.data(), int(tree.size()));
        ASSERT_EQ(t.n_logits(), int(tree.size()));
        double worst = 0, scale = 0;
        for (int node = 0; node < int(tree.size()); node++) {
            Session c(m, SessionParams{64, 0, 256}, pool);
            std::vector<int32_t> seq = prompt;
            for (int x : path_of(node)) seq.push_back(tree[size_t(x)]);
            c.decode(seq, false);
            for (int v = 0; v < c.n_vocab(); v++) {
                worst = std::max(worst, double(std::fabs(t.logits(node)[v] - c.last_logits()[v])));
                scale = std::max(scale, double(std::fabs(c.last_logits()[v])));
            }
        }
        std::printf("[ token tree ] %s: max |logit| %.3f, largest difference from the node's chain %.2g\n",
                    name.c_str(), scale, worst);
        EXPECT_GT(scale, 0.01) << name;
        EXPECT_LT(worst, 1e-4 * scale) << name;
        // Keep the path to node 9 (0 -> 1 -> 2 -> 3 -> 7 -> 9) and go on: the same as a cache that decoded it.
        const std::vector<int32_t> keep = path_of(9);
        t.keep_path(int(prompt.size()), keep);
        std::vector<int32_t> seq = prompt;
        for (int x : keep) seq.push_back(tree[size_t(x)]);
        ASSERT_EQ(t.tokens(), seq) << name;
        Session c(m, SessionParams{64, 0, 256}, pool);
        c.decode(seq, false);
        const std::vector<int32_t> more = {5, 6, 7};
        t.decode(more, true);
        c.decode(more, true);
        for (int i = 0; i < 3; i++)
            for (int v = 0; v < c.n_vocab(); v++)
                ASSERT_NEAR(t.logits(i)[v], c.logits(i)[v], 1e-4 * scale) << name << " after keep_path";
    }
    // Malformed trees are refused before anything runs.
    Session s(session_stories(), SessionParams{64, 0, 256}, pool);
    s.decode(prompt, false);
    const std::vector<int32_t> bad_root = {0, 0}, forward_parent = {-1, 2, 0};
    EXPECT_THROW(s.decode_tree(tree.data(), bad_root.data(), 2), Error);
    EXPECT_THROW(s.decode_tree(tree.data(), forward_parent.data(), 3), Error);
    EXPECT_EQ(s.n_past(), int(prompt.size()));
}

// KV cache types (issue 31): every type runs, stays near the F16 cache (a long sequence: the deviation of the
// last logits, relative to their range, printed), and a block type with a head size it does not divide is refused
// as llama.cpp refuses it.
TEST(Session, QuantizedCachesStayCloseToF16) {
    ThreadPool pool(2);
    auto m = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"));
    std::vector<int32_t> seq = {1};
    for (int i = 0; i < 1040; i++) seq.push_back(int32_t(300 + (i * 7919) % 20000));  // past one 1024-chunk
    auto last_logits = [&](TensorType t) {
        Session s(m, SessionParams{1100, 0, 512, t, t}, pool);
        s.decode(seq, false);
        return std::vector<float>(s.last_logits(), s.last_logits() + s.n_vocab());
    };
    const auto ref = last_logits(TensorType::F16);
    float range = 0;
    for (float x : ref) range = std::max(range, std::fabs(x));
    // Random weights amplify any change (8-bit activations re-round): f32 against f16 moves the logits by ~1.4% of
    // their range here, which is the floor; a wrong dequantization or a dropped block moves them by tens of %.
    struct Bound {
        TensorType t;
        float rel;  // largest |logit - f16 logit| / largest |f16 logit|
    };
    const bool quick = std::getenv("TANDEM_TEST_QUICK") && *std::getenv("TANDEM_TEST_QUICK") == '1';
    for (const Bound b :
         {Bound{TensorType::F32, 0.03f}, Bound{TensorType::BF16, 0.03f}, Bound{TensorType::Q8_0, 0.03f},
          Bound{TensorType::Q5_1, 0.03f}, Bound{TensorType::Q5_0, 0.03f}, Bound{TensorType::Q4_1, 0.05f},
          Bound{TensorType::Q4_0, 0.05f}, Bound{TensorType::IQ4_NL, 0.05f}}) {
        if (quick && b.t != TensorType::Q8_0 && b.t != TensorType::Q4_0) continue;  // under the sanitizers
        const auto got = last_logits(b.t);
        float worst = 0;
        for (size_t v = 0; v < got.size(); v++) worst = std::max(worst, std::fabs(got[v] - ref[v]));
        std::printf("[ %s cache ] largest logit deviation from f16 after %zu tokens: %.4f (logits up to %.2f)\n",
                    type_name(b.t), seq.size(), worst, range);
        EXPECT_LT(worst, b.rel * range) << type_name(b.t);
    }
    try {
        Session s(session_stories(), SessionParams{64, 0, 256, TensorType::Q8_0, TensorType::F16}, pool);
        FAIL() << "a q8_0 cache was accepted for head size 8";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Session(session_stories(), SessionParams{64, 0, 256, TensorType::Q4_K, TensorType::F16}, pool), Error);
    EXPECT_THROW(parse_kv_cache_type("q4_k", "-ctk"), Error);
    EXPECT_EQ(parse_kv_cache_type("iq4_nl", "-ctk"), TensorType::IQ4_NL);
}

// State files carry their cache types: restored into the same types they continue bit for bit; restored into
// other types they are converted row by row. A context shift works on a quantized cache.
TEST(Session, QuantizedCachesSaveRestoreAndShift) {
    ThreadPool pool(1);
    auto m = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"));
    const std::string path = test::temp_dir() + "/slot-q8.bin";
    std::vector<int32_t> seq = {1};
    for (int i = 0; i < 80; i++) seq.push_back(int32_t(500 + (i * 613) % 9000));
    const int32_t next = 4242;
    Session a(m, SessionParams{256, 0, 256, TensorType::Q8_0, TensorType::Q4_0}, pool);
    a.decode(seq, false);
    const size_t written = a.save_state(path);
    Session b(m, SessionParams{256, 0, 256, TensorType::Q8_0, TensorType::Q4_0}, pool);
    EXPECT_EQ(b.load_state(path), written);
    a.decode(&next, 1, false);
    b.decode(&next, 1, false);
    for (int v = 0; v < a.n_vocab(); v++) ASSERT_EQ(a.last_logits()[v], b.last_logits()[v]) << v;
    Session c(m, SessionParams{256, 0, 256, TensorType::F16, TensorType::F16}, pool);  // converted
    c.load_state(path);
    EXPECT_EQ(c.tokens(), seq);
    c.decode(&next, 1, false);
    float worst = 0, range = 0;
    for (int v = 0; v < a.n_vocab(); v++) {
        worst = std::max(worst, std::fabs(a.last_logits()[v] - c.last_logits()[v]));
        range = std::max(range, std::fabs(a.last_logits()[v]));
    }
    EXPECT_LT(worst, 0.03f * range) << "the converted cache holds other values";

    // A shifted cache is not a fresh one on random weights (later layers' keys carry what the discarded tokens
    // contributed), so the q8_0 cache's shift is compared with the f32 cache's shift of the same tokens.
    Session d(m, SessionParams{256, 0, 256, TensorType::Q8_0, TensorType::Q8_0}, pool),
        e(m, SessionParams{256, 0, 256, TensorType::F32, TensorType::F32}, pool);
    for (Session* x : {&d, &e}) {
        x->decode(seq, false);
        x->shift(4, 30);
        std::vector<int32_t> kept(seq.begin(), seq.begin() + 4);
        kept.insert(kept.end(), seq.begin() + 34, seq.end());
        ASSERT_EQ(x->tokens(), kept);
        x->decode(&next, 1, false);
    }
    worst = range = 0;
    for (int v = 0; v < d.n_vocab(); v++) {
        worst = std::max(worst, std::fabs(d.last_logits()[v] - e.last_logits()[v]));
        range = std::max(range, std::fabs(e.last_logits()[v]));
    }
    std::printf("[ q8_0 cache ] context shift: largest logit deviation from the f32 cache's %.4f (logits up to %.2f)\n",
                worst, range);
    EXPECT_LT(worst, 0.03f * range);
}

// Without -c (issue 31): the training context, or what fits in the memory budget, in multiples of 256.
TEST(Session, DefaultContextIsTheTrainingContextBoundedByMemory) {
    // (the models in place: the CPU's copies of a placed model's weights, not made yet, count as taken; below)
    auto m = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"), LoadOptions{false});  // 2048, 4 layers
    const size_t pp = kv_bytes_per_position(*m, TensorType::F16, TensorType::F16);
    EXPECT_EQ(pp, size_t(4 * 2 * 64 * 2));
    EXPECT_EQ(kv_bytes_per_position(*m, TensorType::Q8_0, TensorType::Q8_0), size_t(4 * 2 * 2 * 34));
    ContextChoice c = choose_context(*m, SessionParams{}, 0, 1, 0);
    EXPECT_EQ(c.n_ctx, 2048);
    EXPECT_FALSE(c.bounded);
    c = choose_context(*m, SessionParams{}, pp * 2048, 1, 0);
    EXPECT_EQ(c.n_ctx, 2048);
    c = choose_context(*m, SessionParams{}, pp * 1000, 1, 0);
    EXPECT_TRUE(c.bounded);
    EXPECT_EQ(c.n_ctx, 768);
    EXPECT_NE(c.note.find("use -c"), std::string::npos) << c.note;
    c = choose_context(*m, SessionParams{}, pp * 1000, 2, pp);  // two caches and a draft's
    EXPECT_EQ(c.n_ctx, 256);
    c = choose_context(*m, SessionParams{}, 10, 1, 0);  // nothing fits: the floor
    EXPECT_EQ(c.n_ctx, 256);
    // A recurrent model's states count whatever the context: the window, the current one, the checkpoints.
    ThreadPool pool(1);
    auto q = Model::load(test::synth_file("tiny-ref-qwen35", "Q8_0"), LoadOptions{false});
    SessionParams sp;
    const size_t states = Session(q, sp, pool).state_bytes() * size_t(sp.recurrent_keep + 1 + sp.ctx_checkpoints);
    const int train = q->hparams().n_ctx_train;
    ASSERT_GT(states, 0u);
    EXPECT_FALSE(choose_context(*q, sp, kv_cache_bytes(*q, sp, train) + states, 1, 0).bounded);
    c = choose_context(*q, sp, kv_cache_bytes(*q, sp, train) + states - 1, 1, 0);
    EXPECT_TRUE(c.bounded);
    EXPECT_NE(c.note.find("recurrent states"), std::string::npos) << c.note;
    // A placed model's CPU copies are made by its first session on the CPU (Model::place_on_cpu); until then the
    // budget is what is left beside them, as it was when the loader made them.
    auto placed = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"));
    const size_t copies = placed->unplaced_cpu_bytes();
    if (copies == 0) {
        std::printf("[ note ] this CPU has no packed layout: no copies to count\n");
        return;
    }
    EXPECT_EQ(choose_context(*placed, SessionParams{}, pp * 2048 + copies, 1, 0).n_ctx, 2048);
    EXPECT_TRUE(choose_context(*placed, SessionParams{}, pp * 2048, 1, 0).bounded);
    Session s(placed, SessionParams{}, pool);
    EXPECT_EQ(placed->unplaced_cpu_bytes(), 0u);
    EXPECT_EQ(placed->packed_bytes(), copies);
    EXPECT_FALSE(choose_context(*placed, SessionParams{}, pp * 2048, 1, 0).bounded);
}

// Window-only caches (issue 31, item 3): a sliding-window layer keeps a ring of n_swa + max(n_batch, kSwaSlack)
// rows. Every window of every pass is still in its ring, so the logits equal those of a full cache (--swa-full)
// bit for bit, through chains, rollbacks, token trees, a context shift and state files in both directions.
TEST(Session, WindowOnlyCacheEqualsFullCacheBitForBit) {
    ThreadPool pool(2);
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 700; i++) prompt.push_back(int32_t(3 + (i * 37) % 990));
    const std::vector<int32_t> tree = {17, 40, 41, 42, 50, 51}, parents = {-1, 0, 0, 1, 3, 2};
    for (const char* shape : {"tiny-test-gemma3", "tiny-test-gptoss"}) {
        auto m = Model::load(test::synth_file(shape, "Q8_0"));
        const int n_swa = m->hparams().n_swa;
        SessionParams ring{1600, 0, 64}, full = ring;
        full.swa_full = true;
        Session a(m, ring, pool), b(m, full, pool);
        ASSERT_EQ(a.swa_positions(), n_swa + kSwaSlack) << shape;
        EXPECT_EQ(b.swa_positions(), 1600);
        EXPECT_EQ(a.kv_bytes(), kv_cache_bytes(*m, ring, 1600));
        EXPECT_EQ(b.kv_bytes(), kv_cache_bytes(*m, full, 1600));
        EXPECT_LT(a.kv_bytes(), b.kv_bytes());
        std::printf("[ window-only ] %s: window %d, ring %d rows: %zu bytes against %zu with --swa-full\n", shape,
                    n_swa, a.swa_positions(), a.kv_bytes(), b.kv_bytes());
        int checked = 0;
        auto same = [&](const Session& x, const Session& y, const std::string& what) {
            ASSERT_EQ(x.n_logits(), y.n_logits()) << what;
            ASSERT_EQ(x.tokens(), y.tokens()) << what;
            for (int i = 0; i < x.n_logits(); i++)
                ASSERT_EQ(std::memcmp(x.logits(i), y.logits(i), sizeof(float) * size_t(x.n_vocab())), 0)
                    << shape << ": " << what << ", row " << i;
            checked++;
        };
        for (Session* s : {&a, &b}) s->decode(prompt, false);
        same(a, b, "prompt");
        for (int round = 0; round < 30; round++) {  // verification-like passes, rolled back by 1..4 tokens
            std::vector<int32_t> pass;
            for (int i = 0; i < 5; i++) pass.push_back(int32_t(5 + (round * 131 + i * 17) % 990));
            if (round % 3 == 2) {
                const int base = a.n_past();
                for (Session* s : {&a, &b}) s->decode_tree(tree.data(), parents.data(), int(tree.size()));
                same(a, b, "tree " + std::to_string(round));
                for (Session* s : {&a, &b}) s->keep_path(base, {0, 1, 3});
                continue;
            }
            for (Session* s : {&a, &b}) s->decode(pass, true);
            same(a, b, "pass " + std::to_string(round));
            for (Session* s : {&a, &b}) s->truncate(s->n_past() - 1 - round % 4);
        }
        const int32_t next = 77;
        for (Session* s : {&a, &b}) {
            s->shift(4, 300);
            s->decode(&next, 1, false);
        }
        same(a, b, "after a context shift");
        // State files: the ring's rows into a full cache and a ring, the full cache's into a ring.
        const std::string pa = test::temp_dir() + "/ring-" + shape + ".bin", pb = pa + ".full";
        a.save_state(pa);
        b.save_state(pb);
        Session c(m, full, pool), d(m, ring, pool), e(m, ring, pool);
        c.load_state(pa);
        d.load_state(pa);
        e.load_state(pb);
        for (Session* s : {&a, &b, &c, &d, &e}) s->decode(&next, 1, false);
        same(a, c, "ring state into a full cache");
        same(a, d, "ring state into a ring");
        same(b, e, "full state into a ring");
        EXPECT_EQ(checked, 35);
    }
}

// A rollback past the ring's slack, or a pass larger than it, cannot be served: a clear error and an unchanged
// cache, and reuse_prefix falls back to the whole prompt.
TEST(Session, WindowOnlyCacheRefusesWhatItNoLongerHolds) {
    ThreadPool pool(2);
    auto m = Model::load(test::synth_file("tiny-test-gemma3", "Q8_0"));
    const int n_swa = m->hparams().n_swa, cap = n_swa + kSwaSlack;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 700; i++) prompt.push_back(int32_t(3 + (i * 37) % 990));
    Session a(m, SessionParams{1600, 0, 64}, pool);
    a.decode(prompt, false);
    const int first = 700 - cap;  // the oldest position the rings hold
    EXPECT_TRUE(a.can_truncate(first + n_swa - 1));
    EXPECT_FALSE(a.can_truncate(first + n_swa - 2));
    EXPECT_TRUE(a.can_truncate(0));
    try {
        a.truncate(100);
        ADD_FAILURE() << "a rollback past the ring was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--swa-full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(a.n_past(), 700);
    EXPECT_EQ(a.reuse_prefix(650), 650);
    EXPECT_EQ(a.reuse_prefix(100), 0);
    // After the fallback the prompt is read again: the logits are a fresh session's.
    a.decode(prompt, false);
    Session f(m, SessionParams{1600, 0, 64}, pool);
    f.decode(prompt, false);
    EXPECT_EQ(std::memcmp(a.last_logits(), f.last_logits(), sizeof(float) * size_t(a.n_vocab())), 0);
    std::vector<int32_t> chain(size_t(cap - n_swa + 2), 5), parents;
    for (int i = 0; i < int(chain.size()); i++) parents.push_back(i - 1);
    a.truncate(0);
    a.decode(prompt.data(), 10, false);
    EXPECT_THROW(a.decode_tree(chain.data(), parents.data(), int(chain.size())), Error);
    EXPECT_EQ(a.n_past(), 10);
    chain.pop_back();
    parents.pop_back();
    a.decode_tree(chain.data(), parents.data(), int(chain.size()));  // the largest pass it takes
    EXPECT_EQ(a.n_past(), 10 + cap - n_swa + 1);
}

// Gated DeltaNet (qwen35): the recurrent state rolls back exactly. Rejected rows of a verification pass, the
// siblings of a token tree's accepted path, a state file and a pass longer than the kept positions: each continues
// as a session that only ever saw the kept tokens (logits equal to 1e-5 of their scale); a rollback further than
// kRecurrentKeep is refused (can_truncate), a context shift too.
TEST(Session, RecurrentStateRollsBackExactly) {
    ThreadPool pool(2);
    auto m = Model::load(test::synth_file("tiny-ref-qwen35", "Q8_0"));
    ASSERT_TRUE(m->hparams().recurrent());
    const std::vector<int32_t> prompt = {1, 300, 301, 302, 517, 640, 12, 99};
    const std::vector<int32_t> more = {40, 41, 42};
    auto expect_same = [&](const Session& a, const Session& b, const char* what) {
        double worst = 0, scale = 0;
        for (int v = 0; v < a.n_vocab(); v++) {
            worst = std::max(worst, double(std::fabs(a.last_logits()[v] - b.last_logits()[v])));
            scale = std::max(scale, double(std::fabs(b.last_logits()[v])));
        }
        std::printf("[ recurrent rollback ] %s: max difference %.2g (max |logit| %.3f)\n", what, worst, scale);
        EXPECT_GT(scale, 0.01);
        EXPECT_LE(worst, 1e-5 * scale) << what;
    };
    // A chain: 5 drafted rows verified, 2 kept.
    Session a(m, {}, pool), b(m, {}, pool);
    a.decode(prompt, false);
    b.decode(prompt, false);
    a.decode(std::vector<int32_t>{7, 8, 500, 501, 502}, true);
    a.truncate(int(prompt.size()) + 2);
    b.decode(std::vector<int32_t>{7, 8}, true);
    a.decode(more, false);
    b.decode(more, false);
    expect_same(a, b, "chain, 2 of 5 kept");
    // A tree whose accepted path is not the first child: root 7, children 8 and 9, 9's child 10, 8's child 11.
    const std::vector<int32_t> tt = {7, 8, 9, 10, 11}, tp = {-1, 0, 0, 2, 1};
    Session c(m, {}, pool), d(m, {}, pool);
    c.decode(prompt, false);
    d.decode(prompt, false);
    c.decode_tree(tt.data(), tp.data(), int(tt.size()));
    c.keep_path(int(prompt.size()), {0, 2, 3});
    d.decode(std::vector<int32_t>{7, 9, 10}, true);
    c.decode(more, false);
    d.decode(more, false);
    expect_same(c, d, "tree path 0-2-3");
    // A state file written after the tree, read by a fresh session.
    const std::string path = test::temp_dir() + "/qwen35.state";
    c.save_state(path);
    Session e(m, {}, pool);
    e.load_state(path);
    ASSERT_EQ(e.tokens(), c.tokens());
    c.decode(more, false);
    e.decode(more, false);
    expect_same(c, e, "state file");
    // Rollback depth: single-token passes keep the last kRecurrentKeep positions (no checkpoints here).
    SessionParams no_ckpt;
    no_ckpt.ctx_checkpoints = 0;
    Session f(m, no_ckpt, pool);
    f.decode(prompt, false);
    for (int i = 0; i < kRecurrentKeep + 4; i++) f.decode(&more[size_t(i % 3)], 1, false);
    EXPECT_TRUE(f.can_truncate(f.n_past() - kRecurrentKeep));
    EXPECT_FALSE(f.can_truncate(f.n_past() - kRecurrentKeep - 1));
    EXPECT_THROW(f.truncate(f.n_past() - kRecurrentKeep - 1), Error);
    EXPECT_EQ(f.reuse_prefix(f.n_past() - kRecurrentKeep - 1), 0);  // re-read from the start
    EXPECT_TRUE(f.can_truncate(0));
    // A target's window (kRecurrentKeepTarget): shorter, a verification pass longer than it still rolls back.
    no_ckpt.recurrent_keep = kRecurrentKeepTarget;
    Session t(m, no_ckpt, pool);
    t.decode(prompt, false);
    for (int i = 0; i < kRecurrentKeepTarget + 2; i++) t.decode(&more[size_t(i % 3)], 1, false);
    EXPECT_TRUE(t.can_truncate(t.n_past() - kRecurrentKeepTarget));
    EXPECT_FALSE(t.can_truncate(t.n_past() - kRecurrentKeepTarget - 1));
    const int base = t.n_past();
    std::vector<int32_t> drafted(size_t(kRecurrentKeepTarget) * 3, 41);
    t.decode(drafted, true);
    EXPECT_TRUE(t.can_truncate(base + 1));
    t.truncate(base + 1);
    Session g(m, {}, pool);
    g.decode(prompt, false);
    EXPECT_THROW(g.shift(1, 2), Error);
}

// Checkpoints (SessionParams::ctx_checkpoints): the state at the end of each prompt pass stays held after it leaves
// the rollback window; reuse_prefix goes on from the latest one at or before the shared prefix's end, and the
// continuation equals a session that read the kept tokens from the start. Verification passes and single tokens
// make none; a rollback drops the later ones; when too many are held, the closest to its neighbours goes.
TEST(Session, RecurrentCheckpointsResumePromptsExactly) {
    ThreadPool pool(2);
    auto m = Model::load(test::synth_file("tiny-ref-qwen35", "Q8_0"));
    const std::vector<int32_t> p1 = {1, 300, 301, 302, 517, 640, 12, 99}, p2 = {50, 51, 52, 53, 54, 55};
    const std::vector<int32_t> more = {40, 41, 42};
    auto steps = [&](Session& s, int n) {
        for (int i = 0; i < n; i++) s.decode(&more[size_t(i % 3)], 1, false);
    };
    SessionParams sp;
    sp.ctx_checkpoints = 3;
    Session a(m, sp, pool);
    a.decode(p1, false);  // a prompt: its end (8) will be a checkpoint
    a.decode(std::vector<int32_t>{7, 8, 500, 501, 502}, true);  // a verification pass: none
    steps(a, kRecurrentKeep + 2);
    const int p2_at = a.n_past();
    a.decode(p2, false);  // the next turn's prompt: its end too
    steps(a, kRecurrentKeep + 3);
    EXPECT_EQ(a.checkpoint_positions(), (std::vector<int>{8, p2_at + int(p2.size())}));
    EXPECT_TRUE(a.can_truncate(8));
    EXPECT_FALSE(a.can_truncate(9));
    EXPECT_FALSE(a.can_truncate(13));  // inside the verification pass, long gone
    // A prefix that ends between the two checkpoints goes on from the first.
    const std::vector<int32_t> seen = a.tokens();
    EXPECT_EQ(a.reuse_prefix(p2_at + 3), 8);
    EXPECT_TRUE(a.checkpoint_positions().empty());  // 8 is the current state now; the later one was another path's
    std::vector<int32_t> rest(seen.begin() + 8, seen.begin() + p2_at + 3);
    a.decode(rest, false);
    a.decode(more, false);
    Session b(m, {}, pool);
    b.decode(p1, false);
    b.decode(rest, false);
    b.decode(more, false);
    double worst = 0;
    for (int v = 0; v < a.n_vocab(); v++)
        worst = std::max(worst, double(std::fabs(a.last_logits()[v] - b.last_logits()[v])));
    std::printf("[ recurrent checkpoint ] resumed at 8, read %zu more: max difference %.2g\n", rest.size(), worst);
    EXPECT_EQ(worst, 0.0);  // the same passes from the same state
    // A prompt end still among the recent states but past the window is a checkpoint already (a target's window).
    SessionParams tp;
    tp.recurrent_keep = kRecurrentKeepTarget;
    Session t(m, tp, pool);
    t.decode(p1, false);
    steps(t, kRecurrentKeepTarget + 1);
    EXPECT_TRUE(t.can_truncate(8));
    EXPECT_EQ(t.reuse_prefix(8), 8);  // (it was refused: 0, the whole prompt read again)
    // The restored checkpoint is held again once generation moves past the window.
    steps(a, kRecurrentKeep + 1);
    EXPECT_EQ(a.checkpoint_positions().front(), 8);
    // Without checkpoints the same rollback re-reads from the start.
    SessionParams none;
    none.ctx_checkpoints = 0;
    Session c(m, none, pool);
    c.decode(p1, false);
    steps(c, kRecurrentKeep + 2);
    EXPECT_TRUE(c.checkpoint_positions().empty());
    EXPECT_EQ(c.reuse_prefix(c.n_past() - kRecurrentKeep - 1), 0);
    // Too many: the held ones stay spread (prompts ending at 8, then 28, 32, 36, 40; 2 held: 8 and the newest).
    sp.ctx_checkpoints = 2;
    Session d(m, sp, pool);
    std::vector<int> ends;
    d.decode(p1, false);
    ends.push_back(d.n_past());
    steps(d, 16);
    for (int i = 0; i < 4; i++) {
        d.decode(std::vector<int32_t>{60, 61, 62, 63}, false);
        ends.push_back(d.n_past());
    }
    steps(d, kRecurrentKeep + 2);
    const std::vector<int> held = d.checkpoint_positions();
    ASSERT_EQ(held.size(), 2u);
    EXPECT_EQ(held.back(), ends.back());  // the newest stays
    EXPECT_EQ(held.front(), ends[0]);  // the one far before the others (16 steps between) stays too
}

// The delta rule at every level this CPU runs against its scalar reference, on a state decayed and updated over 12
// steps (in place, as a row that keeps no state of its own runs).
TEST(Session, DeltaRuleMatchesItsScalarReference) {
    for (const IsaKernels* t : test::all_levels()) {
        SCOPED_TRACE(cpu_level_name(t->level));
        const int S = 128;
        std::vector<float> a = test::gaussian(size_t(S) * S, 3, 0.1f), b = a, o1(S), o2(S);
        for (int step = 0; step < 12; step++) {
            auto q = test::gaussian(S, 10 + step), k = test::gaussian(S, 40 + step), v = test::gaussian(S, 70 + step);
            for (auto* x : {&q, &k}) {
                double ss = 0;
                for (float f : *x) ss += double(f) * f;
                for (float& f : *x) f = float(f / std::sqrt(ss + 1e-6));
            }
            const float decay = 0.9f - 0.01f * float(step), beta = 0.3f + 0.02f * float(step);
            t->delta_rule(a.data(), a.data(), q.data(), k.data(), v.data(), decay, beta, S, o1.data());
            delta_rule_ref(b.data(), b.data(), q.data(), k.data(), v.data(), decay, beta, S, o2.data());
            for (int j = 0; j < S; j++)
                ASSERT_NEAR(o1[size_t(j)], o2[size_t(j)], 1e-4f) << "step " << step << " j " << j;
        }
        for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(a[i], b[i], 1e-4f) << i;
    }
}
