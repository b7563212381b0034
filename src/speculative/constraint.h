// The state of an output constraint (include/tandem/speculative.h: OutputConstraint) after some text: the grammar
// matcher, or, for a lazy grammar before its trigger, the trigger scan. Copyable: speculative decoding keeps one
// per drafted position and rolls back by copying. Internal to the generator.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/trigger.h"
#include "tandem/speculative.h"

namespace tandem {

class ConstraintState {
public:
    // `grammar_now`: the grammar's start state even for a lazy constraint (the server checks its bounds early).
    explicit ConstraintState(const OutputConstraint& c, bool grammar_now = false);
    // The state after token x; false (state unchanged) when the constraint refuses x. An end-of-generation token
    // ends the text: allowed when the grammar can end, or before a lazy grammar's trigger.
    // `patterns` false: a lazy grammar's pattern triggers are not looked for (the mask's check of the words).
    bool advance(const OutputConstraint& c, int32_t x, bool patterns = true);
    // The tokens allowed next: `mask` filled (n_vocab entries; ids the constraint's vocabulary lacks are 0) and
    // returned, or null when every token is allowed (a lazy grammar before its trigger, with no trigger-completing
    // token refused). Throws grammar::GrammarLimit past the matcher's bounds, or when the grammar allows no token
    // at all (a character no token's text can give, such as an empty class): the grammar's fault, never a
    // generation that silently leaves its rules.
    const uint8_t* allowed(const OutputConstraint& c, grammar::MaskMemo& memo, std::vector<uint8_t>& mask,
                           int n_vocab) const;
    bool triggered() const { return m_.has_value(); }

private:
    std::optional<grammar::Matcher> m_;
    std::optional<grammar::TriggerScan> scan_;  // lazy, before the trigger
    bool lazy_start_ = false;  // a lazy grammar's start state (grammar_now): an empty mask is no error
};

}  // namespace tandem
