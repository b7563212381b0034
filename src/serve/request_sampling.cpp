// How a request's tokens are chosen (serve/request_parts.h): the sampler fields over the server's defaults, the
// seed, the sampler order, and logit_bias.
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "serve/request_parts.h"
#include "tandem/error.h"

namespace tandem::server::request {

namespace {

// `samplers`: a ';'-separated string or an array of names -> sp.order.
void parse_sampler_order(const json& body, SamplerParams& sp) {
    auto it = body.find("samplers");
    if (it == body.end() || it->is_null()) return;
    std::string list;
    if (it->is_string()) list = it->get<std::string>();
    else if (it->is_array()) {
        for (const auto& v : *it) {
            if (!v.is_string()) throw BadRequest("'samplers' must be a list of names");
            list += v.get<std::string>() + ";";
        }
    } else throw BadRequest("'samplers' must be a string or an array of names");
    try {
        sp.order = parse_sampler_names(list);
    } catch (const Error& e) {
        throw BadRequest(e.what());
    }
}

// The token ids one logit_bias entry applies to: `id_value` when it is an integer, else `key` as a decimal id, else
// the tokens of `key` as text (llama-server).
std::vector<int32_t> bias_ids(const std::string& key, const json* id_value, const ServerLimits& lim) {
    std::vector<int32_t> ids;
    if (id_value && id_value->is_number_integer()) {
        int64_t id = id_value->get<int64_t>();
        if (id < 0 || id >= lim.n_vocab)
            throw BadRequest(strprintf("logit_bias: %lld is not a token id of this model", (long long)id));
        ids.push_back(int32_t(id));
        return ids;
    }
    char* end = nullptr;
    long id = std::strtol(key.c_str(), &end, 10);
    if (!key.empty() && !*end) {
        if (id < 0 || id >= lim.n_vocab) throw BadRequest("logit_bias: '" + key + "' is not a token id of this model");
        ids.push_back(int32_t(id));
    } else if (lim.tokenize) {
        ids = lim.tokenize(key);
    } else {
        throw BadRequest("logit_bias: '" + key + "' is not a token id");
    }
    return ids;
}

}  // namespace

SamplerParams parse_sampling(const json& body, const ServerLimits& lim) {
    const SamplerParams& d = lim.sampling;
    SamplerParams sp = d;
    sp.temp = float(number(body, "temperature", d.temp, 0.0, 100.0));
    sp.top_p = float(number(body, "top_p", d.top_p, 0.0, 1.0));
    sp.top_k = int(integer(body, "top_k", d.top_k, 0, 1 << 20));
    sp.min_p = float(number(body, "min_p", d.min_p, 0.0, 1.0));
    sp.typical_p = float(number(body, "typical_p", d.typical_p, 0.0, 1.0));
    sp.repeat_penalty = float(number(body, "repeat_penalty", d.repeat_penalty, 0.0, 10.0));
    sp.penalty_last_n = int(integer(body, "repeat_last_n", d.penalty_last_n, -1, 1 << 20));
    sp.presence_penalty = float(number(body, "presence_penalty", d.presence_penalty, -2.0, 2.0));
    sp.frequency_penalty = float(number(body, "frequency_penalty", d.frequency_penalty, -2.0, 2.0));
    sp.seed = uint64_t(integer(body, "seed", -1, INT64_MIN / 2, INT64_MAX / 2));
    if (!body.contains("seed") || body["seed"].is_null() || int64_t(sp.seed) == -1)
        sp.seed = d.seed != UINT64_MAX ? d.seed : uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    parse_sampler_order(body, sp);
    return sp;
}

void parse_logit_bias(const json& body, const ServerLimits& lim, SamplerParams& sp) {
    auto it = body.find("logit_bias");
    if (it == body.end() || it->is_null()) return;
    sp.logit_bias.clear();  // the request's bias replaces the server's (-l)
    // OpenAI's {"id": bias}, and llama-server's [[id, bias], ...]; a key or first element that is not a number
    // is text: the bias applies to each of its tokens (llama-server). Bias false bans, true is 0.
    auto add = [&](const std::string& key, const json* id_value, const json& v) {
        if (!v.is_number() && !v.is_boolean()) throw BadRequest("logit_bias values must be numbers");
        double b = v.is_boolean() ? (v.get<bool>() ? 0.0 : -INFINITY) : v.get<double>();
        if (std::isnan(b) || b > 100 || (b < -100 && std::isfinite(b)))
            throw BadRequest("logit_bias values must be between -100 and 100");
        const float bias = b <= -100 ? -INFINITY : float(b);
        for (int32_t id : bias_ids(key, id_value, lim)) sp.logit_bias.emplace_back(id, bias);
    };
    if (it->is_object()) {
        for (auto& [k, v] : it->items()) add(k, nullptr, v);
    } else if (it->is_array()) {
        for (const auto& e : *it) {
            if (!e.is_array() || e.size() != 2 || !(e[0].is_number_integer() || e[0].is_string()))
                throw BadRequest("logit_bias arrays hold [token id or text, bias] pairs");
            add(e[0].is_string() ? e[0].get<std::string>() : std::string(), e[0].is_string() ? nullptr : &e[0], e[1]);
        }
    } else {
        throw BadRequest(
            "'logit_bias' must be an object mapping token ids to numbers, or an array of [id, bias] pairs");
    }
    if (count_banned(sp.logit_bias) >= size_t(lim.n_vocab))
        throw BadRequest(
            strprintf("logit_bias bans all %d tokens of the vocabulary: nothing could be generated", lim.n_vocab));
}

}  // namespace tandem::server::request
