// A draft model with another vocabulary (issue 28, "drafts with another tokenizer"): the draft reads the text of
// the target's history in its own tokens, drafts greedily, and its text is re-tokenized into target tokens.
//
// Exactness: the proposals are deterministic (the draft's argmax), so they are one-hot and the verifier's one-hot
// rule applies at every temperature: a proposed x is accepted with probability p(x), and on rejection the target
// draws from its residual (verify.h). The output is the target's alone; how well the two tokenizations agree
// only decides how many proposals are accepted. (Timor et al. 2025's token-level intersection rule, which would
// use the draft's q where both vocabularies share a token, is not implemented: sampled drafting here would need it.)
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
        : d_(*s.draft), target_(*s.spec.vocab_bridge->target), draft_(*s.spec.vocab_bridge->draft), spec_(s.spec) {}
    SpecType type() const override { return SpecType::DRAFT; }
    bool one_hot() const override { return true; }
    void on_context_shift() override { seen_.clear(), ends_.clear(), text_.clear(); }

    void propose(ProposeRound& r) override {
        follow_history(r.history);
        if (!sync_draft()) return;
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
    SpecParams spec_;
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
