#include "serve/reasoning.h"

#include "serve/text_match.h"
#include "tandem/error.h"

namespace tandem::server {

ReasoningFormat reasoning_format_from_name(const std::string& n) {
    if (n == "none") return ReasoningFormat::NONE;
    if (n == "auto" || n == "deepseek") return ReasoningFormat::DEEPSEEK;
    if (n == "deepseek-legacy") return ReasoningFormat::DEEPSEEK_LEGACY;
    throw Error("unknown reasoning format '" + n + "' (expected none, auto, deepseek or deepseek-legacy)");
}

ThinkTags think_tags_for_template(const std::string& t) {
    if (t.find("[THINK]") != std::string::npos && t.find("[/THINK]") != std::string::npos)
        return {"[THINK]", "[/THINK]"};
    if (t.find("<|START_THINKING|>") != std::string::npos) return {"<|START_THINKING|>", "<|END_THINKING|>"};
    if (t.find("<seed:think>") != std::string::npos) return {"<seed:think>", "</seed:think>"};
    return {};
}

bool prompt_opens_thinking(const std::string& prompt, const ThinkTags& tags) {
    size_t end = prompt.size();
    while (end > 0 && (prompt[end - 1] == '\n' || prompt[end - 1] == ' ')) end--;
    return end >= tags.open.size() && prompt.compare(end - tags.open.size(), tags.open.size(), tags.open) == 0;
}

std::string close_thinking(const std::string& prompt, const std::string& template_source) {
    if (prompt_opens_thinking(prompt)) return prompt + "</think>";
    static const std::string chatbot = "<|CHATBOT_TOKEN|>";
    if (template_source.find("<|START_THINKING|>") != std::string::npos && prompt.size() >= chatbot.size() &&
        prompt.compare(prompt.size() - chatbot.size(), chatbot.size(), chatbot) == 0)
        return prompt + "<|START_THINKING|><|END_THINKING|>";
    return prompt;
}

ReasoningSplitter::ReasoningSplitter(ReasoningFormat f, bool starts_inside, ThinkTags tags)
    : f_(f),
      state_(f == ReasoningFormat::NONE ? State::DONE
             : starts_inside            ? State::INSIDE
                                        : State::BEFORE),
      tags_(std::move(tags)) {}

ReasoningSplitter::Delta ReasoningSplitter::push(const std::string& text) {
    Delta d;
    held_ += text;
    for (;;) {
        switch (state_) {
            case State::DONE:
                d.content += held_;
                held_.clear();
                return d;
            case State::BEFORE: {  // only an open tag at the very start of the answer (after whitespace) opens it
                const size_t ws = held_.find_first_not_of(" \t\r\n");
                if (ws == std::string::npos) return d;  // only whitespace so far
                if (held_.compare(ws, tags_.open.size(), tags_.open) == 0) {
                    if (f_ == ReasoningFormat::DEEPSEEK_LEGACY) d.content += held_.substr(0, ws + tags_.open.size());
                    held_.erase(0, ws + tags_.open.size());
                    state_ = State::INSIDE;
                    continue;
                }
                if (held_.size() - ws < tags_.open.size() && tags_.open.compare(0, held_.size() - ws, held_, ws) == 0)
                    return d;  // "<thi"
                state_ = State::DONE;
                continue;
            }
            case State::INSIDE: {
                const size_t at = held_.find(tags_.close);
                if (at != std::string::npos) {
                    d.reasoning += held_.substr(0, at);
                    if (f_ == ReasoningFormat::DEEPSEEK_LEGACY) d.content += held_.substr(0, at + tags_.close.size());
                    held_.erase(0, at + tags_.close.size());
                    state_ = State::AFTER;
                    continue;
                }
                const size_t keep = partial_suffix(held_, tags_.close);
                const std::string out = held_.substr(0, held_.size() - keep);
                d.reasoning += out;
                if (f_ == ReasoningFormat::DEEPSEEK_LEGACY) d.content += out;
                held_.erase(0, held_.size() - keep);
                return d;
            }
            case State::AFTER: {  // the newlines after </think> are not part of the answer
                const size_t s = held_.find_first_not_of("\r\n");
                if (s == std::string::npos) {
                    held_.clear();
                    return d;
                }
                held_.erase(0, s);
                state_ = State::DONE;
                continue;
            }
        }
    }
}

ReasoningSplitter::Delta ReasoningSplitter::finish() {
    Delta d;
    if (state_ == State::INSIDE) {  // cut off while thinking: all of it is reasoning
        d.reasoning = held_;
        if (f_ == ReasoningFormat::DEEPSEEK_LEGACY) d.content = held_;
    } else if (state_ != State::AFTER) {
        d.content = held_;
    }
    held_.clear();
    return d;
}

}  // namespace tandem::server
