// How a conversation becomes the prompt text: the model's own Jinja chat template, executed (src/chat/jinja.h),
// or, when asked, one of the built-in renderers (tandem/chat.h). Chosen once at start-up, as llama-server does:
//   --chat-template NAME   a built-in renderer (chatml, llama3, ...), whatever the model carries
//   --chat-template TEXT   this Jinja text (llama-server treats a value that is not a known name as a template)
//   --chat-template-file   the Jinja text of that file
//   otherwise              the model's tokenizer.chat_template; ChatML when it has none
//   --no-jinja             a Jinja text is only recognised by its markers and rendered by the matching built-in
// A template that cannot be parsed is an error at start-up naming the line and the construct; nothing falls back
// silently.
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/chat.h"

namespace tandem {

namespace jinja {
class Template;
}

struct ChatFormatterOptions {
    std::string model_template;  // tokenizer.chat_template ("" when absent)
    std::string template_text;  // --chat-template-file, or --chat-template TEXT
    std::string template_name;  // --chat-template NAME (a built-in)
    bool jinja = true;  // --jinja (default) / --no-jinja
    std::string bos_token, eos_token;
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // --chat-template-kwargs: extra variables
    std::function<std::tm()> now;  // strftime_now's clock (tests); empty: local time
};

class ChatFormatter {
public:
    // Throws tandem::Error: an unknown name, a template that cannot be parsed, or (with --no-jinja) one that no
    // built-in renderer recognises.
    explicit ChatFormatter(const ChatFormatterOptions& o);
    ~ChatFormatter();

    // messages: OpenAI-style objects (role, content as a string; tool_calls, tool_call_id, name,
    // reasoning_content passed to the template as they are); tools: an array or null; kwargs: the request's
    // chat_template_kwargs (over --chat-template-kwargs). Returns the prompt text with a leading BOS text removed
    // when add_bos (the tokenizer adds the BOS token itself, as llama.cpp does). Throws tandem::Error for a
    // template failure, raise_exception included (the template's message).
    std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                      bool add_generation_prompt, const nlohmann::ordered_json& kwargs, bool add_bos) const;

    // Whether the template renders an assistant message's second tool call (llama.cpp's template capability
    // supports_parallel_tool_calls: a probe conversation of two calls, the second's name looked for in the text; a
    // template that fails on it renders none). A built-in renderer (no tool calls in its text) counts as yes.
    bool renders_parallel_tool_calls() const;

    bool is_jinja() const { return jinja_ != nullptr; }
    const std::string& source() const { return source_; }  // the template text, or the built-in's name
    std::string description() const;  // for logs and /props: "jinja (the model's)" / "llama3 (built-in)"
    ChatTemplate builtin() const { return builtin_; }

private:
    ChatFormatterOptions o_;
    std::unique_ptr<jinja::Template> jinja_;
    ChatTemplate builtin_ = ChatTemplate::CHATML;
    std::string source_, origin_;
};

}  // namespace tandem
