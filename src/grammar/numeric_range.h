// GBNF for JSON numbers within bounds (JSON Schema's minimum, maximum, exclusiveMinimum, exclusiveMaximum), as
// the texts a generation may write: digit-by-digit range grammars, exact for every int64 bound.
//
// Integers: the decimal texts (no leading zeros, "-" for negatives, "0" once) of the integers in [lo, hi].
// Numbers with integer bounds: an integer part and an optional fraction, no exponent, whose value lies within the
// bounds (inclusive or exclusive at each end): v = I.F is in (a, b] exactly when I is strictly inside or I sits on
// a bound with the fraction that keeps it in (non-zero above an exclusive lower bound, all zeros on an inclusive
// upper one), and likewise for negatives on their magnitude. Bounds that are not integers are the caller's to
// refuse or round (json_schema.cpp: integers round inward; numbers with fractional bounds are refused).
//
// Multiples (multipleOf): of a power of ten, the integers of a range (or all) followed by that many zeros; of
// another m up to kMaxModulus, the decimal texts whose remainder mod m is 0, read digit by digit (one rule per
// remainder); within finite bounds holding at most kMaxListed multiples, those multiples listed.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tandem::grammar {

// The integers in [lo, hi] (lo <= hi). An expression (parenthesized alternatives), without trailing ws.
std::string integer_range_gbnf(int64_t lo, int64_t hi);

struct Bound {
    int64_t value = 0;
    bool exclusive = false;
};
// Decimal numbers (optional fraction, no exponent) within the bounds; an absent bound is open. Empty when no
// number satisfies both.
// max_fraction >= 0: at most that many fraction digits (multipleOf 10^-k); -1: any.
std::string number_range_gbnf(std::optional<Bound> lo, std::optional<Bound> hi, int max_fraction = -1);

constexpr uint64_t kMaxModulus = 1000;
constexpr uint64_t kMaxListed = 1000;
// Where helper rules go (the caller owns naming): `add` makes a rule from a name hint and a body and returns its
// unique name; `set` replaces a rule's body (rules that refer to each other are added first, then set).
struct RuleSink {
    std::function<std::string(const std::string& hint, const std::string& body)> add;
    std::function<void(const std::string& name, const std::string& body)> set;
};
// The integers in [lo, hi] that are multiples of m (m >= 1). Empty when none is. Throws tandem::Error naming
// multipleOf when no grammar here can say it: m neither a power of ten nor at most kMaxModulus, or bounds that
// leave more than kMaxListed multiples and are not just a sign (lo in {INT64_MIN, 0, 1}, hi in {-1, 0, INT64_MAX}).
std::string multiple_gbnf(uint64_t m, int64_t lo, int64_t hi, const RuleSink& rules);

}  // namespace tandem::grammar
