#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <functional>
#include <map>
#include <set>

#include "grammar/numeric_range.h"
#include "grammar/regex_gbnf.h"
#include "tandem/error.h"

namespace tandem::grammar {

using ojson = nlohmann::ordered_json;

namespace {

const char* kBase = R"(value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
char   ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" ws
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws
integer ::= "-"? ([0-9] | [1-9] [0-9]{0,15})
boolean ::= ("true" | "false") ws
null   ::= "null" ws
ws     ::= (" " | "\n" [ \t]{0,20})?
)";

// Keywords that constrain nothing: annotations, and the definitions $ref reads.
const std::set<std::string> kAnnotations = {"title", "description", "default",    "examples", "$schema",
                                            "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "$defs", "definitions", "strict",     "name",     "discriminator"};

// Keywords that pick or combine schemas, and those that constrain one kind of value (each kind lists its own in
// Converter::typed). A keyword in neither list nor kAnnotations is refused by name.
const std::set<std::string> kCombinators = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"};
const std::set<std::string> kKinds = {"properties", "required",         "propertyNames",    "additionalProperties",
                                      "items",      "prefixItems",      "minItems",         "maxItems",
                                      "minLength",  "maxLength",        "format",           "minimum",
                                      "maximum",    "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                                      "pattern"};

// A GBNF literal for a JSON text.
std::string literal(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else out += char(c);
    }
    return out + "\"";
}

class Converter {
public:
    // Each (name, schema) becomes rule `name`; `root` is root_body.
    std::string run(const std::vector<std::pair<std::string, ojson>>& named, const std::string& root_body) {
        for (const auto& [name, schema] : named) reserved_.insert(name);
        std::string out;
        for (const auto& [name, schema] : named) {
            root_ = &schema;  // $ref resolves against the schema it appears in
            refs_.clear();
            out += name + " ::= " + visit(schema, name + "-value") + "\n";
        }
        return grammar_text(root_body, out);
    }
    std::string run(const ojson& schema) {
        root_ = &schema;
        return grammar_text(visit(schema, "root-value"), "");
    }

private:
    // root, the base JSON rules, the caller's rules, then the rules made while visiting
    std::string grammar_text(const std::string& root_body, const std::string& named_rules) const {
        std::string out = "root ::= " + root_body + "\n" + kBase + named_rules;
        for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
        return out;
    }

    [[noreturn]] void fail(const std::string& where, const std::string& what) const {
        throw Error("json schema" + (where.empty() ? std::string() : " at " + where) + ": " + what);
    }

    // A count keyword (minLength, maxItems, ...): a non-negative integer (2.0 is one; 1.5, -1, "3" and 2^32 are
    // refused by name, never truncated), at most `most`; `def` when absent.
    int64_t count(const ojson& s, const char* key, int64_t def, int64_t most, const std::string& path) const {
        auto it = s.find(key);
        if (it == s.end()) return def;
        const ojson& v = *it;
        double d = -1;
        if (v.is_number_unsigned()) d = v.get<uint64_t>() > uint64_t(INT64_MAX) ? 1e300 : double(v.get<uint64_t>());
        else if (v.is_number_integer()) d = double(v.get<int64_t>());
        else if (v.is_number_float()) d = v.get<double>();
        else fail(path, std::string("'") + key + "' must be a non-negative integer, not " + v.type_name());
        if (!(d >= 0) || d != std::floor(d))
            fail(path, std::string("'") + key + "' must be a non-negative integer, not " + v.dump());
        if (d > double(most))
            fail(path, std::string("'") + key + "' is " + v.dump() + ", more than the " + std::to_string(most) +
                           " this converter supports");
        return int64_t(d);
    }

    std::string add_rule(const std::string& hint, const std::string& body) {
        std::string name;
        for (char c : hint) name += std::isalnum(uint8_t(c)) ? char(std::tolower(uint8_t(c))) : '-';
        if (name.empty() || !std::isalpha(uint8_t(name[0]))) name = "r-" + name;
        std::string unique = name;
        for (int k = 2;
             rules_.count(unique) || reserved_.count(unique) || unique == "root" || unique == "value" ||
             unique == "object" || unique == "array" || unique == "string" || unique == "number" ||
             unique == "integer" || unique == "boolean" || unique == "null" || unique == "ws" || unique == "char";
             k++)
            unique = name + "-" + std::to_string(k);
        rules_[unique] = body;
        return unique;
    }

    // The rule (or inline expression) for schema `s`; `path` names it in errors and rule names.
    std::string visit(const ojson& s, const std::string& path) {
        struct Depth {
            int& d;
            ~Depth() { --d; }
        } depth{++depth_};
        if (depth_ > 64) fail(path, "schemas nested more than 64 deep");
        if (rules_.size() > 5000) fail(path, "the schema is too large");
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail(path, "a false schema accepts nothing");
            return "value";
        }
        if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
        if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
            fail(path, "'uniqueItems' is not supported: a grammar cannot say that the items of an array differ");
        for (auto it = s.begin(); it != s.end(); ++it)
            if (!kAnnotations.count(it.key()) && !kCombinators.count(it.key()) && !kKinds.count(it.key()) &&
                it.key() != "uniqueItems")  // false: constrains nothing
                fail(path, "'" + it.key() +
                               "' is not supported (it would change what is valid, and tandem does not enforce it)");

        // Keywords beside $ref, anyOf and oneOf apply too (JSON Schema: every keyword of a schema must hold): they
        // join each alternative, or the reference, as an allOf (merged, or a 400 when it cannot be). Beside enum
        // and const only a type is taken (the values of other types dropped).
        auto besides = [&](std::initializer_list<const char*> keys) {
            ojson rest = ojson::object();
            for (auto it = s.begin(); it != s.end(); ++it) {
                bool skip = kAnnotations.count(it.key()) > 0;
                for (const char* k : keys) skip = skip || it.key() == k;
                if (!skip) rest[it.key()] = it.value();
            }
            return rest;
        };
        if (auto r = s.find("$ref"); r != s.end()) {
            if (!r->is_string()) fail(path, "'$ref' must be a string");
            const ojson rest = besides({"$ref"});
            if (rest.empty()) return ref(r->get<std::string>(), path);
            return visit(ojson{{"allOf", ojson::array({ojson{{"$ref", *r}}, rest})}}, path);
        }
        for (const char* k : {"const", "enum"})
            if (auto e = s.find(k); e != s.end()) {
                const bool one = std::string(k) == "const";
                if (!one && (!e->is_array() || e->empty())) fail(path, "'enum' must be a non-empty array");
                const ojson rest = besides({k, "type"});
                if (!rest.empty())
                    fail(path, "'" + rest.begin().key() + "' beside '" + k + "' is not supported (list the values)");
                std::string alts;
                for (const auto& v : one ? ojson::array({*e}) : *e)
                    if (!s.contains("type") || of_type(v, s["type"]))
                        alts += (alts.empty() ? "" : " | ") + literal(v.dump());
                if (alts.empty()) fail(path, std::string("no value of '") + k + "' has the schema's type");
                return "((" + alts + ") ws)";
            }
        for (const char* k : {"anyOf", "oneOf"})
            if (auto a = s.find(k); a != s.end()) {
                if (!a->is_array() || a->empty()) fail(path, std::string("'") + k + "' must be a non-empty array");
                const ojson rest = besides({k});
                // oneOf: exactly one may match, which a grammar can say only when no text matches two of them
                if (std::string(k) == "oneOf") check_disjoint(*a, path);
                std::string alts;
                int i = 0;
                for (const auto& sub : *a) {
                    const ojson branch = rest.empty() ? sub : ojson{{"allOf", ojson::array({sub, rest})}};
                    alts += (alts.empty() ? "" : " | ") + visit(branch, path + "/" + k + "/" + std::to_string(i++));
                }
                return add_rule(path, alts);
            }
        if (auto a = s.find("allOf"); a != s.end()) {
            const ojson merged = merge_all_of(s, path);
            return visit(merged, path + "/allOf");
        }
        if (auto t = s.find("type"); t != s.end()) {
            if (t->is_array()) {
                std::string alts;
                for (const auto& one : *t) {
                    ojson copy = s;
                    copy["type"] = one;
                    // a kind's keywords say nothing about values of other types: {"type": ["integer", "null"],
                    // "minimum": 5} accepts null
                    if (one.is_string())
                        for (const auto& k : kKinds)
                            if (copy.contains(k) && !applies(k, one.get<std::string>())) copy.erase(k);
                    alts += (alts.empty() ? "" : " | ") +
                            typed(copy, one, path + "-" + (one.is_string() ? one.get<std::string>() : "t"));
                }
                return add_rule(path, alts);
            }
            return typed(s, *t, path);
        }
        if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties") ||
            s.contains("propertyNames"))
            return typed(s, "object", path);
        if (s.contains("items") || s.contains("prefixItems")) return typed(s, "array", path);
        // a keyword of one kind without a type: that kind (so the keyword is enforced, never ignored)
        for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
            if (s.contains(k)) return typed(s, "number", path);
        for (const char* k : {"minLength", "maxLength", "format", "pattern"})
            if (s.contains(k)) return typed(s, "string", path);
        return "value";  // {}: any JSON value
    }

    // Whether JSON value v has JSON Schema type t (a name or a list).
    static bool of_type(const ojson& v, const ojson& t) {
        if (t.is_array()) {
            for (const auto& one : t)
                if (of_type(v, one)) return true;
            return false;
        }
        if (!t.is_string()) return false;
        const std::string n = t;
        if (n == "integer")
            return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
        return (n == "number" && v.is_number()) || (n == "string" && v.is_string()) ||
               (n == "boolean" && v.is_boolean()) || (n == "null" && v.is_null()) || (n == "object" && v.is_object()) ||
               (n == "array" && v.is_array());
    }

    // Whether kind keyword k constrains values of type t.
    static bool applies(const std::string& k, const std::string& t) {
        static const std::map<std::string, std::set<std::string>> kOf = {
            {"string", {"minLength", "maxLength", "format", "pattern"}},
            {"integer", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format"}},
            {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format"}},
            {"array", {"items", "prefixItems", "minItems", "maxItems"}},
            {"object", {"properties", "required", "additionalProperties", "propertyNames"}}};
        auto it = kOf.find(t);
        return it != kOf.end() && it->second.count(k) > 0;
    }

    // What a oneOf branch can be, for telling branches apart: its types (empty: any) and, when it lists its
    // values (const, enum), those; for objects, the required properties whose values it lists (a tag).
    struct Shape {
        std::set<std::string> types;
        std::optional<std::vector<ojson>> values;
        std::map<std::string, std::vector<ojson>> tags;
    };
    Shape shape_of(const ojson& b0) const {
        ojson b = b0;
        for (int hops = 0; b.is_object() && b.contains("$ref") && b["$ref"].is_string() && hops < 8; hops++) {
            std::string name;
            const ojson* def = local_def(b["$ref"].get<std::string>(), &name);
            if (!def) break;
            b = *def;
        }
        Shape sh;
        if (!b.is_object()) return sh;
        auto listed = [](const ojson& x) -> std::optional<std::vector<ojson>> {
            if (!x.is_object()) return std::nullopt;
            if (x.contains("const")) return std::vector<ojson>{x["const"]};
            if (x.contains("enum") && x["enum"].is_array())
                return std::vector<ojson>(x["enum"].begin(), x["enum"].end());
            return std::nullopt;
        };
        sh.values = listed(b);
        if (auto t = b.find("type"); t != b.end()) {
            for (const auto& one : t->is_array() ? *t : ojson::array({*t}))
                if (one.is_string()) sh.types.insert(one == "integer" ? "number" : one.get<std::string>());
        } else if (b.contains("properties") || b.contains("required") || b.contains("additionalProperties")) {
            sh.types.insert("object");
        } else if (b.contains("items") || b.contains("prefixItems")) {
            sh.types.insert("array");
        }
        if (b.contains("properties") && b["properties"].is_object() && b.contains("required") &&
            b["required"].is_array())
            for (const auto& k : b["required"])
                if (k.is_string() && b["properties"].contains(k.get<std::string>()))
                    if (auto v = listed(b["properties"][k.get<std::string>()])) sh.tags[k.get<std::string>()] = *v;
        return sh;
    }
    static bool disjoint_values(const std::vector<ojson>& a, const std::vector<ojson>& b) {
        for (const auto& x : a)
            if (std::find(b.begin(), b.end(), x) != b.end()) return false;
        return true;
    }
    void check_disjoint(const ojson& branches, const std::string& path) const {
        std::vector<Shape> shapes;
        for (const auto& b : branches) shapes.push_back(shape_of(b));
        for (size_t i = 0; i < shapes.size(); i++)
            for (size_t j = i + 1; j < shapes.size(); j++) {
                const Shape &a = shapes[i], &b = shapes[j];
                bool apart = a.values && b.values && disjoint_values(*a.values, *b.values);
                if (!apart && !a.types.empty() && !b.types.empty()) {
                    apart = true;
                    for (const auto& t : a.types) apart = apart && !b.types.count(t);
                }
                for (const auto& [k, va] : a.tags)
                    if (auto it = b.tags.find(k); !apart && it != b.tags.end()) apart = disjoint_values(va, it->second);
                if (!apart)
                    fail(path, strprintf("'oneOf' branches %zu and %zu may both match (tandem enforces oneOf only when "
                                         "its branches differ in type, in listed values or in a required tag "
                                         "property): use anyOf",
                                         i, j));
            }
    }

    // The schema a local reference (#/$defs/NAME, #/definitions/NAME, # for the whole schema) names, or null;
    // *name: NAME ("" when the reference is not a local one).
    const ojson* local_def(const std::string& r, std::string* name) const {
        name->clear();
        if (r == "#") {
            *name = "root";
            return root_;
        }
        for (const char* pre : {"#/$defs/", "#/definitions/"})
            if (r.rfind(pre, 0) == 0) *name = r.substr(std::strlen(pre));
        if (name->empty()) return nullptr;
        for (const char* k : {"$defs", "definitions"})
            if (auto d = root_->find(k); d != root_->end() && d->contains(*name)) return &(*d)[*name];
        return nullptr;
    }

    std::string ref(const std::string& r, const std::string& path) {
        std::string name;
        const ojson* def = local_def(r, &name);
        if (name.empty()) fail(path, "only local references (#/$defs/NAME, #/definitions/NAME) are supported: " + r);
        if (!def) fail(path, "the reference " + r + " is not defined");
        if (auto it = refs_.find(r); it != refs_.end()) return it->second;
        const std::string rule = add_rule("ref-" + name, "value");  // placeholder: recursion refers to it
        refs_[r] = rule;
        rules_[rule] = visit(*def, "#/$defs/" + name);
        return rule;
    }

    // Whether a schema only annotates (title, description, ...): it constrains nothing.
    static bool annotation_only(const ojson& s) {
        if (!s.is_object()) return false;
        for (auto it = s.begin(); it != s.end(); ++it)
            if (!kAnnotations.count(it.key())) return false;
        return true;
    }

    // allOf as one schema: the schema's own keywords and each entry (a local $ref resolved) must all hold. One
    // constraining part is that part. Objects merge: properties joined (a property in several parts must have
    // the same schema, or be {} in all but one, or be objects that merge in turn), required joined, and
    // additionalProperties false when any part says false (read over the merged properties: the intersection of
    // two closed objects with different properties would accept nothing, which no generator wants). Anything
    // else (allOf of two strings with different bounds, of an object and an array) is refused by name.
    // allOf of schemas that are not objects (strings, numbers, arrays): lower bounds take the largest, upper
    // bounds the smallest; any other keyword must be the same wherever it appears, or the allOf is refused.
    ojson merge_values(const std::vector<ojson>& parts, const std::string& path) const {
        static const std::set<std::string> kLower = {"minLength", "minItems", "minimum", "exclusiveMinimum"};
        static const std::set<std::string> kUpper = {"maxLength", "maxItems", "maximum", "exclusiveMaximum"};
        ojson merged = ojson::object();
        for (const ojson& p : parts) {
            if (!p.is_object() || p.contains("allOf") || p.contains("anyOf") || p.contains("oneOf") ||
                p.contains("$ref"))
                fail(path, "'allOf' is supported for objects (merged) or schemas of one kind with mergeable keywords");
            for (auto it = p.begin(); it != p.end(); ++it) {
                const std::string& k = it.key();
                if (kAnnotations.count(k)) continue;
                if (!merged.contains(k)) {
                    merged[k] = it.value();
                } else if ((kLower.count(k) || kUpper.count(k)) && it.value().is_number() && merged[k].is_number()) {
                    const double a = merged[k].get<double>(), b = it.value().get<double>();
                    if (kLower.count(k) ? b > a : b < a) merged[k] = it.value();
                } else if (merged[k] != it.value()) {
                    fail(path, "'allOf': its parts give '" + k + "' different values, which cannot be merged");
                }
            }
        }
        return merged;
    }

    ojson merge_all_of(const ojson& s, const std::string& path) {
        const ojson& list = s["allOf"];
        if (!list.is_array() || list.empty()) fail(path, "'allOf' must be a non-empty array of schemas");
        std::vector<ojson> parts;  // the entries first, then the schema's own keywords: a base's properties come
            // before the subclass's, as Pydantic orders them
        ojson own = s;
        own.erase("allOf");
        for (const ojson& e : list) {
            ojson part = e;
            for (int hops = 0; part.is_object() && part.contains("$ref") && hops < 8; hops++) {
                if (!part["$ref"].is_string()) break;  // visit() reports it
                std::string name;
                const ojson* def = local_def(part["$ref"].get<std::string>(), &name);
                if (!def) break;  // visit() reports it
                ojson target = *def;
                if (target.is_object() && target.contains("$ref") && target["$ref"] == part["$ref"]) break;
                part = target;
            }
            if (part.is_boolean() && part.get<bool>()) continue;
            if (!annotation_only(part)) parts.push_back(part);
        }
        if (!annotation_only(own)) parts.push_back(own);
        if (parts.empty()) return ojson::object();
        if (parts.size() == 1) return parts[0];
        // the types every part allows; a kind keyword binds only its type, so one of no remaining type is dropped
        std::optional<std::set<std::string>> types;
        for (const ojson& p : parts)
            if (p.is_object() && p.contains("type")) {
                std::set<std::string> these;
                for (const auto& t : p["type"].is_array() ? p["type"] : ojson::array({p["type"]}))
                    if (t.is_string()) these.insert(t.get<std::string>());
                if (these.count("number")) these.insert("integer");
                if (types) {
                    std::set<std::string> both;
                    for (const auto& t : *types)
                        if (these.count(t)) both.insert(t);
                    if (types->count("number") && these.count("number")) both.insert("number");
                    these = both;
                }
                types = these;
            }
        if (types && types->empty()) fail(path, "'allOf': its parts allow no common type");
        if (types && types->size() == 2 && types->count("number") && types->count("integer")) types->erase("number");
        if (types)
            for (ojson& p : parts) {
                if (!p.is_object()) continue;
                for (const auto& k : kKinds) {
                    bool any = false;
                    for (const auto& t : *types) any = any || applies(k, t);
                    if (p.contains(k) && !any) p.erase(k);
                }
                if (types->size() == 1) p["type"] = *types->begin();
            }
        auto object_part = [](const ojson& p) {
            if (!p.is_object()) return false;
            if (p.contains("type")) return p["type"] == "object";
            return p.contains("properties") || p.contains("required") || p.contains("additionalProperties");
        };
        if (std::none_of(parts.begin(), parts.end(), object_part)) return merge_values(parts, path);
        auto is_object = [](const ojson& p) {
            if (!p.is_object()) return false;
            if (p.contains("type")) return p["type"] == "object";
            return p.contains("properties") || p.contains("required") || p.contains("additionalProperties");
        };
        for (const ojson& p : parts)
            if (!is_object(p) || p.contains("allOf") || p.contains("anyOf") || p.contains("oneOf") ||
                p.contains("$ref"))
                fail(path, "'allOf' is supported for objects (merged) or with one constraining schema");
        ojson merged = {{"type", "object"}, {"properties", ojson::object()}, {"required", ojson::array()}};
        bool closed = false;
        // a part with additionalProperties false allows only its own properties: the merged object has the
        // properties every such part declares (a property another part requires beyond them leaves nothing valid)
        std::optional<std::set<std::string>> allowed;
        for (const ojson& p : parts) {
            for (auto it = p.begin(); it != p.end(); ++it)
                if (it.key() != "type" && it.key() != "properties" && it.key() != "required" &&
                    it.key() != "additionalProperties" && !annotation_only(ojson{{it.key(), it.value()}}))
                    fail(path, "'allOf': '" + it.key() + "' cannot be merged");
            if (p.contains("properties")) {
                if (!p["properties"].is_object()) fail(path, "'properties' must be an object");
                for (auto it = p["properties"].begin(); it != p["properties"].end(); ++it) {
                    ojson& slot = merged["properties"][it.key()];
                    if (slot.is_null() || slot == ojson::object() || slot == it.value()) {
                        if (slot.is_null() || slot == ojson::object()) slot = it.value();
                    } else if (it.value() != ojson::object()) {
                        if (!is_object(slot) || !is_object(it.value()))
                            fail(path, "'allOf': property '" + it.key() + "' has different schemas in its parts");
                        slot = merge_all_of({{"allOf", {slot, it.value()}}}, path + "/" + it.key());
                    }
                }
            }
            if (p.contains("required")) {
                if (!p["required"].is_array()) fail(path, "'required' must be an array of property names");
                for (const ojson& k : p["required"])
                    if (std::find(merged["required"].begin(), merged["required"].end(), k) == merged["required"].end())
                        merged["required"].push_back(k);
            }
            if (p.contains("additionalProperties")) {
                const ojson& ap = p["additionalProperties"];
                if (ap.is_boolean() && !ap.get<bool>()) {
                    closed = true;
                    std::set<std::string> own;
                    if (p.contains("properties"))
                        for (auto it = p["properties"].begin(); it != p["properties"].end(); ++it) own.insert(it.key());
                    if (allowed) {
                        std::set<std::string> both;
                        for (const auto& k : *allowed)
                            if (own.count(k)) both.insert(k);
                        own = both;
                    }
                    allowed = own;
                } else if (!ap.is_boolean()) {
                    fail(path, "'allOf': additionalProperties with a schema cannot be merged");
                }
            }
        }
        if (closed) {
            merged["additionalProperties"] = false;
            ojson props = ojson::object();
            for (auto it = merged["properties"].begin(); it != merged["properties"].end(); ++it)
                if (allowed->count(it.key())) props[it.key()] = it.value();
            for (const auto& k : merged["required"])
                if (!allowed->count(k.get<std::string>()))
                    fail(path, "'allOf': property '" + k.get<std::string>() +
                                   "' is required, but a part with additionalProperties false does not allow it");
            merged["properties"] = props;
        }
        return merged;
    }

    // OpenAI's other string formats, as grammars of their common forms (within JSON strings, so no quotes or
    // backslashes): email is a dot-atom local part @ a domain of two or more labels (no quoted local parts, no IP literals); hostname is
    // RFC 1123 labels of 1-63 letters, digits and inner hyphens; ipv4 four decimal octets 0-255 without leading
    // zeros; ipv6 the eight-group form and every "::" compression (RFC 4291 section 2.2 forms 1 and 2; no
    // embedded IPv4); duration ISO 8601's PnYnMnWnDTnHnMnS with at least one part (seconds may have a fraction).
    static std::string string_format(const std::string& fmt) {
        const std::string label = "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?";
        const std::string host = label + " (\".\" " + label + ")*";
        if (fmt == "hostname") return host;
        if (fmt == "email") {
            const std::string atom = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+";
            return atom + " (\".\" " + atom + ")* \"@\" " + label + " (\".\" " + label + ")+";
        }
        if (fmt == "ipv4") {
            const std::string octet = "(" + integer_range_gbnf(0, 255) + ")";
            return octet + " \".\" " + octet + " \".\" " + octet + " \".\" " + octet;
        }
        if (fmt == "ipv6") {
            const std::string h = "[0-9a-fA-F]{1,4}";
            auto groups = [&](int n) {  // exactly n groups, colon-separated
                std::string g = h;
                if (n > 1) g += " (\":\" " + h + "){" + std::to_string(n - 1) + "}";
                return g;
            };
            std::string alts = groups(8);
            for (int before = 0; before <= 7; before++) {
                std::string alt = before ? groups(before) + " \"::\"" : "\"::\"";
                const int most_after = 7 - before;
                if (most_after > 0)
                    alt += " (" + h +
                           (most_after > 1 ? " (\":\" " + h + "){0," + std::to_string(most_after - 1) + "}" : "") +
                           ")?";
                alts += " | " + alt;
            }
            return "(" + alts + ")";
        }
        if (fmt == "duration") {
            const std::string n = "[0-9]+";
            // at least one of the ordered optional parts: the first present one, then the rest optional
            auto at_least_one = [](const std::vector<std::string>& parts) {
                std::string alts;
                for (size_t i = 0; i < parts.size(); i++) {
                    std::string alt = parts[i];
                    for (size_t j = i + 1; j < parts.size(); j++) alt += " (" + parts[j] + ")?";
                    alts += (i ? " | " : "") + ("(" + alt + ")");
                }
                return "(" + alts + ")";
            };
            const std::string date = at_least_one({n + " \"Y\"", n + " \"M\"", n + " \"W\"", n + " \"D\""});
            const std::string time =
                "\"T\" " + at_least_one({n + " \"H\"", n + " \"M\"", n + " (\".\" [0-9]+)? \"S\""});
            return "\"P\" (" + date + " (" + time + ")? | " + time + ")";
        }
        return "";
    }

    // integer / number with minimum, maximum, exclusiveMinimum, exclusiveMaximum (draft 6+: numbers; draft 4:
    // booleans beside minimum / maximum). Integers: the bounds round inward (minimum 1.5 is 2); numbers: bounds
    // must be integers (grammar/numeric_range.h says why), and a bounded number has no exponent.
    std::string numeric(const ojson& s, bool integer, const std::string& path) {
        std::optional<double> lo, hi;
        bool lo_ex = false, hi_ex = false;
        auto num = [&](const char* key) -> std::optional<double> {
            auto it = s.find(key);
            if (it == s.end() || it->is_boolean()) return std::nullopt;
            if (!it->is_number()) fail(path, std::string("'") + key + "' must be a number");
            const double v = it->get<double>();
            if (!std::isfinite(v)) fail(path, std::string("'") + key + "' must be finite");
            return v;
        };
        auto flag = [&](const char* key) { return s.contains(key) && s[key].is_boolean() && s[key].get<bool>(); };
        lo = num("minimum"), hi = num("maximum");
        lo_ex = flag("exclusiveMinimum"), hi_ex = flag("exclusiveMaximum");  // draft 4
        if (auto x = num("exclusiveMinimum"); x && (!lo || *x >= *lo)) lo = x, lo_ex = true;
        if (auto x = num("exclusiveMaximum"); x && (!hi || *x <= *hi)) hi = x, hi_ex = true;
        // multipleOf: an integer m (a number that is a multiple of it is an integer: written as one), or for
        // numbers 10^-k (at most k fraction digits); for integers 1/n constrains nothing. Others are refused.
        std::optional<double> mult = num("multipleOf");
        if (s.contains("multipleOf") && !mult) fail(path, "'multipleOf' must be a number");
        int max_fraction = -1;
        if (mult) {
            const double m = *mult;
            if (!(m > 0)) fail(path, "'multipleOf' must be greater than 0");
            const double inv = 1 / m, k = std::round(std::log10(inv));
            if (m == std::floor(m) && m <= 9.2e18) {
                integer = true;
                if (m == 1) mult.reset();
            } else if (integer && std::fabs(inv - std::round(inv)) < 1e-9 * inv) {
                mult.reset();
            } else if (!integer && k >= 1 && k <= 9 && std::fabs(m * std::pow(10.0, k) - 1) < 1e-9) {
                max_fraction = int(k);
                mult.reset();
            } else {
                fail(path, "multipleOf " + ojson(m).dump() +
                               " is not supported (integers are, and 0.1, 0.01, ... for numbers)");
            }
        }
        // OpenAPI's integer formats are ranges (uint64 is capped at the int64 range); float and double say nothing
        std::optional<std::pair<int64_t, int64_t>> range;
        if (auto f = s.find("format"); f != s.end()) {
            const std::string fmt = f->is_string() ? f->get<std::string>() : "";
            if (fmt == "int32") range = {{INT32_MIN, INT32_MAX}};
            else if (fmt == "uint32") range = {{0, int64_t(UINT32_MAX)}};
            else if (fmt == "int64") range = {{INT64_MIN, INT64_MAX}};
            else if (fmt == "uint64") range = {{0, INT64_MAX}};
            else if (!((fmt == "float" || fmt == "double") && !integer))
                fail(path, "'format' " + f->dump() + " is not supported for " + (integer ? "integers" : "numbers") +
                               " (int32, uint32, int64, uint64; float, double for numbers)");
            if (range && !integer) fail(path, "integer formats apply to type integer");
        }
        if (!lo && !hi && !mult && !range) {
            if (max_fraction >= 0)
                return add_rule(path, "integer (\".\" [0-9]{1," + std::to_string(max_fraction) + "})? ws");
            return integer ? "(integer ws)" : "number";
        }
        const double kLimit = 9.2e18;  // int64 texts; beyond it the side is open
        if ((lo && std::fabs(*lo) >= kLimit) || (hi && std::fabs(*hi) >= kLimit))
            fail(path, "a bound beyond +-9.2e18 is not supported");
        if (integer) {
            int64_t a = INT64_MIN, b = INT64_MAX;
            if (lo) a = int64_t(lo_ex ? std::floor(*lo) + 1 : std::ceil(*lo));
            if (hi) b = int64_t(hi_ex ? std::ceil(*hi) - 1 : std::floor(*hi));
            if (range) a = std::max(a, range->first), b = std::min(b, range->second);
            if (a > b) fail(path, "no integer lies within minimum/maximum");
            if (!mult) return add_rule(path, "(" + integer_range_gbnf(a, b) + ") ws");
            RuleSink sink{[&](const std::string& hint, const std::string& body) { return add_rule(hint, body); },
                          [&](const std::string& name, const std::string& body) { rules_[name] = body; }};
            std::string body;
            try {
                body = multiple_gbnf(uint64_t(*mult), a, b, sink);
            } catch (const Error& e) {
                fail(path, e.what());
            }
            if (body.empty()) fail(path, "no multiple of " + ojson(*mult).dump() + " lies within minimum/maximum");
            return add_rule(path, "(" + body + ") ws");
        }
        for (auto v : {lo, hi})
            if (v && *v != std::floor(*v))
                fail(path, "the bounds of a number must be integers here (" + ojson(*v).dump() +
                               " is not): use type integer, or integer bounds");
        std::optional<Bound> a, b;
        if (lo) a = Bound{int64_t(*lo), lo_ex};
        if (hi) b = Bound{int64_t(*hi), hi_ex};
        const std::string body = number_range_gbnf(a, b, max_fraction);
        if (body.empty()) fail(path, "no number lies within minimum/maximum");
        return add_rule(path, "(" + body + ") ws");
    }

    std::string typed(const ojson& s, const ojson& type, const std::string& path) {
        if (!type.is_string()) fail(path, "'type' must be a string or a list of strings");
        const std::string t = type;
        static const std::set<std::string> kTypes = {"string", "integer", "number", "boolean",
                                                     "null",   "array",   "object"};
        if (!kTypes.count(t)) fail(path, "unknown type '" + t + "'");
        // a kind keyword of another type is refused here (a type list drops them before: visit)
        for (auto it = s.begin(); it != s.end(); ++it)
            if (kKinds.count(it.key()) && !applies(it.key(), t))
                fail(path, "'" + it.key() + "' does not apply to type " + t);
        if (t == "string") {
            if (auto p = s.find("pattern"); p != s.end()) {  // grammar/regex_gbnf.h: what is supported
                if (!p->is_string()) fail(path, "'pattern' must be a string");
                if (s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
                    fail(path, "'pattern' together with format/minLength/maxLength is not supported");
                std::string body;
                try {
                    body = pattern_to_gbnf(p->get<std::string>(), [&](const std::string& hint, const std::string& b) {
                        return add_rule(path + "-" + hint, b);
                    });
                } catch (const Error& e) {
                    fail(path, e.what());
                }
                return add_rule(path, body + " ws");
            }
            if (auto f = s.find("format"); f != s.end()) {
                if (!f->is_string()) fail(path, "'format' must be a string");
                if (s.contains("minLength") || s.contains("maxLength"))
                    fail(path, "'format' together with minLength/maxLength is not supported");
                const std::string fmt = f->get<std::string>();
                // RFC 3339 full-date: the day exists in its month, 29 February only in leap years (divisible by 4,
                // centuries by 400)
                const char* date =
                    "([0-9]{4} \"-\" ((\"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\") \"-\" "
                    "([0][1-9] | [1-2][0-9] | [3][0-1]) | (\"04\" | \"06\" | \"09\" | \"11\") \"-\" ([0][1-9] | "
                    "[1-2][0-9] | \"30\") | \"02-\" ([0][1-9] | [1][0-9] | [2][0-8])) | ([0-9]{2} (\"0\" [48] | [2468] "
                    "[048] | [13579] [26]) | (\"0\" [048] | [2468] [048] | [13579] [26]) \"00\") \"-02-29\")";
                const char* time =
                    "([01][0-9] | [2][0-3]) \":\" [0-5][0-9] \":\" [0-5][0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] "
                    "([01][0-9] | [2][0-3]) \":\" [0-5][0-9])";
                std::string body;
                if (fmt == "date") body = date;
                else if (fmt == "time") body = time;
                else if (fmt == "date-time") body = std::string(date) + " \"T\" " + time;
                else if (fmt == "uuid")
                    body =
                        "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                        "[0-9a-fA-F]{12}";
                else if (const std::string more = string_format(fmt); !more.empty()) body = more;
                else
                    fail(path, "string format '" + fmt +
                                   "' is not supported (date, time, date-time, duration, email, hostname, ipv4, ipv6 "
                                   "and uuid are)");
                return add_rule(path, "\"\\\"\" " + body + " \"\\\"\" ws");
            }
            const int lo = int(count(s, "minLength", 0, 10000, path)), hi = int(count(s, "maxLength", -1, 10000, path));
            if (hi >= 0 && hi < lo) fail(path, "maxLength is less than minLength");
            if (lo == 0 && hi < 0) return "string";
            return add_rule(path, "\"\\\"\" char{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") +
                                      "} \"\\\"\" ws");
        }
        if (t == "integer" || t == "number") {
            return numeric(s, t == "integer", path);
        }
        if (t == "boolean") return "boolean";
        if (t == "null") return "null";
        if (t == "array") {
            const int lo = int(count(s, "minItems", 0, 1000, path)), hi = int(count(s, "maxItems", -1, 1000, path));
            if (hi >= 0 && hi < lo) fail(path, "maxItems is less than minItems");
            std::vector<std::string> prefix;
            if (auto p = s.find("prefixItems"); p != s.end()) {
                int i = 0;
                for (const auto& sub : *p) prefix.push_back(visit(sub, path + "/prefixItems/" + std::to_string(i++)));
            }
            std::string item = "value";  // empty: no items beyond prefixItems
            if (auto it = s.find("items"); it != s.end() && it->is_array()) {
                // draft 4's tuple form: these items (optional unless minItems, as prefixItems), nothing after them
                if (s.contains("prefixItems")) fail(path, "'items' as an array and 'prefixItems' together");
                int i = 0;
                for (const auto& sub : *it) prefix.push_back(visit(sub, path + "/items/" + std::to_string(i++)));
                item = "";
            } else if (it != s.end()) {
                item = it->is_boolean() && !it->get<bool>() ? "" : visit(*it, path + "/items");
            }
            const int n_prefix = int(prefix.size());
            const int most = hi >= 0 ? (item.empty() ? std::min(hi, n_prefix) : hi)
                                     : (item.empty() ? n_prefix : -1);  // -1: no bound
            if (most >= 0 && lo > most) fail(path, "minItems is more than the items allowed");
            auto elem = [&](int i) { return i < n_prefix ? prefix[size_t(i)] : item; };
            // elements from index i on, given i before them: required up to minItems, then optional, nested
            std::function<std::string(int)> tail = [&](int i) -> std::string {
                const std::string sep = i > 0 ? "\",\" ws " : "";
                if (most >= 0 && i >= most) return "";
                if (most < 0 && i >= n_prefix && i >= lo)  // unbounded repetition of `item`
                    return i == 0 ? "(" + item + " (\",\" ws " + item + ")*)?" : "(\",\" ws " + item + ")*";
                const std::string rest = tail(i + 1);
                const std::string one = sep + elem(i) + (rest.empty() ? "" : " " + rest);
                return i < lo ? one : "(" + one + ")?";
            };
            return add_rule(path, "\"[\" ws " + tail(0) + " \"]\" ws");
        }
        if (t == "object") {
            std::vector<std::pair<std::string, std::string>> props;  // key literal, value rule
            std::set<std::string> required;
            if (auto r = s.find("required"); r != s.end()) {
                if (!r->is_array()) fail(path, "'required' must be an array of property names");
                for (const auto& k : *r) {
                    if (!k.is_string()) fail(path, "'required' must be an array of property names");
                    required.insert(k.get<std::string>());
                }
            }
            std::vector<std::pair<std::string, std::string>> req, opt;
            if (auto p = s.find("properties"); p != s.end()) {
                if (!p->is_object()) fail(path, "'properties' must be an object");
                for (auto it = p->begin(); it != p->end(); ++it) {
                    const std::string kv =
                        literal(ojson(it.key()).dump()) + " ws \":\" ws " + visit(it.value(), path + "/" + it.key());
                    (required.count(it.key()) ? req : opt).push_back({it.key(), kv});
                }
            }
            // a required name beyond 'properties' is a pair the additional properties allow (zod's record of an
            // enum): declared here with their schema, in name order
            for (const auto& k : required) {
                bool found = false;
                for (const auto& [name, kv] : req) found = found || name == k;
                const auto ap = s.find("additionalProperties");
                const bool extra_ok = ap != s.end() && !(ap->is_boolean() && !ap->get<bool>());
                if (!found && extra_ok) {
                    const std::string v = ap->is_boolean() ? "value" : visit(*ap, path + "/additionalProperties");
                    req.push_back({k, literal(ojson(k).dump()) + " ws \":\" ws " + v});
                    continue;
                }
                if (!found) fail(path, "required property '" + k + "' is not in 'properties'");
            }
            // propertyNames: the keys of the properties beyond the declared ones (a map such as zod's record),
            // a string schema; beside declared properties it is refused (their names are not checked against it).
            // With propertyNames, an absent additionalProperties allows more pairs of any value.
            std::string key = "string";
            auto a = s.find("additionalProperties");
            if (auto n = s.find("propertyNames"); n != s.end()) {
                if (s.contains("properties") && !s["properties"].empty())
                    fail(path, "'propertyNames' beside declared 'properties' is not supported (only for maps)");
                if (n->is_boolean() && !n->get<bool>()) a = s.end(), key.clear();  // no key is allowed: {}
                else if (!n->is_boolean()) {
                    ojson names = *n;
                    if (!names.contains("type")) names["type"] = "string";
                    if (names["type"] != "string") fail(path, "'propertyNames' must be a schema of strings");
                    key = visit(names, path + "/propertyNames");
                }
            }
            std::string extra;
            const bool more =
                a != s.end() ? !(a->is_boolean() && !a->get<bool>()) : s.contains("propertyNames") && !key.empty();
            if (more) {
                const std::string v =
                    a == s.end() || a->is_boolean() ? "value" : visit(*a, path + "/additionalProperties");
                extra = add_rule(path + "-extra", key + " \":\" ws " + v);
            }
            std::string body = "\"{\" ws ";
            if (!req.empty()) {
                for (size_t i = 0; i < req.size(); i++) body += (i ? " \",\" ws " : "") + req[i].second;
                for (const auto& [name, kv] : opt) body += " (\",\" ws " + kv + ")?";
                if (!extra.empty()) body += " (\",\" ws " + extra + ")*";
            } else {
                // any subset of the optional properties, in order, commas between
                std::vector<std::string> items;
                for (const auto& [name, kv] : opt) items.push_back(kv);
                if (!extra.empty()) items.push_back(extra + " (\",\" ws " + extra + ")*");
                // from-i: item i then any of the later ones, each after a comma (rest-(i+1)), or from-(i+1);
                // rest-j: ("," item j)? rest-(j+1). One rule of constant size per property: the grammar grows
                // linearly with their number (it was quadratic: 3,000 optional properties took 647 MB).
                std::string chain, rest;
                for (int i = int(items.size()) - 1; i >= 0; i--) {
                    const std::string here = items[size_t(i)] + (rest.empty() ? "" : " " + rest);
                    chain = add_rule(path + "-from-" + std::to_string(i), here + (chain.empty() ? "" : " | " + chain));
                    rest = add_rule(path + "-rest-" + std::to_string(i),
                                    "(\",\" ws " + items[size_t(i)] + ")?" + (rest.empty() ? "" : " " + rest));
                }
                if (!chain.empty()) body += chain + "?";
            }
            body += " \"}\" ws";
            return add_rule(path, body);
        }
        fail(path, "unknown type '" + t + "'");
    }

    const ojson* root_ = nullptr;
    std::set<std::string> reserved_;  // the caller's rule names
    int depth_ = 0;
    std::map<std::string, std::string> rules_;
    std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(const ojson& schema) { return Converter().run(schema); }

std::string gbnf_literal(const std::string& text) { return literal(text); }

// A matcher for "not containing stop": state k = the longest prefix of stop that the text ends with (k < |stop|);
// each byte moves it as in Knuth-Morris-Pratt, and the byte that would complete stop has no transition.
std::string gbnf_text_without(const std::string& name, const std::string& stop) {
    const size_t m = stop.size();
    if (m == 0) throw Error("gbnf_text_without: empty stop text");
    for (unsigned char c : stop)
        if (c >= 0x80) throw Error("gbnf_text_without: the stop text must be ASCII");
    std::vector<size_t> fail(m, 0);
    for (size_t i = 1, k = 0; i < m; i++) {
        while (k > 0 && stop[i] != stop[k]) k = fail[k - 1];
        if (stop[i] == stop[k]) k++;
        fail[i] = k;
    }
    auto next = [&](size_t k, char c) {
        while (k > 0 && stop[k] != c) k = fail[k - 1];
        return stop[k] == c ? k + 1 : 0;
    };
    const std::set<char> alphabet(stop.begin(), stop.end());
    std::string others = "[^";
    for (char c : alphabet) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", (unsigned char)c);
        others += buf;
    }
    others += "]";
    auto state = [&](size_t k) { return k == 0 ? name : name + "-" + std::to_string(k); };
    std::string out;
    for (size_t k = 0; k < m; k++) {
        std::string alts = others + " " + name;
        for (char c : alphabet)
            if (const size_t d = next(k, c); d < m) alts += " | " + literal(std::string(1, c)) + " " + state(d);
        out += state(k) + " ::= (" + alts + ")?\n";
    }
    return out;
}

std::string json_schemas_to_gbnf(const std::vector<std::pair<std::string, ojson>>& named,
                                 const std::string& root_body) {
    return Converter().run(named, root_body);
}

std::string json_object_gbnf() { return std::string("root ::= object\n") + kBase; }

}  // namespace tandem::grammar
