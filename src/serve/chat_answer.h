// A chat answer as it streams in, split into what an OpenAI client receives: reasoning_content, content and
// tool_calls. Reasoning is split first (serve/reasoning.h), then the content is watched for the tool-call format
// of the chat template (serve/tool_calls.h): text before a call marker streams at once, the text from the first
// marker on is held back and parsed at the end (a call is only sent once it is whole; text that only looked like
// a call is sent as content, so nothing is lost). gpt-oss's harmony format carries reasoning, answer and calls in
// channels and is read by its own small state machine.
//
// Pure and incremental: the same deltas come out whatever the pieces' boundaries (tests split every answer at
// every byte).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace tandem::server {

struct ChatDelta {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
    void append(ChatDelta&& o);
};

class ChatAnswerParser {
public:
    // format: the template's answer format; parse_tools: the request has tools (and tool_choice is not "none"),
    // `tools` (OpenAI tool objects) type the XML format's parameters. starts_inside: the prompt opened the
    // thinking block (serve/reasoning.h).
    ChatAnswerParser(ReasoningFormat rf, bool starts_inside, ToolFormat format, bool parse_tools,
                     nlohmann::ordered_json tools = nullptr);
    ChatDelta push(const std::string& text);  // what became certain with this piece
    ChatDelta finish();                       // the rest, at the end of the answer

private:
    ChatDelta tools_stage(const std::string& content);
    ChatDelta harmony(const std::string& text, bool at_end);

    ReasoningFormat rf_;
    ReasoningSplitter rs_;
    ToolFormat format_;
    bool tools_;
    nlohmann::ordered_json tool_list_;
    // tool stage
    std::string pending_;       // content not yet sent: a possible marker prefix, or all of it once holding
    bool holding_ = false;      // a marker was seen: the rest is parsed at the end
    bool past_start_ = false;   // LLAMA3/GENERIC: the answer did not start with "{"
    // harmony
    enum class HState { HEADER, BODY } hstate_ = HState::HEADER;
    enum class HKind { REASONING, CONTENT, CALL } hkind_ = HKind::CONTENT;
    std::string hbuf_, hcall_name_;
    bool hseen_header_ = false;
};

}  // namespace tandem::server
