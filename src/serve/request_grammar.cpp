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

// llama-server's lazy grammar: `grammar_triggers`, a list of {"type": 0 (a token, by its text) or 1 (a word),
// "value": text}. Pattern triggers (types 2 and 3, regular expressions) are refused: tandem's triggers are words.
// A trigger is matched in the answer's text, where control tokens show only if the server shows them (chat
// answers: the template's tool-call and thinking markers).
std::shared_ptr<const grammar::TriggerSpec> parse_grammar_triggers(const json& body, bool has_grammar) {
    if (!has_grammar) throw BadRequest("'grammar_lazy' needs a 'grammar', 'json_schema' or 'response_format' to apply");
    auto spec = std::make_shared<grammar::TriggerSpec>();
    auto it = body.find("grammar_triggers");
    if (it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw BadRequest("'grammar_triggers' must be an array of {\"type\", \"value\"}");
        for (size_t i = 0; i < it->size(); i++) {
            const json& t = (*it)[i];
            const std::string where = strprintf("grammar_triggers[%zu]", i);
            if (!t.is_object() || !t.contains("type") || !t["type"].is_number_integer() || !t.contains("value") ||
                !t["value"].is_string())
                throw BadRequest(where + " must be {\"type\": 0 or 1, \"value\": string}");
            const int type = t["type"];
            if (type == 2 || type == 3)
                throw BadRequest(
                    where +
                    ": pattern triggers (types 2 and 3) are not supported by this server; use word triggers (type 1)");
            if (type != 0 && type != 1) throw BadRequest(where + ".type must be 0 (token) or 1 (word)");
            const std::string word = t["value"];
            // each trigger is matched against every token's text once: bounded, so a request cannot make it slow
            if (word.empty() || word.size() > 256) throw BadRequest(where + ".value must be 1 to 256 bytes");
            spec->words.push_back(word);
        }
    }
    if (spec->words.empty()) throw BadRequest("'grammar_lazy' needs at least one entry in 'grammar_triggers'");
    if (spec->words.size() > 32) throw BadRequest("'grammar_triggers' may hold at most 32 triggers");
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
