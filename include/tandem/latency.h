// Inter-token latency: the gaps between consecutive deliveries of tokens to a client, what a streaming reader
// sees as pauses. A speculative round delivers its accepted tokens together, so one gap stands for the whole
// round; a round whose drafts were rejected takes about as long as one that accepted them all, and mis-speculation
// shows as a long tail rather than in the mean. The first delivery (time to first token) is not a gap.
#pragma once
#include <cstddef>
#include <vector>

namespace tandem {

struct LatencySummary {
    int n = 0;  // gaps summarized
    double p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds; nearest-rank percentiles; 0 when n == 0
};

// Nearest-rank percentiles of `gaps_ms` (the smallest value with at least q of the values at or below it).
LatencySummary summarize_latency(std::vector<double> gaps_ms);

// Delivery times of one stream -> its gaps. deliver(t) at each delivery (t in ms, non-decreasing).
class DeliveryClock {
public:
    // Records the gap since the previous delivery (none for the first); returns it, or -1 for the first.
    double deliver(double t_ms);
    const std::vector<double>& gaps() const { return gaps_; }

private:
    double last_ = -1;
    std::vector<double> gaps_;
};

// The most recent `capacity` gaps of many streams (a server's /metrics window). Not thread-safe.
class LatencyWindow {
public:
    explicit LatencyWindow(size_t capacity = 4096) : capacity_(capacity) {}
    void add(double gap_ms);
    LatencySummary summary() const;

private:
    size_t capacity_;
    size_t next_ = 0;
    std::vector<double> ring_;
};

}  // namespace tandem
