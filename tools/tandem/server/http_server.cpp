#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/engine.h"
#include "server/openai.h"
#include "server/webui.h"
#include "tandem/chat.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

using nlohmann::json;

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

void send_error(httplib::Response& res, int status, const std::string& msg, const std::string& type) {
    res.status = status;
    // Messages may quote the offending (possibly invalid UTF-8) input: replace bad bytes rather than throw.
    res.set_content(error_body(msg, type, status).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

std::string random_id(const char* prefix) {
    static std::atomic<uint64_t> counter{0};
    uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    return strprintf("%s%llx%llx", prefix, (unsigned long long)(t & 0xffffffffff), (unsigned long long)counter++);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct HttpServer::Impl {
    ServeParams p;
    httplib::Server svr;
    std::thread thread;
    int bound_port = 0;
    std::atomic<bool> ready{false};
    std::shared_ptr<const Model> model;
    std::shared_ptr<Engine> engine;
    std::unique_ptr<Tokenizer> tok;
    ChatTemplate tmpl = ChatTemplate::CHATML;
    std::string model_id;
    std::atomic<uint64_t> http_requests{0}, http_errors{0};

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

    // Parses + validates + builds the prompt; on failure writes the 400 and returns false.
    bool prepare(const httplib::Request& req, httplib::Response& res, bool chat, ParsedRequest& out) {
        try {
            json body = parse_body(req.body);
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
            send_error(res, 400, e.what(), "invalid_request_error");
            return false;
        } catch (const json::exception& e) {
            send_error(res, 400, e.what(), "invalid_request_error");
            return false;
        }
        return true;
    }

    SpecParams engine_spec_defaults;

    void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
        ParsedRequest pr;
        if (!prepare(req, res, chat, pr)) return;
        std::vector<std::shared_ptr<Job>> jobs;
        for (int i = 0; i < pr.n; i++) {
            JobRequest jr = pr.job;
            jr.sampling.seed += uint64_t(i);
            auto job = engine->submit(std::move(jr));
            if (!job) {
                for (auto& j : jobs) j->cancel();
                res.set_header("Retry-After", "1");
                send_error(res, 503, "the server is busy (queue full); retry later", "unavailable_error");
                return;
            }
            jobs.push_back(job);
        }
        const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
        const int64_t created = unix_time();
        if (pr.stream) stream_response(res, jobs, pr, chat, id, created);
        else blocking_response(res, jobs, pr, chat, id, created);
    }

    void blocking_response(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs, const ParsedRequest& pr,
                           bool chat, const std::string& id, int64_t created) {
        // Chunked so that a client that goes away is noticed: whitespace is written while waiting (valid before
        // a JSON document) and a failed write cancels the generation.
        auto state = std::make_shared<bool>(false);
        res.set_chunked_content_provider("application/json", [this, jobs, pr, chat, id, created, state](size_t, httplib::DataSink& sink) {
            json choices = json::array();
            int completion_tokens = 0, prompt_tokens = 0;
            json timings;
            for (size_t c = 0; c < jobs.size(); c++) {
                auto& job = jobs[c];
                TextPipeline text(*tok, pr.stop);
                std::string content;
                std::vector<int32_t> toks;
                std::vector<TokenLogprob> lps, all_lps;
                bool more = true;
                while (more) {
                    toks.clear();
                    lps.clear();
                    more = job->wait(toks, lps, 100);
                    content += text.push(toks);
                    all_lps.insert(all_lps.end(), lps.begin(), lps.end());
                    if (text.stopped()) { job->cancel(); }
                    if (more && !sink.write(" ", 1)) {
                        for (auto& j : jobs) j->cancel();
                        return false;
                    }
                }
                content += text.finish();
                if (!job->error.empty()) {
                    std::string err = error_body(job->error, "server_error", 500).dump(-1, ' ', false, json::error_handler_t::replace);
                    sink.write(err.data(), err.size());
                    sink.done();
                    return true;
                }
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
            json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                        {"model", model_id}, {"system_fingerprint", "tandem"}, {"choices", choices},
                        {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                   {"total_tokens", prompt_tokens + completion_tokens}}},
                        {"timings", timings}};
            std::string s = out.dump(-1, ' ', false, json::error_handler_t::replace);
            sink.write(s.data(), s.size());
            sink.done();
            return true;
        }, [jobs](bool) { for (auto& j : jobs) j->cancel(); });
    }

    json logprob_list(const std::vector<TokenLogprob>& lps) {
        json a = json::array();
        for (const auto& e : lps) a.push_back(logprob_entry(e));
        return a;
    }

    void stream_response(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs, const ParsedRequest& pr,
                         bool chat, const std::string& id, int64_t created) {
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider("text/event-stream", [this, jobs, pr, chat, id, created](size_t, httplib::DataSink& sink) {
            auto send = [&](const json& j) {
                std::string s = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
                return sink.write(s.data(), s.size());
            };
            auto chunk = [&](size_t index, const json& delta_or_text, const json& finish, const json& logprobs) {
                json choice = {{"index", index}, {"finish_reason", finish}};
                if (chat) choice["delta"] = delta_or_text;
                else choice["text"] = delta_or_text;
                if (!logprobs.is_null()) choice["logprobs"] = logprobs;
                return json{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                            {"model", model_id}, {"system_fingerprint", "tandem"}, {"choices", json::array({choice})}};
            };
            int completion_tokens = 0, prompt_tokens = 0;
            json timings;
            for (size_t c = 0; c < jobs.size(); c++) {
                auto& job = jobs[c];
                if (chat && !send(chunk(c, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) {
                    for (auto& j : jobs) j->cancel();
                    return false;
                }
                TextPipeline text(*tok, pr.stop);
                std::vector<int32_t> toks;
                std::vector<TokenLogprob> lps;
                bool more = true;
                while (more) {
                    toks.clear();
                    lps.clear();
                    more = job->wait(toks, lps, 100);
                    std::string piece = text.push(toks);
                    if (text.stopped()) job->cancel();
                    json lp = nullptr;
                    if (pr.logprobs && !lps.empty()) lp = chat ? json{{"content", logprob_list(lps)}} : completion_logprobs(lps);
                    bool ok = true;
                    if (!piece.empty() || !lp.is_null())
                        ok = send(chunk(c, chat ? json{{"content", piece}} : json(piece), nullptr, lp));
                    else if (more) ok = sink.is_writable();
                    if (!ok) {
                        for (auto& j : jobs) j->cancel();
                        return false;
                    }
                }
                std::string rest = text.finish();
                if (!job->error.empty()) {
                    send(error_body(job->error, "server_error", 500));
                    sink.done();
                    return true;
                }
                std::string finish = text.stopped() || job->finish_reason == "stop" ? "stop" : "length";
                json last = chunk(c, chat ? (rest.empty() ? json::object() : json{{"content", rest}}) : json(rest), finish, nullptr);
                last["timings"] = timings_of(*job);
                if (!send(last)) return false;
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
            std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            sink.done();
            return true;
        }, [jobs](bool) { for (auto& j : jobs) j->cancel(); });
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

    void routes() {
        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            http_requests++;
            const bool open = req.path == "/health" || req.path == "/v1/models" || req.path == "/models" || req.path == "/" ||
                              req.path == "/index.html";
            if (!p.api_key.empty() && !open) {
                std::string auth = req.get_header_value("Authorization");
                const std::string prefix = "Bearer ";
                if (auth.rfind(prefix, 0) != 0 || !constant_time_equal(auth.substr(prefix.size()), p.api_key)) {
                    send_error(res, 401, "invalid or missing API key", "authentication_error");
                    return httplib::Server::HandlerResponse::Handled;
                }
            }
            if (!ready.load() && req.path != "/health" && req.path != "/" && req.path != "/index.html") {
                res.set_header("Retry-After", "1");
                send_error(res, 503, "the model is loading", "unavailable_error");
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
        svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            http_errors++;
            std::string what = "internal error";
            try {
                if (ep) std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            send_error(res, 500, what, "server_error");
        });
        svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
            if (!res.body.empty()) return;
            std::string type = res.status == 404 ? "not_found_error" : res.status == 413 ? "invalid_request_error" : "server_error";
            std::string msg = res.status == 404 ? "no such endpoint" : res.status == 413 ? "request body too large" : "HTTP error";
            send_error(res, res.status, msg, type);
        });
        svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
            std::fprintf(stderr, "%s %s %d %zu bytes\n", req.method.c_str(), req.path.c_str(), res.status, req.body.size());
        });

        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            if (!ready.load()) {
                res.set_header("Retry-After", "1");
                send_error(res, 503, "Loading model", "unavailable_error");
                return;
            }
            res.set_content(R"({"status":"ok"})", "application/json");
        });
        auto index = [](const httplib::Request&, httplib::Response& res) { res.set_content(kWebUi, "text/html; charset=utf-8"); };
        svr.Get("/", index);
        svr.Get("/index.html", index);
        auto models = [this](const httplib::Request&, httplib::Response& res) {
            const HParams& hp = model->hparams();
            json m = {{"id", model_id}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "tandem"},
                      {"meta", {{"vocab_type", tok->model_name()}, {"n_vocab", hp.n_vocab}, {"n_ctx_train", hp.n_ctx_train},
                                {"n_ctx", engine->n_ctx()}, {"n_embd", hp.n_embd}, {"n_params", model->n_params()},
                                {"size", model->weights_bytes()}}}};
            res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
        };
        svr.Get("/v1/models", models);
        svr.Get("/models", models);
        svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics_text(), "text/plain; version=0.0.4");
        });
        svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); });
        svr.Post("/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); });
        svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); });
        svr.Post("/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); });
        svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
            try {
                json b = parse_body(req.body);
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
                res.set_content(json{{"tokens", toks}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
            } catch (const json::exception& e) {
                send_error(res, 400, e.what(), "invalid_request_error");
            } catch (const BadRequest& e) {
                send_error(res, 400, e.what(), "invalid_request_error");
            }
        });
        svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
            try {
                json b = parse_body(req.body);
                if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array()) throw BadRequest("'tokens' must be an array of ids");
                std::vector<int32_t> ids;
                for (const auto& v : b["tokens"]) {
                    if (!v.is_number_integer()) throw BadRequest("'tokens' must be an array of ids");
                    int64_t id = v.get<int64_t>();
                    if (id < 0 || id >= tok->n_vocab()) throw BadRequest(strprintf("token %lld is outside the vocabulary", (long long)id));
                    ids.push_back(int32_t(id));
                }
                res.set_content(json{{"content", tok->decode(ids, false)}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
            } catch (const json::exception& e) {
                send_error(res, 400, e.what(), "invalid_request_error");
            } catch (const BadRequest& e) {
                send_error(res, 400, e.what(), "invalid_request_error");
            }
        });
    }
};

HttpServer::HttpServer(const ServeParams& p) : impl_(std::make_unique<Impl>()) {
    impl_->p = p;
    impl_->svr.set_payload_max_length(p.max_body_bytes);
    impl_->svr.set_read_timeout(15, 0);
    impl_->svr.set_write_timeout(15, 0);
    impl_->svr.set_keep_alive_max_count(100);
    const int n = p.http_threads;
    impl_->svr.new_task_queue = [n] { return new httplib::ThreadPool(size_t(n)); };
    impl_->routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
    Impl& I = *impl_;
    if (I.p.port == 0) I.bound_port = I.svr.bind_to_any_port(I.p.host);
    else I.bound_port = I.svr.bind_to_port(I.p.host, I.p.port) ? I.p.port : -1;
    if (I.bound_port <= 0) throw Error(strprintf("cannot listen on %s:%d", I.p.host.c_str(), I.p.port));
    I.thread = std::thread([&I] { I.svr.listen_after_bind(); });
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
    I.model_id = !I.p.alias.empty() ? I.p.alias : path.substr(path.find_last_of('/') + 1);
    I.ready.store(true);
    std::fprintf(stderr, "ready: model %s, chat template %s\n", I.model_id.c_str(), chat_template_name(I.tmpl));
}

void HttpServer::set_spec_defaults(const SpecParams& sp) { impl_->engine_spec_defaults = sp; }

void HttpServer::wait() {
    if (impl_->thread.joinable()) impl_->thread.join();
}

void HttpServer::stop() {
    if (impl_->svr.is_running()) impl_->svr.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::port() const { return impl_->bound_port; }

}  // namespace tandem::server
