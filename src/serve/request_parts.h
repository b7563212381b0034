// The parts of parse_request (serve/openai.h), one per concern, and the field readers they share. Internal to
// src/serve: the Service and the tests call parse_request.
//
// Contract of every part: `body` is a JSON object (parse_request checks that first); the part reads only the fields
// it names, writes only the ParsedRequest / JobRequest members it names, and throws BadRequest naming the field.
// parse_request calls the parts in one fixed order, which is part of the behaviour: when a request has several bad
// fields, the first part to see one reports it. Some parts read what an earlier one wrote:
//   parse_chat (messages, tools, tool_choice) -> parse_output_format (no server grammar under a required call)
//                                              -> parse_chat_continuation (the last messages)
//   parse_logprobs (logprobs, top_logprobs)    -> parse_native_fields (n_probs, n_top_logprobs)
// Where the parts live: openai.cpp (the field readers, prompts, parse_request itself), request_chat.cpp,
// request_grammar.cpp (structured output and the tool-call grammar), request_sampling.cpp, request_answer.cpp
// (length, count, streaming, logprobs, stop strings, llama-server's native fields) and request_speculative.cpp.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/openai.h"

namespace tandem::server::request {

using json = nlohmann::ordered_json;

// Field readers: `def` when `key` is absent or null; otherwise the value, or BadRequest when it has the wrong type
// or lies outside [lo, hi]. integer() also takes a float with an integral value (3.0), as JSON writers send them.
double number(const json& body, const char* key, double def, double lo, double hi);
int64_t integer(const json& body, const char* key, int64_t def, int64_t lo, int64_t hi);
bool boolean(const json& body, const char* key, bool def);

// Chat requests (request_chat.cpp).
// `messages` (required, non-empty) -> r.chat_messages; `reasoning_format`; `tools`, `tool_choice`,
// `parallel_tool_calls`; `chat_template_kwargs` -> r.template_kwargs.
// parallel_default: parallel_tool_calls when the request leaves it out (ServerLimits::parallel_tool_calls)
void parse_chat(const json& body, bool parallel_default, ParsedRequest& r);
// `continue_final_message` and `add_generation_prompt` (these two exclude each other in every request); chat
// (chat = true): r.add_generation_prompt and r.prefill_assistant, from r.chat_messages.
void parse_chat_continuation(const json& body, bool chat, ParsedRequest& r);

// Structured output (request_grammar.cpp): `grammar` (GBNF), else a JSON schema (`json_schema`, response_format
// json_schema, or json_object with a `schema`), else response_format json_object, else the server's grammar
// unless r.tool_choice requires a call -> r.grammar; `grammar_lazy`, `grammar_triggers` -> r.lazy.
void parse_output_format(const json& body, const ServerLimits& lim, ParsedRequest& r);

// Sampling (request_sampling.cpp): the server's defaults overridden by temperature, top_p, top_k, min_p,
// typical_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, seed (absent, null or -1: the
// server's, else a fresh one) and samplers (the order).
SamplerParams parse_sampling(const json& body, const ServerLimits& lim);
// `logit_bias` (OpenAI's {"id": bias} or llama-server's [[id or text, bias], ...]): when given, it replaces
// sp.logit_bias. Refuses ids outside the vocabulary and a bias that bans every token.
void parse_logit_bias(const json& body, const ServerLimits& lim, SamplerParams& sp);

// The answer's length and shape (request_answer.cpp).
// max_tokens / max_completion_tokens / n_predict (the last given wins) -> job.max_tokens, r.max_tokens_given;
// ignore_eos; n; stream and stream_options.include_usage.
void parse_answer_shape(const json& body, const ServerLimits& lim, ParsedRequest& r);
// `logprobs` and `top_logprobs` (chat: a boolean and a count; completions: a boolean or the count itself).
void parse_logprobs(const json& body, bool chat, ParsedRequest& r);
// `stop`: a string or up to 16 non-empty strings.
std::vector<std::string> parse_stops(const json& body);
// truncate_prompt_tokens, and llama-server's native fields (accepted everywhere): n_probs (turns logprobs on),
// return_tokens, verbose, response_fields, timings_per_token. Sets job.n_top_logprobs from r's logprobs fields.
void parse_native_fields(const json& body, ParsedRequest& r);

// Speculative decoding (request_speculative.cpp): job.spec from the server's defaults, llama-server's flat
// "speculative.n_max" / "n_min" / "p_min" keys, `n_keep`, and our nested `speculative` object (checked as the
// command line's flags are); also `id_slot` -> job.id_slot.
void parse_spec_overrides(const json& body, const ServerLimits& lim, JobRequest& j);

}  // namespace tandem::server::request
