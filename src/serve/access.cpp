#include "serve/access.h"

#include <algorithm>
#include <cctype>

namespace tandem::server {

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

// "scheme://host[:port]" -> "host[:port]"; empty when the origin is not of that form ("null", garbage).
std::string origin_authority(const std::string& origin) {
    size_t p = origin.find("://");
    if (p == std::string::npos || p == 0) return {};
    std::string rest = origin.substr(p + 3);
    if (rest.empty() || rest.find('/') != std::string::npos) return {};
    return lower(rest);
}

}  // namespace

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

std::string host_without_port(const std::string& host_header) {
    std::string h = lower(host_header);
    if (!h.empty() && h[0] == '[') {
        size_t e = h.find(']');
        return e == std::string::npos ? h : h.substr(1, e - 1);
    }
    size_t c = h.find(':');
    if (c != std::string::npos && h.find(':', c + 1) == std::string::npos) return h.substr(0, c);
    return h;  // no port, or a bare IPv6 address
}

bool is_loopback_host(const std::string& h) {
    if (h == "localhost" || h == "::1") return true;
    // 127.0.0.0/8, written as four decimal numbers
    if (h.rfind("127.", 0) != 0) return false;
    int parts = 0, digits = 0;
    for (char c : h) {
        if (c == '.') {
            if (digits == 0) return false;
            parts++;
            digits = 0;
        } else if (std::isdigit(static_cast<unsigned char>(c)) && digits < 3) {
            digits++;
        } else {
            return false;
        }
    }
    return parts == 3 && digits > 0;
}

AccessDecision check_access(const AccessPolicy& P, const AccessRequest& r) {
    AccessDecision d;
    auto refuse = [&](int status, std::string msg, std::string type) {
        d.status = status;
        d.message = std::move(msg);
        d.type = std::move(type);
        return d;
    };
    // 1. Host
    if (P.loopback_bind && !r.host.empty() && !contains(P.allowed_hosts, "*")) {
        const std::string h = host_without_port(r.host);
        if (!is_loopback_host(h) && !contains(P.allowed_hosts, h))
            return refuse(403,
                          "Host '" + h +
                              "' is not allowed: this server listens on a loopback address (add the name "
                              "with --allowed-hosts)",
                          "permission_error");
    }
    // 2. Origin
    if (!r.origin.empty()) {
        const std::string auth = origin_authority(r.origin);
        const bool allowed = contains(P.cors_origins, "*") || contains(P.cors_origins, r.origin) ||
                             !P.api_key.empty() ||
                             (!auth.empty() && (is_loopback_host(host_without_port(auth)) || auth == lower(r.host)));
        if (!allowed)
            return refuse(403,
                          "origin '" + r.origin +
                              "' is not allowed (start the server with --cors-origins ORIGIN, "
                              "or --api-key)",
                          "permission_error");
        d.headers.emplace_back("Access-Control-Allow-Origin", r.origin);
        d.headers.emplace_back("Access-Control-Allow-Credentials", "true");
        d.headers.emplace_back("Vary", "Origin");
    }
    // 3. Preflight
    if (r.method == "OPTIONS") {
        d.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        d.headers.emplace_back("Access-Control-Allow-Headers", r.request_headers.empty() ? "*" : r.request_headers);
        d.headers.emplace_back("Access-Control-Max-Age", "86400");
        d.status = 200;  // as llama-server (204 would do as well for browsers)
        return d;
    }
    // 4. Key
    const bool open = r.path == "/health" || r.path == "/v1/health" || r.path == "/v1/models" || r.path == "/models" ||
                      r.path == "/" || r.path == "/index.html" || r.path == "/sw.js" ||
                      r.path == "/manifest.webmanifest" || r.path.rfind("/webui/", 0) == 0 || r.page_file;
    if (!P.api_key.empty() && !open) {
        const std::string prefix = "Bearer ";
        if (r.authorization.rfind(prefix, 0) != 0 ||
            !constant_time_equal(r.authorization.substr(prefix.size()), P.api_key))
            return refuse(401, "invalid or missing API key", "authentication_error");
    }
    return d;
}

}  // namespace tandem::server
