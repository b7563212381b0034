// Lazy grammars: a grammar that applies only from a trigger on (llama.cpp's grammar_lazy / grammar_triggers).
// In tool_choice "auto" the answer is free text until the model writes its tool-call marker (`<tool_call>`,
// `[TOOL_CALLS]`, ...); from the marker's first byte on, the text must be a sentence of the call grammar.
//
// TriggerScan follows the output bytes and says where the grammar starts. Its state is small and copyable, so
// speculative decoding keeps one per drafted position like the grammar matcher (grammar.h).
//
//   words     anywhere outside a reasoning block:   "... let me check.<tool_call>\n{..."   -> grammar from '<'
//   at_start  the answer's first non-blank bytes:   "  {\"name\": ..."                     -> grammar from '{'
//   thinking  <think> ... </think> at the start is skipped: markers inside it do not trigger, and the answer
//             (for at_start) begins after it. `starts_thinking`: the prompt opened the block.
//   patterns  llama-server's pattern triggers (grammar_triggers types 2 and 3): regular expressions (PCRE2)
//             over the answer so far, checked at the end of each token as llama.cpp does. Type 2 is found
//             anywhere (the leftmost match), type 3 must match the whole answer (anchored at both ends). The
//             grammar starts at the first non-empty capturing group, or at the match. A match whose text the
//             grammar refuses does not trigger (the text stays free and later matches are looked for):
//             llama.cpp fails the request there instead. So a pattern never refuses a token, and the mask before
//             the trigger stays what the words make it: exact under speculation, at no cost per vocabulary
//             entry. Bounded: patterns see the last kPatternText bytes of the answer (type 3 stops firing past
//             it), and each match runs under PCRE2 match and depth limits (GrammarLimit past them).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::grammar {

// Compiled trigger patterns (immutable, shared by every request state; matching is thread-safe).
class TriggerPatterns {
public:
    // Throws tandem::Error naming the pattern and PCRE2's message when one does not compile.
    TriggerPatterns(const std::vector<std::string>& anywhere, const std::vector<std::string>& whole);
    ~TriggerPatterns();
    TriggerPatterns(const TriggerPatterns&) = delete;
    TriggerPatterns& operator=(const TriggerPatterns&) = delete;
    struct Match {
        size_t start;  // where the grammar begins: the first non-empty group, else the match
        size_t match_start;  // where the match begins (a refused match: the search goes on after it)
    };
    // The leftmost match beginning at or after `from` in `text` over all patterns (whole-answer patterns only when
    // `whole_ok` and from == 0), or nullopt. Throws GrammarLimit past PCRE2's limits.
    std::optional<Match> find(const std::string& text, size_t from, bool whole_ok) const;
    bool empty() const { return codes_.empty(); }

private:
    struct Code;
    std::vector<std::unique_ptr<Code>> codes_;
};

constexpr size_t kPatternText = size_t(32) << 10;  // the answer's last bytes the patterns see

struct TriggerSpec {
    std::vector<std::string> words;  // non-empty strings
    std::vector<std::string> at_start;  // non-empty strings, no leading blank
    std::string think_open, think_close;  // both or neither
    bool starts_thinking = false;
    std::shared_ptr<const TriggerPatterns> patterns;  // null: none
    size_t longest() const;  // the longest word / at_start / think marker, in bytes
};

class TriggerScan {
public:
    explicit TriggerScan(const TriggerSpec& spec);
    // What a trigger found: the grammar's text, from the trigger's first byte (which may lie in earlier bytes) to
    // the end of the bytes fed.
    struct Fired {
        std::string text;
        bool pattern = false;  // a pattern's match: when the grammar refuses the text, call refused() and go on
    };
    // Feeds the next bytes of the output (one token's text: patterns are checked at the end). While no trigger is
    // complete: nullopt. When a word completes inside `bytes`, or a pattern matches: what it found. After a word
    // the scan is done (later calls are a caller error). `patterns` false: words only (the mask's check).
    std::optional<Fired> feed(const TriggerSpec& spec, const std::string& bytes, bool patterns = true);
    // The pattern match just returned is not a trigger (the grammar refused its text): later matches begin after it.
    void refused() { search_from_ = refused_at_ + 1; }
    bool thinking() const { return phase_ == Phase::THINK; }
    bool at_start() const { return phase_ == Phase::START; }  // the answer has not begun (at_start may still fire)
    std::string key() const;  // the whole state as a string: equal keys, equal futures

private:
    enum class Phase { START, THINK, TEXT };
    Phase phase_;
    std::string tail_;  // the last bytes seen (up to longest() - 1): a trigger or think_close may span pieces
    std::string head_;  // START: the answer's non-blank bytes so far (a prefix of an at_start trigger or think_open)
    // patterns: the answer's last bytes (up to kPatternText), how many were dropped before them, where the next
    // match may begin (in answer offsets), and the last match offered
    std::string text_;
    size_t dropped_ = 0, search_from_ = 0, refused_at_ = 0;
};

}  // namespace tandem::grammar
