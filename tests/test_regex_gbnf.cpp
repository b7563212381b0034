// JSON Schema "pattern" to GBNF (grammar/regex_gbnf.h): hand-picked cases per construct, a differential test
// against std::wregex (ECMAScript, regex_search) on every short string over a small alphabet, and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <regex>
#include <tuple>

#include "grammar/grammar.h"
#include "grammar/regex_gbnf.h"
#include "tandem/error.h"

using namespace tandem;
using namespace tandem::grammar;

namespace {

// root ::= the pattern's expression, with its helper rules.
std::shared_ptr<const Grammar> compile(const std::string& pattern) {
    std::string rules;
    int n = 0;
    const std::string expr = pattern_to_gbnf(pattern, [&](const std::string& hint, const std::string& body) {
        const std::string name = hint + "-" + std::to_string(++n);
        rules += name + " ::= " + body + "\n";
        return name;
    });
    return parse_gbnf("root ::= " + expr + "\n" + rules);
}

std::string utf8(const std::u32string& s) {
    std::string out;
    for (char32_t c : s) {
        const uint32_t cp = c;
        if (cp < 0x80) {
            out += char(cp);
        } else if (cp < 0x800) {
            out += char(0xC0 | cp >> 6), out += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += char(0xE0 | cp >> 12), out += char(0x80 | (cp >> 6 & 0x3F)), out += char(0x80 | (cp & 0x3F));
        } else {
            out += char(0xF0 | cp >> 18), out += char(0x80 | (cp >> 12 & 0x3F));
            out += char(0x80 | (cp >> 6 & 0x3F)), out += char(0x80 | (cp & 0x3F));
        }
    }
    return out;
}

// The canonical JSON encoding of one code point that regex_gbnf.h promises (without quotes).
std::string json_char(char32_t c) {
    switch (c) {
        case '"': return "\\\"";
        case '\\': return "\\\\";
        case '\b': return "\\b";
        case '\t': return "\\t";
        case '\n': return "\\n";
        case '\f': return "\\f";
        case '\r': return "\\r";
        default: break;
    }
    if (c < 0x20 || c == 0x7F) return strprintf("\\u%04x", unsigned(c));
    return utf8(std::u32string(1, c));
}
std::string json_string(const std::u32string& s) {
    std::string out = "\"";
    for (char32_t c : s) out += json_char(c);
    return out + "\"";
}

bool accepts_json(const std::shared_ptr<const Grammar>& g, const std::string& json) {
    Matcher m(g);
    return m.accept_bytes(json) && m.can_end();
}
bool accepts(const std::shared_ptr<const Grammar>& g, const std::u32string& s) {
    return accepts_json(g, json_string(s));
}

std::string refusal(const std::string& pattern) {
    try {
        compile(pattern);
    } catch (const Error& e) {
        return e.what();
    }
    return "(accepted)";
}

// UTF-8 (well formed) to code points, for std::wregex.
std::wstring wide(const std::string& s) {
    std::wstring out;
    for (size_t i = 0; i < s.size();) {
        const uint8_t b = uint8_t(s[i]);
        const size_t n = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
        uint32_t cp = n == 0 ? b : b & (0x3Fu >> n);
        for (size_t k = 1; k <= n; k++) cp = cp << 6 | (uint8_t(s[i + k]) & 0x3Fu);
        out += wchar_t(cp);
        i += n + 1;
    }
    return out;
}

struct Case {
    std::string pattern;
    std::vector<std::u32string> yes, no;
};

const std::u32string kNul(1, U'\0');

}  // namespace

TEST(RegexGbnf, EachConstructAcceptsAndRefusesTheRightStrings) {
    const std::vector<Case> cases = {
        // search semantics and anchors
        {"abc", {U"abc", U"xabcx", U"ababc"}, {U"ab", U"acb", U""}},
        {"^abc", {U"abc", U"abcd"}, {U"xabc"}},
        {"abc$", {U"abc", U"xabc"}, {U"abcx"}},
        {"^abc$", {U"abc"}, {U"abcc", U"aabc"}},
        {"^a|b$", {U"ax", U"xb", U"a"}, {U"xa", U"bx", U""}},
        {"^$", {U""}, {U"a"}},
        {"", {U"", U"anything"}, {}},
        // escapes
        {"^\\n\\r\\t\\f\\v\\0$", {U"\n\r\t\f\v" + kNul}, {U"\n\r\t\f\v"}},
        {"^\\x41\\u00e9\\uD83D\\uDE00$", {U"Aé😀"}, {U"A\u00e9"}},
        {"^\\/\\\\\\.\\*\\-\\\"\\{\\}\\]$", {U"/\\.*-\"{}]"}, {U"/\\x*-\"{}]"}},
        {"^café😀$", {U"café😀"}, {U"cafe😀"}},
        // class shorthands (ECMA's definitions)
        {"^\\d+$", {U"0123456789"}, {U"a", U"\u0663"}},
        {"^\\w+$", {U"aZ_9"}, {U"é", U"-"}},
        {"^\\s+$", {U" \t\n\v\f\r\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"}, {U"a", U"\u200b"}},
        {"^\\D\\W\\S$", {U"a-b", U"\"\\\""}, {U"1-b", U"aab", U"a- "}},
        {"^.$",
         {U"a", U"é", U"😀", U"\x7f", U"\"", U"\\", U"\x01", kNul},
         {U"\n", U"\r", U"\u2028", U"\u2029", U"ab", U""}},
        // bracket classes
        {"^[a-c]+$", {U"abcba"}, {U"abd"}},
        {"^[^a]$", {U"\"", U"\\", U"\n", kNul, U"\x7f", U"é", U"\U0010FFFF"}, {U"a", U""}},
        {"^[\\d\\s-]+$", {U"1 -2"}, {U"a"}},
        {"^[\\b]$", {U"\b"}, {U"b"}},
        {"^[\\]\\\\^-]+$", {U"]\\^-"}, {U"a"}},
        {"^[-a]$", {U"-", U"a"}, {U"b"}},
        {"^[a-c-e]$", {U"b", U"-", U"e"}, {U"d"}},
        {"^[\\x00-\\x1f\"\\\\]+$", {kNul + U"\x1f\"\\\b\t\n\f\r"}, {U" "}},
        {"^[^\\x00-\\x7f]$", {U"é"}, {U"a", U"\x7f"}},
        {"^[é-ü]$", {U"é", U"ü"}, {U"e"}},
        {"^[]$", {}, {U"", U"a"}},
        {"a|[]", {U"a"}, {U"b"}},
        {"^[^]$", {U"a", U"\n"}, {U""}},
        // groups and alternation
        {"^(ab)+$", {U"ab", U"abab"}, {U"aba", U""}},
        {"^(?:ab|cd){2}$", {U"abcd", U"cdcd"}, {U"ab", U"abcdab"}},
        {"^(?<year>\\d{4})-(?<month>\\d{2})$", {U"2024-05"}, {U"24-05"}},
        {"^(a|b|)c$", {U"ac", U"bc", U"c"}, {U"abc"}},
        {"^()$", {U""}, {U"a"}},
        // quantifiers, lazy ones included
        {"^a{2,3}$", {U"aa", U"aaa"}, {U"a", U"aaaa"}},
        {"^a{2,}$", {U"aa", U"aaaaa"}, {U"a"}},
        {"^a{2}$", {U"aa"}, {U"a", U"aaa"}},
        {"^a{0}b$", {U"b"}, {U"ab"}},
        {"^a*?b+?c??$", {U"b", U"aabbc"}, {U"c", U"bcc"}},
        {"^a{1,2}?$", {U"a", U"aa"}, {U"aaa"}},
        // repetitions of what matches the empty string
        {"^(a?)*$", {U"", U"aaa"}, {U"b"}},
        {"^(a|)+b$", {U"b", U"aab"}, {U"c"}},
        {"^(a*b*)*c$", {U"c", U"abbac"}, {U"abd"}},
        {"^(a?b?){2}$", {U"", U"ab", U"abab", U"ba"}, {U"aaa", U"ababa"}},
        {"^(?:|a){3,}$", {U"", U"aaaa"}, {U"b"}},
        // characters JSON escapes
        {"\"", {U"\"", U"a\"b"}, {U"a"}},
        {"^\\x7f$", {U"\x7f"}, {U"~"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE("pattern " + c.pattern);
        std::shared_ptr<const Grammar> g;
        ASSERT_NO_THROW(g = compile(c.pattern));
        for (const auto& s : c.yes) EXPECT_TRUE(accepts(g, s)) << json_string(s);
        for (const auto& s : c.no) EXPECT_FALSE(accepts(g, s)) << json_string(s);
    }
}

TEST(RegexGbnf, OnlyTheCanonicalJsonEncodingIsProduced) {
    const auto any = compile("^.*$");
    EXPECT_TRUE(accepts_json(any, "\"a\\\"\\\\\\u0001\\u007f\\b\\t\\f\""));
    EXPECT_FALSE(accepts_json(any, "\"\x01\""));  // a raw control: not JSON
    EXPECT_FALSE(accepts_json(any, "\"\x7f\""));  // raw U+007F: json_schema's char keeps it out too
    EXPECT_FALSE(accepts_json(any, "\"\\u0061\""));  // another encoding of "a"
    EXPECT_FALSE(accepts_json(any, "\"\\/\""));
    EXPECT_FALSE(accepts_json(any, "\"\\u001F\""));  // lowercase hex only
    EXPECT_FALSE(accepts_json(any, "\"\xed\xa0\x80\""));  // a surrogate is no character
    EXPECT_FALSE(accepts_json(any, "\"a\"\""));  // the string ends at its closing quote
    EXPECT_FALSE(accepts_json(compile("[^a]"), "\"\"\""));
    // helper rules come from the caller, each body once
    std::vector<std::string> bodies;
    pattern_to_gbnf("[^a][^a]\\S\\S.", [&](const std::string&, const std::string& body) {
        bodies.push_back(body);
        return "r" + std::to_string(bodies.size());
    });
    std::sort(bodies.begin(), bodies.end());
    EXPECT_EQ(std::unique(bodies.begin(), bodies.end()), bodies.end());
    EXPECT_EQ(bodies.size(), 4u);  // [^a], \S, ., and any character
}

// Grammar acceptance equals std::wregex's regex_search (ECMAScript) on the decoded string, for every string up to
// length 5 over an alphabet with JSON's special characters and a non-ASCII one, and random longer ones. (wchar_t
// is a code point here; std::regex has no named groups and no U+00A0 in \s, so the patterns avoid those.)
TEST(RegexGbnf, AgreesWithStdRegexSearch) {
    const std::vector<std::string> patterns = {
        "a",
        "^a",
        "a$",
        "^a$",
        "^ab|ba$",
        "^(a|b)*$",
        "a.b",
        "^.*$",
        "^[^a]+$",
        "[^ab]",
        "^[ab\"]{2,3}$",
        "^\\w+$",
        "\\s",
        "^\\S*$",
        "^\\D{2}",
        "\"",
        "\\\\",
        "^[\\\\\"]+$",
        "é",
        "^[^é\\n]*$",
        "(a|)+b",
        "^(a?b?)*$",
        "^(a*)*b",
        "a{2}",
        "^a{1,2}b?$",
        "^(?:ab)+?$",
        "(?:ba)\\n",
        "^\\n|b$",
        "[a-b][\\s\\S]",
        "^$",
        "^[\\x61\\u00e9]+$",
        "\\x22\\W",
        "a*?b??c*",
        "^.{0,3}$",
        "^(a|\"|\\\\)*\\\\$",
        "b(a|é)*b",
        "^(?:a|b\\n)+é?$",
        "[^\\d\\w]{2}",
    };
    const std::u32string alphabet = U"ab\"\\\né";
    std::mt19937 rng(7);
    std::vector<std::u32string> longer;
    for (int k = 0; k < 1000; k++) {
        std::u32string s(6 + rng() % 7, U'a');
        for (auto& c : s) c = alphabet[rng() % alphabet.size()];
        longer.push_back(s);
    }
    int checked = 0;
    for (const std::string& pattern : patterns) {
        SCOPED_TRACE("pattern " + pattern);
        std::shared_ptr<const Grammar> g;
        ASSERT_NO_THROW(g = compile(pattern));
        const std::wregex re(wide(pattern), std::regex::ECMAScript);
        int mismatches = 0;
        auto check = [&](const Matcher& m, const std::u32string& s) {
            Matcher end = m;
            const bool grammar = end.accept_bytes("\"") && end.can_end();
            const bool oracle = std::regex_search(std::wstring(s.begin(), s.end()), re);
            checked++;
            if (grammar != oracle && mismatches++ < 5)
                ADD_FAILURE() << "string " << json_string(s) << ": grammar " << grammar << ", std::regex " << oracle;
        };
        // every string up to length 5, depth first, each step one more character
        std::function<void(const Matcher&, bool, std::u32string&)> walk = [&](const Matcher& m, bool live,
                                                                              std::u32string& s) {
            if (live) check(m, s);
            else if (std::regex_search(std::wstring(s.begin(), s.end()), re) && mismatches++ < 5)
                ADD_FAILURE() << "string " << json_string(s) << ": grammar 0 (dead prefix), std::regex 1";
            if (s.size() == 5) return;
            for (char32_t c : alphabet) {
                Matcher next = m;
                const bool ok = live && next.accept_bytes(json_char(c));
                s.push_back(c);
                walk(next, ok, s);
                s.pop_back();
            }
        };
        Matcher start(g);
        ASSERT_TRUE(start.accept_bytes("\""));
        std::u32string s;
        walk(start, true, s);
        for (const auto& l : longer) {
            Matcher m = start;
            std::string body;
            for (char32_t c : l) body += json_char(c);
            if (m.accept_bytes(body)) check(m, l);
            else if (std::regex_search(std::wstring(l.begin(), l.end()), re) && mismatches++ < 5)
                ADD_FAILURE() << "string " << json_string(l) << ": grammar 0 (dead prefix), std::regex 1";
        }
    }
    EXPECT_GT(checked, 100000);
}

// The matcher keeps one parse stack per live alternative: ambiguous patterns must keep few of them on long inputs,
// and nested repetitions of nullable groups must neither blow up the grammar nor the work of making it.
TEST(RegexGbnf, AmbiguousPatternsStayCheapToMatch) {
    const std::vector<std::tuple<std::string, std::string, bool>> cases = {
        {".*abc.*", "xabc", true},
        {"^(\\w+\\s?)*$", "ab ", true},
        {"^(a|a)*$", "a", true},
        {"^(a|ab|b)*$", "ab", true},
        {"^(a*)*$", "a", true},
        {"^(.*,)*.*$", "a,", true},
        {"a.*b.*c.*d", "abcd", true},
        {"^(a|b)*a(a|b){5}$", "ab", true},
        {"^(?:a{0,10}){0,10}$", "a", false},
    };
    for (const auto& [pattern, unit, accepted] : cases) {
        SCOPED_TRACE("pattern " + pattern);
        Matcher m(compile(pattern));
        std::string text;
        while (text.size() < 2000) text += unit;
        bool ok = m.accept_bytes("\"");
        size_t most = 0;
        for (size_t k = 0; k < text.size() && ok; k++) {
            ok = m.accept_bytes(text.substr(k, 1));
            most = std::max(most, m.stacks().size());
        }
        EXPECT_EQ(ok && m.accept_bytes("\"") && m.can_end(), accepted);
        EXPECT_LE(most, 100u);
    }
    for (const auto& [open, close] :
         std::vector<std::pair<std::string, std::string>>{{"(x?", ")*"}, {"(?:a?", "b?)?"}, {"(?:x|", ")*"}}) {
        std::string pattern = "^";
        for (int k = 0; k < 32; k++) pattern += open;
        pattern += "a";
        for (int k = 0; k < 32; k++) pattern += close;
        SCOPED_TRACE("pattern " + pattern);
        std::shared_ptr<const Grammar> g;
        ASSERT_NO_THROW(g = compile(pattern + "$"));
        EXPECT_TRUE(accepts(g, U"a"));
        EXPECT_FALSE(accepts(g, U"c"));
    }
}

TEST(RegexGbnf, UnsupportedConstructsAreRefusedByName) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"(a)\\1", "backreference \\1"},
        {"(?<x>a)\\k<x>", "backreference \\k<name>"},
        {"a(?=b)", "lookahead"},
        {"a(?!b)", "lookahead"},
        {"(?<=a)b", "lookbehind"},
        {"(?<!a)b", "lookbehind"},
        {"\\bfoo", "word boundary \\b"},
        {"a\\B", "word boundary \\B"},
        {"\\p{L}", "unicode property"},
        {"(?i)a", "flags"},
        {"\\u{41}", "\\u{...}"},
        {"\\cA", "control escape"},
        {"\\01", "octal"},
        {"\\q", "unknown escape \\q"},
        {"a^b", "anchor '^'"},
        {"(^a)", "anchor '^'"},
        {"^^a", "anchor '^'"},
        {"a$b", "anchor '$'"},
        {"(a$)", "anchor '$'"},
        {"(a", "unbalanced parentheses"},
        {"a)", "unbalanced parentheses"},
        {"[a", "unterminated character class"},
        {"[z-a]", "out of order"},
        {"[\\d-z]", "end of a range"},
        {"*a", "nothing to repeat"},
        {"a**", "nothing to repeat"},
        {"a{2}{3}", "nothing to repeat"},
        {"a{1001}", "above 1000"},
        {"a{3,2}", "n < m"},
        {"a{x}", "not a {m,n} quantifier"},
        {"a}", "unescaped '}'"},
        {"\\x4", "\\x needs 2"},
        {"\\uD800", "lone surrogate"},
        {"\xff", "invalid UTF-8"},
        {std::string(4097, 'a'), "too long"},
        {std::string(33, '(') + std::string(33, ')'), "nested more than 32"},
        // a million-character grammar: all nullable items in a row under a star
        {"(" +
             [] {
                 std::string s;
                 for (int k = 0; k < 1000; k++) s += "a?";
                 return s;
             }() +
             ")*",
         "larger than 100000"},
    };
    for (const auto& [pattern, what] : cases) {
        const std::string msg = refusal(pattern);
        EXPECT_NE(msg.find(what), std::string::npos) << pattern.substr(0, 40) << " -> " << msg;
    }
    EXPECT_NE(refusal("ab(c)\\1").find("offset 5"), std::string::npos) << refusal("ab(c)\\1");
    EXPECT_EQ(refusal(std::string(4096, 'a')), "(accepted)");
}
