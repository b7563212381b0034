// The adaptive draft-length controller, simulated: a draft that never agrees must cost almost nothing; a draft
// that always agrees must be used at full length; probing resumes drafting when acceptance comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "speculative/draft_control.h"

using namespace tandem;

namespace {

struct Sim {
    double t1 = 100.0;  // ms per plain target step
    double draft_step = 20.0;  // ms per drafted token
    double verify_slope = 10.0;  // ms per extra verified token
    std::function<double(int)> verify;  // if set: ms of a target pass over n tokens (replaces t1 + slope)
    // Runs `rounds` rounds; accept(k) returns how many of k drafted tokens are accepted. Returns time per token
    // relative to plain decoding.
    double run(DraftLengthController& c, int rounds, const std::function<int(int)>& accept,
               int* drafted_rounds = nullptr, int* max_k = nullptr, std::vector<double>* round_ms = nullptr) {
        double time = 0;
        int tokens = 0;
        for (int r = 0; r < rounds; r++) {
            int k = c.next();
            int a = k > 0 ? accept(k) : 0;
            double td = k * draft_step, tt = verify ? verify(k + 1) : t1 + k * verify_slope;
            c.observe(k, k, a, td, tt);
            time += td + tt;
            tokens += a + 1;
            if (round_ms) round_ms->push_back(td + tt);
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
    double rel = sim.run(
        c, 1000, [](int) { return 0; }, &drafted);
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
    double rel = sim.run(
        c, 200, [](int k) { return k; }, nullptr, &max_k);
    std::printf("[ perfect draft ] time per token %.3fx plain, longest draft %d\n", rel, max_k);
    EXPECT_EQ(max_k, 16);
    EXPECT_LT(rel, 0.5);
}

TEST(DraftControl, ProbingFindsAcceptanceAgain) {
    Sim sim;
    DraftLengthController c(8, 0, true, 0.2);
    sim.run(c, 300, [](int) { return 0; });  // the draft is useless for a while...
    int drafted = 0;
    double rel = sim.run(
        c, 600, [](int k) { return k; }, &drafted);  // ...then becomes perfect
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

// An MoE target's verification cost rises steeply with the first extra tokens (each brings experts of its own)
// and flattens as the batch covers most experts; a dense target's barely rises. With the same draft (each token
// accepted with probability 0.9, independently), the controller must draft shorter on the MoE target, and on
// both come within 5% of the best fixed draft length, which it is not told. The MoE controller knows the shape of
// the cost curve from the model (set_verify_shape) and measures the rest; with a linear slope alone it drafted a
// mean of 1.3 tokens where 4 is best, 5.5% slower.
TEST(DraftControl, LearnsThatMoeVerificationCostsMore) {
    // qwen3-30b-a3b-like: 128 experts, 8 per token; experts are 60% of the bytes a token reads.
    auto moe = [](int n) {
        const double experts = 128.0 * (1.0 - std::pow(1.0 - 8.0 / 128.0, n)) / 8.0;  // relative to one token's
        return 100.0 * (0.4 + 0.6 * experts);
    };
    auto moe_timed = [&](int n) { return moe(n) + 2.0 * (n - 1); };  // plus some compute per token
    auto dense = [](int n) { return 100.0 + 3.0 * (n - 1); };
    auto accept_fn = [](uint64_t seed) {
        return [state = seed](int k) mutable {
            int a = 0;
            while (a < k) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                if (double(state >> 11) / double(1ull << 53) >= 0.9) break;
                a++;
            }
            return a;
        };
    };
    double mean_k[2];
    int which = 0;
    for (auto cost : {std::function<double(int)>(dense), std::function<double(int)>(moe_timed)}) {
        Sim sim;
        sim.draft_step = 3.0;
        sim.verify = cost;
        double best_fixed = 1e9;
        int best_k = 0;
        for (int k = 1; k <= 16; k++) {
            DraftLengthController fixed(k, 0, false, 0.03);
            const double rel = sim.run(fixed, 3000, accept_fn(7));
            if (rel < best_fixed) {
                best_fixed = rel;
                best_k = k;
            }
        }
        DraftLengthController c(16, 0, true, 0.03);
        if (which == 1) {  // what the generator gives an MoE target's controller: Model::bytes_per_pass ratios
            std::vector<double> shape(18, 1.0);
            for (int n = 1; n <= 17; n++) shape[size_t(n)] = moe(n) / moe(1);
            c.set_verify_shape(shape);
        }
        sim.run(c, 200, accept_fn(3));  // learning
        long sum_k = 0;
        int n = 0;
        Sim counting = sim;
        double time = 0;
        int tokens = 0;
        auto acc = accept_fn(7);
        for (int r = 0; r < 3000; r++) {
            const int k = c.next();
            const int a = k > 0 ? acc(k) : 0;
            const double td = k * sim.draft_step, tt = cost(k + 1);
            c.observe(k, k, a, td, tt);
            time += td + tt;
            tokens += a + 1;
            sum_k += k;
            n++;
        }
        const double rel = time / tokens / cost(1);
        mean_k[which] = double(sum_k) / n;
        std::printf(
            "[ %s target ] adaptive: %.3fx plain time per token, mean draft length %.1f; best fixed length %d: %.3fx\n",
            which == 0 ? "dense" : "MoE", rel, mean_k[which], best_k, best_fixed);
        EXPECT_LT(rel, best_fixed * 1.05) << (which == 0 ? "dense" : "MoE");
        which++;
    }
    EXPECT_LT(mean_k[1], mean_k[0] * 0.75) << "drafts on the MoE target should be clearly shorter";
}

// Steady latency: with a cap of 1.5 plain steps per round, a good draft is still used (faster than plain) but no
// round after the first few measurements costs more than the cap, where the unbounded controller's rounds cost
// several plain steps (the tail a streaming client sees).
TEST(DraftControl, SteadyLatencyBoundsEveryRound) {
    Sim sim;
    uint32_t state = 12345;
    auto accept = [&](int k) {  // each token accepted with probability 0.85 while its predecessors were
        int a = 0;
        while (a < k) {
            state = state * 1664525u + 1013904223u;
            if ((state >> 8) % 100 >= 85) break;
            a++;
        }
        return a;
    };
    for (double cap : {0.0, 1.5}) {
        DraftLengthController c(16, 0, true, 0.2);
        c.set_round_cost_cap(cap);
        std::vector<double> rounds;
        double rel = sim.run(c, 1000, accept, nullptr, nullptr, &rounds);
        std::vector<double> tail(rounds.begin() + 20, rounds.end());  // after the first measurements
        const double worst = *std::max_element(tail.begin(), tail.end()) / sim.t1;
        std::printf(
            "[ acceptance 0.85, round cost cap %.1f ] time per token %.3fx plain, longest round %.2f plain steps\n",
            cap, rel, worst);
        EXPECT_LT(rel, 0.9);
        if (cap > 0) EXPECT_LE(worst, cap + 1e-9);
        else EXPECT_GT(worst, 2.0);
    }
}
