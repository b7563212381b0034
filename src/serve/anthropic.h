// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) on top of the OpenAI chat pipeline, as
// llama-server offers it: a request is converted to an OpenAI chat request, and the result is written back in
// Anthropic's shapes. Pure functions; no HTTP.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/chat_answer.h"
#include "serve/tool_calls.h"

namespace tandem::server {

// An Anthropic Messages request as an OpenAI chat request: `system` (a string or text blocks) becomes the first
// message; content blocks of type text become OpenAI text parts; stop_sequences, max_tokens, temperature, top_p,
// top_k, stream carry over; metadata is accepted and has no effect. `thinking` enabled/disabled sets the
// template's enable_thinking; an assistant's thinking blocks become its reasoning_content. `tools` become OpenAI tools and tool_choice (auto, any = required, tool = named, none;
// disable_parallel_tool_use) carries over; an assistant's tool_use blocks become its tool_calls, a user's
// tool_result blocks become OpenAI tool messages (before the user's text). Image blocks are refused. Throws
// BadRequest. for_count: count_tokens (max_tokens optional).
nlohmann::ordered_json anthropic_to_openai(const nlohmann::ordered_json& body, bool for_count);

// A finished generation in Anthropic's shape: a thinking block (when the answer has reasoning; its signature is
// empty), a text block (when there is text, or nothing else at all), then a tool_use block per call.
// finish_reason: "stop", "length" or "tool_calls"; stop_word: the stop sequence that ended it, if any.
nlohmann::ordered_json anthropic_message(const std::string& id, const std::string& model, const ChatDelta& answer,
                                         const std::string& finish_reason, const std::string& stop_word,
                                         int input_tokens, int output_tokens, int cached_tokens);

// The content-block events of a streamed message (between message_start and message_delta): blocks open as
// their kind first appears (thinking, text, each tool_use) and the open one closes when another begins, so the
// indices follow the blocks of anthropic_message. Events are (type, body without "type").
class AnthropicStream {
public:
    using Event = std::pair<std::string, nlohmann::ordered_json>;
    std::vector<Event> push(const ChatDelta& d);  // calls need their id set
    std::vector<Event> finish();  // closes the open block (an empty text block when there was none)
    size_t n_calls() const { return n_calls_; }

private:
    void close(std::vector<Event>& ev);
    enum class Open { NONE, THINKING, TEXT } open_ = Open::NONE;
    int index_ = -1;
    size_t n_calls_ = 0;
};
nlohmann::ordered_json anthropic_tool_use(const ToolCall& call);  // {"type": "tool_use", "id", "name", "input"}
std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_word);
// {"type": "error", "error": {"type": ..., "message": ...}}; type from the HTTP status.
nlohmann::ordered_json anthropic_error(int status, const std::string& message);

}  // namespace tandem::server
