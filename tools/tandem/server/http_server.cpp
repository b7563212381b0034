#include "server/http_server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "args.h"
#include "chat/chat_formatter.h"
#include "grammar/grammar.h"
#include "grammar/trigger.h"
#include "serve/access.h"
#include "serve/anthropic.h"
#include "serve/engine.h"
#include "serve/front_end.h"
#include "serve/metrics.h"
#include "serve/infill.h"
#include "serve/openai.h"
#include "serve/chat_answer.h"
#include "serve/reasoning.h"
#include "serve/responses.h"
#include "server/http_transport.h"
#include "server/webui.h"
#include "tandem/chat.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {

// JSON text; strings that quote the (possibly invalid UTF-8) input get U+FFFD instead of a throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string random_id(const char* prefix) {
    static std::atomic<uint64_t> counter{0};
    uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    return strprintf("%s%llx%llx", prefix, (unsigned long long)(t & 0xffffffffff), (unsigned long long)counter++);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

const char* error_type(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 503: return "unavailable_error";
        default: return status < 500 ? "invalid_request_error" : "server_error";
    }
}

bool loopback_address(const std::string& host) {
    return is_loopback_host(host_without_port(host)) || host == "::1" || host == "[::1]";
}

}  // namespace

// One request being answered: the request, its responder, and the CORS headers every answer carries.
struct Call {
    const HttpRequest& req;
    Responder& res;
    Headers cors;
    int status = 0;
    bool anthropic = false;  // /v1/messages: errors in Anthropic's shape

    void send(int st, const std::string& type, const std::string& body, Headers extra = {}) {
        status = st;
        extra.insert(extra.end(), cors.begin(), cors.end());
        res.send(st, type, body, extra);
    }
    void json_ok(const json& j) { send(200, "application/json", dump(j)); }
    void error(int st, const std::string& msg, Headers extra = {}) {
        send(st, "application/json", dump(anthropic ? anthropic_error(st, msg) : error_body(msg, error_type(st), st)),
             std::move(extra));
    }
    bool begin_stream(const std::string& type) {
        status = 200;
        Headers h = {{"Cache-Control", "no-cache"}};
        h.insert(h.end(), cors.begin(), cors.end());
        return res.begin_stream(200, type, h);
    }
};

struct HttpServer::Impl {
    ServeParams p;
    AccessPolicy policy;
    std::unique_ptr<HttpTransport> transport;
    std::atomic<bool> ready{false};
    std::shared_ptr<const Model> model;
    std::shared_ptr<Engine> engine;
    // The model's request front end (src/serve/front_end.h: tokenizer, chat template, tool-call format, request
    // preparation), and its tokenizer and template as every route reads them.
    std::unique_ptr<FrontEnd> fe;
    const Tokenizer* tok = nullptr;
    const ChatFormatter* chat = nullptr;
    std::string model_id;
    SpecParams engine_spec_defaults;
    json aliases = json::array(),
         tags = json::array();  // what /props shows: the Jinja text the template was recognised from
    int64_t start_time = unix_time();
    std::atomic<uint64_t> http_requests{0};
    using Route = void (Impl::*)(Call&);
    std::map<std::string, std::map<std::string, Route>> routes;  // path -> method -> handler

    // --- helpers -------------------------------------------------------------------------------------------
    json timings_of(const Job& j) {
        const int processed = j.n_prompt - j.n_cached;  // as llama-server: prompt_n + cache_n = the prompt
        json t = {{"prompt_n", processed},
                  {"prompt_ms", j.prompt_ms},
                  {"prompt_per_second", j.prompt_ms > 0 ? processed / (j.prompt_ms / 1e3) : 0.0},
                  {"predicted_n", j.n_generated},
                  {"predicted_ms", j.gen_ms},
                  {"predicted_per_second", j.gen_ms > 0 ? j.n_generated / (j.gen_ms / 1e3) : 0.0},
                  {"draft_n", j.n_drafted},
                  {"draft_n_accepted", j.n_accepted},
                  {"cache_n", j.n_cached},
                  {"draft_tree_n", j.n_tree_drafted},
                  {"draft_tree_n_accepted", j.n_tree_accepted},
                  {"itl_p50_ms", j.itl.p50},
                  {"itl_p90_ms", j.itl.p90},
                  {"itl_p99_ms", j.itl.p99},
                  {"itl_max_ms", j.itl.max},
                  {"prompt_per_token_ms", processed > 0 ? j.prompt_ms / processed : 0.0},
                  {"predicted_per_token_ms", j.n_generated > 0 ? j.gen_ms / j.n_generated : 0.0}};
        // A list of proposers: flat numbers per proposer (clients, and llama.cpp's tests, expect every timings value
        // to be a number), e.g. draft_ngram_rounds, draft_ngram_n, draft_ngram_n_accepted.
        if (j.by_proposer.size() > 1)
            for (const auto& b : j.by_proposer) {
                const std::string p = std::string("draft_") + spec_type_name(b.type);
                t[p + "_rounds"] = b.rounds;
                t[p + "_n"] = b.drafted;
                t[p + "_n_accepted"] = b.accepted;
            }
        return t;
    }

    json logprob_entry(const TokenLogprob& lp) {
        auto bytes = [](const std::string& s) {
            json a = json::array();
            for (unsigned char c : s) a.push_back(int(c));
            return a;
        };
        std::string text = tok->token_to_piece(lp.id, true);
        json top = json::array();
        for (auto [id, l] : lp.top) {
            std::string t = tok->token_to_piece(id, true);
            top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes(t)}});
        }
        return {{"token", text}, {"logprob", lp.logprob}, {"bytes", bytes(text)}, {"top_logprobs", top}};
    }

    json completion_logprobs(const std::vector<TokenLogprob>& lps) {
        json tokens = json::array(), lp = json::array(), top = json::array(), off = json::array();
        size_t pos = 0;
        for (const auto& e : lps) {
            std::string t = tok->token_to_piece(e.id, true);
            tokens.push_back(t);
            lp.push_back(e.logprob);
            json m = json::object();
            for (auto [id, l] : e.top) m[tok->token_to_piece(id, true)] = l;
            top.push_back(m);
            off.push_back(pos);
            pos += t.size();
        }
        return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
    }

    // The request defaults and limits of this server (its flags).
    ServerLimits limits() const {
        ServerLimits lim;
        lim.n_vocab = tok->n_vocab();
        lim.max_n = 8;
        lim.has_draft = engine->has_draft();
        lim.spec_defaults = engine_spec_defaults;
        lim.sampling = p.sampling;
        lim.n_predict = p.n_predict;
        lim.ignore_eos = p.ignore_eos;
        lim.tokenize = [this](const std::string& text) { return tok->encode(text, false, true); };
        lim.default_grammar = default_grammar;
        return lim;
    }

    // Structured output: the grammar with the vocabulary trie of the target (built once, on first use).
    // The grammar side of a request over the vocabulary side, built on the first request that needs it.
    // lazy: its triggers; a chat prompt that opened a <think> block starts the scan inside it.
    std::shared_ptr<const OutputConstraint> constraint_for(std::shared_ptr<const grammar::Grammar> g,
                                                           const grammar::TriggerSpec* lazy = nullptr,
                                                           bool opens_thinking = false) {
        std::call_once(vocab_once,
                       [this] { constraint_vocab = std::make_unique<ConstraintVocab>(*tok, fe->shown_special()); });
        std::shared_ptr<grammar::TriggerSpec> spec;
        if (lazy) {
            spec = std::make_shared<grammar::TriggerSpec>(*lazy);
            if (!spec->think_close.empty()) {  // the model's own thinking tags
                spec->think_open = fe->think_tags().open;
                spec->think_close = fe->think_tags().close;
            }
            spec->starts_thinking = opens_thinking && !spec->think_close.empty();
        }
        return constraint_vocab->constrain(std::move(g), std::move(spec));
    }
    std::once_flag vocab_once;
    std::unique_ptr<ConstraintVocab> constraint_vocab;
    std::shared_ptr<const grammar::Grammar> default_grammar;

    // /v1/chat/completions, /v1/completions, llama-server's /completion, Anthropic's /v1/messages
    using Prompt = FrontEnd::Prompt;

    // Parses, validates and tokenizes (FrontEnd::prepare); on failure answers 400 (501 for what the model cannot
    // do) and returns false.
    bool prepare(Call& call, Api api, ParsedRequest& out, std::vector<Prompt>& prompts, bool infill = false) {
        try {
            FrontEnd::Prepared p = fe->prepare(call.req.body, api, infill, limits(), engine->n_ctx());
            out = std::move(p.request);
            prompts = std::move(p.prompts);
            return true;
        } catch (const ContextExceeded& e) {  // llama-server's error shape, with the numbers
            json err = error_body(e.what(), "exceed_context_size_error", 400);
            err["error"]["n_prompt_tokens"] = e.n_prompt;
            err["error"]["n_ctx"] = e.n_ctx;
            call.send(400, "application/json", dump(err));
        } catch (const BadRequest& e) {
            call.error(400, e.what());
        } catch (const NotImplemented& e) {
            call.error(501, e.what());
        }
        return false;
    }

    void chat_completions(Call& c) { generate(c, Api::Chat); }
    void completions(Call& c) { generate(c, Api::Oai); }
    void completion_native(Call& c) { generate(c, Api::Native); }

    void infill(Call& c) { generate(c, Api::Native, true); }
    void anthropic_messages(Call& c) {
        c.anthropic = true;
        generate(c, Api::Anthropic);
    }
    void responses(Call& c) { generate(c, Api::Responses); }
    void anthropic_count_tokens(Call& c) {
        c.anthropic = true;
        try {
            json b = anthropic_to_openai(parse_body(c.req.body), true);
            ParsedRequest pr = parse_request(b, true, limits());
            c.json_ok({{"input_tokens", tok->encode(fe->chat_prompt(pr), true, true).size()}});
        } catch (const BadRequest& e) {
            c.error(400, e.what());
        } catch (const json::exception& e) {
            c.error(400, e.what());
        }
    }

    void generate(Call& call, Api api, bool infill = false) {
        ParsedRequest pr;
        std::vector<Prompt> prompts;
        if (!prepare(call, api, pr, prompts, infill)) return;
        // Jobs in choice order: prompt-major, then the n choices of each prompt (OpenAI's index order).
        std::vector<std::shared_ptr<Job>> jobs;
        std::vector<size_t> job_prompt;
        for (size_t pi = 0; pi < prompts.size(); pi++) {
            for (int i = 0; i < pr.n; i++) {
                JobRequest jr = pr.job;
                jr.prompt = prompts[pi].ids;
                if (api == Api::Chat || api == Api::Anthropic || api == Api::Responses)
                    jr.shown_special = fe->shown_special();
                if (pr.grammar) jr.constraint = constraint_for(pr.grammar, pr.lazy.get(), prompts[pi].opens_thinking);
                if (!jr.spec.context_shift)  // clamped to the context, unless it shifts
                    jr.max_tokens = std::min(jr.max_tokens, engine->n_ctx() - int(jr.prompt.size()));
                // choice 0 of prompt 0 keeps the request's seed; the others get independent derived streams
                jr.sampling.seed = derive_seed(pr.job.sampling.seed, uint64_t(pi * size_t(pr.n) + size_t(i)));
                auto job = engine->submit(std::move(jr));
                if (!job) {
                    for (auto& j : jobs) j->cancel();
                    if (engine->shutting_down())
                        call.error(503, "the server is shutting down", {{"Connection", "close"}});
                    else call.error(503, "the server is busy (queue full); retry later", {{"Retry-After", "1"}});
                    return;
                }
                jobs.push_back(job);
                job_prompt.push_back(pi);
            }
        }
        // Every way out (a finished answer, a client gone, an exception) cancels the jobs: a no-op for finished ones.
        struct CancelAll {
            std::vector<std::shared_ptr<Job>>& jobs;
            ~CancelAll() {
                for (auto& j : jobs) j->cancel();
            }
        } cancel_all{jobs};
        Gen g{call,
              api,
              pr,
              prompts,
              jobs,
              job_prompt,
              random_id(api == Api::Chat        ? "chatcmpl-"
                        : api == Api::Anthropic ? "msg_"
                        : api == Api::Responses ? "resp_"
                                                : "cmpl-"),
              unix_time()};
        if (pr.stream) stream_response(g);
        else blocking_response(g);
    }

    // The reasoning format of a chat request: the request's reasoning_format, else --reasoning-format.
    ReasoningFormat reasoning_of(const ParsedRequest& pr) const {
        return pr.reasoning_format.empty() ? p.reasoning_format : reasoning_format_from_name(pr.reasoning_format);
    }

    struct Gen {
        Call& call;
        Api api;
        const ParsedRequest& pr;
        const std::vector<Prompt>& prompts;
        const std::vector<std::shared_ptr<Job>>& jobs;
        const std::vector<size_t>& job_prompt;
        std::string id;
        int64_t created;
    };

    // The parser of one chat answer: reasoning, content and (when the request has tools) tool calls.
    std::unique_ptr<ChatAnswerParser> answer_parser(const Gen& g, size_t c) const {
        const ReasoningFormat rf = reasoning_of(g.pr);
        return std::make_unique<ChatAnswerParser>(rf, g.prompts[g.job_prompt[c]].opens_thinking,
                                                  fe->tool_format_of(g.pr), g.pr.uses_tools(), g.pr.tools,
                                                  fe->think_tags());
    }
    // An OpenAI tool call of a blocking answer (streams send CallParts).
    static json tool_call_json(const ToolCall& call) {
        json j = json::object();
        j["id"] = random_id("call_");
        j["type"] = "function";
        j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
        return j;
    }

    // OpenAI finish_reason and llama-server stop_type of a finished job.
    static std::string finish_reason(const Job& j) { return j.finish_reason == "stop" ? "stop" : "length"; }
    static std::string stop_type(const Job& j) {
        if (!j.stop_word.empty()) return "word";
        if (j.finish_reason == "stop") return "eos";
        if (j.finish_reason == "length") return "limit";
        return "none";
    }

    // Waits for a job whose output is not streamed (embeddings, slot actions). False, with the job cancelled, when
    // the client went away meanwhile.
    bool wait_quietly(Job& job, Call& c) {
        JobOutput ignored;
        while (job.wait(ignored, 100))
            if (c.res.client_gone()) {
                job.cancel();
                return false;
            }
        return true;
    }

    // A failed job answers with its own status (400 for input the engine refused, 503 at shutdown, 500).
    void job_error(Call& call, const Job& job) { call.error(job.error_status, job.error); }

    json usage_of(const Gen& g) {
        int completion = 0, prompt = 0;
        for (const auto& j : g.jobs) completion += j->n_generated;
        for (const auto& pr : g.prompts) prompt += int(pr.ids.size());
        return {{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", g.jobs.empty() ? 0 : g.jobs[0]->n_cached}}}};
    }

    json generation_settings(const JobRequest& r, const ParsedRequest& pr) {
        const SamplerParams& s = r.sampling;
        json samplers = json::array();
        for (SamplerKind k : s.order) samplers.push_back(sampler_kind_name(k));
        return {{"n_predict", r.max_tokens == INT32_MAX ? -1 : r.max_tokens},
                {"seed", s.seed},
                {"temperature", s.temp},
                {"top_k", s.top_k},
                {"top_p", s.top_p},
                {"min_p", s.min_p},
                {"typical_p", s.typical_p},
                {"repeat_last_n", s.penalty_last_n},
                {"repeat_penalty", s.repeat_penalty},
                {"presence_penalty", s.presence_penalty},
                {"frequency_penalty", s.frequency_penalty},
                {"ignore_eos", r.ignore_eos},
                {"stop", r.stop},
                {"n_probs", pr.n_probs},
                {"samplers", samplers},
                {"speculative.n_max", r.spec.n_max},
                {"speculative.n_min", r.spec.n_min},
                {"speculative.p_min", r.spec.p_min},
                {"stream", pr.stream},
                {"logit_bias", bias_list(r)}};
    }

    // llama-server's generation_settings.logit_bias: [{"token", "bias"}], -inf as null; ignore_eos shows as the
    // end-of-generation tokens banned (as llama-server implements it).
    json bias_list(const JobRequest& r) {
        json out = json::array();
        for (const auto& [id, b] : r.sampling.logit_bias)
            out.push_back({{"token", id}, {"bias", std::isinf(b) ? json(nullptr) : json(b)}});
        if (r.ignore_eos)
            for (int32_t id = 0; id < tok->n_vocab(); id++)
                if (tok->is_eog(id)) out.push_back({{"token", id}, {"bias", nullptr}});
        return out;
    }

    // llama-server's completion_probabilities entries.
    json native_probs(const std::vector<TokenLogprob>& lps) {
        auto bytes = [](const std::string& s) {
            json a = json::array();
            for (unsigned char c : s) a.push_back(int(c));
            return a;
        };
        json out = json::array();
        for (const auto& e : lps) {
            std::string t = tok->token_to_piece(e.id, true);
            json top = json::array();
            for (auto [id, l] : e.top) {
                std::string tt = tok->token_to_piece(id, true);
                top.push_back({{"id", id}, {"token", tt}, {"bytes", bytes(tt)}, {"logprob", l}});
            }
            out.push_back(
                {{"id", e.id}, {"token", t}, {"bytes", bytes(t)}, {"logprob", e.logprob}, {"top_logprobs", top}});
        }
        return out;
    }

    json native_final(const Gen& g, size_t c, const JobOutput& t, bool stream) {
        const Job& j = *g.jobs[c];
        const Prompt& p = g.prompts[g.job_prompt[c]];
        json res = {{"index", c},
                    {"content", stream ? std::string() : t.text},
                    {"tokens", g.pr.return_tokens && !stream ? json(t.toks) : json::array()},
                    {"id_slot", j.slot.load()},
                    {"stop", true},
                    {"model", model_id},
                    {"tokens_predicted", j.n_generated},
                    {"tokens_evaluated", j.n_prompt},
                    {"generation_settings", generation_settings(j.req, g.pr)},
                    {"prompt", tok->decode(p.ids, false, true)},
                    {"has_new_line", t.text.find('\n') != std::string::npos},
                    {"truncated", p.truncated || j.truncated},
                    {"stop_type", stop_type(j)},
                    {"stopping_word", j.stop_word},
                    {"tokens_cached", j.n_prompt + j.n_generated},
                    {"timings", timings_of(j)}};
        if (!stream && g.pr.n_probs > 0) res["completion_probabilities"] = native_probs(t.lps);
        if (g.pr.response_fields.empty()) return res;
        json picked = json::object();  // llama-server: each "a/b" path, flattened under its own name
        for (const auto& f : g.pr.response_fields) {
            try {
                json::json_pointer ptr("/" + f);
                if (res.contains(ptr)) picked[f] = res.at(ptr);
            } catch (const json::exception&) {  // not a usable path ("a~2"): left out, as a missing field
            }
        }
        return picked;
    }

    // Non-streaming: everything is generated before the status line is written, so the status is always right.
    // A client that goes away meanwhile is noticed (the socket is polled) and its jobs are cancelled.
    void blocking_response(Gen& g) {
        std::vector<JobOutput> texts(g.jobs.size());
        for (size_t c = 0; c < g.jobs.size(); c++) {
            Job& job = *g.jobs[c];
            while (job.wait(texts[c], 100))
                if (g.call.res.client_gone()) return;
            if (!job.error.empty()) return job_error(g.call, job);
        }
        if (g.api == Api::Anthropic) {
            const Job& j = *g.jobs[0];
            auto ap = answer_parser(g, 0);
            ChatDelta d = ap->push(texts[0].text);
            d.append(ap->finish());
            for (auto& call : d.calls) call.id = random_id("toolu_");
            std::string fr = finish_reason(j);
            if (!d.calls.empty() && fr == "stop") fr = "tool_calls";
            return g.call.json_ok(
                anthropic_message(g.id, model_id, d, fr, j.stop_word, j.n_prompt, j.n_generated, j.n_cached));
        }
        if (g.api == Api::Responses) {
            const Job& j = *g.jobs[0];
            auto ap = answer_parser(g, 0);
            ChatDelta d = ap->push(texts[0].text);
            d.append(ap->finish());
            for (auto& call : d.calls) call.id = random_id("call_");
            return g.call.json_ok(response_object(g.id, model_id, g.created,
                                                  finish_reason(j) == "length" ? "incomplete" : "completed",
                                                  response_items(g.id, d), {j.n_prompt, j.n_generated, j.n_cached}));
        }
        if (g.api == Api::Native) {
            if (g.jobs.size() == 1) return g.call.json_ok(native_final(g, 0, texts[0], false));
            json all = json::array();
            for (size_t c = 0; c < g.jobs.size(); c++) all.push_back(native_final(g, c, texts[c], false));
            return g.call.json_ok(all);
        }
        const bool chat = g.api == Api::Chat;
        json choices = json::array();
        for (size_t c = 0; c < g.jobs.size(); c++) {
            const JobOutput& t = texts[c];
            json choice = {{"index", c}, {"finish_reason", finish_reason(*g.jobs[c])}};
            if (chat) {
                auto ap = answer_parser(g, c);
                ChatDelta d = ap->push(t.text);
                d.append(ap->finish());
                json& msg = choice["message"] = {{"role", "assistant"}, {"content", d.content}};
                if (!d.reasoning.empty()) msg["reasoning_content"] = d.reasoning;
                if (!d.calls.empty()) {
                    if (d.content.empty()) msg["content"] = nullptr;
                    msg["tool_calls"] = json::array();
                    for (size_t k = 0; k < d.calls.size(); k++) msg["tool_calls"].push_back(tool_call_json(d.calls[k]));
                    if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
                }
                choice["logprobs"] = g.pr.logprobs ? json{{"content", logprob_list(t.lps)}} : json(nullptr);
            } else {
                choice["text"] = t.text;
                choice["logprobs"] = g.pr.logprobs ? completion_logprobs(t.lps) : json(nullptr);
            }
            choices.push_back(choice);
        }
        json res = {{"id", g.id},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", g.created},
                    {"model", model_id},
                    {"system_fingerprint", "tandem"},
                    {"choices", choices},
                    {"usage", usage_of(g)},
                    {"timings", timings_of(*g.jobs.back())}};
        if (p.verbose || g.pr.verbose)
            res["__verbose"] = {{"prompt", tok->decode(g.prompts[0].ids, false, true)}, {"content", texts[0].text}};
        g.call.json_ok(res);
    }

    json logprob_list(const std::vector<TokenLogprob>& lps) {
        json a = json::array();
        for (const auto& e : lps) a.push_back(logprob_entry(e));
        return a;
    }

    // Streaming: the status line waits for the first job's first result, so a request that fails before it
    // generates anything (shutdown, a refused input) still gets its 4xx/5xx status; a failure after that is
    // sent as an error event and the stream ends. Chunks never carry empty text (log-probabilities of tokens
    // whose text is held back, an incomplete UTF-8 sequence or a possible stop string, wait for the text).
    void stream_response(Gen& g) {
        JobOutput out;  // the first job's first result
        bool more = true;
        for (;;) {
            more = g.jobs[0]->wait(out, 100);
            if (!out.toks.empty() || !out.text.empty() || !more) break;
            if (g.call.res.client_gone()) return;
        }
        if (!more && out.toks.empty() && !g.jobs[0]->error.empty()) return job_error(g.call, *g.jobs[0]);
        if (!g.call.begin_stream("text/event-stream")) return;
        Responder& sink = g.call.res;
        const bool chat = g.api == Api::Chat, native = g.api == Api::Native, anth = g.api == Api::Anthropic;
        // llama-server streams one chunk per token when n_probs asks for its probabilities
        const bool per_token = native && g.pr.n_probs > 0;
        auto send = [&](const json& j) { return sink.write("data: " + dump(j) + "\n\n"); };
        auto event = [&](const char* type, json j) {  // Anthropic: named events
            j["type"] = type;
            return sink.write(std::string("event: ") + type + "\ndata: " + dump(j) + "\n\n");
        };
        const bool resp = g.api == Api::Responses;
        int seq = 0;
        auto resp_event = [&](const std::string& type, json j) {  // Responses: named events, numbered
            j["type"] = type;
            j["sequence_number"] = seq++;
            return sink.write("event: " + type + "\ndata: " + dump(j) + "\n\n");
        };
        ResponseStream rstream(g.id, model_id, g.created);
        // the events of one step (the last one carries the timings, when asked for)
        auto resp_events = [&](std::vector<ResponseStream::Event> ev, const json& timings) {
            if (!ev.empty() && !timings.is_null()) ev.back().second["timings"] = timings;
            for (auto& [type, body] : ev)
                if (!resp_event(type, std::move(body))) return false;
            return true;
        };
        if (resp && !resp_events(rstream.start(), nullptr)) return;
        AnthropicStream astream;
        auto anth_events = [&](std::vector<AnthropicStream::Event> ev) {
            for (auto& [type, body] : ev)
                if (!event(type.c_str(), std::move(body))) return false;
            return true;
        };
        if (anth) {
            json start = anthropic_message(g.id, model_id, ChatDelta{}, "", "", int(g.prompts[0].ids.size()), 0, 0);
            start["content"] = json::array();
            start["stop_reason"] = nullptr;
            if (!event("message_start", {{"message", start}})) return;
        }
        auto oai_chunk = [&](size_t index, const json& delta_or_text, const json& finish, const json& logprobs) {
            json choice = {{"index", index}, {"finish_reason", finish}};
            if (chat) choice["delta"] = delta_or_text;
            else choice["text"] = delta_or_text;
            if (!logprobs.is_null()) choice["logprobs"] = logprobs;
            return json{{"id", g.id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", g.created},
                        {"model", model_id},
                        {"system_fingerprint", "tandem"},
                        {"choices", json::array({choice})}};
        };
        for (size_t c = 0; c < g.jobs.size(); c++) {
            Job& job = *g.jobs[c];
            if (chat && !send(oai_chunk(c, {{"role", "assistant"}, {"content", nullptr}}, nullptr, nullptr))) return;
            std::vector<TokenLogprob> held_lps;  // tokens whose text is not out yet
            std::vector<int32_t> held_toks;
            int n_sent = 0;
            auto answer = chat || anth || resp ? answer_parser(g, c) : nullptr;
            if (chat) answer->stream_arguments(true);  // OpenAI: a call's name first, then its arguments as they come
            size_t n_calls = 0;  // tool calls sent so far
            // a chat delta: reasoning_content, content and tool_calls, each only when there is some
            auto chat_delta = [&](ChatDelta& d) {
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
                        n_calls = std::max(n_calls, part.index + 1);
                    }
                }
                return delta;
            };
            // one chunk: the text, with the tokens (and log-probabilities) that came with it or before it
            auto chunk = [&](const std::string& piece) {
                json o;
                if (resp) {
                    held_lps.clear();
                    held_toks.clear();
                    ChatDelta d = answer->push(piece);
                    for (auto& call : d.calls) call.id = random_id("call_");
                    return resp_events(rstream.push(d), g.pr.timings_per_token ? live_timings(job) : json(nullptr));
                }
                if (anth) {
                    held_lps.clear();
                    held_toks.clear();
                    ChatDelta d = answer->push(piece);
                    for (auto& call : d.calls) call.id = random_id("toolu_");
                    return anth_events(astream.push(d));
                }
                if (native) {
                    o = {{"index", c},
                         {"content", piece},
                         {"tokens", held_toks},
                         {"stop", false},
                         {"id_slot", job.slot.load()},
                         {"tokens_predicted", n_sent},
                         {"tokens_evaluated", job.req.prompt.size()}};
                    if (g.pr.n_probs > 0) o["completion_probabilities"] = native_probs(held_lps);
                } else {
                    json lp = nullptr;
                    if (g.pr.logprobs && !held_lps.empty())
                        lp = chat ? json{{"content", logprob_list(held_lps)}} : completion_logprobs(held_lps);
                    json delta;
                    if (chat) {  // thinking text goes to reasoning_content, calls to tool_calls
                        ChatDelta d = answer->push(piece);
                        if (d.empty()) return true;  // held back (tokens and all) for now
                        delta = chat_delta(d);
                    }
                    o = oai_chunk(c, chat ? delta : json(piece), nullptr, lp);
                }
                if (g.pr.timings_per_token) o["timings"] = live_timings(job);
                held_lps.clear();
                held_toks.clear();
                return send(o);
            };
            if (c > 0) {
                out = {};
                more = true;
            }
            for (;;) {
                if (out.toks.empty() && out.text.empty() && more) {
                    more = job.wait(out, 100);
                    if (out.toks.empty() && out.text.empty()) {
                        if (more && !sink.write("")) return;  // nothing to say: is the client still there?
                        if (more) continue;
                    }
                }
                size_t at = 0;
                for (size_t i = 0; i < out.toks.size(); i++) {
                    held_toks.push_back(out.toks[i]);
                    if (i < out.lps.size()) held_lps.push_back(out.lps[i]);
                    n_sent++;
                    const size_t end = i < out.text_end.size() ? out.text_end[i] : at;
                    if (per_token || (end > at && i + 1 == out.toks.size())) {
                        if (!chunk(out.text.substr(at, end - at))) return;
                        at = end;
                    }
                }
                if (out.text.size() > at && !chunk(out.text.substr(at))) return;  // the tail no token released
                out = {};
                if (!more) break;
            }
            if (!job.error.empty()) {
                if (resp)
                    resp_event("error",
                               {{"code", error_type(job.error_status)}, {"message", job.error}, {"param", nullptr}});
                else if (anth) event("error", anthropic_error(job.error_status, job.error));
                else send(error_body(job.error, error_type(job.error_status), job.error_status));
                sink.end_stream();
                return;
            }
            if (resp) {
                ChatDelta d = answer->finish();
                for (auto& call : d.calls) call.id = random_id("call_");
                auto ev = rstream.push(d);
                for (auto& e : rstream.finish(finish_reason(job) == "length" ? "incomplete" : "completed",
                                              {job.n_prompt, job.n_generated, job.n_cached}))
                    ev.push_back(std::move(e));
                resp_events(std::move(ev), timings_of(job));
                return sink.end_stream();
            }
            if (anth) {
                ChatDelta d = answer->finish();
                for (auto& call : d.calls) call.id = random_id("toolu_");
                auto ev = astream.push(d);
                for (auto& e : astream.finish()) ev.push_back(std::move(e));
                anth_events(std::move(ev));
                std::string fr = finish_reason(job);
                if (astream.n_calls() > 0 && fr == "stop") fr = "tool_calls";
                event("message_delta",
                      {{"delta",
                        {{"stop_reason", anthropic_stop_reason(fr, job.stop_word)},
                         {"stop_sequence", job.stop_word.empty() ? json(nullptr) : json(job.stop_word)}}},
                       {"usage", {{"output_tokens", job.n_generated}}}});
                event("message_stop", json::object());
                return sink.end_stream();
            }
            if (native) {
                if (!held_toks.empty() && !chunk("")) return;
                if (!send(native_final(g, c, JobOutput{}, true))) return;
                continue;
            }
            json lp = nullptr;
            if (g.pr.logprobs && !held_lps.empty())
                lp = chat ? json{{"content", logprob_list(held_lps)}} : completion_logprobs(held_lps);
            json tail = chat ? json::object() : json("");
            std::string finish = finish_reason(job);
            if (chat) {  // what the answer parser still held: the end of the text, the tool calls
                ChatDelta d = answer->finish();
                if (!d.empty()) tail = chat_delta(d);
                if (n_calls > 0 && finish == "stop") finish = "tool_calls";
            }
            json last = oai_chunk(c, tail, finish, lp);
            last["timings"] = timings_of(job);
            if (!send(last)) return;
        }
        if (!native) {
            if (g.pr.include_usage) {
                json u = {{"id", g.id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", g.created},
                          {"model", model_id},
                          {"choices", json::array()},
                          {"usage", usage_of(g)},
                          {"timings", timings_of(*g.jobs.back())}};
                send(u);
            }
            sink.write("data: [DONE]\n\n");
        }
        sink.end_stream();
    }

    json live_timings(const Job& j) {
        JobProgress p = j.progress();
        return {{"prompt_n", p.n_prompt},
                {"prompt_ms", p.prompt_ms},
                {"prompt_per_second", p.prompt_ms > 0 ? p.n_prompt / (p.prompt_ms / 1e3) : 0.0},
                {"predicted_n", p.n_generated},
                {"predicted_ms", p.gen_ms},
                {"predicted_per_second", p.gen_ms > 0 ? p.n_generated / (p.gen_ms / 1e3) : 0.0},
                {"draft_n", p.n_drafted},
                {"draft_n_accepted", p.n_accepted}};
    }

    std::string metrics_text() { return prometheus_text(engine->metrics(), http_requests.load()); }

    // --- routes ------------------------------------------------------------------------------------------
    void health(Call& c) {
        if (!ready.load()) return c.error(503, "Loading model", {{"Retry-After", "1"}});
        c.send(200, "application/json", R"({"status":"ok"})");
    }
    void index(Call& c) {
        if (!p.webui) return c.error(404, "the chat page is off (--no-webui)");
        c.send(200, "text/html; charset=utf-8", kWebUi);
    }
    void input_tokens(Call& c) {  // llama-server: the prompt size of a chat request, without generating
        ParsedRequest pr;
        std::vector<Prompt> prompts;
        if (!prepare(c, Api::Chat, pr, prompts)) return;
        c.json_ok({{"input_tokens", prompts[0].ids.size()}});
    }
    void manifest(Call& c) {
        c.send(200, "application/manifest+json",
               R"({"name":"tandem","short_name":"tandem","start_url":"/","display":"standalone"})");
    }
    void service_worker(Call& c) {  // the llama.cpp web UI registers one; tandem's page needs none
        c.send(200, "application/javascript", "// tandem: no service worker\n");
    }
    void models(Call& c) {
        const HParams& hp = model->hparams();
        json m = {{"id", model_id},
                  {"object", "model"},
                  {"created", unix_time()},
                  {"owned_by", "tandem"},
                  {"aliases", aliases},
                  {"tags", tags},
                  {"meta",
                   {{"vocab_type", tok->model_name()},
                    {"n_vocab", hp.n_vocab},
                    {"n_ctx_train", hp.n_ctx_train},
                    {"n_ctx", engine->n_ctx()},
                    {"n_embd", hp.n_embd},
                    {"n_params", model->n_params()},
                    {"size", model->weights_bytes()}}}};
        // llama-server's "models" list beside OpenAI's "data"
        json legacy = {{"name", model_id},
                       {"model", model_id},
                       {"modified_at", ""},
                       {"size", model->weights_bytes()},
                       {"digest", ""},
                       {"type", "model"},
                       {"description", ""},
                       {"tags", json::array()},
                       {"capabilities", json::array({"completion"})},
                       {"parameters", ""},
                       {"details", json::object()}};
        c.json_ok({{"object", "list"}, {"data", json::array({m})}, {"models", json::array({legacy})}});
    }
    void metrics(Call& c) {
        if (!p.metrics) return c.error(501, "this server does not expose metrics: start it with --metrics");
        c.send(200, "text/plain; version=0.0.4", metrics_text(),
               {{"Process-Start-Time-Unix", std::to_string(start_time)}});
    }
    void props_get(Call& c) {
        ServerLimits lim = limits();
        JobRequest r;
        r.sampling = lim.sampling;
        r.max_tokens = lim.n_predict < 0 ? INT32_MAX : lim.n_predict;
        r.spec = engine_spec_defaults;
        r.ignore_eos = lim.ignore_eos;
        ParsedRequest pr;
        const std::string bos = tok->bos() >= 0 ? tok->token_to_piece(tok->bos(), true) : "";
        const std::string eos = tok->eos() >= 0 ? tok->token_to_piece(tok->eos(), true) : "";
        c.json_ok(
            {{"default_generation_settings", {{"params", generation_settings(r, pr)}, {"n_ctx", engine->n_ctx()}}},
             {"total_slots", engine->metrics().n_slots},
             {"model_alias", model_id},
             {"model_path", model->path()},
             {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
             {"endpoint_slots", p.slots_endpoint},
             {"endpoint_props", p.props_post},
             {"endpoint_metrics", p.metrics},
             {"ui", p.webui},
             {"chat_template", chat->source()},
             {"chat_template_name",
              chat->is_jinja() ? std::string("jinja") : std::string(chat_template_name(chat->builtin()))},
             {"bos_token", bos},
             {"eos_token", eos},
             {"build_info", "tandem " TANDEM_VERSION},
             {"is_sleeping", false}});
    }
    void props_post(Call& c) {
        if (!p.props_post)
            return c.error(501, "this server does not allow changing its properties: start it with --props");
        try {
            json b = parse_body(c.req.body);
            if (!b.is_object()) throw BadRequest("the body must be a JSON object");
            if (!b.empty()) throw BadRequest("no property can be changed at run time here");
            c.json_ok({{"success", true}});
        } catch (const BadRequest& e) {
            c.error(400, e.what());
        } catch (const json::exception& e) {
            c.error(400, e.what());
        }
    }
    void slots(Call& c) {
        if (!p.slots_endpoint) return c.error(501, "this server does not expose slots: it was started with --no-slots");
        json out = json::array();
        for (const SlotInfo& s : engine->metrics().slots)
            out.push_back({{"id", s.id},
                           {"n_ctx", s.n_ctx},
                           {"is_processing", s.is_processing},
                           {"n_past", s.n_past},
                           {"next_token", {{"n_decoded", s.n_generated}}},
                           {"n_prompt_tokens", s.n_prompt},
                           {"speculative", engine->has_draft() || engine_spec_defaults.type != SpecType::NONE}});
        c.json_ok(out);
    }
    // As llama-server: the actions need --slot-save-path (501 without it, erase included); --no-slots only hides
    // GET /slots.
    void slot_action(Call& c, const std::string& path) {
        if (p.slot_save_path.empty())
            return c.error(501, "this server does not support slot actions: start it with --slot-save-path DIR");
        SlotActionRequest a;
        try {
            a = parse_slot_action(path.substr(7), c.req.query, c.req.body, p.slot_save_path);
        } catch (const BadRequest& e) {
            return c.error(400, e.what());
        } catch (const json::exception& e) {
            return c.error(400, e.what());
        }
        JobRequest jr;
        jr.id_slot = a.id;
        jr.action = a.action;
        jr.state_path = a.path;
        auto job = engine->submit(std::move(jr));
        if (!job)
            return c.error(503, engine->shutting_down() ? "the server is shutting down"
                                                        : "the server is busy (queue full); retry later");
        if (!wait_quietly(*job, c)) return;
        if (!job->error.empty()) return job_error(c, *job);
        const double ms = job->prompt_ms;
        switch (a.action) {
            case JobRequest::SlotAction::SAVE:
                return c.json_ok({{"id_slot", a.id},
                                  {"filename", a.filename},
                                  {"n_saved", job->n_slot_tokens},
                                  {"n_written", job->n_slot_bytes},
                                  {"timings", {{"save_ms", ms}}}});
            case JobRequest::SlotAction::RESTORE:
                return c.json_ok({{"id_slot", a.id},
                                  {"filename", a.filename},
                                  {"n_restored", job->n_slot_tokens},
                                  {"n_read", job->n_slot_bytes},
                                  {"timings", {{"restore_ms", ms}}}});
            default: return c.json_ok({{"id_slot", a.id}, {"n_erased", job->n_slot_tokens}});
        }
    }
    // The prompt a chat request would get (tools rendered too: nothing is generated here).
    void apply_template(Call& c) {
        try {
            ParsedRequest pr = parse_request(parse_body(c.req.body), true, limits());
            c.json_ok({{"prompt", fe->chat_prompt(pr)}});
        } catch (const BadRequest& e) {
            c.error(400, e.what());
        } catch (const json::exception& e) {
            c.error(400, e.what());
        } catch (const Error& e) {
            c.error(400, e.what());
        }
    }
    // /v1/embeddings (OpenAI shape, pooled vectors only) and llama-server's /embedding(s) ([{index, embedding}],
    // embedding a list of one vector, or of one per token with --pooling none).
    void embeddings(Call& c) {
        if (!p.embeddings) return c.error(501, "this server does not serve embeddings: start it with --embeddings");
        const bool oai = c.req.path.rfind("/v1/", 0) == 0 || c.req.path == p.api_prefix + "/v1/embeddings";
        if (oai && *p.pooling == Pooling::NONE)
            return c.error(400,
                           "pooling 'none' gives one vector per token, which /v1/embeddings cannot return: use "
                           "/embeddings or another --pooling");
        EmbeddingRequest er;
        std::vector<std::vector<int32_t>> inputs;
        try {
            er = parse_embedding_request(parse_body(c.req.body), tok->n_vocab());
            for (const auto& in : er.inputs) {
                std::vector<int32_t> ids =
                    fe->tokenize_prompt(in, false);  // then BOS before, EOS after, as the vocab asks
                if (tok->add_bos() && tok->bos() >= 0 && (ids.empty() || ids[0] != tok->bos()))
                    ids.insert(ids.begin(), tok->bos());
                if (tok->add_eos() && tok->eos() >= 0 && (ids.empty() || ids.back() != tok->eos()))
                    ids.push_back(tok->eos());
                inputs.push_back(std::move(ids));
            }
        } catch (const BadRequest& e) {
            return c.error(400, e.what());
        } catch (const json::exception& e) {
            return c.error(400, e.what());
        }
        std::vector<std::shared_ptr<Job>> jobs;
        struct CancelAll {
            std::vector<std::shared_ptr<Job>>& jobs;
            ~CancelAll() {
                for (auto& j : jobs) j->cancel();
            }
        } cancel_all{jobs};
        for (auto& ids : inputs) {
            JobRequest jr;
            jr.prompt = std::move(ids);
            jr.embed = true;
            jr.pooling = *p.pooling;
            jr.embd_normalize = er.normalize;
            auto job = engine->submit(std::move(jr));
            if (!job)
                return c.error(503, engine->shutting_down() ? "the server is shutting down"
                                                            : "the server is busy (queue full); retry later");
            jobs.push_back(job);
        }
        json data = json::array();
        int n_tokens = 0;
        for (size_t i = 0; i < jobs.size(); i++) {
            if (!wait_quietly(*jobs[i], c)) return;
            if (!jobs[i]->error.empty()) return job_error(c, *jobs[i]);
            n_tokens += jobs[i]->n_prompt;
            const auto& e = jobs[i]->embedding;
            if (oai)
                data.push_back({{"object", "embedding"},
                                {"index", i},
                                {"embedding", er.base64 ? json(base64_floats(e[0])) : json(e[0])}});
            else data.push_back({{"index", i}, {"embedding", e}});
        }
        if (!oai) return c.json_ok(data);
        c.json_ok({{"object", "list"},
                   {"model", model_id},
                   {"data", data},
                   {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
    }
    void not_implemented(Call& c) {
        c.error(501, "this endpoint (" + c.req.path +
                         ") is not implemented by tandem (see README, llama-server compatibility)");
    }
    void tokenize(Call& c) {
        try {
            json b = parse_body(c.req.body);
            if (!b.is_object() || !b.contains("content") || !b["content"].is_string())
                throw BadRequest("'content' must be a string");
            bool add_special = b.value("add_special", false);
            bool parse_special = b.value("parse_special", true);
            bool with_pieces = b.value("with_pieces", false);
            auto ids = tok->encode(b["content"].get<std::string>(), add_special, parse_special);
            json toks = json::array();
            for (int32_t id : ids) {
                if (with_pieces) toks.push_back({{"id", id}, {"piece", tok->token_to_piece(id, true)}});
                else toks.push_back(id);
            }
            c.json_ok({{"tokens", toks}});
        } catch (const json::exception& e) {
            c.error(400, e.what());
        } catch (const BadRequest& e) {
            c.error(400, e.what());
        }
    }
    void detokenize(Call& c) {
        try {
            json b = parse_body(c.req.body);
            if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
                throw BadRequest("'tokens' must be an array of ids");
            std::vector<int32_t> ids;
            for (const auto& v : b["tokens"]) {
                if (!v.is_number_integer()) throw BadRequest("'tokens' must be an array of ids");
                int64_t id = v.get<int64_t>();
                if (id < 0 || id >= tok->n_vocab())
                    throw BadRequest(strprintf("token %lld is outside the vocabulary", (long long)id));
                ids.push_back(int32_t(id));
            }
            c.json_ok({{"content", tok->decode(ids, false)}});
        } catch (const json::exception& e) {
            c.error(400, e.what());
        } catch (const BadRequest& e) {
            c.error(400, e.what());
        }
    }

    void add_routes() {
        auto add = [&](const char* method, std::initializer_list<const char*> paths, Route r) {
            for (const char* path : paths) routes[path][method] = r;
        };
        add("GET", {"/health", "/v1/health"}, &Impl::health);
        add("GET", {"/", "/index.html"}, &Impl::index);
        add("GET", {"/sw.js"}, &Impl::service_worker);
        add("GET", {"/manifest.webmanifest"}, &Impl::manifest);
        add("POST", {"/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"}, &Impl::input_tokens);
        add("GET", {"/v1/models", "/models"}, &Impl::models);
        add("GET", {"/metrics"}, &Impl::metrics);
        add("GET", {"/props"}, &Impl::props_get);
        add("POST", {"/props"}, &Impl::props_post);
        add("GET", {"/slots"}, &Impl::slots);
        add("POST", {"/v1/chat/completions", "/chat/completions"}, &Impl::chat_completions);
        add("POST", {"/v1/completions"}, &Impl::completions);
        add("POST", {"/completion", "/completions"}, &Impl::completion_native);  // llama-server's native shape
        add("POST", {"/apply-template"}, &Impl::apply_template);
        add("POST", {"/tokenize"}, &Impl::tokenize);
        add("POST", {"/detokenize"}, &Impl::detokenize);
        add("POST", {"/embedding", "/embeddings", "/v1/embeddings"}, &Impl::embeddings);
        add("POST", {"/infill"}, &Impl::infill);
        add("POST", {"/v1/messages"}, &Impl::anthropic_messages);
        add("POST", {"/v1/responses", "/responses"}, &Impl::responses);
        add("POST", {"/v1/messages/count_tokens"}, &Impl::anthropic_count_tokens);
        add("POST", {"/rerank", "/reranking", "/v1/rerank"}, &Impl::not_implemented);
        add("GET", {"/lora-adapters"}, &Impl::not_implemented);
        add("POST", {"/lora-adapters"}, &Impl::not_implemented);
    }

    // Every request: access checks, then the route. Runs on a transport worker thread.
    void handle(const HttpRequest& req, Responder& res) {
        http_requests++;
        std::string path = req.path;
        if (!p.api_prefix.empty() && path.rfind(p.api_prefix, 0) == 0) path = path.substr(p.api_prefix.size());
        if (path.empty()) path = "/";
        std::string auth = req.header("authorization");
        if (auth.empty() && req.has_header("x-api-key"))
            auth = "Bearer " + req.header("x-api-key");  // llama-server accepts it
        AccessDecision d = check_access(policy, {req.method, path, req.header("host"), req.header("origin"), auth,
                                                 req.header("access-control-request-headers")});
        Call call{req, res, d.headers};
        if (d.status == 200) call.send(200, "text/plain", "");  // preflight
        else if (d.status) call.error(d.status, d.message);
        else dispatch(call, path);
        std::fprintf(stderr, "%s %s %d %zu bytes\n", req.method.c_str(), req.path.c_str(), call.status,
                     req.body.size());
    }

    void dispatch(Call& call, const std::string& path) {
        if (call.req.path.size() > 7 && path.rfind("/slots/", 0) == 0 && call.req.method == "POST") {
            if (!ready.load()) return call.error(503, "the model is loading", {{"Retry-After", "1"}});
            return slot_action(call, path);
        }
        auto it = routes.find(path);
        if (it == routes.end()) return call.error(404, "no such endpoint");
        auto m = it->second.find(call.req.method == "HEAD" ? std::string("GET")
                                                           : call.req.method);  // HEAD: GET without the body
        if (m == it->second.end()) {
            std::string allow;
            for (auto& [k, v] : it->second) allow += (allow.empty() ? "" : ", ") + k;
            return call.error(405, "method " + call.req.method + " is not allowed here (" + allow + ")",
                              {{"Allow", allow}});
        }
        const bool needs_model = path != "/health" && path != "/v1/health" && path != "/" && path != "/index.html" &&
                                 path != "/sw.js" && path != "/manifest.webmanifest";
        if (needs_model && !ready.load()) return call.error(503, "the model is loading", {{"Retry-After", "1"}});
        (this->*(m->second))(call);
    }
};

HttpServer::HttpServer(const ServeParams& p) : impl_(std::make_unique<Impl>()) {
    Impl& I = *impl_;
    I.p = p;
    bool all_loopback = true;  // Host checks apply when every listening address is a loopback one
    for (const std::string& h : split_list(p.host)) all_loopback = all_loopback && loopback_address(h);
    I.policy = {p.api_key, all_loopback, p.allowed_hosts, p.cors_origins};
    I.add_routes();
    TransportParams tp;
    tp.max_body_bytes = p.max_body_bytes;
    tp.workers = p.http_threads;
    tp.body_timeout_s = p.timeout_s;
    tp.write_timeout_s = p.timeout_s;
    tp.header_timeout_s = std::min(p.timeout_s, 10);
    I.transport = std::make_unique<HttpTransport>(
        tp, [&I](const HttpRequest& req, Responder& res) { I.handle(req, res); },
        [](int status, const std::string& msg) { return dump(error_body(msg, error_type(status), status)); });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
    for (const std::string& h : split_list(impl_->p.host))  // llama-server's --host a,b: every address, one port
        impl_->transport->listen(h, impl_->p.port);
    impl_->transport->start();
}

void HttpServer::set_ready(std::shared_ptr<const Model> model, std::shared_ptr<Engine> engine) {
    Impl& I = *impl_;
    I.model = model;
    I.engine = engine;
    I.fe = std::make_unique<FrontEnd>(
        *model, FrontEndOptions{I.p.chat_template, I.p.chat_template_text, I.p.jinja, I.p.chat_template_kwargs});
    I.tok = &I.fe->tokenizer();
    I.chat = &I.fe->chat();
    if (I.p.embeddings && !I.p.pooling) I.p.pooling = default_pooling(model->gguf());
    if (!I.p.grammar.empty()) I.default_grammar = grammar::parse_gbnf(I.p.grammar);  // --grammar / --grammar-file
    std::string path = model->path();
    // The id is shown by /v1/models and in every response: made valid UTF-8 once, here.
    // --alias A,B,C: A is the id, all are aliases (llama-server); --tags likewise.
    auto split = [](const std::string& v) {
        json out = json::array();
        for (const std::string& item : split_list(v)) out.push_back(valid_utf8(item));
        return out;
    };
    I.aliases = split(I.p.alias);
    I.tags = split(I.p.tags);
    std::sort(I.aliases.begin(), I.aliases.end());  // llama-server keeps them in a std::set: the id is the first
    I.model_id =
        !I.aliases.empty() ? I.aliases[0].get<std::string>() : valid_utf8(path.substr(path.find_last_of('/') + 1));
    if (I.aliases.empty()) I.aliases.push_back(I.model_id);
    I.ready.store(true);
    std::fprintf(stderr, "ready: model %s, chat template %s\n", I.model_id.c_str(), I.chat->description().c_str());
}

void HttpServer::set_spec_defaults(const SpecParams& sp) { impl_->engine_spec_defaults = sp; }
void HttpServer::stop_accepting() { impl_->transport->stop_accepting(); }
bool HttpServer::wait_idle(int timeout_ms) { return impl_->transport->wait_idle(timeout_ms); }
void HttpServer::stop() { impl_->transport->stop(); }
int HttpServer::port() const { return impl_->transport->port(); }

}  // namespace tandem::server
