// Reasoning ("thinking") text split out of a chat answer, as llama-server's --reasoning-format does: the text
// between <think> and </think> (or the model's own tags) goes to reasoning_content, the rest to content. Incremental, for streams: a tag
// split across pieces is held back until it is known.
#pragma once
#include <string>

#include "tandem/server.h"

namespace tandem::server {

// ReasoningFormat and reasoning_format_from_name: tandem/server.h.

// The tags around a model's thinking, from its chat template: <think> </think> (DeepSeek-R1, Qwen3, QwQ, most),
// [THINK] [/THINK] (Magistral, Ministral 3 Reasoning), <|START_THINKING|> <|END_THINKING|> (Command R7B),
// <seed:think> </seed:think> (Seed-OSS).
struct ThinkTags {
    std::string open = "<think>", close = "</think>";
};
ThinkTags think_tags_for_template(const std::string& template_source);

// Did the chat template open the thinking block itself (the prompt ends with the open tag and whitespace, as
// DeepSeek-R1 and QwQ templates do)? Then the answer starts inside the reasoning.
bool prompt_opens_thinking(const std::string& prompt, const ThinkTags& tags = {});

// Thinking turned off (enable_thinking false): a prompt whose template opened the thinking block gets it closed
// empty, as llama.cpp does (DeepSeek-R1, QwQ: "<think>\n" + "</think>"; Command R7B, whose template has
// <|START_THINKING|>: "<|START_THINKING|><|END_THINKING|>" after the chatbot turn). Other prompts are unchanged
// (Qwen 3's template closes the block itself when told).
std::string close_thinking(const std::string& prompt, const std::string& template_source);

class ReasoningSplitter {
public:
    ReasoningSplitter(ReasoningFormat f, bool starts_inside, ThinkTags tags = {});
    struct Delta {
        std::string reasoning, content;
    };
    Delta push(const std::string& text);  // what became certain with this piece
    Delta finish();  // what is held back, at the end

private:
    enum class State { BEFORE, INSIDE, AFTER, DONE };  // AFTER: just past </think>, dropping newlines
    ReasoningFormat f_;
    State state_;
    ThinkTags tags_;
    std::string held_;
};

}  // namespace tandem::server
