// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as GPT-2, Llama 3, Qwen 2, DeepSeek, StarCoder, Falcon and
// most recent models use it, and SentencePiece-style BPE over raw UTF-8 (tokenizer.ggml.model = "gemma4"):
//   1. the text is split by the pre-tokenizer regexes of its family (tokenizer.ggml.pre), each regex splitting
//      the pieces left by the previous one (matches and the gaps between them both become pieces);
//   2. each piece's bytes are mapped to printable code points (GPT-2's bytes_to_unicode);
//   3. adjacent symbols are merged by rank (tokenizer.ggml.merges, lowest rank first; ties: leftmost;
//      tokenizer/merge.h) until no ranked pair remains; symbols that are not tokens fall back to their single-byte
//      tokens.
// gemma4 differs in three places, as llama.cpp handles it: spaces are written as U+2581 first, the pieces are
// the runs of newlines and of other text (no byte-to-code-point map), and a symbol that is not a token falls
// back to <0xXX> byte tokens; its tokens decode with U+2581 back to spaces.
// The regexes are run by PCRE2 (UTF mode, Unicode properties, JIT), with invalid UTF-8 allowed: invalid bytes
// never match and end up in their own pieces, so every byte string tokenizes and round-trips.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <optional>
#include <unordered_map>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tokenizer/merge.h"
#include "tokenizer/tokenizer_impl.h"

namespace tandem {

namespace {

// --- pre-tokenizer regexes, by tokenizer.ggml.pre ----------------------------------------------------------

const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// GPT-4o's split (llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O: "gpt-4o", "llama4"), as its tokenizer.json writes it
const char* const kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|"
    "'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|"
    "'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kCjk = "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+";

struct PreTokenizer {
    std::vector<std::string> regexes;
    bool ignore_merges = false;  // llama3: a piece that is a whole token is not merged further
    bool known = true;
};

PreTokenizer pre_tokenizer_for(const std::string& pre) {
    if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3") return {{kLlama3}, true};
    if (pre == "dbrx" || pre == "smaug-bpe" || pre == "chatglm-bpe" || pre == "glm4") return {{kLlama3}};
    if (pre == "qwen2" || pre == "stablelm2" || pre == "deepseek-r1-qwen" || pre == "megrez") return {{kQwen2}};
    if (pre == "deepseek-llm")
        return {{"[\\r\\n]",
                 "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}"
                 "\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}"
                 "\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{"
                 "10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-"
                 "\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{"
                 "1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-"
                 "\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{"
                 "1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-"
                 "\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{"
                 "2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}"
                 "\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{"
                 "a722}-\\x{a76f}\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-"
                 "\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-"
                 "\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+",
                 "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+", "\\s+$",
                 kCjk, "\\p{N}+"}};
    if (pre == "qwen35") return {{kQwen35}};
    if (pre == "gpt-4o" || pre == "llama4") return {{kGpt4o}};
    if (pre == "deepseek-v3")  // DeepSeek V3/R1: digits in threes, CJK/kana runs, then words and punctuation
        return {{"\\p{N}{1,3}", "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
                 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
                 "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}};
    if (pre == "gemma4") return {{"[^\\n]+|[\\n]+"}};
    if (pre == "deepseek-coder") return {{"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}};
    if (pre == "falcon") return {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}};
    if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" || pre == "codeshell" ||
        pre == "exaone" || pre == "minerva-7b")
        return {{"\\p{N}", kGpt2}};
    if (pre == "gpt-2" || pre == "phi-2" || pre == "mpt" || pre == "olmo" || pre == "jais" || pre == "jina-es" ||
        pre == "jina-de" || pre == "roberta-bpe")
        return {{kGpt2}};
    if (pre == "poro-chat" || pre == "bloom" || pre == "gpt3-finnish")
        return {{" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+"}};
    PreTokenizer def{{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}};
    def.known = pre == "default" || pre.empty();
    return def;
}

// One compiled regex; match data is per call, so a Regex can be shared across threads.
class Regex {
public:
    Regex(const std::string& pattern, const std::string& where) {
        int err = 0;
        PCRE2_SIZE off = 0;
        code_ =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &off, nullptr);
        if (!code_) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw Error(strprintf("%s: pre-tokenizer regex does not compile at %zu: %s", where.c_str(), size_t(off),
                                  reinterpret_cast<const char*>(msg)));
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    }
    ~Regex() { pcre2_code_free(code_); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Splits s[begin, end) into matches and the gaps between them; appends the piece boundaries to out.
    void split(const std::string& s, size_t begin, size_t end, std::vector<std::pair<size_t, size_t>>& out) const {
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
        PCRE2_SPTR subj = reinterpret_cast<PCRE2_SPTR>(s.data() + begin);
        const size_t n = end - begin;
        size_t pos = 0, prev = 0;
        while (pos <= n) {
            int rc = pcre2_match(code_, subj, n, pos, 0, md, nullptr);
            if (rc < 0) break;
            PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) {  // empty match: step over one byte (or one character) and continue
                pos = ms + 1;
                continue;
            }
            if (ms > prev) out.emplace_back(begin + prev, begin + ms);
            out.emplace_back(begin + ms, begin + me);
            prev = pos = me;
        }
        if (prev < n) out.emplace_back(begin + prev, begin + n);
        pcre2_match_data_free(md);
    }

private:
    pcre2_code* code_ = nullptr;
};

// GPT-2's reversible byte -> code point map (printable bytes map to themselves, the rest to U+0100..).
struct ByteMap {
    std::string to_utf8[256];
    std::unordered_map<uint32_t, uint8_t> from_cp;
    ByteMap() {
        int n = 0;
        for (int b = 0; b < 256; b++) {
            bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
            to_utf8[b] = encode(cp);
            from_cp[cp] = uint8_t(b);
        }
    }
    static std::string encode(uint32_t cp) {
        std::string s;
        if (cp < 0x80) s += char(cp);
        else if (cp < 0x800) {
            s += char(0xC0 | (cp >> 6));
            s += char(0x80 | (cp & 0x3F));
        } else {
            s += char(0xE0 | (cp >> 12));
            s += char(0x80 | ((cp >> 6) & 0x3F));
            s += char(0x80 | (cp & 0x3F));
        }
        return s;
    }
};

const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}

class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(const GgufFile& f) : Tokenizer(f), raw_utf8_(model_ == "gemma4") {
        if (raw_utf8_) pre_ = "gemma4";
        const GgufValue* merges = f.get_array("tokenizer.ggml.merges", GgufType::STRING);
        if (!merges) throw Error(f.path() + ": missing required metadata 'tokenizer.ggml.merges' (BPE vocabulary)");
        for (size_t i = 0; i < merges->arr.size(); i++) {
            const std::string& m = merges->arr[i].s;
            size_t sp = m.find(' ', 1);
            if (sp == std::string::npos)
                throw Error(strprintf("%s: merge %zu ('%s') has no space", f.path().c_str(), i, m.c_str()));
            ranks_.emplace(m, int(i));  // key "left right"
        }
        pre_tok_ = pre_tokenizer_for(pre_);
        if (!pre_tok_.known)
            std::fprintf(stderr, "warning: %s: unknown pre-tokenizer '%s'; using the default split\n", f.path().c_str(),
                         pre_.c_str());
        for (const auto& r : pre_tok_.regexes) regexes_.push_back(std::make_unique<Regex>(r, f.path()));
    }

protected:
    void encode_fragment(const std::string& text_in, bool, std::vector<int32_t>& out) const override {
        std::string escaped;
        if (raw_utf8_) {
            for (char c : text_in) {
                if (c == ' ') escaped += "\xE2\x96\x81";
                else escaped += c;
            }
        }
        const std::string& text = raw_utf8_ ? escaped : text_in;
        std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}}, next;
        for (const auto& re : regexes_) {
            next.clear();
            for (auto [b, e] : pieces) re->split(text, b, e, next);
            pieces.swap(next);
        }
        std::unordered_map<std::string, std::vector<int32_t>> cache;  // repeated words in one call
        const ByteMap& bm = byte_map();
        std::string word;
        for (auto [b, e] : pieces) {
            word.clear();
            if (raw_utf8_) word.assign(text, b, e - b);
            else
                for (size_t i = b; i < e; i++) word += bm.to_utf8[static_cast<unsigned char>(text[i])];
            auto it = cache.find(word);
            if (it == cache.end()) {
                std::vector<int32_t> ids;
                bpe_word(word, ids);
                it = cache.emplace(word, std::move(ids)).first;
            }
            out.insert(out.end(), it->second.begin(), it->second.end());
        }
    }

    std::string normal_piece(int32_t id) const override {
        const std::string& t = tokens_[size_t(id)];
        if (attrs_[size_t(id)] == TokenAttr::USER_DEFINED) return t;
        if (raw_utf8_) {
            if (attrs_[size_t(id)] == TokenAttr::BYTE && t.size() == 6 && t.compare(0, 3, "<0x") == 0)
                return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
            std::string out;
            for (size_t i = 0; i < t.size(); i++) {
                if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
                    out += ' ';
                    i += 2;
                } else out += t[i];
            }
            return out;
        }
        // Map code points back to bytes; anything outside the map is kept as is.
        const ByteMap& bm = byte_map();
        std::string out;
        for (size_t i = 0; i < t.size();) {
            size_t len = std::min(utf8_len(static_cast<unsigned char>(t[i])), t.size() - i);
            uint32_t cp = static_cast<unsigned char>(t[i]);
            if (len == 2) cp = ((cp & 0x1F) << 6) | (static_cast<unsigned char>(t[i + 1]) & 0x3F);
            else if (len == 3)
                cp = ((cp & 0x0F) << 12) | ((static_cast<unsigned char>(t[i + 1]) & 0x3F) << 6) |
                     (static_cast<unsigned char>(t[i + 2]) & 0x3F);
            else if (len == 4) cp = 0xFFFFFFFF;
            auto it = bm.from_cp.find(cp);
            if (it != bm.from_cp.end()) out += char(it->second);
            else out.append(t, i, len);
            i += len;
        }
        return out;
    }

private:
    void bpe_word(const std::string& w, std::vector<int32_t>& out) const {
        if (pre_tok_.ignore_merges || (raw_utf8_ && w.find_first_not_of('\n') == std::string::npos)) {
            int32_t id = find_token(w);  // gemma4: a run of newlines that is a token is taken whole
            if (id >= 0) {
                out.push_back(id);
                return;
            }
        }
        std::vector<MergeSymbol> syms;
        std::string key;  // "left right", reused for every pair: no allocation per pair once it has grown
        merge_bigrams(w, syms, [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<int> {
            key.assign(w, l.off, l.n);
            key += ' ';
            key.append(w, r.off, r.n);
            const auto it = ranks_.find(key);
            if (it == ranks_.end()) return std::nullopt;
            return -it->second;  // the lowest rank merges first
        });
        for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[size_t(i)].next) {
            const MergeSymbol& s = syms[size_t(i)];
            std::string piece = w.substr(s.off, s.n);
            int32_t id = find_token(piece);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            if (raw_utf8_) {  // fall back to the piece's byte tokens
                for (unsigned char c : piece) {
                    int32_t bid = find_token(strprintf("<0x%02X>", c));
                    if (bid >= 0) out.push_back(bid);
                }
                continue;
            }
            for (size_t k = 0; k < piece.size();) {  // fall back to the piece's characters' tokens
                size_t len = std::min(utf8_len(static_cast<unsigned char>(piece[k])), piece.size() - k);
                int32_t cid = find_token(piece.substr(k, len));
                if (cid >= 0) out.push_back(cid);
                k += len;
            }
        }
    }

    bool raw_utf8_;  // gemma4: SentencePiece-style BPE (see the top of this file)
    std::unordered_map<std::string, int> ranks_;
    PreTokenizer pre_tok_;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f) { return std::make_unique<BpeTokenizer>(f); }

}  // namespace tandem
