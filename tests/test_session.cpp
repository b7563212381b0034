#include <gtest/gtest.h>

#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

std::shared_ptr<const Model> stories() {
    static auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    return m;
}

const std::vector<int32_t> kSeq = {1, 403, 407, 261, 378, 432, 269, 300, 262, 301, 350, 280, 270, 290, 310, 320};

}  // namespace

TEST(Session, BatchedLogitsEqualOneTokenAtATime) {
    ThreadPool pool(2);
    Session a(stories(), {}, pool), b(stories(), {}, pool);
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
    Session s(stories(), {}, pool);
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
    Session a(stories(), small, pool), b(stories(), {}, pool);
    a.decode(kSeq, true);
    b.decode(kSeq, true);
    for (size_t i = 0; i < kSeq.size(); i++)
        for (int v = 0; v < a.n_vocab(); v++) ASSERT_NEAR(a.logits(int(i))[v], b.logits(int(i))[v], 1e-4);
}

TEST(Session, ContextOverflowIsAClearErrorAndLeavesTheCacheIntact) {
    ThreadPool pool(1);
    SessionParams p;
    p.n_ctx = 8;
    Session s(stories(), p, pool);
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
    Session a(stories(), {}, pool), b(stories(), {}, pool);
    a.decode(kSeq, false);
    b.decode(std::vector<int32_t>{1, 2, 3}, false);
    Session c(stories(), {}, pool);
    c.decode(kSeq, false);
    for (int v = 0; v < a.n_vocab(); v++) ASSERT_EQ(a.last_logits()[v], c.last_logits()[v]);
}
