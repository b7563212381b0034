// Anthropic Messages answers (/v1/messages): the message object, and its stream of named events (message_start,
// content blocks from AnthropicStream, message_delta, message_stop) (dialect.h, serve/anthropic.h). One choice.
#include "serve/anthropic.h"
#include "serve/answer_json.h"
#include "serve/dialect.h"

namespace tandem::server {

namespace {

class AnthropicDialect : public Dialect {
public:
    using Dialect::Dialect;

    json answer(const std::vector<JobOutput>& outs) override {
        const Job& j = *g_.jobs[0];
        ChatDelta d = parse_whole(*answer_parser(0), outs[0].text);
        for (auto& call : d.calls) call.id = random_id("toolu_");
        std::string fr = finish_reason(j);
        if (!d.calls.empty() && fr == "stop") fr = "tool_calls";
        return anthropic_message(g_.id, ctx_.model_id, d, fr, j.stop_word, j.n_prompt, j.n_generated, j.n_cached);
    }

    void open(SseEvents& ev) override {
        json start = anthropic_message(g_.id, ctx_.model_id, ChatDelta{}, "", "", g_.prompt_tokens(), 0, 0);
        start["content"] = json::array();
        start["stop_reason"] = nullptr;
        event(ev, "message_start", {{"message", start}});
    }

    void begin_choice(size_t c, SseEvents&) override { parser_ = answer_parser(c); }

    void piece(size_t, const std::string& text, Held& held, SseEvents& ev) override {
        held.clear();
        push(parser_->push(text), ev);
    }

    bool end_choice(size_t c, Held&, SseEvents& ev) override {
        const Job& job = *g_.jobs[c];
        push(parser_->finish(), ev);
        for (auto& [type, body] : stream_.finish()) event(ev, type, std::move(body));
        std::string fr = finish_reason(job);
        if (stream_.n_calls() > 0 && fr == "stop") fr = "tool_calls";
        event(ev, "message_delta",
              {{"delta",
                {{"stop_reason", anthropic_stop_reason(fr, job.stop_word)},
                 {"stop_sequence", job.stop_word.empty() ? json(nullptr) : json(job.stop_word)}}},
               {"usage", {{"output_tokens", job.n_generated}}}});
        event(ev, "message_stop", json::object());
        return true;
    }

    void fail(const Job& job, SseEvents& ev) override {
        event(ev, "error", anthropic_error(job.error_status, job.error));
    }

private:
    static void event(SseEvents& ev, const std::string& type, json body) {
        body["type"] = type;
        ev.push_back({type, dump(body)});
    }
    void push(ChatDelta d, SseEvents& ev) {
        for (auto& call : d.calls) call.id = random_id("toolu_");
        for (auto& [type, body] : stream_.push(d)) event(ev, type, std::move(body));
    }

    std::unique_ptr<ChatAnswerParser> parser_;
    AnthropicStream stream_;
};

}  // namespace

std::unique_ptr<Dialect> anthropic_dialect(const AnswerContext& ctx, const Generation& g) {
    return std::make_unique<AnthropicDialect>(ctx, g);
}

}  // namespace tandem::server
