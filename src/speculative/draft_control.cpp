#include "speculative/draft_control.h"

#include <algorithm>
#include <cmath>

namespace tandem {

namespace {
constexpr double kDecay = 0.9;  // weight of the past in the acceptance counts, per round
constexpr double kEma = 0.2;  // weight of a new timing sample
constexpr double kPriorAcc = 1.5;  // Beta-style prior: 1.5 accepted out of 3 tries (a = 0.5)
constexpr double kPriorTries = 3.0;
constexpr int kProbeLen = 4;
constexpr int kMaxProbeInterval = 256;
constexpr double kProbeBudget = 0.02;  // fraction of the time probes may cost
}  // namespace

DraftLengthController::DraftLengthController(int n_max, int n_min, bool adaptive, double draft_cost_prior)
    : n_max_(std::max(0, n_max)),
      n_min_(std::max(0, n_min)),
      adaptive_(adaptive),
      c_(std::max(0.0, draft_cost_prior)) {}

double DraftLengthController::accept_estimate() const { return (acc_ + kPriorAcc) / (tries_ + kPriorTries); }

double DraftLengthController::speedup(int k) const {
    double a = std::min(accept_estimate(), 0.999);
    double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    return tokens / (shape(k + 1) + (b_ + c_) * k);
}

void DraftLengthController::seed_costs(double t1_ms, double draft_cost, double verify_slope) {
    if (t1_ms <= 0) return;
    t1_ = t1_ms;
    c_ = std::max(0.0, draft_cost);
    b_ = std::max(0.0, verify_slope);
}

double DraftLengthController::node_threshold(int k, int n) const {
    return std::max(1.0, speedup(k)) * (shape(n + 1) - shape(n) + b_);
}

void DraftLengthController::observe_alternatives(double predicted, int taken) {
    constexpr double kAltDecay = 0.95;
    alt_pred_ = alt_pred_ * kAltDecay + predicted;
    alt_taken_ = alt_taken_ * kAltDecay + taken;
}

int DraftLengthController::next() {
    probing_ = false;
    if (n_max_ == 0) return 0;
    if (!adaptive_) {
        int k = n_max_;
        while (k > 0 && !within_cap(k, k + 1)) k--;
        return k;
    }
    if (t1_ == 0) return 0;  // first round: measure a plain step
    int best = 0;
    double best_s = 1.0;
    for (int k = std::max(1, n_min_); k <= n_max_; k++) {
        if (!within_cap(k, k + 1)) break;  // the cost grows with k
        double s = speedup(k);
        if (s > best_s * 1.01) {
            best_s = s;
            best = k;
        }
    }
    if (best > 0) {
        plain_run_ = 0;
        return best;
    }
    if (++plain_run_ >= std::max(probe_interval_, min_probe_interval_)) {
        plain_run_ = 0;
        probe_interval_ = std::min(kMaxProbeInterval, probe_interval_ * 2);
        probing_ = true;
        int k = std::min(n_max_, std::max(kProbeLen, n_min_));
        while (k > 1 && !within_cap(k, k + 1)) k--;
        return k;
    }
    return 0;
}

void DraftLengthController::observe(int requested, int k, int accepted, double t_draft_ms, double t_target_ms,
                                    int n_nodes) {
    const int nodes = n_nodes < 0 ? k + 1 : n_nodes;
    if (k == 0 && nodes > 1) {  // only alternatives to the first token were verified: a failed chain attempt
        tries_ = tries_ * kDecay + 1;
        acc_ *= kDecay;
        if (t1_ > 0) {
            b_ = (1 - kEma) * b_ + kEma * std::max(0.0, (t_target_ms / t1_ - shape(nodes)) / (nodes - 1));
            c_ = (1 - kEma) * c_ + kEma * (t_draft_ms / t1_);
        }
    } else if (k == 0) {
        t1_ = t1_ == 0 ? t_target_ms : (1 - kEma) * t1_ + kEma * t_target_ms;
        if (requested > 0) {  // asked for a draft, got none: a failed attempt whose cost was the drafting
            tries_ = tries_ * kDecay + 1;
            acc_ *= kDecay;
            if (t1_ > 0) c_ = (1 - kEma) * c_ + kEma * (t_draft_ms / t1_);
        }
    } else {
        acc_ = acc_ * kDecay + accepted;
        tries_ = tries_ * kDecay + accepted + (accepted < k ? 1 : 0);
        if (accepted > 0 && probing_) probe_interval_ = 16;
        if (t1_ > 0) {
            double c = t_draft_ms / k / t1_;
            double b = std::max(0.0, (t_target_ms / t1_ - shape(nodes)) / (nodes - 1));
            c_ = (1 - kEma) * c_ + kEma * c;
            b_ = (1 - kEma) * b_ + kEma * b;
        }
    }
    if (probing_ && t1_ > 0) {
        // What this probe cost beyond a plain step, in plain steps; keep probes under kProbeBudget of the time.
        double extra = std::max(0.0, (t_draft_ms + t_target_ms) / t1_ - 1.0);
        min_probe_interval_ = std::max(16, int(std::ceil(extra / kProbeBudget)));
    }
}

}  // namespace tandem
