// Inter-token latency summaries (include/tandem/latency.h).
#include <gtest/gtest.h>

#include "tandem/latency.h"

using namespace tandem;

TEST(Latency, NearestRankPercentiles) {
    std::vector<double> g;
    for (int i = 100; i >= 1; i--) g.push_back(i);  // 1..100 in reverse
    const LatencySummary s = summarize_latency(g);
    EXPECT_EQ(s.n, 100);
    EXPECT_EQ(s.p50, 50);
    EXPECT_EQ(s.p90, 90);
    EXPECT_EQ(s.p99, 99);
    EXPECT_EQ(s.max, 100);
    const LatencySummary one = summarize_latency({7.5});
    EXPECT_EQ(one.p50, 7.5);
    EXPECT_EQ(one.p99, 7.5);
    EXPECT_EQ(summarize_latency({}).n, 0);
    // A speculative stream: most rounds 10 ms, every tenth a 30 ms round whose drafts were all rejected.
    std::vector<double> spec;
    for (int i = 0; i < 200; i++) spec.push_back(i % 10 == 9 ? 30 : 10);
    const LatencySummary t = summarize_latency(spec);
    EXPECT_EQ(t.p50, 10);
    EXPECT_EQ(t.p90, 10);
    EXPECT_EQ(t.p99, 30);
}

TEST(Latency, DeliveryGapsStartAtTheSecondDelivery) {
    DeliveryClock c;
    EXPECT_EQ(c.deliver(100), -1);  // the first token: time to first token, not a gap
    EXPECT_EQ(c.deliver(112), 12);
    EXPECT_EQ(c.deliver(112), 0);
    EXPECT_EQ(c.deliver(140), 28);
    EXPECT_EQ(c.gaps(), (std::vector<double>{12, 0, 28}));
}

TEST(Latency, WindowKeepsTheMostRecentGaps) {
    LatencyWindow w(4);
    for (double x : {100.0, 100.0, 1.0, 2.0, 3.0, 4.0}) w.add(x);  // the two 100s fall out
    const LatencySummary s = w.summary();
    EXPECT_EQ(s.n, 4);
    EXPECT_EQ(s.max, 4);
    EXPECT_EQ(s.p50, 2);
}
