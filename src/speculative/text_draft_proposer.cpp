// A draft model with another vocabulary (issue 28, "drafts with another tokenizer"): the draft reads the text of
// the target's history in its own tokens, drafts greedily, and its text is re-tokenized into target tokens.
//
// Two rules (Timor et al. 2025, "Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for
// Heterogeneous Vocabularies"), both exact:
// - string-level exact match (a greedy target, or under an output constraint): the draft drafts greedily, its text
//   is re-tokenized into target tokens, and the proposals are one-hot: a proposed x is accepted with probability
//   p(x), and on rejection the target draws from its residual (verify.h);
// - token-level intersection (a sampling target): the draft samples with the request's parameters from its
//   distribution restricted to the tokens both vocabularies have (VocabBridge::shared: the same text, once in
//   each), each draft token is the one target token of its text, and q (the restricted distribution, mapped to
//   target ids) goes to the verifier: min(1, p(x)/q(x)) and the residual max(0, p - q), where q is defined.
// The output is the target's alone; how well the two vocabularies agree only decides how many are accepted.
//
// The boundary: the draft's text is re-tokenized as a continuation of the target's (Tokenizer::encode_continuation:
// no SentencePiece space prefix, so a word the draft finishes continues the target's last token). The draft's
// context follows the target's history: only the tail from the last draft token that ends at a word start
// (a space follows) before the first changed byte is re-tokenized.
#include <algorithm>
#include <cmath>

#include "speculative/proposer.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/tokenizer.h"

namespace tandem::speculative {

namespace {

// Tokens of the text `s` from its start: a SentencePiece vocabulary adds its space prefix itself, so a text that
// begins with a space (a target piece such as " Once") gives that space to the prefix.
std::vector<int32_t> encode_start(const Tokenizer& t, const std::string& s) {
    if (t.adds_space_prefix() && !s.empty() && s[0] == ' ') return t.encode(s.substr(1), false, false);
    return t.encode(s, false, false);
}

class TextDraftProposer final : public Proposer {
public:
    TextDraftProposer(const ModelProposerSetup& s)
        : d_(*s.draft),
          target_(*s.spec.vocab_bridge->target),
          draft_(*s.spec.vocab_bridge->draft),
          shared_(s.spec.vocab_bridge->shared),
          spec_(s.spec),
          target_vocab_(s.target_vocab),
          intersection_(!s.target_greedy && s.spec.vocab_bridge->n_shared > 0),
          sampler_(draft_sampling(s.sampling, s.draft->n_vocab()), s.draft->n_vocab()) {
        sampler_.reseed(derive_seed(s.sampling.seed, 1));
        allowed_.assign(size_t(d_.n_vocab()), 0);  // over the draft model's rows (VocabBridge::shared covers them)
        for (size_t i = 0; i < allowed_.size() && i < shared_.size(); i++) allowed_[i] = shared_[i] >= 0 ? 1 : 0;
    }
    SpecType type() const override { return SpecType::DRAFT; }
    bool one_hot() const override { return !tli_now_; }
    const char* rule() const override { return tli_now_ ? "token-level intersection" : "string-level exact match"; }
    void on_context_shift() override { seen_.clear(), ends_.clear(), text_.clear(); }

    void propose(ProposeRound& r) override {
        follow_history(r.history);
        tli_now_ = intersection_ && !r.constraint.c;  // (a constraint cuts one-hot proposals only)
        if (!sync_draft()) return;
        if (tli_now_) return propose_intersection(r);
        // draft greedily a little past k target tokens' worth, then keep the whole target tokens of it
        const int budget = r.k + 2;
        std::string drafted;
        for (int i = 0; i < budget; i++) {
            const float* lg = d_.last_logits();
            const int n = d_.n_vocab();
            const int32_t x = int32_t(std::max_element(lg, lg + n) - lg);
            if (spec_.p_min > 0 && top_probability(lg, n, x) < spec_.p_min && i > 0) break;
            if (draft_.is_eog(x) || draft_.token_attr(x) == TokenAttr::CONTROL) break;
            drafted += draft_.token_to_piece(x, false);
            if (i + 1 < budget && d_.n_past() < d_.n_ctx()) d_.decode(&x, 1, false);
            else break;
        }
        std::vector<int32_t> out = to_target(drafted);
        if (out.size() > 1) out.pop_back();  // the last may be a word the draft stopped inside
        if (int(out.size()) > r.k) out.resize(size_t(r.k));
        r.plan.chain = std::move(out);
    }

private:
    // Token-level intersection: up to k draft tokens sampled from the draft's distribution over the shared tokens,
    // each proposed as the target token of its text, with that distribution (in target ids) as q.
    void propose_intersection(ProposeRound& r) {
        std::vector<int32_t> hist(dtok_);  // the draft's own tokens, for its sampler's penalties
        for (int i = 0; i < r.k; i++) {
            const float* lg = d_.last_logits();
            const int n = d_.n_vocab();
            const int32_t best = int32_t(std::max_element(lg, lg + n) - lg);
            if (spec_.p_min > 0 && top_probability(lg, n, best) < spec_.p_min) break;
            Distribution qd;
            if (!sampler_.try_distribution(lg, hist, qd, allowed_.data())) break;
            const int32_t xd = sampler_.draw(qd);
            if (r.q.size() <= size_t(i)) r.q.emplace_back();
            Distribution& qt = r.q[size_t(i)];
            qt.p.assign(size_t(target_vocab_), 0.0f);
            qt.support.clear();
            for (int32_t d : qd.support) {
                qt.p[size_t(shared_[size_t(d)])] = qd.p[size_t(d)];
                qt.support.push_back(shared_[size_t(d)]);
            }
            r.plan.chain.push_back(shared_[size_t(xd)]);
            hist.push_back(xd);
            if (draft_.is_eog(xd) || i + 1 == r.k || d_.n_past() >= d_.n_ctx()) break;
            d_.decode(&xd, 1, false);
        }
    }

    static float top_probability(const float* lg, int n, int32_t x) {
        double sum = 0;
        for (int i = 0; i < n; i++) sum += std::exp(double(lg[i] - lg[x]));
        return float(1.0 / sum);
    }

    // text_ := the text of the history (the target's tokens as pieces; control tokens have none).
    void follow_history(const std::vector<int32_t>& h) {
        size_t keep = 0;
        while (keep < seen_.size() && keep < h.size() && seen_[keep] == h[keep]) keep++;
        seen_.resize(keep);
        ends_.resize(keep);
        text_.resize(keep ? ends_.back() : 0);
        for (size_t i = keep; i < h.size(); i++) {
            seen_.push_back(h[i]);
            text_ += target_.token_to_piece(h[i], false);
            ends_.push_back(text_.size());
        }
    }

    // The draft's tokens of text_ in its cache, with logits for the last one. False when they do not fit.
    bool sync_draft() {
        // keep the draft tokens that end before the first changed byte and at a word start; re-tokenize the rest
        size_t same = 0;
        while (same < dtext_.size() && same < text_.size() && dtext_[same] == text_[same]) same++;
        size_t j = dends_.size();
        while (j > 0 && !(dends_[j - 1] <= same && dends_[j - 1] < text_.size() && text_[dends_[j - 1]] == ' ')) j--;
        const size_t from = j ? dends_[j - 1] : 0;
        dtok_.resize(size_t(lead()) + j);
        dends_.resize(j);
        if (j == 0 && lead() == 1) dtok_[0] = draft_.bos();
        const std::string tail = text_.substr(from);
        for (int32_t x : from == 0 ? encode_start(draft_, tail) : draft_.encode_continuation(tail)) {
            dtok_.push_back(x);
            dends_.push_back((dends_.empty() ? 0 : dends_.back()) + draft_.token_to_piece(x, false).size());
        }
        dtext_ = text_;
        if (dtok_.empty()) return false;
        if (int(dtok_.size()) + spec_.n_max + 2 > d_.n_ctx()) return false;  // no room: no proposal (a plain step)
        const auto& cached = d_.tokens();
        size_t keep = 0;
        while (keep < cached.size() && keep < dtok_.size() && cached[keep] == dtok_[keep]) keep++;
        if (keep == dtok_.size()) keep--;  // logits for the last token: feed it again
        keep = size_t(d_.reuse_prefix(int(keep)));
        d_.decode(dtok_.data() + keep, int(dtok_.size() - keep), false);
        return true;
    }
    int lead() const { return draft_.add_bos() && draft_.bos() >= 0 ? 1 : 0; }

    // Target tokens continuing the history with `s` (a word the draft finished continues the target's last token
    // as the target would write it).
    std::vector<int32_t> to_target(const std::string& s) const {
        if (seen_.empty() || text_.empty()) return encode_start(target_, s);
        return target_.encode_continuation(s);
    }

    Session& d_;
    const Tokenizer& target_;
    const Tokenizer& draft_;
    const std::vector<int32_t>& shared_;  // VocabBridge::shared
    std::vector<uint8_t> allowed_;  // the draft ids in the intersection
    SpecParams spec_;
    int target_vocab_;
    bool intersection_;  // a sampling target: token-level intersection (unless a constraint is on)
    bool tli_now_ = false;  // the rule of the last proposal
    Sampler sampler_;
    std::vector<int32_t> seen_;  // the history tokens text_ holds
    std::vector<size_t> ends_;  // text_'s length after each of them
    std::string text_;
    std::vector<int32_t> dtok_;  // the draft's tokens of dtext_ (BOS first when its vocabulary adds one)
    std::vector<size_t> dends_;  // dtext_'s length after each draft token past the BOS
    std::string dtext_;  // the text the draft tokens were made from
};

}  // namespace

std::unique_ptr<Proposer> make_text_draft_proposer(const ModelProposerSetup& setup) {
    if (!setup.draft || !setup.spec.vocab_bridge) throw Error("a draft of another vocabulary needs its session");
    return std::make_unique<TextDraftProposer>(setup);
}

}  // namespace tandem::speculative
