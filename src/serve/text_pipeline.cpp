#include "serve/text_pipeline.h"

#include <algorithm>

#include "serve/text_match.h"

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
    size_t which = 0;
    const size_t first = find_first_marker(held_, stop_, &which);
    if (first != std::string::npos) {
        stopped_ = true;
        stop_word_ = stop_[which];
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Hold back the longest suffix that could still grow into a stop string.
    const size_t keep = partial_suffix(held_, stop_);
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
