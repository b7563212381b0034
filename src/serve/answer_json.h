// The JSON pieces the answer dialects share (src/serve/dialect.h): ids, timings and usage of finished jobs,
// log-probabilities in the OpenAI and llama-server shapes, finish reasons, llama-server's generation_settings.
// Pure functions of a job's results and the tokenizer; no HTTP.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/engine.h"
#include "serve/openai.h"
#include "serve/tool_calls.h"

namespace tandem {
class Tokenizer;
}  // namespace tandem

namespace tandem::server {

using json = nlohmann::ordered_json;

// JSON text; strings that quote the (possibly invalid UTF-8) input get U+FFFD instead of a throw.
std::string dump(const json& j);
// A fresh id with this prefix ("chatcmpl-", "call_", ...): time and a process-wide counter, in hex.
std::string random_id(const char* prefix);
int64_t unix_time();
// The error type name of an HTTP status in OpenAI's error objects.
const char* error_type(int status);

// OpenAI's finish_reason ("stop" or "length") and llama-server's stop_type ("word", "eos", "limit", "none") of a
// finished job.
std::string finish_reason(const Job& j);
std::string stop_type(const Job& j);

// llama-server's `timings` of a finished job (prompt, generation, speculation, inter-token latency; with a list of
// proposers, flat numbers per proposer), and of a running one (timings_per_token).
json timings_json(const Job& j);
// llama-server's prompt_progress object: total, cache, processed, time_ms
json prompt_progress_json(const PromptProgress& p);
json live_timings_json(const JobProgress& p);
// An answer's `timings` over its n choices (n > 1): prompt and cache of the first (the same prompt), predicted_n the
// choices' tokens together (usage.completion_tokens), predicted_ms the longest choice's (they run side by side, so
// predicted_per_second is the answer's rate), speculation counters summed, the inter-token latency of the choice
// with the longest gap. A streamed choice's last chunk carries that choice's own timings.
json timings_json(const std::vector<std::shared_ptr<Job>>& jobs);
// OpenAI's usage of a whole answer: every prompt, every choice.
json usage_json(const std::vector<std::shared_ptr<Job>>& jobs, int prompt_tokens);

// Log-probabilities: a chat answer's logprobs.content entries, a completion's logprobs object (tokens,
// token_logprobs, top_logprobs, text_offset), llama-server's completion_probabilities.
json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);
json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);
json native_probs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);

// An OpenAI tool call of a blocking answer (with a fresh call_ id).
json tool_call_json(const ToolCall& call);

// llama-server's generation_settings of a request (also /props' defaults). logit_bias is a list of {token, bias}
// with -inf as null; ignore_eos shows as the end-of-generation tokens banned, as llama-server implements it.
json generation_settings(const Tokenizer& tok, const JobRequest& r, const ParsedRequest& pr);

}  // namespace tandem::server
