#include "serve/openai.h"

#include <cmath>
#include <cstring>

#include "grammar/grammar.h"
#include "grammar/trigger.h"
#include "grammar/json_schema.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

json error_body(const std::string& message, const std::string& type, int code) {
    return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

SamplerParams ServerLimits::server_sampling_defaults() {
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
        throw BadRequest(std::string("invalid JSON: ") + e.what());
    }
}

namespace {

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

std::string content_text(const json& c, size_t i) {
    if (c.is_string()) return c.get<std::string>();
    if (c.is_null()) return "";
    if (c.is_array()) {  // [{"type": "text", "text": "..."}]
        std::string s;
        for (const auto& part : c) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string())
                throw BadRequest(strprintf("messages[%zu].content: only text parts are supported", i));
            if (!s.empty()) s += "\n";  // as llama-server joins text parts
            s += part["text"].get<std::string>();
        }
        return s;
    }
    throw BadRequest(strprintf("messages[%zu].content must be a string or an array of text parts", i));
}

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
    r.normalize = int(integer(body, "embd_normalize", 2, -1, 64));
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

// The JSON schema a request asks for: `json_schema` (llama-server), response_format {"type": "json_schema",
// "json_schema": {"schema": ...}} (OpenAI), or response_format {"type": "json_object", "schema": ...}
// (llama-server); null when none.
const json* json_schema_of(const json& body) {
    if (auto js = body.find("json_schema"); js != body.end() && !js->is_null()) return &*js;
    auto rf = body.find("response_format");
    if (rf == body.end() || !rf->is_object()) return nullptr;
    const std::string type = rf->value("type", "");
    if (type == "json_schema") {
        auto js = rf->find("json_schema");
        if (js == rf->end() || !js->is_object() || !js->contains("schema"))
            throw BadRequest("response_format json_schema needs {\"json_schema\": {\"schema\": ...}}");
        return &(*js)["schema"];
    }
    if (type == "json_object")
        if (auto sc = rf->find("schema"); sc != rf->end() && !sc->is_null()) return &*sc;
    return nullptr;
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

namespace {

// llama-server's lazy grammar: `grammar_triggers`, a list of {"type": 0 (a token, by its text) or 1 (a word),
// "value": text}. Pattern triggers (types 2 and 3, regular expressions) are refused: tandem's triggers are words.
// A trigger is matched in the answer's text, where control tokens show only if the server shows them (chat
// answers: the template's tool-call and thinking markers).
std::shared_ptr<const grammar::TriggerSpec> parse_grammar_triggers(const json& body, bool has_grammar) {
    if (!has_grammar) throw BadRequest("'grammar_lazy' needs a 'grammar', 'json_schema' or 'response_format' to apply");
    auto spec = std::make_shared<grammar::TriggerSpec>();
    auto it = body.find("grammar_triggers");
    if (it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw BadRequest("'grammar_triggers' must be an array of {\"type\", \"value\"}");
        for (size_t i = 0; i < it->size(); i++) {
            const json& t = (*it)[i];
            const std::string where = strprintf("grammar_triggers[%zu]", i);
            if (!t.is_object() || !t.contains("type") || !t["type"].is_number_integer() || !t.contains("value") ||
                !t["value"].is_string())
                throw BadRequest(where + " must be {\"type\": 0 or 1, \"value\": string}");
            const int type = t["type"];
            if (type == 2 || type == 3)
                throw BadRequest(
                    where +
                    ": pattern triggers (types 2 and 3) are not supported by this server; use word triggers (type 1)");
            if (type != 0 && type != 1) throw BadRequest(where + ".type must be 0 (token) or 1 (word)");
            const std::string word = t["value"];
            // each trigger is matched against every token's text once: bounded, so a request cannot make it slow
            if (word.empty() || word.size() > 256) throw BadRequest(where + ".value must be 1 to 256 bytes");
            spec->words.push_back(word);
        }
    }
    if (spec->words.empty()) throw BadRequest("'grammar_lazy' needs at least one entry in 'grammar_triggers'");
    if (spec->words.size() > 32) throw BadRequest("'grammar_triggers' may hold at most 32 triggers");
    return spec;
}

// `tools`, `tool_choice`, `parallel_tool_calls` of a chat request.
void parse_tools(const json& body, ParsedRequest& r) {
    if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
        if (!t->is_array()) throw BadRequest("'tools' must be an array of tools");
        for (size_t i = 0; i < t->size(); i++) {
            const json& tool = (*t)[i];
            const std::string where = strprintf("tools[%zu]", i);
            if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
                !tool["function"].is_object())
                throw BadRequest(where + " must be {\"type\": \"function\", \"function\": {...}}");
            const json& fn = tool["function"];
            if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
                throw BadRequest(where + ".function needs a non-empty string 'name'");
            if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
                throw BadRequest(where + ".function.parameters must be a JSON schema object");
        }
        r.tools = *t;
    }
    if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
        using TC = ParsedRequest::ToolChoice;
        if (c->is_string()) {
            const std::string v = *c;
            if (v == "auto") r.tool_choice = TC::AUTO;
            else if (v == "none") r.tool_choice = TC::NONE;
            else if (v == "required") r.tool_choice = TC::REQUIRED;
            else
                throw BadRequest(
                    "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
                    "{\"name\": ...}}");
        } else if (c->is_object() && c->contains("function") && (*c)["function"].is_object() &&
                   (*c)["function"].contains("name") && (*c)["function"]["name"].is_string()) {
            r.tool_choice = TC::NAMED;
            r.tool_name = (*c)["function"]["name"];
        } else {
            throw BadRequest(
                "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
                "{\"name\": ...}}");
        }
        if ((r.tool_choice == TC::REQUIRED || r.tool_choice == TC::NAMED) && (!r.tools.is_array() || r.tools.empty()))
            throw BadRequest("'tool_choice' asks for a tool call, but the request has no 'tools'");
        if (r.tool_choice == TC::NAMED) {
            bool found = false;
            for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_name;
            if (!found)
                throw BadRequest("tool_choice names the function '" + r.tool_name + "', which is not among the tools");
        }
    }
    r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
}

}  // namespace

void apply_tool_choice(ParsedRequest& r, ToolFormat format) {
    using TC = ParsedRequest::ToolChoice;
    if (r.tool_choice == TC::AUTO && r.uses_tools() && !r.grammar && format != ToolFormat::NONE) {
        try {
            auto g = grammar::parse_gbnf(tool_call_gbnf(format, r.tools, "", r.parallel_tool_calls));
            grammar::Matcher check(g);
            r.grammar = std::move(g);
            r.lazy = std::make_shared<grammar::TriggerSpec>(tool_call_triggers(format));
        } catch (const std::exception&) {
            // a schema the converter refuses (or of the wrong JSON types): the calls are parsed, not constrained
            // (see the header)
        }
        return;
    }
    if (r.tool_choice != TC::REQUIRED && r.tool_choice != TC::NAMED) return;
    if (r.grammar)
        throw BadRequest("a required tool call cannot be combined with 'grammar', 'json_schema' or 'response_format'");
    if (format == ToolFormat::NONE)
        throw BadRequest("tool_choice asks for a tool call, but this model's chat template has no tool-call format");
    try {
        r.grammar = grammar::parse_gbnf(
            tool_call_gbnf(format, r.tools, r.tool_choice == TC::NAMED ? r.tool_name : "", r.parallel_tool_calls));
        grammar::Matcher check(r.grammar);
    } catch (const Error& e) {
        throw BadRequest(std::string("tools: ") + e.what());
    }
}

ParsedRequest parse_request(const json& body, bool chat, const ServerLimits& lim) {
    if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
    ParsedRequest r;
    if (body.contains("model") && !body["model"].is_string() && !body["model"].is_null())
        throw BadRequest("'model' must be a string");
    if (chat) {
        auto it = body.find("messages");
        if (it == body.end() || !it->is_array() || it->empty())
            throw BadRequest("'messages' must be a non-empty array");
        for (size_t i = 0; i < it->size(); i++) {
            const json& m = (*it)[i];
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
                throw BadRequest(strprintf("messages[%zu] must be an object with a string 'role'", i));
            std::string role = m["role"];
            if (role == "developer") role = "system";
            if (role != "system" && role != "user" && role != "assistant" && role != "tool")
                throw BadRequest(strprintf("messages[%zu]: unknown role '%s'", i, role.c_str()));
            // what the chat template sees: the role, the text, and the fields templates read as they are
            json msg = {{"role", role}, {"content", content_text(m.contains("content") ? m["content"] : json(), i)}};
            for (auto f = m.begin(); f != m.end(); ++f) {
                if (f.key() == "role" || f.key() == "content") continue;
                if (f.key() == "tool_calls" && f->is_array()) {
                    json calls = *f;  // templates expect arguments as an object (transformers' convention)
                    for (auto& c : calls)
                        if (c.is_object() && c.contains("function") && c["function"].is_object())
                            if (auto a = c["function"].find("arguments"); a != c["function"].end() && a->is_string()) {
                                json parsed = json::parse(a->get<std::string>(), nullptr, false);
                                if (!parsed.is_discarded()) *a = parsed;
                            }
                    msg[f.key()] = calls;
                } else {
                    msg[f.key()] = *f;
                }
            }
            r.chat_messages.push_back(msg);
        }
        if (auto rf = body.find("reasoning_format"); rf != body.end() && !rf->is_null()) {
            if (!rf->is_string()) throw BadRequest("'reasoning_format' must be a string");
            r.reasoning_format = rf->get<std::string>();
            if (r.reasoning_format != "none" && r.reasoning_format != "auto" && r.reasoning_format != "deepseek" &&
                r.reasoning_format != "deepseek-legacy")
                throw BadRequest("reasoning_format must be none, auto, deepseek or deepseek-legacy");
        }
        parse_tools(body, r);
        if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
            if (!kw->is_object()) throw BadRequest("'chat_template_kwargs' must be an object");
            r.template_kwargs = *kw;
        }
    } else {
        auto it = body.find("prompt");
        if (it == body.end()) throw BadRequest("'prompt' is required");
        r.prompts = parse_prompts(*it, lim.n_vocab);
    }
    refuse_unimplemented(body);
    // structured output: a GBNF grammar, or JSON mode
    if (auto g = body.find("grammar");
        g != body.end() && !g->is_null() && !(g->is_string() && g->get<std::string>().empty())) {
        if (!g->is_string()) throw BadRequest("'grammar' must be a string (GBNF)");
        try {
            r.grammar = grammar::parse_gbnf(g->get<std::string>());
            grammar::Matcher check(r.grammar);  // its first state: the bounds of grammar.h apply here, as a 400
        } catch (const Error& e) {
            throw BadRequest(std::string("'grammar': ") + e.what());
        }
    } else if (const json* schema = json_schema_of(body)) {
        try {
            r.grammar = grammar::parse_gbnf(grammar::json_schema_to_gbnf(*schema));
            grammar::Matcher check(r.grammar);
        } catch (const Error& e) {
            throw BadRequest(e.what());
        }
    } else if (auto rf = body.find("response_format");
               rf != body.end() && rf->is_object() && rf->value("type", "") == "json_object") {
        r.grammar = grammar::parse_gbnf(grammar::json_object_gbnf());
    } else if (lim.default_grammar && r.tool_choice != ParsedRequest::ToolChoice::REQUIRED &&
               r.tool_choice != ParsedRequest::ToolChoice::NAMED) {
        r.grammar = lim.default_grammar;  // --grammar / --grammar-file
    }
    if (boolean(body, "grammar_lazy", false)) r.lazy = parse_grammar_triggers(body, r.grammar != nullptr);

    JobRequest& j = r.job;
    SamplerParams& sp = j.sampling;
    const SamplerParams& d = lim.sampling;
    sp = d;
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
    if (auto it = body.find("samplers"); it != body.end() && !it->is_null()) {
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
    if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
        sp.logit_bias.clear();  // the request's bias replaces the server's (-l)
        // OpenAI's {"id": bias}, and llama-server's [[id, bias], ...]; a key or first element that is not a number
        // is text: the bias applies to each of its tokens (llama-server). Bias false bans, true is 0.
        auto add = [&](const std::string& key, const json* id_value, const json& v) {
            if (!v.is_number() && !v.is_boolean()) throw BadRequest("logit_bias values must be numbers");
            double b = v.is_boolean() ? (v.get<bool>() ? 0.0 : -INFINITY) : v.get<double>();
            if (std::isnan(b) || b > 100 || (b < -100 && std::isfinite(b)))
                throw BadRequest("logit_bias values must be between -100 and 100");
            const float bias = b <= -100 ? -INFINITY : float(b);
            std::vector<int32_t> ids;
            if (id_value && id_value->is_number_integer()) {
                int64_t id = id_value->get<int64_t>();
                if (id < 0 || id >= lim.n_vocab)
                    throw BadRequest(strprintf("logit_bias: %lld is not a token id of this model", (long long)id));
                ids.push_back(int32_t(id));
            } else {
                char* end = nullptr;
                long id = std::strtol(key.c_str(), &end, 10);
                if (!key.empty() && !*end) {
                    if (id < 0 || id >= lim.n_vocab)
                        throw BadRequest("logit_bias: '" + key + "' is not a token id of this model");
                    ids.push_back(int32_t(id));
                } else if (lim.tokenize) {
                    ids = lim.tokenize(key);
                } else {
                    throw BadRequest("logit_bias: '" + key + "' is not a token id");
                }
            }
            for (int32_t id : ids) sp.logit_bias.emplace_back(id, bias);
        };
        if (it->is_object()) {
            for (auto& [k, v] : it->items()) add(k, nullptr, v);
        } else if (it->is_array()) {
            for (const auto& e : *it) {
                if (!e.is_array() || e.size() != 2 || !(e[0].is_number_integer() || e[0].is_string()))
                    throw BadRequest("logit_bias arrays hold [token id or text, bias] pairs");
                add(e[0].is_string() ? e[0].get<std::string>() : std::string(), e[0].is_string() ? nullptr : &e[0],
                    e[1]);
            }
        } else {
            throw BadRequest(
                "'logit_bias' must be an object mapping token ids to numbers, or an array of [id, bias] pairs");
        }
        if (count_banned(sp.logit_bias) >= size_t(lim.n_vocab))
            throw BadRequest(
                strprintf("logit_bias bans all %d tokens of the vocabulary: nothing could be generated", lim.n_vocab));
    }
    if (boolean(body, "continue_final_message", false) && boolean(body, "add_generation_prompt", false))
        throw BadRequest("'continue_final_message' and 'add_generation_prompt' exclude each other");
    if (chat) {
        r.add_generation_prompt = boolean(body, "add_generation_prompt", true);
        const json& last = r.chat_messages.back();
        // a final assistant message is continued (llama-server's prefill, or continue_final_message as vLLM)
        r.prefill_assistant = last["role"] == "assistant" && !last.contains("tool_calls") &&
                              (r.add_generation_prompt || boolean(body, "continue_final_message", false));
        if (r.prefill_assistant) r.add_generation_prompt = true;
        const size_t n = r.chat_messages.size();
        if (r.prefill_assistant && n >= 2 && r.chat_messages[n - 2]["role"] == "assistant")
            throw BadRequest("cannot have two or more assistant messages at the end of the list");
    }

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
    j.n_top_logprobs = r.logprobs ? r.top_logprobs : -1;
    if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
        if (it->is_string()) r.job.stop.push_back(it->get<std::string>());
        else if (it->is_array()) {
            if (it->size() > 16) throw BadRequest("at most 16 stop strings");
            for (const auto& v : *it) {
                if (!v.is_string()) throw BadRequest("'stop' must be a string or an array of strings");
                r.job.stop.push_back(v.get<std::string>());
            }
        } else throw BadRequest("'stop' must be a string or an array of strings");
        for (const auto& s : r.job.stop)
            if (s.empty()) throw BadRequest("stop strings must not be empty");
    }
    r.truncate_prompt_tokens = int(integer(body, "truncate_prompt_tokens", -1, -1, INT32_MAX));
    // llama-server's native fields (/completion; accepted everywhere)
    r.n_probs = int(integer(body, "n_probs", 0, 0, 20));
    if (r.n_probs > 0 && !r.logprobs) {
        r.logprobs = true;
        r.top_logprobs = r.n_probs;
    }
    j.n_top_logprobs = r.logprobs ? std::max(r.top_logprobs, r.n_probs) : -1;
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

    // Speculative decoding: server defaults, per-request overrides (our nested object, or llama-server's flat
    // "speculative.n_max" keys).
    j.spec = lim.spec_defaults;
    j.spec.n_max = int(integer(body, "speculative.n_max", j.spec.n_max, 0, 256));
    j.spec.n_min = int(integer(body, "speculative.n_min", j.spec.n_min, 0, 256));
    j.spec.p_min = float(number(body, "speculative.p_min", j.spec.p_min, 0.0, 1.0));
    j.id_slot = int(integer(body, "id_slot", -1, -1, 1 << 20));
    j.spec.n_keep = int(integer(body, "n_keep", j.spec.n_keep, -1, INT32_MAX));  // context shift (llama-server)
    if (auto it = body.find("speculative"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) throw BadRequest("'speculative' must be an object");
        j.spec.n_max = int(integer(*it, "n_max", j.spec.n_max, 0, 256));
        j.spec.n_min = int(integer(*it, "n_min", j.spec.n_min, 0, 256));
        j.spec.p_min = float(number(*it, "p_min", j.spec.p_min, 0.0, 1.0));
        if (it->contains("adaptive")) j.spec.adaptive = boolean(*it, "adaptive", true);
        if (auto t = it->find("tree"); t != it->end() && !t->is_null()) {  // "auto" | "off" | true | false
            if (t->is_boolean()) j.spec.tree = t->get<bool>();
            else if (t->is_string() && (*t == "auto" || *t == "off")) j.spec.tree = *t == "auto";
            else throw BadRequest("speculative.tree must be \"auto\", \"off\" or a boolean");
        }
        j.spec.tree_width = int(integer(*it, "tree_width", j.spec.tree_width, 1, 64));
        if (auto l = it->find("latency"); l != it->end() && !l->is_null()) {  // "throughput" | "steady"
            if (*l == "steady") j.spec.max_round_cost = SpecParams::kSteadyRoundCost;
            else if (*l == "throughput") j.spec.max_round_cost = 0.0;
            else throw BadRequest("speculative.latency must be \"throughput\" or \"steady\"");
        }
        j.spec.tree_nodes = int(integer(*it, "tree_nodes", j.spec.tree_nodes, 1, 1024));
        if (auto t = it->find("type"); t != it->end() && !t->is_null()) {
            // a name, a comma-separated list, or an array of names: the proposers chosen from per round
            std::string list;
            if (t->is_string()) {
                list = t->get<std::string>();
            } else if (t->is_array() && !t->empty()) {
                for (const auto& e : *t) {
                    if (!e.is_string()) throw BadRequest("speculative.type: every entry must be a string");
                    list += (list.empty() ? "" : ",") + e.get<std::string>();
                }
            } else {
                throw BadRequest("speculative.type must be a string or an array of strings");
            }
            try {
                set_spec_types(j.spec, list);
            } catch (const Error& e) {
                throw BadRequest(e.what());
            }
            if (j.spec.type == SpecType::DRAFT && !lim.has_draft)
                throw BadRequest("speculative.type 'draft': the server has no draft model (-md)");
        }
        try {  // the same checks as the command line's
            validate_spec_params(j.spec);
        } catch (const Error& e) {
            throw BadRequest(std::string("speculative: ") + e.what());
        }
    }
    return r;
}

}  // namespace tandem::server
