// Byte-level BPE (tokenizer.ggml.model = "gpt2"): not implemented yet; see issue "Tokenizers for every common
// model family". Loading such a vocabulary is refused with a clear error rather than producing wrong ids.
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace tandem {

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f) {
    throw Error(f.path() + ": byte-level BPE vocabularies (tokenizer.ggml.model = gpt2) are not supported yet");
}

}  // namespace tandem
