// What a request's answer holds and when it ends (serve/request_parts.h): max_tokens, n, streaming, logprobs, stop
// strings, and llama-server's native fields.
#include <algorithm>

#include "serve/request_parts.h"

namespace tandem::server::request {

void parse_answer_shape(const json& body, const ServerLimits& lim, ParsedRequest& r) {
    JobRequest& j = r.job;
    r.max_tokens_given =
        body.contains("max_tokens") || body.contains("max_completion_tokens") || body.contains("n_predict");
    int64_t mt = integer(body, "max_tokens", -1, -1, INT32_MAX);
    mt = integer(body, "max_completion_tokens", mt, -1, INT32_MAX);
    mt = integer(body, "n_predict", mt, -1, INT32_MAX);
    if (mt < 0) mt = lim.n_predict;  // the server's -n is the default (llama-server does not cap a request's own value)
    j.max_tokens = mt < 0 ? INT32_MAX : int(mt);
    j.ignore_eos = boolean(body, "ignore_eos", lim.ignore_eos);
    r.n = int(integer(body, "n", 1, 1, lim.max_n));
    r.stream = boolean(body, "stream", false);
    if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) throw BadRequest("'stream_options' must be an object");
        r.include_usage = boolean(*it, "include_usage", false);
    }
}

void parse_logprobs(const json& body, bool chat, ParsedRequest& r) {
    if (chat) {
        r.logprobs = boolean(body, "logprobs", false);
        r.top_logprobs = int(integer(body, "top_logprobs", 0, 0, 20));
    } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
        if (body["logprobs"].is_boolean()) r.logprobs = body["logprobs"].get<bool>();
        else {
            r.top_logprobs = int(integer(body, "logprobs", 0, 0, 20));
            r.logprobs = true;
        }
    }
}

std::vector<std::string> parse_stops(const json& body) {
    std::vector<std::string> stop;
    auto it = body.find("stop");
    if (it == body.end() || it->is_null()) return stop;
    if (it->is_string()) stop.push_back(it->get<std::string>());
    else if (it->is_array()) {
        if (it->size() > 16) throw BadRequest("at most 16 stop strings");
        for (const auto& v : *it) {
            if (!v.is_string()) throw BadRequest("'stop' must be a string or an array of strings");
            stop.push_back(v.get<std::string>());
        }
    } else throw BadRequest("'stop' must be a string or an array of strings");
    for (const auto& s : stop)
        if (s.empty()) throw BadRequest("stop strings must not be empty");
    return stop;
}

void parse_native_fields(const json& body, ParsedRequest& r) {
    r.truncate_prompt_tokens = int(integer(body, "truncate_prompt_tokens", -1, -1, INT32_MAX));
    r.n_probs = int(integer(body, "n_probs", 0, 0, 20));
    if (r.n_probs > 0 && !r.logprobs) {
        r.logprobs = true;
        r.top_logprobs = r.n_probs;
    }
    r.job.n_top_logprobs = r.logprobs ? std::max(r.top_logprobs, r.n_probs) : -1;
    r.return_tokens = boolean(body, "return_tokens", false);
    r.verbose = boolean(body, "verbose", false);
    if (auto it = body.find("response_fields"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw BadRequest("'response_fields' must be an array of field paths");
        for (const auto& f : *it) {
            if (!f.is_string()) throw BadRequest("'response_fields' must be an array of field paths");
            r.response_fields.push_back(f.get<std::string>());
        }
    }
    r.timings_per_token = boolean(body, "timings_per_token", false);
    r.job.return_progress = boolean(body, "return_progress", false);
    r.token_origins = boolean(body, "token_origins", false);
}

}  // namespace tandem::server::request
