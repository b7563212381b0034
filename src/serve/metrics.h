// The server's /metrics page: the engine's counters in the Prometheus text format (version 0.0.4), tandem's own
// names (tandem_*) and llama-server's (llamacpp:*), so dashboards built for either work. A pure function: tested
// without a server (tests/test_serve.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "serve/engine.h"

namespace tandem::server {

// Every family with its # HELP and # TYPE lines; http_requests: HTTP requests the transport served.
std::string prometheus_text(const EngineMetrics& m, uint64_t http_requests);

}  // namespace tandem::server
