// GBNF grammars (llama.cpp's format) and their incremental matcher: the state of a partial output is a set of
// parse stacks; a code point advances every stack that accepts it. Used to constrain generation token by token
// (the allowed next tokens are found by walking a trie of the vocabulary with the state).
//
//   root   ::= "{" ws pair ("," ws pair)* "}"      rules: name ::= alternatives separated by |
//   pair   ::= [a-z]+ ":" ws ( "true" | num )     literals "..." (\n \t \" \\ \xHH \uHHHH \UHHHHHHHH escapes),
//   num    ::= "-"? [0-9]{1,3}                     classes [a-z0-9_] [^"\\], . (any), groups ( ), repetition
//   ws     ::= [ \t\n]*                            * + ? {m} {m,} {m,n}, comments from # to the end of the line
#pragma once
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/grammar.h"
#include "tandem/error.h"

namespace tandem::grammar {

struct CharSet {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive
    bool negated = false;
    bool contains(uint32_t cp) const;
    // Could a code point in [lo, hi] be accepted (partial UTF-8 at the end of a token)?
    bool intersects(uint32_t lo, uint32_t hi) const;
};

struct Symbol {
    bool is_rule;  // else a character set
    int index;  // into Grammar::rules or Grammar::sets
};

struct Rule {
    std::string name;
    std::vector<std::vector<Symbol>> alts;  // an empty alternative matches nothing (epsilon)
};

struct Grammar {
    std::vector<Rule> rules;
    std::vector<CharSet> sets;
    int root = 0;
};

// parse_gbnf (tandem/grammar.h) throws tandem::Error naming the line and what is wrong: syntax, an undefined
// rule, a missing `root`, left recursion.

// A matcher bound met while generating: the grammar's fault, so a server answers it as a bad request. The bounds
// keep one request's grammar from taking the engine's time or memory (each message names its bound):
constexpr size_t kMaxStackDepth = 2000;  // rules nested in one parse stack
constexpr size_t kMaxStacks = 20000;  // live alternatives (parse stacks) in one state
constexpr size_t kMaxStatePositions = size_t(1) << 18;  // rule positions summed over a state's stacks (3 MiB)
constexpr int64_t kStepWork = int64_t(1) << 22;  // rule positions visited by one character's step
constexpr int64_t kMaskWork = int64_t(1) << 24;  // ... by all the steps of one mask (about 0.2 s; JSON schemas: < 0.2M)
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
struct GrammarLimit : Error {
    using Error::Error;
};
// A Unicode scalar value: what text may hold (no surrogate halves, nothing past U+10FFFF).
inline bool scalar_value(uint32_t cp) { return cp <= kMaxCodePoint && (cp < 0xD800 || cp > 0xDFFF); }

// The matcher state: copyable (speculative decoding keeps one per drafted position and rolls back by copying).
class Matcher {
public:
    explicit Matcher(std::shared_ptr<const Grammar> g);
    bool accept(uint32_t cp);  // false (state unchanged) when no stack takes it
    // Bytes of text, which may end (and begin) inside a UTF-8 sequence: a byte token of a SentencePiece vocabulary
    // carries half a character. False (state unchanged) when refused: invalid UTF-8, or no stack can take it.
    bool accept_bytes(const std::string& bytes);
    bool can_end() const;  // the text so far is a complete sentence of the grammar (no character left open)
    bool dead() const { return stacks_.empty(); }
    const Grammar& grammar() const { return *g_; }

    struct Pos {
        int rule, alt, sym;
        bool operator<(const Pos& o) const {
            return rule != o.rule ? rule < o.rule : alt != o.alt ? alt < o.alt : sym < o.sym;
        }
        bool operator==(const Pos& o) const { return rule == o.rule && alt == o.alt && sym == o.sym; }
    };
    using Stack = std::vector<Pos>;  // bottom .. top; the top points at a character set (or the stack is empty)
    // A UTF-8 sequence begun but not finished: its bits so far and how many continuation bytes are missing.
    struct Partial {
        uint32_t value = 0;
        int need = 0;
        uint32_t min = 0;  // the smallest code point a sequence of this length encodes (no overlong forms)
    };
    const Partial& partial() const { return partial_; }
    // Could the open sequence still become a code point some stack accepts?
    bool partial_viable(const std::vector<Stack>& stacks, const Partial& p) const;
    const std::vector<Stack>& stacks() const { return stacks_; }
    void set_stacks(std::vector<Stack> s) { stacks_ = std::move(s); }
    // Work done, in rule positions visited (kStepWork, kMaskWork).
    struct Work {
        int64_t used = 0;
    };
    // The stacks after one code point (empty when refused): the step the vocabulary walk repeats. Adds its work to
    // `work`. Throws GrammarLimit past a bound.
    std::vector<Stack> step(const std::vector<Stack>& from, uint32_t cp, Work* work = nullptr) const;

private:
    // every stack of `todo` advanced to its next character set (or to the end), into `out`
    void expand(std::vector<Stack> todo, std::vector<Stack>& out, Work& work) const;
    static void normalize(std::vector<Stack>& stacks);  // sorted, unique, within kMaxStatePositions
    std::shared_ptr<const Grammar> g_;
    std::vector<Stack> stacks_;
    Partial partial_;
};

// What repeats within one generation, remembered: the parse states met (interned), their steps by one code
// point, and the allowed-token mask of whole states (inside a JSON string every token starts from the same state).
// One per generation; not thread-safe. allowed() throws GrammarLimit when one mask takes more than kMaskWork.
struct MaskMemo {
    static constexpr size_t kMaxBytes = size_t(64) << 20;  // about: cleared past it
    size_t bytes = 0;  // held by states and masks, about
    std::map<std::vector<Matcher::Stack>, int> ids;
    std::vector<std::vector<Matcher::Stack>> states;
    std::unordered_map<uint64_t, int> next;  // (state << 21 | code point) -> state, -1: refused
    std::map<std::tuple<int, uint32_t, int, uint32_t>, std::vector<uint8_t>> masks;  // (state, open sequence) -> mask
    // Lazy grammars before their trigger (speculative/constraint.h): the mask by trigger-scan state (TriggerScan::key);
    // empty: every token allowed. Bounded: cleared when it holds 256 masks.
    std::unordered_map<std::string, std::vector<uint8_t>> lazy_masks;
    int intern(std::vector<Matcher::Stack> s);
};

// Which tokens may come next: a trie of the vocabulary's token texts, walked once per step with the matcher's
// stacks (shared prefixes are matched once). eog tokens are allowed exactly when the grammar can end.
class VocabTrie {
public:
    // pieces[i]: the bytes token i stands for ("" for control tokens, which the grammar never allows).
    explicit VocabTrie(const std::vector<std::string>& pieces);
    // allowed[i] for every token; `eog` lists the end-of-generation tokens. With a memo, states and masks met
    // before are not computed again.
    void allowed(const Matcher& m, const std::vector<int32_t>& eog, std::vector<uint8_t>& allowed,
                 MaskMemo* memo = nullptr) const;
    int n_tokens() const { return n_tokens_; }

private:
    struct Node {
        std::vector<std::pair<uint8_t, int>> next;  // byte -> node
        std::vector<int32_t> tokens;  // tokens whose text ends here
    };
    std::vector<Node> nodes_;
    int n_tokens_ = 0;
};

}  // namespace tandem::grammar
