#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "serve/text_match.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {


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

// DeepSeek's markers (fullwidth bar U+FF5C, lower one-eighth block U+2581).
const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallBegin = "<｜tool▁call▁begin｜>", kDsSep = "<｜tool▁sep｜>",
                  kDsCallEnd = "<｜tool▁call▁end｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>";

ToolFormat tool_format_for_template(const std::string& t) {
    if (t.find("<|channel|>") != std::string::npos) return ToolFormat::HARMONY;
    if (t.find(kDsCallBegin) != std::string::npos) return ToolFormat::DEEPSEEK;
    if (t.find("<tool_call>") != std::string::npos) return ToolFormat::HERMES;
    if (t.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::MISTRAL;
    if (t.find("<|python_tag|>") != std::string::npos || (t.find("<|start_header_id|>") != std::string::npos && t.find("tools") != std::string::npos))
        return ToolFormat::LLAMA3;
    if (t.find("tools") != std::string::npos) return ToolFormat::GENERIC;
    return ToolFormat::NONE;
}

const std::vector<std::string>& tool_call_markers(ToolFormat f) {
    static const std::vector<std::string> none, hermes = {"<tool_call>"}, llama3 = {"<|python_tag|>"}, mistral = {"[TOOL_CALLS]"},
                                          deepseek = {kDsCallsBegin, kDsCallBegin, kDsSep, kDsCallEnd, kDsCallsEnd},
                                          harmony = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"};
    switch (f) {
        case ToolFormat::HERMES: return hermes;
        case ToolFormat::LLAMA3: return llama3;
        case ToolFormat::MISTRAL: return mistral;
        case ToolFormat::DEEPSEEK: return deepseek;
        case ToolFormat::HARMONY: return harmony;
        default: return none;
    }
}

std::string tool_call_gbnf(ToolFormat f, const json& tools, const std::string& only_name, bool parallel) {
    using grammar::gbnf_literal;
    if (!tools.is_array() || tools.empty()) throw Error("a tool call needs at least one tool");
    std::vector<std::pair<std::string, json>> args;  // one rule per tool: its arguments
    std::string calls;                               // alternatives: one call of each tool
    for (const auto& t : tools) {
        const json& fn = t.at("function");
        const std::string name = fn.at("name");
        if (!only_name.empty() && name != only_name) continue;
        json params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : json{{"type", "object"}};
        const std::string rule = "tool-args-" + std::to_string(args.size() + 1);
        args.emplace_back(rule, params);
        std::string call;
        const std::string jname = json(name).dump();
        switch (f) {
            case ToolFormat::HERMES:
            case ToolFormat::MISTRAL:
            case ToolFormat::GENERIC:
                call = gbnf_literal("{\"name\": " + jname + ", \"arguments\": ") + " " + rule + " \"}\"";
                break;
            case ToolFormat::LLAMA3:
                call = gbnf_literal("{\"name\": " + jname + ", \"parameters\": ") + " " + rule + " \"}\"";
                break;
            case ToolFormat::DEEPSEEK:
                call = gbnf_literal(kDsCallBegin + "function" + kDsSep + name + "\n```json\n") + " " + rule + " " +
                       gbnf_literal("\n```" + kDsCallEnd);
                break;
            case ToolFormat::HARMONY:
                call = gbnf_literal("<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>") + " " + rule;
                break;
            case ToolFormat::NONE: throw Error("this chat template has no tool-call format to force a call in");
        }
        calls += (calls.empty() ? "" : " | ") + ("(" + call + ")");
    }
    if (args.empty()) throw Error("tool_choice names the function '" + only_name + "', which is not among the tools");
    const std::string one = "(" + calls + ")";
    std::string root;
    switch (f) {
        case ToolFormat::HERMES: {
            const std::string block = "\"<tool_call>\\n\" " + one + " \"\\n</tool_call>\"";
            root = parallel ? block + " (\"\\n\" " + block + ")*" : block;
            break;
        }
        case ToolFormat::LLAMA3:  // the marker Llama 3.1-3.3 write before a call, or none
            root = "\"<|python_tag|>\"? " + (parallel ? one + " (\"; \" " + one + ")*" : one);
            break;
        case ToolFormat::MISTRAL: root = "\"[TOOL_CALLS][\" " + one + (parallel ? " (\", \" " + one + ")*" : "") + " \"]\""; break;
        case ToolFormat::DEEPSEEK: root = gbnf_literal(kDsCallsBegin) + " " + one + (parallel ? "+ " : " ") + gbnf_literal(kDsCallsEnd); break;
        case ToolFormat::HARMONY: root = one; break;  // one call per message: the model continues after the result
        case ToolFormat::GENERIC:
            root = "\"{\\\"tool_calls\\\": [\" " + one + (parallel ? " (\", \" " + one + ")*" : "") + " \"]}\"";
            break;
        case ToolFormat::NONE: break;
    }
    return grammar::json_schemas_to_gbnf(args, root);
}

grammar::TriggerSpec tool_call_triggers(ToolFormat f) {
    grammar::TriggerSpec t;
    switch (f) {
        case ToolFormat::NONE: return t;
        case ToolFormat::HERMES: t.words = {"<tool_call>"}; break;
        case ToolFormat::LLAMA3:
            t.words = {"<|python_tag|>"};
            t.at_start = {"{\"name\""};
            break;
        case ToolFormat::MISTRAL: t.words = {"[TOOL_CALLS]"}; break;
        case ToolFormat::DEEPSEEK: t.words = {kDsCallsBegin}; break;
        case ToolFormat::HARMONY: t.words = {"<|channel|>commentary to="}; break;  // analysis is its reasoning
        case ToolFormat::GENERIC: t.at_start = {"{\"tool_calls\""}; break;
    }
    if (f != ToolFormat::HARMONY) {
        t.think_open = "<think>";
        t.think_close = "</think>";
    }
    return t;
}

json messages_with_tool_prompt(const json& messages, const json& tools) {
    std::string text =
        "You can call these tools (JSON schemas of their arguments):\n" + tools.dump(2) +
        "\n\nTo call tools, answer with only a JSON object {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": "
        "{<arguments>}}]}. Otherwise answer normally.";
    json out = messages;
    if (!out.empty() && out[0].value("role", "") == "system" && out[0]["content"].is_string())
        out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + text;
    else
        out.insert(out.begin(), json{{"role", "system"}, {"content", text}});
    return out;
}

ParsedAnswer parse_tool_calls(ToolFormat f, const std::string& text) {
    ParsedAnswer r;
    r.content = text;
    switch (f) {
        case ToolFormat::NONE:
        case ToolFormat::HARMONY: return r;  // serve/chat_answer.h reads harmony's channels
        case ToolFormat::DEEPSEEK: {
            size_t a = text.find(kDsCallsBegin);
            const size_t first = text.find(kDsCallBegin);
            if (a == std::string::npos || (first != std::string::npos && first < a)) a = first;
            if (a == std::string::npos) return r;
            std::vector<ToolCall> calls;
            size_t at = a;
            while ((at = text.find(kDsCallBegin, at)) != std::string::npos) {
                at += kDsCallBegin.size();
                const size_t sep = text.find(kDsSep, at);
                if (sep == std::string::npos) return r;
                const std::string header = trim_ws(text.substr(at, sep - at));
                size_t end = text.find(kDsCallEnd, sep);
                std::string body = text.substr(sep + kDsSep.size(), end == std::string::npos ? std::string::npos : end - sep - kDsSep.size());
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
                if (c.name.empty() || !args.is_object()) return r;
                c.arguments = args.dump();
                calls.push_back(c);
                if (end == std::string::npos) break;
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
                const std::string body = text.substr(a + open.size(), b == std::string::npos ? std::string::npos : b - a - open.size());
                ToolCall c;
                if (!call_from(parse_json(trim_ws(body)), c)) {
                    if (b != std::string::npos || calls.empty()) return r;  // not a call after all: all of it is text
                    rest += text.substr(a);  // a last call cut off (the length limit): the whole ones stand, it is text
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
            while (at < t.size()) {
                size_t semi = t.find("};", at);
                const std::string piece = trim_ws(t.substr(at, semi == std::string::npos ? std::string::npos : semi + 1 - at));
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
            json arr = parse_json(trim_ws(text.substr(a + tag.size())));
            if (arr.is_object()) arr = json::array({arr});
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
            json j = parse_json(trim_ws(text));
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
