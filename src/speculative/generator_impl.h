// The Generator's state and steps behind its public interface (include/tandem/speculative.h): one round is
// choose a proposer -> propose (speculative/proposer.h) -> one target pass (the caller's) -> the verification
// walk (speculative/verify.h) -> bookkeeping. Internal to the library (and tests, speculative/testing.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/grammar.h"
#include "speculative/constraint.h"
#include "speculative/draft_control.h"
#include "speculative/proposer.h"
#include "speculative/verify.h"
#include "tandem/sampling.h"
#include "tandem/speculative.h"

namespace tandem {

struct Generator::Impl {
    Impl(Session& target, Session* draft, const SamplerParams& sampling, const SpecParams& spec);

    void start_deferred(const std::vector<int32_t>& prompt);
    void start(const std::vector<int32_t>& prompt);
    const int32_t* prefill_chunk(int max, int* n) const;
    void prefill_advance(int n);
    bool prefill_pending() const { return prefill_pos_ < prefill_end_; }
    bool step(std::vector<int32_t>& out, int max_tokens, std::vector<TokenLogprob>* logprobs, int n_top);
    bool begin_step(int max_tokens, std::vector<int32_t>& batch);
    void end_step(std::vector<int32_t>& out, double t_target_ms, std::vector<TokenLogprob>* logprobs, int n_top);
    void save_costs() const;
    void set_constraint(std::shared_ptr<const OutputConstraint> c);

    // A target pass of this round was run by the caller: the walk's view of it.
    class TargetView;

    // The tokens allowed after state m (mask_, or null when every token is).
    const uint8_t* allowed_after(const ConstraintState& m, int n_vocab);
    void shift_context();
    bool one_hot_proposals() const;
    DraftLengthController& control() const { return *props_[cur_].control; }
    int choose_proposer();  // sets cur_; returns the draft length asked of it (0: a plain round)

    Session& target_;
    Session* draft_;
    SpecParams spec_;
    Sampler target_sampler_;
    // Each proposer (speculative/proposer.h; null for NONE) with its own draft-length controller.
    struct Proposer {
        SpecType type;
        std::unique_ptr<speculative::Proposer> proposer;
        std::unique_ptr<DraftLengthController> control;
    };
    std::vector<Proposer> props_;  // spec_.type, then spec_.extra
    size_t cur_ = 0;  // this round's proposer
    std::vector<int32_t> history_;
    SpecStats stats_;
    std::vector<TokenSource> round_src_;  // the last round's tokens' origins
    int n_cached_ = 0;
    size_t prefill_pos_ = 0, prefill_end_ = 0;  // history_[pos, end) still to run through the target
    size_t prompt_size_ = 0;
    std::vector<Distribution> q_;  // the draft's distribution at each chain depth of this round
    // The round's chain and token-tree alternatives, between begin_step and end_step (speculative/verify.h owns
    // their node numbering), and the parents of the batch's nodes when it is a tree.
    speculative::RoundPlan plan_;
    std::vector<int32_t> parents_;
    // The verification rule (speculative::exact_accept; tests inject wrong ones, speculative/testing.h).
    speculative::AcceptRule accept_ = speculative::exact_accept;
    struct Pending {
        int requested = 0;
        int n_past = 0;
        double t_draft_ms = 0;
    } pending_;
    std::shared_ptr<const OutputConstraint> constraint_;
    std::unique_ptr<ConstraintState> gm_;  // the constraint's state after history_ (when constrained)
    std::unique_ptr<grammar::MaskMemo> memo_;  // states and masks met so far in this generation
    std::vector<uint8_t> mask_;
};

}  // namespace tandem
