// Chat templates: turn a list of messages into the prompt text a model was trained on. The model's
// tokenizer.chat_template (Jinja) is recognised by its markers and rendered by a built-in renderer of that family
// (tandem does not run Jinja).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tandem {

enum class ChatTemplate { CHATML, LLAMA2, LLAMA3, MISTRAL, PHI3, GEMMA, ZEPHYR, DEEPSEEK, DEEPSEEK3 };

struct ChatMessage {
    std::string role;  // "system", "user", "assistant" (also "developer" -> system, "tool")
    std::string content;
};

const char* chat_template_name(ChatTemplate t);
// "chatml", "llama2", "llama3", "mistral", "phi3", "gemma", "zephyr", "deepseek", "deepseek3"; nullopt if unknown.
std::optional<ChatTemplate> chat_template_from_name(const std::string& name);
// Recognises a Jinja template by its markers; nullopt when it matches no known family.
std::optional<ChatTemplate> detect_chat_template(const std::string& jinja);

// Renders the conversation; with add_generation_prompt the text ends where the assistant's reply begins.
// The BOS token is not included (the tokenizer adds it where the vocabulary asks for it).
std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace tandem
