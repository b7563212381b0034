// OpenAI-compatible request parsing and response building (no HTTP, no model access): pure functions that the
// Service (service.cpp) calls, so they can be tested on their own.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/tool_calls.h"
#include "tandem/chat.h"

namespace tandem::grammar {
struct Grammar;
struct TriggerSpec;
}  // namespace tandem::grammar

namespace tandem::server {

// A request problem: becomes HTTP 400 with an OpenAI-style error object.
struct BadRequest : std::runtime_error {
    explicit BadRequest(const std::string& m) : std::runtime_error(m) {}
};

nlohmann::ordered_json error_body(const std::string& message, const std::string& type, int code);

// The message of a JSON library exception without its "[json.exception.type_error.302] " prefix: what a client
// reads in a 400 ("type must be string, but is number").
std::string json_error_text(const std::exception& e);

// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(const std::string& s);

// Parses a request body. Refuses nesting deeper than 64 levels before parsing (a body of a million '[' would
// otherwise cost a deep recursion) and invalid UTF-8 (the JSON parser rejects it). Throws BadRequest.
nlohmann::ordered_json parse_body(const std::string& body);

// One prompt of a completions request: pieces of text and runs of token ids, in order (llama-server accepts
// [12, "text", 34]). The caller tokenizes the text pieces (BOS before the first piece only).
struct PromptInput {
    struct Part {
        std::string text;
        std::vector<int32_t> ids;
    };
    std::vector<Part> parts;
};

// `prompt` of a completions request: a string, token ids, a mix, or an array of those (up to 16 prompts).
std::vector<PromptInput> parse_prompts(const nlohmann::ordered_json& prompt, int n_vocab);
// 400 for fields that would change the output and are not implemented (the legacy 'functions', 'lora', and a
// response_format other than text, json_object or json_schema): never accepted silently.
void refuse_unimplemented(const nlohmann::ordered_json& body);

// An embeddings request: /v1/embeddings (OpenAI: "input", "encoding_format") or llama-server's /embedding(s)
// ("content" or "input", "embd_normalize").
struct EmbeddingRequest {
    std::vector<PromptInput> inputs;
    int normalize = 2;  // llama.cpp's embd_normalize (see tandem/embedding.h)
    bool base64 = false;  // encoding_format "base64": little-endian float32 bytes
};
EmbeddingRequest parse_embedding_request(const nlohmann::ordered_json& body, int n_vocab);

// Standard base64 (RFC 4648, padded) of the little-endian float32 bytes of v: OpenAI's encoding_format "base64".
std::string base64_floats(const std::vector<float>& v);

// POST /slots/{id}?action=save|restore|erase, body {"filename": ...} for save and restore. `id_text` is the path
// after "/slots/", `query` the undecoded query. The file is `save_dir`/filename; the name must be a plain file
// name (no directories, no "..", no leading dot, no control characters). Throws BadRequest; a server without
// --slot-save-path (save_dir empty) refuses save and restore.
struct SlotActionRequest {
    int id = 0;
    JobRequest::SlotAction action = JobRequest::SlotAction::NONE;
    std::string filename, path;
};
SlotActionRequest parse_slot_action(const std::string& id_text, const std::string& query, const std::string& body,
                                    const std::string& save_dir);

struct ParsedRequest {
    JobRequest job;  // prompt filled by the caller from `messages` / `prompts`
    // chat: the messages as the template sees them (role, content as text, tool_calls with object arguments,
    // and the other fields as sent)
    nlohmann::ordered_json chat_messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
    bool add_generation_prompt = true;  // chat: the request's add_generation_prompt
    // chat: the last message is the assistant's and is continued (llama-server's assistant prefill, vLLM's
    // continue_final_message): the template renders the others with the generation prompt, then its text follows
    bool prefill_assistant = false;
    std::string reasoning_format;  // chat: the request's reasoning_format ("" = the server's)
    std::shared_ptr<const grammar::Grammar> grammar;  // structured output: `grammar`, JSON schema/mode, or the server's
    // the grammar is lazy: it applies from one of these triggers on (llama-server's grammar_lazy and
    // grammar_triggers, or tool_choice "auto" with the template's call markers); null: from the first token
    std::shared_ptr<const grammar::TriggerSpec> lazy;
    // chat: tools (OpenAI tool objects, validated; null when none) and how they may be used. tool_choice "none"
    // keeps the tools from the template and the answer is not parsed for calls.
    nlohmann::ordered_json tools;
    enum class ToolChoice { AUTO, NONE, REQUIRED, NAMED } tool_choice = ToolChoice::AUTO;
    std::string tool_name;  // NAMED: the function
    bool parallel_tool_calls = true;
    bool uses_tools() const { return tools.is_array() && !tools.empty() && tool_choice != ToolChoice::NONE; }
    std::vector<PromptInput> prompts;  // completions: one or more
    int n_probs = 0;  // llama-server's n_probs (native /completion)
    bool return_tokens = false, timings_per_token = false;
    bool token_origins = false;  // tandem: each token's origin in the answer (Dialect::origins_of)
    bool verbose = false;  // llama-server's `verbose`: the answer carries __verbose (the rendered prompt)
    std::vector<std::string> response_fields;  // native: only these ("a/b" paths) in the final object
    bool stream = false, include_usage = false;
    bool logprobs = false;
    int top_logprobs = 0;
    int n = 1;
    int truncate_prompt_tokens = -1;  // keep only the last K prompt tokens (vLLM's name); -1: refuse long prompts
    bool max_tokens_given = false;
};

struct ServerLimits {
    int n_vocab = 0;
    int max_n = 8;
    bool has_draft = false;
    bool has_mtp = false;  // the model has a multi-token-prediction block (speculative type mtp)
    bool has_eagle3 = false;  // -md is an EAGLE-3 head (speculative type eagle3)
    // -md: a request's "draft" with a drafting head takes the head's type, as generate's --spec-type draft
    // (pick_draft_head: an EAGLE-3 head drafts as eagle3, a Gemma 4 assistant as mtp)
    std::shared_ptr<const Model> draft_model;
    // parallel_tool_calls when a request leaves it out: as llama-server, whether the chat template renders an
    // assistant message's second tool call (ChatFormatter::renders_parallel_tool_calls). OpenAI's default is on;
    // a drop-in for llama-server follows the template, so that a template of one call per turn does not get a
    // call list that a small model extends until max_tokens.
    bool parallel_tool_calls = true;
    SpecParams spec_defaults;
    // Defaults a request starts from (llama-server: the sampling flags on the command line). seed: UINT64_MAX
    // = a fresh seed per request. n_predict: the default max_tokens (-1: until the end or the context is full).
    SamplerParams sampling = server_sampling_defaults();  // tandem/server.h
    int n_predict = -1;
    bool ignore_eos = false;
    std::function<std::vector<int32_t>(const std::string&)> tokenize;  // logit_bias keys given as text
    std::shared_ptr<const grammar::Grammar> default_grammar;  // --grammar / --grammar-file: requests without their own
};

// tool_choice "required" or a named function: the request's grammar becomes the call grammar of `format` (the
// chat template's, serve/tool_calls.h). A request that also asks for a grammar or a JSON schema is refused, as is
// a format without calls (the template shows no tool-call syntax). Throws BadRequest.
// tool_choice "auto" (llama-server's lazy tool grammar): when the request has no grammar of its own, the call
// grammar becomes lazy, triggered by the format's call markers (tool_call_triggers), so a call the model starts
// is a valid one and text without a call is left alone. Tools whose schemas the JSON-schema converter refuses
// are not constrained in "auto" (the answer is still parsed for calls; "required" answers 400).
void apply_tool_choice(ParsedRequest& r, ToolFormat format);

// Validates and converts a chat (chat = true) or completions request body, one part per concern in a fixed order
// (serve/request_parts.h). Throws BadRequest.
ParsedRequest parse_request(const nlohmann::ordered_json& body, bool chat, const ServerLimits& lim);

}  // namespace tandem::server
