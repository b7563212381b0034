#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "serve/text_match.h"
#include "serve/tool_markers.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {

json parse_json(const std::string& s) { return json::parse(s, nullptr, false); }

// Compact JSON text; invalid UTF-8 in model text is replaced, never an exception.
std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// {"name": "f", "arguments" | "parameters": {...} or a JSON string} -> a call; false when it is not one.
bool call_from(const json& j, ToolCall& out) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
        return false;
    out.name = j["name"];
    json args = json::object();
    for (const char* k : {"arguments", "parameters"})
        if (auto it = j.find(k); it != j.end()) args = *it;
    if (args.is_string()) {  // arguments given as JSON text
        json parsed = json::parse(args.get<std::string>(), nullptr, false);
        if (parsed.is_discarded()) return false;
        args = parsed;
    }
    if (!args.is_object()) return false;
    out.arguments = compact(args);
    return true;
}

// The JSON string starting at s[at] == '"': its end (after the closing quote), npos when s ends inside it.
size_t string_end(const std::string& s, size_t at) {
    for (size_t i = at + 1; i < s.size(); i++) {
        if (s[i] == '\\') i++;
        else if (s[i] == '"') return i + 1;
    }
    return std::string::npos;
}

// The object or array read from s[from] on (its first byte at the start, depth 0), appended to `out` without
// whitespace outside strings; returns its end, or npos when s ends inside it (out then holds the part so far, and
// the state lets a later call resume at s.size()). Structure only: the final parse validates.
size_t compact_value(const std::string& s, size_t from, std::string& out, int& depth, bool& in_string, bool& escaped) {
    for (size_t i = from; i < s.size(); i++) {
        const char c = s[i];
        if (in_string) {
            out += c;
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
        out += c;
        if (c == '"') in_string = true;
        else if (c == '{' || c == '[') depth++;
        else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    }
    return std::string::npos;
}

// The end of the object or array that starts at s[at] (after its last byte), npos when s ends inside it.
size_t value_end(const std::string& s, size_t at) {
    std::string ignored;
    int depth = 0;
    bool in_string = false, escaped = false;
    return compact_value(s, at, ignored, depth, in_string, escaped);
}

// s ends before the object it starts with (after any whitespace) is whole, or before it begins: a call the end of
// the answer cut off (the length limit), not one that is just malformed.
bool unfinished_object(const std::string& s) {
    const size_t at = skip_ws(s, 0);
    return at == s.size() || (s[at] == '{' && value_end(s, at) == std::string::npos);
}

// A JSON array of calls that the end of the text may cut off (MISTRAL's [TOOL_CALLS][...], GENERIC's
// {"tool_calls": [...]}), read a call at a time from s[at] == '['. True when it is one: `calls` gets its whole calls
// (an element {"function": {...}} is read as its function, as GENERIC allows), `end` where the array ends (npos
// when the text ends inside it) and `cut` the text of the last call when the end cut it off.
bool read_call_array(const std::string& s, size_t at, std::vector<ToolCall>& calls, size_t& end, std::string& cut) {
    size_t p = at + 1;
    for (;;) {
        p = skip_ws(s, p);
        if (p < s.size() && s[p] == ']' && calls.empty()) break;  // []
        if (p >= s.size()) {  // cut off between two calls
            end = std::string::npos;
            return true;
        }
        if (s[p] != '{') return false;
        const size_t e = value_end(s, p);
        if (e == std::string::npos) {  // cut off inside this call
            end = e;
            cut = s.substr(p);
            return true;
        }
        const json j = parse_json(s.substr(p, e - p));
        ToolCall c;
        if (!call_from(j.is_object() && j.contains("function") ? j["function"] : j, c)) return false;
        calls.push_back(c);
        p = skip_ws(s, e);
        if (p < s.size() && s[p] == ']') break;
        if (p < s.size() && s[p] != ',') return false;
        if (p < s.size()) p++;
    }
    end = p + 1;
    return true;
}

}  // namespace

ToolFormat tool_format_for_template(const std::string& t) {
    if (t.find("<|channel|>") != std::string::npos) return ToolFormat::HARMONY;
    if (t.find(kDsCallBegin) != std::string::npos)  // R1 writes the arguments in a ```json block
        return t.find("```json") != std::string::npos ? ToolFormat::DEEPSEEK : ToolFormat::DEEPSEEK_V31;
    if (t.find("<tool_call>") != std::string::npos && t.find("<function=") != std::string::npos &&
        t.find("<parameter=") != std::string::npos)
        return ToolFormat::XML;
    if (t.find("<tool_call>") != std::string::npos) return ToolFormat::HERMES;
    if (t.find("[TOOL_CALLS]") != std::string::npos && t.find("[ARGS]") != std::string::npos)
        return ToolFormat::MISTRAL_ARGS;
    if (t.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::MISTRAL;
    if (t.find("<|python_tag|>") != std::string::npos ||
        (t.find("<|start_header_id|>") != std::string::npos && t.find("tools") != std::string::npos))
        return ToolFormat::LLAMA3;
    if (t.find("tools") != std::string::npos) return ToolFormat::GENERIC;
    return ToolFormat::NONE;
}

const std::vector<std::string>& tool_call_markers(ToolFormat f) {
    static const std::vector<std::string> none,
        hermes = {"<tool_call>"}, llama3 = {"<|python_tag|>"}, mistral = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"},
        deepseek = {kDsCallsBegin, kDsCallBegin, kDsSep, kDsCallEnd, kDsCallsEnd},
        harmony = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"};
    switch (f) {
        case ToolFormat::HERMES:
        case ToolFormat::XML: return hermes;
        case ToolFormat::LLAMA3: return llama3;
        case ToolFormat::MISTRAL:
        case ToolFormat::MISTRAL_ARGS: return mistral;
        case ToolFormat::DEEPSEEK:
        case ToolFormat::DEEPSEEK_V31: return deepseek;
        case ToolFormat::HARMONY: return harmony;
        default: return none;
    }
}

static ParsedAnswer parse_calls(ToolFormat f, const std::string& text,
                                const json& tools);  // parse_tool_calls, before the alignment

namespace {

// The schema of parameter `param` of tool `name` (null when unknown).
const json* param_schema(const json& tools, const std::string& name, const std::string& param) {
    if (!tools.is_array()) return nullptr;
    for (const auto& t : tools) {
        const json* fn = t.contains("function") ? &t["function"] : &t;
        if (!fn->is_object() || fn->value("name", "") != name) continue;
        const json* ps = fn->contains("parameters") ? &(*fn)["parameters"] : nullptr;
        if (!ps || !ps->is_object() || !ps->contains("properties") || !(*ps)["properties"].contains(param))
            return nullptr;
        return &(*ps)["properties"][param];
    }
    return nullptr;
}

// XML calls: "<function=NAME>" then "<parameter=P>" VALUE "</parameter>" ... "</function>", in <tool_call> blocks.
// A value ends at the first "\n</parameter>" (as the grammar has it), or at "</parameter>" when the model wrote
// no newline; so a value may hold "</function>" or "</tool_call>" (code). false when a call is malformed (then all
// of it is text).
bool parse_xml_calls(const std::string& text, const json& tools, ParsedAnswer& r) {
    static const std::string open = "<tool_call>", close = "</tool_call>",
                             fn_open = "<function=", fn_close = "</function>",
                             p_open = "<parameter=", p_close = "</parameter>";
    size_t at = text.find(open);
    if (at == std::string::npos) return false;
    std::string rest = text.substr(0, at);
    std::vector<ToolCall> calls;
    while (at != std::string::npos) {
        const size_t block = at;
        size_t p = skip_ws(text, at + open.size());
        bool whole = text.compare(p, fn_open.size(), fn_open) == 0;
        const size_t gt = whole ? text.find('>', p) : std::string::npos;
        whole = gt != std::string::npos;
        ToolCall c;
        json args = json::object();
        if (whole) {
            c.name = trim_ws(text.substr(p + fn_open.size(), gt - p - fn_open.size()));
            p = skip_ws(text, gt + 1);
            while (whole && text.compare(p, p_open.size(), p_open) == 0) {  // the parameters, in order
                const size_t pgt = text.find('>', p);
                size_t pe = pgt == std::string::npos ? pgt : text.find("\n" + p_close, pgt);
                size_t after = pe == std::string::npos ? pe : pe + 1 + p_close.size();
                if (pgt != std::string::npos && pe == std::string::npos) {
                    pe = text.find(p_close, pgt);
                    after = pe == std::string::npos ? pe : pe + p_close.size();
                }
                if (pe == std::string::npos) {
                    whole = false;
                    break;
                }
                const std::string pname = trim_ws(text.substr(p + p_open.size(), pgt - p - p_open.size()));
                std::string v = text.substr(pgt + 1, pe - pgt - 1);
                if (!v.empty() && v.front() == '\n') v.erase(0, 1);  // the newline the format puts before a value
                const json* schema = param_schema(tools, c.name, pname);
                json value = v;
                if (!(schema && is_string_schema(*schema))) {
                    json parsed = parse_json(v);
                    if (!parsed.is_discarded() && !(schema == nullptr && parsed.is_string())) value = parsed;
                }
                args[pname] = value;
                p = skip_ws(text, after);
            }
            whole = whole && !c.name.empty() && text.compare(p, fn_close.size(), fn_close) == 0;
        }
        if (!whole) {
            if (calls.empty()) return false;
            r.cut = text.substr(block);  // a last call cut off (the length limit): the whole ones stand
            break;
        }
        c.arguments = compact(args);
        calls.push_back(c);
        p = skip_ws(text, p + fn_close.size());
        if (text.compare(p, close.size(), close) == 0) p += close.size();  // (cut off before it: still a call)
        at = text.find(open, p);
        rest += text.substr(p, at == std::string::npos ? std::string::npos : at - p);
    }
    r.calls = std::move(calls);
    r.content = trim_ws(rest);
    return true;
}

// Mistral's newer form: "[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}" once per call. A last call cut off (no [ARGS]
// yet, or unfinished arguments) after whole ones is r.cut.
bool parse_mistral_args(const std::string& text, size_t a, ParsedAnswer& r) {
    static const std::string tag = "[TOOL_CALLS]", args_tag = "[ARGS]", id_tag = "[CALL_ID]";
    std::vector<ToolCall> calls;
    size_t at = a;
    while (at < text.size()) {
        if (text.compare(at, tag.size(), tag) != 0) return false;
        const size_t g = text.find(args_tag, at);
        if (g == std::string::npos) {
            if (calls.empty() || text.find(tag, at + tag.size()) != std::string::npos) return false;
            r.cut = text.substr(at);
            break;
        }
        std::string name = text.substr(at + tag.size(), g - at - tag.size());
        if (size_t id = name.find(id_tag); id != std::string::npos) name.erase(id);
        name = trim_ws(name);
        const size_t next = text.find(tag, g);
        const std::string args_text = text.substr(
            g + args_tag.size(), next == std::string::npos ? std::string::npos : next - g - args_tag.size());
        const json args = parse_json(trim_ws(args_text));
        if (name.empty() || !args.is_object()) {
            if (calls.empty() || next != std::string::npos || !unfinished_object(args_text)) return false;
            r.cut = text.substr(at);
            break;
        }
        calls.push_back({name, compact(args), ""});
        at = next == std::string::npos ? text.size() : next;
    }
    r.calls = std::move(calls);
    r.content = trim_ws(text.substr(0, a));
    return !r.calls.empty();
}

}  // namespace

namespace {

// The next call header from `from` on: {"name": "NAME", "arguments" | "parameters": (JSON objects), or
// [TOOL_CALLS]NAME[ARGS] (MISTRAL_ARGS). Sets name and where the arguments begin; npos when there is none yet.
size_t next_header(ToolFormat f, const std::string& s, size_t from, std::string& name, size_t& args_at) {
    if (f == ToolFormat::MISTRAL_ARGS) {
        static const std::string tag = "[TOOL_CALLS]", args = "[ARGS]", id = "[CALL_ID]";
        const size_t a = s.find(tag, from);
        if (a == std::string::npos) return a;
        const size_t g = s.find(args, a);
        if (g == std::string::npos) return g;
        name = s.substr(a + tag.size(), g - a - tag.size());
        if (size_t k = name.find(id); k != std::string::npos) name.erase(k);
        name = trim_ws(name);
        args_at = skip_ws(s, g + args.size());
        return args_at < s.size() ? a : std::string::npos;
    }
    for (size_t k = s.find("\"name\"", from); k != std::string::npos; k = s.find("\"name\"", k + 6)) {
        size_t p = skip_ws(s, k + 6);
        if (p >= s.size() || s[p] != ':') continue;
        p = skip_ws(s, p + 1);
        if (p >= s.size()) return std::string::npos;
        if (s[p] != '"') continue;
        const size_t e = string_end(s, p);
        if (e == std::string::npos) return e;
        const json n = parse_json(s.substr(p, e - p));
        if (!n.is_string()) continue;
        p = skip_ws(s, e);
        if (p >= s.size()) return std::string::npos;
        if (s[p] != ',') continue;
        p = skip_ws(s, p + 1);
        bool key = false;
        for (const char* w : {"\"arguments\"", "\"parameters\""}) {
            const std::string word = w;
            if (s.compare(p, word.size(), word) == 0) {
                key = true;
                p = skip_ws(s, p + word.size());
                break;
            }
            const size_t left = s.size() - p;  // the text may end inside the key
            if (left < word.size() && word.compare(0, left, s, p, left) == 0) return std::string::npos;
        }
        if (!key) continue;
        if (p >= s.size()) return std::string::npos;
        if (s[p] != ':') continue;
        p = skip_ws(s, p + 1);
        if (p >= s.size()) return std::string::npos;
        name = n;
        args_at = p;
        return k;
    }
    return std::string::npos;
}

}  // namespace

bool streams_arguments(ToolFormat f) {
    return f == ToolFormat::HERMES || f == ToolFormat::LLAMA3 || f == ToolFormat::MISTRAL ||
           f == ToolFormat::MISTRAL_ARGS || f == ToolFormat::GENERIC;
}

const std::vector<CallPrefix>& CallScanner::update(const std::string& held) {
    if (!streams_arguments(f_)) return calls_;
    while (!stopped_) {
        if (open_) {
            const size_t end = compact_value(held, pos_, calls_.back().arguments, depth_, in_string_, escaped_);
            if (end == std::string::npos) {
                pos_ = held.size();
                break;
            }
            calls_.back().complete = true;
            open_ = false;
            from_ = end;
        }
        std::string name;
        size_t args_at = 0;
        if (next_header(f_, held, from_, name, args_at) == std::string::npos) break;
        if (held[args_at] != '{') {  // arguments as a JSON string: the calls go out whole at the end
            stopped_ = true;
            break;
        }
        calls_.push_back({name, "", false});
        open_ = true;
        pos_ = args_at;
        depth_ = 0;
        in_string_ = escaped_ = false;
    }
    return calls_;
}

std::vector<CallPrefix> call_prefixes(ToolFormat f, const std::string& held) { return CallScanner(f).update(held); }

ParsedAnswer parse_tool_calls(ToolFormat f, const std::string& text, const json& tools) {
    // a tag the end cut off right after a call ("\n</tool_ca", the next "<tool_c": tags that are not special tokens
    // can be cut inside) is read as the cut part when the text before it holds calls
    static const std::vector<std::string> tool_call_tags = {"<tool_call>", "</tool_call>"};
    const auto& tags = f == ToolFormat::HERMES || f == ToolFormat::XML ? tool_call_tags : tool_call_markers(f);
    std::string body = text;
    if (const size_t tail = partial_suffix(text, tags); tail > 0 && tail < text.size()) {
        const size_t before = text.find_last_not_of(" \t\r\n", text.size() - tail - 1);
        const char c = before == std::string::npos ? '\0' : text[before];
        if (c == '}' || c == ']' || c == '>') body.resize(text.size() - tail);
    }
    ParsedAnswer r = parse_calls(f, body, tools);
    if (body.size() < text.size()) {
        if (r.calls.empty()) r = parse_calls(f, body = text, tools);
        else r.cut += text.substr(body.size());
    }
    // the arguments as the model wrote them (compacted), so a stream of call_prefixes adds up to them
    const auto prefixes = call_prefixes(f, body);
    for (size_t i = 0; i < std::min(r.calls.size(), prefixes.size()); i++)
        if (prefixes[i].complete && prefixes[i].name == r.calls[i].name &&
            parse_json(prefixes[i].arguments) == parse_json(r.calls[i].arguments))
            r.calls[i].arguments = prefixes[i].arguments;
    return r;
}

static ParsedAnswer parse_calls(ToolFormat f, const std::string& text, const json& tools) {
    ParsedAnswer r;
    r.content = text;
    switch (f) {
        case ToolFormat::NONE:
        case ToolFormat::HARMONY: return r;  // serve/chat_answer.h reads harmony's channels
        case ToolFormat::DEEPSEEK:
        case ToolFormat::DEEPSEEK_V31: {
            size_t a = text.find(kDsCallsBegin);
            const size_t first = text.find(kDsCallBegin);
            if (a == std::string::npos || (first != std::string::npos && first < a)) a = first;
            if (a == std::string::npos) return r;
            std::vector<ToolCall> calls;
            size_t at = a;
            while ((at = text.find(kDsCallBegin, at)) != std::string::npos) {
                at += kDsCallBegin.size();
                const size_t sep = text.find(kDsSep, at);
                if (sep == std::string::npos) {
                    if (calls.empty()) return r;
                    r.cut = text.substr(at - kDsCallBegin.size());  // a last call cut off: the whole ones stand
                    break;
                }
                const std::string header = trim_ws(text.substr(at, sep - at));
                size_t end = text.find(kDsCallEnd, sep);
                std::string body = text.substr(
                    sep + kDsSep.size(), end == std::string::npos ? std::string::npos : end - sep - kDsSep.size());
                ToolCall c;
                if (header == "function") {  // R1: NAME, then the arguments in a ```json block
                    const size_t nl = body.find('\n');
                    c.name = trim_ws(body.substr(0, nl));
                    body = nl == std::string::npos ? std::string() : body.substr(nl + 1);
                    const size_t fence = body.find("```json");
                    if (fence != std::string::npos) body = body.substr(fence + 7);
                    const size_t close = body.rfind("```");
                    if (close != std::string::npos) body = body.substr(0, close);
                } else {
                    c.name = header;
                }
                json args = parse_json(trim_ws(body));
                if (c.name.empty() || !args.is_object()) {
                    if (calls.empty() || end != std::string::npos) return r;
                    r.cut = text.substr(at - kDsCallBegin.size());
                    break;
                }
                c.arguments = compact(args);
                calls.push_back(c);
                if (end == std::string::npos) break;  // cut off before its end marker: still a call
                at = end + kDsCallEnd.size();
            }
            if (calls.empty()) return r;
            r.calls = std::move(calls);
            r.content = trim_ws(text.substr(0, a));
            return r;
        }
        case ToolFormat::HERMES: {
            static const std::string open = "<tool_call>", close = "</tool_call>";
            std::string rest;
            size_t at = 0;
            std::vector<ToolCall> calls;
            for (;;) {
                const size_t a = text.find(open, at);
                if (a == std::string::npos) {
                    rest += text.substr(at);
                    break;
                }
                const size_t b = text.find(close, a + open.size());
                const std::string body =
                    text.substr(a + open.size(), b == std::string::npos ? std::string::npos : b - a - open.size());
                ToolCall c;
                if (!call_from(parse_json(trim_ws(body)), c)) {
                    if (b != std::string::npos || calls.empty()) return r;  // not a call after all: all of it is text
                    r.cut = text.substr(a);  // a last call cut off (the length limit): the whole ones stand
                    break;
                }
                calls.push_back(c);
                rest += text.substr(at, a - at);
                if (b == std::string::npos) break;  // cut off after the JSON: still a call
                at = b + close.size();
            }
            if (calls.empty()) return r;
            r.calls = std::move(calls);
            r.content = trim_ws(rest);
            return r;
        }
        case ToolFormat::LLAMA3: {
            std::string t = trim_ws(text);
            static const std::string tag = "<|python_tag|>";
            if (t.rfind(tag, 0) == 0) t = trim_ws(t.substr(tag.size()));
            // one call, or several separated by ';' (as the Llama 3.1 prompt format allows)
            std::vector<ToolCall> calls;
            json j = parse_json(t);
            ToolCall c;
            if (call_from(j, c)) {
                r.calls = {c};
                r.content.clear();
                return r;
            }
            size_t at = 0;
            bool cut_off = false;  // the end cut the calls off after a "; " or inside the last one
            while (at < t.size()) {
                size_t semi = t.find("};", at);
                const std::string piece =
                    trim_ws(t.substr(at, semi == std::string::npos ? std::string::npos : semi + 1 - at));
                if (!call_from(parse_json(piece), c)) {
                    if (calls.empty() || semi != std::string::npos || !unfinished_object(piece)) return r;
                    r.cut = piece;
                    cut_off = true;
                    break;
                }
                calls.push_back(c);
                if (semi == std::string::npos) break;
                at = semi + 2;
                cut_off = at >= t.size();
            }
            if (calls.size() < (cut_off ? 1u : 2u)) return r;
            r.calls = std::move(calls);
            r.content.clear();
            return r;
        }
        case ToolFormat::XML: {
            ParsedAnswer x;
            return parse_xml_calls(text, tools, x) ? x : r;
        }
        case ToolFormat::MISTRAL:
        case ToolFormat::MISTRAL_ARGS: {
            static const std::string tag = "[TOOL_CALLS]";
            const size_t a = text.find(tag);
            if (a == std::string::npos) return r;
            const size_t body = text.find_first_not_of(" \t\r\n", a + tag.size());
            if (body != std::string::npos && text[body] != '[' && text[body] != '{') {  // NAME[ARGS]{...}
                ParsedAnswer m;
                return parse_mistral_args(text, a, m) ? m : r;
            }
            json arr = parse_json(trim_ws(text.substr(a + tag.size())));
            if (arr.is_object()) arr = json::array({arr});
            if (arr.is_discarded() && body != std::string::npos && text[body] == '[') {
                // the end cut the array off: its whole calls stand
                std::vector<ToolCall> calls;
                size_t end = 0;
                if (!read_call_array(text, body, calls, end, r.cut) || end != std::string::npos || calls.empty())
                    return {text, {}, ""};
                r.calls = std::move(calls);
                r.content = trim_ws(text.substr(0, a));
                return r;
            }
            if (!arr.is_array() || arr.empty()) return r;
            std::vector<ToolCall> calls;
            for (const auto& e : arr) {
                ToolCall c;
                if (!call_from(e, c)) return r;
                calls.push_back(c);
            }
            r.calls = std::move(calls);
            r.content = trim_ws(text.substr(0, a));
            return r;
        }
        case ToolFormat::GENERIC: {
            const std::string t = trim_ws(text);
            json j = parse_json(t);
            std::vector<ToolCall> calls;
            if (j.is_discarded()) {  // {"tool_calls": [... that the end cut off: its whole calls stand
                static const std::string key = "\"tool_calls\"";
                size_t p = t.empty() || t[0] != '{' ? t.size() : skip_ws(t, 1);
                if (t.compare(p, key.size(), key) != 0) return r;
                p = skip_ws(t, p + key.size());
                if (p >= t.size() || t[p] != ':') return r;
                p = skip_ws(t, p + 1);
                size_t end = 0;
                if (p >= t.size() || t[p] != '[' || !read_call_array(t, p, calls, end, r.cut) || calls.empty())
                    return {text, {}, ""};
                // cut off inside the array, or after it (before the object's "}")
                if (end != std::string::npos && skip_ws(t, end) != t.size()) return {text, {}, ""};
                r.calls = std::move(calls);
                r.content.clear();
                return r;
            }
            if (j.is_object() && j.contains("tool_calls") && j["tool_calls"].is_array()) {
                for (const auto& e : j["tool_calls"]) {
                    ToolCall c;
                    const json& fn = e.contains("function") ? e["function"] : e;
                    if (!call_from(fn, c)) return r;
                    calls.push_back(c);
                }
            } else {
                ToolCall c;
                if (!call_from(j, c)) return r;
                calls.push_back(c);
            }
            r.calls = std::move(calls);
            r.content = j.is_object() && j.contains("content") && j["content"].is_string()
                            ? j["content"].get<std::string>()
                            : "";
            return r;
        }
    }
    return r;
}

}  // namespace tandem::server
