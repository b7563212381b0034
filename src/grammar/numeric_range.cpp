// Range grammars for JSON numbers (numeric_range.h).
#include "grammar/numeric_range.h"

#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::grammar {

namespace {

std::string digit(char lo, char hi) {
    if (lo == hi) return std::string("\"") + lo + "\"";
    return std::string("[") + lo + "-" + hi + "]";
}
std::string any_digits(size_t m) {
    if (m == 0) return "";
    return m == 1 ? " [0-9]" : " [0-9]{" + std::to_string(m) + "}";
}
bool all_of(const std::string& s, char c) { return s.find_first_not_of(c) == std::string::npos; }
std::string alternatives(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); i++) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

// The digit strings of length n from a to b (a <= b as numbers, both n digits; leading zeros are part of them).
std::string same_length(const std::string& a, const std::string& b) {
    const size_t n = a.size();
    size_t p = 0;
    while (p < n && a[p] == b[p]) p++;
    std::string prefix;
    for (size_t i = 0; i < p; i++) prefix += (i ? " " : "") + digit(a[i], a[i]);
    if (p == n) return prefix;
    const size_t m = n - p - 1;
    const std::string ra = a.substr(p + 1), rb = b.substr(p + 1);
    char first = a[p], last = b[p];
    std::vector<std::string> alts;
    if (!all_of(ra, '0')) {  // a's digit, then from a's rest up to all nines
        alts.push_back(digit(first, first) + " " + same_length(ra, std::string(m, '9')));
        first++;
    }
    const bool low_tail = !all_of(rb, '9');
    if (low_tail) last--;
    if (first <= last) alts.push_back(digit(first, last) + any_digits(m));
    if (low_tail) alts.push_back(digit(b[p], b[p]) + " " + same_length(std::string(m, '0'), rb));
    return (prefix.empty() ? "" : prefix + " ") + alternatives(alts);
}

// Texts without leading zeros of the integers in [lo, hi], 0 <= lo <= hi.
std::string nonnegative(uint64_t lo, uint64_t hi) {
    std::vector<std::string> alts;
    const std::string hs = std::to_string(hi);
    uint64_t floor_l = 1;  // 10^(L-1)
    for (size_t len = 1; len <= hs.size(); len++) {
        const uint64_t first = len == 1 ? 0 : floor_l;
        const uint64_t last = len == hs.size() ? hi : floor_l * 10 - 1;
        const uint64_t a = lo > first ? lo : first, b = hi < last ? hi : last;
        if (a <= b) alts.push_back(same_length(std::to_string(a), std::to_string(b)));
        if (len < hs.size()) floor_l *= 10;
    }
    return alternatives(alts);
}

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v); }

// The fractions: any, a non-zero one, all zeros (or none); with at most k digits when k >= 0.
struct Fractions {
    std::string any, nonzero, zero;
    explicit Fractions(int k) {
        if (k < 0) {
            any = "(\".\" [0-9]+)?";
            nonzero = "\".\" [0-9]* [1-9] [0-9]*";
            zero = "(\".\" \"0\"+)?";
            return;
        }
        if (k == 0) {
            any = zero = "";
            return;
        }
        any = "(\".\" [0-9]{1," + std::to_string(k) + "})?";
        std::vector<std::string> alts;  // by the position of the first non-zero digit
        for (int i = 0; i < k; i++)
            alts.push_back((i ? "\"0\"{" + std::to_string(i) + "} " : std::string()) + "[1-9]" +
                           (k - 1 - i > 0 ? " [0-9]{0," + std::to_string(k - 1 - i) + "}" : std::string()));
        nonzero = "\".\" " + alternatives(alts);
        zero = "(\".\" \"0\"{1," + std::to_string(k) + "})?";
    }
};

// Texts I.F (no sign) with w = I + f in the interval from `a` to `b` (b absent: open), 0 <= a.
std::string magnitude_range(uint64_t a, bool a_ex, std::optional<uint64_t> b, bool b_ex, const Fractions& f) {
    std::vector<std::string> alts;
    // integer parts strictly inside take any fraction
    const uint64_t i_lo = a_ex ? a + 1 : a;
    const uint64_t cap = uint64_t(INT64_MAX);
    const bool has_hi = b.has_value() && *b > 0;
    const uint64_t i_hi = b ? (*b > 0 ? *b - 1 : 0) : cap;
    auto then = [](const std::string& i, const std::string& frac) { return frac.empty() ? i : i + " " + frac; };
    if ((!b || has_hi) && i_lo <= i_hi) alts.push_back(then(nonnegative(i_lo, i_hi), f.any));
    // the lower bound itself, exclusive: a fraction above it (none when no fraction digit is allowed)
    if (a_ex && (!b || *b > a) && !f.nonzero.empty()) alts.push_back(nonnegative(a, a) + " " + f.nonzero);
    // the upper bound itself, inclusive: no fraction (or zeros)
    if (b && !b_ex && (*b > a || (*b == a && !a_ex))) alts.push_back(then(nonnegative(*b, *b), f.zero));
    if (alts.empty()) return "";
    return alternatives(alts);
}

}  // namespace

std::string integer_range_gbnf(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) {  // negatives: "-" and a magnitude in [max(1, -hi), -lo]
        const uint64_t m_lo = hi < 0 ? magnitude(hi) : 1, m_hi = magnitude(lo);
        alts.push_back("\"-\" " + nonnegative(m_lo, m_hi));
    }
    if (hi >= 0) alts.push_back(nonnegative(lo > 0 ? uint64_t(lo) : 0, uint64_t(hi)));
    return alternatives(alts);
}

std::string number_range_gbnf(std::optional<Bound> lo, std::optional<Bound> hi, int max_fraction) {
    const Fractions f(max_fraction);
    std::vector<std::string> alts;
    // v >= 0 (text without "-"): v within [max(lo, 0), hi]
    if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
        const bool lo_pos = lo && lo->value >= 0;
        const uint64_t a = lo_pos ? uint64_t(lo->value) : 0;
        const std::optional<uint64_t> b = hi ? std::optional<uint64_t>(uint64_t(hi->value)) : std::nullopt;
        const std::string m = magnitude_range(a, lo_pos && lo->exclusive, b, hi && hi->exclusive, f);
        if (!m.empty()) alts.push_back(m);
    }
    // v < 0 (text "-" I.F): w = -v in (0, -lo] and w >= -hi (or > -hi when hi is exclusive)
    if (!lo || lo->value < 0) {
        const bool hi_neg = hi && hi->value < 0;
        const uint64_t a = hi_neg ? magnitude(hi->value) : 0;
        const bool a_ex = hi_neg ? hi->exclusive : true;  // w > 0: "-0" is not a negative number
        const std::optional<uint64_t> b = lo ? std::optional<uint64_t>(magnitude(lo->value)) : std::nullopt;
        const std::string m = magnitude_range(a, a_ex, b, lo && lo->exclusive, f);
        if (!m.empty()) alts.push_back("\"-\" " + m);
    }
    if (alts.empty()) return "";
    return alternatives(alts);
}

std::string multiple_gbnf(uint64_t m, int64_t lo, int64_t hi, const RuleSink& rules) {
    if (m == 0) throw Error("multipleOf must be positive");
    if (lo > hi) return "";
    if (m == 1) return integer_range_gbnf(lo, hi);
    // the multiples of m in [lo, hi] are k*m for k in [k_lo, k_hi] (floor and ceiling division, exact in int128)
    const __int128 M = __int128(m);
    auto div_floor = [&](__int128 v) { return v >= 0 ? v / M : -((-v + M - 1) / M); };
    const __int128 k_lo = -div_floor(-__int128(lo)), k_hi = div_floor(__int128(hi));
    if (k_lo > k_hi) return "";
    uint64_t zeros = 0, p = 1;
    while (p < m && p <= UINT64_MAX / 10) p *= 10, zeros++;
    if (p == m) {  // a power of ten: k's text then `zeros` zeros, and 0 alone
        const std::string tail = " \"0\"{" + std::to_string(zeros) + "}";
        std::vector<std::string> alts;
        if (k_lo < 0)
            alts.push_back("(" + integer_range_gbnf(int64_t(k_lo), int64_t(std::min<__int128>(k_hi, -1))) + ")" + tail);
        if (k_lo <= 0 && k_hi >= 0) alts.push_back("\"0\"");
        if (k_hi > 0)
            alts.push_back("(" + integer_range_gbnf(int64_t(std::max<__int128>(k_lo, 1)), int64_t(k_hi)) + ")" + tail);
        return alternatives(alts);
    }
    if (k_hi - k_lo < __int128(kMaxListed)) {  // few: listed
        std::vector<std::string> alts;
        for (__int128 k = k_lo; k <= k_hi; k++) alts.push_back("\"" + std::to_string(int64_t(k * M)) + "\"");
        return alternatives(alts);
    }
    const bool sign_only = (lo == INT64_MIN || lo == 0 || lo == 1) && (hi == INT64_MAX || hi == 0 || hi == -1);
    if (!sign_only)
        throw Error("multipleOf " + std::to_string(m) + " with bounds that hold more than " +
                    std::to_string(kMaxListed) +
                    " multiples is not supported (a power of ten is, or bounds that only fix the sign)");
    if (m > kMaxModulus)
        throw Error("multipleOf " + std::to_string(m) + " is not supported (powers of ten are, and up to " +
                    std::to_string(kMaxModulus) + ")");
    // digits after the first, by remainder: rest-r ::= "" (r = 0) | [the digits leading to r'] rest-r' ...
    std::vector<std::string> rest(m);
    for (uint64_t r = 0; r < m; r++) rest[r] = rules.add("multiple-of-" + std::to_string(m) + "-rest", "\"\"");
    auto to = [&](uint64_t r, int d) { return (r * 10 + uint64_t(d)) % m; };
    auto digits_to = [&](uint64_t r, uint64_t target, int from) {
        std::string cls;
        for (int d = from; d <= 9; d++)
            if (to(r, d) == target) cls += char('0' + d);
        return cls.empty() ? cls : "[" + cls + "]";
    };
    for (uint64_t r = 0; r < m; r++) {
        std::vector<std::string> alts;
        if (r == 0) alts.push_back("\"\"");
        for (uint64_t t = 0; t < m; t++)
            if (const std::string c = digits_to(r, t, 0); !c.empty()) alts.push_back(c + " " + rest[t]);
        std::string body;
        for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
        rules.set(rest[r], body);
    }
    std::vector<std::string> first;
    for (uint64_t t = 0; t < m; t++)
        if (const std::string c = digits_to(0, t, 1); !c.empty()) first.push_back(c + " " + rest[t]);
    const std::string positive = alternatives(first);
    std::vector<std::string> alts;
    if (lo < 0) alts.push_back("\"-\" " + positive);
    if (lo <= 0 && hi >= 0) alts.push_back("\"0\"");
    if (hi > 0) alts.push_back(positive);
    return alternatives(alts);
}

}  // namespace tandem::grammar
