// Built-in chat renderers: the prompt layouts of common model families, for --chat-template NAME, --no-jinja and
// models without a template. The model's own Jinja template is executed by src/chat/jinja.h (chosen by
// src/chat/chat_formatter.h); these are the fallbacks the user asks for.
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
