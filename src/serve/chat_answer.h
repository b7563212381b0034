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
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace tandem::server {

// A piece of a streamed tool call (ChatAnswerParser::stream_arguments): the call's first piece has its name,
// the following ones more of its arguments text.
struct CallPart {
    size_t index = 0;
    std::string name, arguments;
};

struct ChatDelta {
    std::string reasoning, content;
    std::vector<ToolCall> calls;  // whole calls
    std::vector<CallPart> parts;  // or, with stream_arguments, calls in pieces
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty() && parts.empty(); }
    void append(ChatDelta&& o);
};

class ChatAnswerParser {
public:
    // format: the template's answer format; parse_tools: the request has tools (and tool_choice is not "none"),
    // `tools` (OpenAI tool objects) type the XML format's parameters. starts_inside: the prompt opened the
    // thinking block (serve/reasoning.h).
    ChatAnswerParser(ReasoningFormat rf, bool starts_inside, ToolFormat format, bool parse_tools,
                     nlohmann::ordered_json tools = nullptr, ThinkTags think_tags = {});
    ChatDelta push(const std::string& text);  // what became certain with this piece
    ChatDelta finish();  // the rest, at the end of the answer
    // Calls go out as CallParts instead of whole calls: for formats with JSON arguments after the name
    // (serve/tool_calls.h, call_prefixes) the name as soon as it is complete and then the arguments as they grow,
    // as OpenAI streams them; the others whole, as one part each. The parts of a call add up to the arguments of
    // the blocking answer.
    void stream_arguments(bool on) { stream_args_ = on; }

private:
    void call_parts(ChatDelta& d, const ParsedAnswer* final_answer);
    ChatDelta tools_stage(const std::string& content);
    ChatDelta harmony(const std::string& text, bool at_end);

    ReasoningFormat rf_;
    ReasoningSplitter rs_;
    ToolFormat format_;
    bool tools_;
    nlohmann::ordered_json tool_list_;
    // tool stage
    std::string pending_;  // content not yet sent: a possible marker prefix, or all of it once holding
    bool holding_ = false;  // a marker was seen: the rest is parsed at the end
    bool past_start_ = false;  // LLAMA3/GENERIC: the answer did not start with "{"
    bool stream_args_ = false;
    std::vector<std::string> sent_;  // stream_arguments: each call's arguments text sent so far
    std::unique_ptr<CallScanner> scanner_;  // stream_arguments: the held calls so far
    size_t n_parts_calls_ = 0;  // call indices used
    // harmony
    enum class HState { HEADER, BODY } hstate_ = HState::HEADER;
    enum class HKind { REASONING, CONTENT, CALL } hkind_ = HKind::CONTENT;
    std::string hbuf_, hcall_name_;
    bool hseen_header_ = false;
};

}  // namespace tandem::server
