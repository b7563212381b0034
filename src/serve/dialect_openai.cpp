// OpenAI's chat completions (/v1/chat/completions) and completions (/v1/completions) answers: the
// chat.completion / text_completion objects and their chunks (dialect.h). Chat answers are split by the chat
// answer parser into reasoning_content, content and tool_calls; a stream sends a call's name first, then its
// arguments as they come, as OpenAI does.
#include "serve/answer_json.h"
#include "serve/dialect.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

namespace {

class OpenAiDialect : public Dialect {
public:
    OpenAiDialect(const AnswerContext& ctx, const Generation& g) : Dialect(ctx, g), chat_(g.api == Api::Chat) {}

    json answer(const std::vector<JobOutput>& outs) override {
        const Tokenizer& tok = ctx_.fe.tokenizer();
        const ParsedRequest& pr = g_.request;
        json choices = json::array();
        for (size_t c = 0; c < g_.jobs.size(); c++) {
            const JobOutput& t = outs[c];
            json choice = {{"index", c}, {"finish_reason", finish_reason(*g_.jobs[c])}};
            if (chat_) {
                ChatDelta d = parse_whole(*answer_parser(c), t.text);
                json& msg = choice["message"] = {{"role", "assistant"}, {"content", d.content}};
                if (!d.reasoning.empty()) msg["reasoning_content"] = d.reasoning;
                if (!d.calls.empty()) {
                    if (d.content.empty()) msg["content"] = nullptr;
                    msg["tool_calls"] = json::array();
                    for (const ToolCall& call : d.calls) msg["tool_calls"].push_back(tool_call_json(call));
                    if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
                }
                choice["logprobs"] = pr.logprobs ? json{{"content", chat_logprobs(tok, t.lps)}} : json(nullptr);
            } else {
                choice["text"] = t.text;
                choice["logprobs"] = pr.logprobs ? completion_logprobs(tok, t.lps) : json(nullptr);
            }
            if (pr.token_origins) choice["token_origins"] = origins_of(t);
            choices.push_back(choice);
        }
        json res = {{"id", g_.id},
                    {"object", chat_ ? "chat.completion" : "text_completion"},
                    {"created", g_.created},
                    {"model", ctx_.model_id},
                    {"system_fingerprint", "tandem"},
                    {"choices", choices},
                    {"usage", usage_json(g_.jobs, g_.prompt_tokens())},
                    {"timings", timings_json(g_.jobs)}};
        if (ctx_.verbose || pr.verbose)
            res["__verbose"] = {{"prompt", tok.decode(g_.prompts[0].ids, false, true)}, {"content", outs[0].text}};
        return res;
    }

    void begin_choice(size_t c, SseEvents& ev) override {
        n_calls_ = 0;
        if (!chat_) return;
        parser_ = answer_parser(c);
        parser_->stream_arguments(true);  // OpenAI: a call's name first, then its arguments as they come
        ev.push_back({"", dump(chunk(c, {{"role", "assistant"}, {"content", nullptr}}, nullptr, nullptr))});
    }

    void piece(size_t c, const std::string& text, Held& held, SseEvents& ev) override {
        json delta;
        if (chat_) {  // thinking text goes to reasoning_content, calls to tool_calls
            ChatDelta d = parser_->push(text);
            if (d.empty()) return;  // held back (tokens and all) for now
            delta = chat_delta(d);
        }
        json o = chunk(c, chat_ ? delta : json(text), nullptr, logprobs_of(held));
        if (g_.request.timings_per_token) o["timings"] = live_timings_json(g_.jobs[c]->progress());
        if (g_.request.token_origins) o["token_origins"] = origins_of(held);
        held.clear();
        ev.push_back({"", dump(o)});
    }

    void progress(size_t c, const PromptProgress& p, SseEvents& ev) override {
        json o = chunk(c, chat_ ? json{{"role", "assistant"}, {"content", nullptr}} : json(""), nullptr, nullptr);
        o["prompt_progress"] = prompt_progress_json(p);
        ev.push_back({"", dump(o)});
    }

    bool end_choice(size_t c, Held& held, SseEvents& ev) override {
        const Job& job = *g_.jobs[c];
        json tail = chat_ ? json::object() : json("");
        std::string finish = finish_reason(job);
        if (chat_) {  // what the answer parser still held: the end of the text, the tool calls
            ChatDelta d = parser_->finish();
            if (!d.empty()) tail = chat_delta(d);
            // "length" stays: a call the limit cut off went out as far as it came (its arguments unfinished, as in
            // OpenAI's streams), and "length", not "tool_calls", is what tells the client so
            if (n_calls_ > 0 && finish == "stop") finish = "tool_calls";
        }
        json last = chunk(c, tail, finish, logprobs_of(held));
        if (g_.request.token_origins) last["token_origins"] = origins_of(held);
        last["timings"] = timings_json(job);
        ev.push_back({"", dump(last)});
        return false;
    }

    void fail(const Job& job, SseEvents& ev) override {
        ev.push_back({"", dump(error_body(job.error, error_type(job.error_status), job.error_status))});
    }

    void close(SseEvents& ev) override {
        if (g_.request.include_usage) {
            json u = {{"id", g_.id},
                      {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                      {"created", g_.created},
                      {"model", ctx_.model_id},
                      {"choices", json::array()},
                      {"usage", usage_json(g_.jobs, g_.prompt_tokens())},
                      {"timings", timings_json(g_.jobs)}};
            ev.push_back({"", dump(u)});
        }
        ev.push_back({"", "[DONE]"});
    }

private:
    json chunk(size_t index, const json& delta_or_text, const json& finish, const json& logprobs) const {
        json choice = {{"index", index}, {"finish_reason", finish}};
        if (chat_) choice["delta"] = delta_or_text;
        else choice["text"] = delta_or_text;
        if (!logprobs.is_null()) choice["logprobs"] = logprobs;
        return json{{"id", g_.id},
                    {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                    {"created", g_.created},
                    {"model", ctx_.model_id},
                    {"system_fingerprint", "tandem"},
                    {"choices", json::array({choice})}};
    }

    json logprobs_of(const Held& held) const {
        if (!g_.request.logprobs || held.lps.empty()) return nullptr;
        const Tokenizer& tok = ctx_.fe.tokenizer();
        return chat_ ? json{{"content", chat_logprobs(tok, held.lps)}} : completion_logprobs(tok, held.lps);
    }

    // A chat delta: reasoning_content, content and tool_calls, each only when there is some.
    json chat_delta(const ChatDelta& d) {
        json delta = json::object();
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.content.empty() || (d.reasoning.empty() && d.parts.empty())) delta["content"] = d.content;
        if (!d.parts.empty()) {
            delta["tool_calls"] = json::array();
            for (const auto& part : d.parts) {
                json j = {{"index", part.index}};
                if (!part.name.empty()) {
                    j["id"] = random_id("call_");
                    j["type"] = "function";
                    j["function"] = {{"name", part.name}, {"arguments", part.arguments}};
                } else {
                    j["function"] = {{"arguments", part.arguments}};
                }
                delta["tool_calls"].push_back(j);
                n_calls_ = std::max(n_calls_, part.index + 1);
            }
        }
        return delta;
    }

    const bool chat_;
    std::unique_ptr<ChatAnswerParser> parser_;  // the choice being streamed (chat)
    size_t n_calls_ = 0;  // tool calls sent so far in that choice
};

}  // namespace

std::unique_ptr<Dialect> openai_dialect(const AnswerContext& ctx, const Generation& g) {
    return std::make_unique<OpenAiDialect>(ctx, g);
}

}  // namespace tandem::server
