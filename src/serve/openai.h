// OpenAI-compatible request parsing and response building (no HTTP, no model access): pure functions that the
// HTTP layer calls, so they can be tested on their own.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "tandem/chat.h"

namespace tandem::server {

// A request problem: becomes HTTP 400 with an OpenAI-style error object.
struct BadRequest : std::runtime_error {
    explicit BadRequest(const std::string& m) : std::runtime_error(m) {}
};

nlohmann::json error_body(const std::string& message, const std::string& type, int code);

// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(const std::string& s);

// Parses a request body. Refuses nesting deeper than 64 levels before parsing (a body of a million '[' would
// otherwise cost a deep recursion) and invalid UTF-8 (the JSON parser rejects it). Throws BadRequest.
nlohmann::json parse_body(const std::string& body);

struct ParsedRequest {
    JobRequest job;                     // prompt filled by the caller from `messages` / `prompt`
    std::vector<ChatMessage> messages;  // chat
    std::string prompt_text;            // completions (text prompt)
    std::vector<int32_t> prompt_ids;    // completions (token prompt)
    bool prompt_is_ids = false;
    bool stream = false, include_usage = false;
    bool logprobs = false;
    int top_logprobs = 0;
    int n = 1;
    std::vector<std::string> stop;
    int truncate_prompt_tokens = -1;    // keep only the last K prompt tokens (vLLM's name); -1: refuse long prompts
    bool max_tokens_given = false;
};

struct ServerLimits {
    int n_vocab = 0;
    int max_n = 8;
    bool has_draft = false;
    SpecParams spec_defaults;
};

// Validates and converts a chat (chat = true) or completions request body. Throws BadRequest.
ParsedRequest parse_request(const nlohmann::json& body, bool chat, const ServerLimits& lim);

// Incremental text of a generation: UTF-8-safe detokenization and stop strings (never emits any part of a stop
// string; stops at the first complete one).
class TextPipeline {
public:
    TextPipeline(const Tokenizer& tok, std::vector<std::string> stop) : streamer_(tok), stop_(std::move(stop)) {}
    // Text that can be emitted after these tokens. Sets stopped() when a stop string completed.
    std::string push(const std::vector<int32_t>& toks);
    std::string finish();  // what is held back, at the end (unless stopped)
    bool stopped() const { return stopped_; }

private:
    TextStreamer streamer_;
    std::vector<std::string> stop_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace tandem::server
