// The server's routes without HTTP (tandem/server.h): each parses its request through the model's front end,
// submits jobs to the engine, and answers through a dialect (dialect.h).
#include <algorithm>
#include <ctime>
#include <mutex>

#include "grammar/grammar.h"
#include "serve/access.h"
#include "serve/anthropic.h"
#include "serve/answer_json.h"
#include "serve/dialect.h"
#include "serve/embeddings.h"
#include "serve/engine.h"
#include "serve/front_end.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "tandem/chat.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/server.h"
#include "tandem/strings.h"
#include "tandem/suffix_cache.h"
#include "tandem/tokenizer.h"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

namespace tandem::server {

std::string HttpRequest::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (k == name) return v;
    return {};
}

bool HttpRequest::has_header(std::string_view name) const {
    for (const auto& h : headers)
        if (h.first == name) return true;
    return false;
}

std::string error_json(int status, const std::string& message) {
    return dump(error_body(message, error_type(status), status));
}

void Call::send(int st, const std::string& type, const std::string& body, Headers extra) {
    status = st;
    extra.insert(extra.end(), cors.begin(), cors.end());
    res.send(st, type, body, extra);
}
void Call::json_ok(const json& j) { send(200, "application/json", dump(j)); }
void Call::error(int st, const std::string& msg, Headers extra) {
    send(st, "application/json", dump(anthropic ? anthropic_error(st, msg) : error_body(msg, error_type(st), st)),
         std::move(extra));
}
bool Call::begin_stream(const std::string& type) {
    status = 200;
    Headers h = {{"Cache-Control", "no-cache"}};
    h.insert(h.end(), cors.begin(), cors.end());
    return res.begin_stream(200, type, h);
}

namespace {

bool loopback_address(const std::string& host) {
    return is_loopback_host(host_without_port(host)) || host == "::1" || host == "[::1]";
}

// Runs a route body; request problems become 400s in the route's error shape.
template <class F>
void answer_400s(Call& c, F&& f) {
    try {
        f();
    } catch (const BadRequest& e) {
        c.error(400, e.what());
    } catch (const json::exception& e) {
        c.error(400, json_error_text(e));
    }
}

}  // namespace

struct Service::Impl {
    ServeParams p;
    AccessPolicy policy;
    std::atomic<bool> ready{false};
    std::atomic<bool> draining{false};  // drain() or shutdown() was called: /health answers 503
    std::atomic<uint64_t> http_requests{0};
    int64_t start_time = unix_time();
    std::shared_ptr<const Model> model, draft_model;  // draft_model: -md (null without)
    std::shared_ptr<Engine> engine;
    std::unique_ptr<FrontEnd> fe;  // the model's request front end (front_end.h)
    std::unique_ptr<AnswerContext> answers;  // what the dialects write from
    SpecParams spec_defaults;
    std::shared_ptr<const grammar::Grammar> default_grammar;  // --grammar
    json aliases = json::array(), tags = json::array();

    const Tokenizer& tok() const { return fe->tokenizer(); }

    // The request defaults and limits of this server (its flags).
    ServerLimits limits() const {
        ServerLimits lim;
        lim.n_vocab = tok().n_vocab();
        lim.max_n = 8;
        lim.has_draft = engine->has_draft();
        lim.has_mtp = engine->has_mtp();
        lim.has_eagle3 = engine->has_eagle3();
        lim.draft_model = draft_model;
        lim.parallel_tool_calls = fe->parallel_tool_calls();
        lim.spec_defaults = spec_defaults;
        lim.sampling = p.sampling;
        lim.n_predict = p.n_predict;
        lim.ignore_eos = p.ignore_eos;
        lim.tokenize = [this](const std::string& text) { return tok().encode(text, false, true); };
        lim.default_grammar = default_grammar;
        return lim;
    }

    // FrontEnd::prepare; on failure answers 400 (501 for what the model cannot do) and returns false.
    bool prepare(Call& call, Api api, bool infill, FrontEnd::Prepared& out) {
        try {
            out = fe->prepare(call.req.body, api, infill, limits(), engine->n_ctx());
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

    // Submits every job or none: a full queue or a shutdown cancels those already queued and answers 503.
    bool submit_all(Call& call, std::vector<JobRequest> reqs, std::vector<std::shared_ptr<Job>>& jobs) {
        for (auto& jr : reqs) {
            auto job = engine->submit(std::move(jr));
            if (!job) {
                for (auto& j : jobs) j->cancel();
                if (engine->shutting_down()) call.error(503, "the server is shutting down", {{"Connection", "close"}});
                else call.error(503, "the server is busy (queue full); retry later", {{"Retry-After", "1"}});
                return false;
            }
            jobs.push_back(std::move(job));
        }
        return true;
    }

    void generate(Call& call, Api api, bool infill = false) {
        FrontEnd::Prepared prep;
        if (!prepare(call, api, infill, prep)) return;
        Generation g;
        g.api = api;
        std::vector<JobRequest> reqs;
        try {  // the constraints are made here: a grammar past the matcher's bounds is a 400 (FrontEnd::constrain)
            reqs = fe->job_requests(prep, api, engine->n_ctx());
        } catch (const BadRequest& e) {
            call.error(400, e.what());
            return;
        }
        if (!submit_all(call, std::move(reqs), g.jobs)) return;
        for (size_t pi = 0; pi < prep.prompts.size(); pi++)
            for (int i = 0; i < prep.request.n; i++) g.job_prompt.push_back(pi);
        g.request = std::move(prep.request);
        g.prompts = std::move(prep.prompts);
        g.id = random_id(api == Api::Chat        ? "chatcmpl-"
                         : api == Api::Anthropic ? "msg_"
                         : api == Api::Responses ? "resp_"
                                                 : "cmpl-");
        g.created = unix_time();
        auto dialect = make_dialect(*answers, g);
        if (g.request.stream) answer_stream(call, g, *dialect);
        else answer_whole(call, g, *dialect);
    }

    // Waits for a job whose output is not streamed (embeddings, slot actions). False, with the job cancelled, when
    // the client went away meanwhile.
    static bool wait_quietly(Job& job, Call& c) {
        JobOutput ignored;
        while (job.wait(ignored, 100))
            if (c.res.client_gone()) {
                job.cancel();
                return false;
            }
        return true;
    }

    bool refuse_busy(Call& c, const std::shared_ptr<Job>& job) {
        if (job) return false;
        c.error(503, engine->shutting_down() ? "the server is shutting down"
                                             : "the server is busy (queue full); retry later");
        return true;
    }
};

Service::Service(const ServeParams& p) : impl_(std::make_unique<Impl>()) {
    impl_->p = p;
    bool all_loopback = true;  // Host checks apply when every listening address is a loopback one
    for (const std::string& h : split_list(p.host)) all_loopback = all_loopback && loopback_address(h);
    impl_->policy = {p.api_key, all_loopback, p.allowed_hosts, p.cors_origins};
}

Service::~Service() = default;

void Service::load(const std::string& model_path, const std::string& draft_path, EngineParams ep,
                   const SuffixCacheParams& suffix) {
    Impl& I = *impl_;
    LoadOptions target_load;
    target_load.cluster = I.p.cluster;
    auto model = Model::load(model_path, target_load);
    const Speculation spec = build_speculation(model, ep.spec, draft_path, !ep.spec_auto_mtp, ep.self_draft_layers);
    for (const std::string& line : spec.notes) std::fprintf(stderr, "%s\n", line.c_str());
    const std::shared_ptr<const Model>& draft = spec.draft_model;
    ep.spec.suffix = std::make_shared<SuffixCache>(suffix);  // server-wide; every request feeds it
    ep.spec.cost_memory = std::make_shared<SpecCostMemory>();  // server-wide: measured costs carry over
    I.spec_defaults = ep.spec;
    I.engine = std::make_shared<Engine>(model, draft, ep);
    if (!I.engine->context_note().empty()) std::fprintf(stderr, "%s\n", I.engine->context_note().c_str());
    if (!I.engine->gpu_note().empty()) std::fprintf(stderr, "%s\n", I.engine->gpu_note().c_str());
    std::fprintf(stderr, "%s\n", I.engine->kv_summary().c_str());
    I.model = model;
    I.draft_model = draft;
    I.fe = std::make_unique<FrontEnd>(
        *model, FrontEndOptions{I.p.chat_template, I.p.chat_template_text, I.p.jinja, I.p.chat_template_kwargs});
    if (I.p.embeddings && !I.p.pooling) I.p.pooling = default_pooling(model->gguf());
    if (!I.p.grammar.empty()) I.default_grammar = grammar::parse_gbnf(I.p.grammar);  // --grammar / --grammar-file
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
    const std::string& path = model->path();
    const std::string id =
        !I.aliases.empty() ? I.aliases[0].get<std::string>() : valid_utf8(path.substr(path.find_last_of('/') + 1));
    if (I.aliases.empty()) I.aliases.push_back(id);
    I.answers = std::make_unique<AnswerContext>(AnswerContext{*I.fe, id, I.p.reasoning_format, I.p.verbose});
    I.ready.store(true);
    std::fprintf(stderr, "ready: model %s, chat template %s\n", id.c_str(), I.fe->chat().description().c_str());
}

bool Service::ready() const { return impl_->ready.load(); }

void Service::drain() { impl_->draining.store(true); }

void Service::shutdown(int grace_ms) {
    drain();
    if (impl_->engine) impl_->engine->shutdown(grace_ms);
}

void Service::health(Call& c) {
    if (impl_->draining.load()) return c.error(503, "the server is shutting down", {{"Connection", "close"}});
    if (!impl_->ready.load()) return c.error(503, "Loading model", {{"Retry-After", "1"}});
    c.send(200, "application/json", R"({"status":"ok"})");
}

void Service::count_http_request() { impl_->http_requests++; }

bool Service::admit(Call& call, const std::string& path, bool page_file) {
    const HttpRequest& req = call.req;
    std::string auth = req.header("authorization");
    if (auth.empty() && req.has_header("x-api-key")) auth = "Bearer " + req.header("x-api-key");  // llama-server
    AccessDecision d = check_access(impl_->policy, {req.method, path, req.header("host"), req.header("origin"), auth,
                                                    req.header("access-control-request-headers"), page_file});
    call.cors = d.headers;
    if (d.status == 200) call.send(200, "text/plain", "");  // preflight
    else if (d.status) call.error(d.status, d.message);
    return d.status == 0;
}

void Service::chat_completions(Call& c) { impl_->generate(c, Api::Chat); }
void Service::completions(Call& c) { impl_->generate(c, Api::Oai); }
void Service::completion_native(Call& c) { impl_->generate(c, Api::Native); }
void Service::infill(Call& c) { impl_->generate(c, Api::Native, true); }
void Service::responses(Call& c) { impl_->generate(c, Api::Responses); }
void Service::anthropic_messages(Call& c) {
    c.anthropic = true;
    impl_->generate(c, Api::Anthropic);
}

void Service::anthropic_count_tokens(Call& c) {
    c.anthropic = true;
    answer_400s(c, [&] {
        ParsedRequest pr = parse_request(anthropic_to_openai(parse_body(c.req.body), true), true, impl_->limits());
        c.json_ok({{"input_tokens", impl_->tok().encode(impl_->fe->chat_prompt(pr), true, true).size()}});
    });
}

void Service::input_tokens(Call& c) {
    FrontEnd::Prepared prep;
    if (!impl_->prepare(c, Api::Chat, false, prep)) return;
    c.json_ok({{"input_tokens", prep.prompts[0].ids.size()}});
}

void Service::apply_template(Call& c) {
    answer_400s(c, [&] {
        try {
            ParsedRequest pr = parse_request(parse_body(c.req.body), true, impl_->limits());
            c.json_ok({{"prompt", impl_->fe->chat_prompt(pr)}});
        } catch (const Error& e) {
            c.error(400, e.what());
        }
    });
}

void Service::embeddings(Call& c) {
    Impl& I = *impl_;
    if (!I.p.embeddings) return c.error(501, "this server does not serve embeddings: start it with --embeddings");
    const bool oai = c.req.path.rfind("/v1/", 0) == 0 || c.req.path == I.p.api_prefix + "/v1/embeddings";
    if (oai && *I.p.pooling == Pooling::NONE)
        return c.error(400,
                       "pooling 'none' gives one vector per token, which /v1/embeddings cannot return: use "
                       "/embeddings or another --pooling");
    EmbeddingRequest er;
    std::vector<std::vector<int32_t>> inputs;
    bool ok = false;
    answer_400s(c, [&] {
        er = parse_embedding_request(parse_body(c.req.body), I.tok().n_vocab());
        inputs = embedding_inputs(*I.fe, er);
        ok = true;
    });
    if (!ok) return;
    std::vector<JobRequest> reqs;
    for (auto& ids : inputs) {
        JobRequest jr;
        jr.prompt = std::move(ids);
        jr.embed = true;
        jr.pooling = *I.p.pooling;
        jr.embd_normalize = er.normalize;
        reqs.push_back(std::move(jr));
    }
    Generation g;  // the jobs, cancelled on every way out
    if (!I.submit_all(c, std::move(reqs), g.jobs)) return;
    for (auto& job : g.jobs) {
        if (!Impl::wait_quietly(*job, c)) return;
        if (!job->error.empty()) return c.error(job->error_status, job->error);
    }
    c.json_ok(embeddings_answer(oai, er, g.jobs, I.answers->model_id));
}

void Service::tokenize(Call& c) {
    answer_400s(c, [&] {
        json b = parse_body(c.req.body);
        if (!b.is_object() || !b.contains("content") || !b["content"].is_string())
            throw BadRequest("'content' must be a string");
        const bool with_pieces = b.value("with_pieces", false);
        auto ids = impl_->tok().encode(b["content"].get<std::string>(), b.value("add_special", false),
                                       b.value("parse_special", true));
        json toks = json::array();
        for (int32_t id : ids) {
            if (with_pieces) toks.push_back({{"id", id}, {"piece", impl_->tok().token_to_piece(id, true)}});
            else toks.push_back(id);
        }
        c.json_ok({{"tokens", toks}});
    });
}

void Service::detokenize(Call& c) {
    answer_400s(c, [&] {
        json b = parse_body(c.req.body);
        if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
            throw BadRequest("'tokens' must be an array of ids");
        std::vector<int32_t> ids;
        for (const auto& v : b["tokens"]) {
            if (!v.is_number_integer()) throw BadRequest("'tokens' must be an array of ids");
            int64_t id = v.get<int64_t>();
            if (id < 0 || id >= impl_->tok().n_vocab())
                throw BadRequest(strprintf("token %lld is outside the vocabulary", (long long)id));
            ids.push_back(int32_t(id));
        }
        c.json_ok({{"content", impl_->tok().decode(ids, false)}});
    });
}

namespace {

// The value of `name` in a query string (undecoded), "" when absent.
std::string query_param(const std::string& query, const std::string& name) {
    for (size_t at = 0; at <= query.size();) {
        size_t end = query.find('&', at);
        if (end == std::string::npos) end = query.size();
        const std::string kv = query.substr(at, end - at);
        if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
        at = end + 1;
    }
    return "";
}

// RFC 3339 of a Unix time (Anthropic's created_at)
std::string rfc3339(int64_t t) {
    const std::time_t tt = std::time_t(t);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace

void Service::models(Call& c) {
    const Impl& I = *impl_;
    const HParams& hp = I.model->hparams();
    const std::string& id = I.answers->model_id;
    if (c.req.has_header("anthropic-version")) {  // Anthropic's client asks: its list's shape
        const json m = {{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", rfc3339(unix_time())}};
        c.json_ok({{"data", json::array({m})}, {"has_more", false}, {"first_id", id}, {"last_id", id}});
        return;
    }
    json m = {{"id", id},
              {"object", "model"},
              {"created", unix_time()},
              {"owned_by", "tandem"},
              {"aliases", I.aliases},
              {"tags", I.tags},
              {"meta",
               {{"vocab_type", I.tok().model_name()},
                {"n_vocab", hp.n_vocab},
                {"n_ctx_train", hp.n_ctx_train},
                {"n_ctx", I.engine->n_ctx()},
                {"n_embd", hp.n_embd},
                {"n_params", I.model->n_params()},
                {"size", I.model->weights_bytes()}}}};
    // llama-server's "models" list beside OpenAI's "data"
    json legacy = {{"name", id},
                   {"model", id},
                   {"modified_at", ""},
                   {"size", I.model->weights_bytes()},
                   {"digest", ""},
                   {"type", "model"},
                   {"description", ""},
                   {"tags", json::array()},
                   {"capabilities", json::array({"completion"})},
                   {"parameters", ""},
                   {"details", json::object()}};
    c.json_ok({{"object", "list"}, {"data", json::array({m})}, {"models", json::array({legacy})}});
}

void Service::model(Call& c, const std::string& id) {
    const Impl& I = *impl_;
    bool known = id == I.answers->model_id;
    for (const auto& a : I.aliases) known = known || a.get<std::string>() == id;
    if (!known) {
        c.error(404, "The model '" + id + "' does not exist");
        return;
    }
    if (c.req.has_header("anthropic-version")) {
        c.json_ok({{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", rfc3339(unix_time())}});
        return;
    }
    c.json_ok({{"id", id}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "tandem"}});
}

void Service::feature_disabled(Call& c) {
    c.send(403, "application/json; charset=utf-8",
           json{{"error", {{"message", "this feature is disabled"}, {"type", "feature_disabled"}}}}.dump());
}

void Service::streams_lookup(Call& c) {
    const json body = json::parse(c.req.body.empty() ? std::string("{}") : c.req.body, nullptr, false);
    if (body.is_discarded()) return c.error(400, "invalid body: not JSON");
    c.json_ok(json::array());  // no stream's buffer is held: none to resume
}

void Service::stream_get(Call& c) {
    if (query_param(c.req.query, "conv_id").empty()) return c.error(400, "Missing conversation id in path");
    c.error(404, "Stream not found or expired");
}

void Service::stream_delete(Call& c) {
    if (query_param(c.req.query, "conv_id").empty()) return c.error(400, "Missing conversation id in path");
    c.send(204, "application/json", "");
}

void Service::metrics(Call& c) {
    if (!impl_->p.metrics) return c.error(501, "this server does not expose metrics: start it with --metrics");
    c.send(200, "text/plain; version=0.0.4", prometheus_text(impl_->engine->metrics(), impl_->http_requests.load()),
           {{"Process-Start-Time-Unix", std::to_string(impl_->start_time)}});
}

void Service::props_get(Call& c) {
    const Impl& I = *impl_;
    ServerLimits lim = I.limits();
    JobRequest r;
    r.sampling = lim.sampling;
    r.max_tokens = lim.n_predict < 0 ? INT32_MAX : lim.n_predict;
    r.spec = I.spec_defaults;
    r.ignore_eos = lim.ignore_eos;
    const Tokenizer& tok = I.tok();
    const ChatFormatter& chat = I.fe->chat();
    const std::string bos = tok.bos() >= 0 ? tok.token_to_piece(tok.bos(), true) : "";
    const std::string eos = tok.eos() >= 0 ? tok.token_to_piece(tok.eos(), true) : "";
    c.json_ok({{"default_generation_settings",
                {{"params", generation_settings(tok, r, ParsedRequest{})}, {"n_ctx", I.engine->n_ctx()}}},
               {"total_slots", I.engine->metrics().n_slots},
               {"model_alias", I.answers->model_id},
               {"model_path", I.model->path()},
               {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
               {"endpoint_slots", I.p.slots_endpoint},
               {"endpoint_props", I.p.props_post},
               {"endpoint_metrics", I.p.metrics},
               {"ui", I.p.webui},
               {"chat_template", chat.source()},
               {"chat_template_name",
                chat.is_jinja() ? std::string("jinja") : std::string(chat_template_name(chat.builtin()))},
               {"bos_token", bos},
               {"eos_token", eos},
               {"build_info", "tandem " TANDEM_VERSION},
               {"is_sleeping", false}});
}

void Service::props_post(Call& c) {
    if (!impl_->p.props_post)
        return c.error(501, "this server does not allow changing its properties: start it with --props");
    answer_400s(c, [&] {
        json b = parse_body(c.req.body);
        if (!b.is_object()) throw BadRequest("the body must be a JSON object");
        if (!b.empty()) throw BadRequest("no property can be changed at run time here");
        c.json_ok({{"success", true}});
    });
}

void Service::slots(Call& c) {
    const Impl& I = *impl_;
    if (!I.p.slots_endpoint) return c.error(501, "this server does not expose slots: it was started with --no-slots");
    json out = json::array();
    for (const SlotInfo& s : I.engine->metrics().slots)
        out.push_back({{"id", s.id},
                       {"n_ctx", s.n_ctx},
                       {"is_processing", s.is_processing},
                       {"n_past", s.n_past},
                       {"next_token", {{"n_decoded", s.n_generated}}},
                       {"n_prompt_tokens", s.n_prompt},
                       {"speculative", I.engine->has_draft() || I.spec_defaults.type != SpecType::NONE}});
    c.json_ok(out);
}

// As llama-server: the actions need --slot-save-path (501 without it, erase included); --no-slots only hides
// GET /slots.
void Service::slot_action(Call& c, const std::string& id_text) {
    Impl& I = *impl_;
    if (I.p.slot_save_path.empty())
        return c.error(501, "this server does not support slot actions: start it with --slot-save-path DIR");
    SlotActionRequest a;
    bool ok = false;
    answer_400s(c, [&] {
        a = parse_slot_action(id_text, c.req.query, c.req.body, I.p.slot_save_path);
        ok = true;
    });
    if (!ok) return;
    JobRequest jr;
    jr.id_slot = a.id;
    jr.action = a.action;
    jr.state_path = a.path;
    auto job = I.engine->submit(std::move(jr));
    if (I.refuse_busy(c, job) || !Impl::wait_quietly(*job, c)) return;
    if (!job->error.empty()) return c.error(job->error_status, job->error);
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

}  // namespace tandem::server
