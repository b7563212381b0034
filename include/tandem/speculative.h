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
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/sampling.h"

namespace tandem {

class Model;
class Session;
class ThreadPool;
class Tokenizer;

enum class SpecType { NONE, DRAFT, NGRAM, SELF, SUFFIX };
class SuffixCache;
const char* spec_type_name(SpecType t);
SpecType spec_type_from_name(const std::string& s);  // "none", "draft", "ngram", "self", "suffix"; throws tandem::Error

// What a draft-length controller measures about costs (the plain step time, one draft step and one more verified
// token, both relative to a plain step), kept across generations: a server's requests start from what earlier ones
// measured instead of spending their first rounds relearning it. Acceptance is not carried (it belongs to the
// text). Shared by the requests of a server; thread-safe.
struct SpecCosts {
    double t1_ms = 0, draft_cost = 0, verify_slope = 0;
};
class SpecCostMemory {
public:
    bool get(SpecType t, SpecCosts* out) const;
    void put(SpecType t, const SpecCosts& c);

private:
    mutable std::mutex mu_;
    std::map<SpecType, SpecCosts> costs_;
};

struct SpecParams {
    SpecType type = SpecType::NONE;
    // More proposers (--spec-type draft,ngram,suffix): each round the one with the highest expected speed-up,
    // from its own measured acceptance and cost (its own DraftLengthController), proposes. Draft-free types only
    // (NGRAM, SUFFIX); `type` holds the model proposer when there is one (it decides the draft session).
    std::vector<SpecType> extra;
    int n_max = 16;  // --draft-max: most tokens drafted per round
    int n_min = 0;  // --draft-min: drafts shorter than this are not verified (plain step instead)
    float p_min = 0.75f;  // --draft-p-min: stop drafting when the draft's top probability falls below this
    bool adaptive = true;  // --draft-adaptive: choose the draft length from measured acceptance and costs
    int ngram_n = 3;  // --spec-ngram-n: longest n-gram matched against the context (tries n..1)
    int ngram_m = 16;  // --spec-ngram-m: most tokens proposed from one match
    // Cost of one draft step relative to one target step, used until measured (adaptive mode).
    double draft_cost_prior = 0.1;
    // Context shift (llama.cpp's --context-shift): when the context is full, forget the older half of what follows
    // the first n_keep tokens (Session::shift) and go on, instead of ending the generation.
    bool context_shift = false;
    int n_keep = 0;  // -1: the whole prompt
    // Token trees (--spec-tree auto|off), draft models only: verify up to tree_width - 1 alternatives per depth,
    // at most tree_nodes tokens per pass in all. An alternative is kept only when its expected gain (its draft
    // probability times the chance that the walk reaches its parent) pays for verifying one more token at the
    // measured throughput (DraftLengthController::node_threshold), so a tree falls back to a chain by itself.
    bool tree = true;
    int tree_width = 3;
    int tree_nodes = 32;
    // Smallest expected gain (tokens) for an alternative to be verified; < 0: the controller's measured threshold.
    // 0 verifies every alternative the width and node caps allow (tests, benchmarks of fixed tree shapes).
    double tree_min_gain = -1.0;
    // The threshold used instead when the draft length is fixed (adaptive = false) and the target samples: a fixed
    // run stays reproducible for a given seed, whatever the timings. (Greedy output does not depend on the tree.)
    static constexpr double kFixedTreeMinGain = 0.1;
    // Steady latency (--spec-latency steady, request speculative.latency "steady"): no round whose expected time
    // exceeds this many plain steps (draft and tree sizes are cut to fit; DraftLengthController::set_round_cost_cap).
    // 0: no bound (throughput first, the default). "steady" sets kSteadyRoundCost.
    double max_round_cost = 0.0;
    static constexpr double kSteadyRoundCost = 2.0;
    // Costs measured by earlier generations (SpecCostMemory): each proposer's controller starts from them, and
    // Generator::save_costs() stores what this one measured. Null: every generation measures from scratch.
    std::shared_ptr<SpecCostMemory> cost_memory;
    // SUFFIX: the cache of earlier sequences it proposes from (speculative/suffix_cache.h), shared by the requests of a
    // server; null: the generator proposes from its own context only.
    std::shared_ptr<SuffixCache> suffix;
};

// The verification rule as pure functions (the Generator applies them; tests check them on hand-made
// distributions). With the draft token x ~ q and the target's distribution p at that position:
//   accept x with probability accept_probability(p(x), q(x)) = min(1, p(x) / q(x));
//   on rejection draw the replacement from residual_distribution(p, q) = normalize(max(0, p - q)).
// Then the emitted token is distributed exactly as p (Leviathan et al. 2023, theorem 1). A one-hot q (n-gram
// proposals) is the special case q = e_x.
double accept_probability(float px, float qx);
// normalize(max(0, p - q)) over p's support (q may be shorter: missing ids count as 0). Empty support when the
// residual has no mass (only through rounding: a rejection implies p(x) < q(x) somewhere).
Distribution residual_distribution(const Distribution& p, const Distribution& q);

// The draft side of a speculative setup, built the same way by `generate`, `bench` and `serve`.
struct DraftSetup {
    std::unique_ptr<Session> session;  // null for NONE and NGRAM
    double cost_prior = 0.0;  // one draft step / one target step, until measured (SpecParams)
    int self_layers = 0;  // SELF: the target's first K layers
};
// Self-speculation depth: `requested` layers of the target (0: half of them, at least 1). Throws tandem::Error
// unless 1 <= K < the target's layer count (K = all layers would draft with the target itself).
int self_draft_layers(const Model& target, int requested);
// DRAFT: a session on `draft_model` (cost prior: its weight bytes / the target's); SELF: a session on the target
// limited to self_draft_layers(requested_layers) (cost prior K / L); NONE, NGRAM: no session (prior 0).
DraftSetup make_draft(SpecType type, const std::shared_ptr<const Model>& target,
                      const std::shared_ptr<const Model>& draft_model, int n_ctx, int n_batch, int requested_layers,
                      ThreadPool& pool);

// Sets spec.type and spec.extra from a list of names ("draft", "ngram,suffix", "draft,ngram,suffix", llama.cpp's
// names as spec_type_from_name): the model proposer (draft or self) becomes `type`, the others `extra`. Throws
// tandem::Error for an unknown name or two model proposers.
void set_spec_types(SpecParams& spec, const std::string& list);
// "draft", or "draft,ngram,suffix" for a list.
std::string spec_types_name(const SpecParams& spec);

// What a setup offers the speculative types: whether a draft model is loaded (-md).
struct SpecSetup {
    bool has_draft_model = false;
};
// The one check of SpecParams that command-line flags, a request's "speculative" object and the Generator all end
// in: the draft and tree limits, the n-gram sizes, extra proposers draft-free only; NONE drops the extra
// proposers. With `setup`, also that a draft type has its draft model. Throws tandem::Error naming the flag.
void validate_spec_params(SpecParams& spec, const SpecSetup* setup = nullptr);

struct SpecStats {
    int n_rounds = 0;  // verification passes of the target
    int n_rounds_drafted = 0;  // rounds in which at least one token was drafted
    int n_drafted = 0;  // tokens drafted and verified
    int n_accept = 0;  // drafted tokens accepted
    int n_generated = 0;  // tokens emitted
    std::vector<int> drafted_at;  // [i]: rounds that drafted a token at position i
    std::vector<int> accepted_at;  // [i]: rounds whose token at position i was accepted
    double t_draft_ms = 0;  // drafting (draft model forward + sampling, or n-gram lookup)
    double t_target_ms = 0;  // target forward passes + verification
    int n_probe_rounds = 0;  // rounds the adaptive controller drafted only to re-measure acceptance
    int n_context_shifts = 0;  // SpecParams::context_shift: times the context was shifted
    // Token trees: rounds that verified alternatives, alternatives verified, and alternatives accepted (each one a
    // token the chain alone would not have gained). n_drafted and n_accept count the chain only (llama.cpp's
    // meaning); n_generated, and so mean_accepted_length, count every token.
    int n_tree_rounds = 0;
    int n_tree_nodes = 0;
    int n_tree_accept = 0;
    // Per proposer (SpecParams::type, then extra): rounds it proposed in, chain tokens drafted and accepted.
    struct ByProposer {
        SpecType type;
        int rounds = 0, drafted = 0, accepted = 0;
    };
    std::vector<ByProposer> by_proposer;

    double accept_rate() const { return n_drafted ? double(n_accept) / n_drafted : 0.0; }
    // Mean tokens emitted per target pass (1 + accepted drafts per round).
    double mean_accepted_length() const { return n_rounds ? double(n_generated) / n_rounds : 0.0; }
};

namespace speculative {
struct GeneratorTesting;
}  // namespace speculative

namespace grammar {
struct Grammar;
class VocabTrie;
struct TriggerSpec;
}  // namespace grammar

// Structured output: every emitted token keeps the text inside a grammar's language (src/grammar/grammar.h).
// Immutable and shared; the trie and pieces describe the target vocabulary and are built once per server.
struct OutputConstraint {
    std::shared_ptr<const grammar::Grammar> grammar;
    std::shared_ptr<const grammar::VocabTrie> trie;
    std::shared_ptr<const std::vector<std::string>> pieces;  // token id -> its text ("" for control tokens)
    std::vector<int32_t> eog;  // end-of-generation ids: allowed when the text is complete
    // Lazy (null: the grammar applies from the first token): the text is free until a trigger of this spec
    // completes, and from the trigger's first byte on it is a sentence of the grammar (grammar/trigger.h). A
    // token that would complete a trigger into text the grammar refuses is not allowed.
    std::shared_ptr<const grammar::TriggerSpec> lazy;
    // lazy: the tokens that can complete a trigger (their text holds one, or begins with a trigger's last bytes);
    // only these are checked before the trigger. at_start triggers: only while the answer has not begun.
    std::shared_ptr<const std::vector<int32_t>> word_ends, start_ends;
};

// The vocabulary side of constraints, built once per tokenizer and shared by every grammar: each token's text
// ("" for control tokens, which a grammar never allows, except the `shown` ones whose text is part of answers,
// e.g. tool-call markers), its trie, and the end-of-generation ids.
class ConstraintVocab {
public:
    explicit ConstraintVocab(const Tokenizer& tok, const std::vector<int32_t>& shown = {});
    // lazy: see OutputConstraint::lazy (the trigger-completing token lists are computed once per set of triggers).
    std::shared_ptr<const OutputConstraint> constrain(std::shared_ptr<const grammar::Grammar> g,
                                                      std::shared_ptr<const grammar::TriggerSpec> lazy = nullptr) const;

private:
    std::shared_ptr<const std::vector<int32_t>> ends_of(const std::vector<std::string>& triggers) const;
    mutable std::mutex ends_mutex_;
    mutable std::map<std::vector<std::string>, std::shared_ptr<const std::vector<int32_t>>> ends_;
    std::shared_ptr<const std::vector<std::string>> pieces_;
    std::shared_ptr<const grammar::VocabTrie> trie_;
    std::vector<int32_t> eog_;
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

// Checks that a draft vocabulary can stand in for the target's: same tokenizer model and pre-tokenizer, same
// BOS/EOS ids and add-BOS behaviour, vocab sizes within 128, identical token text for every shared id from 5 up.
// Throws tandem::Error naming the first difference.
void check_draft_compatible(const Tokenizer& target, const Tokenizer& draft);

}  // namespace tandem
