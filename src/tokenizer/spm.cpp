// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"), as llama.cpp implements it:
// spaces become U+2581 "▁", a space is prefixed to each text fragment that starts the text or follows a special
// token, the text is split into UTF-8 characters, and adjacent symbols are merged greedily by the score of the
// merged token (highest first; ties: leftmost; tokenizer/merge.h). Symbols that are not tokens fall back to <0xXX>
// byte tokens.
#include <optional>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tokenizer/merge.h"
#include "tokenizer/tokenizer_impl.h"

namespace tandem {

namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
public:
    explicit SpmTokenizer(const GgufFile& f) : Tokenizer(f) {
        for (int b = 0; b < 256; b++) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "<0x%02X>", b);
            byte_token_[b] = find_token(buf);
        }
    }

protected:
    void encode_fragment(const std::string& text, bool after_special, std::vector<int32_t>& out) const override {
        std::string s = (add_space_prefix_ && after_special) ? " " + text : text;
        std::string esc;
        esc.reserve(s.size() + s.size() / 2);
        for (char c : s) {
            if (c == ' ') esc += kSpace;
            else esc += c;
        }
        std::vector<MergeSymbol> syms;
        std::string key;  // reused for every pair: no allocation per pair once it has grown
        merge_bigrams(esc, syms, [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<float> {
            key.assign(esc, l.off, l.n + r.n);
            const int32_t id = find_token(key);
            if (id < 0) return std::nullopt;
            return token_score(id);
        });
        // A merged symbol is a token; a character that is not falls back to its bytes' tokens. (llama.cpp's
        // resegment first looks such a symbol up among the merged pairs; those are all tokens, so it never finds it.)
        for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[size_t(i)].next) {
            const MergeSymbol& sym = syms[size_t(i)];
            key.assign(esc, sym.off, sym.n);
            const int32_t id = find_token(key);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            for (size_t j = 0; j < sym.n; j++) {
                const int32_t b = byte_token_[static_cast<unsigned char>(esc[sym.off + j])];
                out.push_back(b >= 0 ? b : unk_);
            }
        }
    }

    std::string normal_piece(int32_t id) const override {
        const std::string& t = tokens_[size_t(id)];
        TokenAttr a = attrs_[size_t(id)];
        if (a == TokenAttr::BYTE) {
            unsigned v = 0;
            if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%02X>", &v) == 1) return std::string(1, char(v));
            return t;
        }
        if (a == TokenAttr::USER_DEFINED) return t;
        std::string out;
        out.reserve(t.size());
        for (size_t i = 0; i < t.size();) {
            if (t.compare(i, 3, kSpace) == 0) {
                out += ' ';
                i += 3;
            } else out += t[i++];
        }
        return out;
    }

private:
    int32_t byte_token_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f) { return std::make_unique<SpmTokenizer>(f); }

}  // namespace tandem
