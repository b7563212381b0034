#include "serve/responses.h"

#include "serve/openai.h"
#include "tandem/error.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

namespace {

json message_content(const json& c, const std::string& where) {
    if (c.is_string()) return c;
    if (!c.is_array()) throw BadRequest(where + ": content must be a string or an array of content parts");
    json parts = json::array();
    for (const auto& p : c) {
        const std::string type = p.is_object() ? p.value("type", "") : "";
        if (type == "input_text" || type == "output_text" || type == "text") {
            if (!p.contains("text") || !p["text"].is_string())
                throw BadRequest(where + ": a text part needs a string 'text'");
            parts.push_back({{"type", "text"}, {"text", p["text"]}});
        } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
            throw BadRequest(where + ": " + type + " is not supported: tandem runs text-only models");
        } else {
            throw BadRequest(where + ": unsupported content part type '" + type + "'");
        }
    }
    return parts;
}

// The text of content given as a string or as text parts.
std::string plain_text(const json& c, const std::string& where) {
    const json m = message_content(c, where);
    if (m.is_string()) return m;
    std::string s;
    for (const auto& p : m) s += (s.empty() ? "" : "\n") + p["text"].get<std::string>();
    return s;
}

std::string str_field(const json& m, const char* k, const std::string& where) {
    if (!m.contains(k) || !m[k].is_string()) throw BadRequest(where + ": needs a string '" + k + "'");
    return m[k];
}

// The assistant message the next assistant-side item (text, call, reasoning) belongs to: the last message when
// it is the assistant's, else a new one.
json& assistant_turn(json& msgs) {
    if (msgs.empty() || msgs.back().value("role", "") != "assistant")
        msgs.push_back({{"role", "assistant"}, {"content", ""}});
    return msgs.back();
}

std::string suffix_of(const std::string& id) {
    return id.size() > 5 && id.compare(0, 5, "resp_") == 0 ? id.substr(5) : id;
}

json function_call_item(const ToolCall& c, const std::string& status, bool with_arguments) {
    const std::string x = c.id.compare(0, 5, "call_") == 0 ? c.id.substr(5) : c.id;
    return {{"type", "function_call"},
            {"id", "fc_" + x},
            {"call_id", c.id},
            {"name", c.name},
            {"arguments", with_arguments ? c.arguments : std::string()},
            {"status", status}};
}

json reasoning_item(const std::string& id, const std::string* text) {
    json content = json::array();
    if (text) content.push_back({{"type", "reasoning_text"}, {"text", *text}});
    return {{"type", "reasoning"},
            {"id", id},
            {"summary", json::array()},
            {"content", content},
            {"status", text ? "completed" : "in_progress"}};
}

json message_item(const std::string& id, const std::string* text) {
    json content = json::array();
    if (text) content.push_back({{"type", "output_text"}, {"text", *text}, {"annotations", json::array()}});
    return {{"type", "message"},
            {"id", id},
            {"status", text ? "completed" : "in_progress"},
            {"role", "assistant"},
            {"content", content}};
}

}  // namespace

json responses_to_chat(const json& body) {
    if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
    for (const char* k : {"previous_response_id", "conversation", "prompt"})
        if (auto it = body.find(k); it != body.end() && !it->is_null() && !(it->is_array() && it->empty()))
            throw BadRequest(std::string("'") + k + "' is not supported by this server yet");
    json out = json::object();
    if (auto t = body.find("text"); t != body.end() && t->is_object())
        if (auto f = t->find("format"); f != t->end() && f->is_object()) {
            const std::string type = f->value("type", "text");
            if (type == "json_object") {
                out["response_format"] = {{"type", "json_object"}};
            } else if (type == "json_schema") {
                if (!f->contains("schema") || !(*f)["schema"].is_object())
                    throw BadRequest("text.format json_schema needs a 'schema' object");
                out["response_format"] = {{"type", "json_schema"},
                                          {"json_schema",
                                           {{"name", f->value("name", "response")},
                                            {"schema", (*f)["schema"]},
                                            {"strict", f->value("strict", false)}}}};
            } else if (type != "text") {
                throw BadRequest("text.format must be {\"type\": \"text\"}, \"json_object\" or \"json_schema\"");
            }
        }
    json msgs = json::array();
    if (auto ins = body.find("instructions"); ins != body.end() && !ins->is_null()) {
        if (!ins->is_string()) throw BadRequest("'instructions' must be a string");
        msgs.push_back({{"role", "system"}, {"content", *ins}});
    }
    auto in = body.find("input");
    if (in == body.end() || in->is_null()) throw BadRequest("'input' is required");
    if (in->is_string()) {
        msgs.push_back({{"role", "user"}, {"content", *in}});
    } else if (in->is_array()) {
        for (size_t i = 0; i < in->size(); i++) {
            const json& m = (*in)[i];
            const std::string where = strprintf("input[%zu]", i);
            if (!m.is_object()) throw BadRequest(where + " must be an object");
            const std::string type = m.value("type", "message");
            if (type == "function_call") {
                json& turn = assistant_turn(msgs);
                if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
                turn["tool_calls"].push_back(
                    {{"id", str_field(m, "call_id", where)},
                     {"type", "function"},
                     {"function",
                      {{"name", str_field(m, "name", where)}, {"arguments", str_field(m, "arguments", where)}}}});
            } else if (type == "function_call_output") {
                if (!m.contains("output")) throw BadRequest(where + ": needs 'output'");
                msgs.push_back({{"role", "tool"},
                                {"tool_call_id", str_field(m, "call_id", where)},
                                {"content", plain_text(m["output"], where + ".output")}});
            } else if (type == "reasoning") {
                std::string text;
                for (const char* k : {"content", "summary"})
                    if (text.empty() && m.contains(k) && m[k].is_array())
                        for (const auto& p : m[k])
                            if (p.is_object() && p.contains("text") && p["text"].is_string())
                                text += p["text"].get<std::string>();
                if (!text.empty()) {
                    if (!msgs.empty() && msgs.back().value("role", "") == "assistant")
                        msgs.push_back({{"role", "assistant"}, {"content", ""}});
                    assistant_turn(msgs)["reasoning_content"] = text;
                }
            } else if (type == "message") {
                std::string role = str_field(m, "role", where);
                if (role == "developer") role = "system";
                if (role != "system" && role != "user" && role != "assistant")
                    throw BadRequest(where + ": unknown role '" + role + "'");
                json content = message_content(m.contains("content") ? m["content"] : json(""), where);
                if (role == "assistant" && !msgs.empty() && msgs.back().value("role", "") == "assistant" &&
                    !msgs.back().contains("tool_calls") && msgs.back()["content"] == "") {
                    msgs.back()["content"] = content;  // the text after its reasoning item
                } else {
                    msgs.push_back({{"role", role}, {"content", content}});
                }
            } else {
                throw BadRequest(where + ": input items of type '" + type + "' are not supported by this server");
            }
        }
    } else {
        throw BadRequest("'input' must be a string or an array of messages");
    }
    if (msgs.empty()) throw BadRequest("'input' holds no message");
    out["messages"] = msgs;
    if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
        if (!t->is_array()) throw BadRequest("'tools' must be an array of tools");
        json tools = json::array();
        for (size_t i = 0; i < t->size(); i++) {
            const json& tool = (*t)[i];
            if (!tool.is_object()) throw BadRequest(strprintf("tools[%zu] must be an object", i));
            // hosted tools (web_search, file_search, code_interpreter, ...) run on OpenAI's side: no model here
            // can call them, so they are left out, as llama-server does
            if (tool.value("type", "") != "function") continue;
            json fn = tool;
            fn.erase("type");
            tools.push_back({{"type", "function"}, {"function", fn}});
        }
        if (!tools.empty()) out["tools"] = tools;
    }
    if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
        if (c->is_object() && c->value("type", "") == "function" && c->contains("name"))
            out["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
        else out["tool_choice"] = *c;
    }
    if (auto v = body.find("max_output_tokens"); v != body.end() && !v->is_null()) out["max_tokens"] = *v;
    // the sampling fields and llama-server's extras (timings_per_token, seed, ...) mean the same here
    for (const char* k : {"temperature", "top_p", "top_k", "min_p", "seed", "stream", "timings_per_token", "stop",
                          "n_keep", "repeat_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
                          "speculative", "parallel_tool_calls", "chat_template_kwargs", "reasoning_format"})
        if (auto v = body.find(k); v != body.end() && !v->is_null()) out[k] = *v;
    return out;
}

json response_items(const std::string& id, const ChatDelta& a) {
    const std::string x = suffix_of(id);
    json items = json::array();
    if (!a.reasoning.empty()) items.push_back(reasoning_item("rs_" + x, &a.reasoning));
    if (!a.content.empty() || a.calls.empty()) items.push_back(message_item("msg_" + x, &a.content));
    for (const auto& c : a.calls) items.push_back(function_call_item(c, "completed", true));
    return items;
}

json response_object(const std::string& id, const std::string& model, int64_t created, const std::string& status,
                     const json& items, const ResponseUsage& u) {
    json r = {{"id", id},
              {"object", "response"},
              {"created_at", created},
              {"status", status},
              {"model", model},
              {"output", items.is_array() ? items : json::array()},
              {"error", nullptr},
              {"incomplete_details", status == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)}};
    if (status == "in_progress") return r;
    std::string text;
    for (const auto& it : r["output"])
        if (it["type"] == "message")
            for (const auto& p : it["content"]) text += p.value("text", "");
    r["output_text"] = text;
    r["usage"] = {{"input_tokens", u.input},
                  {"output_tokens", u.output},
                  {"total_tokens", u.input + u.output},
                  {"input_tokens_details", {{"cached_tokens", u.cached}}},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}}};
    return r;
}

ResponseStream::ResponseStream(std::string id, std::string model, int64_t created)
    : id_(std::move(id)), model_(std::move(model)), created_(created) {}

std::vector<ResponseStream::Event> ResponseStream::start() const {
    const json r = response_object(id_, model_, created_, "in_progress", json::array(), {});
    return {{"response.created", {{"response", r}}}, {"response.in_progress", {{"response", r}}}};
}

void ResponseStream::close(std::vector<Event>& ev) {
    if (open_ == Open::NONE) return;
    const size_t index = items_.size() - 1;
    json& item = items_.back();
    const std::string item_id = item["id"];
    if (open_ == Open::REASONING) {
        ev.push_back({"response.reasoning_text.done",
                      {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"text", text_}}});
        item = reasoning_item(item_id, &text_);
    } else if (open_ == Open::MESSAGE) {
        json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
        ev.push_back({"response.output_text.done",
                      {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"text", text_}}});
        ev.push_back({"response.content_part.done",
                      {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}}});
        item = message_item(item_id, &text_);
    }
    ev.push_back({"response.output_item.done", {{"output_index", index}, {"item", item}}});
    open_ = Open::NONE;
    text_.clear();
}

std::vector<ResponseStream::Event> ResponseStream::push(const ChatDelta& d) {
    std::vector<Event> ev;
    const std::string x = suffix_of(id_);
    auto text_delta = [&](Open kind, const std::string& piece) {
        if (piece.empty()) return;
        if (open_ != kind) {
            close(ev);
            json item;
            if (kind == Open::REASONING) {
                item = reasoning_item("rs_" + x + (n_reasoning_++ ? "_" + std::to_string(n_reasoning_) : ""), nullptr);
            } else {
                item = message_item("msg_" + x + (n_messages_++ ? "_" + std::to_string(n_messages_) : ""), nullptr);
            }
            items_.push_back(item);
            open_ = kind;
            ev.push_back({"response.output_item.added", {{"output_index", items_.size() - 1}, {"item", item}}});
            if (kind == Open::MESSAGE)
                ev.push_back({"response.content_part.added",
                              {{"item_id", item["id"]},
                               {"output_index", items_.size() - 1},
                               {"content_index", 0},
                               {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}}});
        }
        text_ += piece;
        ev.push_back({kind == Open::REASONING ? "response.reasoning_text.delta" : "response.output_text.delta",
                      {{"item_id", items_.back()["id"]},
                       {"output_index", items_.size() - 1},
                       {"content_index", 0},
                       {"delta", piece}}});
    };
    text_delta(Open::REASONING, d.reasoning);
    text_delta(Open::MESSAGE, d.content);
    for (const auto& c : d.calls) {  // a call arrives whole: its item opens, its arguments in one delta, it closes
        close(ev);
        json item = function_call_item(c, "in_progress", false);
        items_.push_back(item);
        const size_t index = items_.size() - 1;
        ev.push_back({"response.output_item.added", {{"output_index", index}, {"item", item}}});
        ev.push_back({"response.function_call_arguments.delta",
                      {{"item_id", item["id"]}, {"output_index", index}, {"delta", c.arguments}}});
        ev.push_back({"response.function_call_arguments.done",
                      {{"item_id", item["id"]}, {"output_index", index}, {"arguments", c.arguments}}});
        items_.back() = function_call_item(c, "completed", true);
        ev.push_back({"response.output_item.done", {{"output_index", index}, {"item", items_.back()}}});
    }
    return ev;
}

std::vector<ResponseStream::Event> ResponseStream::finish(const std::string& status, const ResponseUsage& usage) {
    std::vector<Event> ev;
    if (items_.empty()) {  // nothing at all: an empty message, so the response has its output_text
        const json item = message_item("msg_" + suffix_of(id_), nullptr);
        items_.push_back(item);
        open_ = Open::MESSAGE;
        ev.push_back({"response.output_item.added", {{"output_index", 0}, {"item", item}}});
        ev.push_back({"response.content_part.added",
                      {{"item_id", item["id"]},
                       {"output_index", 0},
                       {"content_index", 0},
                       {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}}});
    }
    close(ev);
    ev.push_back({status == "completed" ? "response.completed" : "response.incomplete",
                  {{"response", response_object(id_, model_, created_, status, items_, usage)}}});
    return ev;
}

}  // namespace tandem::server
