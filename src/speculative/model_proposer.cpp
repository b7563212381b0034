// Proposals from a draft session (SpecType::DRAFT: a draft model; SpecType::SELF: the target's first K layers;
// SpecType::MTP: the target's multi-token-prediction block, reading the target's hidden states; SpecType::EAGLE3:
// an EAGLE-3 head, reading three of the target's layers — the same path as MTP):
// the draft samples its chain from its own distribution q (under a grammar, the constrained one), stops when its top
// probability falls below --draft-p-min, and, for token trees, adds alternatives where it is unsure when their
// expected gain pays for the verified node (EAGLE-2-style dynamic trees, priced by the DraftLengthController).
#include <algorithm>
#include <cmath>

#include "speculative/draft_control.h"
#include "speculative/proposer.h"
#include "core/softmax.h"
#include "tandem/error.h"
#include "tandem/session.h"

namespace tandem::speculative {

namespace {

// Largest softmax probability of raw logits (temperature 1), used for --draft-p-min as llama.cpp does.
float top_prob(const float* logits, int n) { return float(1.0 / softmax_norm(logits, n).sum); }

// The draft's `max` most probable tokens after `lg` (softmax at temperature 1, as top_prob) other than `skip`,
// allowed by `allowed` and below `n_target`, most probable first, with their probabilities.
// Returns the probability of `skip` (0 when skip < 0).
float top_tokens(const float* lg, int n, int32_t skip, const uint8_t* allowed, int n_target, int max,
                 std::vector<std::pair<int32_t, float>>& out) {
    out.clear();
    const SoftmaxNorm sm = softmax_norm(lg, n);
    for (int i = 0; i < std::min(n, n_target); i++) {
        if (i == skip || (allowed && !allowed[i])) continue;
        if (int(out.size()) == max && lg[i] <= out.back().second) continue;
        if (int(out.size()) == max) out.pop_back();
        auto at = std::find_if(out.begin(), out.end(), [&](const auto& e) { return lg[i] > e.second; });
        out.insert(at, {int32_t(i), lg[i]});
    }
    for (auto& e : out) e.second = sm.prob(e.second);
    return skip >= 0 && skip < n ? sm.prob(lg[skip]) : 0.0f;
}

class ModelProposer final : public Proposer {
public:
    ModelProposer(SpecType type, const ModelProposerSetup& s)
        : type_(type),
          d_(*s.draft),
          spec_(s.spec),
          target_vocab_(s.target_vocab),
          target_greedy_(s.target_greedy),
          sampler_(draft_sampling(s.sampling, s.draft->n_vocab()), s.draft->n_vocab()) {
        sampler_.reseed(derive_seed(s.sampling.seed, 1));  // independent of the target stream of seed + 1
    }
    SpecType type() const override { return type_; }
    bool one_hot() const override { return false; }
    void propose(ProposeRound& r) override;
    void on_context_shift() override {  // the draft re-reads a window of the (new) history at its next proposal
        d_.truncate(0);
        base_ = 0;
    }

private:
    void add_alternatives(ProposeRound& r, const float* lg, int32_t skip, const uint8_t* allowed, int depth,
                          double reach, const Distribution* q);

    SpecType type_;
    Session& d_;
    SpecParams spec_;
    int target_vocab_;
    bool target_greedy_;
    Sampler sampler_;
    size_t base_ = 0;  // history index of the draft cache's position 0
    static constexpr size_t kDraftWindow = 64;  // tokens of recent history a restarted draft sees
};

void ModelProposer::add_alternatives(ProposeRound& r, const float* lg, int32_t skip, const uint8_t* allowed, int depth,
                                     double reach, const Distribution* q) {
    DraftLengthController& control = r.control;
    const int k = r.k;
    const int width = spec_.tree_width - (skip >= 0 ? 1 : 0);  // the chain's own token takes one place
    if (width < 1) return;
    thread_local std::vector<std::pair<int32_t, float>> cand;
    const float p_skip = top_tokens(lg, d_.n_vocab(), skip, allowed, target_vocab_, width, cand);
    // The chance that alternative c is the token taken: the walk reaches its parent (reach), the chain's token
    // there is rejected (1 - a, measured; 1 where the chain ends), and the target takes c among the rest, for
    // which the draft's share of what is left, prob(c) / (1 - prob(chain token)), stands in.
    // That estimate, once the walk is at the parent (pred), is scaled by how often alternatives were actually taken
    // against how often they were predicted to be (DraftLengthController::alternative_calibration): a poor draft's
    // second guesses are rarely right, however confident it is.
    const double miss = skip >= 0 ? 1.0 - control.accept_estimate() : 1.0;
    const double rest = std::max(1e-6, 1.0 - double(p_skip));
    const double calibration = control.alternative_calibration();
    auto pred_of = [&](float prob) { return float(miss * std::min(1.0, prob / rest)); };
    int count = 0;  // how many pay, the most probable first: once one does not, the rest do not either
    for (const auto& e : cand) {
        const int nodes = 1 + k + int(r.plan.alts.size()) + count;
        const double gain = reach * pred_of(e.second) * calibration;
        // With a fixed draft length (--draft-adaptive off) and sampling, the gate is fixed too, so that seeded
        // sampling does not depend on measured timings (how many alternatives are drawn changes how the random
        // streams are used). Greedy output is the same whatever the tree, so greedy runs always price nodes.
        const bool measured = spec_.adaptive || target_greedy_;
        const double threshold = spec_.tree_min_gain >= 0 ? spec_.tree_min_gain
                                 : measured               ? control.node_threshold(k, nodes)
                                                          : SpecParams::kFixedTreeMinGain;
        if (nodes >= r.max_nodes || gain < threshold || !control.within_cap(k, nodes + 1)) break;
        count++;
    }
    if (!q || q->support.size() <= 1) {  // greedy drafting: the most probable tokens themselves
        for (int i = 0; i < count; i++)
            r.plan.alts.push_back({cand[size_t(i)].first, depth, false, pred_of(cand[size_t(i)].second)});
        return;
    }
    // Sampled drafting: as many draws without replacement (the count depends on the draft's state only, and a
    // draw is never discarded for its value, so each one's proposal is exactly q without the earlier ones).
    std::vector<int32_t> drawn;
    if (skip >= 0) drawn.push_back(skip);
    for (int i = 0; i < count; i++) {
        const Distribution qj = without(*q, drawn);
        if (qj.support.empty()) return;
        const int32_t c = sampler_.draw(qj);
        if (c >= target_vocab_) return;  // padding id outside the target vocabulary: stop here
        r.plan.alts.push_back(
            {c, depth, true, pred_of(count > 0 ? cand[size_t(std::min<int>(i, int(cand.size()) - 1))].second : 0.0f)});
        drawn.push_back(c);
    }
}

void ModelProposer::propose(ProposeRound& r) {
    Session& d = d_;
    std::vector<int32_t>& history = r.history;
    std::vector<int32_t>& drafts = r.plan.chain;
    std::vector<Distribution>& qs = r.q;
    int k = r.k;
    // Bring the draft's cache up to date: it holds history[base_ ..]; keep the common prefix, feed the rest.
    // For a probe after a long plain stretch (catching up would cost more than the probe is worth), or when its
    // context is full, the draft restarts on a window of the most recent tokens instead. The draft only
    // proposes, so this never changes the output; RoPE attention depends on relative positions, so a window
    // predicts recent continuations about as well as the full history.
    const size_t n = history.size();
    const auto& cached = d.tokens();
    // A target token the draft's vocabulary lacks (the draft's may be up to 128 shorter) reaches the draft as
    // token 0: its proposals get a little worse there, the output cannot change (the target verifies).
    const int32_t d_vocab = d.n_vocab();
    auto for_draft = [d_vocab](int32_t x) { return x < d_vocab ? x : 0; };
    size_t keep = 0;
    while (keep < cached.size() && base_ + keep < n && cached[keep] == for_draft(history[base_ + keep])) keep++;
    const bool mtp = reads_target_states(type_);
    if (mtp) {
        // only the rows made from the target's states (Session::target_rows: a drafted row read the head's own;
        // it is made again once verified), also those of an earlier request on the same sessions
        keep = std::min(keep, size_t(d.target_rows()));
        if (n + size_t(k) > size_t(d.n_ctx())) return;  // no room for a draft (the target's context is full)
    }
    const size_t window = std::min<size_t>(kDraftWindow, size_t(std::max(1, d.n_ctx() - k - 1)));
    const size_t lag = n - (base_ + keep);
    if (!mtp && ((r.control.probing() && lag > window) || n - base_ + size_t(k) > size_t(d.n_ctx()))) {
        base_ = n > window ? n - window : 0;
        keep = 0;
    }
    if (base_ + keep == n) keep--;  // need logits for the last token: feed it again
    keep = size_t(d.reuse_prefix(int(keep)));
    const int room = d.n_ctx() - int(n - base_);
    if (room < 1) return;
    k = std::min(k, room);
    r.k = k;
    std::vector<int32_t> feed(history.begin() + std::ptrdiff_t(base_ + keep), history.end());
    for (int32_t& x : feed) x = for_draft(x);
    d.decode(feed.data(), int(feed.size()), false);
    if (mtp) d.drafter_target()->release_hidden(int(n) - 2);  // rows 0..n-1 are made: older states are not needed
    // The drafted tokens are appended to the history while drafting (the samplers' penalties see them) and
    // removed again before returning; the Generator appends the accepted ones for good.
    const ConstraintView& cv = r.constraint;
    std::unique_ptr<ConstraintState> m = cv.c ? std::make_unique<ConstraintState>(*cv.state) : nullptr;
    // Token tree: alternatives where the draft is unsure, at depth i + 1 (children of chain node i), reached with
    // probability about a^i (a: the measured acceptance of the chain's tokens).
    const bool tree = spec_.tree && spec_.tree_width > 1 && r.max_nodes > k + 1;
    const double a = r.control.accept_estimate();
    double reach = 1.0;
    for (int i = 0; i < k; i++) {
        const float* lg = d.last_logits();
        // A logit bias (or a grammar) may ban every token the draft has (it can have fewer than the target): no
        // draft then. Under a grammar the draft samples from its constrained distribution, so q is what drew x.
        const uint8_t* allowed = m ? cv.allowed(*m, d.n_vocab()) : nullptr;
        if (qs.size() <= size_t(i)) qs.emplace_back();
        if (top_prob(lg, d.n_vocab()) < spec_.p_min) {  // too unsure to go on: the chain ends, alternatives may not
            if (tree && sampler_.try_distribution(lg, history, qs[size_t(i)], allowed))
                add_alternatives(r, lg, -1, allowed, i + 1, reach, &qs[size_t(i)]);
            break;
        }
        if (!sampler_.try_distribution(lg, history, qs[size_t(i)], allowed)) break;
        int32_t x = sampler_.draw(qs[size_t(i)]);
        if (tree) add_alternatives(r, lg, x, allowed, i + 1, reach, &qs[size_t(i)]);
        reach *= a;
        if (x >= target_vocab_) break;  // padding id outside the target vocabulary
        if (m && !m->advance(*cv.c, x)) break;
        drafts.push_back(x);
        history.push_back(x);
        if (m && std::find(cv.c->eog.begin(), cv.c->eog.end(), x) != cv.c->eog.end()) break;
        if (i + 1 < k) d.decode(&x, 1, false);
    }
    history.resize(n);
}

}  // namespace

SamplerParams draft_sampling(SamplerParams p, int draft_vocab) {
    std::erase_if(p.logit_bias, [draft_vocab](const auto& b) { return b.first >= draft_vocab; });
    return p;
}

std::unique_ptr<Proposer> make_model_proposer(SpecType type, const ModelProposerSetup& setup) {
    TD_ASSERT(uses_draft_session(type) && setup.draft);
    TD_ASSERT(reads_target_states(type) == setup.draft->is_drafter());
    return std::make_unique<ModelProposer>(type, setup);
}

}  // namespace tandem::speculative
