// OpenAI's Responses API (/v1/responses) on top of the chat pipeline, as llama-server offers it: `input` and
// `instructions` become chat messages; the answer (reasoning, text and function calls, split by
// serve/chat_answer.h) becomes the Response's output items; a stream is the Responses event sequence. Pure
// functions and a small event builder; no HTTP.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/chat_answer.h"

namespace tandem::server {

// A Responses request as a chat request:
// - `instructions` becomes the system message; `input` is a string (one user message) or a list of items:
//   messages ({"role", "content"}, content a string or input_text/output_text parts; "developer" is a system
//   message), `function_call` items (the assistant's calls: consecutive ones are one assistant message),
//   `function_call_output` items (tool messages) and `reasoning` items (the reasoning_content of the assistant
//   message they precede).
// - function `tools` ({"type": "function", "name", "parameters", ...}), `tool_choice` and `parallel_tool_calls`
//   become the chat ones; hosted tool types (web_search, file_search, ...) are left out, as llama-server does.
// - text.format json_schema / json_object becomes response_format.
// - max_output_tokens, temperature, top_p, stream, and llama-server's extra fields carry over.
// Refused: images and files, previous_response_id and conversation (no stored responses). Throws BadRequest.
nlohmann::ordered_json responses_to_chat(const nlohmann::ordered_json& body);

struct ResponseUsage {
    int input = 0, output = 0, cached = 0;
};

// The output items of a finished answer, in this order: a reasoning item (when there is reasoning), the message
// (when there is text, or nothing else), one function_call item per call (call.id "call_X" -> item id "fc_X").
// `id` is the response's ("resp_X"): the message is "msg_X", the reasoning "rs_X".
nlohmann::ordered_json response_items(const std::string& id, const ChatDelta& answer);

// The Response object. status: "completed", "incomplete" (max_output_tokens reached) or "in_progress" (the first
// events of a stream: no output, no usage). output_text joins the message texts.
nlohmann::ordered_json response_object(const std::string& id, const std::string& model, int64_t created,
                                       const std::string& status, const nlohmann::ordered_json& items,
                                       const ResponseUsage& usage);

// The event sequence of a streamed response. Output items open as their kind first appears (reasoning, the
// message, each function call) and the open one closes when another begins, so items are whole and in
// output_index order. Events are (type, body without "type" and "sequence_number", which the sender adds).
class ResponseStream {
public:
    using Event = std::pair<std::string, nlohmann::ordered_json>;
    ResponseStream(std::string id, std::string model, int64_t created);
    std::vector<Event> start() const;  // response.created, response.in_progress
    std::vector<Event> push(const ChatDelta& d);  // calls need their id set ("call_X")
    // Closes the open item (a message with no text when nothing was output at all), then response.completed or
    // response.incomplete with the whole Response.
    std::vector<Event> finish(const std::string& status, const ResponseUsage& usage);

private:
    void close(std::vector<Event>& ev);
    std::string id_, model_;
    int64_t created_;
    nlohmann::ordered_json items_ = nlohmann::ordered_json::array();  // finished items, then the open one
    enum class Open { NONE, REASONING, MESSAGE } open_ = Open::NONE;
    std::string text_;  // the open item's text so far
    int n_reasoning_ = 0, n_messages_ = 0;
};

}  // namespace tandem::server
