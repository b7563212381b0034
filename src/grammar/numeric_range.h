// GBNF for JSON numbers within bounds (JSON Schema's minimum, maximum, exclusiveMinimum, exclusiveMaximum), as
// the texts a generation may write: digit-by-digit range grammars, exact for every int64 bound.
//
// Integers: the decimal texts (no leading zeros, "-" for negatives, "0" once) of the integers in [lo, hi].
// Numbers with integer bounds: an integer part and an optional fraction, no exponent, whose value lies within the
// bounds (inclusive or exclusive at each end): v = I.F is in (a, b] exactly when I is strictly inside or I sits on
// a bound with the fraction that keeps it in (non-zero above an exclusive lower bound, all zeros on an inclusive
// upper one), and likewise for negatives on their magnitude. Bounds that are not integers are the caller's to
// refuse or round (json_schema.cpp: integers round inward; numbers with fractional bounds are refused).
#pragma once
#include <cstdint>
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
std::string number_range_gbnf(std::optional<Bound> lo, std::optional<Bound> hi);

}  // namespace tandem::grammar
