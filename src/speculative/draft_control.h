// Draft-length controller.
//
// Fixed mode: draft n_max tokens, fewer where a round of n_max would exceed the round-cost cap
// (set_round_cost_cap, steady latency).
// Adaptive mode: keep running estimates of
//   a  - the probability that a drafted token is accepted (given its predecessors were),
//   c  - the cost of one draft step relative to one single-token target step,
//   b  - the extra cost of each additional token in a target verification pass (relative to one step),
// and choose k in {0} U [n_min, n_max] maximizing the expected speed-up of a round (Leviathan et al. 2023):
//   S(k) = (1 - a^(k+1)) / ((1 - a) * (v(k+1) + b*k + c*k)),
// where v(n) is the target's verification-cost shape: the weight bytes a pass over n tokens reads relative to one
// token (set_verify_shape; 1 for a dense model, whose pass reads the same weights for any n). On a mixture of
// experts v rises steeply with the first extra tokens (each selects experts of its own) and then flattens, which
// a single linear slope b measured at short drafts would overestimate at longer ones; b is what the measured
// pass time adds on top of v (compute, attention).
// When no k beats plain decoding (S <= 1), it stops drafting and probes again with a short draft after 16, 32,
// 64 ... plain rounds, and never sooner than 50 times the measured extra cost of the last probe (in plain
// steps): probing then costs at most about 2% of the time, however cheap the target or dear the draft.
// A round whose draft produced nothing (its confidence fell below --draft-p-min at once) counts as a failed
// attempt: drafting that never yields tokens is as useless as drafting that is always rejected.
#pragma once
#include <cstddef>
#include <vector>

namespace tandem {

class DraftLengthController {
public:
    DraftLengthController(int n_max, int n_min, bool adaptive, double draft_cost_prior);

    // Number of tokens to draft this round (0: plain step). Sets probing() when the round is a probe.
    int next();
    bool probing() const { return probing_; }

    // After a round: `requested` tokens asked of the proposer (the value next() returned), k drafted in the chain,
    // a of them accepted, time spent drafting, time of the target pass over n_nodes tokens (k + 1 for a chain; a
    // token tree adds its alternatives, which count for the cost slope b but not for the chain's acceptance).
    void observe(int requested, int k, int accepted, double t_draft_ms, double t_target_ms, int n_nodes = -1);

    // Token trees: the expected number of extra tokens one more verified node must bring to pay for itself, for
    // a round that drafts k chain tokens and already verifies n nodes: the round's expected tokens per unit of
    // time, S(k), times what one more node adds to the pass, v(n + 1) - v(n) + b.
    double node_threshold(int k, int n) const;

    // Steady latency: rounds whose expected time exceeds `cap` plain steps are not chosen (0: no cap). A rejected
    // round costs as much as an accepted one, so bounding every round bounds the gaps a streaming client sees
    // (the p99 of inter-token latency) at the price of shorter drafts.
    void set_round_cost_cap(double cap) { cap_ = cap; }
    // Expected time of a round that drafts k chain tokens and verifies n tokens, in plain steps.
    double round_cost(int k, int n) const { return shape(n) + b_ * (n - 1) + c_ * k; }
    bool within_cap(int k, int n) const { return cap_ <= 0 || round_cost(k, n) <= cap_; }
    // Token trees: after a round, the summed predicted chances of the alternatives whose parent the walk reached,
    // and how many were taken. alternative_calibration() = (taken + 1) / (predicted + 1) over recent rounds
    // (decayed), the factor the draft's own estimate is scaled by.
    void observe_alternatives(double predicted, int taken);
    double alternative_calibration() const { return (alt_taken_ + 1.0) / (alt_pred_ + 1.0); }

    // shape[n] for n = 1..: expected bytes of a target pass over n tokens relative to one (shape[0] unused).
    void set_verify_shape(std::vector<double> shape) { shape_ = std::move(shape); }

    double accept_estimate() const;
    // Costs measured by an earlier controller (plain step ms, draft step and extra-token cost in plain steps): this
    // one starts from them instead of a plain first round and the priors. t1_ms <= 0: nothing known (ignored).
    void seed_costs(double t1_ms, double draft_cost, double verify_slope);
    double plain_step_ms() const { return t1_; }
    double expected_speedup(int k) const { return speedup(k); }  // S(k) with the current estimates
    double draft_cost_estimate() const { return c_; }
    double verify_slope_estimate() const { return b_; }

private:
    double speedup(int k) const;
    double shape(int n) const { return n < int(shape_.size()) && n >= 1 ? shape_[size_t(n)] : 1.0; }

    int n_max_, n_min_;
    bool adaptive_;
    double acc_ = 0, tries_ = 0;  // decayed counts of accepted / attempted draft positions
    double t1_ = 0;  // EMA of a single-token target step (ms); 0 = unknown
    double c_, b_ = 0.1;
    int plain_run_ = 0;  // consecutive plain rounds chosen by the model
    int probe_interval_ = 16;
    int min_probe_interval_ = 16;  // from the measured cost of probing
    bool probing_ = false;
    std::vector<double> shape_;
    double alt_pred_ = 0, alt_taken_ = 0;
    double cap_ = 0;
};

}  // namespace tandem
