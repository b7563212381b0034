// Generation with optional speculative decoding.
//
// A Generator owns nothing but the decoding loop: the caller provides the target Session, and for
// SpecType::DRAFT / SELF a draft Session (SELF: a Session over the target model limited to its first K layers).
// Each step() runs one round:
//   1. propose up to k tokens (draft model, self-draft, or n-gram lookup), k chosen by the draft-length
//      controller (adaptive, or fixed --draft-max);
//   2. run the target once over [last token, d1..dk], keeping logits for all k+1 positions;
//   3. verify by speculative sampling (Leviathan et al. 2023, Chen et al. 2023): draft token x, drawn from the
//      draft's final distribution q, is accepted with probability min(1, p(x)/q(x)), p being the target's final
//      distribution (its whole sampler chain) at that position; on rejection the replacement is drawn from
//      normalize(max(0, p - q)); if all are accepted a bonus token is drawn from p. With temperature <= 0 both
//      p and q are one-hot, so this reduces to "accept while equal to the target's argmax" and the output is
//      token-identical to plain greedy decoding. N-gram proposals are deterministic: q is one-hot.
//   4. roll back the rejected tokens in both caches (Session::truncate).
// Token trees (SpecParams::tree, draft models): besides the chain d1..dk, the round verifies, as leaves of the same
// pass, alternatives at depths where the draft is unsure (Session::decode_tree: each node attends to the context
// and its ancestors only). Greedy drafting takes the draft's next most probable tokens; sampled drafting draws
// them from the same q without replacement (after the chain's token). The walk down the tree applies, at each
// node, recursive rejection sampling (SpecInfer, Miao et al. 2023; without replacement, Jeon et al. 2024): the
// chain's token first, by the rule above; when it is rejected, p becomes the residual normalize(max(0, p - q)),
// and each alternative c in turn is a new single-candidate step against that p with the proposal c was drawn
// from: q_j = q without the tokens drawn before it, renormalized (a deterministic alternative: q_j = e_c). It is
// accepted with probability min(1, p(c) / q_j(c)), else p becomes normalize(max(0, p - q_j)); when every
// candidate is rejected the token is drawn from what p has become. Each step keeps the distribution of the step
// before (Leviathan et al. theorem 1 with a proposal independent of the target's random draws), so the emitted
// token is distributed exactly as p, and at temperature 0 it is the target's argmax.
// Requires: the target and draft sessions stay untouched by others between steps.
// Its parameters and the rule's pure functions are in tandem/spec_params.h, output constraints in
// tandem/output_constraint.h (both included here).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/output_constraint.h"
#include "tandem/sampling.h"
#include "tandem/spec_params.h"

namespace tandem {

class Session;

struct SpecStats {
    // Counters are 64-bit: a server adds every request's statistics into one SpecStats for /metrics.
    int64_t n_rounds = 0;  // verification passes of the target
    int64_t n_rounds_drafted = 0;  // rounds in which at least one token was drafted
    int64_t n_drafted = 0;  // tokens drafted and verified
    int64_t n_accept = 0;  // drafted tokens accepted
    int64_t n_generated = 0;  // tokens emitted
    std::vector<int64_t> drafted_at;  // [i]: rounds that drafted a token at position i
    std::vector<int64_t> accepted_at;  // [i]: rounds whose token at position i was accepted
    double t_draft_ms = 0;  // drafting (draft model forward + sampling, or n-gram lookup)
    double t_target_ms = 0;  // target forward passes + verification
    int64_t n_probe_rounds = 0;  // rounds the adaptive controller drafted only to re-measure acceptance
    int64_t n_context_shifts = 0;  // SpecParams::context_shift: times the context was shifted
    // Token trees: rounds that verified alternatives, alternatives verified, and alternatives accepted (each one a
    // token the chain alone would not have gained). n_drafted and n_accept count the chain only (llama.cpp's
    // meaning); n_generated, and so mean_accepted_length, count every token.
    int64_t n_tree_rounds = 0;
    int64_t n_tree_nodes = 0;
    int64_t n_tree_accept = 0;
    // Per proposer (SpecParams::type, then extra, in the order they first proposed): rounds it proposed in, chain
    // tokens drafted and accepted.
    struct ByProposer {
        SpecType type;
        int64_t rounds = 0, drafted = 0, accepted = 0;
        // the verification rule of its last proposal: "speculative sampling" (min(1, p/q)), "one-hot" (min(1, p)),
        // and for a draft of another vocabulary "string-level exact match" (one-hot, through text) or "token-level
        // intersection" (q where both vocabularies share the token)
        const char* rule = "";
    };
    std::vector<ByProposer> by_proposer;

    double accept_rate() const { return n_drafted ? double(n_accept) / double(n_drafted) : 0.0; }
    // Mean tokens emitted per target pass (1 + accepted drafts per round).
    double mean_accepted_length() const { return n_rounds ? double(n_generated) / double(n_rounds) : 0.0; }
    // Adds another generation's statistics: every counter and time, the positions element-wise, the proposers
    // by type.
    void add(const SpecStats& o);
};

namespace speculative {
struct GeneratorTesting;
}  // namespace speculative

// Where an emitted token came from (Generator::round_sources): a token of the draft's chain that the target
// accepted, an accepted token-tree alternative, or the target's own token (the replacement or bonus token that
// ends every round; every token of a round that drafted nothing).
enum class TokenOrigin : uint8_t { TARGET, DRAFT, TREE };
const char* token_origin_name(TokenOrigin o);  // "target", "draft", "tree"

struct TokenSource {
    TokenOrigin origin = TokenOrigin::TARGET;
    SpecType proposer = SpecType::NONE;  // the proposer of the token's round (NONE: the round drafted nothing)
    int64_t round = 0;  // the round's number in this generation (1 for the first; stats().n_rounds after it)
};

struct TokenLogprob {
    int32_t id = -1;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // most probable first
};

class Generator {
public:
    // draft may be null for NONE and NGRAM. The samplers are copied; the draft's uses its own generator seeded
    // from seed+1. Throws tandem::Error for an invalid combination.
    Generator(Session& target, Session* draft, const SamplerParams& sampling, const SpecParams& spec);
    ~Generator();

    // Sets the context: the cache keeps its longest common prefix with `prompt` and processes the rest, all but
    // the last token (which the first step feeds). prompt must not be empty.
    void start(const std::vector<int32_t>& prompt);
    // The same in pieces, for a caller that interleaves prompt processing with other sequences' decoding
    // (chunked prefill): start_deferred() sets the context and leaves the tokens to process pending;
    // prefill_chunk() gives the next at most `max` of them (null when none is left); the caller runs them
    // through the target (Session::decode_batch, no logits needed) and reports with prefill_advance(). step()
    // and begin_step() require that nothing is pending.
    void start_deferred(const std::vector<int32_t>& prompt);
    const int32_t* prefill_chunk(int max, int* n) const;
    void prefill_advance(int n);
    bool prefill_pending() const;

    // One round. Appends at least one token to `out` unless the context is full (then returns false and
    // appends nothing). max_tokens bounds how many tokens this round may emit (>= 1).
    // If logprobs is given, appends for each emitted token its log-probability under the target model
    // (log-softmax of the target's logits at that position: the true value, also for accepted draft tokens)
    // and the n_top most probable alternatives.
    bool step(std::vector<int32_t>& out, int max_tokens, std::vector<TokenLogprob>* logprobs = nullptr, int n_top = 0);

    // The same round in two phases, for a caller that runs the target passes of several generators together
    // (Session::decode_batch): begin_step proposes and fills `batch` with the tokens the target must run (the
    // last token, then the drafts); returns false, with nothing to run, when the context is full. The caller then
    // runs target.decode(batch, all_logits = true) and calls end_step with the time that took.
    bool begin_step(int max_tokens, std::vector<int32_t>& batch);
    void end_step(std::vector<int32_t>& out, double t_target_ms, std::vector<TokenLogprob>* logprobs = nullptr,
                  int n_top = 0);
    // The tree shape of the batch begin_step filled (Session::DecodeRequest::parents), null when it is a chain.
    const int32_t* batch_parents() const;

    // The origins of the tokens the last round emitted (step or end_step), in order: one per token it appended.
    const std::vector<TokenSource>& round_sources() const;
    const std::vector<int32_t>& history() const;  // prompt + emitted tokens
    const SpecStats& stats() const;
    // Prompt tokens start() found already in the target's cache (not computed again).
    int n_cached() const;
    const SpecParams& spec() const;
    // Stores every proposer's measured costs in spec().cost_memory (if any), for the generations after this one.
    void save_costs() const;
    // Constrains the output from now on (call before start): the target's distribution at every position is
    // the one conditioned on the tokens the grammar allows after the text so far, drafts are proposed from the
    // draft's constrained distribution (an n-gram proposal is cut at its first forbidden token), and the grammar
    // state follows the accepted tokens only. The rule stays exact, so with a grammar too the output is what
    // the constrained target alone would give (greedy: the same tokens; sampling: the same distribution).
    void set_constraint(std::shared_ptr<const OutputConstraint> c);

    // The orchestration's state and steps (src/speculative/generator_impl.h): proposers and their controllers,
    // the round plan, the history, the constraint state, the statistics.
    struct Impl;

private:
    std::unique_ptr<Impl> im_;
    friend struct speculative::GeneratorTesting;
};

}  // namespace tandem