// Who may use the server: the Host check (DNS rebinding), CORS origins, API key and preflight answers. Pure
// functions of the request's headers, so the rules are tested without a socket.
//
// Order of the checks (check_access):
//   1. Host   when the server listens on a loopback address, the Host header must name a loopback host
//             (localhost, 127.0.0.0/8, [::1], any port) or one of --allowed-hosts ('*': any). A page on
//             attacker.example that rebinds its name to 127.0.0.1 sends Host: attacker.example: 403.
//   2. Origin a browser request (Origin header) from another origin is served only when that origin is
//             allowed: always the same origin and loopback origins; with --api-key any origin (the key is the
//             guard, as llama-server); otherwise those in --cors-origins ('*': any). 403 otherwise, so a
//             foreign page cannot drive a keyless local server even with a "simple" text/plain POST.
//   3. OPTIONS preflight of an allowed origin: 200 (as llama-server) with the Access-Control-Allow-* headers,
//             before the key check (a preflight carries no key).
//   4. Key    with --api-key every path but /health, /v1/health, /, /index.html, /sw.js, /v1/models, /models and
//             the files of --path needs "Authorization: Bearer KEY" (the caller maps llama-server's X-Api-Key: KEY to it), compared
//             in constant time: 401.
// Responses to an allowed cross-origin request carry Access-Control-Allow-Origin: <origin> and Vary: Origin.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tandem::server {

struct AccessPolicy {
    std::string api_key;  // empty: no key
    bool loopback_bind = true;  // the listening address is a loopback one
    std::vector<std::string> allowed_hosts;  // extra Host names (no port); "*": any
    std::vector<std::string> cors_origins;  // extra origins ("https://app.example"); "*": any
};

struct AccessRequest {
    std::string method, path;
    std::string host, origin, authorization;  // header values, empty when absent
    std::string request_headers;  // Access-Control-Request-Headers of a preflight
    bool page_file = false;  // a file of --path's directory: open without the key, as the built-in page
};

struct AccessDecision {
    int status = 0;  // 0: go on to the route; otherwise answer with this status now
    std::string message, type;
    std::vector<std::pair<std::string, std::string>> headers;  // CORS headers, for every answer
};

AccessDecision check_access(const AccessPolicy& policy, const AccessRequest& req);

// Helpers, exposed for the tests.
bool is_loopback_host(const std::string& host_without_port);
std::string host_without_port(const std::string& host_header);  // "[::1]:8080" -> "::1", "a.b:80" -> "a.b"
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace tandem::server
