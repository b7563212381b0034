// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"), as llama.cpp implements it:
// spaces become U+2581 "▁", a space is prefixed to each text fragment that starts the text or follows a special
// token, the text is split into UTF-8 characters, and adjacent symbols are merged greedily by the score of the
// merged token (highest first; ties: leftmost). Symbols that are not tokens fall back to <0xXX> byte tokens.
#include <queue>
#include <unordered_map>

#include "tandem/error.h"
#include "tandem/gguf.h"
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
        MergeRun run{*this, esc, {}, {}, {}};
        run.run(out);
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
    struct Symbol {
        int prev, next;
        const char* text;
        size_t n;
    };
    struct Bigram {
        int left, right;
        float score;
        size_t size;
        bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
    };

    struct MergeRun {
        const SpmTokenizer& tok;
        const std::string& text;
        std::vector<Symbol> syms;
        std::priority_queue<Bigram> queue;
        std::unordered_map<std::string, std::pair<int, int>> rev_merge;

        void try_add(int left, int right) {
            if (left < 0 || right < 0) return;
            std::string s(syms[size_t(left)].text, syms[size_t(left)].n + syms[size_t(right)].n);
            int32_t id = tok.find_token(s);
            if (id < 0) return;
            queue.push(Bigram{left, right, tok.token_score(id), s.size()});
            rev_merge[s] = {left, right};
        }

        void resegment(const Symbol& sym, std::vector<int32_t>& out) {
            std::string s(sym.text, sym.n);
            int32_t id = tok.find_token(s);
            if (id >= 0) {
                out.push_back(id);
                return;
            }
            auto it = rev_merge.find(s);
            if (it == rev_merge.end()) {
                for (size_t j = 0; j < sym.n; j++) {
                    int32_t b = tok.byte_token_[static_cast<unsigned char>(sym.text[j])];
                    out.push_back(b >= 0 ? b : tok.unk_);
                }
                return;
            }
            resegment(syms[size_t(it->second.first)], out);
            resegment(syms[size_t(it->second.second)], out);
        }

        void run(std::vector<int32_t>& out) {
            size_t off = 0;
            int idx = 0;
            while (off < text.size()) {
                size_t len = std::min(utf8_len(static_cast<unsigned char>(text[off])), text.size() - off);
                Symbol s{idx - 1, off + len == text.size() ? -1 : idx + 1, text.data() + off, len};
                off += len;
                idx++;
                syms.push_back(s);
            }
            for (int i = 1; i < int(syms.size()); i++) try_add(i - 1, i);
            while (!queue.empty()) {
                Bigram b = queue.top();
                queue.pop();
                Symbol& l = syms[size_t(b.left)];
                Symbol& r = syms[size_t(b.right)];
                if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
                l.n += r.n;
                r.n = 0;
                l.next = r.next;
                if (r.next >= 0) syms[size_t(r.next)].prev = b.left;
                try_add(l.prev, b.left);
                try_add(b.left, l.next);
            }
            if (syms.empty()) return;
            for (int i = 0; i != -1; i = syms[size_t(i)].next) resegment(syms[size_t(i)], out);
        }
    };

    int32_t byte_token_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f) { return std::make_unique<SpmTokenizer>(f); }

}  // namespace tandem
