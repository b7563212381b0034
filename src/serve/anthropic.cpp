#include "serve/anthropic.h"

#include "serve/openai.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {

// Anthropic content (a string or blocks) as OpenAI content; tool blocks are split out by the caller.
json text_content(const json& c, const std::string& where) {
    if (c.is_string()) return c;
    if (!c.is_array()) throw BadRequest(where + ": content must be a string or an array of content blocks");
    json parts = json::array();
    for (const auto& b : c) {
        if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
            throw BadRequest(where + ": every content block needs a 'type'");
        const std::string type = b["type"];
        if (type == "text") {
            if (!b.contains("text") || !b["text"].is_string())
                throw BadRequest(where + ": a text block needs a string 'text'");
            parts.push_back({{"type", "text"}, {"text", b["text"]}});
        } else if (type == "image" || type == "document") {
            throw BadRequest(where + ": image input is not supported: tandem runs text-only models");
        } else if (type == "thinking" || type == "redacted_thinking") {
            // earlier reasoning: the caller takes it as the message's reasoning_content
        } else if (type == "tool_use" || type == "tool_result") {
            // split out by the caller (anthropic_to_openai); anywhere else they do not belong
            throw BadRequest(where + ": a " + type + " block belongs in " +
                             (type == "tool_use" ? "an assistant" : "a user") + " message");
        } else {
            throw BadRequest(where + ": unknown content block type '" + type + "'");
        }
    }
    return parts;
}

}  // namespace

json anthropic_to_openai(const json& body, bool for_count) {
    if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array()) throw BadRequest("messages: field required (an array of messages)");
    if (it->empty()) throw BadRequest("messages: at least one message is required");
    json out = json::object();
    json msgs = json::array();
    if (auto s = body.find("system"); s != body.end() && !s->is_null())
        msgs.push_back({{"role", "system"}, {"content", text_content(*s, "system")}});
    for (size_t i = 0; i < it->size(); i++) {
        const json& m = (*it)[i];
        const std::string where = strprintf("messages.%zu", i);
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw BadRequest(where + ": a message needs a string 'role'");
        const std::string role = m["role"];
        if (role != "user" && role != "assistant") throw BadRequest(where + ": role must be 'user' or 'assistant'");
        json content = m.contains("content") ? m["content"] : json("");
        // tool blocks: an assistant's tool_use blocks become its tool_calls; a user's tool_result blocks become
        // OpenAI tool messages, before the user's own text
        json calls = json::array();
        std::string thinking;  // an assistant's thinking blocks: its reasoning_content (templates that show it)
        if (content.is_array() && role == "assistant")
            for (const auto& b : content)
                if (b.is_object() && b.value("type", "") == "thinking" && b.contains("thinking") &&
                    b["thinking"].is_string())
                    thinking += b["thinking"].get<std::string>();
        if (content.is_array()) {
            json rest = json::array();
            for (size_t k = 0; k < content.size(); k++) {
                const json& b = content[k];
                const std::string type = b.is_object() ? b.value("type", "") : "";
                const std::string bw = where + strprintf(".content.%zu", k);
                if (type == "tool_use" && role == "assistant") {
                    if (!b.contains("name") || !b["name"].is_string())
                        throw BadRequest(bw + ": a tool_use block needs a string 'name'");
                    const json input = b.contains("input") ? b["input"] : json::object();
                    if (!input.is_object()) throw BadRequest(bw + ": a tool_use block's 'input' must be an object");
                    calls.push_back({{"id", b.value("id", "")},
                                     {"type", "function"},
                                     {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
                } else if (type == "tool_result" && role == "user") {
                    const json c = b.contains("content") ? b["content"] : json("");
                    json text = text_content(c, bw);
                    std::string flat;
                    if (text.is_string()) flat = text.get<std::string>();
                    else
                        for (const auto& part : text)
                            flat += (flat.empty() ? "" : "\n") + part["text"].get<std::string>();
                    if (b.value("is_error", false)) flat = "Error: " + flat;
                    msgs.push_back({{"role", "tool"}, {"tool_call_id", b.value("tool_use_id", "")}, {"content", flat}});
                } else {
                    rest.push_back(b);
                }
            }
            if (rest.empty() && (!calls.empty() || role == "user")) {
                if (!calls.empty()) {
                    json msg = {{"role", role}, {"content", ""}, {"tool_calls", calls}};
                    if (!thinking.empty()) msg["reasoning_content"] = thinking;
                    msgs.push_back(msg);
                }
                continue;  // a user message of tool results only
            }
            content = rest;
        }
        json text = text_content(content, where);
        json msg = {{"role", role}, {"content", text}};
        if (!calls.empty()) msg["tool_calls"] = calls;
        if (!thinking.empty()) msg["reasoning_content"] = thinking;
        msgs.push_back(msg);
    }
    out["messages"] = msgs;
    if (!for_count) {
        auto mt = body.find("max_tokens");
        if (mt == body.end() || !mt->is_number_integer() || mt->get<int64_t>() < 1)
            throw BadRequest("max_tokens: a positive integer is required");
        out["max_tokens"] = *mt;
    }
    for (const char* k : {"temperature", "top_p", "top_k", "stream"})
        if (auto v = body.find(k); v != body.end() && !v->is_null()) out[k] = *v;
    // extended thinking: {"type": "enabled", "budget_tokens"} or {"type": "disabled"} switches the template's
    // thinking (enable_thinking); the budget is not enforced (max_tokens bounds the whole answer)
    if (auto v = body.find("thinking"); v != body.end() && !v->is_null()) {
        if (!v->is_object())
            throw BadRequest(
                "thinking: expected {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
        const std::string type = v->value("type", "");
        if (type == "enabled" || type == "disabled")
            out["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
    }
    if (auto v = body.find("stop_sequences"); v != body.end() && !v->is_null()) {
        if (!v->is_array()) throw BadRequest("stop_sequences must be an array of strings");
        out["stop"] = *v;
    }
    if (auto v = body.find("tools"); v != body.end() && !v->is_null()) {
        if (!v->is_array()) throw BadRequest("tools must be an array");
        json tools = json::array();
        for (const auto& t : *v)
            tools.push_back({{"type", "function"},
                             {"function",
                              {{"name", t.value("name", "")},
                               {"description", t.value("description", "")},
                               {"parameters", t.value("input_schema", json::object())}}}});
        out["tools"] = tools;
    }
    if (auto v = body.find("tool_choice"); v != body.end() && !v->is_null()) {
        const std::string type = v->is_object() ? v->value("type", "") : "";
        if (type == "auto") out["tool_choice"] = "auto";
        else if (type == "any") out["tool_choice"] = "required";
        else if (type == "none") out["tool_choice"] = "none";
        else if (type == "tool" && v->contains("name") && (*v)["name"].is_string())
            out["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*v)["name"]}}}};
        else
            throw BadRequest(
                "tool_choice: expected {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": "
                "...}");
        if (v->value("disable_parallel_tool_use", false)) out["parallel_tool_calls"] = false;
    }
    return out;
}

std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_word) {
    if (!stop_word.empty()) return "stop_sequence";
    if (finish_reason == "tool_calls") return "tool_use";
    return finish_reason == "length" ? "max_tokens" : "end_turn";
}

json anthropic_tool_use(const ToolCall& call) {
    return {{"type", "tool_use"},
            {"id", call.id},
            {"name", call.name},
            {"input", json::parse(call.arguments, nullptr, false)}};
}

json anthropic_message(const std::string& id, const std::string& model, const ChatDelta& answer,
                       const std::string& finish_reason, const std::string& stop_word, int input_tokens,
                       int output_tokens, int cached_tokens) {
    const std::string& text = answer.content;
    const auto& calls = answer.calls;
    json content = json::array();
    // local models have no signature to give: an empty one, as llama-server sends
    if (!answer.reasoning.empty())
        content.push_back({{"type", "thinking"}, {"thinking", answer.reasoning}, {"signature", ""}});
    if (!text.empty() || (content.empty() && calls.empty())) content.push_back({{"type", "text"}, {"text", text}});
    for (const auto& c : calls) content.push_back(anthropic_tool_use(c));
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", content},
            {"stop_reason", anthropic_stop_reason(finish_reason, stop_word)},
            {"stop_sequence", stop_word.empty() ? json(nullptr) : json(stop_word)},
            {"usage",
             {{"input_tokens", input_tokens - cached_tokens},
              {"output_tokens", output_tokens},
              {"cache_read_input_tokens", cached_tokens},
              {"cache_creation_input_tokens", 0}}}};
}

std::vector<AnthropicStream::Event> AnthropicStream::push(const ChatDelta& d) {
    std::vector<Event> ev;
    auto text = [&](Open kind, const std::string& piece) {
        if (piece.empty()) return;
        if (open_ != kind) {
            close(ev);
            open_ = kind;
            ev.push_back({"content_block_start",
                          {{"index", ++index_},
                           {"content_block", kind == Open::THINKING
                                                 ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                                 : json{{"type", "text"}, {"text", ""}}}}});
        }
        ev.push_back({"content_block_delta",
                      {{"index", index_},
                       {"delta", kind == Open::THINKING ? json{{"type", "thinking_delta"}, {"thinking", piece}}
                                                        : json{{"type", "text_delta"}, {"text", piece}}}}});
    };
    text(Open::THINKING, d.reasoning);
    text(Open::TEXT, d.content);
    for (const auto& c : d.calls) {  // each call: a tool_use block, its input in one delta
        close(ev);
        json block = anthropic_tool_use(c);
        block["input"] = json::object();
        ev.push_back({"content_block_start", {{"index", ++index_}, {"content_block", block}}});
        ev.push_back({"content_block_delta",
                      {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}}});
        ev.push_back({"content_block_stop", {{"index", index_}}});
        n_calls_++;
    }
    return ev;
}

void AnthropicStream::close(std::vector<Event>& ev) {
    if (open_ == Open::NONE) return;
    if (open_ == Open::THINKING)  // a thinking block ends with its signature (empty: a local model has none)
        ev.push_back(
            {"content_block_delta", {{"index", index_}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}});
    ev.push_back({"content_block_stop", {{"index", index_}}});
    open_ = Open::NONE;
}

std::vector<AnthropicStream::Event> AnthropicStream::finish() {
    std::vector<Event> ev;
    if (index_ < 0) {  // nothing at all: an empty text block, as a blocking request has
        ev.push_back(
            {"content_block_start", {{"index", ++index_}, {"content_block", {{"type", "text"}, {"text", ""}}}}});
        open_ = Open::TEXT;
    }
    close(ev);
    return ev;
}

json anthropic_error(int status, const std::string& message) {
    const char* type = status == 401   ? "authentication_error"
                       : status == 403 ? "permission_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status == 429 ? "rate_limit_error"
                       : status == 503 ? "overloaded_error"
                       : status >= 500 ? "api_error"
                                       : "invalid_request_error";
    return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

}  // namespace tandem::server
