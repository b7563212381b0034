// Tool calls in a model's answer: the formats the common chat templates teach, parsed into OpenAI tool_calls
// (name + JSON arguments) and the remaining text. Pure functions (not yet wired to the server: `tools` requests
// are refused until tool_choice and streaming deltas are in place).
#pragma once
#include <string>
#include <vector>

namespace tandem::server {

enum class ToolFormat {
    NONE,     // the template has no tool-call format tandem knows
    HERMES,   // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen 2.5/3, Hermes 2/3)
    LLAMA3,   // {"name": ..., "parameters": {...}}, optionally after <|python_tag|> (Llama 3.1-3.3)
    MISTRAL,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral, Ministral, Devstral)
    GENERIC,  // a JSON answer {"tool_calls": [{"name", "arguments"}]} or {"name", "arguments"}
};

// The format a chat template teaches, from its markers.
ToolFormat tool_format_for_template(const std::string& template_source);

struct ToolCall {
    std::string name;
    std::string arguments;  // compact JSON text of the arguments object
};

struct ParsedAnswer {
    std::string content;  // the text outside the tool calls (trimmed when there are calls)
    std::vector<ToolCall> calls;
};

// Splits an answer into text and tool calls. Text that only looks like a call (invalid JSON, no name) stays
// content: nothing is dropped.
ParsedAnswer parse_tool_calls(ToolFormat f, const std::string& text);

}  // namespace tandem::server
