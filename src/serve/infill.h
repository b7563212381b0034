// llama-server's /infill prompt: fill-in-the-middle for code models whose vocabulary has FIM tokens.
#pragma once
#include <string>
#include <vector>

#include "tandem/tokenizer.h"

namespace tandem::server {

struct InfillInput {
    std::string prefix, suffix;  // input_prefix, input_suffix: plain text (special tokens are not parsed)
    struct Chunk {
        std::string filename, text;
    };
    std::vector<Chunk> extra;  // input_extra: other files, as repository context
    std::vector<int32_t> prompt;  // tokens appended to the prefix (the start of the middle)
};

// The prompt llama-server builds, so the same code model sees the same tokens:
//   [extra context] [BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID
// The extra context is FIM_REP "myproject\n", then per chunk FIM_SEP filename "\n" text (or a
// "\n\n--- snippet ---\n\n" separator without FIM_SEP), then FIM_SEP "filename\n". The prefix keeps its last
// 3/4 n_batch tokens, the suffix its first n_batch/4 - 2 - |prompt|, the extra context its last
// n_ctx - n_batch - 2 n_predict. Throws Error when the vocabulary has no FIM prefix, suffix or middle token.
std::vector<int32_t> format_infill(const Tokenizer& tok, const InfillInput& in, int n_batch, int n_ctx, int n_predict);

}  // namespace tandem::server
