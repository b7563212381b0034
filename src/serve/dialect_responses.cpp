// OpenAI Responses answers (/v1/responses): the Response object, and its stream of named, numbered events from
// ResponseStream (dialect.h, serve/responses.h). One choice.
#include "serve/answer_json.h"
#include "serve/dialect.h"
#include "serve/responses.h"

namespace tandem::server {

namespace {

class ResponsesDialect : public Dialect {
public:
    ResponsesDialect(const AnswerContext& ctx, const Generation& g)
        : Dialect(ctx, g), stream_(g.id, ctx.model_id, g.created) {}

    json answer(const std::vector<JobOutput>& outs) override {
        const Job& j = *g_.jobs[0];
        ChatDelta d = parse_whole(*answer_parser(0), outs[0].text);
        for (auto& call : d.calls) call.id = random_id("call_");
        return response_object(g_.id, ctx_.model_id, g_.created, status_of(j), response_items(g_.id, d),
                               {j.n_prompt, j.n_generated, j.n_cached});
    }

    void open(SseEvents& ev) override { send(ev, stream_.start(), nullptr); }

    void begin_choice(size_t c, SseEvents&) override { parser_ = answer_parser(c); }

    void piece(size_t c, const std::string& text, Held& held, SseEvents& ev) override {
        held.clear();
        ChatDelta d = parser_->push(text);
        for (auto& call : d.calls) call.id = random_id("call_");
        send(ev, stream_.push(d),
             g_.request.timings_per_token ? live_timings_json(g_.jobs[c]->progress()) : json(nullptr));
    }

    bool end_choice(size_t c, Held&, SseEvents& ev) override {
        const Job& job = *g_.jobs[c];
        ChatDelta d = parser_->finish();
        for (auto& call : d.calls) call.id = random_id("call_");
        auto events = stream_.push(d);
        for (auto& e : stream_.finish(status_of(job), {job.n_prompt, job.n_generated, job.n_cached}))
            events.push_back(std::move(e));
        send(ev, std::move(events), timings_json(job));
        return true;
    }

    void fail(const Job& job, SseEvents& ev) override {
        send(ev, {{"error", {{"code", error_type(job.error_status)}, {"message", job.error}, {"param", nullptr}}}},
             nullptr);
    }

private:
    static std::string status_of(const Job& j) { return finish_reason(j) == "length" ? "incomplete" : "completed"; }
    // The events of one step, numbered; the last one carries the timings, when asked for.
    void send(SseEvents& ev, std::vector<ResponseStream::Event> events, const json& timings) {
        if (!events.empty() && !timings.is_null()) events.back().second["timings"] = timings;
        for (auto& [type, body] : events) {
            body["type"] = type;
            body["sequence_number"] = seq_++;
            ev.push_back({type, dump(body)});
        }
    }

    ResponseStream stream_;
    std::unique_ptr<ChatAnswerParser> parser_;
    int seq_ = 0;
};

}  // namespace

std::unique_ptr<Dialect> responses_dialect(const AnswerContext& ctx, const Generation& g) {
    return std::make_unique<ResponsesDialect>(ctx, g);
}

}  // namespace tandem::server
