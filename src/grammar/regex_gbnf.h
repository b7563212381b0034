// JSON Schema's "pattern" (an ECMA-262 regular expression) as GBNF: the JSON string literals whose decoded value
// the pattern matches, so a generation constrained by it can only write such strings.
//
// Semantics. Search, as JSON Schema says: an unanchored pattern matches when some substring does ("abc" accepts
// "xabcx"), so each top-level alternative is wrapped in "any character" repetitions unless it begins with ^ (no
// prefix) or ends with $ (no suffix). Characters are code points (as with ECMA's u flag: "." takes "é" or "😀"
// whole). A regular expression without backreferences or lookaround denotes a set of strings, so lazy quantifiers
// are their greedy forms, and x{m,n} with x matching the empty string is (x minus the empty string){0,n}.
//
// Encoding. Every code point is written in one canonical JSON form: " as \", \ as \\, U+0008 U+0009 U+000A U+000C
// U+000D as \b \t \n \f \r, the other controls and U+007F as \u00xx (lowercase hex, as nlohmann::json dumps),
// everything else raw UTF-8 (json_schema.cpp's `char` also keeps raw U+007F out). The grammar accepts exactly
// `"` + these encodings of a matching string + `"`; other encodings of the same value (\/, \u0061) are refused.
// Surrogates (U+D800..U+DFFF) are never produced: they are not characters of a UTF-8 text.
//
// Supported subset (anything else is an Error naming the construct and its byte offset, never ignored):
//   literal characters (UTF-8); escapes \n \r \t \f \v \0 \xHH \uHHHH (a surrogate pair \uD83D\uDE00 is one code
//   point) and any escaped ASCII punctuation (\. \* \/ \\ \- ...); \d \D \w \W \s \S (ECMA: \w is [A-Za-z0-9_],
//   \s the ECMA white space and line terminators, U+00A0 U+FEFF U+2028 ... included); . (any code point but
//   \n \r U+2028 U+2029); bracket classes [a-z] [^...] [] [^] with escapes and shorthands inside ([\b] is U+0008);
//   groups ( ) (?: ) (?<name> ); alternation |; quantifiers * + ? {m} {m,} {m,n} and their lazy forms (counts at
//   most 1000); ^ at the start and $ at the end of the pattern or of a top-level alternative.
// Refused by name: backreferences (\1, \k<name>), lookahead and lookbehind, \b \B, \p{..} \P{..}, flag groups
// (?i), \u{..}, \c, octal escapes, unescaped { } ] as literals, an anchor anywhere else.
// Budgets: the pattern at most 4096 bytes, groups nested at most 32 deep, the produced expression plus its helper
// rules at most 100000 characters.
#pragma once
#include <functional>
#include <string>

namespace tandem::grammar {

// The GBNF expression of the JSON string literals (from the opening quote to the closing quote, inclusive)
// whose decoded value matches `pattern` (ECMA-262, search semantics). Helper rules are created through
// add_rule(hint, body) -> the rule's name (the caller owns naming; a body is never passed twice). Throws
// tandem::Error naming the unsupported construct and its offset in the pattern.
std::string pattern_to_gbnf(
    const std::string& pattern,
    const std::function<std::string(const std::string& hint, const std::string& body)>& add_rule);

}  // namespace tandem::grammar
