#include <algorithm>

#include "grammar/grammar.h"
#include "tandem/speculative.h"
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

std::shared_ptr<const OutputConstraint> ConstraintVocab::constrain(std::shared_ptr<const grammar::Grammar> g) const {
    auto c = std::make_shared<OutputConstraint>();
    c->grammar = std::move(g);
    c->trie = trie_;
    c->pieces = pieces_;
    c->eog = eog_;
    return c;
}

}  // namespace tandem
