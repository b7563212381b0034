#include "grammar/trigger.h"

#include <algorithm>

namespace tandem::grammar {

namespace {
bool ends_with(const std::string& s, const std::string& w) {
    return s.size() >= w.size() && s.compare(s.size() - w.size(), w.size(), w) == 0;
}
bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
}  // namespace

size_t TriggerSpec::longest() const {
    size_t n = std::max(think_open.size(), think_close.size());
    for (const auto& w : words) n = std::max(n, w.size());
    for (const auto& w : at_start) n = std::max(n, w.size());
    return n;
}

TriggerScan::TriggerScan(const TriggerSpec& spec) : phase_(spec.starts_thinking ? Phase::THINK : Phase::START) {}

std::string TriggerScan::key() const { return std::string(1, char('0' + int(phase_))) + tail_ + '\0' + head_; }

std::optional<std::string> TriggerScan::feed(const TriggerSpec& spec, const std::string& bytes) {
    const size_t keep = std::max<size_t>(spec.longest(), 1) - 1;
    for (size_t i = 0; i < bytes.size(); i++) {
        const char b = bytes[i];
        tail_ += b;
        if (phase_ == Phase::THINK) {
            if (!spec.think_close.empty() && ends_with(tail_, spec.think_close)) {
                phase_ = Phase::START;  // the answer begins after the block
                tail_.clear();
                head_.clear();
                continue;
            }
        } else {
            for (const auto& w : spec.words)
                if (ends_with(tail_, w)) return w + bytes.substr(i + 1);
            if (phase_ == Phase::START && !(head_.empty() && blank(b))) {
                head_ += b;
                for (const auto& w : spec.at_start)
                    if (head_ == w) return w + bytes.substr(i + 1);
                if (!spec.think_open.empty() && head_ == spec.think_open) {
                    phase_ = Phase::THINK;
                    tail_.clear();
                    continue;
                }
                auto prefix_of = [&](const std::string& w) { return w.compare(0, head_.size(), head_) == 0; };
                const bool open = std::any_of(spec.at_start.begin(), spec.at_start.end(), prefix_of) ||
                                  (!spec.think_open.empty() && prefix_of(spec.think_open));
                if (!open) {
                    phase_ = Phase::TEXT;
                    head_.clear();
                }
            }
        }
        if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
    }
    return std::nullopt;
}

}  // namespace tandem::grammar
