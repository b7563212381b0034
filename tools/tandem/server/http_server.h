// HTTP front end of `tandem serve` (cpp-httplib): routes, authentication, limits, SSE streaming. Owns nothing
// of the model: requests become Jobs for the Engine.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "tandem/speculative.h"

namespace tandem {
class Model;
class Tokenizer;
}  // namespace tandem

namespace tandem::server {

class Engine;

struct ServeParams {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    std::string alias;
    std::string chat_template;  // forced template name; empty: recognise the model's
    size_t max_body_bytes = 1 << 20;
    int http_threads = 32;
};

class HttpServer {
public:
    explicit HttpServer(const ServeParams& p);
    ~HttpServer();
    // Binds and starts listening in a background thread (/health answers 503 until set_ready). Throws Error.
    void start();
    // Models are loaded: routes that need them become available.
    void set_ready(std::shared_ptr<const Model> model, std::shared_ptr<Engine> engine);
    // Speculative defaults that requests start from (call before set_ready).
    void set_spec_defaults(const SpecParams& sp);
    void wait();  // until stop()
    void stop();
    int port() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
