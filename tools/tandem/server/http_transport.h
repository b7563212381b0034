// HTTP/1.1 transport of `tandem serve` on Boost.Beast: accepting, reading requests within limits, writing
// responses. It knows nothing of routes or models: every complete request goes to one Handler, run on a worker
// thread (handlers may block, e.g. waiting for a generation), through a Responder.
//
// Why not a thread per connection: reading happens on a few I/O threads, asynchronously, so a client that
// sends one header byte a second (slowloris) costs a socket and a timer, not a thread; workers only ever run
// complete requests.
//
// Limits and their answers (all counted on what the server actually receives and decodes):
//   request headers larger than max_header_bytes or more than max_header_count   431, connection closed
//   body larger than max_body_bytes (Content-Length, chunked or once decoded)    413, connection closed
//   Content-Encoding other than identity/gzip/deflate                             415
//   headers not complete within header_timeout_s (keep-alive idle included)       connection closed
//   body not complete within body_timeout_s                                       408, connection closed
//   more than max_connections open                                                503, connection closed
// Pipelined requests are answered in order. Range headers are ignored (generated content is never partial).
// The listening socket never uses SO_REUSEPORT: a second server on a taken port fails to start.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/server.h"

namespace tandem::server {

// HttpRequest, Responder and Headers: tandem/server.h (the service answers through them).
using Handler = std::function<void(const HttpRequest&, Responder&)>;
// Body of a response the transport itself makes (413, 431, ...): (status, message) -> JSON text.
using ErrorBodyFn = std::function<std::string(int status, const std::string& message)>;

struct TransportParams {
    size_t max_body_bytes = 1 << 20;
    size_t max_header_bytes = 32 << 10;
    int max_header_count = 100;
    int header_timeout_s = 10;
    int body_timeout_s = 60;
    int write_timeout_s = 30;
    int max_connections = 1000;  // lowered to what RLIMIT_NOFILE allows
    int io_threads = 2;
    int workers = 32;
};

class HttpTransport {
public:
    HttpTransport(const TransportParams& p, Handler handler, ErrorBodyFn error_body);
    ~HttpTransport();
    // Binds and listens (backlog SOMAXCONN). Port 0: any free port. Throws Error naming host, port and cause.
    // May be called once per address, before start(); later addresses with port 0 take the first one's port.
    void listen(const std::string& host, int port);
    int port() const;
    void start();  // I/O threads and workers
    void stop_accepting();  // closes the listener; open connections finish their request in progress, then close
    // Waits until no request is being handled or `timeout_ms` passed; returns true when idle.
    bool wait_idle(int timeout_ms);
    void stop();  // closes every connection, joins every thread (handlers still running are waited for)

    struct Impl;  // opaque (http_transport.cpp)

private:
    std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::server
