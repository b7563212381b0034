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
            if (!p.contains("text") || !p["text"].is_string()) throw BadRequest(where + ": a text part needs a string 'text'");
            parts.push_back({{"type", "text"}, {"text", p["text"]}});
        } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
            throw BadRequest(where + ": " + type + " is not supported: tandem runs text-only models");
        } else {
            throw BadRequest(where + ": unsupported content part type '" + type + "'");
        }
    }
    return parts;
}

}  // namespace

json responses_to_chat(const json& body) {
    if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
    for (const char* k : {"tools", "previous_response_id", "conversation", "prompt"})
        if (auto it = body.find(k); it != body.end() && !it->is_null() && !(it->is_array() && it->empty()))
            throw BadRequest(std::string("'") + k + "' is not supported by this server yet");
    if (auto t = body.find("text"); t != body.end() && t->is_object())
        if (auto f = t->find("format"); f != t->end() && f->is_object() && f->value("type", "text") != "text")
            throw BadRequest("text.format other than {\"type\": \"text\"} is not supported by this server yet");
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
            if (type != "message") throw BadRequest(where + ": input items of type '" + type + "' are not supported by this server yet");
            if (!m.contains("role") || !m["role"].is_string()) throw BadRequest(where + ": a message needs a string 'role'");
            std::string role = m["role"];
            if (role == "developer") role = "system";
            if (role != "system" && role != "user" && role != "assistant") throw BadRequest(where + ": unknown role '" + role + "'");
            msgs.push_back({{"role", role}, {"content", message_content(m.contains("content") ? m["content"] : json(""), where)}});
        }
    } else {
        throw BadRequest("'input' must be a string or an array of messages");
    }
    if (msgs.empty()) throw BadRequest("'input' holds no message");
    json out = {{"messages", msgs}};
    if (auto v = body.find("max_output_tokens"); v != body.end() && !v->is_null()) out["max_tokens"] = *v;
    // the sampling fields and llama-server's extras (timings_per_token, seed, ...) mean the same here
    for (const char* k : {"temperature", "top_p", "top_k", "min_p", "seed", "stream", "timings_per_token", "stop", "n_keep",
                          "repeat_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "speculative"})
        if (auto v = body.find(k); v != body.end() && !v->is_null()) out[k] = *v;
    return out;
}

json response_message_item(const std::string& msg_id, const std::string* text) {
    json content = json::array();
    if (text) content.push_back({{"type", "output_text"}, {"text", *text}, {"annotations", json::array()}});
    return {{"type", "message"}, {"id", msg_id}, {"status", text ? "completed" : "in_progress"}, {"role", "assistant"},
            {"content", content}};
}

json response_object(const std::string& id, const std::string& msg_id, const std::string& model, int64_t created,
                     const std::string& status, const std::string* text, int input_tokens, int output_tokens, int cached_tokens) {
    json r = {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"model", model},
              {"output", json::array()}, {"error", nullptr},
              {"incomplete_details", status == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)}};
    if (text) {
        r["output"].push_back(response_message_item(msg_id, text));
        r["output_text"] = *text;
        r["usage"] = {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}, {"total_tokens", input_tokens + output_tokens},
                      {"input_tokens_details", {{"cached_tokens", cached_tokens}}},
                      {"output_tokens_details", {{"reasoning_tokens", 0}}}};
    }
    return r;
}

}  // namespace tandem::server
