// The /metrics text (metrics.h).
#include "serve/metrics.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem::server {

std::string prometheus_text(const EngineMetrics& m, uint64_t http_requests) {
    std::string s;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
        s += strprintf("# HELP tandem_%s %s\n# TYPE tandem_%s %s\ntandem_%s %.17g\n", name, help, name, type, name, v);
    };
    metric("requests_total", "counter", "Generation requests accepted.", double(m.requests));
    metric("http_requests_total", "counter", "HTTP requests served.", double(http_requests));
    metric("prompt_tokens_total", "counter", "Prompt tokens processed.", double(m.tokens_prompt));
    metric("tokens_predicted_total", "counter", "Tokens generated.", double(m.tokens_generated));
    metric("prompt_seconds_total", "counter", "Seconds spent on prompts.", m.seconds_prompt);
    metric("tokens_predicted_seconds_total", "counter", "Seconds spent generating.", m.seconds_generated);
    metric("requests_deferred", "gauge", "Requests waiting in the queue.", m.queue_depth);
    metric("slots_busy", "gauge", "Slots generating now.", m.busy_slots);
    metric("slots_total", "gauge", "Slots.", m.n_slots);
    metric("kv_cache_usage_ratio", "gauge", "Fraction of the KV cache in use.", m.kv_used_fraction);
    metric("spec_decode_num_drafts", "counter", "Verification rounds that had a draft.",
           double(m.spec.n_rounds_drafted));
    metric("spec_decode_num_draft_tokens", "counter", "Drafted tokens verified.", double(m.spec.n_drafted));
    metric("spec_decode_num_accepted_tokens", "counter", "Drafted tokens accepted.", double(m.spec.n_accept));
    metric("spec_decode_num_tree_tokens", "counter",
           "Token-tree alternatives verified (besides the drafted chain tokens).", double(m.spec.n_tree_nodes));
    metric("spec_decode_num_tree_accepted_tokens", "counter",
           "Token-tree alternatives accepted (besides the accepted chain tokens).", double(m.spec.n_tree_accept));
    // llama-server's names, for dashboards built on them
    auto llama = [&](const char* name, const char* type, const char* help, double v) {
        s += strprintf("# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %.17g\n", name, help, name, type,
                       name, v);
    };
    llama("prompt_tokens_total", "counter", "Number of prompt tokens processed.",
          double(m.tokens_prompt - m.tokens_cached));
    llama("prompt_seconds_total", "counter", "Prompt process time", m.seconds_prompt);
    llama("prompt_tokens_cached_total", "counter", "Number of prompt tokens taken from the cache.",
          double(m.tokens_cached));
    llama("tokens_predicted_total", "counter", "Number of generation tokens processed.", double(m.tokens_generated));
    llama("tokens_predicted_seconds_total", "counter", "Predict process time", m.seconds_generated);
    llama("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
          m.seconds_prompt > 0 ? double(m.tokens_prompt) / m.seconds_prompt : 0.0);
    llama("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
          m.seconds_generated > 0 ? double(m.tokens_generated) / m.seconds_generated : 0.0);
    llama("n_decode_total", "counter", "Total number of llama_decode() calls (here: target forward passes).",
          double(m.n_decode));
    llama("requests_processing", "gauge", "Number of requests processing.", m.busy_slots);
    llama("requests_deferred", "gauge", "Number of requests deferred.", m.queue_depth);
    llama("kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", m.kv_used_fraction);
    std::vector<SpecStats::ByProposer> proposers = m.spec.by_proposer;  // by name, whatever order they came in
    std::sort(proposers.begin(), proposers.end(), [](const auto& a, const auto& b) {
        return std::string(spec_type_name(a.type)) < std::string(spec_type_name(b.type));
    });
    s += "# HELP tandem_spec_decode_proposer_rounds Verification rounds each proposer drafted for.\n"
         "# TYPE tandem_spec_decode_proposer_rounds counter\n";
    for (const auto& b : proposers)
        s += strprintf("tandem_spec_decode_proposer_rounds{proposer=\"%s\"} %lld\n", spec_type_name(b.type),
                       (long long)b.rounds);
    s += "# HELP tandem_spec_decode_proposer_accepted_tokens Chain tokens each proposer drafted that were "
         "accepted.\n"
         "# TYPE tandem_spec_decode_proposer_accepted_tokens counter\n";
    for (const auto& b : proposers)
        s += strprintf("tandem_spec_decode_proposer_accepted_tokens{proposer=\"%s\"} %lld\n", spec_type_name(b.type),
                       (long long)b.accepted);
    s += "# HELP tandem_inter_token_latency_ms Gaps between token deliveries (ms), the last 4096 of all requests.\n"
         "# TYPE tandem_inter_token_latency_ms summary\n";
    for (auto [q, v] : {std::pair{"0.5", m.itl.p50}, std::pair{"0.9", m.itl.p90}, std::pair{"0.99", m.itl.p99}})
        s += strprintf("tandem_inter_token_latency_ms{quantile=\"%s\"} %.17g\n", q, v);
    s += strprintf("tandem_inter_token_latency_ms_count %d\n", m.itl.n);
    s += "# HELP tandem_spec_decode_num_accepted_tokens_per_pos Drafted tokens accepted, by position in the draft.\n"
         "# TYPE tandem_spec_decode_num_accepted_tokens_per_pos counter\n";
    for (size_t i = 0; i < m.spec.accepted_at.size(); i++)
        s += strprintf("tandem_spec_decode_num_accepted_tokens_per_pos{position=\"%zu\"} %llu\n", i,
                       (unsigned long long)m.spec.accepted_at[i]);
    return s;
}

}  // namespace tandem::server
