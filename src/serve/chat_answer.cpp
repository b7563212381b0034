#include "serve/chat_answer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "serve/text_match.h"

namespace tandem::server {

void ChatDelta::append(ChatDelta&& o) {
    reasoning += o.reasoning;
    content += o.content;
    for (auto& c : o.calls) calls.push_back(std::move(c));
    for (auto& p : o.parts) parts.push_back(std::move(p));
}

ChatAnswerParser::ChatAnswerParser(ReasoningFormat rf, bool starts_inside, ToolFormat format, bool parse_tools,
                                   nlohmann::ordered_json tools, ThinkTags think_tags)
    : rf_(rf),
      rs_(rf, starts_inside, std::move(think_tags)),
      format_(format),
      tools_(parse_tools),
      tool_list_(std::move(tools)) {}

ChatDelta ChatAnswerParser::push(const std::string& text) {
    ChatDelta d;
    if (format_ == ToolFormat::HARMONY) {
        d = harmony(text, false);
    } else {
        auto r = rs_.push(text);
        d.reasoning = std::move(r.reasoning);
        d.append(tools_stage(r.content));
    }
    if (stream_args_) call_parts(d, nullptr);
    return d;
}

ChatDelta ChatAnswerParser::finish() {
    ChatDelta d;
    if (format_ == ToolFormat::HARMONY) {
        d = harmony("", true);
        if (stream_args_) call_parts(d, nullptr);
        return d;
    }
    auto r = rs_.finish();
    d.reasoning = std::move(r.reasoning);
    d.append(tools_stage(r.content));
    if (!pending_.empty()) {
        ParsedAnswer a = holding_ ? parse_tool_calls(format_, pending_, tool_list_) : ParsedAnswer{pending_, {}, {}};
        // The end of the answer may cut a call off (max_tokens; with tool_choice "required" the grammar leaves
        // nothing else to cut). After whole calls, the cut one is dropped (a.cut): the whole calls go out and none
        // of its text is content, as OpenAI's clients expect (the dialect says finish_reason "length"). Cut inside
        // the first call there is no call to give, and the blocking answer keeps the text as content, as any text
        // that is not a call: nothing is claimed a call, nothing is lost. A call already streamed (stream_arguments)
        // stays a partial call, as in OpenAI's streams, and is never completed: its text is not sent again as
        // content, and no part of it follows.
        if (stream_args_ && sent_.size() > a.calls.size()) a.content.clear();
        d.content += a.content;
        if (stream_args_ && holding_) {
            call_parts(d, &a);
        } else {
            d.calls = std::move(a.calls);
        }
        pending_.clear();
    }
    if (stream_args_) call_parts(d, nullptr);
    return d;
}

// stream_arguments: what is new of the held calls (final_answer: the parsed end of the answer), and whole calls
// (formats without argument streaming) as one part each.
void ChatAnswerParser::call_parts(ChatDelta& d, const ParsedAnswer* final_answer) {
    auto grow = [&](size_t i, const std::string& name, const std::string& args) {
        if (i >= sent_.size()) {
            sent_.push_back(args);
            n_parts_calls_ = std::max(n_parts_calls_, sent_.size());
            d.parts.push_back({i, name, args});
        } else if (args.size() > sent_[i].size() && args.compare(0, sent_[i].size(), sent_[i]) == 0) {
            d.parts.push_back({i, "", args.substr(sent_[i].size())});
            sent_[i] = args;
        }
    };
    if (final_answer) {
        for (size_t i = 0; i < final_answer->calls.size(); i++)
            grow(i, final_answer->calls[i].name, final_answer->calls[i].arguments);
    } else if (holding_ && streams_arguments(format_)) {
        if (!scanner_) scanner_ = std::make_unique<CallScanner>(format_);  // pending_ only grows while held
        const auto& prefixes = scanner_->update(pending_);
        for (size_t i = 0; i < prefixes.size(); i++) grow(i, prefixes[i].name, prefixes[i].arguments);
    }
    for (auto& c : d.calls) d.parts.push_back({n_parts_calls_++, c.name, c.arguments});
    d.calls.clear();
}

ChatDelta ChatAnswerParser::tools_stage(const std::string& content) {
    ChatDelta d;
    pending_ += content;
    if (!tools_ || format_ == ToolFormat::NONE) {
        d.content.swap(pending_);
        return d;
    }
    if (holding_) return d;
    if (!past_start_ && (format_ == ToolFormat::LLAMA3 || format_ == ToolFormat::GENERIC)) {
        // these calls are a JSON object that is the whole answer
        const size_t ws = pending_.find_first_not_of(" \t\r\n");
        if (ws == std::string::npos) return d;  // only whitespace so far: undecided
        if (pending_[ws] == '{') {
            holding_ = true;
            return d;
        }
        past_start_ = true;
    }
    const auto& markers = tool_call_markers(format_);
    const size_t at = find_first_marker(pending_, markers);
    if (at != std::string::npos) {
        d.content = pending_.substr(0, at);
        pending_.erase(0, at);
        holding_ = true;
        return d;
    }
    const size_t send = pending_.size() - partial_suffix(pending_, markers);
    d.content = pending_.substr(0, send);
    pending_.erase(0, send);
    return d;
}

namespace {
const std::string kMessage = "<|message|>", kChannel = "<|channel|>", kStart = "<|start|>";
const std::vector<std::string> kBodyEnds = {"<|end|>", "<|call|>", "<|return|>", kStart, kChannel};
const std::vector<std::string> kHeaderStarts = {kChannel, kStart};
}  // namespace

// Harmony: messages "[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY" ended
// by <|end|>, <|call|> or <|return|> (the last two end the generation, so usually the answer just ends).
ChatDelta ChatAnswerParser::harmony(const std::string& text, bool at_end) {
    ChatDelta d;
    hbuf_ += text;
    auto emit = [&](const std::string& body, bool complete) {
        switch (hkind_) {
            case HKind::REASONING: (rf_ == ReasoningFormat::NONE ? d.content : d.reasoning) += body; break;
            case HKind::CONTENT: d.content += body; break;
            case HKind::CALL: {
                if (!complete) return;
                const auto args = nlohmann::ordered_json::parse(trim_ws(body), nullptr, false);
                if (args.is_object()) d.calls.push_back({hcall_name_, args.dump()});
                else d.content += body;  // not valid arguments: kept as text, nothing lost
                break;
            }
        }
    };
    for (;;) {
        if (hstate_ == HState::HEADER) {
            const size_t m = hbuf_.find(kMessage);
            if (m == std::string::npos) {
                if (!hseen_header_) {
                    // an answer that does not speak harmony at all is plain content
                    const size_t ws = hbuf_.find_first_not_of(" \t\r\n");
                    const std::string head = ws == std::string::npos ? std::string() : hbuf_.substr(ws);
                    const bool maybe_header =
                        std::any_of(kHeaderStarts.begin(), kHeaderStarts.end(), [&](const std::string& h) {
                            return head.rfind(h, 0) == 0 || h.rfind(head, 0) == 0;  // it starts with h, or may still
                        });
                    if (!maybe_header || at_end) {
                        hseen_header_ = true;
                        hstate_ = HState::BODY;
                        hkind_ = HKind::CONTENT;
                        continue;
                    }
                }
                if (at_end) hbuf_.clear();  // a header cut off: nothing of the answer in it
                return d;
            }
            const std::string header = hbuf_.substr(0, m);
            hbuf_.erase(0, m + kMessage.size());
            hseen_header_ = true;
            std::string channel;
            if (size_t c = header.find(kChannel); c != std::string::npos) {
                c += kChannel.size();
                channel = header.substr(c, header.find_first_of(" <", c) - c);
            }
            hkind_ = channel == "analysis" ? HKind::REASONING : HKind::CONTENT;
            if (size_t to = header.find("to=functions."); to != std::string::npos && tools_) {
                to += 13;
                hcall_name_ = header.substr(to, header.find_first_of(" <", to) - to);
                hkind_ = HKind::CALL;
            }
            hstate_ = HState::BODY;
            continue;
        }
        const size_t end = find_first_marker(hbuf_, kBodyEnds);
        if (end != std::string::npos) {
            emit(hbuf_.substr(0, end), true);
            hbuf_.erase(0, end);
            for (const char* close : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"})  // a header starts after these
                if (hbuf_.rfind(close, 0) == 0) hbuf_.erase(0, std::strlen(close));
            hstate_ = HState::HEADER;
            continue;
        }
        if (at_end) {
            emit(hbuf_, true);
            hbuf_.clear();
            return d;
        }
        if (hkind_ == HKind::CALL) return d;  // a call is sent whole
        const size_t send = hbuf_.size() - partial_suffix(hbuf_, kBodyEnds);
        emit(hbuf_.substr(0, send), false);
        hbuf_.erase(0, send);
        return d;
    }
}

}  // namespace tandem::server
