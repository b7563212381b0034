#include "server/http_server.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "serve/access.h"
#include "serve/engine.h"
#include "serve/openai.h"
#include "server/http_transport.h"
#include "server/webui.h"
#include "tandem/chat.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

using nlohmann::json;

namespace {

// JSON text; strings that quote the (possibly invalid UTF-8) input get U+FFFD instead of a throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string random_id(const char* prefix) {
    static std::atomic<uint64_t> counter{0};
    uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    return strprintf("%s%llx%llx", prefix, (unsigned long long)(t & 0xffffffffff), (unsigned long long)counter++);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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

    void send(int st, const std::string& type, const std::string& body, Headers extra = {}) {
        status = st;
        extra.insert(extra.end(), cors.begin(), cors.end());
        res.send(st, type, body, extra);
    }
    void json_ok(const json& j) { send(200, "application/json", dump(j)); }
    void error(int st, const std::string& msg, Headers extra = {}) {
        send(st, "application/json", dump(error_body(msg, error_type(st), st)), std::move(extra));
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
    std::unique_ptr<Tokenizer> tok;
    ChatTemplate tmpl = ChatTemplate::CHATML;
    std::string model_id;
    SpecParams engine_spec_defaults;
    std::atomic<uint64_t> http_requests{0};
    using Route = void (Impl::*)(Call&);
    std::map<std::string, std::map<std::string, Route>> routes;  // path -> method -> handler

    // --- helpers -------------------------------------------------------------------------------------------
    std::vector<int32_t> build_prompt(const ParsedRequest& r, bool chat) {
        if (chat) return tok->encode(render_chat(tmpl, r.messages, true), true, true);
        if (r.prompt_is_ids) return r.prompt_ids;
        return tok->encode(r.prompt_text, true, true);
    }

    json timings_of(const Job& j) {
        return {{"prompt_n", j.n_prompt}, {"prompt_ms", j.prompt_ms},
                {"prompt_per_second", j.prompt_ms > 0 ? j.n_prompt / (j.prompt_ms / 1e3) : 0.0},
                {"predicted_n", j.n_generated}, {"predicted_ms", j.gen_ms},
                {"predicted_per_second", j.gen_ms > 0 ? j.n_generated / (j.gen_ms / 1e3) : 0.0},
                {"draft_n", j.n_drafted}, {"draft_n_accepted", j.n_accepted}};
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

    // Parses + validates + builds the prompt; on failure answers 400 and returns false.
    bool prepare(Call& call, bool chat, ParsedRequest& out) {
        try {
            json body = parse_body(call.req.body);
            ServerLimits lim{tok->n_vocab(), 8, engine->has_draft(), engine_spec_defaults};
            out = parse_request(body, chat, lim);
            out.job.prompt = build_prompt(out, chat);
            if (out.job.prompt.empty()) throw BadRequest("the prompt is empty");
            const int n_ctx = engine->n_ctx();
            if (int(out.job.prompt.size()) >= n_ctx) {
                if (out.truncate_prompt_tokens > 0 && out.truncate_prompt_tokens < n_ctx) {
                    out.job.prompt.erase(out.job.prompt.begin(), out.job.prompt.end() - out.truncate_prompt_tokens);
                } else {
                    throw BadRequest(strprintf("the prompt is %zu tokens, the context is %d (ask for truncation with "
                                               "'truncate_prompt_tokens')", out.job.prompt.size(), n_ctx));
                }
            }
            const int room = n_ctx - int(out.job.prompt.size());
            out.job.max_tokens = std::min(out.job.max_tokens, room);  // clamped to the context
        } catch (const BadRequest& e) {
            call.error(400, e.what());
            return false;
        } catch (const json::exception& e) {
            call.error(400, e.what());
            return false;
        }
        return true;
    }

    void chat_completions(Call& c) { generate(c, true); }
    void completions(Call& c) { generate(c, false); }

    void generate(Call& call, bool chat) {
        ParsedRequest pr;
        if (!prepare(call, chat, pr)) return;
        std::vector<std::shared_ptr<Job>> jobs;
        for (int i = 0; i < pr.n; i++) {
            JobRequest jr = pr.job;
            jr.sampling.seed = derive_seed(pr.job.sampling.seed, uint64_t(i));  // choice 0 keeps the request's seed
            auto job = engine->submit(std::move(jr));
            if (!job) {
                for (auto& j : jobs) j->cancel();
                if (engine->shutting_down()) call.error(503, "the server is shutting down", {{"Connection", "close"}});
                else call.error(503, "the server is busy (queue full); retry later", {{"Retry-After", "1"}});
                return;
            }
            jobs.push_back(job);
        }
        const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
        const int64_t created = unix_time();
        if (pr.stream) stream_response(call, jobs, pr, chat, id, created);
        else blocking_response(call, jobs, pr, chat, id, created);
        for (auto& j : jobs) j->cancel();  // no-op for finished jobs; frees the slot when the client went away
    }

    // A failed job answers with its own status (400 for input the engine refused, 503 at shutdown, 500).
    void job_error(Call& call, const Job& job) { call.error(job.error_status, job.error); }

    // Non-streaming: everything is generated before the status line is written, so the status is always right.
    // A client that goes away meanwhile is noticed (the socket is polled) and its jobs are cancelled.
    void blocking_response(Call& call, const std::vector<std::shared_ptr<Job>>& jobs, const ParsedRequest& pr, bool chat,
                           const std::string& id, int64_t created) {
        json choices = json::array();
        int completion_tokens = 0, prompt_tokens = 0;
        json timings;
        for (size_t c = 0; c < jobs.size(); c++) {
            auto& job = jobs[c];
            TextPipeline text(*tok, pr.stop);
            std::string content;
            std::vector<int32_t> toks;
            std::vector<TokenLogprob> lps, all_lps;
            for (bool more = true; more;) {
                toks.clear();
                lps.clear();
                more = job->wait(toks, lps, 100);
                content += text.push(toks);
                all_lps.insert(all_lps.end(), lps.begin(), lps.end());
                if (text.stopped()) job->cancel();
                if (more && call.res.client_gone()) return;
            }
            content += text.finish();
            if (!job->error.empty()) return job_error(call, *job);
            std::string finish = text.stopped() || job->finish_reason == "stop" ? "stop" : "length";
            json choice = {{"index", c}, {"finish_reason", finish}};
            if (chat) {
                choice["message"] = {{"role", "assistant"}, {"content", content}};
                choice["logprobs"] = pr.logprobs ? json{{"content", logprob_list(all_lps)}} : json(nullptr);
            } else {
                choice["text"] = content;
                choice["logprobs"] = pr.logprobs ? completion_logprobs(all_lps) : json(nullptr);
            }
            choices.push_back(choice);
            completion_tokens += job->n_generated;
            prompt_tokens = job->n_prompt;
            timings = timings_of(*job);
        }
        call.json_ok({{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                      {"model", model_id}, {"system_fingerprint", "tandem"}, {"choices", choices},
                      {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                 {"total_tokens", prompt_tokens + completion_tokens}}},
                      {"timings", timings}});
    }

    json logprob_list(const std::vector<TokenLogprob>& lps) {
        json a = json::array();
        for (const auto& e : lps) a.push_back(logprob_entry(e));
        return a;
    }

    // Streaming: the status line waits for the first job's first result, so a request that fails before it
    // generates anything (shutdown, a refused input) still gets its 4xx/5xx status; a failure after that is
    // sent as an error event and the stream ends.
    void stream_response(Call& call, const std::vector<std::shared_ptr<Job>>& jobs, const ParsedRequest& pr, bool chat,
                         const std::string& id, int64_t created) {
        std::vector<int32_t> toks;
        std::vector<TokenLogprob> lps;
        bool more = true;
        for (;;) {  // first result of the first job
            more = jobs[0]->wait(toks, lps, 100);
            if (!toks.empty() || !more) break;
            if (call.res.client_gone()) return;
        }
        if (!more && toks.empty() && !jobs[0]->error.empty()) return job_error(call, *jobs[0]);
        if (!call.begin_stream("text/event-stream")) return;
        Responder& sink = call.res;
        auto send = [&](const json& j) { return sink.write("data: " + dump(j) + "\n\n"); };
        auto chunk = [&](size_t index, const json& delta_or_text, const json& finish, const json& logprobs) {
            json choice = {{"index", index}, {"finish_reason", finish}};
            if (chat) choice["delta"] = delta_or_text;
            else choice["text"] = delta_or_text;
            if (!logprobs.is_null()) choice["logprobs"] = logprobs;
            return json{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                        {"model", model_id}, {"system_fingerprint", "tandem"}, {"choices", json::array({choice})}};
        };
        int completion_tokens = 0, prompt_tokens = 0;
        for (size_t c = 0; c < jobs.size(); c++) {
            auto& job = jobs[c];
            if (chat && !send(chunk(c, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return;
            TextPipeline text(*tok, pr.stop);
            bool have = c == 0;  // the first job's first result is already in toks/lps
            for (;;) {
                if (!have) {
                    toks.clear();
                    lps.clear();
                    more = job->wait(toks, lps, 100);
                }
                have = false;
                std::string piece = text.push(toks);
                if (text.stopped()) job->cancel();
                json lp = nullptr;
                if (pr.logprobs && !lps.empty()) lp = chat ? json{{"content", logprob_list(lps)}} : completion_logprobs(lps);
                bool ok = true;
                if (!piece.empty() || !lp.is_null()) ok = send(chunk(c, chat ? json{{"content", piece}} : json(piece), nullptr, lp));
                else if (more) ok = sink.write("");  // nothing to say: is the client still there?
                if (!ok) return;
                if (!more) break;
            }
            std::string rest = text.finish();
            if (!job->error.empty()) {
                send(error_body(job->error, error_type(job->error_status), job->error_status));
                sink.end_stream();
                return;
            }
            std::string finish = text.stopped() || job->finish_reason == "stop" ? "stop" : "length";
            json last = chunk(c, chat ? (rest.empty() ? json::object() : json{{"content", rest}}) : json(rest), finish, nullptr);
            last["timings"] = timings_of(*job);
            if (!send(last)) return;
            completion_tokens += job->n_generated;
            prompt_tokens = job->n_prompt;
        }
        if (pr.include_usage) {
            json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                      {"model", model_id}, {"choices", json::array()},
                      {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                 {"total_tokens", prompt_tokens + completion_tokens}}}};
            send(u);
        }
        sink.write("data: [DONE]\n\n");
        sink.end_stream();
    }

    std::string metrics_text() {
        EngineMetrics m = engine->metrics();
        std::string s;
        auto metric = [&](const char* name, const char* type, const char* help, double v) {
            s += strprintf("# HELP tandem_%s %s\n# TYPE tandem_%s %s\ntandem_%s %.17g\n", name, help, name, type, name, v);
        };
        metric("requests_total", "counter", "Generation requests accepted.", double(m.requests));
        metric("http_requests_total", "counter", "HTTP requests served.", double(http_requests.load()));
        metric("prompt_tokens_total", "counter", "Prompt tokens processed.", double(m.tokens_prompt));
        metric("tokens_predicted_total", "counter", "Tokens generated.", double(m.tokens_generated));
        metric("prompt_seconds_total", "counter", "Seconds spent on prompts.", m.seconds_prompt);
        metric("tokens_predicted_seconds_total", "counter", "Seconds spent generating.", m.seconds_generated);
        metric("requests_deferred", "gauge", "Requests waiting in the queue.", m.queue_depth);
        metric("slots_busy", "gauge", "Slots generating now.", m.busy_slots);
        metric("slots_total", "gauge", "Slots.", m.n_slots);
        metric("kv_cache_usage_ratio", "gauge", "Fraction of the KV cache in use.", m.kv_used_fraction);
        metric("spec_decode_num_drafts", "counter", "Verification rounds that had a draft.", double(m.spec_drafts));
        metric("spec_decode_num_draft_tokens", "counter", "Drafted tokens verified.", double(m.spec_draft_tokens));
        metric("spec_decode_num_accepted_tokens", "counter", "Drafted tokens accepted.", double(m.spec_accepted));
        s += "# HELP tandem_spec_decode_num_accepted_tokens_per_pos Drafted tokens accepted, by position in the draft.\n"
             "# TYPE tandem_spec_decode_num_accepted_tokens_per_pos counter\n";
        for (size_t i = 0; i < m.accepted_per_pos.size(); i++)
            s += strprintf("tandem_spec_decode_num_accepted_tokens_per_pos{position=\"%zu\"} %llu\n", i,
                           (unsigned long long)m.accepted_per_pos[i]);
        return s;
    }

    // --- routes ------------------------------------------------------------------------------------------
    void health(Call& c) {
        if (!ready.load()) return c.error(503, "Loading model", {{"Retry-After", "1"}});
        c.send(200, "application/json", R"({"status":"ok"})");
    }
    void index(Call& c) { c.send(200, "text/html; charset=utf-8", kWebUi); }
    void models(Call& c) {
        const HParams& hp = model->hparams();
        json m = {{"id", model_id}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "tandem"},
                  {"meta", {{"vocab_type", tok->model_name()}, {"n_vocab", hp.n_vocab}, {"n_ctx_train", hp.n_ctx_train},
                            {"n_ctx", engine->n_ctx()}, {"n_embd", hp.n_embd}, {"n_params", model->n_params()},
                            {"size", model->weights_bytes()}}}};
        c.json_ok({{"object", "list"}, {"data", json::array({m})}});
    }
    void metrics(Call& c) { c.send(200, "text/plain; version=0.0.4", metrics_text()); }
    void tokenize(Call& c) {
        try {
            json b = parse_body(c.req.body);
            if (!b.is_object() || !b.contains("content") || !b["content"].is_string()) throw BadRequest("'content' must be a string");
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
            if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array()) throw BadRequest("'tokens' must be an array of ids");
            std::vector<int32_t> ids;
            for (const auto& v : b["tokens"]) {
                if (!v.is_number_integer()) throw BadRequest("'tokens' must be an array of ids");
                int64_t id = v.get<int64_t>();
                if (id < 0 || id >= tok->n_vocab()) throw BadRequest(strprintf("token %lld is outside the vocabulary", (long long)id));
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
        add("GET", {"/health"}, &Impl::health);
        add("GET", {"/", "/index.html"}, &Impl::index);
        add("GET", {"/v1/models", "/models"}, &Impl::models);
        add("GET", {"/metrics"}, &Impl::metrics);
        add("POST", {"/v1/chat/completions", "/chat/completions"}, &Impl::chat_completions);
        add("POST", {"/v1/completions", "/completions"}, &Impl::completions);
        add("POST", {"/tokenize"}, &Impl::tokenize);
        add("POST", {"/detokenize"}, &Impl::detokenize);
    }

    // Every request: access checks, then the route. Runs on a transport worker thread.
    void handle(const HttpRequest& req, Responder& res) {
        http_requests++;
        AccessDecision d = check_access(policy, {req.method, req.path, req.header("host"), req.header("origin"),
                                                 req.header("authorization"), req.header("access-control-request-headers")});
        Call call{req, res, d.headers};
        if (d.status == 204) call.send(204, "", "");
        else if (d.status) call.error(d.status, d.message);
        else dispatch(call);
        std::fprintf(stderr, "%s %s %d %zu bytes\n", req.method.c_str(), req.path.c_str(), call.status, req.body.size());
    }

    void dispatch(Call& call) {
        auto it = routes.find(call.req.path);
        if (it == routes.end()) return call.error(404, "no such endpoint");
        auto m = it->second.find(call.req.method);
        if (m == it->second.end()) {
            std::string allow;
            for (auto& [k, v] : it->second) allow += (allow.empty() ? "" : ", ") + k;
            return call.error(405, "method " + call.req.method + " is not allowed here (" + allow + ")", {{"Allow", allow}});
        }
        const bool needs_model = call.req.path != "/health" && call.req.path != "/" && call.req.path != "/index.html";
        if (needs_model && !ready.load()) return call.error(503, "the model is loading", {{"Retry-After", "1"}});
        (this->*(m->second))(call);
    }
};

HttpServer::HttpServer(const ServeParams& p) : impl_(std::make_unique<Impl>()) {
    Impl& I = *impl_;
    I.p = p;
    I.policy = {p.api_key, loopback_address(p.host), p.allowed_hosts, p.cors_origins};
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
    impl_->transport->listen(impl_->p.host, impl_->p.port);
    impl_->transport->start();
}

void HttpServer::set_ready(std::shared_ptr<const Model> model, std::shared_ptr<Engine> engine) {
    Impl& I = *impl_;
    I.model = model;
    I.engine = engine;
    I.tok = Tokenizer::from_gguf(model->gguf());
    if (!I.p.chat_template.empty()) {
        auto t = chat_template_from_name(I.p.chat_template);
        if (!t) throw Error("unknown --chat-template '" + I.p.chat_template + "' (chatml, llama2, llama3, mistral, phi3, gemma, zephyr, deepseek, deepseek3)");
        I.tmpl = *t;
    } else {
        auto jinja = model->gguf().get_str("tokenizer.chat_template").value_or("");
        auto t = detect_chat_template(jinja);
        if (t) I.tmpl = *t;
        else std::fprintf(stderr, "warning: %s; using ChatML\n", jinja.empty() ? "the model has no chat template" : "the model's chat template is not recognised");
    }
    std::string path = model->path();
    // The id is shown by /v1/models and in every response: made valid UTF-8 once, here.
    I.model_id = valid_utf8(!I.p.alias.empty() ? I.p.alias : path.substr(path.find_last_of('/') + 1));
    I.ready.store(true);
    std::fprintf(stderr, "ready: model %s, chat template %s\n", I.model_id.c_str(), chat_template_name(I.tmpl));
}

void HttpServer::set_spec_defaults(const SpecParams& sp) { impl_->engine_spec_defaults = sp; }
void HttpServer::stop_accepting() { impl_->transport->stop_accepting(); }
bool HttpServer::wait_idle(int timeout_ms) { return impl_->transport->wait_idle(timeout_ms); }
void HttpServer::stop() { impl_->transport->stop(); }
int HttpServer::port() const { return impl_->transport->port(); }

}  // namespace tandem::server
