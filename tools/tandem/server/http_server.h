// The HTTP side of `tandem serve`: the route table (paths and methods to the Service's routes, tandem/server.h),
// the static pages, access checks and the request log, on the Boost.Beast transport of http_transport.h. Every
// answer's content comes from the library's Service.
#pragma once
#include <memory>

#include "tandem/server.h"

namespace tandem::server {

class HttpServer {
public:
    // `service` outlives the server.
    HttpServer(const ServeParams& p, Service& service);
    ~HttpServer();
    // Binds every --host address and starts serving (/health answers 503 until the service is ready). Throws
    // Error (e.g. the port is taken).
    void start();
    void stop_accepting();  // shutdown, step 1: no new connections or requests
    bool wait_idle(int timeout_ms);  // shutdown, step 2: until every request in progress has been answered
    void stop();  // shutdown, step 3: close everything
    int port() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
