// The chat parts of a request (serve/request_parts.h): messages as the chat template sees them, reasoning_format,
// tools and tool_choice, chat_template_kwargs, and the assistant prefill.
#include "serve/request_parts.h"
#include "tandem/error.h"

namespace tandem::server::request {

namespace {

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

// messages[i] as the template sees it: the role ("developer" is "system"), the content as text, tool_calls with
// their arguments as objects (transformers' convention), and the other fields as sent.
json template_message(const json& m, size_t i) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw BadRequest(strprintf("messages[%zu] must be an object with a string 'role'", i));
    std::string role = m["role"];
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        throw BadRequest(strprintf("messages[%zu]: unknown role '%s'", i, role.c_str()));
    json msg = {{"role", role}, {"content", content_text(m.contains("content") ? m["content"] : json(), i)}};
    for (auto f = m.begin(); f != m.end(); ++f) {
        if (f.key() == "role" || f.key() == "content") continue;
        if (f.key() == "tool_calls" && f->is_array()) {
            json calls = *f;
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
    return msg;
}

// `tools`: an array of {"type": "function", "function": {"name": ..., "parameters": schema}}.
void parse_tool_list(const json& body, ParsedRequest& r) {
    auto t = body.find("tools");
    if (t == body.end() || t->is_null()) return;
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

// `tool_choice`: "auto", "none", "required" or a named function among r.tools.
void parse_tool_choice(const json& body, ParsedRequest& r) {
    auto c = body.find("tool_choice");
    if (c == body.end() || c->is_null()) return;
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

}  // namespace

void parse_chat(const json& body, bool parallel_default, ParsedRequest& r) {
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty()) throw BadRequest("'messages' must be a non-empty array");
    for (size_t i = 0; i < it->size(); i++) r.chat_messages.push_back(template_message((*it)[i], i));
    if (auto rf = body.find("reasoning_format"); rf != body.end() && !rf->is_null()) {
        if (!rf->is_string()) throw BadRequest("'reasoning_format' must be a string");
        r.reasoning_format = rf->get<std::string>();
        if (r.reasoning_format != "none" && r.reasoning_format != "auto" && r.reasoning_format != "deepseek" &&
            r.reasoning_format != "deepseek-legacy")
            throw BadRequest("reasoning_format must be none, auto, deepseek or deepseek-legacy");
    }
    parse_tool_list(body, r);
    parse_tool_choice(body, r);
    r.parallel_tool_calls = boolean(body, "parallel_tool_calls", parallel_default);
    if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
        if (!kw->is_object()) throw BadRequest("'chat_template_kwargs' must be an object");
        r.template_kwargs = *kw;
    }
}

void parse_chat_continuation(const json& body, bool chat, ParsedRequest& r) {
    if (boolean(body, "continue_final_message", false) && boolean(body, "add_generation_prompt", false))
        throw BadRequest("'continue_final_message' and 'add_generation_prompt' exclude each other");
    if (!chat) return;
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

}  // namespace tandem::server::request
