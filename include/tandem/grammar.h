// Grammars for structured output, as text: GBNF (llama.cpp's grammar format) parsed into a grammar, and a JSON
// schema converted to GBNF. The grammar is opaque here; ConstraintVocab (tandem/output_constraint.h) turns it into
// a generation's output constraint. Both throw tandem::Error (the grammar's or schema's problem and where).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tandem::grammar {

struct Grammar;

std::shared_ptr<const Grammar> parse_gbnf(const std::string& text, const std::string& root = "root");
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

}  // namespace tandem::grammar
