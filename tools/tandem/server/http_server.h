// HTTP front end of `tandem serve`: routes, access checks (src/serve/access.h), SSE streaming, on the
// transport of http_transport.h. It holds the per-model front end (chat template and tool-call format, the
// constraint vocabulary) and prepares each request (tokenization, context fitting, grammar constraints) before it
// becomes Jobs for the Engine (src/serve/engine.h). Moving that preparation into src/serve is issue 25's next step.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serve/openai.h"
#include "serve/reasoning.h"
#include "tandem/embedding.h"
#include "tandem/sampling.h"
#include "tandem/speculative.h"

namespace tandem {
class Model;
}  // namespace tandem

namespace tandem::server {

class Engine;

struct ServeParams {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    std::string alias;  // comma-separated: the first is the model id
    std::string tags;  // comma-separated
    std::string chat_template;  // --chat-template: a built-in's name, or a Jinja text; empty: the model's
    std::vector<std::string> allowed_hosts, cors_origins;
    size_t max_body_bytes = 1 << 20;
    int http_threads = 32;
    int timeout_s = 60;  // whole-body read and each write; headers get min(timeout, 10 s)
    bool reuse_port = false;
    // llama-server's defaults for requests (its sampling flags, -n, --ignore-eos)
    SamplerParams sampling = ServerLimits::server_sampling_defaults();
    int n_predict = -1;
    bool ignore_eos = false;
    bool verbose = false;  // -v: "__verbose" in non-streamed answers
    std::string chat_template_text;  // --chat-template-file: a Jinja template used instead of the model's
    std::string grammar;  // --grammar / --grammar-file: GBNF for requests that bring none
    ReasoningFormat reasoning_format = ReasoningFormat::DEEPSEEK;  // --reasoning-format (auto)
    bool jinja = true;  // --jinja (default) / --no-jinja (recognise templates, render built-ins)
    nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // --chat-template-kwargs
    bool webui = true;
    std::string api_prefix;  // every route also under this prefix
    bool slots_endpoint = true, props_post = false, metrics = false;
    std::string slot_save_path;
    bool embeddings = false;  // --embedding: serve /v1/embeddings and /embedding(s)
    std::optional<Pooling> pooling;  // --pooling; unset: the model's (default_pooling)
};

class HttpServer {
public:
    explicit HttpServer(const ServeParams& p);
    ~HttpServer();
    // Binds and starts serving (/health answers 503 until set_ready). Throws Error (e.g. the port is taken).
    void start();
    // Models are loaded: routes that need them become available.
    void set_ready(std::shared_ptr<const Model> model, std::shared_ptr<Engine> engine);
    // Speculative defaults that requests start from (call before set_ready).
    void set_spec_defaults(const SpecParams& sp);
    void stop_accepting();  // shutdown, step 1: no new connections or requests
    bool wait_idle(int timeout_ms);  // shutdown, step 2: until every request in progress has been answered
    void stop();  // shutdown, step 3: close everything
    int port() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
