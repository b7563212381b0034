// OpenAI-compatible request parsing (serve/openai.h): the body, prompts, embeddings and slot requests, and
// parse_request, which calls one part per concern (serve/request_parts.h) in a fixed order.
#include "serve/openai.h"

#include <cmath>
#include <cstring>

#include "serve/request_parts.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

json error_body(const std::string& message, const std::string& type, int code) {
    return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

SamplerParams server_sampling_defaults() {
    SamplerParams sp;
    sp.temp = 0.8f;
    sp.top_p = 0.95f;
    sp.top_k = 40;
    sp.min_p = 0.05f;
    sp.typical_p = 1.0f;
    sp.repeat_penalty = 1.0f;
    sp.penalty_last_n = 64;
    sp.presence_penalty = 0.0f;
    sp.frequency_penalty = 0.0f;
    sp.seed = UINT64_MAX;
    return sp;
}

std::string valid_utf8(const std::string& s) {
    // nlohmann::ordered_json writes invalid sequences as U+FFFD with error_handler_t::replace; the string literal it
    // produces is parsed back.
    return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

json parse_body(const std::string& body) {
    int depth = 0;
    bool in_str = false, esc = false;
    for (char c : body) {
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > 64) throw BadRequest("the JSON body is nested too deeply");
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    try {
        return json::parse(body);
    } catch (const json::exception& e) {
        throw BadRequest("invalid JSON: " + json_error_text(e));
    }
}

std::string json_error_text(const std::exception& e) {
    std::string m = e.what();
    if (m.rfind("[json.exception.", 0) == 0)
        if (const size_t end = m.find("] "); end != std::string::npos) m.erase(0, end + 2);
    return m;
}

namespace request {

double number(const json& body, const char* key, double def, double lo, double hi) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return def;
    if (!it->is_number()) throw BadRequest(std::string("'") + key + "' must be a number");
    double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi)
        throw BadRequest(strprintf("'%s' must be between %g and %g, got %g", key, lo, hi, v));
    return v;
}

int64_t integer(const json& body, const char* key, int64_t def, int64_t lo, int64_t hi) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return def;
    if (!it->is_number_integer() && !it->is_number_unsigned()) {
        if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>() &&
            std::fabs(it->get<double>()) < 9e15) {
            int64_t v = int64_t(it->get<double>());
            if (v < lo || v > hi)
                throw BadRequest(strprintf("'%s' must be between %lld and %lld", key, (long long)lo, (long long)hi));
            return v;
        }
        throw BadRequest(std::string("'") + key + "' must be an integer");
    }
    if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
        throw BadRequest(std::string("'") + key + "' is too large");
    int64_t v = it->get<int64_t>();
    if (v < lo || v > hi)
        throw BadRequest(
            strprintf("'%s' must be between %lld and %lld, got %lld", key, (long long)lo, (long long)hi, (long long)v));
    return v;
}

bool boolean(const json& body, const char* key, bool def) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return def;
    if (!it->is_boolean()) throw BadRequest(std::string("'") + key + "' must be a boolean");
    return it->get<bool>();
}

}  // namespace request

namespace {

// One prompt: a string, an array of token ids, or llama-server's mix of both ([12, "text", 34]).
PromptInput one_prompt(const json& p, int n_vocab) {
    PromptInput in;
    auto id_of = [&](const json& v) {
        int64_t id = v.get<int64_t>();
        if (id < 0 || id >= n_vocab)
            throw BadRequest(strprintf("prompt token %lld is outside the vocabulary", (long long)id));
        return int32_t(id);
    };
    if (p.is_string()) {
        in.parts.push_back({p.get<std::string>(), {}});
        return in;
    }
    if (p.is_object()) {  // llama-server's {"prompt_string": ..., "multimodal_data": [...]}
        auto it = p.find("prompt_string");
        if (it == p.end() || !it->is_string()) throw BadRequest("a prompt object needs a string 'prompt_string'");
        if (auto m = p.find("multimodal_data"); m != p.end() && !m->is_null() && !(m->is_array() && m->empty()))
            throw BadRequest("multimodal prompts are not supported by this server");
        in.parts.push_back({it->get<std::string>(), {}});
        return in;
    }
    if (!p.is_array()) throw BadRequest("a prompt must be a string, an array of token ids, or an array mixing both");
    for (const auto& v : p) {
        if (v.is_number_integer()) {
            if (in.parts.empty() || !in.parts.back().text.empty()) in.parts.push_back({});
            in.parts.back().ids.push_back(id_of(v));
        } else if (v.is_string()) {
            in.parts.push_back({v.get<std::string>(), {}});
        } else {
            throw BadRequest("a prompt array may hold only token ids and strings");
        }
    }
    return in;
}

}  // namespace

std::vector<PromptInput> parse_prompts(const json& p, int n_vocab) {
    std::vector<PromptInput> out;
    // An array is several prompts when its first element is a string or an array (OpenAI: ["a", "b"] and
    // [[1, 2], [3]]); otherwise it is one prompt (token ids, possibly mixed with strings after the first).
    if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array() || p[0].is_object())) {
        if (p.size() > 16) throw BadRequest("at most 16 prompts in one request");
        for (const auto& e : p) out.push_back(one_prompt(e, n_vocab));
    } else {
        if (p.is_array() && p.empty()) throw BadRequest("'prompt' is empty");
        out.push_back(one_prompt(p, n_vocab));
    }
    return out;
}

EmbeddingRequest parse_embedding_request(const json& body, int n_vocab) {
    if (!body.is_object()) throw BadRequest("the body must be a JSON object");
    EmbeddingRequest r;
    auto it = body.find("input");
    if (it == body.end() || it->is_null()) it = body.find("content");
    if (it == body.end() || it->is_null()) throw BadRequest("'input' is required");
    r.inputs = parse_prompts(*it, n_vocab);
    r.normalize = int(request::integer(body, "embd_normalize", 2, -1, 64));
    if (auto f = body.find("encoding_format"); f != body.end() && !f->is_null()) {
        if (!f->is_string() || (*f != "float" && *f != "base64"))
            throw BadRequest("'encoding_format' must be \"float\" or \"base64\"");
        r.base64 = *f == "base64";
    }
    return r;
}

std::string base64_floats(const std::vector<float>& v) {
    static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bytes;
    bytes.reserve(v.size() * 4);
    for (float f : v) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        for (int b = 0; b < 4; b++) bytes.push_back(char((u >> (8 * b)) & 0xff));  // little-endian on any host
    }
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const uint32_t n = uint32_t(uint8_t(bytes[i])) << 16 |
                           (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0) |
                           (i + 2 < bytes.size() ? uint32_t(uint8_t(bytes[i + 2])) : 0);
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
    }
    return out;
}

SlotActionRequest parse_slot_action(const std::string& id_text, const std::string& query, const std::string& body,
                                    const std::string& save_dir) {
    SlotActionRequest r;
    if (id_text.empty() || id_text.size() > 6 || id_text.find_first_not_of("0123456789") != std::string::npos)
        throw BadRequest("the slot id must be a number: /slots/ID?action=save|restore|erase");
    r.id = std::stoi(id_text);
    std::string action;
    for (size_t at = 0; at <= query.size();) {
        size_t end = query.find('&', at);
        if (end == std::string::npos) end = query.size();
        const std::string kv = query.substr(at, end - at);
        if (kv.rfind("action=", 0) == 0) action = kv.substr(7);
        at = end + 1;
    }
    if (action == "save") r.action = JobRequest::SlotAction::SAVE;
    else if (action == "restore") r.action = JobRequest::SlotAction::RESTORE;
    else if (action == "erase") return r.action = JobRequest::SlotAction::ERASE, r;
    else throw BadRequest("action must be save, restore or erase: /slots/ID?action=save");
    if (save_dir.empty())
        throw BadRequest("saving and restoring slots needs a directory: start the server with --slot-save-path DIR");
    const json b = parse_body(body);
    if (!b.is_object() || !b.contains("filename") || !b["filename"].is_string())
        throw BadRequest("'filename' must be a string");
    r.filename = b["filename"].get<std::string>();
    bool ok = !r.filename.empty() && r.filename.size() <= 255 && r.filename[0] != '.';
    for (unsigned char ch : r.filename) ok = ok && ch >= 0x20 && ch != 0x7f && ch != '/' && ch != '\\' && ch != ':';
    if (!ok)
        throw BadRequest("invalid filename '" + valid_utf8(r.filename) +
                         "': a plain file name, without directories or a leading dot");
    r.path = save_dir + (save_dir.back() == '/' ? "" : "/") + r.filename;
    return r;
}

void refuse_unimplemented(const json& body) {
    auto present = [&](const char* k) {
        auto it = body.find(k);
        if (it == body.end() || it->is_null()) return false;
        if (it->is_string()) return !it->get<std::string>().empty();
        if (it->is_array() || it->is_object()) return !it->empty();
        return !(it->is_boolean() && !it->get<bool>());
    };
    for (const char* k : {"functions", "lora"})
        if (present(k)) throw BadRequest(std::string("'") + k + "' is not supported by this server yet");
    if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
        const std::string type = it->is_object() ? it->value("type", "") : "";
        if (type != "text" && type != "json_object" && type != "json_schema")
            throw BadRequest("'response_format' must be {\"type\": \"text\"}, \"json_object\" or \"json_schema\"");
    }
}

ParsedRequest parse_request(const json& body, bool chat, const ServerLimits& lim) {
    if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
    ParsedRequest r;
    if (body.contains("model") && !body["model"].is_string() && !body["model"].is_null())
        throw BadRequest("'model' must be a string");
    if (chat) {
        request::parse_chat(body, lim.parallel_tool_calls, r);
    } else {
        auto it = body.find("prompt");
        if (it == body.end()) throw BadRequest("'prompt' is required");
        r.prompts = parse_prompts(*it, lim.n_vocab);
    }
    refuse_unimplemented(body);
    // the parts in the order their errors are reported (request_parts.h)
    request::parse_output_format(body, lim, r);
    r.job.sampling = request::parse_sampling(body, lim);
    request::parse_logit_bias(body, lim, r.job.sampling);
    request::parse_chat_continuation(body, chat, r);
    request::parse_answer_shape(body, lim, r);
    request::parse_logprobs(body, chat, r);
    r.job.stop = request::parse_stops(body);
    request::parse_native_fields(body, r);
    request::parse_spec_overrides(body, lim, r.job);
    return r;
}

}  // namespace tandem::server
