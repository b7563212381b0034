// Tool calls in a model's answer: the formats the common chat templates teach, parsed into OpenAI tool_calls
// (name + JSON arguments) and the remaining text (tool_calls.cpp); and what makes a model produce them: the grammar
// that forces a call (tool_choice "required" or a named function), the triggers of a lazy one, the generic tool
// prompt (tool_grammar.cpp). Pure functions; the streaming side is serve/chat_answer.h.
#pragma once
#include <nlohmann/json.hpp>

#include "grammar/trigger.h"
#include <string>
#include <vector>

namespace tandem::server {

enum class ToolFormat {
    NONE,  // the template has no tool-call format tandem knows
    HERMES,  // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen 2.5/3, Hermes 2/3)
    LLAMA3,  // {"name": ..., "parameters": {...}}, optionally after <|python_tag|> (Llama 3.1-3.3)
    MISTRAL,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral 7B v0.3, Nemo)
    MISTRAL_ARGS,  // [TOOL_CALLS]NAME[ARGS]{...}, once per call, [CALL_ID]ID optional before [ARGS] (Mistral Small
    // 3.2, Devstral, Ministral 3); the parser reads both Mistral forms
    XML,  // <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
    // (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, Step 3.5): a string parameter's value is its raw text,
    // the others are JSON
    DEEPSEEK,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>
    // ...<｜tool▁calls▁end｜> (R1); the parser also reads the V3.1 form
    DEEPSEEK_V31,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
    HARMONY,  // gpt-oss: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>; the
    // analysis channel is the reasoning, the final channel the answer (serve/chat_answer.h parses it)
    GENERIC,  // a JSON answer {"tool_calls": [{"name", "arguments"}]} or {"name", "arguments"}
};

// The format a chat template teaches, from its markers.
ToolFormat tool_format_for_template(const std::string& template_source);

struct ToolCall {
    std::string name;
    std::string arguments;  // compact JSON text of the arguments object
    std::string id;  // the API's call id (set by the server when it answers)
};

// The texts that mark a call in this format: the answer is held back from the first one on, and those that are
// special tokens must be rendered in the answer text for the parser to see them (llama.cpp's preserved tokens).
// LLAMA3 and GENERIC calls also start with "{" at the start of the answer.
const std::vector<std::string>& tool_call_markers(ToolFormat f);

// A GBNF grammar whose sentences are tool calls in format f (every format but NONE): one
// call, or one or more when `parallel`, each naming a tool of `tools` (OpenAI tool objects) with arguments valid
// under its parameters schema. only_name: just that tool. Throws tandem::Error (an unknown name, a schema the
// JSON-schema converter refuses, a format that has no grammar).
std::string tool_call_gbnf(ToolFormat f, const nlohmann::ordered_json& tools, const std::string& only_name,
                           bool parallel);

// tool_choice "auto": where a call begins in format f, as lazy-grammar triggers (grammar/trigger.h): the call
// marker, or for LLAMA3 and GENERIC the call's opening `{"name"` / `{"tool_calls"` as the answer's first bytes.
// A leading <think> block is skipped. Empty words and at_start for NONE. The call grammar (tool_call_gbnf)
// starts with the trigger's text, so from the trigger on the answer is a valid call.
grammar::TriggerSpec tool_call_triggers(ToolFormat f);

// For chat templates that show no tools (format NONE): the conversation with the tools described in the system
// message and the GENERIC answer format asked for, as llama.cpp's generic tool handler does. The answer is then
// parsed (and, for a required call, constrained) as GENERIC.
nlohmann::ordered_json messages_with_tool_prompt(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools);

// The calls of a held answer as far as they have come, for streaming their arguments (HERMES, LLAMA3, MISTRAL,
// MISTRAL_ARGS, GENERIC: formats whose arguments are JSON written after the name): each call whose name is
// complete, with its arguments so far as compact JSON text (the model's text without whitespace outside
// strings) and whether they are complete. Empty for the other formats (their calls go out whole), and for
// arguments written as a JSON string. The compact text only grows as the answer does.
struct CallPrefix {
    std::string name, arguments;
    bool complete = false;
};
std::vector<CallPrefix> call_prefixes(ToolFormat f, const std::string& held);
bool streams_arguments(ToolFormat f);

// The same, incrementally, for a held text that only grows: each update reads only the new bytes, so a long call
// streams in linear time.
class CallScanner {
public:
    explicit CallScanner(ToolFormat f) : f_(f) {}
    const std::vector<CallPrefix>& update(const std::string& held);

private:
    ToolFormat f_;
    std::vector<CallPrefix> calls_;
    size_t from_ = 0;  // where the next header is looked for
    bool open_ = false;  // the last call's arguments are being read
    bool stopped_ = false;  // arguments that cannot stream (a JSON string): nothing more is reported
    size_t pos_ = 0;  // open: the next byte of its arguments to read
    int depth_ = 0;
    bool in_string_ = false, escaped_ = false;
};

struct ParsedAnswer {
    std::string content;  // the text outside the tool calls (trimmed when there are calls)
    std::vector<ToolCall> calls;
    std::string cut;  // the text of a last call that the answer's end cut off after whole calls: neither of them
};

// Splits an answer into text and tool calls. Text that only looks like a call (invalid JSON, no name) stays
// content: nothing is dropped. One exception, the answer's end cutting the calls off (max_tokens on parallel calls):
// after at least one whole call, a last call without its end (its closing tag, or its JSON unfinished; a tag cut
// inside right after a call too) is `cut`, neither a call nor content, so the whole calls stand alone as OpenAI's
// clients expect; cut inside the first call there is no call, and the text is content as usual. Arguments are compact JSON text: for the formats of call_prefixes, the model's own
// text without whitespace (what a stream of call_prefixes adds up to), otherwise re-serialized.
// HARMONY: the commentary messages addressed to functions.NAME; other channels stay in content as they are.
// XML: `tools` (OpenAI tool objects) give each parameter's type: a string parameter keeps its raw text, the others
// are read as JSON (raw text when that fails); without tools every value that reads as JSON is JSON.
ParsedAnswer parse_tool_calls(ToolFormat f, const std::string& text, const nlohmann::ordered_json& tools = nullptr);

}  // namespace tandem::server
