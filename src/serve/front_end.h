// The server's per-model request front end: what one model's tokenizer, chat template and tool-call format make of
// a request body before it becomes Jobs for the Engine. Built once when the model is loaded; immutable and shared
// by every request thread. No HTTP here: failures are exceptions that the routes map to statuses
// (src/serve/service.cpp), so every rule is unit-tested without a socket (tests/test_serve.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_formatter.h"
#include "serve/openai.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"
#include "tandem/output_constraint.h"

namespace tandem {
class Model;
class Tokenizer;
}  // namespace tandem

namespace tandem::server {

// The API a body arrives through (each has its own shape; all become one ParsedRequest).
enum class Api { Chat, Oai, Native, Anthropic, Responses };  // ..., OpenAI's /v1/responses

// How the chat template is chosen (llama-server's flags): --chat-template NAME or inline text,
// --chat-template-file, --jinja, --chat-template-kwargs.
struct FrontEndOptions {
    std::string chat_template;  // a built-in renderer's name, or (not a known name) a template's text
    std::string chat_template_text;  // --chat-template-file
    bool jinja = true;
    nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

// A prompt too long for the context (and no truncation asked): llama-server's exceed_context_size_error, with the
// numbers a client needs to shorten the request.
struct ContextExceeded : BadRequest {
    ContextExceeded(size_t n_prompt, int n_ctx);
    size_t n_prompt;
    int n_ctx;
};
// The request asks for what this model cannot do (an infill prompt for a model without FIM tokens): HTTP 501.
struct NotImplemented : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class FrontEnd {
public:
    FrontEnd(const Model& model, const FrontEndOptions& opt);
    ~FrontEnd();

    struct Prompt {
        std::vector<int32_t> ids;
        bool truncated = false;  // truncate_prompt_tokens cut its start
        bool opens_thinking = false;  // chat: the template opened a <think> block (the answer starts in it)
    };
    struct Prepared {
        ParsedRequest request;
        std::vector<Prompt> prompts;  // one per prompt of the request (completions may have several)
    };
    // Parses a body of `api` (converted to the chat shape first for Anthropic and Responses; infill: llama-server's
    // /infill fields), validates it against `limits`, applies the template or tokenizes, and fits every prompt in
    // n_ctx (truncate_prompt_tokens cuts the start; otherwise ContextExceeded). Throws BadRequest (400),
    // ContextExceeded (400) or NotImplemented (501).
    Prepared prepare(const std::string& body, Api api, bool infill, const ServerLimits& limits, int n_ctx) const;

    // The jobs of a prepared request, in choice order (prompt-major, then the n choices of each prompt: OpenAI's
    // index order): chat answers show the template's control tokens, a grammar becomes the constraint, max_tokens
    // is clamped to what the context leaves (unless it shifts), and choice 0 of prompt 0 keeps the request's seed
    // while the others get independent derived streams (derive_seed).
    std::vector<JobRequest> job_requests(const Prepared& p, Api api, int n_ctx) const;
    // The grammar side of a request over this model's vocabulary (its trie is built on the first request that
    // needs it, once). lazy: its triggers (a thinking-aware one gets the model's own tags); a chat prompt that
    // opened a <think> block starts the scan inside it.
    std::shared_ptr<const OutputConstraint> constrain(std::shared_ptr<const grammar::Grammar> g,
                                                      const grammar::TriggerSpec* lazy = nullptr,
                                                      bool opens_thinking = false) const;

    // A completions prompt's token ids. special: the vocabulary's BOS (and EOS) around a leading text part; false:
    // the parts alone (infill).
    std::vector<int32_t> tokenize_prompt(const PromptInput& in, bool special = true) const;
    // The chat template applied to a chat request (a template's raise_exception becomes a BadRequest naming it).
    // With thinking off (enable_thinking false, from the request or the server's kwargs), an opened block is closed.
    std::string chat_prompt(const ParsedRequest& pr) const;
    // The tool-call format of a chat request's answer: the template's, or GENERIC (tools described in the system
    // message) for a template that shows no tools.
    ToolFormat tool_format_of(const ParsedRequest& pr) const;

    const Tokenizer& tokenizer() const { return *tok_; }
    const ChatFormatter& chat() const { return *chat_; }
    // Whether the chat template renders parallel tool calls (asked once, at construction)
    bool parallel_tool_calls() const { return parallel_calls_; }
    ToolFormat tool_format() const { return tool_format_; }
    const ThinkTags& think_tags() const { return think_tags_; }
    // The template's tool-call and thinking markers that are control tokens: shown in chat answers (and allowed by
    // tool grammars), as llama.cpp's preserved tokens.
    const std::vector<int32_t>& shown_special() const { return shown_special_; }

private:
    FrontEndOptions opt_;
    std::unique_ptr<Tokenizer> tok_;
    std::unique_ptr<ChatFormatter> chat_;
    bool parallel_calls_ = true;
    ToolFormat tool_format_ = ToolFormat::NONE;
    ThinkTags think_tags_;
    std::vector<int32_t> shown_special_;
    mutable std::once_flag vocab_once_;
    mutable std::unique_ptr<ConstraintVocab> constraint_vocab_;
};

}  // namespace tandem::server
