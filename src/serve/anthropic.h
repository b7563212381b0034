// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) on top of the OpenAI chat pipeline, as
// llama-server offers it: a request is converted to an OpenAI chat request, and the result is written back in
// Anthropic's shapes. Pure functions; no HTTP.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/tool_calls.h"

namespace tandem::server {

// An Anthropic Messages request as an OpenAI chat request: `system` (a string or text blocks) becomes the first
// message; content blocks of type text become OpenAI text parts; stop_sequences, max_tokens, temperature, top_p,
// top_k, stream carry over; metadata and thinking are accepted and have no effect (earlier thinking blocks are
// dropped). `tools` become OpenAI tools and tool_choice (auto, any = required, tool = named, none;
// disable_parallel_tool_use) carries over; an assistant's tool_use blocks become its tool_calls, a user's
// tool_result blocks become OpenAI tool messages (before the user's text). Image blocks are refused. Throws
// BadRequest. for_count: count_tokens (max_tokens optional).
nlohmann::ordered_json anthropic_to_openai(const nlohmann::ordered_json& body, bool for_count);

// A finished generation in Anthropic's shape: a text block (left out when there are calls and no text), then a
// tool_use block per call. finish_reason: "stop", "length" or "tool_calls"; stop_word: the stop sequence that
// ended it, if any.
nlohmann::ordered_json anthropic_message(const std::string& id, const std::string& model, const std::string& text,
                                         const std::vector<ToolCall>& calls, const std::string& finish_reason,
                                         const std::string& stop_word, int input_tokens, int output_tokens, int cached_tokens);
nlohmann::ordered_json anthropic_tool_use(const ToolCall& call);  // {"type": "tool_use", "id", "name", "input"}
std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_word);
// {"type": "error", "error": {"type": ..., "message": ...}}; type from the HTTP status.
nlohmann::ordered_json anthropic_error(int status, const std::string& message);

}  // namespace tandem::server
