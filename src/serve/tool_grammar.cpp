// What a model is made to produce for tool calls (tool_calls.h): the GBNF grammar of calls in each format (for
// tool_choice "required" or a named function), the lazy-grammar triggers where a call begins (tool_choice "auto"),
// and the system prompt that describes tools to a template that shows none. The answer side (parsing calls out of
// the text, streaming them) is tool_calls.cpp.
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "serve/tool_calls.h"
#include "serve/tool_markers.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {

const std::string kXmlValueEnd = "\n</parameter>";

// XML: the parameters of one tool, each "<parameter=P>\nVALUE\n</parameter>\n" in declared order, the required
// ones mandatory. String values are raw text (an enum: one of its values); the others are JSON, one rule each
// (added to `args`).
std::string xml_params(const json& params, const std::string& prefix, std::vector<std::pair<std::string, json>>& args) {
    using grammar::gbnf_literal;
    std::string out;
    if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) return out;
    const json required = params.value("required", json::array());
    int n = 0;
    for (const auto& [pname, pschema] : params["properties"].items()) {
        std::string value;
        if (is_string_schema(pschema) && pschema.contains("enum") && pschema["enum"].is_array()) {
            for (const auto& v : pschema["enum"])
                if (v.is_string()) value += (value.empty() ? "" : " | ") + gbnf_literal(v.get<std::string>());
            if (value.empty()) throw Error("parameter '" + pname + "': an enum of no strings");
            value = "(" + value + ")";
        } else if (is_string_schema(pschema)) {
            value = "xml-text";
        } else {
            value = prefix + "-" + std::to_string(++n);
            args.emplace_back(value, pschema);
        }
        std::string one =
            gbnf_literal("<parameter=" + pname + ">\n") + " " + value + " " + gbnf_literal(kXmlValueEnd + "\n");
        const bool req = std::find(required.begin(), required.end(), json(pname)) != required.end();
        out += " " + (req ? one : "(" + one + ")?");
    }
    return out;
}

}  // namespace

std::string tool_call_gbnf(ToolFormat f, const json& tools, const std::string& only_name, bool parallel) {
    using grammar::gbnf_literal;
    if (!tools.is_array() || tools.empty()) throw Error("a tool call needs at least one tool");
    std::vector<std::pair<std::string, json>> args;  // one rule per tool: its arguments
    std::string calls;  // alternatives: one call of each tool
    int n_tools = 0;
    for (const auto& t : tools) {
        const json& fn = t.at("function");
        const std::string name = fn.at("name");
        if (!only_name.empty() && name != only_name) continue;
        json params =
            fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : json{{"type", "object"}};
        const std::string rule = "tool-args-" + std::to_string(++n_tools);
        if (f != ToolFormat::XML) args.emplace_back(rule, params);
        std::string call;
        const std::string jname = json(name).dump();
        switch (f) {
            case ToolFormat::XML:
                call = gbnf_literal("<function=" + name + ">\n") + xml_params(params, rule, args) + " " +
                       gbnf_literal("</function>");
                break;
            case ToolFormat::MISTRAL_ARGS: call = gbnf_literal("[TOOL_CALLS]" + name + "[ARGS]") + " " + rule; break;
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
            case ToolFormat::DEEPSEEK_V31:
                call = gbnf_literal(kDsCallBegin + name + kDsSep) + " " + rule + " " + gbnf_literal(kDsCallEnd);
                break;
            case ToolFormat::HARMONY:
                call = gbnf_literal("<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>") +
                       " " + rule;
                break;
            case ToolFormat::NONE: throw Error("this chat template has no tool-call format to force a call in");
        }
        calls += (calls.empty() ? "" : " | ") + ("(" + call + ")");
    }
    if (n_tools == 0) throw Error("tool_choice names the function '" + only_name + "', which is not among the tools");
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
        case ToolFormat::MISTRAL:
            root = "\"[TOOL_CALLS][\" " + one + (parallel ? " (\", \" " + one + ")*" : "") + " \"]\"";
            break;
        case ToolFormat::MISTRAL_ARGS: root = one + (parallel ? "+" : ""); break;
        case ToolFormat::XML: {
            const std::string block = "\"<tool_call>\\n\" " + one + " \"\\n</tool_call>\"";
            root = (parallel ? block + " (\"\\n\" " + block + ")*" : block) + "\n" +
                   grammar::gbnf_text_without("xml-text", kXmlValueEnd);
            break;
        }
        case ToolFormat::DEEPSEEK:
        case ToolFormat::DEEPSEEK_V31:
            root = gbnf_literal(kDsCallsBegin) + " " + one + (parallel ? "+ " : " ") + gbnf_literal(kDsCallsEnd);
            break;
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
        case ToolFormat::MISTRAL:
        case ToolFormat::MISTRAL_ARGS: t.words = {"[TOOL_CALLS]"}; break;
        case ToolFormat::XML: t.words = {"<tool_call>"}; break;
        case ToolFormat::DEEPSEEK:
        case ToolFormat::DEEPSEEK_V31: t.words = {kDsCallsBegin}; break;
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
    std::string text = "You can call these tools (JSON schemas of their arguments):\n" + tools.dump(2) +
                       "\n\nTo call tools, answer with only a JSON object {\"tool_calls\": [{\"name\": \"<tool "
                       "name>\", \"arguments\": "
                       "{<arguments>}}]}. Otherwise answer normally.";
    json out = messages;
    if (!out.empty() && out[0].value("role", "") == "system" && out[0]["content"].is_string())
        out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + text;
    else out.insert(out.begin(), json{{"role", "system"}, {"content", text}});
    return out;
}

}  // namespace tandem::server
