// OpenAI's Responses API (/v1/responses) on top of the chat pipeline, as llama-server offers it: `input` and
// `instructions` become chat messages; the answer is a Response object with one message output item; a stream
// is the Responses event sequence. Pure functions; no HTTP.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::server {

// A Responses request as a chat request: `instructions` becomes the system message; `input` is a string (one
// user message) or a list of messages ({"role", "content"}, content a string or input_text/output_text parts;
// "developer" is a system message). max_output_tokens, temperature, top_p, stream, and llama-server's extra
// fields carry over. Tools, non-message input items (function calls, images, files), previous_response_id (no
// stored responses) and text.format other than text are refused. Throws BadRequest.
nlohmann::ordered_json responses_to_chat(const nlohmann::ordered_json& body);

// The Response object. status: "completed", "incomplete" (max_output_tokens reached) or "in_progress" (the first
// events of a stream: no output yet).
nlohmann::ordered_json response_object(const std::string& id, const std::string& msg_id, const std::string& model, int64_t created,
                               const std::string& status, const std::string* text, int input_tokens, int output_tokens,
                               int cached_tokens);
// The message output item (status "in_progress" with no content while streaming, "completed" with the text).
nlohmann::ordered_json response_message_item(const std::string& msg_id, const std::string* text);

}  // namespace tandem::server
