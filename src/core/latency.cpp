#include "tandem/latency.h"

#include <algorithm>
#include <cmath>

namespace tandem {

LatencySummary summarize_latency(std::vector<double> gaps) {
    LatencySummary s;
    s.n = int(gaps.size());
    if (gaps.empty()) return s;
    std::sort(gaps.begin(), gaps.end());
    auto rank = [&](double q) {  // nearest rank: ceil(q * n), 1-based
        const size_t r = size_t(std::ceil(q * double(gaps.size())));
        return gaps[std::clamp<size_t>(r, 1, gaps.size()) - 1];
    };
    s.p50 = rank(0.50);
    s.p90 = rank(0.90);
    s.p99 = rank(0.99);
    s.max = gaps.back();
    return s;
}

double DeliveryClock::deliver(double t) {
    double gap = -1;
    if (last_ >= 0) {
        gap = std::max(0.0, t - last_);
        gaps_.push_back(gap);
    }
    last_ = t;
    return gap;
}

void LatencyWindow::add(double gap) {
    if (capacity_ == 0) return;
    if (ring_.size() < capacity_) {
        ring_.push_back(gap);
        return;
    }
    ring_[next_] = gap;
    next_ = (next_ + 1) % capacity_;
}

LatencySummary LatencyWindow::summary() const { return summarize_latency(ring_); }

}  // namespace tandem
