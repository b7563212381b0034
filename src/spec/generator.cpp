// The generation loop with speculative decoding; the algorithm is described in include/tandem/speculative.h.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "grammar/grammar.h"
#include "spec/draft_control.h"
#include "spec/suffix_cache.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/speculative.h"

namespace tandem {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Largest softmax probability of raw logits (temperature 1), used for --draft-p-min as llama.cpp does.
float top_prob(const float* logits, int n) {
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = std::max(mx, logits[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += std::exp(double(logits[i] - mx));
    return float(1.0 / sum);
}

// Draws the replacement of a rejected draft token; falls back to p when the residual has no mass.
int32_t sample_residual(const Distribution& p, const Distribution& q, Sampler& rng) {
    Distribution r = residual_distribution(p, q);
    return rng.draw(r.support.empty() ? p : r);
}

}  // namespace

double accept_probability(float px, float qx) {
    if (px >= qx) return 1.0;  // also q(x) = 0 < p(x): nothing to correct
    if (px <= 0) return 0.0;
    return double(px) / double(qx);
}

Distribution residual_distribution(const Distribution& p, const Distribution& q) {
    Distribution r;
    r.p.assign(p.p.size(), 0.0f);
    double total = 0;
    for (int32_t id : p.support) {
        float qv = size_t(id) < q.p.size() ? q.p[size_t(id)] : 0.0f;  // draft vocab may be shorter
        float v = p.p[size_t(id)] - qv;
        if (v > 0) {
            r.p[size_t(id)] = v;
            r.support.push_back(id);
            total += v;
        }
    }
    if (total <= 0) {
        r.support.clear();
        return r;
    }
    for (int32_t id : r.support) r.p[size_t(id)] = float(r.p[size_t(id)] / total);
    return r;
}

// The draft samples with the request's parameters, minus logit biases for ids its vocabulary lacks.
static SamplerParams draft_sampling(SamplerParams p, int draft_vocab) {
    std::erase_if(p.logit_bias, [draft_vocab](const auto& b) { return b.first >= draft_vocab; });
    return p;
}

const char* spec_type_name(SpecType t) {
    switch (t) {
        case SpecType::NONE: return "none";
        case SpecType::DRAFT: return "draft";
        case SpecType::NGRAM: return "ngram";
        case SpecType::SELF: return "self";
        case SpecType::SUFFIX: return "suffix";
    }
    return "?";
}

SpecType spec_type_from_name(const std::string& s) {
    // llama.cpp's names too: draft-simple is a draft model; its n-gram variants (ngram-simple, ngram-map-k,
    // ngram-map-k4v, ngram-mod, ngram-cache) are all served by tandem's prompt-lookup n-gram drafting. A list
    // ("ngram-simple,draft-simple") means: a draft model if it names one, else n-grams.
    if (s.find(',') != std::string::npos) {
        SpecType best = SpecType::NONE;
        size_t i = 0;
        while (i <= s.size()) {
            size_t j = s.find(',', i);
            if (j == std::string::npos) j = s.size();
            SpecType t = spec_type_from_name(s.substr(i, j - i));
            if (t == SpecType::DRAFT || best == SpecType::NONE) best = t;
            i = j + 1;
        }
        return best;
    }
    if (s == "none") return SpecType::NONE;
    if (s == "draft" || s == "draft-simple") return SpecType::DRAFT;
    if (s == "ngram" || s == "ngram-simple" || s == "lookup" || s == "ngram-map-k" || s == "ngram-map-k4v" ||
        s == "ngram-mod" || s == "ngram-cache")
        return SpecType::NGRAM;
    if (s == "self") return SpecType::SELF;
    if (s == "suffix") return SpecType::SUFFIX;
    if (s == "draft-eagle3" || s == "draft-mtp" || s == "draft-dflash" || s == "draft-dspark")
        throw Error("speculative type '" + s + "' needs model-specific draft heads, which tandem does not implement (use "
                    "draft-simple with -md, ngram, or self)");
    throw Error("unknown speculative type '" + s + "' (none, draft, ngram, self, suffix; llama.cpp's draft-simple and ngram-* too)");
}

Generator::Generator(Session& target, Session* draft, const SamplerParams& sampling, const SpecParams& spec)
    : target_(target), draft_(draft), spec_(spec), target_sampler_(sampling, target.n_vocab()),
      draft_sampler_(draft_sampling(sampling, draft ? draft->n_vocab() : target.n_vocab()), draft ? draft->n_vocab() : target.n_vocab()) {
    draft_sampler_.reseed(derive_seed(sampling.seed, 1));  // independent of the target stream of seed + 1
    const bool needs_draft = spec.type == SpecType::DRAFT || spec.type == SpecType::SELF;
    if (needs_draft && !draft) throw Error(std::string("speculative type '") + spec_type_name(spec.type) + "' needs a draft session");
    if (!needs_draft) draft_ = nullptr;
    if (spec_.n_max < 0) throw Error("--draft-max must be >= 0");
    if (spec_.n_min < 0) throw Error("--draft-min must be >= 0");
    if (spec_.type == SpecType::NGRAM && spec_.ngram_n < 1) throw Error("--spec-ngram-n must be >= 1");
    // A draft can never be longer than what fits in the context; cap absurd values once here.
    spec_.n_max = std::min(spec_.n_max, std::max(0, target.n_ctx() - 1));
    if (spec_.type == SpecType::NONE) spec_.n_max = 0;
    if (spec_.type == SpecType::NGRAM || spec_.type == SpecType::SUFFIX) spec_.draft_cost_prior = 0.0;
    if (spec_.type == SpecType::SUFFIX && !spec_.suffix) spec_.suffix = std::make_shared<SuffixCache>();
    control_ = std::make_unique<DraftLengthController>(spec_.n_max, spec_.n_min, spec_.adaptive, spec_.draft_cost_prior);
    const Model& tm = target.model();
    if (tm.hparams().n_expert > 0 && spec_.n_max > 0) {  // MoE target: verification reads more experts per token
        std::vector<double> shape(size_t(spec_.n_max) + 2, 1.0);
        const double one = tm.bytes_per_pass(1);
        for (int n = 2; n <= spec_.n_max + 1; n++) shape[size_t(n)] = tm.bytes_per_pass(n) / one;
        control_->set_verify_shape(std::move(shape));
    }
    stats_.drafted_at.assign(size_t(spec_.n_max), 0);
    stats_.accepted_at.assign(size_t(spec_.n_max), 0);
}

Generator::~Generator() = default;

void Generator::set_constraint(std::shared_ptr<const OutputConstraint> c) {
    constraint_ = std::move(c);
    gm_ = constraint_ ? std::make_unique<grammar::Matcher>(constraint_->grammar) : nullptr;
    memo_ = constraint_ ? std::make_unique<grammar::MaskMemo>() : nullptr;
}

const uint8_t* Generator::allowed_after(const grammar::Matcher& m, int n_vocab) {
    constraint_->trie->allowed(m, constraint_->eog, mask_, memo_.get());
    if (int(mask_.size()) < n_vocab) mask_.resize(size_t(n_vocab), 0);  // a draft vocabulary may be longer
    return mask_.data();
}

namespace {
// The grammar state after token x (false: the grammar refuses it; an end-of-generation token ends the text).
bool advance(grammar::Matcher& m, const OutputConstraint& c, int32_t x) {
    if (std::find(c.eog.begin(), c.eog.end(), x) != c.eog.end()) return m.can_end();
    if (x < 0 || size_t(x) >= c.pieces->size() || (*c.pieces)[size_t(x)].empty()) return false;
    return m.accept_bytes((*c.pieces)[size_t(x)]);
}
}  // namespace

void Generator::start_deferred(const std::vector<int32_t>& prompt) {
    if (prompt.empty()) throw Error("empty prompt");
    if (int(prompt.size()) > target_.n_ctx())
        throw Error(strprintf("prompt is %zu tokens, longer than the context (%d)", prompt.size(), target_.n_ctx()));
    history_ = prompt;
    const auto& cached = target_.tokens();
    size_t keep = 0;
    while (keep < cached.size() && keep + 1 < prompt.size() && cached[keep] == prompt[keep]) keep++;
    target_.truncate(int(keep));
    n_cached_ = int(keep);
    prefill_pos_ = keep;
    prefill_end_ = prompt.size() - 1;  // the last prompt token is fed by the first step
    prompt_size_ = prompt.size();
}

void Generator::start(const std::vector<int32_t>& prompt) {
    start_deferred(prompt);
    if (prefill_pending()) target_.decode(history_.data() + prefill_pos_, int(prefill_end_ - prefill_pos_), false);
    prefill_pos_ = prefill_end_;
}

void Generator::shift_context() {
    // As llama-server: keep the first n_keep tokens, forget half of the rest (the oldest), move the others down.
    const int n_past = target_.n_past();
    const int want = spec_.n_keep < 0 ? int(prompt_size_) : spec_.n_keep;  // -1: the whole prompt
    const int n_keep = std::clamp(want, 0, std::max(0, n_past - 2));
    const int n_discard = (n_past - n_keep) / 2;
    if (n_discard < 1) return;
    target_.shift(n_keep, n_discard);
    history_.erase(history_.begin() + n_keep, history_.begin() + n_keep + n_discard);
    if (draft_) {  // the draft re-reads a window of the (new) history at its next proposal
        draft_->truncate(0);
        draft_base_ = 0;
    }
    stats_.n_context_shifts++;
}

const int32_t* Generator::prefill_chunk(int max, int* n) const {
    *n = int(std::min<size_t>(size_t(std::max(1, max)), prefill_end_ - prefill_pos_));
    return prefill_pending() ? history_.data() + prefill_pos_ : nullptr;
}

void Generator::prefill_advance(int n) {
    TD_ASSERT(n >= 0 && prefill_pos_ + size_t(n) <= prefill_end_);
    prefill_pos_ += size_t(n);
}

int Generator::propose_ngram(int k, std::vector<int32_t>& drafts) const {
    // Prompt lookup: find the most recent earlier occurrence of the last n tokens (n = ngram_n .. 1) and
    // propose the tokens that followed it.
    const auto& h = history_;
    const int len = int(h.size());
    for (int n = std::min(spec_.ngram_n, len - 1); n >= 1; n--) {
        for (int start = len - n - 1; start >= 0; start--) {
            if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
            int from = start + n;
            int m = std::min({k, spec_.ngram_m, len - from});
            for (int i = 0; i < m; i++) drafts.push_back(h[size_t(from + i)]);
            if (m > 0) return m;
        }
    }
    return 0;
}

int Generator::propose_model(int k, std::vector<int32_t>& drafts, std::vector<Distribution>& qs) {
    Session& d = *draft_;
    // Bring the draft's cache up to date: it holds history[draft_base_ ..]; keep the common prefix, feed the rest.
    // For a probe after a long plain stretch (catching up would cost more than the probe is worth), or when its
    // context is full, the draft restarts on a window of the most recent tokens instead. The draft only
    // proposes, so this never changes the output; RoPE attention depends on relative positions, so a window
    // predicts recent continuations about as well as the full history.
    const size_t n = history_.size();
    const auto& cached = d.tokens();
    // A target token the draft's vocabulary lacks (the draft's may be up to 128 shorter) reaches the draft as
    // token 0: its proposals get a little worse there, the output cannot change (the target verifies).
    const int32_t d_vocab = d.n_vocab();
    auto for_draft = [d_vocab](int32_t x) { return x < d_vocab ? x : 0; };
    size_t keep = 0;
    while (keep < cached.size() && draft_base_ + keep < n && cached[keep] == for_draft(history_[draft_base_ + keep])) keep++;
    const size_t window = std::min<size_t>(kDraftWindow, size_t(std::max(1, d.n_ctx() - k - 1)));
    const size_t lag = n - (draft_base_ + keep);
    if ((control_->probing() && lag > window) || n - draft_base_ + size_t(k) > size_t(d.n_ctx())) {
        draft_base_ = n > window ? n - window : 0;
        keep = 0;
    }
    if (draft_base_ + keep == n) keep--;  // need logits for the last token: feed it again
    d.truncate(int(keep));
    const int room = d.n_ctx() - int(n - draft_base_);
    if (room < 1) return 0;
    k = std::min(k, room);
    std::vector<int32_t> feed(history_.begin() + std::ptrdiff_t(draft_base_ + keep), history_.end());
    for (int32_t& x : feed) x = for_draft(x);
    d.decode(feed.data(), int(feed.size()), false);
    // The drafted tokens are appended to history_ while drafting (the samplers' penalties see them) and
    // removed again before returning; end_step appends the accepted ones for good.
    std::unique_ptr<grammar::Matcher> m = gm_ ? std::make_unique<grammar::Matcher>(*gm_) : nullptr;
    for (int i = 0; i < k; i++) {
        const float* lg = d.last_logits();
        if (top_prob(lg, d.n_vocab()) < spec_.p_min) break;
        if (qs.size() <= size_t(i)) qs.emplace_back();
        // A logit bias (or a grammar) may ban every token the draft has (it can have fewer than the target): no
        // draft then. Under a grammar the draft samples from its constrained distribution, so q is what drew x.
        const uint8_t* allowed = m ? allowed_after(*m, d.n_vocab()) : nullptr;
        if (!draft_sampler_.try_distribution(lg, history_, qs[size_t(i)], allowed)) break;
        int32_t x = draft_sampler_.draw(qs[size_t(i)]);
        if (x >= target_.n_vocab()) break;  // padding id outside the target vocabulary
        if (m && !advance(*m, *constraint_, x)) break;
        drafts.push_back(x);
        history_.push_back(x);
        if (m && std::find(constraint_->eog.begin(), constraint_->eog.end(), x) != constraint_->eog.end()) break;
        if (i + 1 < k) d.decode(&x, 1, false);
    }
    history_.resize(n);
    return int(drafts.size());
}

namespace {

TokenLogprob logprob_of(const float* logits, int n_vocab, int32_t id, int n_top) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = std::max(mx, logits[i]);
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += std::exp(double(logits[i] - mx));
    const float lse = mx + float(std::log(sum));
    TokenLogprob r;
    r.id = id;
    r.logprob = logits[id] - lse;
    if (n_top > 0) {
        std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
        for (int i = 0; i < n_vocab; i++) idx[size_t(i)] = i;
        const int k = std::min(n_top, n_vocab);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
        for (int i = 0; i < k; i++) r.top.emplace_back(idx[size_t(i)], logits[idx[size_t(i)]] - lse);
    }
    return r;
}

}  // namespace

bool Generator::step(std::vector<int32_t>& out, int max_tokens, std::vector<TokenLogprob>* logprobs, int n_top) {
    std::vector<int32_t> batch;
    if (!begin_step(max_tokens, batch)) return false;
    auto t0 = std::chrono::steady_clock::now();
    target_.decode(batch, true);
    end_step(out, ms_since(t0), logprobs, n_top);
    return true;
}

bool Generator::begin_step(int max_tokens, std::vector<int32_t>& batch) {
    TD_ASSERT(!prefill_pending());
    TD_ASSERT(!history_.empty() && max_tokens >= 1);
    if (spec_.context_shift && target_.n_ctx() - target_.n_past() < 2) shift_context();
    const int n_past = target_.n_past();
    TD_ASSERT(n_past == int(history_.size()) - 1);
    const int room = target_.n_ctx() - n_past;  // tokens the target can still take, including `cur`
    if (room < 1) return false;

    int k = control_->next();
    k = std::min({k, room - 1, max_tokens - 1});
    drafts_.clear();
    auto t0 = std::chrono::steady_clock::now();
    if (k > 0) {
        if (one_hot_proposals()) {
            if (spec_.type == SpecType::NGRAM) propose_ngram(k, drafts_);
            else spec_.suffix->propose(history_, k, drafts_);
            if (gm_) {  // never propose what the grammar forbids: cut at the first such token
                grammar::Matcher m = *gm_;
                size_t ok = 0;
                while (ok < drafts_.size() && advance(m, *constraint_, drafts_[ok])) ok++;
                drafts_.resize(ok);
            }
        } else {
            propose_model(k, drafts_, q_);
        }
        if (int(drafts_.size()) < spec_.n_min) drafts_.clear();
    }
    pending_ = {std::max(k, 0), n_past, ms_since(t0)};
    batch.clear();
    batch.push_back(history_.back());
    batch.insert(batch.end(), drafts_.begin(), drafts_.end());
    return true;
}

void Generator::end_step(std::vector<int32_t>& out, double t_target_ms, std::vector<TokenLogprob>* logprobs, int n_top) {
    const std::vector<int32_t>& drafts = drafts_;
    const int nd = int(drafts.size());
    const int n_past = pending_.n_past;
    TD_ASSERT(target_.n_past() == n_past + 1 + nd && target_.n_logits() == nd + 1);
    auto t1 = std::chrono::steady_clock::now();
    int accepted = 0;  // accepted drafts are appended to history_ as they are accepted
    int32_t final_token = -1;
    if (p_.size() < size_t(nd) + 1) p_.resize(size_t(nd) + 1);
    std::unique_ptr<grammar::Matcher> m = gm_ ? std::make_unique<grammar::Matcher>(*gm_) : nullptr;
    for (int i = 0; i <= nd; i++) {
        Distribution& p = p_[size_t(i)];
        // under a grammar: the target's distribution conditioned on what the grammar allows after the text so far
        target_sampler_.distribution(target_.logits(i), history_, p, m ? allowed_after(*m, target_.n_vocab()) : nullptr);
        if (i == nd) {  // all drafts accepted (or none drafted): bonus / plain token from p
            final_token = target_sampler_.draw(p);
            if (logprobs) logprobs->push_back(logprob_of(target_.logits(i), target_.n_vocab(), final_token, n_top));
            break;
        }
        const int32_t x = drafts[size_t(i)];
        const float px = p.prob(x);
        const float qx = one_hot_proposals() ? 1.0f : q_[size_t(i)].prob(x);
        // min(1, p/q): no draw when it is 0 or 1 (so the greedy path stays exact and draws no random number)
        const double a = accept_probability(px, qx);
        const bool accept = spec_.broken_accept_all_for_tests || a >= 1.0 || (a > 0.0 && target_sampler_.uniform() < a);
        if (accept) {
            accepted++;
            if (logprobs) logprobs->push_back(logprob_of(target_.logits(i), target_.n_vocab(), x, n_top));
            history_.push_back(x);
            if (m) advance(*m, *constraint_, x);  // p(x) > 0, so the grammar allows x
            continue;
        }
        if (one_hot_proposals()) {
            Distribution one_hot;
            one_hot.p.assign(p.p.size(), 0.0f);
            one_hot.p[size_t(x)] = 1.0f;
            final_token = sample_residual(p, one_hot, target_sampler_);
        } else {
            final_token = sample_residual(p, q_[size_t(i)], target_sampler_);
        }
        if (logprobs) logprobs->push_back(logprob_of(target_.logits(i), target_.n_vocab(), final_token, n_top));
        break;
    }
    target_.truncate(n_past + 1 + accepted);
    const double t_target = t_target_ms + ms_since(t1);
    const double t_draft = pending_.t_draft_ms;
    const int k = pending_.requested;

    for (int i = 0; i < accepted; i++) out.push_back(drafts[size_t(i)]);
    out.push_back(final_token);
    history_.push_back(final_token);
    if (m) {
        advance(*m, *constraint_, final_token);
        *gm_ = std::move(*m);
    }

    stats_.n_rounds++;
    stats_.n_generated += accepted + 1;
    stats_.t_draft_ms += t_draft;
    stats_.t_target_ms += t_target;
    if (nd > 0) {
        stats_.n_rounds_drafted++;
        stats_.n_drafted += nd;
        stats_.n_accept += accepted;
        for (int i = 0; i < nd; i++) stats_.drafted_at[size_t(i)]++;
        for (int i = 0; i < accepted; i++) stats_.accepted_at[size_t(i)]++;
        if (control_->probing()) stats_.n_probe_rounds++;
    }
    control_->observe(k, nd, accepted, t_draft, t_target);
}

}  // namespace tandem
