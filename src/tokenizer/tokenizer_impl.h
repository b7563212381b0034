// Factories of the tokenizer families (internal).
#pragma once
#include <memory>

#include "tandem/tokenizer.h"

namespace tandem {

// Length of the UTF-8 sequence a lead byte announces (1 for continuation or invalid bytes), as llama.cpp's
// unicode_len_utf8: both tokenizers split text into symbols with it.
inline size_t utf8_len(unsigned char c) {
    static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f);

}  // namespace tandem
