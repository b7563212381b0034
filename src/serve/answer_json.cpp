// Shared JSON pieces of the answers (answer_json.h).
#include "serve/answer_json.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "tandem/error.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string random_id(const char* prefix) {
    static std::atomic<uint64_t> counter{0};
    uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    return strprintf("%s%llx%llx", prefix, (unsigned long long)(t & 0xffffffffff), (unsigned long long)counter++);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

const char* error_type(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 503: return "unavailable_error";
        default: return status < 500 ? "invalid_request_error" : "server_error";
    }
}

std::string finish_reason(const Job& j) { return j.finish_reason == "stop" ? "stop" : "length"; }

std::string stop_type(const Job& j) {
    if (!j.stop_word.empty()) return "word";
    if (j.finish_reason == "stop") return "eos";
    if (j.finish_reason == "length") return "limit";
    return "none";
}

namespace {

// What a `timings` object is made of: one finished job's, or those of an answer's choices together.
struct TimingParts {
    int n_prompt = 0, n_cached = 0, n_generated = 0;
    double prompt_ms = 0, gen_ms = 0;
    SpecStats spec;
    LatencySummary itl;
};
TimingParts parts_of(const Job& j) {
    return {j.n_prompt, j.n_cached, j.n_generated, j.prompt_ms, j.gen_ms, j.spec, j.itl};
}

json timings_of(const TimingParts& j) {
    const int processed = j.n_prompt - j.n_cached;  // as llama-server: prompt_n + cache_n = the prompt
    const SpecStats& s = j.spec;
    json t = {{"prompt_n", processed},
              {"prompt_ms", j.prompt_ms},
              {"prompt_per_second", j.prompt_ms > 0 ? processed / (j.prompt_ms / 1e3) : 0.0},
              {"predicted_n", j.n_generated},
              {"predicted_ms", j.gen_ms},
              {"predicted_per_second", j.gen_ms > 0 ? j.n_generated / (j.gen_ms / 1e3) : 0.0},
              {"draft_n", s.n_drafted},
              {"draft_n_accepted", s.n_accept},
              {"cache_n", j.n_cached},
              {"draft_tree_n", s.n_tree_nodes},
              {"draft_tree_n_accepted", s.n_tree_accept},
              {"itl_p50_ms", j.itl.p50},
              {"itl_p90_ms", j.itl.p90},
              {"itl_p99_ms", j.itl.p99},
              {"itl_max_ms", j.itl.max},
              {"prompt_per_token_ms", processed > 0 ? j.prompt_ms / processed : 0.0},
              {"predicted_per_token_ms", j.n_generated > 0 ? j.gen_ms / j.n_generated : 0.0}};
    // A list of proposers: flat numbers per proposer (clients, and llama.cpp's tests, expect every timings value
    // to be a number), e.g. draft_ngram_rounds, draft_ngram_n, draft_ngram_n_accepted.
    if (s.by_proposer.size() > 1)
        for (const auto& b : s.by_proposer) {
            const std::string p = std::string("draft_") + spec_type_name(b.type);
            t[p + "_rounds"] = b.rounds;
            t[p + "_n"] = b.drafted;
            t[p + "_n_accepted"] = b.accepted;
        }
    return t;
}

}  // namespace

json timings_json(const Job& j) { return timings_of(parts_of(j)); }

json timings_json(const std::vector<std::shared_ptr<Job>>& jobs) {
    TimingParts t = parts_of(*jobs[0]);
    for (size_t c = 1; c < jobs.size(); c++) {
        const Job& j = *jobs[c];
        t.n_generated += j.n_generated;
        t.gen_ms = std::max(t.gen_ms, j.gen_ms);  // the choices are generated side by side
        t.spec.add(j.spec);
        if (j.itl.max > t.itl.max) t.itl = j.itl;  // the choice with the longest gap
    }
    return timings_of(t);
}

json prompt_progress_json(const PromptProgress& p) {
    return {{"total", p.total}, {"cache", p.cache}, {"processed", p.processed}, {"time_ms", p.time_ms}};
}

json live_timings_json(const JobProgress& p) {
    const int processed = p.n_prompt - p.n_cached;  // as the final timings: prompt_n + cache_n = the prompt
    return {{"prompt_n", processed},
            {"prompt_ms", p.prompt_ms},
            {"prompt_per_second", p.prompt_ms > 0 ? processed / (p.prompt_ms / 1e3) : 0.0},
            {"cache_n", p.n_cached},
            {"predicted_n", p.n_generated},
            {"predicted_ms", p.gen_ms},
            {"predicted_per_second", p.gen_ms > 0 ? p.n_generated / (p.gen_ms / 1e3) : 0.0},
            {"draft_n", p.n_drafted},
            {"draft_n_accepted", p.n_accepted}};
}

json usage_json(const std::vector<std::shared_ptr<Job>>& jobs, int prompt) {
    int completion = 0;
    for (const auto& j : jobs) completion += j->n_generated;
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", jobs.empty() ? 0 : jobs[0]->n_cached}}}};
}

static json bytes_of(const std::string& s) {
    json a = json::array();
    for (unsigned char c : s) a.push_back(int(c));
    return a;
}

json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
    json out = json::array();
    for (const auto& lp : lps) {
        std::string text = tok.token_to_piece(lp.id, true);
        json top = json::array();
        for (auto [id, l] : lp.top) {
            std::string t = tok.token_to_piece(id, true);
            top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes_of(t)}});
        }
        out.push_back({{"token", text}, {"logprob", lp.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
    }
    return out;
}

json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
    json tokens = json::array(), lp = json::array(), top = json::array(), off = json::array();
    size_t pos = 0;
    for (const auto& e : lps) {
        std::string t = tok.token_to_piece(e.id, true);
        tokens.push_back(t);
        lp.push_back(e.logprob);
        json m = json::object();
        for (auto [id, l] : e.top) m[tok.token_to_piece(id, true)] = l;
        top.push_back(m);
        off.push_back(pos);
        pos += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

json native_probs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
    json out = json::array();
    for (const auto& e : lps) {
        std::string t = tok.token_to_piece(e.id, true);
        json top = json::array();
        for (auto [id, l] : e.top) {
            std::string tt = tok.token_to_piece(id, true);
            top.push_back({{"id", id}, {"token", tt}, {"bytes", bytes_of(tt)}, {"logprob", l}});
        }
        out.push_back(
            {{"id", e.id}, {"token", t}, {"bytes", bytes_of(t)}, {"logprob", e.logprob}, {"top_logprobs", top}});
    }
    return out;
}

json tool_call_json(const ToolCall& call) {
    json j = json::object();
    j["id"] = random_id("call_");
    j["type"] = "function";
    j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
    return j;
}

static json bias_list(const Tokenizer& tok, const JobRequest& r) {
    json out = json::array();
    for (const auto& [id, b] : r.sampling.logit_bias)
        out.push_back({{"token", id}, {"bias", std::isinf(b) ? json(nullptr) : json(b)}});
    if (r.ignore_eos)
        for (int32_t id = 0; id < tok.n_vocab(); id++)
            if (tok.is_eog(id)) out.push_back({{"token", id}, {"bias", nullptr}});
    return out;
}

json generation_settings(const Tokenizer& tok, const JobRequest& r, const ParsedRequest& pr) {
    const SamplerParams& s = r.sampling;
    json samplers = json::array();
    for (SamplerKind k : s.order) samplers.push_back(sampler_kind_name(k));
    return {{"n_predict", r.max_tokens == INT32_MAX ? -1 : r.max_tokens},
            {"seed", s.seed},
            {"temperature", s.temp},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"typical_p", s.typical_p},
            {"repeat_last_n", s.penalty_last_n},
            {"repeat_penalty", s.repeat_penalty},
            {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty},
            {"ignore_eos", r.ignore_eos},
            {"stop", r.stop},
            {"n_probs", pr.n_probs},
            {"samplers", samplers},
            {"speculative.n_max", r.spec.n_max},
            {"speculative.n_min", r.spec.n_min},
            {"speculative.p_min", r.spec.p_min},
            {"stream", pr.stream},
            {"logit_bias", bias_list(tok, r)}};
}

}  // namespace tandem::server
