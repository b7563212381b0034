// Shared tokenizer machinery: vocabulary loading, special tokens, special-token partitioning, detokenization.
#include <algorithm>
#include <cctype>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace tandem {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
    auto model = f.get_str("tokenizer.ggml.model");
    if (!model) throw Error(f.path() + ": missing required metadata 'tokenizer.ggml.model' (no vocabulary)");
    if (*model == "llama") return make_spm_tokenizer(f);
    if (*model == "gpt2" || *model == "gemma4") return make_bpe_tokenizer(f);
    throw Error(f.path() + ": unsupported tokenizer model '" + *model + "' (supported: llama, gpt2, gemma4)");
}

Tokenizer::Tokenizer(const GgufFile& f) {
    model_ = *f.get_str("tokenizer.ggml.model");
    pre_ = f.get_str("tokenizer.ggml.pre").value_or("default");  // absent means the default split
    const GgufValue* toks = f.get_array("tokenizer.ggml.tokens", GgufType::STRING);
    if (!toks || toks->arr.empty()) throw Error(f.path() + ": missing required metadata 'tokenizer.ggml.tokens'");
    const size_t n = toks->arr.size();
    if (n > (size_t(1) << 24)) throw Error(f.path() + ": vocabulary too large");
    tokens_.reserve(n);
    for (const auto& v : toks->arr) tokens_.push_back(v.s);
    if (const GgufValue* sc = f.get_array("tokenizer.ggml.scores", GgufType::FLOAT32)) {
        if (sc->arr.size() != n) throw Error(f.path() + ": tokenizer.ggml.scores has a different length than tokens");
        for (const auto& v : sc->arr) scores_.push_back(float(v.f));
    }
    attrs_.assign(n, TokenAttr::NORMAL);
    if (const GgufValue* ty = f.get_array("tokenizer.ggml.token_type", GgufType::INT32)) {
        if (ty->arr.size() != n)
            throw Error(f.path() + ": tokenizer.ggml.token_type has a different length than tokens");
        for (size_t i = 0; i < n; i++) {
            int64_t t = ty->arr[i].i;
            attrs_[i] = (t >= 1 && t <= 6) ? TokenAttr(t) : TokenAttr::NORMAL;
        }
    }
    for (size_t i = 0; i < n; i++) token_to_id_[tokens_[i]] = int32_t(i);  // later ids win, as in llama.cpp

    auto id_key = [&](const char* key, int32_t def) -> int32_t {
        auto v = f.get_int(key);
        int64_t id = v ? *v : def;
        if (id == 0xFFFFFFFFll) id = -1;  // uint32 "none", as written by the converters
        if (id < -1 || id >= int64_t(n)) {
            if (v)
                throw Error(strprintf("%s: %s = %lld is outside the vocabulary (%zu tokens)", f.path().c_str(), key,
                                      (long long)id, n));
            return -1;
        }
        return int32_t(id);
    };
    const bool spm = model_ == "llama";
    bos_ = id_key("tokenizer.ggml.bos_token_id", spm ? 1 : 11);
    eos_ = id_key("tokenizer.ggml.eos_token_id", spm ? 2 : 11);
    unk_ = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
    pad_ = id_key("tokenizer.ggml.padding_token_id", -1);
    eot_ = id_key("tokenizer.ggml.eot_token_id", -1);
    eom_ = id_key("tokenizer.ggml.eom_token_id", -1);
    add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
    if (model_ == "gemma4") add_bos_ = true;  // as llama.cpp: Gemma 4 files say false, the model needs <bos>
    if (pre_ == "glm4" || pre_ == "chatglm-bpe") bos_ = -1;  // as llama.cpp: GLM-4 has no <bos>, whatever is declared
    add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);

    // Fill-in-the-middle tokens: the declared ids, else the known texts of code models (Qwen-Coder, StarCoder,
    // DeepSeek-Coder, CodeLlama, Granite, GLM, Falcon), the texts llama.cpp recognises.
    auto fim = [&](const char* key, std::initializer_list<const char*> texts) {
        int32_t id = id_key(key, -1);
        for (const char* t : texts)
            if (id < 0) id = find_token(t);
        return id;
    };
    fim_.pre =
        fim("tokenizer.ggml.fim_pre_token_id", {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>",
                                                "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"});
    fim_.suf =
        fim("tokenizer.ggml.fim_suf_token_id", {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>",
                                                "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"});
    fim_.mid =
        fim("tokenizer.ggml.fim_mid_token_id", {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>",
                                                "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"});
    fim_.pad = fim("tokenizer.ggml.fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    fim_.rep =
        fim("tokenizer.ggml.fim_rep_token_id", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    fim_.sep = fim("tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"});

    // End-of-generation set: the declared ids plus well-known end-of-turn control tokens (as llama.cpp does).
    static const char* kEogTexts[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>",
                                      "<end_of_turn>", "<|endoftext|>",   "<|eom_id|>",
                                      "<EOT>",         "<|end_of_text|>", "<｜end▁of▁sentence｜>"};
    for (int32_t id : {eos_, eot_, eom_})
        if (id >= 0) eog_.push_back(id);
    for (const char* t : kEogTexts) {
        int32_t id = find_token(t);
        if (id >= 0 && attrs_[size_t(id)] == TokenAttr::CONTROL &&
            std::find(eog_.begin(), eog_.end(), id) == eog_.end())
            eog_.push_back(id);
    }
    // a code model that writes a FIM pad, repository or file separator has finished the middle (as llama.cpp)
    for (int32_t id : {fim_.pad, fim_.rep, fim_.sep})
        if (id >= 0 && std::find(eog_.begin(), eog_.end(), id) == eog_.end()) eog_.push_back(id);

    for (size_t i = 0; i < n; i++) {
        TokenAttr a = attrs_[i];
        if (a == TokenAttr::CONTROL || a == TokenAttr::USER_DEFINED || a == TokenAttr::UNKNOWN)
            if (!tokens_[i].empty()) special_by_len_.push_back(int32_t(i));
    }
    // As llama.cpp (llama-vocab.cpp, by general.name / tokenizer.ggml.pre / general.architecture): phi-3's special
    // tokens and </s> take the whitespace after them (not <unk>, <s>, <|endoftext|>); the mask tokens of
    // jina-v2, nomic-bert-moe, jina-bert-v3 and modern-bert take the whitespace before them.
    strip_.assign(n, 0);
    std::string name = f.get_str("general.name").value_or("");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    const std::string arch = f.get_str("general.architecture").value_or("");
    auto contains_any = [](const std::string& s, std::initializer_list<const char*> subs) {
        for (const char* x : subs)
            if (s.find(x) != std::string::npos) return true;
        return false;
    };
    auto set = [&](const char* text, uint8_t bit, bool on) {
        const int32_t id = find_token(text);
        if (id >= 0) strip_[size_t(id)] = on ? uint8_t(strip_[size_t(id)] | bit) : uint8_t(strip_[size_t(id)] & ~bit);
    };
    if (contains_any(pre_, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
        set("<mask>", 1, true);
    } else if (contains_any(name, {"phi-3", "phi3"})) {
        for (size_t i = 0; i < n; i++) {
            const TokenAttr a = attrs_[i];
            if (a == TokenAttr::CONTROL || a == TokenAttr::USER_DEFINED || a == TokenAttr::UNKNOWN) strip_[i] |= 2;
        }
        set("</s>", 2, true);
        for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, 2, false);
    } else if (contains_any(name, {"modern-bert"})) {
        set("[MASK]", 1, true);
    }
    std::stable_sort(special_by_len_.begin(), special_by_len_.end(),
                     [&](int32_t a, int32_t b) { return tokens_[size_t(a)].size() > tokens_[size_t(b)].size(); });
}

int32_t Tokenizer::find_token(const std::string& text) const {
    auto it = token_to_id_.find(text);
    return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(int32_t id) const { return std::find(eog_.begin(), eog_.end(), id) != eog_.end(); }

namespace {
struct Fragment {
    bool is_token;
    int32_t token;
    std::string text;
};
}  // namespace

std::vector<int32_t> Tokenizer::encode_continuation(const std::string& text) const {
    std::vector<int32_t> out;
    if (!text.empty()) encode_fragment(text, false, out);
    return out;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_special, bool parse_special) const {
    // Split the text at special tokens, longest first (llama.cpp's tokenizer_st_partition).
    std::vector<Fragment> frags;
    if (!text.empty()) frags.push_back({false, -1, text});
    for (int32_t sid : special_by_len_) {
        TokenAttr a = attrs_[size_t(sid)];
        if (!parse_special && a != TokenAttr::USER_DEFINED) continue;
        const std::string& st = tokens_[size_t(sid)];
        std::vector<Fragment> next;
        next.reserve(frags.size());
        for (auto& fr : frags) {
            if (fr.is_token) {
                next.push_back(std::move(fr));
                continue;
            }
            size_t start = 0;
            auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
            for (;;) {
                size_t pos = fr.text.find(st, start);
                if (pos == std::string::npos) break;
                size_t left_end = pos;
                if (strip_[size_t(sid)] & 1)
                    while (left_end > start && space(fr.text[left_end - 1])) left_end--;
                if (left_end > start) next.push_back({false, -1, fr.text.substr(start, left_end - start)});
                next.push_back({true, sid, {}});
                start = pos + st.size();
                if (strip_[size_t(sid)] & 2)
                    while (start < fr.text.size() && space(fr.text[start])) start++;
            }
            if (start == 0) next.push_back(std::move(fr));
            else if (start < fr.text.size()) next.push_back({false, -1, fr.text.substr(start)});
        }
        frags.swap(next);
    }

    std::vector<int32_t> out;
    if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
    bool after_special = true;
    for (const auto& fr : frags) {
        if (fr.is_token) {
            out.push_back(fr.token);
            after_special = true;
        } else {
            encode_fragment(fr.text, after_special, out);
            after_special = false;
        }
    }
    if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
    return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
    if (id < 0 || id >= n_vocab()) return {};
    switch (attrs_[size_t(id)]) {
        case TokenAttr::CONTROL:
        case TokenAttr::UNKNOWN:
        case TokenAttr::UNUSED: return special ? tokens_[size_t(id)] : std::string();
        default: return normal_piece(id);
    }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool remove_special, bool special) const {
    std::string out;
    size_t start = 0;
    if (remove_special && add_bos_ && !ids.empty() && ids[0] == bos_) start = 1;
    bool strip = add_space_prefix_;
    for (size_t i = start; i < ids.size(); i++) {
        std::string p = token_to_piece(ids[i], special);
        if (strip && !p.empty()) {
            if (p[0] == ' ') p.erase(0, 1);
            strip = false;
        } else if (strip && attrs_[size_t(ids[i])] != TokenAttr::CONTROL) {
            strip = false;
        }
        out += p;
    }
    return out;
}

size_t utf8_complete_prefix(const std::string& s) {
    // Look at most 3 bytes back for the start of a sequence that runs past the end.
    size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        return len > back ? n - back : n;
    }
    return n;
}

bool utf8_is_valid(const std::string& s) {
    size_t i = 0, n = s.size();
    while (i < n) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c >> 5) == 6) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c >> 4) == 14) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c >> 3) == 30) {
            len = 4;
            cp = c & 0x07;
        } else return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            unsigned char cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

std::string TextStreamer::push(int32_t id) {
    std::string p = tok_.token_to_piece(id, std::find(shown_.begin(), shown_.end(), id) != shown_.end());
    if (first_ && strip_ && !p.empty()) {
        if (p[0] == ' ' && tok_.adds_space_prefix()) p.erase(0, 1);
        first_ = false;
    }
    pending_ += p;
    size_t k = utf8_complete_prefix(pending_);
    std::string out = pending_.substr(0, k);
    pending_.erase(0, k);
    return out;
}

std::string TextStreamer::flush() {
    std::string out;
    out.swap(pending_);
    return out;
}

}  // namespace tandem
