// The dialect interface's shared parts and the drivers that feed a dialect from the jobs (dialect.h).
#include "serve/dialect.h"

#include <algorithm>

#include "serve/answer_json.h"

namespace tandem::server {

Generation::~Generation() {
    for (auto& j : jobs) j->cancel();
}

int Generation::prompt_tokens() const {
    int n = 0;
    for (const auto& p : prompts) n += int(p.ids.size());
    return n;
}

std::unique_ptr<ChatAnswerParser> Dialect::answer_parser(size_t c) const {
    const ReasoningFormat rf = g_.request.reasoning_format.empty()
                                   ? ctx_.reasoning_format
                                   : reasoning_format_from_name(g_.request.reasoning_format);
    return std::make_unique<ChatAnswerParser>(rf, g_.prompts[g_.job_prompt[c]].opens_thinking,
                                              ctx_.fe.tool_format_of(g_.request), g_.request.uses_tools(),
                                              g_.request.tools, ctx_.fe.think_tags());
}

namespace {

nlohmann::ordered_json origin_json(int32_t id, const std::string& text, const TokenSource& s) {
    return {{"id", id},
            {"text", text},
            {"origin", token_origin_name(s.origin)},
            {"proposer", s.proposer == SpecType::NONE ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(spec_type_name(s.proposer))},
            {"round", s.round}};
}

}  // namespace

nlohmann::ordered_json Dialect::origins_of(const Held& held) const {
    if (!g_.request.token_origins) return nullptr;
    auto a = nlohmann::ordered_json::array();
    for (size_t i = 0; i < held.toks.size(); i++)
        a.push_back(origin_json(held.toks[i], i < held.texts.size() ? held.texts[i] : std::string(),
                                i < held.src.size() ? held.src[i] : TokenSource{}));
    return a;
}

nlohmann::ordered_json Dialect::origins_of(const JobOutput& out) const {
    if (!g_.request.token_origins) return nullptr;
    auto a = nlohmann::ordered_json::array();
    size_t at = 0;
    for (size_t i = 0; i < out.toks.size(); i++) {
        const size_t end = i < out.text_end.size() ? out.text_end[i] : at;
        a.push_back(
            origin_json(out.toks[i], out.text.substr(at, end - at), i < out.src.size() ? out.src[i] : TokenSource{}));
        at = end;
    }
    return a;
}

ChatDelta parse_whole(ChatAnswerParser& p, const std::string& text) {
    ChatDelta d = p.push(text);
    d.append(p.finish());
    return d;
}

std::unique_ptr<Dialect> make_dialect(const AnswerContext& ctx, const Generation& g) {
    switch (g.api) {
        case Api::Native: return native_dialect(ctx, g);
        case Api::Anthropic: return anthropic_dialect(ctx, g);
        case Api::Responses: return responses_dialect(ctx, g);
        default: return openai_dialect(ctx, g);
    }
}

void answer_whole(Call& call, Generation& g, Dialect& d) {
    std::vector<JobOutput> outs(g.jobs.size());
    for (size_t c = 0; c < g.jobs.size(); c++) {
        Job& job = *g.jobs[c];
        while (job.wait(outs[c], 100))
            if (call.res.client_gone()) return;
        if (!job.error.empty()) return call.error(job.error_status, job.error);
    }
    call.json_ok(d.answer(outs));
}

namespace {

bool send_all(Responder& res, SseEvents& ev) {
    for (const SseEvent& e : ev)
        if (!res.write_event(e.event, e.data)) return false;
    ev.clear();
    return true;
}

}  // namespace

void answer_stream(Call& call, Generation& g, Dialect& d) {
    JobOutput out;  // the first job's first result
    bool more = true;
    for (;;) {
        more = g.jobs[0]->wait(out, 100);
        if (!out.toks.empty() || !out.text.empty() || !out.progress.empty() || !more) break;
        if (call.res.client_gone()) return;
    }
    if (!more && out.toks.empty() && !g.jobs[0]->error.empty())
        return call.error(g.jobs[0]->error_status, g.jobs[0]->error);
    if (!call.begin_stream("text/event-stream")) return;
    Responder& sink = call.res;
    SseEvents ev;
    d.open(ev);
    if (!send_all(sink, ev)) return;
    for (size_t c = 0; c < g.jobs.size(); c++) {
        Job& job = *g.jobs[c];
        d.begin_choice(c, ev);
        if (!send_all(sink, ev)) return;
        Held held;
        if (c > 0) {
            out = {};
            more = true;
        }
        auto piece = [&](const std::string& text) {
            d.piece(c, text, held, ev);
            return send_all(sink, ev);
        };
        for (;;) {
            if (out.toks.empty() && out.text.empty() && out.progress.empty() && more) {
                more = job.wait(out, 100);
                if (out.toks.empty() && out.text.empty() && out.progress.empty()) {
                    if (more && !sink.write("")) return;  // nothing to say: is the client still there?
                    if (more) continue;
                }
            }
            for (const PromptProgress& p : out.progress) d.progress(c, p, ev);  // (return_progress)
            out.progress.clear();
            if (!send_all(sink, ev)) return;
            size_t at = 0, tok_at = 0;  // text sent; text released by the tokens so far
            for (size_t i = 0; i < out.toks.size(); i++) {
                held.toks.push_back(out.toks[i]);
                if (i < out.lps.size()) held.lps.push_back(out.lps[i]);
                held.src.push_back(i < out.src.size() ? out.src[i] : TokenSource{});
                held.n_received++;
                const size_t end = i < out.text_end.size() ? out.text_end[i] : at;
                held.texts.push_back(out.text.substr(tok_at, end > tok_at ? end - tok_at : 0));
                tok_at = std::max(tok_at, end);
                if (d.per_token() || (end > at && i + 1 == out.toks.size())) {
                    if (!piece(out.text.substr(at, end - at))) return;
                    at = end;
                }
            }
            if (out.text.size() > at && !piece(out.text.substr(at))) return;  // the tail no token released
            out = {};
            if (!more) break;
        }
        if (!job.error.empty()) {
            d.fail(job, ev);
            send_all(sink, ev);
            return sink.end_stream();
        }
        const bool last = d.end_choice(c, held, ev);
        if (!send_all(sink, ev)) return;
        if (last) return sink.end_stream();
    }
    d.close(ev);
    send_all(sink, ev);
    sink.end_stream();
}

}  // namespace tandem::server
