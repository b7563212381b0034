// Structured output under speculation: the constraint a generation follows (a grammar, possibly lazy) and the
// vocabulary side shared by every grammar of one tokenizer. Generator::set_constraint (tandem/speculative.h) applies
// it; the grammar itself is src/grammar/.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

class Tokenizer;

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

}  // namespace tandem
