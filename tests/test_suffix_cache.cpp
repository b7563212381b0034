// The suffix cache (speculative/suffix_cache.h): what it proposes from documents and from the context, its voting and
// stopping rule, its memory bound, its file; and --spec-type suffix under the exact verification rule (greedy
// identity, sampled distribution with a negative control).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "tandem/suffix_cache.h"
#include "speculative/testing.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/speculative.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"
#include "test_util.h"

using namespace tandem;

namespace {
std::vector<int32_t> seq(std::initializer_list<int32_t> v) { return v; }
}  // namespace

TEST(SuffixCache, ContinuesTheLongestMatchingSuffix) {
    SuffixCache c;
    c.add(seq({1, 2, 3, 4, 5, 6, 7, 8}));
    c.add(seq({9, 3, 4, 10, 11, 12, 13}));
    std::vector<int32_t> out;
    int m = 0;
    // "2 3 4" matches the first document with length 3; "9 3 4" only 2: the longer match wins.
    EXPECT_EQ(c.propose(seq({50, 2, 3, 4}), 3, out, &m), 3);
    EXPECT_EQ(out, seq({5, 6, 7}));
    EXPECT_EQ(m, 3);
    out.clear();
    EXPECT_EQ(c.propose(seq({9, 3, 4}), 8, out, &m), 4);  // to the end of the document
    EXPECT_EQ(out, seq({10, 11, 12, 13}));
    out.clear();
    EXPECT_EQ(c.propose(seq({77, 4}), 8, out), 0);  // a single matching token is not enough (min_match 2)
    EXPECT_EQ(c.propose(seq({42, 43}), 8, out), 0);
    EXPECT_TRUE(out.empty());
}

TEST(SuffixCache, FollowsTheMostFrequentContinuationWhileLikely) {
    SuffixCacheParams p;
    p.min_prob = 0.5f;
    SuffixCache c(p);
    // After "7 8": 3 times "1 2 3", once "1 5".
    for (int i = 0; i < 3; i++) c.add(seq({7, 8, 1, 2, 3}));
    c.add(seq({7, 8, 1, 5, 6}));
    std::vector<int32_t> out;
    EXPECT_EQ(c.propose(seq({7, 8}), 8, out), 3);  // 1 (4/4), 2 (3/4 -> 0.75), 3 (3/3)
    EXPECT_EQ(out, seq({1, 2, 3}));
    SuffixCacheParams strict;
    strict.min_prob = 0.8f;
    SuffixCache d(strict);
    for (int i = 0; i < 3; i++) d.add(seq({7, 8, 1, 2, 3}));
    d.add(seq({7, 8, 1, 5, 6}));
    out.clear();
    EXPECT_EQ(d.propose(seq({7, 8}), 8, out), 1);  // 0.75 < 0.8: stops after the unanimous "1"
    EXPECT_EQ(out, seq({1}));
}

TEST(SuffixCache, ProposesFromTheContextItself) {
    SuffixCache c;  // empty: the context's own repetition is enough (prompt lookup)
    std::vector<int32_t> out;
    EXPECT_EQ(c.propose(seq({5, 6, 7, 8, 9, 1, 5, 6}), 3, out), 3);
    EXPECT_EQ(out, seq({7, 8, 9}));
}

TEST(SuffixCache, MemoryIsBoundedAndLeastRecentlyUsedGoesFirst) {
    SuffixCacheParams p;
    p.max_tokens = 20;
    SuffixCache c(p);
    c.add(seq({1, 2, 3, 4, 5, 6}));  // A
    c.add(seq({11, 12, 13, 14, 15, 16}));  // B
    c.add(seq({21, 22, 23, 24, 25, 26}));  // C: 18 tokens
    std::vector<int32_t> out;
    ASSERT_EQ(c.propose(seq({1, 2}), 2, out), 2);  // uses A: now B is the least recently used
    c.add(seq({31, 32, 33, 34, 35, 36}));  // 24 > 20: B goes
    EXPECT_LE(c.stats().tokens, 20u);
    EXPECT_EQ(c.stats().evicted_documents, 1u);
    out.clear();
    EXPECT_EQ(c.propose(seq({11, 12}), 2, out), 0);
    EXPECT_EQ(c.propose(seq({1, 2}), 2, out), 2);
    EXPECT_EQ(c.propose(seq({21, 22}), 2, out), 2);
}

// Issue 26, defect 9: an evicted document takes its index entries with it. Before, they stayed until a lookup
// met their bigram, so a server learning every request grew without bound (107 MB after 12,000 random prompts).
TEST(SuffixCache, TheIndexIsBoundedByTheDocumentsKept) {
    SuffixCacheParams p;
    p.max_tokens = 5000;
    SuffixCache c(p);
    uint64_t x = 1;
    for (int d = 0; d < 100; d++) {  // 50,000 tokens of random bigrams over a 32k vocabulary
        std::vector<int32_t> doc;
        for (int i = 0; i < 500; i++)
            doc.push_back(int32_t((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 49));
        c.add(doc);
    }
    const auto st = c.stats();
    EXPECT_LE(st.tokens, p.max_tokens);
    EXPECT_GT(st.evicted_documents, 80u);
    EXPECT_LE(st.index_entries, st.tokens);
}

TEST(SuffixCache, FileRoundTripAndBadFiles) {
    const std::string path = test::temp_dir() + "/suffix.bin";
    SuffixCache a;
    a.add(seq({1, 2, 3, 4, 5}));
    a.add(seq({6, 7, 8, 9}));
    a.save(path);
    SuffixCache b;
    ASSERT_TRUE(b.load(path));
    EXPECT_EQ(b.stats().documents, 2u);
    std::vector<int32_t> out;
    EXPECT_EQ(b.propose(seq({6, 7}), 4, out), 2);
    EXPECT_EQ(out, seq({8, 9}));
    EXPECT_FALSE(b.load(test::temp_dir() + "/missing.bin"));
    const std::string bad = test::temp_dir() + "/bad.bin";
    FILE* f = std::fopen(bad.c_str(), "wb");
    std::fputs("TDSC\x01\0\0\0garbage", f);
    std::fclose(f);
    try {
        SuffixCache c;
        c.load(bad);
        FAIL() << "a malformed file was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
}

namespace {

struct Stories {
    std::shared_ptr<const Model> model = Model::load(test::shared_file("models/stories260K.gguf"));
    std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(model->gguf());
};
Stories& suffix_stories() {
    static Stories s;
    return s;
}

std::vector<int32_t> generate(ThreadPool& pool, Session& ts, const std::vector<int32_t>& prompt, int n,
                              SamplerParams sp, SpecParams spec, SpecStats* st = nullptr,
                              speculative::AcceptRule rule = nullptr) {
    Generator g(ts, nullptr, sp, spec);
    if (rule) speculative::GeneratorTesting::set_accept_rule(g, rule);
    g.start(prompt);
    std::vector<int32_t> out;
    while (int(out.size()) < n)
        if (!g.step(out, n - int(out.size()))) break;
    if (st) *st = g.stats();
    (void)pool;
    return out;
}

}  // namespace

// Greedy: the output with suffix proposals is the plain output, whether the cache knows the continuation (a
// repeated request: nearly everything accepted) or knows misleading ones.
TEST(SuffixCache, GreedyOutputIsTokenIdentical) {
    ThreadPool pool(1);
    Session ts(suffix_stories().model, SessionParams{512, 0, 256}, pool);
    SamplerParams greedy;
    greedy.temp = 0;
    const auto prompt = suffix_stories().tok->encode("Once upon a time", true, false);
    const auto plain = generate(pool, ts, prompt, 200, greedy, SpecParams{});
    SpecParams sp;
    sp.type = SpecType::SUFFIX;
    sp.p_min = 0;
    sp.n_max = 8;
    sp.adaptive = false;  // the tiny model's verification cost would make the controller draft short
    sp.suffix = std::make_shared<SuffixCache>();
    SpecStats cold, warm, misled;
    EXPECT_EQ(generate(pool, ts, prompt, 200, greedy, sp, &cold), plain);  // empty cache: its own context only
    std::vector<int32_t> doc = prompt;
    doc.insert(doc.end(), plain.begin(), plain.end());
    sp.suffix->add(doc);
    EXPECT_EQ(generate(pool, ts, prompt, 200, greedy, sp, &warm), plain);
    std::printf(
        "[ suffix, repeated request ] %lld of %lld drafted tokens accepted, mean accepted length %.2f (cold: %lld of "
        "%lld, "
        "%.2f)\n",
        (long long)warm.n_accept, (long long)warm.n_drafted, warm.mean_accepted_length(), (long long)cold.n_accept,
        (long long)cold.n_drafted, cold.mean_accepted_length());
    EXPECT_GT(warm.mean_accepted_length(), 4.0);
    // A cache whose documents continue the same contexts differently (the plain output shifted by one token).
    SpecParams bad = sp;
    bad.suffix = std::make_shared<SuffixCache>();
    std::vector<int32_t> shifted = prompt;
    for (size_t i = 0; i + 1 < plain.size(); i++) shifted.push_back(plain[i] == 1 ? 2 : plain[(i + 7) % plain.size()]);
    bad.suffix->add(shifted);
    EXPECT_EQ(generate(pool, ts, prompt, 200, greedy, bad, &misled), plain);
    EXPECT_GT(misled.n_drafted, 0);
}

// Sampling: suffix proposals are one-hot, so the rule is the n-gram one (accept with p(x); otherwise draw from
// p without x); the continuations must follow the plain distribution, and an accept-all rule must be caught.
TEST(SuffixCache, SampledDistributionIsThePlainOne) {
    ThreadPool pool(1);
    Session ts(suffix_stories().model, SessionParams{128, 0, 256}, pool);
    const auto prompt = suffix_stories().tok->encode("Lily and Ben went to the", true, false);
    SamplerParams sp;
    sp.temp = 1.0f;
    sp.min_p = 0;
    // The cache proposes a fixed two-token continuation that the model finds plausible but not certain.
    auto cache = std::make_shared<SuffixCache>();
    SamplerParams greedy;
    greedy.temp = 0;
    const auto likely = generate(pool, ts, prompt, 2, greedy, SpecParams{});
    std::vector<int32_t> doc = prompt;
    doc.insert(doc.end(), likely.begin(), likely.end());
    cache->add(doc);
    const int runs = 3000;
    auto counts = [&](SpecParams s, uint64_t seed0, speculative::AcceptRule rule = nullptr) {
        std::vector<std::map<int, int>> c(2);
        for (int r = 0; r < runs; r++) {
            SamplerParams p = sp;
            p.seed = seed0 + uint64_t(r) * 7919;
            auto out = generate(pool, ts, prompt, 2, p, s, nullptr, rule);
            c[0][out[0]]++;
            c[1][out[0] * 1000 + out[1]]++;
        }
        return c;
    };
    SpecParams spec;
    spec.type = SpecType::SUFFIX;
    spec.p_min = 0;
    spec.adaptive = false;
    spec.n_max = 2;
    spec.suffix = cache;
    auto plain = counts(SpecParams{}, 1), specd = counts(spec, 500000),
         bad = counts(spec, 900000, speculative::accept_all);
    double min_bad = 1;
    for (int s = 0; s < 2; s++) {
        int df = 0, dfb = 0;
        const double p = test::chi_square_p(plain[size_t(s)], specd[size_t(s)], &df);
        const double pb = test::chi_square_p(plain[size_t(s)], bad[size_t(s)], &dfb);
        std::printf("[ suffix, temp 1.0, stat %d ] speculative vs plain: p = %.3g (df %d); accept-all rule: p = %.2e\n",
                    s, p, df, pb);
        EXPECT_GT(p, 1e-3);
        min_bad = std::min(min_bad, pb);
    }
    EXPECT_LT(min_bad, 1e-3);
}
