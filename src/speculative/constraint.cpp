#include "speculative/constraint.h"

#include <algorithm>

#include "tandem/tokenizer.h"

namespace tandem {

ConstraintVocab::ConstraintVocab(const Tokenizer& tok, const std::vector<int32_t>& shown) : eog_(tok.eog_ids()) {
    auto pieces = std::make_shared<std::vector<std::string>>(size_t(tok.n_vocab()));
    for (int32_t id = 0; id < tok.n_vocab(); id++) {
        const bool control = tok.token_attr(id) == TokenAttr::CONTROL;
        if (!control || std::find(shown.begin(), shown.end(), id) != shown.end())
            (*pieces)[size_t(id)] = tok.token_to_piece(id, control);
    }
    trie_ = std::make_shared<grammar::VocabTrie>(*pieces);
    pieces_ = std::move(pieces);
}

// The tokens whose text can complete one of `triggers`: it holds a whole trigger, or begins with a trigger's
// last bytes (the rest came in earlier tokens).
std::shared_ptr<const std::vector<int32_t>> ConstraintVocab::ends_of(const std::vector<std::string>& triggers) const {
    std::lock_guard<std::mutex> lock(ends_mutex_);
    if (auto it = ends_.find(triggers); it != ends_.end()) return it->second;
    if (ends_.size() >= 64) ends_.clear();  // requests bring their own triggers: the memo stays bounded
    auto& slot = ends_[triggers];
    auto ids = std::make_shared<std::vector<int32_t>>();
    for (size_t id = 0; id < pieces_->size(); id++) {
        const std::string& s = (*pieces_)[id];
        if (s.empty()) continue;
        bool ends = false;
        for (const auto& w : triggers) {
            ends = ends || s.find(w) != std::string::npos;
            // a suffix of w longer than the token's text cannot begin it
            for (size_t j = std::max<size_t>(1, w.size() > s.size() ? w.size() - s.size() : 1); !ends && j < w.size();
                 j++)
                ends = s.compare(0, w.size() - j, w, j) == 0;
        }
        if (ends) ids->push_back(int32_t(id));
    }
    slot = std::move(ids);
    return slot;
}

std::shared_ptr<const OutputConstraint> ConstraintVocab::constrain(
    std::shared_ptr<const grammar::Grammar> g, std::shared_ptr<const grammar::TriggerSpec> lazy) const {
    auto c = std::make_shared<OutputConstraint>();
    c->grammar = std::move(g);
    c->trie = trie_;
    c->pieces = pieces_;
    c->eog = eog_;
    if (lazy) {
        c->word_ends = ends_of(lazy->words);
        c->start_ends = ends_of(lazy->at_start);
        c->lazy = std::move(lazy);
    }
    return c;
}

ConstraintState::ConstraintState(const OutputConstraint& c, bool grammar_now) : lazy_start_(c.lazy && grammar_now) {
    if (c.lazy && !grammar_now) scan_.emplace(*c.lazy);
    else m_.emplace(c.grammar);
}

bool ConstraintState::advance(const OutputConstraint& c, int32_t x, bool patterns) {
    const bool eog = std::find(c.eog.begin(), c.eog.end(), x) != c.eog.end();
    // x's text; null for ids outside the vocabulary and for control tokens (no text)
    const std::string* piece =
        x >= 0 && size_t(x) < c.pieces->size() && !(*c.pieces)[size_t(x)].empty() ? &(*c.pieces)[size_t(x)] : nullptr;
    if (scan_) {  // before the trigger: free text, unless x completes a trigger into text the grammar refuses
        if (eog || !piece) return true;
        grammar::TriggerScan next = *scan_;
        const auto fired = next.feed(*c.lazy, *piece, patterns);
        if (!fired) {
            *scan_ = std::move(next);
            return true;
        }
        grammar::Matcher m(c.grammar);
        if (!m.accept_bytes(fired->text)) {
            if (!fired->pattern) return false;  // a word the grammar refuses: the token is refused
            next.refused();  // a pattern's match the grammar refuses is no trigger (grammar/trigger.h)
            *scan_ = std::move(next);
            return true;
        }
        m_.emplace(std::move(m));
        scan_.reset();
        return true;
    }
    if (eog) return m_->can_end();
    return piece && m_->accept_bytes(*piece);
}

const uint8_t* ConstraintState::allowed(const OutputConstraint& c, grammar::MaskMemo& memo, std::vector<uint8_t>& mask,
                                        int n_vocab) const {
    if (m_) {
        c.trie->allowed(*m_, c.eog, mask, &memo);
        if (!lazy_start_ && std::find(mask.begin(), mask.end(), uint8_t(1)) == mask.end())
            throw grammar::GrammarLimit(
                "grammar: no token can continue the output here (the grammar allows no "
                "character any token's text begins with)");
        if (int(mask.size()) < n_vocab) mask.resize(size_t(n_vocab), 0);  // a draft vocabulary may be longer
        return mask.data();
    }
    // before the trigger the mask depends on the scan state only: remembered (with a 1-byte trigger every state is
    // the same, and its check covers much of the vocabulary)
    const std::string key = scan_->key();
    if (auto it = memo.lazy_masks.find(key); it != memo.lazy_masks.end()) {
        if (it->second.empty()) return nullptr;
        mask = it->second;
        if (mask.size() < size_t(n_vocab)) mask.resize(size_t(n_vocab), 1);
        return mask.data();
    }
    if (memo.lazy_masks.size() >= 256) memo.lazy_masks.clear();
    bool any = false;
    auto check = [&](const std::vector<int32_t>& ids) {
        for (int32_t id : ids) {
            ConstraintState s = *this;
            if (s.advance(c, id, false)) continue;  // patterns never refuse a token
            if (!any) mask.assign(std::max(size_t(n_vocab), c.pieces->size()), 1);
            any = true;
            mask[size_t(id)] = 0;
        }
    };
    check(*c.word_ends);
    // at_start triggers: while the answer has not begun, and in a leading think block (one token may close it and
    // begin the answer)
    if (scan_->at_start() || scan_->thinking()) check(*c.start_ends);
    memo.lazy_masks[key] = any ? mask : std::vector<uint8_t>();
    return any ? mask.data() : nullptr;
}

}  // namespace tandem
