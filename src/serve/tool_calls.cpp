#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {

std::string trim(const std::string& s) {
    const char* ws = " \t\r\n";
    const size_t a = s.find_first_not_of(ws);
    return a == std::string::npos ? std::string() : s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// {"name": "f", "arguments" | "parameters": {...} or a JSON string} -> a call; false when it is not one.
bool call_from(const json& j, ToolCall& out) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) return false;
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
    out.arguments = args.dump();
    return true;
}

json parse_json(const std::string& s) { return json::parse(s, nullptr, false); }

}  // namespace

ToolFormat tool_format_for_template(const std::string& t) {
    if (t.find("<tool_call>") != std::string::npos) return ToolFormat::HERMES;
    if (t.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::MISTRAL;
    if (t.find("<|python_tag|>") != std::string::npos || (t.find("<|start_header_id|>") != std::string::npos && t.find("tools") != std::string::npos))
        return ToolFormat::LLAMA3;
    if (t.find("tools") != std::string::npos) return ToolFormat::GENERIC;
    return ToolFormat::NONE;
}

ParsedAnswer parse_tool_calls(ToolFormat f, const std::string& text) {
    ParsedAnswer r;
    r.content = text;
    switch (f) {
        case ToolFormat::NONE: return r;
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
                const std::string body = text.substr(a + open.size(), b == std::string::npos ? std::string::npos : b - a - open.size());
                ToolCall c;
                if (!call_from(parse_json(trim(body)), c)) return r;  // not a call after all: all of it is text
                calls.push_back(c);
                rest += text.substr(at, a - at);
                if (b == std::string::npos) break;  // cut off after the JSON: still a call
                at = b + close.size();
            }
            if (calls.empty()) return r;
            r.calls = std::move(calls);
            r.content = trim(rest);
            return r;
        }
        case ToolFormat::LLAMA3: {
            std::string t = trim(text);
            static const std::string tag = "<|python_tag|>";
            if (t.rfind(tag, 0) == 0) t = trim(t.substr(tag.size()));
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
            while (at < t.size()) {
                size_t semi = t.find("};", at);
                const std::string piece = trim(t.substr(at, semi == std::string::npos ? std::string::npos : semi + 1 - at));
                if (!call_from(parse_json(piece), c)) return r;
                calls.push_back(c);
                if (semi == std::string::npos) break;
                at = semi + 2;
            }
            if (calls.size() < 2) return r;
            r.calls = std::move(calls);
            r.content.clear();
            return r;
        }
        case ToolFormat::MISTRAL: {
            static const std::string tag = "[TOOL_CALLS]";
            const size_t a = text.find(tag);
            if (a == std::string::npos) return r;
            json arr = parse_json(trim(text.substr(a + tag.size())));
            if (arr.is_object()) arr = json::array({arr});
            if (!arr.is_array() || arr.empty()) return r;
            std::vector<ToolCall> calls;
            for (const auto& e : arr) {
                ToolCall c;
                if (!call_from(e, c)) return r;
                calls.push_back(c);
            }
            r.calls = std::move(calls);
            r.content = trim(text.substr(0, a));
            return r;
        }
        case ToolFormat::GENERIC: {
            json j = parse_json(trim(text));
            std::vector<ToolCall> calls;
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
            r.content = j.is_object() && j.contains("content") && j["content"].is_string() ? j["content"].get<std::string>() : "";
            return r;
        }
    }
    return r;
}

}  // namespace tandem::server
