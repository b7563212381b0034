// The text of one generation as it grows: UTF-8-safe detokenization and stop strings. The engine runs one per
// job, so the end of a generation (end-of-generation token, stop string, length) is decided in one place and the
// token counts match the text exactly.
#pragma once
#include <string>
#include <vector>

#include "tandem/tokenizer.h"

namespace tandem::server {

class TextPipeline {
public:
    // shown_special: control tokens whose text is part of the answer (they are left out otherwise).
    TextPipeline(const Tokenizer& tok, std::vector<std::string> stop, std::vector<int32_t> shown_special = {})
        : streamer_(tok, false, std::move(shown_special)), stop_(std::move(stop)) {}
    // Text that can be emitted after this token: never any part of a stop string, never an incomplete UTF-8
    // sequence. When a stop string completes, stopped() is set, the text before it is returned, and every later
    // push returns nothing.
    std::string push(int32_t id);
    std::string finish();  // what is held back, at the end (nothing once stopped)
    bool stopped() const { return stopped_; }
    const std::string& stop_word() const { return stop_word_; }  // the stop string that ended it

private:
    TextStreamer streamer_;
    std::vector<std::string> stop_;
    std::string held_, stop_word_;
    bool stopped_ = false;
};

}  // namespace tandem::server
