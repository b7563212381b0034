// Chat-template lexer (see jinja_lex.h): @huggingface/jinja's preprocessing, then its tokenization.
#include <algorithm>
#include "chat/jinja_lex.h"

#include <cctype>
#include <cstdint>
#include <cstring>

#include "tandem/error.h"

namespace tandem::jinja {

void fail(int line, const std::string& what) { throw Error(strprintf("line %d: %s", line, what.c_str())); }

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_word(char c) { return std::isalnum(uint8_t(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// @huggingface/jinja's preprocess: drop one trailing newline; lstrip_blocks (spaces and tabs before a block or
// comment tag at the start of a line); trim_blocks (the newline after a block or comment tag); drop
// {% generation %} / {% endgeneration %} (with the whitespace their '-' asks to remove).
std::string preprocess(std::string t) {
    if (!t.empty() && t.back() == '\n') t.pop_back();
    std::string a;
    a.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
        if (i == 0 || t[i - 1] == '\n') {
            size_t j = i;
            while (j < t.size() && (t[j] == ' ' || t[j] == '\t')) j++;
            if (j + 1 < t.size() && t[j] == '{' && (t[j + 1] == '#' || t[j + 1] == '%' || t[j + 1] == '-')) i = j;
        }
        a += t[i++];
    }
    std::string b;
    b.reserve(a.size());
    for (size_t i = 0; i < a.size(); i++) {
        b += a[i];
        if (a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') && i + 1 < a.size() &&
            a[i + 1] == '\n')
            i++;
    }
    std::string c;
    for (size_t i = 0; i < b.size();) {
        if (b.compare(i, 2, "{%") == 0) {
            size_t j = i + 2;
            const bool lstrip = j < b.size() && b[j] == '-';
            if (lstrip) j++;
            while (j < b.size() && is_ws(b[j])) j++;
            if (b.compare(j, 3, "end") == 0 && b.compare(j + 3, 10, "generation") == 0) j += 3;
            if (b.compare(j, 10, "generation") == 0 && (j + 10 >= b.size() || !is_word(b[j + 10]))) {
                size_t k = j + 10;
                while (k < b.size() && is_ws(b[k])) k++;
                const bool rstrip = k < b.size() && b[k] == '-';
                if (rstrip) k++;
                if (b.compare(k, 2, "%}") == 0) {
                    k += 2;
                    if (lstrip)
                        while (!c.empty() && is_ws(c.back())) c.pop_back();
                    if (rstrip)
                        while (k < b.size() && is_ws(b[k])) k++;
                    i = k;
                    continue;
                }
            }
        }
        c += b[i++];
    }
    return c;
}

class Lexer {
public:
    explicit Lexer(const std::string& src) : src_(preprocess(src)) {}

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            const Tok last = toks_.empty() ? Tok::CLOSE_STMT : toks_.back().t;
            if (toks_.empty() || last == Tok::CLOSE_STMT || last == Tok::CLOSE_EXPR || last == Tok::COMMENT) {
                std::string text;
                while (pos_ < src_.size() &&
                       !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
                         (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#')))
                    text += src_[pos_++];
                if (!text.empty()) {
                    push(Tok::TEXT, text);
                    continue;
                }
            }
            if (starts("{#")) {
                comment();
                continue;
            }
            if (starts("{%-")) {
                strip_trailing_ws();
                push(Tok::OPEN_STMT, "{%");
                pos_ += 3;
                continue;
            }
            if (starts("{{-")) {
                strip_trailing_ws();
                push(Tok::OPEN_EXPR, "{{");
                depth_ = 0;
                pos_ += 3;
                continue;
            }
            while (pos_ < src_.size() && is_ws(src_[pos_])) pos_++;
            if (pos_ >= src_.size()) break;
            if (starts("-%}")) {
                push(Tok::CLOSE_STMT, "%}");
                pos_ += 3;
                skip_ws();
                continue;
            }
            if (starts("-}}")) {
                push(Tok::CLOSE_EXPR, "}}");
                pos_ += 3;
                skip_ws();
                continue;
            }
            const char ch = src_[pos_];
            if (ch == '-' || ch == '+') {
                if (toks_.empty() || toks_.back().t == Tok::TEXT) fail(line(), std::string("unexpected '") + ch + "'");
                const Tok lt = toks_.back().t;
                if (lt != Tok::IDENT && lt != Tok::NUMBER && lt != Tok::STRING && lt != Tok::RPAREN &&
                    lt != Tok::RBRACKET) {
                    pos_++;
                    std::string num = digits();
                    if (!num.empty() && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
                        pos_++;
                        num += '.';
                        num += digits();
                    }
                    push(num.empty() ? Tok::UNARY : Tok::NUMBER, std::string(1, ch) + num);
                    continue;
                }
            }
            if (symbol()) continue;
            if (ch == '\'' || ch == '"') {
                pos_++;
                push(Tok::STRING, string_body(ch));
                pos_++;
                continue;
            }
            if (is_digit(ch)) {
                std::string num = digits();
                if (toks_.empty() || toks_.back().t != Tok::DOT)
                    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
                        pos_++;
                        num += '.';
                        num += digits();
                    }
                push(Tok::NUMBER, num);
                continue;
            }
            if (is_word(ch)) {
                std::string w;
                while (pos_ < src_.size() && is_word(src_[pos_])) w += src_[pos_++];
                push(Tok::IDENT, w);
                continue;
            }
            fail(line(), std::string("unexpected character '") + ch + "'");
        }
        return std::move(toks_);
    }

private:
    bool starts(const char* s) const { return src_.compare(pos_, std::strlen(s), s) == 0; }
    // The line of pos_, counted on from the last answer (the lexer moves forward): linear in the source, where
    // counting from the start for every token made a 400 KB template take 40 s.
    int line() const {
        const size_t end = std::min(pos_, src_.size());
        if (end < line_at_) line_at_ = 0, line_n_ = 1;
        for (; line_at_ < end; line_at_++) line_n_ += src_[line_at_] == '\n';
        return line_n_;
    }
    mutable size_t line_at_ = 0;
    mutable int line_n_ = 1;
    void push(Tok t, std::string v) { toks_.push_back({t, std::move(v), line()}); }
    void skip_ws() {
        while (pos_ < src_.size() && is_ws(src_[pos_])) pos_++;
    }
    void strip_trailing_ws() {
        if (!toks_.empty() && toks_.back().t == Tok::TEXT) {
            std::string& v = toks_.back().v;
            while (!v.empty() && is_ws(v.back())) v.pop_back();
            if (v.empty()) toks_.pop_back();
        }
    }
    std::string digits() {
        std::string d;
        while (pos_ < src_.size() && is_digit(src_[pos_])) d += src_[pos_++];
        return d;
    }
    void comment() {
        pos_ += 2;
        const bool strip_before = pos_ < src_.size() && src_[pos_] == '-';
        if (strip_before) pos_++;
        std::string c;
        while (!(src_[pos_] == '#' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}')) {
            if (pos_ + 2 >= src_.size()) fail(line(), "a comment is not closed ('#}' missing)");
            c += src_[pos_++];
        }
        const bool strip_after = !c.empty() && c.back() == '-';
        if (strip_after) c.pop_back();
        if (strip_before) strip_trailing_ws();
        push(Tok::COMMENT, c);
        pos_ += 2;
        if (strip_after) skip_ws();
    }
    bool symbol() {
        static const std::pair<const char*, Tok> kTable[] = {
            {"{%", Tok::OPEN_STMT}, {"%}", Tok::CLOSE_STMT}, {"{{", Tok::OPEN_EXPR}, {"}}", Tok::CLOSE_EXPR},
            {"(", Tok::LPAREN},     {")", Tok::RPAREN},      {"{", Tok::LBRACE},     {"}", Tok::RBRACE},
            {"[", Tok::LBRACKET},   {"]", Tok::RBRACKET},    {",", Tok::COMMA},      {".", Tok::DOT},
            {":", Tok::COLON},      {"|", Tok::PIPE},        {"<=", Tok::CMP},       {">=", Tok::CMP},
            {"==", Tok::CMP},       {"!=", Tok::CMP},        {"<", Tok::CMP},        {">", Tok::CMP},
            {"+", Tok::ADD},        {"-", Tok::ADD},         {"~", Tok::ADD},        {"**", Tok::POW},
            {"*", Tok::MUL},        {"//", Tok::MUL},        {"/", Tok::MUL},        {"%", Tok::MUL},
            {"=", Tok::EQUALS}};
        for (const auto& [seq, t] : kTable) {
            if (t == Tok::CLOSE_EXPR && depth_ > 0) continue;
            if (!starts(seq)) continue;
            push(t, seq);
            if (t == Tok::OPEN_EXPR) depth_ = 0;
            else if (t == Tok::LBRACE) depth_++;
            else if (t == Tok::RBRACE) depth_--;
            pos_ += std::strlen(seq);
            return true;
        }
        return false;
    }
    std::string string_body(char quote) {
        std::string s;
        while (pos_ < src_.size() && src_[pos_] != quote) {
            if (src_[pos_] == '\\') {
                if (++pos_ >= src_.size()) fail(line(), "unexpected end of input in a string");
                const char e = src_[pos_++];
                if (e == 'x' || e == 'u') {
                    const size_t n = e == 'x' ? 2 : 4;
                    const std::string hex = src_.substr(pos_, n);
                    if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
                        fail(line(), "invalid escape \\" + std::string(1, e) + hex);
                    append_utf8(s, uint32_t(std::stoul(hex, nullptr, 16)));
                    pos_ += n;
                    continue;
                }
                switch (e) {
                    case 'n': s += '\n'; break;
                    case 't': s += '\t'; break;
                    case 'r': s += '\r'; break;
                    case 'b': s += '\b'; break;
                    case 'f': s += '\f'; break;
                    case 'v': s += '\v'; break;
                    case '\'': s += '\''; break;
                    case '"': s += '"'; break;
                    case '\\': s += '\\'; break;
                    default: fail(line(), std::string("unknown escape \\") + e);
                }
                continue;
            }
            s += src_[pos_++];
            if (pos_ >= src_.size()) fail(line(), "a string is not closed");
        }
        if (pos_ >= src_.size()) fail(line(), "a string is not closed");
        return s;
    }
    static void append_utf8(std::string& s, uint32_t cp) {
        if (cp < 0x80) s += char(cp);
        else if (cp < 0x800) s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 0x3f));
        else s += char(0xe0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3f)), s += char(0x80 | (cp & 0x3f));
    }

    std::string src_;
    size_t pos_ = 0;
    int depth_ = 0;
    std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace tandem::jinja
