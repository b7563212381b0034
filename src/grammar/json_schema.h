// JSON Schema -> GBNF (src/grammar/grammar.h), for structured outputs (response_format json_schema, json_schema).
//
// Supported: type (one or a list), object (properties in declared order with the required ones first,
// required, additionalProperties false/absent = only the declared properties, true or a schema = more pairs;
// propertyNames for maps, whose keys it constrains), array (items, prefixItems, minItems, maxItems; uniqueItems
// false), string (minLength, maxLength, a pattern (grammar/regex_gbnf.h: an ECMA-262 subset, search semantics),
// or a format: date, time, date-time, duration, email, hostname, ipv4, ipv6, uuid), integer and number with minimum, maximum, exclusiveMinimum, exclusiveMaximum (draft 4's booleans
// too; exact digit-range grammars, grammar/numeric_range.h: integer bounds round inward, a bounded number has
// integer bounds and no exponent) and multipleOf (integers: powers of ten, up to 1000, or few multiples within
// the bounds; numbers: 0.1, 0.01, ... as at most that many fraction digits), boolean, null, enum, const, anyOf,
// oneOf, allOf (objects merge, one constraining part is that part), $ref to #/$defs/... or #/definitions/...
// (recursion allowed). A bound or length keyword without a type implies its type. Counts are non-negative
// integers (never truncated). Annotations (title, description, default, examples, $schema, $id, $comment) have
// no effect. Any other keyword would change what is valid and is refused (tandem::Error naming it), never
// ignored: not, if/then/else, patternProperties, uniqueItems true, contains...
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tandem/grammar.h"

namespace tandem::grammar {

// json_schema_to_gbnf (tandem/grammar.h): the GBNF of the JSON texts the schema accepts (with bounded
// whitespace). Throws tandem::Error.
// Several schemas in one grammar: rule `name` accepts the JSON texts of its schema, and `root ::= root_body`
// (GBNF over those names, `ws` and literals). Tool calls use it: one rule per tool's arguments.
std::string json_schemas_to_gbnf(const std::vector<std::pair<std::string, nlohmann::ordered_json>>& named,
                                 const std::string& root_body);
// A GBNF string literal matching exactly `text` (quotes, backslashes and control bytes escaped).
std::string gbnf_literal(const std::string& text);
// GBNF rules `name` (and helpers `name-1`, `name-2`, ...) matching any text that does not contain `stop` (ASCII):
// the raw text of a value closed by `stop`, e.g. an XML tool-call parameter before "\n</parameter>".
std::string gbnf_text_without(const std::string& name, const std::string& stop);
// JSON mode: one JSON object with any keys and values (whitespace bounded: one space, or a newline and up to 20
// spaces or tabs, so a small model cannot fill the answer with blank lines).
std::string json_object_gbnf();

}  // namespace tandem::grammar
