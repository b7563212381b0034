#include "tandem/chat.h"

namespace tandem {

namespace {

struct Named {
    ChatTemplate t;
    const char* name;
};
const Named kNames[] = {
    {ChatTemplate::CHATML, "chatml"},   {ChatTemplate::LLAMA2, "llama2"},     {ChatTemplate::LLAMA3, "llama3"},
    {ChatTemplate::MISTRAL, "mistral"}, {ChatTemplate::PHI3, "phi3"},         {ChatTemplate::GEMMA, "gemma"},
    {ChatTemplate::ZEPHYR, "zephyr"},   {ChatTemplate::DEEPSEEK, "deepseek"}, {ChatTemplate::DEEPSEEK3, "deepseek3"},
};

bool has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// Jinja's trim, which the Llama 3 and Gemma templates apply to every message.
std::string trim(const std::string& s) {
    const char* ws = " \t\n\r\f\v";
    const size_t a = s.find_first_not_of(ws);
    return a == std::string::npos ? std::string() : s.substr(a, s.find_last_not_of(ws) - a + 1);
}

std::string system_prefix(const std::vector<ChatMessage>& m) {
    return !m.empty() && m[0].role == "system" ? m[0].content : std::string();
}

}  // namespace

const char* chat_template_name(ChatTemplate t) {
    for (const auto& n : kNames)
        if (n.t == t) return n.name;
    return "?";
}

std::optional<ChatTemplate> chat_template_from_name(const std::string& name) {
    for (const auto& n : kNames)
        if (name == n.name) return n.t;
    if (name == "qwen" || name == "qwen2") return ChatTemplate::CHATML;
    if (name == "llama-3" || name == "llama3.1") return ChatTemplate::LLAMA3;
    if (name == "llama-2") return ChatTemplate::LLAMA2;
    if (name == "phi-3") return ChatTemplate::PHI3;
    return std::nullopt;
}

std::optional<ChatTemplate> detect_chat_template(const std::string& j) {
    if (j.empty()) return std::nullopt;
    if (has(j, "<|im_start|>")) return ChatTemplate::CHATML;
    if (has(j, "<|start_header_id|>")) return ChatTemplate::LLAMA3;
    if (has(j, "<start_of_turn>")) return ChatTemplate::GEMMA;
    if (has(j, "<｜User｜>") || has(j, "<｜Assistant｜>")) return ChatTemplate::DEEPSEEK3;
    if (has(j, "### Instruction:")) return ChatTemplate::DEEPSEEK;
    if (has(j, "<|user|>") && has(j, "<|end|>")) return ChatTemplate::PHI3;
    if (has(j, "<|user|>")) return ChatTemplate::ZEPHYR;
    if (has(j, "[INST]") && has(j, "<<SYS>>")) return ChatTemplate::LLAMA2;
    if (has(j, "[INST]")) return ChatTemplate::MISTRAL;
    return std::nullopt;
}

std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& msgs, bool gen) {
    std::string out;
    switch (t) {
        case ChatTemplate::CHATML:
            for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            if (gen) out += "<|im_start|>assistant\n";
            break;
        case ChatTemplate::LLAMA3:
            for (const auto& m : msgs)
                out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
            if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        case ChatTemplate::LLAMA2: {
            // [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] assistant </s><s>[INST] user [/INST]
            std::string sys = system_prefix(msgs);
            bool first_user = true;
            for (size_t i = sys.empty() ? 0 : 1; i < msgs.size(); i++) {
                const auto& m = msgs[i];
                if (m.role == "user") {
                    out += "[INST] ";
                    if (first_user && !sys.empty()) out += "<<SYS>>\n" + sys + "\n<</SYS>>\n\n";
                    out += m.content + " [/INST]";
                    first_user = false;
                } else if (m.role == "assistant") {
                    out += " " + m.content + " </s><s>";
                }
            }
            break;
        }
        case ChatTemplate::MISTRAL: {
            std::string sys = system_prefix(msgs);
            for (size_t i = sys.empty() ? 0 : 1; i < msgs.size(); i++) {
                const auto& m = msgs[i];
                if (m.role == "user") {
                    out += "[INST] ";
                    if (!sys.empty()) {
                        out += sys + "\n\n";
                        sys.clear();
                    }
                    out += m.content + "[/INST]";
                } else if (m.role == "assistant") {
                    out += " " + m.content + "</s>";
                }
            }
            break;
        }
        case ChatTemplate::PHI3:
            for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
            if (gen) out += "<|assistant|>\n";
            break;
        case ChatTemplate::ZEPHYR:
            for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "</s>\n";
            if (gen) out += "<|assistant|>\n";
            break;
        case ChatTemplate::GEMMA: {
            std::string sys = system_prefix(msgs);  // Gemma has no system role: prepend it to the first user turn
            for (size_t i = sys.empty() ? 0 : 1; i < msgs.size(); i++) {
                const auto& m = msgs[i];
                std::string role = m.role == "assistant" ? "model" : "user";
                std::string content = trim(m.content);
                if (role == "user" && !sys.empty()) {
                    content = trim(sys) + "\n\n" + content;
                    sys.clear();
                }
                out += "<start_of_turn>" + role + "\n" + content + "<end_of_turn>\n";
            }
            if (gen) out += "<start_of_turn>model\n";
            break;
        }
        case ChatTemplate::DEEPSEEK:
            for (const auto& m : msgs) {
                if (m.role == "system") out += m.content + "\n";
                else if (m.role == "user") out += "### Instruction:\n" + m.content + "\n";
                else if (m.role == "assistant") out += "### Response:\n" + m.content + "\n<|EOT|>\n";
            }
            if (gen) out += "### Response:\n";
            break;
        case ChatTemplate::DEEPSEEK3:
            for (const auto& m : msgs) {
                if (m.role == "system") out += m.content;
                else if (m.role == "user") out += "<｜User｜>" + m.content;
                else if (m.role == "assistant") out += "<｜Assistant｜>" + m.content + "<｜end▁of▁sentence｜>";
            }
            if (gen) out += "<｜Assistant｜>";
            break;
    }
    return out;
}

}  // namespace tandem
