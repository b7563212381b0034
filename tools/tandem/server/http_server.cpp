#include "server/http_server.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "server/http_transport.h"
#include "server/static_files.h"
#include "server/webui.h"
#include "tandem/strings.h"

namespace tandem::server {

struct HttpServer::Impl {
    ServeParams p;
    Service& svc;
    std::unique_ptr<HttpTransport> transport;
    using Route = std::function<void(Call&)>;
    struct Entry {
        Route route;
        bool needs_model = true;
    };
    std::map<std::string, std::map<std::string, Entry>> routes;  // path -> method -> route
    std::optional<StaticFiles> files;  // --path (with the page on): served before the routes, as llama-server

    Impl(const ServeParams& params, Service& s) : p(params), svc(s) {
        if (p.webui && !p.public_path.empty()) files.emplace(p.public_path);
    }

    void add(const char* method, std::initializer_list<const char*> paths, void (Service::*r)(Call&)) {
        for (const char* path : paths) routes[path][method] = {[this, r](Call& c) { (svc.*r)(c); }, true};
    }
    void add_page(const char* method, std::initializer_list<const char*> paths, Route r) {
        for (const char* path : paths) routes[path][method] = {r, false};
    }

    void add_routes() {
        add_page("GET", {"/health", "/v1/health"}, [this](Call& c) { svc.health(c); });
        auto page = [this](const std::string& path) {
            return [this, path](Call& c) {
                if (!p.webui) return c.error(404, "the chat page is off (--no-webui)");
                const WebAsset* a = find_web_asset(path);
                c.send(200, a->type, a->body,
                       {{"Content-Security-Policy", kWebUiCsp},
                        {"X-Content-Type-Options", "nosniff"},
                        {"Cache-Control", "no-cache"}});
            };
        };
        if (!files) {  // (--path replaces the built-in page)
            add_page("GET", {"/", "/index.html"}, page("/webui/index.html"));
            for (size_t i = 0; i < kWebAssetCount; i++) add_page("GET", {kWebAssets[i].path}, page(kWebAssets[i].path));
            add_page("GET", {"/sw.js"}, [](Call& c) {  // the llama.cpp web UI registers one; tandem's page needs none
                c.send(200, "application/javascript", "// tandem: no service worker\n");
            });
            add_page("GET", {"/manifest.webmanifest"}, [](Call& c) {
                c.send(200, "application/manifest+json",
                       R"({"name":"tandem","short_name":"tandem","start_url":"/","display":"standalone"})");
            });
        }
        add("POST", {"/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"}, &Service::input_tokens);
        add("GET", {"/v1/models", "/models"}, &Service::models);
        add("GET", {"/metrics"}, &Service::metrics);
        add("GET", {"/props"}, &Service::props_get);
        add("POST", {"/props"}, &Service::props_post);
        add("GET", {"/slots"}, &Service::slots);
        add("POST", {"/v1/chat/completions", "/chat/completions"}, &Service::chat_completions);
        add("POST", {"/v1/completions"}, &Service::completions);
        add("POST", {"/completion", "/completions"}, &Service::completion_native);  // llama-server's native shape
        add("POST", {"/apply-template"}, &Service::apply_template);
        add("POST", {"/tokenize"}, &Service::tokenize);
        add("POST", {"/detokenize"}, &Service::detokenize);
        add("POST", {"/embedding", "/embeddings", "/v1/embeddings"}, &Service::embeddings);
        add("POST", {"/infill"}, &Service::infill);
        add("POST", {"/v1/messages"}, &Service::anthropic_messages);
        add("POST", {"/v1/responses", "/responses"}, &Service::responses);
        add("POST", {"/v1/messages/count_tokens"}, &Service::anthropic_count_tokens);
        for (const char* method : {"GET", "POST"})
            add_page(method, {"/tools", "/cors-proxy"}, [this](Call& c) { svc.feature_disabled(c); });
        add_page("POST", {"/v1/streams/lookup"}, [this](Call& c) { svc.streams_lookup(c); });
        add_page("GET", {"/v1/stream"}, [this](Call& c) { svc.stream_get(c); });
        add_page("DELETE", {"/v1/stream"}, [this](Call& c) { svc.stream_delete(c); });
        auto not_implemented = [](Call& c) {
            c.error(501, "this endpoint (" + c.req.path +
                             ") is not implemented by tandem (see README, llama-server compatibility)");
        };
        add_page("POST", {"/rerank", "/reranking", "/v1/rerank"}, not_implemented);
        add_page("GET", {"/lora-adapters"}, not_implemented);
        add_page("POST", {"/lora-adapters"}, not_implemented);
    }

    // Every request: access checks, then the route. Runs on a transport worker thread.
    void handle(const HttpRequest& req, Responder& res) {
        svc.count_http_request();
        std::string path = req.path;
        if (!p.api_prefix.empty() && path.rfind(p.api_prefix, 0) == 0) path = path.substr(p.api_prefix.size());
        if (path.empty()) path = "/";
        Call call{req, res, {}};
        std::optional<StaticFile> file;
        if (files && (req.method == "GET" || req.method == "HEAD")) file = files->find(path);
        if (svc.admit(call, path, file.has_value())) {
            if (file)
                call.send(200, file->type, file->body,
                          {{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-cache"}});
            else dispatch(call, path);
        }
        std::fprintf(stderr, "%s %s %d %zu bytes\n", req.method.c_str(), req.path.c_str(), call.status,
                     req.body.size());
    }

    void dispatch(Call& call, const std::string& path) {
        if (call.req.path.size() > 7 && path.rfind("/slots/", 0) == 0 && call.req.method == "POST") {
            if (!svc.ready()) return call.error(503, "the model is loading", {{"Retry-After", "1"}});
            return svc.slot_action(call, path.substr(7));
        }
        if (path.size() > 11 && path.rfind("/v1/models/", 0) == 0 &&
            (call.req.method == "GET" || call.req.method == "HEAD")) {
            if (!svc.ready()) return call.error(503, "the model is loading", {{"Retry-After", "1"}});
            return svc.model(call, path.substr(11));
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
        if (m->second.needs_model && !svc.ready())
            return call.error(503, "the model is loading", {{"Retry-After", "1"}});
        m->second.route(call);
    }
};

HttpServer::HttpServer(const ServeParams& p, Service& service) : impl_(std::make_unique<Impl>(p, service)) {
    Impl& I = *impl_;
    I.add_routes();
    TransportParams tp;
    tp.max_body_bytes = p.max_body_bytes;
    tp.workers = p.http_threads;
    tp.body_timeout_s = p.timeout_s;
    tp.write_timeout_s = p.timeout_s;
    tp.header_timeout_s = std::min(p.timeout_s, 10);
    I.transport = std::make_unique<HttpTransport>(
        tp, [&I](const HttpRequest& req, Responder& res) { I.handle(req, res); }, error_json);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
    for (const std::string& h : split_list(impl_->p.host))  // llama-server's --host a,b: every address, one port
        impl_->transport->listen(h, impl_->p.port);
    impl_->transport->start();
}

void HttpServer::stop_accepting() { impl_->transport->stop_accepting(); }
bool HttpServer::wait_idle(int timeout_ms) { return impl_->transport->wait_idle(timeout_ms); }
void HttpServer::stop() { impl_->transport->stop(); }
int HttpServer::port() const { return impl_->transport->port(); }

}  // namespace tandem::server
