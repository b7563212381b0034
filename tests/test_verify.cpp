// The verification walk (src/speculative/verify.h) on hand-made plans, distributions and draws: no model, no
// session. The node numbering of chains and trees, which candidate each step accepts, and that one round emits
// exactly the target's distribution whatever the draft proposed (with the accept-all rule as the negative control).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "speculative/testing.h"
#include "speculative/verify.h"
#include "tandem/speculative.h"

using namespace tandem;
using namespace tandem::speculative;

namespace {

Distribution hand_dist(const std::vector<float>& p) {
    Distribution d;
    d.p = p;
    for (size_t i = 0; i < p.size(); i++)
        if (p[i] > 0) d.support.push_back(int32_t(i));
    std::stable_sort(d.support.begin(), d.support.end(),
                     [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
    return d;
}

Distribution one_hot(int n, int32_t x) {
    std::vector<float> p(size_t(n), 0.0f);
    p[size_t(x)] = 1.0f;
    return hand_dist(p);
}

int32_t draw_from(const Distribution& d, double u) {
    double c = 0;
    for (int32_t id : d.support) {
        c += d.p[size_t(id)];
        if (u < c) return id;
    }
    return d.support.back();
}

// The target of a hand-made round: the distribution at each node, uniform draws from a seeded generator; records
// what the walk accepted.
class HandTarget final : public WalkTarget {
public:
    HandTarget(std::map<int, Distribution> at, uint64_t seed) : at_(std::move(at)), rng_(seed) {}
    void distribution(int node, Distribution& p) override {
        auto it = at_.find(node);
        ASSERT_NE(it, at_.end()) << "the walk asked for node " << node;
        p = it->second;
    }
    void accepted(int node, int32_t token) override { taken.push_back({node, token}); }
    double uniform() override { return u_(rng_); }
    int32_t draw(const Distribution& p) override { return draw_from(p, u_(rng_)); }
    std::vector<std::pair<int, int32_t>> taken;

private:
    std::map<int, Distribution> at_;
    std::mt19937_64 rng_;
    std::uniform_real_distribution<double> u_{0.0, 1.0};
};

}  // namespace

TEST(VerifyWalk, PlanNumbersChainThenAlternatives) {
    RoundPlan plan;
    plan.chain = {10, 11, 12};
    plan.alts = {{20, 1, false, 0.f}, {21, 3, false, 0.f}, {22, 5, false, 0.f}};
    EXPECT_EQ(plan.n_nodes(), 7);
    EXPECT_EQ(plan.token(1), 10);
    EXPECT_EQ(plan.token(3), 12);
    EXPECT_EQ(plan.alt_node(0), 4);
    EXPECT_EQ(plan.token(plan.alt_node(1)), 21);
    plan.drop_orphans();  // depth 5 hangs from chain node 4, which a 3-token chain lacks
    ASSERT_EQ(plan.alts.size(), 2u);
    std::vector<int32_t> tokens, parents;
    plan.batch(9, tokens, parents);
    EXPECT_EQ(tokens, (std::vector<int32_t>{9, 10, 11, 12, 20, 21}));
    EXPECT_EQ(parents, (std::vector<int32_t>{-1, 0, 1, 2, 0, 2}));  // alternative at depth d: child of chain node d - 1
    plan.alts.clear();
    plan.batch(9, tokens, parents);
    EXPECT_TRUE(parents.empty()) << "a chain has no parent list";
}

TEST(VerifyWalk, GreedyChainAcceptsWhileEqualAndDrawsTheBonus) {
    const int n = 8;
    RoundPlan plan;
    plan.chain = {3, 4, 5};
    // the target agrees with the first two drafted tokens, then wants 6 where the draft said 5
    HandTarget t({{0, one_hot(n, 3)}, {1, one_hot(n, 4)}, {2, one_hot(n, 6)}}, 1);
    std::vector<Distribution> q = {one_hot(n, 3), one_hot(n, 4), one_hot(n, 5)};
    const WalkResult r = verify_walk(plan, q, false, t);
    EXPECT_EQ(r.path, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(r.final_token, 6);
    EXPECT_EQ(r.accepted_chain, 2);
    EXPECT_EQ(r.accepted_alt, 0);
    EXPECT_EQ(t.taken, (std::vector<std::pair<int, int32_t>>{{1, 3}, {2, 4}}));

    HandTarget all({{0, one_hot(n, 3)}, {1, one_hot(n, 4)}, {2, one_hot(n, 5)}, {3, one_hot(n, 7)}}, 1);
    const WalkResult b = verify_walk(plan, q, false, all);
    EXPECT_EQ(b.path, (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(b.final_token, 7) << "every draft accepted: the bonus token comes from the last node";
}

TEST(VerifyWalk, TreeTakesTheAlternativeTheChainMissed) {
    const int n = 8;
    RoundPlan plan;
    plan.chain = {3, 4};
    plan.alts = {{5, 1, false, 0.f}, {6, 2, false, 0.f}};  // node 3: depth 1 (child of root), node 4: depth 2
    // greedy: the target wants 3 at the root, then 6 (the alternative at depth 2), then 1
    HandTarget t({{0, one_hot(n, 3)}, {1, one_hot(n, 6)}, {4, one_hot(n, 1)}}, 1);
    const WalkResult r = verify_walk(plan, {one_hot(n, 3), one_hot(n, 4)}, false, t);
    EXPECT_EQ(r.path, (std::vector<int32_t>{0, 1, 4}));
    EXPECT_EQ(r.accepted_chain, 1);
    EXPECT_EQ(r.accepted_alt, 1);
    EXPECT_EQ(r.final_token, 1) << "an alternative is a leaf: the next token is drawn there";

    HandTarget root_alt({{0, one_hot(n, 5)}, {3, one_hot(n, 2)}}, 1);
    const WalkResult a = verify_walk(plan, {one_hot(n, 3), one_hot(n, 4)}, false, root_alt);
    EXPECT_EQ(a.path, (std::vector<int32_t>{0, 3}));
    EXPECT_EQ(a.final_token, 2);
}

TEST(VerifyWalk, OneHotProposalsRejectByRemovingTheToken) {
    // n-gram proposals: q = e_x; on rejection the token comes from p without x
    RoundPlan plan;
    plan.chain = {0};
    HandTarget t({{0, hand_dist({0.0f, 0.5f, 0.5f, 0.0f})}}, 7);
    const WalkResult r = verify_walk(plan, {}, true, t);  // p(0) = 0: always rejected
    EXPECT_EQ(r.path, (std::vector<int32_t>{0}));
    EXPECT_TRUE(r.final_token == 1 || r.final_token == 2);
}

// One round over a 4-token vocabulary with a sampled chain token and one sampled alternative (drawn without
// replacement): the emitted first token must follow p, whatever q is. The accept-all rule must be told apart.
TEST(VerifyWalk, OneRoundEmitsTheTargetDistribution) {
    const int n = 4;
    const Distribution p = hand_dist({0.1f, 0.2f, 0.3f, 0.4f});
    const Distribution q = hand_dist({0.5f, 0.3f, 0.15f, 0.05f});
    auto emitted = [&](AcceptRule rule, uint64_t seed) {
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> u(0.0, 1.0);
        std::vector<double> counts(size_t(n), 0.0);
        const int runs = 200000;
        for (int i = 0; i < runs; i++) {
            RoundPlan plan;
            const int32_t x = draw_from(q, u(rng));
            const int32_t c = draw_from(without(q, {x}), u(rng));
            plan.chain = {x};
            plan.alts = {{c, 1, true, 0.f}};
            HandTarget t(
                {{0, p}, {1, hand_dist({0.25f, 0.25f, 0.25f, 0.25f})}, {2, hand_dist({0.25f, 0.25f, 0.25f, 0.25f})}},
                rng());
            const WalkResult r = verify_walk(plan, {q}, false, t, rule);
            counts[size_t(r.path.size() > 1 ? plan.token(r.path[1]) : r.final_token)] += 1.0 / runs;
        }
        return counts;
    };
    const auto exact = emitted(exact_accept, 11);
    double worst = 0;
    for (int i = 0; i < n; i++) worst = std::max(worst, std::abs(exact[size_t(i)] - p.p[size_t(i)]));
    std::printf("[ walk ] exact rule: largest deviation from p %.4f\n", worst);
    EXPECT_LT(worst, 0.005) << "the walk changed the target's distribution";  // ~5 standard errors at 200k draws
    const auto broken = emitted(accept_all, 11);
    double worst_broken = 0;
    for (int i = 0; i < n; i++) worst_broken = std::max(worst_broken, std::abs(broken[size_t(i)] - p.p[size_t(i)]));
    std::printf("[ walk ] accept-all rule: largest deviation from p %.4f\n", worst_broken);
    EXPECT_GT(worst_broken, 0.05) << "the test cannot tell a broken rule apart";
}
