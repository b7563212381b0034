#include "serve/text_pipeline.h"

#include <algorithm>

namespace tandem::server {

std::string TextPipeline::push(int32_t id) {
    if (stopped_) return {};
    held_ += streamer_.push(id);
    if (stop_.empty()) {
        std::string out;
        out.swap(held_);
        return out;
    }
    // A complete stop string: emit what precedes the earliest one and stop.
    size_t first = std::string::npos;
    for (const auto& s : stop_) {
        size_t at = held_.find(s);
        if (at < first) {
            first = at;
            stop_word_ = s;
        }
    }
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Hold back the longest suffix that could still grow into a stop string.
    size_t keep = 0;
    for (const auto& s : stop_)
        for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; k--)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                keep = k;
                break;
            }
    size_t emit = utf8_complete_prefix(held_.substr(0, held_.size() - keep));
    std::string out = held_.substr(0, emit);
    held_.erase(0, emit);
    return out;
}

std::string TextPipeline::finish() {
    if (stopped_) return {};
    std::string out = held_ + streamer_.flush();
    held_.clear();
    return out;
}

}  // namespace tandem::server
