// The generation loop with speculative decoding; the algorithm is described in include/tandem/speculative.h.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/softmax.h"
#include "grammar/grammar.h"
#include "speculative/constraint.h"
#include "speculative/draft_control.h"
#include "speculative/proposer.h"
#include "tandem/suffix_cache.h"
#include "speculative/verify.h"
#include "speculative/generator_impl.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/speculative.h"

namespace tandem {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Impl::Impl(Session& target, Session* draft, const SamplerParams& sampling, const SpecParams& spec)
    : target_(target), draft_(draft), spec_(spec), target_sampler_(sampling, target.n_vocab()) {
    const bool needs_draft = uses_draft_session(spec.type);
    if (needs_draft && !draft)
        throw Error(std::string("speculative type '") + spec_type_name(spec.type) + "' needs a draft session");
    if (!needs_draft) draft_ = nullptr;
    validate_spec_params(spec_);
    // A draft can never be longer than what fits in the context; cap absurd values once here.
    spec_.n_max = std::min(spec_.n_max, std::max(0, target.n_ctx() - 1));
    if (spec_.type == SpecType::NONE) spec_.n_max = 0;
    // A recurrent state cannot forget the oldest tokens (Session::shift refuses): such a model stops at the end of
    // its context, as llama.cpp disables the context shift for it.
    if (target.model().hparams().recurrent()) {
        spec_.context_shift = false;
        // and keeps each row's state of a pass up to kRecurrentPassRows rows: no longer chains or trees for it
        spec_.n_max = std::min(spec_.n_max, kRecurrentPassRows - 1);
        spec_.tree_nodes = std::min(spec_.tree_nodes, kRecurrentPassRows);
    }
    if (spec_uses(spec_, SpecType::SUFFIX) && !spec_.suffix) spec_.suffix = std::make_shared<SuffixCache>();
    // One draft-length controller per proposer: acceptance and costs are the proposer's own.
    // The verification-cost shape: an MoE target's pass reads more experts per extra token, a recurrent one's
    // moves one more state per row (Session::state_bytes_per_pass).
    std::vector<double> shape;
    const Model& tm = target.model();
    if ((tm.hparams().n_expert > 0 || target.state_bytes() > 0) && spec_.n_max > 0) {
        const int rows = std::max(spec_.n_max + 1, spec_.tree ? spec_.tree_nodes : 0);  // the largest pass
        shape.assign(size_t(rows) + 1, 1.0);
        auto bytes = [&](int n) { return tm.bytes_per_pass(n) + target.state_bytes_per_pass(n); };
        for (int n = 2; n <= rows; n++) shape[size_t(n)] = bytes(n) / bytes(1);
    }
    std::vector<SpecType> types = {spec_.type};
    types.insert(types.end(), spec_.extra.begin(), spec_.extra.end());
    for (SpecType t : types) {
        const bool draft_free = t == SpecType::NGRAM || t == SpecType::SUFFIX;
        auto c = std::make_unique<DraftLengthController>(spec_.n_max, spec_.n_min, spec_.adaptive,
                                                         draft_free ? 0.0 : spec_.draft_cost_prior);
        c->set_round_cost_cap(spec_.max_round_cost);
        if (!shape.empty()) c->set_verify_shape(shape);
        SpecCosts known;
        if (spec_.cost_memory && spec_.cost_memory->get(t, &known))
            c->seed_costs(known.t1_ms, known.draft_cost, known.verify_slope);
        const speculative::ModelProposerSetup setup{draft_, sampling, spec_, target.n_vocab(),
                                                    target_sampler_.greedy()};
        props_.push_back({t, speculative::make_proposer(t, setup), std::move(c)});
        stats_.by_proposer.push_back({t});
    }
    stats_.drafted_at.assign(size_t(spec_.n_max), 0);
    stats_.accepted_at.assign(size_t(spec_.n_max), 0);
}

bool Generator::Impl::one_hot_proposals() const { return props_[cur_].proposer && props_[cur_].proposer->one_hot(); }

void Generator::Impl::save_costs() const {
    if (!spec_.cost_memory) return;
    for (const auto& p : props_) {
        const DraftLengthController& c = *p.control;
        if (c.plain_step_ms() > 0)
            spec_.cost_memory->put(p.type, {c.plain_step_ms(), c.draft_cost_estimate(), c.verify_slope_estimate()});
    }
}

void Generator::Impl::set_constraint(std::shared_ptr<const OutputConstraint> c) {
    constraint_ = std::move(c);
    gm_ = constraint_ ? std::make_unique<ConstraintState>(*constraint_) : nullptr;
    memo_ = constraint_ ? std::make_unique<grammar::MaskMemo>() : nullptr;
}

const uint8_t* Generator::Impl::allowed_after(const ConstraintState& m, int n_vocab) {
    return m.allowed(*constraint_, *memo_, mask_, n_vocab);
}

void Generator::Impl::start_deferred(const std::vector<int32_t>& prompt) {
    if (prompt.empty()) throw Error("empty prompt");
    if (int(prompt.size()) > target_.n_ctx())
        throw Error(strprintf("prompt is %zu tokens, longer than the context (%d)", prompt.size(), target_.n_ctx()));
    history_ = prompt;
    const auto& cached = target_.tokens();
    size_t keep = 0;
    while (keep < cached.size() && keep + 1 < prompt.size() && cached[keep] == prompt[keep]) keep++;
    keep = size_t(target_.reuse_prefix(int(keep)));  // 0 where a window-only cache no longer holds the prefix's end
    n_cached_ = int(keep);
    prefill_pos_ = keep;
    prefill_end_ = prompt.size() - 1;  // the last prompt token is fed by the first step
    prompt_size_ = prompt.size();
}

void Generator::Impl::start(const std::vector<int32_t>& prompt) {
    start_deferred(prompt);
    if (prefill_pending()) target_.decode(history_.data() + prefill_pos_, int(prefill_end_ - prefill_pos_), false);
    prefill_pos_ = prefill_end_;
}

void Generator::Impl::shift_context() {
    // As llama-server: keep the first n_keep tokens, forget half of the rest (the oldest), move the others down.
    const int n_past = target_.n_past();
    const int want = spec_.n_keep < 0 ? int(prompt_size_) : spec_.n_keep;  // -1: the whole prompt
    const int n_keep = std::clamp(want, 0, std::max(0, n_past - 2));
    const int n_discard = (n_past - n_keep) / 2;
    if (n_discard < 1) return;
    target_.shift(n_keep, n_discard);
    history_.erase(history_.begin() + n_keep, history_.begin() + n_keep + n_discard);
    for (auto& p : props_)
        if (p.proposer) p.proposer->on_context_shift();
    stats_.n_context_shifts++;
}

const int32_t* Generator::Impl::prefill_chunk(int max, int* n) const {
    *n = int(std::min<size_t>(size_t(std::max(1, max)), prefill_end_ - prefill_pos_));
    return prefill_pending() ? history_.data() + prefill_pos_ : nullptr;
}

void Generator::Impl::prefill_advance(int n) {
    TD_ASSERT(n >= 0 && prefill_pos_ + size_t(n) <= prefill_end_);
    prefill_pos_ += size_t(n);
}

namespace {

TokenLogprob logprob_of(const float* logits, int n_vocab, int32_t id, int n_top) {
    const float lse = softmax_norm(logits, n_vocab).log_sum_exp();
    TokenLogprob r;
    r.id = id;
    r.logprob = logits[id] - lse;
    if (n_top > 0) {
        std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
        for (int i = 0; i < n_vocab; i++) idx[size_t(i)] = i;
        const int k = std::min(n_top, n_vocab);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
        for (int i = 0; i < k; i++) r.top.emplace_back(idx[size_t(i)], logits[idx[size_t(i)]] - lse);
    }
    return r;
}

}  // namespace

bool Generator::Impl::step(std::vector<int32_t>& out, int max_tokens, std::vector<TokenLogprob>* logprobs, int n_top) {
    std::vector<int32_t> batch;
    if (!begin_step(max_tokens, batch)) return false;
    auto t0 = std::chrono::steady_clock::now();
    if (parents_.empty()) target_.decode(batch, true);
    else target_.decode_tree(batch.data(), parents_.data(), int(batch.size()));
    end_step(out, ms_since(t0), logprobs, n_top);
    return true;
}

int Generator::Impl::choose_proposer() {
    cur_ = 0;
    if (props_.size() == 1) return props_[0].control->next();
    // Every proposer's controller says what it would draft (and keeps its own probing schedule); the one with the
    // highest expected speed-up at its length proposes. None: a plain round.
    int best_k = 0;
    double best_s = 0;
    for (size_t i = 0; i < props_.size(); i++) {
        const int k = props_[i].control->next();
        if (k <= 0) continue;
        const double s = props_[i].control->expected_speedup(k);
        if (best_k == 0 || s > best_s) {
            best_k = k;
            best_s = s;
            cur_ = i;
        }
    }
    return best_k;
}

bool Generator::Impl::begin_step(int max_tokens, std::vector<int32_t>& batch) {
    TD_ASSERT(!prefill_pending());
    TD_ASSERT(!history_.empty() && max_tokens >= 1);
    if (spec_.context_shift && target_.n_ctx() - target_.n_past() < 2) shift_context();
    const int n_past = target_.n_past();
    TD_ASSERT(n_past == int(history_.size()) - 1);
    const int room = target_.n_ctx() - n_past;  // tokens the target can still take, including `cur`
    if (room < 1) return false;

    int k = choose_proposer();
    k = std::min({k, room - 1, max_tokens - 1});
    plan_.clear();
    std::vector<int32_t>& drafts = plan_.chain;
    auto t0 = std::chrono::steady_clock::now();
    if (k > 0) {
        speculative::ConstraintView cv;
        if (gm_) cv = {constraint_.get(), gm_.get(), memo_.get(), &mask_};
        speculative::ProposeRound round{history_, k, std::min(spec_.tree_nodes, room), cv, control(), plan_, q_};
        props_[cur_].proposer->propose(round);
        if (gm_ && one_hot_proposals()) {  // never propose what the grammar forbids: cut at the first such token
            ConstraintState m = *gm_;
            size_t ok = 0;
            while (ok < drafts.size() && m.advance(*constraint_, drafts[ok])) ok++;
            drafts.resize(ok);
        }
        if (int(drafts.size()) < spec_.n_min) plan_.clear();
        plan_.drop_orphans();  // an alternative hangs from the chain node before it (cut chains drop the deeper ones)
    }
    pending_ = {std::max(k, 0), n_past, ms_since(t0)};
    plan_.batch(history_.back(), batch, parents_);
    return true;
}

// The walk's view of the target pass the caller ran: the sampler's distribution at each node given the accepted
// tokens (appended to history_ as they are accepted) and, under a grammar, the constraint state they lead to.
class Generator::Impl::TargetView final : public speculative::WalkTarget {
public:
    TargetView(Impl& g, ConstraintState* m) : g_(g), m_(m) {}
    void distribution(int node, Distribution& p) override {
        // under a grammar: the target's distribution conditioned on what the grammar allows after the text so far
        g_.target_sampler_.distribution(g_.target_.logits(node), g_.history_, p,
                                        m_ ? g_.allowed_after(*m_, g_.target_.n_vocab()) : nullptr);
    }
    void accepted(int, int32_t token) override {
        g_.history_.push_back(token);
        if (m_) m_->advance(*g_.constraint_, token);  // p(token) > 0, so the constraint allows it
    }
    double uniform() override { return g_.target_sampler_.uniform(); }
    int32_t draw(const Distribution& p) override { return g_.target_sampler_.draw(p); }

private:
    Impl& g_;
    ConstraintState* m_;
};

void Generator::Impl::end_step(std::vector<int32_t>& out, double t_target_ms, std::vector<TokenLogprob>* logprobs,
                               int n_top) {
    const speculative::RoundPlan& plan = plan_;
    const int nd = plan.n_chain(), na = int(plan.alts.size());
    const int n_nodes = plan.n_nodes();
    const int n_past = pending_.n_past;
    TD_ASSERT(target_.n_past() == n_past + n_nodes && target_.n_logits() == n_nodes);
    auto t1 = std::chrono::steady_clock::now();
    std::unique_ptr<ConstraintState> m = gm_ ? std::make_unique<ConstraintState>(*gm_) : nullptr;
    TargetView view(*this, m.get());
    const speculative::WalkResult walk = speculative::verify_walk(plan, q_, one_hot_proposals(), view, accept_);
    const std::vector<int32_t>& path = walk.path;
    const int32_t final_token = walk.final_token;
    const int accepted = walk.accepted_chain, accepted_alt = walk.accepted_alt;
    if (logprobs) {  // each emitted token under the target's logits at the node it was chosen at
        for (size_t i = 0; i + 1 < path.size(); i++)
            logprobs->push_back(logprob_of(target_.logits(path[i]), target_.n_vocab(), plan.token(path[i + 1]), n_top));
        logprobs->push_back(logprob_of(target_.logits(path.back()), target_.n_vocab(), final_token, n_top));
    }
    target_.keep_path(n_past, path);
    const double t_target = t_target_ms + ms_since(t1);
    const double t_draft = pending_.t_draft_ms;
    const int k = pending_.requested;

    for (size_t i = 1; i < path.size(); i++) out.push_back(plan.token(path[i]));
    out.push_back(final_token);
    const SpecType proposer = nd + na > 0 ? props_[cur_].type : SpecType::NONE;
    round_src_.clear();
    for (size_t i = 1; i < path.size(); i++)
        round_src_.push_back({path[i] <= nd ? TokenOrigin::DRAFT : TokenOrigin::TREE, proposer, stats_.n_rounds + 1});
    round_src_.push_back({TokenOrigin::TARGET, proposer, stats_.n_rounds + 1});
    history_.push_back(final_token);
    if (m) {
        m->advance(*constraint_, final_token);
        *gm_ = std::move(*m);
    }

    stats_.n_rounds++;
    stats_.n_generated += accepted + accepted_alt + 1;
    stats_.t_draft_ms += t_draft;
    stats_.t_target_ms += t_target;
    if (nd + na > 0) {
        stats_.n_rounds_drafted++;
        stats_.n_drafted += nd;
        stats_.n_accept += accepted;
        for (int i = 0; i < nd; i++) stats_.drafted_at[size_t(i)]++;
        for (int i = 0; i < accepted; i++) stats_.accepted_at[size_t(i)]++;
        if (control().probing()) stats_.n_probe_rounds++;
    }
    if (na > 0) {
        stats_.n_tree_rounds++;
        stats_.n_tree_nodes += na;
        stats_.n_tree_accept += accepted_alt;
    }
    if (na > 0) {  // calibration of the alternatives' predicted chances: those whose parent the walk reached
        double predicted = 0;
        for (const auto& e : plan.alts)
            if (e.depth - 1 <= accepted) predicted += e.pred;
        control().observe_alternatives(predicted, accepted_alt);
    }
    if (nd + na > 0) {
        auto& bp = stats_.by_proposer[cur_];
        bp.rule = props_[cur_].proposer->rule();
        bp.rounds++;
        bp.drafted += nd;
        bp.accepted += accepted;
    }
    if (k == 0 && nd + na == 0) {  // a plain round: every proposer's controller learns the plain step time
        for (auto& p : props_) p.control->observe(0, 0, 0, t_draft, t_target, 1);
    } else {
        control().observe(k, nd, accepted, t_draft, t_target, n_nodes);
    }
}

// The public interface: forwarders to the Impl.
Generator::Generator(Session& target, Session* draft, const SamplerParams& sampling, const SpecParams& spec)
    : im_(std::make_unique<Impl>(target, draft, sampling, spec)) {}
Generator::~Generator() = default;
void Generator::start(const std::vector<int32_t>& prompt) { im_->start(prompt); }
void Generator::start_deferred(const std::vector<int32_t>& prompt) { im_->start_deferred(prompt); }
const int32_t* Generator::prefill_chunk(int max, int* n) const { return im_->prefill_chunk(max, n); }
void Generator::prefill_advance(int n) { im_->prefill_advance(n); }
bool Generator::prefill_pending() const { return im_->prefill_pending(); }
bool Generator::step(std::vector<int32_t>& out, int max_tokens, std::vector<TokenLogprob>* logprobs, int n_top) {
    return im_->step(out, max_tokens, logprobs, n_top);
}
bool Generator::begin_step(int max_tokens, std::vector<int32_t>& batch) { return im_->begin_step(max_tokens, batch); }
void Generator::end_step(std::vector<int32_t>& out, double t_target_ms, std::vector<TokenLogprob>* logprobs,
                         int n_top) {
    im_->end_step(out, t_target_ms, logprobs, n_top);
}
const int32_t* Generator::batch_parents() const { return im_->parents_.empty() ? nullptr : im_->parents_.data(); }
const std::vector<int32_t>& Generator::history() const { return im_->history_; }
const SpecStats& Generator::stats() const { return im_->stats_; }
const std::vector<TokenSource>& Generator::round_sources() const { return im_->round_src_; }

const char* token_origin_name(TokenOrigin o) {
    switch (o) {
        case TokenOrigin::DRAFT: return "draft";
        case TokenOrigin::TREE: return "tree";
        case TokenOrigin::TARGET: break;
    }
    return "target";
}
int Generator::n_cached() const { return im_->n_cached_; }
const SpecParams& Generator::spec() const { return im_->spec_; }
void Generator::save_costs() const { im_->save_costs(); }
void Generator::set_constraint(std::shared_ptr<const OutputConstraint> c) { im_->set_constraint(std::move(c)); }

void SpecStats::add(const SpecStats& o) {
    n_rounds += o.n_rounds;
    n_rounds_drafted += o.n_rounds_drafted;
    n_drafted += o.n_drafted;
    n_accept += o.n_accept;
    n_generated += o.n_generated;
    auto add_at = [](std::vector<int64_t>& to, const std::vector<int64_t>& from) {
        if (to.size() < from.size()) to.resize(from.size(), 0);
        for (size_t i = 0; i < from.size(); i++) to[i] += from[i];
    };
    add_at(drafted_at, o.drafted_at);
    add_at(accepted_at, o.accepted_at);
    t_draft_ms += o.t_draft_ms;
    t_target_ms += o.t_target_ms;
    n_probe_rounds += o.n_probe_rounds;
    n_context_shifts += o.n_context_shifts;
    n_tree_rounds += o.n_tree_rounds;
    n_tree_nodes += o.n_tree_nodes;
    n_tree_accept += o.n_tree_accept;
    for (const ByProposer& b : o.by_proposer) {
        auto it =
            std::find_if(by_proposer.begin(), by_proposer.end(), [&](const ByProposer& x) { return x.type == b.type; });
        if (it == by_proposer.end()) it = by_proposer.insert(by_proposer.end(), ByProposer{b.type});
        if (*b.rule) it->rule = b.rule;
        it->rounds += b.rounds;
        it->drafted += b.drafted;
        it->accepted += b.accepted;
    }
}

}  // namespace tandem
