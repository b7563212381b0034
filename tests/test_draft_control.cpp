// The adaptive draft-length controller, simulated: a draft that never agrees must cost almost nothing; a draft
// that always agrees must be used at full length; probing resumes drafting when acceptance comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "spec/draft_control.h"

using namespace tandem;

namespace {

struct Sim {
    double t1 = 100.0;           // ms per plain target step
    double draft_step = 20.0;    // ms per drafted token
    double verify_slope = 10.0;  // ms per extra verified token
    // Runs `rounds` rounds; accept(k) returns how many of k drafted tokens are accepted. Returns time per token
    // relative to plain decoding.
    double run(DraftLengthController& c, int rounds, const std::function<int(int)>& accept, int* drafted_rounds = nullptr,
               int* max_k = nullptr) {
        double time = 0;
        int tokens = 0;
        for (int r = 0; r < rounds; r++) {
            int k = c.next();
            int a = k > 0 ? accept(k) : 0;
            double td = k * draft_step, tt = t1 + k * verify_slope;
            c.observe(k, k, a, td, tt);
            time += td + tt;
            tokens += a + 1;
            if (drafted_rounds && k > 0) (*drafted_rounds)++;
            if (max_k) *max_k = std::max(*max_k, k);
        }
        return (time / tokens) / t1;
    }
};

}  // namespace

TEST(DraftControl, UselessDraftCostsAlmostNothing) {
    Sim sim;
    DraftLengthController c(16, 0, true, 0.2);
    int drafted = 0;
    double rel = sim.run(c, 1000, [](int) { return 0; }, &drafted);
    std::printf("[ useless draft ] time per token %.3fx plain, %d of 1000 rounds drafted\n", rel, drafted);
    EXPECT_LT(rel, 1.05);
    DraftLengthController fixed(16, 0, false, 0.2);
    double rel_fixed = sim.run(fixed, 1000, [](int) { return 0; });
    std::printf("[ useless draft, fixed length 16 ] time per token %.3fx plain\n", rel_fixed);
    EXPECT_GT(rel_fixed, 4.0);
}

TEST(DraftControl, PerfectDraftIsUsedAtFullLength) {
    Sim sim;
    DraftLengthController c(16, 0, true, 0.2);
    int max_k = 0;
    double rel = sim.run(c, 200, [](int k) { return k; }, nullptr, &max_k);
    std::printf("[ perfect draft ] time per token %.3fx plain, longest draft %d\n", rel, max_k);
    EXPECT_EQ(max_k, 16);
    EXPECT_LT(rel, 0.5);
}

TEST(DraftControl, ProbingFindsAcceptanceAgain) {
    Sim sim;
    DraftLengthController c(8, 0, true, 0.2);
    sim.run(c, 300, [](int) { return 0; });  // the draft is useless for a while...
    int drafted = 0;
    double rel = sim.run(c, 600, [](int k) { return k; }, &drafted);  // ...then becomes perfect
    std::printf("[ draft recovers ] time per token %.3fx plain, %d of 600 rounds drafted\n", rel, drafted);
    EXPECT_GT(drafted, 300);  // the next probe comes within 256 plain rounds; from then on every round drafts
    EXPECT_LT(rel, 0.6);
}

TEST(DraftControl, RespectsMinAndMax) {
    DraftLengthController off(0, 0, true, 0.1);
    EXPECT_EQ(off.next(), 0);
    DraftLengthController fixed(6, 2, false, 0.1);
    EXPECT_EQ(fixed.next(), 6);
    Sim sim;
    DraftLengthController c(16, 5, true, 0.05);
    for (int r = 0; r < 200; r++) {
        int k = c.next();
        EXPECT_TRUE(k == 0 || (k >= 5 && k <= 16)) << k;
        c.observe(k, k, k / 2, k * 5.0, 100.0 + k * 5.0);
    }
}
