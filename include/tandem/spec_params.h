// Speculative decoding's parameters and the facts around them: the speculative types and their names and lists,
// SpecParams and its one validation (command-line flags and per-request overrides both end there), the measured
// costs kept across generations, the verification rule's pure functions, and the draft side of a setup.
// The Generator that uses them is in tandem/speculative.h.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/sampling.h"
#include "tandem/session.h"

namespace tandem {

class Model;
class Session;
class ThreadPool;
class Tokenizer;
// The two vocabularies of a draft model whose tokenizer differs from the target's (draft_vocab_bridge).
struct VocabBridge {
    std::shared_ptr<const Tokenizer> target, draft;
    std::string difference;  // the first difference found (draft_vocab_difference)
    // The token-level intersection (Timor et al. 2025): per draft id, the target id of the same text (each text
    // once in both vocabularies, no control tokens), else -1.
    std::vector<int32_t> shared;
    int n_shared = 0;
};

enum class SpecType { NONE, DRAFT, NGRAM, SELF, SUFFIX, MTP, EAGLE3 };
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
    // DRAFT with a draft model of another vocabulary (draft_vocab_bridge): both tokenizers; null: the same one.
    std::shared_ptr<const VocabBridge> vocab_bridge;
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

// The one speculative setup of `generate`, `serve` and `bench`, once per target model before any session (sessions
// then come from make_draft, below): the draft model loaded from `draft_path` when spec.type drafts with one (-md),
// a drafting head picked (pick_draft_head: an EAGLE-3 head, a Gemma 4 assistant), the vocabulary bridge of a draft
// of another tokenizer, the target's MTP block as the default proposer (pick_mtp_by_default, unless
// `type_chosen`: --spec-type or -md was given), the self-draft depth checked (K < L) and an MTP type checked
// against the model. `notes`: what it decided, the lines a command prints. Throws tandem::Error naming the file or
// flag for a setup that cannot run.
struct Speculation {
    std::shared_ptr<const Model> draft_model;  // null unless uses_draft_model(spec.type)
    std::vector<std::string> notes;
};
Speculation build_speculation(const std::shared_ptr<const Model>& target, SpecParams& spec,
                              const std::string& draft_path, bool type_chosen, int self_layers);

// The draft side of a speculative setup, built the same way by `generate`, `bench` and `serve`.
struct DraftSetup {
    std::unique_ptr<Session> session;  // null for NONE and NGRAM
    double cost_prior = 0.0;  // one draft step / one target step, until measured (SpecParams)
    int self_layers = 0;  // SELF: the target's first K layers
};
// The default proposer of a model with a multi-token-prediction block: when neither --spec-type nor -md was given
// (`chosen_elsewhere` false), spec.type becomes MTP for such a model. Returns whether it did (the caller says so).
bool pick_mtp_by_default(SpecParams& spec, const Model& target, bool chosen_elsewhere);
// A draft model (-md) that is a drafting head reads the target's states: a Gemma 4 assistant (Model::assistant())
// drafts as MTP does (spec.type DRAFT becomes MTP), an EAGLE-3 head (Model::eagle3()) as EAGLE3 (DRAFT or EAGLE3).
// Returns the line the caller prints when it picked one (null otherwise). Throws tandem::Error for --spec-type
// eagle3 with a draft model that is no eagle3 head.
const char* pick_draft_head(SpecParams& spec, const Model* draft);
// Memory per context position a draft model (-md) adds: its KV cache rows (kv_bytes_per_position) and, for an
// EAGLE-3 head, the target's three kept layer inputs (3 n_embd_target floats). Commands budget contexts with it.
size_t draft_bytes_per_position(const Model& draft, TensorType tk, TensorType tv);
// Whether type `t` drafts with the -md model (DRAFT, EAGLE3), which the command then loads.
bool uses_draft_model(SpecType t);
// Whether `t` drafts from the target's hidden states (MTP, EAGLE3): its session is one of the target's
// (SessionParams::drafter_of).
bool reads_target_states(SpecType t);
// Self-speculation depth: `requested` layers of the target (0: half of them, at least 1). Throws tandem::Error
// unless 1 <= K < the target's layer count (K = all layers would draft with the target itself).
int self_draft_layers(const Model& target, int requested);
// One draft step relative to one target step, until measured: DRAFT: the draft's weight bytes / the target's; SELF:
// K / L with K = self_draft_layers(requested_layers) (which also checks K); MTP: its block and output matrix's bytes
// per token / the target's; the other types: 0 (no draft model).
double draft_cost_prior(SpecType type, const Model& target, const Model* draft_model, int requested_layers);
// DRAFT: a session on `draft_model`; SELF: a session on the target limited to self_draft_layers(requested_layers);
// MTP: an MTP draft session of `target_session` (SessionParams::drafter_of; it must outlive the draft session; throws
// when the model has no MTP block), of `draft_model` when that is a Gemma 4 assistant; EAGLE3: a session of the
// head `draft_model` on `target_session` (throws for another model); NONE, NGRAM, SUFFIX: no session. The session takes `params` (context, batch,
// cache types; its n_layers is set here). The cost prior is draft_cost_prior's.
// params.gpu: the draft model's GPU placement (-ngld); the target's own layers (SELF, its MTP block) run where the
// target session does.
DraftSetup make_draft(SpecType type, const std::shared_ptr<const Model>& target,
                      const std::shared_ptr<const Model>& draft_model, SessionParams params, int requested_layers,
                      ThreadPool& pool, Session* target_session = nullptr);

// The drafter sessions of one target session (a server slot), one per kind a request may choose: the -md model's
// (DRAFT), the target's own first layers (SELF), and one that reads the target's states (MTP or EAGLE3: a model has
// one or the other). Each is made on first use by make_draft, with its cost prior. Declared after its target
// session, so that it is destroyed first (a drafter of the target's states reads the target).
class DrafterSet {
public:
    struct Config {
        std::shared_ptr<const Model> target, draft_model;  // draft_model: -md (null without)
        SessionParams params;  // the drafters' (cache types, batch, ...); n_ctx: the -md model's (0: the target's)
        int self_layers = 0;  // SELF's requested depth (self_draft_layers)
    };
    DrafterSet(Config c, ThreadPool& pool, Session& target) : c_(std::move(c)), pool_(pool), target_(target) {}
    struct Drafter {
        Session* session = nullptr;
        double cost_prior = 0;
    };
    // The drafter of `type` (uses_draft_session(type)), made now when it was not; throws as make_draft.
    Drafter get(SpecType type);
    // Every drafter made so far: back to n tokens (a slot erased: 0), and their caches' bytes.
    void truncate(int n);
    size_t kv_bytes() const;
    const Session* model_draft() const { return s_[MODEL].get(); }  // the -md model's, when made

private:
    enum Kind { MODEL, SELF, TARGET_STATES, KINDS };
    Config c_;
    ThreadPool& pool_;
    Session& target_;
    std::unique_ptr<Session> s_[KINDS];
    double prior_[KINDS] = {};
};

// Sets spec.type and spec.extra from a list of names ("draft", "ngram,suffix", "draft,ngram,suffix", llama.cpp's
// names as spec_type_from_name): the model proposer (draft or self) becomes `type`, the others `extra`. Throws
// tandem::Error for an unknown name or two model proposers.
void set_spec_types(SpecParams& spec, const std::string& list);
// Whether `t` is spec's type or one of its extra proposers.
bool spec_uses(const SpecParams& spec, SpecType t);
// Whether proposals of type `t` come from a draft Session (DRAFT, SELF, MTP, EAGLE3): the one model proposer of a
// setup.
bool uses_draft_session(SpecType t);
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

// Whether a draft vocabulary can stand in for the target's id for id: same tokenizer model and pre-tokenizer, same
// BOS/EOS ids and add-BOS behaviour, vocab sizes within 128, identical token text for every shared id from 5 up.
// "" when it can, else the first difference.
std::string draft_vocab_difference(const Tokenizer& target, const Tokenizer& draft);
// A draft model whose vocabulary differs (draft_vocab_difference): the bridge its proposer drafts through (text,
// speculative/text_draft_proposer.cpp), or null when the vocabularies are the same. The one setup generate,
// serve and bench call.
std::shared_ptr<const VocabBridge> draft_vocab_bridge(const Model& target, const Model& draft);

}  // namespace tandem
