// Structured output of a request (serve/request_parts.h): the grammar a request asks for (GBNF, a JSON schema, JSON
// mode, or the server's), llama-server's lazy grammar triggers, and the tool-call grammar of tool_choice
// (apply_tool_choice, serve/openai.h).
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/trigger.h"
#include "serve/request_parts.h"
#include "tandem/error.h"

namespace tandem::server {

namespace request {

namespace {

// The JSON schema a request asks for: `json_schema` (llama-server), response_format {"type": "json_schema",
// "json_schema": {"schema": ...}} (OpenAI), or response_format {"type": "json_object", "schema": ...}
// (llama-server); null when none.
const json* json_schema_of(const json& body) {
    if (auto js = body.find("json_schema"); js != body.end() && !js->is_null()) return &*js;
    auto rf = body.find("response_format");
    if (rf == body.end() || !rf->is_object()) return nullptr;
    const std::string type = rf->value("type", "");
    if (type == "json_schema") {
        auto js = rf->find("json_schema");
        if (js == rf->end() || !js->is_object() || !js->contains("schema"))
            throw BadRequest("response_format json_schema needs {\"json_schema\": {\"schema\": ...}}");
        return &(*js)["schema"];
    }
    if (type == "json_object")
        if (auto sc = rf->find("schema"); sc != rf->end() && !sc->is_null()) return &*sc;
    return nullptr;
}

// llama-server's lazy grammar: `grammar_triggers`, a list of {"type": 0 (a token, by its text), 1 (a word),
// 2 (a pattern found anywhere) or 3 (a pattern matching the whole answer), "value": text}. Patterns are PCRE2
// regular expressions (grammar/trigger.h: when they fire). A trigger is matched in the answer's text, where
// control tokens show only if the server shows them (chat answers: the template's tool-call and thinking
// markers). Bounded, so a request cannot make matching slow: 32 triggers of at most 256 bytes (words are
// matched against every token's text once; patterns run under PCRE2's match limits).
std::shared_ptr<const grammar::TriggerSpec> parse_grammar_triggers(const json& body, bool has_grammar) {
    if (!has_grammar) throw BadRequest("'grammar_lazy' needs a 'grammar', 'json_schema' or 'response_format' to apply");
    auto spec = std::make_shared<grammar::TriggerSpec>();
    std::vector<std::string> anywhere, whole;
    auto it = body.find("grammar_triggers");
    size_t n = 0;
    if (it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw BadRequest("'grammar_triggers' must be an array of {\"type\", \"value\"}");
        n = it->size();
        for (size_t i = 0; i < it->size(); i++) {
            const json& t = (*it)[i];
            const std::string where = strprintf("grammar_triggers[%zu]", i);
            if (!t.is_object() || !t.contains("type") || !t["type"].is_number_integer() || !t.contains("value") ||
                !t["value"].is_string())
                throw BadRequest(where + " must be {\"type\": 0, 1, 2 or 3, \"value\": string}");
            const json& ty = t["type"];  // read whole: 4294967298 is no 2
            const bool in_range =
                ty.is_number_unsigned() ? ty.get<uint64_t>() <= 3 : ty.get<int64_t>() >= 0 && ty.get<int64_t>() <= 3;
            const int type = in_range ? int(ty.get<int64_t>()) : -1;
            if (type < 0 || type > 3)
                throw BadRequest(where + ".type must be 0 (token), 1 (word), 2 (pattern) or 3 (whole-answer pattern)");
            const std::string value = t["value"];
            if (value.empty() || value.size() > 256) throw BadRequest(where + ".value must be 1 to 256 bytes");
            (type <= 1 ? spec->words : type == 2 ? anywhere : whole).push_back(value);
        }
    }
    if (n == 0) throw BadRequest("'grammar_lazy' needs at least one entry in 'grammar_triggers'");
    if (n > 32) throw BadRequest("'grammar_triggers' may hold at most 32 triggers");
    if (!anywhere.empty() || !whole.empty()) {
        try {
            spec->patterns = std::make_shared<grammar::TriggerPatterns>(anywhere, whole);
        } catch (const Error& e) {
            throw BadRequest(std::string("grammar_triggers: ") + e.what());
        }
    }
    return spec;
}

}  // namespace

void parse_output_format(const json& body, const ServerLimits& lim, ParsedRequest& r) {
    if (auto g = body.find("grammar");
        g != body.end() && !g->is_null() && !(g->is_string() && g->get<std::string>().empty())) {
        if (!g->is_string()) throw BadRequest("'grammar' must be a string (GBNF)");
        try {
            r.grammar = grammar::parse_gbnf(g->get<std::string>());
            grammar::Matcher check(r.grammar);  // its first state: the bounds of grammar.h apply here, as a 400
        } catch (const Error& e) {
            throw BadRequest(std::string("'grammar': ") + e.what());
        }
    } else if (const json* schema = json_schema_of(body)) {
        try {
            r.grammar = grammar::parse_gbnf(grammar::json_schema_to_gbnf(*schema));
            grammar::Matcher check(r.grammar);
        } catch (const Error& e) {
            throw BadRequest(e.what());
        }
    } else if (auto rf = body.find("response_format");
               rf != body.end() && rf->is_object() && rf->value("type", "") == "json_object") {
        r.grammar = grammar::parse_gbnf(grammar::json_object_gbnf());
    } else if (lim.default_grammar && r.tool_choice != ParsedRequest::ToolChoice::REQUIRED &&
               r.tool_choice != ParsedRequest::ToolChoice::NAMED) {
        r.grammar = lim.default_grammar;  // --grammar / --grammar-file
    }
    if (boolean(body, "grammar_lazy", false)) r.lazy = parse_grammar_triggers(body, r.grammar != nullptr);
}

}  // namespace request

void apply_tool_choice(ParsedRequest& r, ToolFormat format) {
    using TC = ParsedRequest::ToolChoice;
    if (r.tool_choice == TC::AUTO && r.uses_tools() && !r.grammar && format != ToolFormat::NONE) {
        try {
            auto g = grammar::parse_gbnf(tool_call_gbnf(format, r.tools, "", r.parallel_tool_calls));
            grammar::Matcher check(g);
            r.grammar = std::move(g);
            r.lazy = std::make_shared<grammar::TriggerSpec>(tool_call_triggers(format));
        } catch (const std::exception&) {
            // a schema the converter refuses (or of the wrong JSON types): the calls are parsed, not constrained
            // (see the header)
        }
        return;
    }
    if (r.tool_choice != TC::REQUIRED && r.tool_choice != TC::NAMED) return;
    if (r.grammar)
        throw BadRequest("a required tool call cannot be combined with 'grammar', 'json_schema' or 'response_format'");
    if (format == ToolFormat::NONE)
        throw BadRequest("tool_choice asks for a tool call, but this model's chat template has no tool-call format");
    try {
        r.grammar = grammar::parse_gbnf(
            tool_call_gbnf(format, r.tools, r.tool_choice == TC::NAMED ? r.tool_name : "", r.parallel_tool_calls));
        grammar::Matcher check(r.grammar);
    } catch (const Error& e) {
        throw BadRequest(std::string("tools: ") + e.what());
    }
}

}  // namespace tandem::server
