// ECMA-262 patterns as GBNF (regex_gbnf.h): a recursive-descent parser to a small AST (code point sets,
// sequences, alternations, repetitions), then an emitter that writes every set in its canonical JSON encoding.
#include "grammar/regex_gbnf.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/error.h"

namespace tandem::grammar {

namespace {

constexpr size_t kMaxPattern = 4096;  // bytes
constexpr int kMaxCount = 1000;  // a {m,n} bound
constexpr int kMaxDepth = 32;  // nested groups (parse_gbnf takes parentheses 50 deep)
constexpr size_t kMaxGrammar = 100000;  // characters of the expression and its helper rules

// Code points, as inclusive ranges: sorted, disjoint and not adjacent once merged.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges merge(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& [a, b] : r) {
        if (!out.empty() && a <= out.back().second + 1) out.back().second = std::max(out.back().second, b);
        else out.push_back({a, b});
    }
    return out;
}

Ranges complement(const Ranges& r) {  // within [0, U+10FFFF]; r merged
    Ranges out;
    uint32_t next = 0;
    for (const auto& [a, b] : r) {
        if (a > next) out.push_back({next, a - 1});
        next = b + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
}

Ranges intersect(const Ranges& x, const Ranges& y) {
    Ranges out;
    for (const auto& [a, b] : x)
        for (const auto& [c, d] : y)
            if (std::max(a, c) <= std::min(b, d)) out.push_back({std::max(a, c), std::min(b, d)});
    return merge(out);
}

// The characters of a text: every code point but the surrogates.
const Ranges kUniverse = {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
// The characters a JSON string holds raw: not a control, ", \ or U+007F (written as escapes).
const Ranges kRawSafe = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0x80, 0xD7FF}, {0xE000, 0x10FFFF}};
const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262 WhiteSpace and LineTerminator (Zs included).
const Ranges kSpace = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

Ranges normalize(Ranges r) { return intersect(merge(std::move(r)), kUniverse); }
Ranges negate(const Ranges& r) { return intersect(complement(merge(r)), kUniverse); }
bool single(const Ranges& r) { return r.size() == 1 && r[0].first == r[0].second; }

struct Node {
    enum Kind { kSet, kSeq, kAlt, kRepeat } kind = kSeq;
    Ranges set;  // kSet: the code points it matches (empty: it matches nothing)
    std::vector<Node> kids;  // kSeq, kAlt; kRepeat: the repeated node
    int min = 0, max = 0;  // kRepeat; max -1: unbounded
    bool nullable = true;  // matches the empty string
};

Node set_node(Ranges r) {
    Node n;
    n.kind = Node::kSet;
    n.set = std::move(r);
    n.nullable = false;
    return n;
}

// A top-level alternative and its anchors.
struct Branch {
    bool start = false, end = false;  // ^, $
    Node body;
};

class Parser {
public:
    explicit Parser(const std::string& p) : p_(p) {}

    std::vector<Branch> run() {
        std::vector<Branch> out;
        for (;;) {
            Branch b;
            b.body = sequence(0, &b);
            out.push_back(std::move(b));
            if (i_ >= p_.size()) return out;
            if (p_[i_] == ')') fail("unbalanced parentheses: ')' without '('", i_);
            i_++;  // '|'
        }
    }

private:
    [[noreturn]] void fail(const std::string& what, size_t at) const {
        throw Error(strprintf("pattern at offset %zu: %s", at, what.c_str()));
    }
    bool at(const char* s) const { return p_.compare(i_, std::char_traits<char>::length(s), s) == 0; }

    // Terms up to '|', ')' or the end. `top`: the top-level alternative, whose anchors are recorded.
    Node sequence(int depth, Branch* top) {
        Node seq;
        while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
            const size_t from = i_;
            const char c = p_[i_];
            if (c == '^' || c == '$') {
                const bool ok = c == '^' ? top && seq.kids.empty() && !top->start
                                         : top && (from + 1 == p_.size() || p_[from + 1] == '|');
                if (!ok)
                    fail(std::string("the anchor '") + c + "' is supported only at the " +
                             (c == '^' ? "start" : "end") + " of the pattern or of a top-level alternative",
                         from);
                (c == '^' ? top->start : top->end) = true;
                i_++;
                continue;
            }
            const bool group = c == '(';
            Node n = quantified(atom(depth));
            if (group && n.kind == Node::kSeq)  // (ab)c is abc: one sequence, so literals merge
                for (Node& k : n.kids) seq.kids.push_back(std::move(k));
            else seq.kids.push_back(std::move(n));
        }
        for (const Node& k : seq.kids) seq.nullable = seq.nullable && k.nullable;
        if (seq.kids.size() == 1) return std::move(seq.kids[0]);
        return seq;
    }

    Node alternation(int depth) {
        Node alt;
        alt.kind = Node::kAlt;
        alt.nullable = false;
        for (;;) {
            alt.kids.push_back(sequence(depth, nullptr));
            alt.nullable = alt.nullable || alt.kids.back().nullable;
            if (i_ >= p_.size() || p_[i_] != '|') break;
            i_++;
        }
        if (alt.kids.size() == 1) return std::move(alt.kids[0]);
        return alt;
    }

    Node atom(int depth) {
        const size_t from = i_;
        switch (p_[i_]) {
            case '(': return group(depth);
            case '[': return set_node(bracket());
            case '.': i_++; return set_node(negate(kLineTerminators));
            case '\\': return set_node(escape(false));
            case '*':
            case '+':
            case '?': fail(std::string("nothing to repeat before '") + p_[i_] + "'", from);
            case '{': fail("nothing to repeat before '{' (a literal brace is written \\{)", from);
            case '}':
            case ']':
                fail(std::string("an unescaped '") + p_[i_] + "' (a literal one is written \\" + p_[i_] + ")", from);
            default: {
                const uint32_t cp = utf8();
                return set_node({{cp, cp}});
            }
        }
    }

    Node group(int depth) {
        const size_t from = i_++;
        if (depth >= kMaxDepth) fail("groups nested more than 32 deep", from);
        if (at("?:")) {
            i_ += 2;
        } else if (at("?=") || at("?!")) {
            fail("lookahead (?= (?! is not supported", from);
        } else if (at("?<=") || at("?<!")) {
            fail("lookbehind (?<= (?<! is not supported", from);
        } else if (at("?<")) {  // a named group: the name does not change what it matches
            i_ += 2;
            const size_t name = i_;
            auto ident = [](char ch, bool first) {
                return std::isalpha(uint8_t(ch)) || ch == '_' || ch == '$' || (!first && std::isdigit(uint8_t(ch)));
            };
            while (i_ < p_.size() && ident(p_[i_], i_ == name)) i_++;
            if (i_ == name || i_ >= p_.size() || p_[i_] != '>') fail("a bad group name in (?<name>...)", from);
            i_++;
        } else if (at("?")) {
            fail("group modifiers and flags (?...) are not supported", from);
        }
        Node inner = alternation(depth + 1);
        if (i_ >= p_.size()) fail("unbalanced parentheses: '(' is not closed", from);
        i_++;  // ')'
        return inner;
    }

    // * + ? {m} {m,} {m,n}, each perhaps lazy (a trailing ?: the same set of strings), after an atom.
    Node quantified(Node n) {
        if (i_ >= p_.size()) return n;
        const size_t from = i_;
        int lo = 0, hi = -1;
        switch (p_[i_]) {
            case '*': i_++; break;
            case '+': i_++, lo = 1; break;
            case '?': i_++, hi = 1; break;
            case '{':
                i_++;
                lo = hi = count(from);
                if (i_ < p_.size() && p_[i_] == ',') {
                    i_++;
                    hi = i_ < p_.size() && p_[i_] == '}' ? -1 : count(from);
                }
                if (i_ >= p_.size() || p_[i_] != '}') fail("a '{' that is not a {m,n} quantifier", from);
                i_++;
                if (hi >= 0 && hi < lo) fail("a quantifier {m,n} with n < m", from);
                break;
            default: return n;
        }
        if (i_ < p_.size() && p_[i_] == '?') i_++;
        Node r;
        r.kind = Node::kRepeat;
        r.min = lo;
        r.max = hi;
        r.nullable = lo == 0 || n.nullable;
        r.kids.push_back(std::move(n));
        return r;
    }

    int count(size_t from) {
        const size_t start = i_;
        int v = 0;
        while (i_ < p_.size() && std::isdigit(uint8_t(p_[i_]))) {
            v = v * 10 + (p_[i_++] - '0');
            if (v > kMaxCount) fail("a repetition count above 1000", from);
        }
        if (i_ == start) fail("a '{' that is not a {m,n} quantifier", from);
        return v;
    }

    Ranges bracket() {
        const size_t from = i_++;
        const bool negated = i_ < p_.size() && p_[i_] == '^';
        if (negated) i_++;
        Ranges r;
        for (;;) {
            if (i_ >= p_.size()) fail("unterminated character class '['", from);
            if (p_[i_] == ']') break;
            const size_t item = i_;
            const Ranges a = class_atom();
            if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
                i_++;
                const Ranges b = class_atom();
                if (!single(a) || !single(b)) fail("a class escape (\\d \\w \\s ...) as the end of a range", item);
                if (b[0].first < a[0].first) fail("a character range out of order", item);
                r.push_back({a[0].first, b[0].first});
            } else {
                r.insert(r.end(), a.begin(), a.end());
            }
        }
        i_++;  // ']'
        return negated ? negate(r) : normalize(r);
    }

    Ranges class_atom() {
        if (p_[i_] == '\\') return escape(true);
        const uint32_t cp = utf8();
        return {{cp, cp}};
    }

    // After '\': a code point or a class (\d \D \w \W \s \S). In a class, \b is U+0008.
    Ranges escape(bool in_class) {
        const size_t from = i_++;
        if (i_ >= p_.size()) fail("the pattern ends in '\\'", from);
        const char c = p_[i_++];
        auto one = [](uint32_t cp) { return Ranges{{cp, cp}}; };
        switch (c) {
            case 'd': return kDigit;
            case 'D': return negate(kDigit);
            case 'w': return kWord;
            case 'W': return negate(kWord);
            case 's': return kSpace;
            case 'S': return negate(kSpace);
            case 'n': return one('\n');
            case 'r': return one('\r');
            case 't': return one('\t');
            case 'f': return one('\f');
            case 'v': return one('\v');
            case '0':
                if (i_ < p_.size() && std::isdigit(uint8_t(p_[i_]))) fail("octal escapes are not supported", from);
                return one(0);
            case 'x': return one(hex(2, from));
            case 'u': return one(unicode(from));
            case 'b':
                if (in_class) return one(0x08);
                fail("the word boundary \\b is not supported", from);
            case 'B': fail("the word boundary \\B is not supported", from);
            case 'k': fail("the backreference \\k<name> is not supported", from);
            case 'p':
            case 'P': fail(std::string("the unicode property escape \\") + c + "{...} is not supported", from);
            case 'c': fail("the control escape \\c is not supported", from);
            default: break;
        }
        if (c >= '1' && c <= '9') fail(std::string("the backreference \\") + c + " is not supported", from);
        if (uint8_t(c) < 0x80 && std::ispunct(uint8_t(c))) return one(uint8_t(c));
        fail(uint8_t(c) < 0x80 ? std::string("the unknown escape \\") + c : "an escaped non-ASCII character", from);
    }

    uint32_t hex(int n, size_t from) {
        uint32_t v = 0;
        for (int k = 0; k < n; k++, i_++) {
            if (i_ >= p_.size() || !std::isxdigit(uint8_t(p_[i_])))
                fail(n == 2 ? "\\x needs 2 hexadecimal digits" : "\\u needs 4 hexadecimal digits", from);
            const char h = char(std::tolower(uint8_t(p_[i_])));
            v = v * 16 + uint32_t(std::isdigit(uint8_t(h)) ? h - '0' : h - 'a' + 10);
        }
        return v;
    }

    // \uHHHH, or a surrogate pair \uD83D\uDE00 as its one code point.
    uint32_t unicode(size_t from) {
        if (at("{")) fail("\\u{...} is not supported (write \\uHHHH or the character)", from);
        const uint32_t v = hex(4, from);
        if (v >= 0xD800 && v <= 0xDBFF && at("\\u")) {
            const size_t save = i_;
            i_ += 2;
            const uint32_t lo = hex(4, from);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            i_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) fail("a lone surrogate \\u" + strprintf("%04X", v) + " is not supported", from);
        return v;
    }

    uint32_t utf8() {
        const size_t from = i_;
        const uint8_t c = uint8_t(p_[i_++]);
        if (c < 0x80) return c;
        const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
        if (n == 0 || c > 0xF4) fail("invalid UTF-8", from);
        uint32_t cp = c & (0x3Fu >> n);
        for (int k = 0; k < n; k++) {
            if (i_ >= p_.size() || (uint8_t(p_[i_]) & 0xC0) != 0x80) fail("invalid UTF-8", from);
            cp = cp << 6 | (uint8_t(p_[i_++]) & 0x3Fu);
        }
        static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
        if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8", from);
        return cp;
    }

    const std::string& p_;
    size_t i_ = 0;
};

// The canonical JSON escape of a code point (regex_gbnf.h), or "" when it is written raw.
std::string json_escape(uint32_t cp) {
    switch (cp) {
        case '"': return "\\\"";
        case '\\': return "\\\\";
        case 0x08: return "\\b";
        case 0x09: return "\\t";
        case 0x0A: return "\\n";
        case 0x0C: return "\\f";
        case 0x0D: return "\\r";
        default: return cp < 0x20 || cp == 0x7F ? strprintf("\\u%04x", cp) : "";
    }
}

// One character of a GBNF literal (printable ASCII as itself, " and \ escaped) or class (only letters and digits
// as themselves); anything else as a hexadecimal escape.
std::string gbnf_char(uint32_t cp, bool in_class) {
    if (cp >= 0x20 && cp < 0x7F) {
        if (in_class ? std::isalnum(int(cp)) != 0 : cp != '"' && cp != '\\') return std::string(1, char(cp));
        if (!in_class) return std::string("\\") + char(cp);
    }
    return cp < 0x100 ? strprintf("\\x%02X", cp) : cp < 0x10000 ? strprintf("\\u%04X", cp) : strprintf("\\U%08X", cp);
}

// A code point's JSON encoding, as the inside of a GBNF literal.
std::string literal_piece(uint32_t cp) {
    const std::string e = json_escape(cp);
    if (e.empty()) return gbnf_char(cp, false);
    std::string out;
    for (char c : e) out += gbnf_char(uint8_t(c), false);
    return out;
}

// A positive GBNF class (never negated: [^...] would also take what is not a code point).
std::string class_text(const Ranges& r) {
    std::string out = "[";
    for (const auto& [a, b] : r) {
        out += gbnf_char(a, true);
        if (b > a + 1) out += '-';
        if (b > a) out += gbnf_char(b, true);
    }
    return out + "]";
}

struct Expr {
    std::string text;  // empty: matches nothing
    bool atom = true;  // one GBNF item (a literal, class, rule name or parenthesized group) that may be repeated
};

using AddRule = std::function<std::string(const std::string&, const std::string&)>;

class Emitter {
public:
    explicit Emitter(const AddRule& add_rule) : add_rule_(add_rule) {}

    // The encodings of the strings n matches; with `nonempty`, of those but the empty string.
    // Remembered by node: nested nullable repetitions ask for the same node twice at each level.
    Expr emit(const Node& n, bool nonempty) {
        nonempty = nonempty && n.nullable;
        const auto key = std::make_pair(&n, nonempty);
        auto it = memo_.find(key);
        if (it != memo_.end()) return it->second;
        return memo_[key] = emit_new(n, nonempty);
    }
    // One character of any kind (the unanchored prefix and suffix), as a rule.
    const std::string& any() {
        if (any_.empty()) any_ = set(kUniverse, "pattern-char").text;
        return any_;
    }

    Expr alt(const std::vector<Expr>& alts) {
        std::vector<const Expr*> live;
        for (const Expr& e : alts)
            if (!e.text.empty()) live.push_back(&e);
        if (live.empty()) return {};
        if (live.size() == 1) return *live[0];
        std::string s = "(";
        for (const Expr* e : live) s += (s.size() > 1 ? " | " : "") + e->text;
        return checked({s + ")", true});
    }

    // Items in a row; nothing when one matches nothing. Empty literals are left out.
    Expr concat(const std::vector<Expr>& parts) {
        std::vector<const Expr*> kept;
        for (const Expr& e : parts) {
            if (e.text.empty()) return {};
            if (e.text != "\"\"") kept.push_back(&e);
        }
        if (kept.empty()) return {"\"\""};
        if (kept.size() == 1) return *kept[0];
        std::string s;
        for (const Expr* e : kept) s += (s.empty() ? "" : " ") + e->text;
        return checked({s, false});
    }

private:
    Expr emit_new(const Node& n, bool nonempty) {
        switch (n.kind) {
            case Node::kSet: return set(n.set, "pattern-class");
            case Node::kSeq: return nonempty ? seq_nonempty(n.kids) : seq(n.kids, 0);
            case Node::kAlt: {
                std::vector<Expr> alts;
                for (const Node& k : n.kids) alts.push_back(emit(k, nonempty));
                return alt(alts);
            }
            case Node::kRepeat: return repeat(n, nonempty);
        }
        TD_ASSERT(false);
        return {};
    }

    Expr checked(Expr e) const {
        if (e.text.size() + total_ > kMaxGrammar)
            throw Error(strprintf("pattern: its grammar is larger than %zu characters (the pattern is too complex)",
                                  kMaxGrammar));
        return e;
    }

    std::string rule(const std::string& hint, const std::string& body) {
        auto it = rules_.find(body);
        if (it != rules_.end()) return it->second;
        total_ += body.size();
        checked({});
        return rules_[body] = add_rule_(hint, body);
    }

    // A set's code points by their encodings: a class of the raw ones, then the escaped ones grouped by their
    // escape without its last character (\ ["\\bfnrt], \u000 [0-7bef], \u001 [0-9a-f], \u007f).
    Expr set(const Ranges& r, const char* hint) {
        if (r.empty()) return {};
        if (single(r)) return {"\"" + literal_piece(r[0].first) + "\""};
        std::vector<std::string> alts;
        const Ranges raw = intersect(r, kRawSafe);
        if (!raw.empty()) alts.push_back(single(raw) ? "\"" + literal_piece(raw[0].first) + "\"" : class_text(raw));
        std::map<std::string, Ranges> by_prefix;
        for (const auto& [a, b] : intersect(r, complement(kRawSafe)))
            for (uint32_t cp = a; cp <= b; cp++) {
                const std::string e = json_escape(cp);
                by_prefix[e.substr(0, e.size() - 1)].push_back({uint8_t(e.back()), uint8_t(e.back())});
            }
        for (auto& [prefix, last] : by_prefix) {
            std::string lit;
            for (char c : prefix) lit += gbnf_char(uint8_t(c), false);
            last = merge(last);
            alts.push_back(single(last) ? "\"" + lit + gbnf_char(last[0].first, false) + "\""
                                        : "\"" + lit + "\" " + class_text(last));
        }
        if (alts.size() == 1 && !raw.empty()) return {alts[0]};  // one class
        std::string body;
        for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
        return {rule(hint, body)};
    }

    // kids[from..] in a row; a run of single code points is one literal.
    Expr seq(const std::vector<Node>& kids, size_t from) {
        std::vector<Expr> parts;
        std::string lit;
        for (size_t k = from; k < kids.size(); k++) {
            const Node& n = kids[k];
            if (n.kind == Node::kSet && single(n.set)) {
                lit += literal_piece(n.set[0].first);
                continue;
            }
            if (!lit.empty()) parts.push_back({"\"" + lit + "\""}), lit.clear();
            parts.push_back(emit(n, false));
        }
        if (!lit.empty()) parts.push_back({"\"" + lit + "\""});
        return concat(parts);
    }

    // A sequence of nullable items without the empty string: the first non-empty item is some kids[i] (those
    // before it empty), the rest as they come.
    Expr seq_nonempty(const std::vector<Node>& kids) {
        std::vector<Expr> alts;
        for (size_t i = 0; i < kids.size(); i++) alts.push_back(concat({emit(kids[i], true), seq(kids, i + 1)}));
        return alt(alts);
    }

    // x{m,n}. A nullable x is repeated as x without the empty string {0,n}: the same strings, and GBNF refuses
    // x* with a nullable x as left recursion.
    Expr repeat(const Node& n, bool nonempty) {
        const Node& x = n.kids[0];
        int lo = x.nullable ? 0 : n.min;
        const int hi = n.max;
        if (nonempty) lo = std::max(lo, 1);
        if (hi == 0) return nonempty ? Expr{} : Expr{"\"\""};
        Expr e = emit(x, true);
        if (e.text.empty()) return lo == 0 ? Expr{"\"\""} : Expr{};
        // a long item becomes a rule: the non-empty forms of nested nullable repetitions name it twice, and
        // copying it would double the text at each level
        if (e.text.size() > 80) e = {rule("pattern-group", e.text)};
        if (lo == 1 && hi == 1) return e;
        std::string s = e.atom ? e.text : "(" + e.text + ")";
        if (hi < 0) s += lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
        else if (lo == 0 && hi == 1) s += "?";
        else if (lo == hi) s += "{" + std::to_string(lo) + "}";
        else s += "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
        return checked({s, false});
    }

    const AddRule& add_rule_;
    std::map<std::string, std::string> rules_;  // body -> name
    std::map<std::pair<const Node*, bool>, Expr> memo_;  // (node, nonempty) -> its expression
    size_t total_ = 0;
    std::string any_;
};

}  // namespace

std::string pattern_to_gbnf(const std::string& pattern, const AddRule& add_rule) {
    if (pattern.size() > kMaxPattern)
        throw Error(strprintf("pattern: %zu bytes is too long (at most %zu)", pattern.size(), kMaxPattern));
    const std::vector<Branch> branches = Parser(pattern).run();
    Emitter em(add_rule);
    std::vector<Expr> alts;
    for (const Branch& b : branches) {
        Expr body = em.emit(b.body, false);
        if (body.text.empty()) continue;  // matches nothing (an empty class)
        std::vector<Expr> parts;
        if (!b.start) parts.push_back({em.any() + "*", false});
        parts.push_back(std::move(body));
        if (!b.end) parts.push_back({em.any() + "*", false});
        alts.push_back(em.concat(parts));
    }
    const Expr all = em.alt(alts);
    return "\"\\\"\" " + (all.text.empty() ? std::string("[]") : all.text) + " \"\\\"\"";
}

}  // namespace tandem::grammar
