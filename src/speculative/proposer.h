// Proposers: what guesses a round's tokens ahead of the target. The Generator picks one per round (the highest
// expected speed-up, each judged by its own DraftLengthController), asks it for up to k tokens, and verifies them
// (verify.h). A new proposer implements this interface in a file of its own; make_proposer() is the one place that
// maps a SpecType to its implementation. Every proposer that runs a model session (a draft model, the target's
// first layers, an MTP block, an EAGLE-3 head, a Gemma 4 assistant) is the one ModelProposer; a draft with another
// tokenizer is the text-draft proposer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "speculative/constraint.h"
#include "speculative/verify.h"
#include "tandem/sampling.h"
#include "tandem/speculative.h"

namespace tandem {

class DraftLengthController;
class Session;

namespace speculative {

// The output constraint as a proposer sees it (null `c`: unconstrained): the constraint, its state after the
// history, and the generation's mask memo and buffer (shared with verification).
struct ConstraintView {
    const OutputConstraint* c = nullptr;
    const ConstraintState* state = nullptr;
    grammar::MaskMemo* memo = nullptr;
    std::vector<uint8_t>* mask = nullptr;
    // The tokens allowed after state s (null: every token).
    const uint8_t* allowed(const ConstraintState& s, int n_vocab) const { return s.allowed(*c, *memo, *mask, n_vocab); }
};

// One round's request to a proposer and what it fills in.
struct ProposeRound {
    std::vector<int32_t>& history;  // prompt + emitted tokens; a proposer may append while drafting, and restores it
    int k = 0;  // most chain tokens (>= 1)
    int max_nodes = 0;  // most tokens of the verification pass (tree proposers)
    ConstraintView constraint;
    DraftLengthController& control;  // this proposer's: acceptance, costs, the price of a tree node
    RoundPlan& plan;  // out: the chain, and alternatives for tree proposers (plan is empty on entry)
    std::vector<Distribution>& q;  // out (sampled proposers): the distribution each chain token was drawn from
};

class Proposer {
public:
    virtual ~Proposer() = default;
    virtual SpecType type() const = 0;
    // Deterministic proposals (q = e_x for each token): the verifier needs no q, and the Generator cuts the chain
    // at the first token the output constraint refuses.
    virtual bool one_hot() const = 0;
    // Up to r.k tokens after r.history into r.plan (fewer, or none, when it has no good guess).
    virtual void propose(ProposeRound& r) = 0;
    // The context was shifted (the history rewritten): forget what was derived from the old one.
    virtual void on_context_shift() {}
    // The verification rule its last proposal takes (statistics: SpecStats::ByProposer::rule).
    virtual const char* rule() const { return one_hot() ? "one-hot" : "speculative sampling"; }
};

// A draft's sampling parameters: the request's, minus logit biases for ids its vocabulary (draft_vocab) lacks.
SamplerParams draft_sampling(SamplerParams p, int draft_vocab);

// What a model proposer needs beyond the round: its draft session (DRAFT: a draft model; SELF: the target limited to
// its first layers), the request's sampling (the draft samples with it, minus biases for ids it lacks, from the
// stream seed + 1), the speculative parameters, and the target's vocabulary size and greediness.
struct ModelProposerSetup {
    Session* draft = nullptr;
    SamplerParams sampling;
    SpecParams spec;
    int target_vocab = 0;
    bool target_greedy = false;
};

// The proposer of `type` (DRAFT, SELF, MTP, EAGLE3: a model session, `setup.draft`; NGRAM, SUFFIX: none).
std::unique_ptr<Proposer> make_proposer(SpecType type, const ModelProposerSetup& setup);

// The implementations (one file each).
std::unique_ptr<Proposer> make_model_proposer(SpecType type, const ModelProposerSetup& setup);  // model_proposer.cpp
std::unique_ptr<Proposer> make_ngram_proposer(int ngram_n, int ngram_m);  // ngram_proposer.cpp
std::unique_ptr<Proposer> make_suffix_proposer(std::shared_ptr<SuffixCache> cache);  // suffix_proposer.cpp
// DRAFT with setup.spec.vocab_bridge: a draft of another vocabulary, through text    // text_draft_proposer.cpp
std::unique_ptr<Proposer> make_text_draft_proposer(const ModelProposerSetup& setup);

}  // namespace speculative
}  // namespace tandem
