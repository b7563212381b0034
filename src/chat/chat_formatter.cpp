#include "chat/chat_formatter.h"

#include "chat/jinja.h"
#include "tandem/error.h"

namespace tandem {

using ojson = nlohmann::ordered_json;

ChatFormatter::ChatFormatter(const ChatFormatterOptions& o) : o_(o) {
    static const char* kNames = "chatml, llama2, llama3, mistral, phi3, gemma, zephyr, deepseek, deepseek3";
    if (!o.template_name.empty()) {
        auto t = chat_template_from_name(o.template_name);
        if (!t) throw Error("--chat-template " + o.template_name + ": not a built-in template (" + kNames + ")");
        builtin_ = *t;
        source_ = chat_template_name(*t);
        origin_ = "built-in";
        return;
    }
    std::string text = o.template_text.empty() ? o.model_template : o.template_text;
    origin_ = o.template_text.empty() ? "the model's" : "given";
    if (text.empty()) {  // llama-server's default
        builtin_ = ChatTemplate::CHATML;
        source_ = "chatml";
        origin_ = "built-in, the model has no template";
        return;
    }
    source_ = text;
    if (!o.jinja) {
        auto t = detect_chat_template(text);
        if (!t)
            throw Error(
                std::string("--no-jinja: the chat template is not one tandem's built-in renderers recognise (") +
                kNames + "); drop --no-jinja to run it, or pass --chat-template NAME");
        builtin_ = *t;
        origin_ += ", recognised";
        return;
    }
    try {
        jinja_ = std::make_unique<jinja::Template>(text);
    } catch (const Error& e) {
        throw Error(std::string(origin_ == "given" ? "the given" : "the model's") + " chat template cannot be run: " +
                    e.what() + " (pass --chat-template NAME to use a built-in renderer: " + kNames + ")");
    }
}

ChatFormatter::~ChatFormatter() = default;

std::string ChatFormatter::description() const {
    if (jinja_) return "jinja (" + origin_ + ")";
    return std::string(chat_template_name(builtin_)) + " (" + origin_ + ")";
}

bool ChatFormatter::renders_parallel_tool_calls() const {
    if (!jinja_) return true;
    auto call = [](const char* name) {
        return ojson{{"id", std::string("call_") + name},
                     {"type", "function"},
                     {"function", {{"name", name}, {"arguments", ojson{{"arg", "value"}}}}}};
    };
    const ojson messages =
        ojson::array({{{"role", "user"}, {"content", "User message"}},
                      {{"role", "assistant"},
                       {"content", ""},
                       {"tool_calls", ojson::array({call("tandem_probe_one"), call("tandem_probe_two")})}},
                      {{"role", "tool"}, {"content", "Tool response"}, {"tool_call_id", "call_tandem_probe_one"}},
                      {{"role", "assistant"}, {"content", "The tool response was 'Tool response'"}},
                      {{"role", "user"}, {"content", "User message"}}});
    const ojson tools =
        ojson::array({{{"type", "function"},
                       {"function",
                        {{"name", "tandem_probe_one"},
                         {"description", "Tool description"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"arg", {{"type", "string"}, {"description", "Arg description"}}}}},
                           {"required", ojson::array({"arg"})}}}}}}});
    try {
        return apply(messages, tools, false, ojson::object(), false).find("tandem_probe_two") != std::string::npos;
    } catch (const std::exception&) {
        return false;
    }
}

std::string ChatFormatter::apply(const ojson& messages, const ojson& tools, bool gen, const ojson& kwargs,
                                 bool add_bos) const {
    std::string out;
    if (!jinja_) {
        std::vector<ChatMessage> msgs;
        for (const auto& m : messages)
            msgs.push_back({m.value("role", ""),
                            m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : ""});
        out = render_chat(builtin_, msgs, gen);
    } else {
        ojson ctx = {{"messages", messages},
                     {"add_generation_prompt", gen},
                     {"bos_token", o_.bos_token},
                     {"eos_token", o_.eos_token}};
        if (tools.is_array() && !tools.empty()) ctx["tools"] = tools;
        // today's date, as llama.cpp gives every template (Llama 3.x reads date_string, firefunction datetime)
        jinja::RenderOptions ro;
        ro.now = o_.now;
        const std::tm t = ro.time();
        char day[32];
        std::strftime(day, sizeof day, "%d %b %Y", &t);
        ctx["date_string"] = day;
        std::strftime(day, sizeof day, "%b %d %Y", &t);
        ctx["datetime"] = day;
        ctx["enable_thinking"] = true;  // llama.cpp's default; --reasoning off and chat_template_kwargs set it false
        for (const auto* kw : {&o_.kwargs, &kwargs})
            if (kw->is_object())
                for (auto it = kw->begin(); it != kw->end(); ++it) ctx[it.key()] = it.value();
        try {
            out = jinja_->render(jinja::Value::from_json(ctx), ro);
        } catch (const Error& e) {
            throw Error(std::string("chat template: ") + e.what());
        }
    }
    if (add_bos && !o_.bos_token.empty() && out.compare(0, o_.bos_token.size(), o_.bos_token) == 0)
        out.erase(0, o_.bos_token.size());
    return out;
}

}  // namespace tandem
