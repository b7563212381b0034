// What the answer parser (tool_calls.cpp) and the call grammars (tool_grammar.cpp) both need to agree on: the
// literal markers of the formats, and which parameters the XML format writes as raw text. Internal to src/serve.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tandem::server {

// DeepSeek's markers (fullwidth bar U+FF5C, lower one-eighth block U+2581).
inline const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallBegin = "<｜tool▁call▁begin｜>",
                         kDsSep = "<｜tool▁sep｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                         kDsCallsEnd = "<｜tool▁calls▁end｜>";

// A JSON schema that is a plain string (its value is the parameter's raw text in the XML format).
inline bool is_string_schema(const nlohmann::ordered_json& s) {
    return s.is_object() && s.value("type", nlohmann::ordered_json()) == "string";
}

}  // namespace tandem::server
