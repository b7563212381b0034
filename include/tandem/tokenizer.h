// Tokenizers. A Tokenizer is built from a GGUF vocabulary (tokenizer.ggml.*) and is immutable; the
// model-family specific part (SentencePiece, byte-level BPE) is a subclass that splits plain text into ids.
// Special-token handling, BOS/EOS and detokenization are shared.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem {

class GgufFile;

enum class TokenAttr : uint8_t { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

class Tokenizer {
public:
    // Chooses the implementation from tokenizer.ggml.model ("llama" = SentencePiece, "gpt2" = byte-level BPE).
    // Throws tandem::Error for a missing or unsupported vocabulary.
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
    virtual ~Tokenizer() = default;

    // add_special: prepend BOS / append EOS where the vocab asks for it.
    // parse_special: text such as "<s>" or "<|im_end|>" becomes its control token; otherwise it is plain text.
    // User-defined (added) tokens are always matched before splitting, as llama.cpp and HF tokenizers do.
    std::vector<int32_t> encode(const std::string& text, bool add_special, bool parse_special) const;
    // Tokens of `text` as it continues earlier text: plain text only (no special or added tokens matched), and no
    // SentencePiece space prefix. A draft of another vocabulary re-tokenizes its words with it where they meet
    // the text before them.
    std::vector<int32_t> encode_continuation(const std::string& text) const;

    // Bytes of one token as it appears in text (control tokens: empty unless `special`).
    std::string token_to_piece(int32_t id, bool special = false) const;
    // Concatenation of pieces; strips the leading space SentencePiece adds and a leading BOS when remove_special.
    std::string decode(const std::vector<int32_t>& ids, bool remove_special = true, bool special = false) const;

    int n_vocab() const { return int(tokens_.size()); }
    const std::string& token_text(int32_t id) const { return tokens_[size_t(id)]; }
    TokenAttr token_attr(int32_t id) const { return attrs_[size_t(id)]; }
    float token_score(int32_t id) const { return scores_.empty() ? 0.0f : scores_[size_t(id)]; }
    const std::string& model_name() const { return model_; }  // tokenizer.ggml.model
    const std::string& pre_name() const { return pre_; }  // tokenizer.ggml.pre ("default" if absent)

    int32_t bos() const { return bos_; }  // -1 if none
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool is_eog(int32_t id) const;  // end of generation: EOS, EOT, EOM and known end-of-turn tokens
    const std::vector<int32_t>& eog_ids() const { return eog_; }

    int32_t find_token(const std::string& text) const;  // -1 if absent
    // Fill-in-the-middle tokens of code models (-1: absent): prefix, suffix, middle, pad, repository, file separator.
    struct Fim {
        int32_t pre = -1, suf = -1, mid = -1, pad = -1, rep = -1, sep = -1;
    };
    const Fim& fim() const { return fim_; }
    // SentencePiece-style: a space is prefixed to the text before tokenizing (and stripped when decoding).
    bool adds_space_prefix() const { return add_space_prefix_; }

protected:
    explicit Tokenizer(const GgufFile& f);
    // Tokenize a plain-text fragment (no special tokens inside). `after_special` is true when the fragment
    // starts the text or follows a special token (SentencePiece adds its space prefix there).
    virtual void encode_fragment(const std::string& text, bool after_special, std::vector<int32_t>& out) const = 0;
    // Piece for a NORMAL/USER_DEFINED/BYTE token.
    virtual std::string normal_piece(int32_t id) const = 0;

    std::string model_, pre_;
    std::vector<std::string> tokens_;
    std::vector<float> scores_;
    std::vector<TokenAttr> attrs_;
    std::unordered_map<std::string, int32_t> token_to_id_;
    std::vector<int32_t> special_by_len_;  // control/user-defined/unknown tokens, longest text first
    // Whitespace a special token swallows when it is matched in text (llama.cpp's LSTRIP/RSTRIP attributes,
    // which it sets by model name: phi-3's special tokens strip what follows them). Indexed by token id.
    std::vector<uint8_t> strip_;  // bit 0: lstrip (spaces before), bit 1: rstrip (spaces after)
    int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, unk_ = -1, pad_ = -1;
    bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
    std::vector<int32_t> eog_;
    Fim fim_;
};

// Turns a stream of token ids into text that is always valid UTF-8 at chunk boundaries: bytes of a multi-byte
// character split across tokens are held back until the character is complete.
class TextStreamer {
public:
    // at_text_start: the ids begin the text, so a leading BOS is skipped and the SentencePiece space prefix
    // is stripped from the first piece. For a continuation (generated tokens after a prompt) pass false.
    // shown_special: control tokens whose text is shown (a chat format's markers); the others stay silent.
    explicit TextStreamer(const Tokenizer& tok, bool at_text_start = false, std::vector<int32_t> shown_special = {})
        : tok_(tok), strip_(at_text_start), shown_(std::move(shown_special)) {}
    std::string push(int32_t id);  // text that became complete with this token (may be empty)
    std::string flush();  // whatever is held back (an incomplete sequence at the very end)

private:
    const Tokenizer& tok_;
    bool strip_;
    bool first_ = true;
    std::string pending_;
    std::vector<int32_t> shown_;
};

// Length of the longest prefix of s that does not end inside an incomplete UTF-8 sequence.
size_t utf8_complete_prefix(const std::string& s);
bool utf8_is_valid(const std::string& s);

}  // namespace tandem
