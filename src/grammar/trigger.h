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
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tandem::grammar {

struct TriggerSpec {
    std::vector<std::string> words;  // non-empty strings
    std::vector<std::string> at_start;  // non-empty strings, no leading blank
    std::string think_open, think_close;  // both or neither
    bool starts_thinking = false;
    size_t longest() const;  // the longest word / at_start / think marker, in bytes
};

class TriggerScan {
public:
    explicit TriggerScan(const TriggerSpec& spec);
    // Feeds the next bytes of the output. While no trigger is complete: nullopt. When one completes inside
    // `bytes`: the grammar's text, from the trigger's first byte (which may lie in earlier bytes) to the end of
    // `bytes`. The scan is then done (later calls are a caller error).
    std::optional<std::string> feed(const TriggerSpec& spec, const std::string& bytes);
    bool thinking() const { return phase_ == Phase::THINK; }
    bool at_start() const { return phase_ == Phase::START; }  // the answer has not begun (at_start may still fire)
    std::string key() const;  // the whole state as a string: equal keys, equal futures

private:
    enum class Phase { START, THINK, TEXT };
    Phase phase_;
    std::string tail_;  // the last bytes seen (up to longest() - 1): a trigger or think_close may span pieces
    std::string head_;  // START: the answer's non-blank bytes so far (a prefix of an at_start trigger or think_open)
};

}  // namespace tandem::grammar
