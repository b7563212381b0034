// The per-model request front end (front_end.h).
#include "serve/front_end.h"

#include "tandem/chat.h"
#include "grammar/grammar.h"
#include "grammar/trigger.h"
#include "serve/anthropic.h"
#include "serve/infill.h"
#include "serve/responses.h"
#include "speculative/constraint.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

ContextExceeded::ContextExceeded(size_t n, int ctx)
    : BadRequest(strprintf("the request exceeds the available context size: the prompt is %zu tokens, the context is "
                           "%d (ask for truncation with 'truncate_prompt_tokens')",
                           n, ctx)),
      n_prompt(n),
      n_ctx(ctx) {}

FrontEnd::FrontEnd(const Model& model, const FrontEndOptions& opt)
    : opt_(opt), tok_(Tokenizer::from_gguf(model.gguf())) {
    // The chat template (src/chat/chat_formatter.h): the model's Jinja, executed, unless the flags ask otherwise.
    ChatFormatterOptions co;
    co.model_template = model.gguf().get_str("tokenizer.chat_template").value_or("");
    co.template_text = opt.chat_template_text;
    co.jinja = opt.jinja;
    if (!opt.chat_template.empty()) {
        if (chat_template_from_name(opt.chat_template)) co.template_name = opt.chat_template;
        else co.template_text = opt.chat_template;  // llama-server: a value that is not a known name is a template
    }
    co.bos_token = tok_->bos() >= 0 ? tok_->token_to_piece(tok_->bos(), true) : "";
    co.eos_token = tok_->eos() >= 0 ? tok_->token_to_piece(tok_->eos(), true) : "";
    co.kwargs = opt.chat_template_kwargs;
    chat_ = std::make_unique<ChatFormatter>(co);
    parallel_calls_ = chat_->renders_parallel_tool_calls();
    // Tool calls (src/serve/tool_calls.h): the template's format; its markers that are control tokens are shown in
    // answers (and may be forced by a tool grammar), as llama.cpp's preserved tokens.
    tool_format_ = chat_->is_jinja() ? tool_format_for_template(chat_->source()) : ToolFormat::NONE;
    think_tags_ = chat_->is_jinja() ? think_tags_for_template(chat_->source()) : ThinkTags{};
    std::vector<std::string> shown = tool_call_markers(tool_format_);
    shown.push_back(think_tags_.open);
    shown.push_back(think_tags_.close);
    for (const auto& m : shown) {
        const auto ids = tok_->encode(m, false, true);
        if (ids.size() == 1 && tok_->token_attr(ids[0]) == TokenAttr::CONTROL) shown_special_.push_back(ids[0]);
    }
}

FrontEnd::~FrontEnd() = default;

std::vector<int32_t> FrontEnd::tokenize_prompt(const PromptInput& in, bool special) const {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < in.parts.size(); i++) {
        const auto& part = in.parts[i];
        if (!part.text.empty() || part.ids.empty()) {
            auto t = tok_->encode(part.text, special && i == 0, true);  // BOS before a leading text part only
            ids.insert(ids.end(), t.begin(), t.end());
        }
        ids.insert(ids.end(), part.ids.begin(), part.ids.end());
    }
    return ids;
}

ToolFormat FrontEnd::tool_format_of(const ParsedRequest& pr) const {
    return tool_format_ == ToolFormat::NONE && pr.uses_tools() ? ToolFormat::GENERIC : tool_format_;
}

std::string FrontEnd::chat_prompt(const ParsedRequest& pr) const {
    try {
        json messages = pr.chat_messages;
        std::string prefill;  // the assistant's text the answer continues
        if (pr.prefill_assistant) {
            prefill = messages.back()["content"].get<std::string>();
            messages.erase(messages.size() - 1);
        }
        std::string text;
        if (tool_format_ == ToolFormat::NONE && pr.uses_tools())
            text = chat_->apply(messages_with_tool_prompt(messages, pr.tools), json(), pr.add_generation_prompt,
                                pr.template_kwargs, tok_->add_bos());
        else
            text = chat_->apply(messages, pr.uses_tools() ? pr.tools : json(), pr.add_generation_prompt,
                                pr.template_kwargs, tok_->add_bos());
        const json& kw =
            pr.template_kwargs.contains("enable_thinking") ? pr.template_kwargs : opt_.chat_template_kwargs;
        if (kw.contains("enable_thinking") && kw["enable_thinking"] == false)
            text = close_thinking(text, chat_->source());
        return text + prefill;
    } catch (const Error& e) {
        throw BadRequest(e.what());
    }
}

namespace {

// llama-server's /infill fields: input_prefix, input_suffix, input_extra ([{filename, text}]); the prompt is optional.
InfillInput infill_fields(json& body) {
    if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
    InfillInput fim;
    auto str = [&](const char* k) {
        auto it = body.find(k);
        if (it == body.end() || it->is_null()) return std::string();
        if (!it->is_string()) throw BadRequest(std::string("'") + k + "' must be a string");
        return it->get<std::string>();
    };
    fim.prefix = str("input_prefix");
    fim.suffix = str("input_suffix");
    if (auto it = body.find("input_extra"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw BadRequest("'input_extra' must be an array of {\"filename\", \"text\"}");
        for (const auto& c : *it) {
            if (!c.is_object() || (c.contains("text") && !c["text"].is_string()) ||
                (c.contains("filename") && !c["filename"].is_string()))
                throw BadRequest("'input_extra' must be an array of {\"filename\": string, \"text\": string}");
            fim.extra.push_back({c.value("filename", std::string("tmp")), c.value("text", std::string())});
        }
    }
    if (!body.contains("prompt") || body["prompt"].is_null()) body["prompt"] = "";
    return fim;
}

}  // namespace

FrontEnd::Prepared FrontEnd::prepare(const std::string& body_text, Api api, bool infill, const ServerLimits& limits,
                                     int n_ctx) const {
    Prepared out;
    try {
        json body = parse_body(body_text);
        InfillInput fim;
        if (infill) fim = infill_fields(body);
        if (api == Api::Anthropic) body = anthropic_to_openai(body, false);
        if (api == Api::Responses) body = responses_to_chat(body);
        const bool chat = api == Api::Chat || api == Api::Anthropic || api == Api::Responses;
        out.request = parse_request(body, chat, limits);
        ParsedRequest& pr = out.request;
        if (chat && pr.uses_tools()) apply_tool_choice(pr, tool_format_of(pr));
        if (body.is_object() && body.value("post_sampling_probs", false))
            throw BadRequest("'post_sampling_probs' is not supported by this server yet");
        if (infill) {
            if (pr.prompts.size() != 1) throw BadRequest("/infill takes one prompt");
            fim.prompt = tokenize_prompt(pr.prompts[0], false);
            const int n_batch = std::min(2048, n_ctx);  // llama-server's default batch
            const int n_predict = pr.job.max_tokens == INT32_MAX ? -1 : pr.job.max_tokens;
            try {
                out.prompts.push_back({format_infill(*tok_, fim, n_batch, n_ctx, n_predict)});
            } catch (const Error& e) {
                throw NotImplemented(e.what());
            }
        } else if (chat) {
            const std::string text = chat_prompt(pr);
            out.prompts.push_back({tok_->encode(text, true, true), false, prompt_opens_thinking(text, think_tags_)});
        } else {
            for (const auto& in : pr.prompts) out.prompts.push_back({tokenize_prompt(in)});
        }
    } catch (const json::exception& e) {
        throw BadRequest(json_error_text(e));
    }
    for (auto& p : out.prompts) {
        if (p.ids.empty()) throw BadRequest("the prompt is empty");
        if (int(p.ids.size()) < n_ctx) continue;
        const int keep = out.request.truncate_prompt_tokens;
        if (keep > 0 && keep < n_ctx) {
            p.ids.erase(p.ids.begin(), p.ids.end() - keep);
            p.truncated = true;
            continue;
        }
        throw ContextExceeded(p.ids.size(), n_ctx);
    }
    return out;
}

std::shared_ptr<const OutputConstraint> FrontEnd::constrain(std::shared_ptr<const grammar::Grammar> g,
                                                            const grammar::TriggerSpec* lazy,
                                                            bool opens_thinking) const {
    std::call_once(vocab_once_,
                   [this] { constraint_vocab_ = std::make_unique<ConstraintVocab>(*tok_, shown_special_); });
    std::shared_ptr<grammar::TriggerSpec> spec;
    if (lazy) {
        spec = std::make_shared<grammar::TriggerSpec>(*lazy);
        if (!spec->think_close.empty()) {  // the model's own thinking tags
            spec->think_open = think_tags_.open;
            spec->think_close = think_tags_.close;
        }
        spec->starts_thinking = opens_thinking && !spec->think_close.empty();
    }
    auto c = constraint_vocab_->constrain(std::move(g), std::move(spec));
    // The first mask, here on the request's thread: a grammar past the matcher's bounds (grammar/grammar.h), or
    // one that allows no token at all, is a 400 before it reaches the engine. (A lazy grammar starts from its
    // trigger's text, which may be a token the mask does not hold: only its bounds are checked.)
    try {
        ConstraintState start(*c, true);
        grammar::MaskMemo memo;
        std::vector<uint8_t> mask;
        start.allowed(*c, memo, mask, tok_->n_vocab());
    } catch (const grammar::GrammarLimit& e) {
        throw BadRequest(e.what());
    }
    return c;
}

std::vector<JobRequest> FrontEnd::job_requests(const Prepared& p, Api api, int n_ctx) const {
    const ParsedRequest& pr = p.request;
    std::vector<JobRequest> out;
    for (size_t pi = 0; pi < p.prompts.size(); pi++) {
        for (int i = 0; i < pr.n; i++) {
            JobRequest jr = pr.job;
            jr.prompt = p.prompts[pi].ids;
            if (api == Api::Chat || api == Api::Anthropic || api == Api::Responses) jr.shown_special = shown_special_;
            if (pr.grammar) jr.constraint = constrain(pr.grammar, pr.lazy.get(), p.prompts[pi].opens_thinking);
            if (!jr.spec.context_shift)  // clamped to the context, unless it shifts
                jr.max_tokens = std::min(jr.max_tokens, n_ctx - int(jr.prompt.size()));
            jr.sampling.seed = derive_seed(pr.job.sampling.seed, uint64_t(pi * size_t(pr.n) + size_t(i)));
            out.push_back(std::move(jr));
        }
    }
    return out;
}

}  // namespace tandem::server
