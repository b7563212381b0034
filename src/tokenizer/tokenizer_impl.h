// Factories of the tokenizer families (internal).
#pragma once
#include <memory>

#include "tandem/tokenizer.h"

namespace tandem {

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f);

}  // namespace tandem
