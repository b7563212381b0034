// Filters, tests and the members of values for the chat-template interpreter (see jinja_filters.h), with
// @huggingface/jinja's semantics, and the string helpers they share.
#include "chat/jinja_filters.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <string_view>
#include <unordered_map>

#include "tandem/error.h"

namespace tandem::jinja {

namespace {

using K = Value::Kind;

std::string ascii_case(std::string s, bool upper) {
    for (auto& c : s) c = char(upper ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
    return s;
}

std::string title_case(const std::string& s) {  // JavaScript's replace(/\b\w/g, upper)
    std::string out = s;
    auto word = [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; };
    for (size_t i = 0; i < out.size(); i++)
        if (word(out[i]) && (i == 0 || !word(out[i - 1]))) out[i] = char(std::toupper(uint8_t(out[i])));
    return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    if (count == 0) return s;
    int64_t left = count < 0 ? INT64_MAX : count;
    std::string out;
    if (from.empty()) {  // between every code point, as JavaScript's /(?=)/gu
        auto cps = code_points(s);
        for (size_t i = 0; i <= cps.size(); i++) {
            if (left > 0) {
                check_text(out.size() + to.size(), "replace");
                out += to;
                left--;
            }
            if (i < cps.size()) out += cps[i];
        }
        return out;
    }
    size_t at = 0;
    while (left > 0) {
        size_t k = s.find(from, at);
        if (k == std::string::npos) break;
        check_text(out.size() + (k - at) + to.size(), "replace");
        out += s.substr(at, k - at) + to;
        at = k + from.size();
        left--;
    }
    return out + s.substr(at);
}

// Python's str.split(sep=None, maxsplit=-1), as the reference implements it.
Value split(const std::string& s, const Value& sep, int64_t maxsplit) {
    std::vector<Value> parts;
    if (sep.kind == K::NONE || sep.undefined()) {
        const std::string t = js_trim(s, true, false);
        size_t i = 0;
        while (i < t.size()) {
            size_t j = i;
            while (j < t.size() && !std::isspace(uint8_t(t[j]))) j++;
            if (maxsplit != -1 && int64_t(parts.size()) >= maxsplit) {
                parts.push_back(Value::string(t.substr(i)));
                break;
            }
            parts.push_back(Value::string(t.substr(i, j - i)));
            while (j < t.size() && std::isspace(uint8_t(t[j]))) j++;
            i = j;
        }
        return Value::array(std::move(parts));
    }
    if (sep.kind != K::STRING) throw Error("split: the separator must be a string or none");
    if (sep.s.empty()) throw Error("split: empty separator");
    std::vector<std::string> pieces;
    size_t at = 0;
    for (;;) {
        size_t k = s.find(sep.s, at);
        if (k == std::string::npos) break;
        pieces.push_back(s.substr(at, k - at));
        at = k + sep.s.size();
    }
    pieces.push_back(s.substr(at));
    if (maxsplit != -1 && int64_t(pieces.size()) > maxsplit) {
        std::string rest;
        for (size_t k = size_t(maxsplit); k < pieces.size(); k++)
            rest += (k > size_t(maxsplit) ? sep.s : "") + pieces[k];
        pieces.resize(size_t(maxsplit));
        pieces.push_back(rest);
    }
    for (auto& p : pieces) parts.push_back(Value::string(p));
    return Value::array(std::move(parts));
}

// Attribute path "a.b.0" on objects and arrays (map, sort), undefined when missing.
Value attribute(const Value& item, const std::string& path) {
    Value v = item;
    size_t at = 0;
    while (at <= path.size()) {
        size_t k = path.find('.', at);
        if (k == std::string::npos) k = path.size();
        const std::string part = path.substr(at, k - at);
        if (v.is_attr_container()) {
            const Value* f = v.obj->find(part);
            v = f ? *f : Value();
        } else if (v.kind == K::ARRAY) {
            char* end = nullptr;
            const long idx = std::strtol(part.c_str(), &end, 10);
            if (end == part.c_str() || idx < 0 || size_t(idx) >= v.arr->size()) return Value();
            v = (*v.arr)[size_t(idx)];
        } else {
            return Value();
        }
        at = k + 1;
    }
    return v;
}

const std::map<std::string, TestFn>& tests() {
    static const std::map<std::string, TestFn> t = {
        {"boolean", [](const Value& v) { return v.kind == K::BOOL; }},
        {"callable", [](const Value& v) { return v.kind == K::FUNCTION; }},
        {"odd",
         [](const Value& v) {
             if (v.kind != K::INT) throw Error(std::string("cannot test 'odd' on ") + v.type_name());
             return v.i % 2 != 0;
         }},
        {"even",
         [](const Value& v) {
             if (v.kind != K::INT) throw Error(std::string("cannot test 'even' on ") + v.type_name());
             return v.i % 2 == 0;
         }},
        {"false", [](const Value& v) { return v.kind == K::BOOL && !v.b; }},
        {"true", [](const Value& v) { return v.kind == K::BOOL && v.b; }},
        {"none", [](const Value& v) { return v.kind == K::NONE; }},
        {"string", [](const Value& v) { return v.kind == K::STRING; }},
        {"number", [](const Value& v) { return v.is_number(); }},
        {"integer", [](const Value& v) { return v.kind == K::INT; }},
        {"float", [](const Value& v) { return v.kind == K::FLOAT; }},
        {"iterable", [](const Value& v) { return v.kind == K::ARRAY || v.kind == K::STRING; }},
        {"mapping", [](const Value& v) { return v.kind == K::OBJECT || v.kind == K::KWARGS; }},
        {"sequence",
         [](const Value& v) {
             return v.kind == K::ARRAY || v.kind == K::OBJECT || v.kind == K::KWARGS || v.kind == K::STRING;
         }},
        {"lower", [](const Value& v) { return v.kind == K::STRING && v.s == ascii_case(v.s, false); }},
        {"upper", [](const Value& v) { return v.kind == K::STRING && v.s == ascii_case(v.s, true); }},
        {"defined", [](const Value& v) { return !v.undefined(); }},
        {"undefined", [](const Value& v) { return v.undefined(); }},
    };
    return t;
}

// --- filters: each takes the value and the call; one that does not take the value's kind answers unsupported()

// The answer for a name no filter has, or a value a filter does not take (see call_filter in jinja_filters.h).
Value unsupported(const Value& v, const FilterCall& c) {
    const std::string& name = c.name;
    if (v.kind == K::ARRAY) throw Error("unknown filter '" + name + "' on a list");
    if (v.kind == K::STRING) throw Error("unknown filter '" + name + "' on a string");
    if (v.is_number()) throw Error("unknown filter '" + name + "' on a number");
    if (v.kind == K::OBJECT || v.kind == K::KWARGS) throw Error("unknown filter '" + name + "' on an object");
    if (v.kind == K::BOOL) throw Error("unknown filter '" + name + "' on a boolean");
    // llama.cpp's leniency: filtering none gives an empty list (functionary's `tools | selectattr(...)` with
    // tools = none)
    if ((v.kind == K::NONE || v.undefined()) &&
        (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject" || name == "map" ||
         name == "unique" || name == "items"))
        return Value::array({});
    throw Error("cannot apply filter '" + name + "' to a " + v.type_name());
}

namespace filter {

Value safe(const Value& v, FilterCall&) { return v; }

Value tojson(const Value& v, FilterCall& c) {
    const ObjectData& kw = *c.kw;
    JsonOptions o;
    Value ind = arg({}, 0, kw, "indent", Value::none());
    if (ind.kind != K::INT && ind.kind != K::NONE) throw Error("tojson: indent must be an integer");
    if (ind.kind == K::INT && ind.i > 1000) throw Error("tojson: indent must be at most 1000");
    o.indent = ind.kind == K::INT ? int(std::max<int64_t>(ind.i, -1)) : -1;
    o.ensure_ascii = arg({}, 0, kw, "ensure_ascii", Value::boolean(false)).truthy();
    o.sort_keys = arg({}, 0, kw, "sort_keys", Value::boolean(false)).truthy();
    Value sep = arg({}, 0, kw, "separators", Value::none());
    if (sep.kind == K::ARRAY) {
        if (sep.arr->size() != 2 || (*sep.arr)[0].kind != K::STRING || (*sep.arr)[1].kind != K::STRING)
            throw Error("tojson: separators must be two strings");
        o.item_sep = (*sep.arr)[0].s;
        o.key_sep = (*sep.arr)[1].s;
    }
    return Value::string(to_json(v, o));
}

Value default_(const Value& v, FilterCall& c) {
    Value dflt = c.args.size() > 0 ? c.args[0] : Value::string("");
    const bool boolean = arg(c.args, 1, *c.kw, "boolean", Value::boolean(false)).truthy();
    return v.undefined() || (boolean && !v.truthy()) ? dflt : v;
}

Value join(const Value& v, FilterCall& c) {
    if (c.called) {
        std::vector<std::string> parts;
        if (v.kind == K::STRING) parts = code_points(v.s);
        else if (v.kind == K::ARRAY)
            for (const auto& e : *v.arr) parts.push_back(e.raw_str());
        else throw Error(std::string("join on a ") + v.type_name());
        Value sep = arg(c.args, 0, *c.kw, "separator", Value::string(""));
        if (sep.kind != K::STRING) throw Error("join: the separator must be a string");
        size_t total = 0;
        for (const auto& p : parts) total += p.size() + sep.s.size();
        check_text(total, "join");
        std::string out;
        for (size_t i = 0; i < parts.size(); i++) out += (i ? sep.s : "") + parts[i];
        return Value::string(out);
    }
    if (v.kind == K::ARRAY) {
        std::string out;
        for (const auto& e : *v.arr) {
            const std::string s = e.raw_str();
            check_text(out.size() + s.size(), "join");
            out += s;
        }
        return Value::string(out);
    }
    if (v.kind == K::STRING) return v;
    return unsupported(v, c);
}

Value int_or_float(const Value& v, FilterCall& c) {
    const bool to_int = c.name == "int";
    Value dflt = arg(c.args, 0, *c.kw, "default", to_int ? Value::integer(0) : Value::number(0));
    if (v.kind == K::STRING) {
        const std::string t = js_trim(v.s, true, false);
        char* end = nullptr;
        if (to_int) {
            const long long x = std::strtoll(t.c_str(), &end, 10);
            return end == t.c_str() ? dflt : Value::integer(x);
        }
        const double x = std::strtod(t.c_str(), &end);
        return end == t.c_str() ? dflt : Value::number(x);
    }
    if (v.kind == K::BOOL) return to_int ? Value::integer(v.b) : Value::number(v.b);
    if (v.is_number()) {
        if (c.called || !to_int) return c.called ? v : Value::number(v.num());
        // Python's int() of nan/inf is an error; Jinja's int filter gives its default (0) for what it cannot
        // convert. Past int64 the value stays a float, as integer arithmetic does (never an undefined cast).
        const double x = std::floor(v.num());
        if (!std::isfinite(x)) return dflt;
        if (x < -9.2233720368547758e18 || x >= 9.2233720368547758e18) return Value::number(x);
        return Value::integer(int64_t(x));
    }
    throw Error(c.name + " on a " + v.type_name());
}

Value round(const Value& v, FilterCall& c) {  // Python's round(value, precision=0, method='common')
    if (!v.is_number()) throw Error(std::string("round on a ") + v.type_name());
    const Value prec = arg(c.args, 0, *c.kw, "precision", Value::integer(0));
    const double m = std::pow(10.0, double(prec.kind == K::INT ? prec.i : 0));
    return Value::number(std::round(v.num() * m) / m);
}

Value length(const Value& v, FilterCall& c) {
    if (v.undefined()) return Value::integer(0);  // as Python's Jinja
    if (v.kind == K::ARRAY) return Value::integer(int64_t(v.arr->size()));
    if (v.kind == K::STRING) return Value::integer(int64_t(code_points(v.s).size()));
    if (v.kind == K::OBJECT || v.kind == K::KWARGS) return Value::integer(int64_t(v.obj->items.size()));
    return unsupported(v, c);
}

Value string(const Value& v, FilterCall& c) {
    if (v.kind == K::ARRAY) {
        JsonOptions o;
        o.undefined_as_null = false;
        return Value::string(to_json(v, o));
    }
    if (v.kind == K::STRING) return v;
    if (v.is_number()) return Value::string(v.str());
    if (v.kind == K::BOOL) return Value::string(v.b ? "true" : "false");
    return unsupported(v, c);
}

// --- filters of lists

Value list(const Value& v, FilterCall& c) { return v.kind == K::ARRAY ? v : unsupported(v, c); }

Value first(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    return v.arr->empty() ? Value() : v.arr->front();
}

Value last(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    return v.arr->empty() ? Value() : v.arr->back();
}

Value reverse(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    return Value::array(std::vector<Value>(v.arr->rbegin(), v.arr->rend()));
}

Value unique(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    std::vector<Value> out;
    for (const auto& e : *v.arr) {
        bool seen = false;
        for (const auto& o : out) seen = seen || strict_equal(o, e);
        if (!seen) out.push_back(e);
    }
    return Value::array(std::move(out));
}

Value sort(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    const bool rev = arg(c.args, 0, *c.kw, "reverse", Value::boolean(false)).truthy();
    const bool cs = arg(c.args, 1, *c.kw, "case_sensitive", Value::boolean(false)).truthy();
    const Value attr = arg(c.args, 2, *c.kw, "attribute", Value::none());
    std::vector<Value> out = *v.arr;
    auto key = [&](const Value& e) {
        if (attr.kind == K::NONE) return e;
        return attribute(e, attr.kind == K::INT ? std::to_string(attr.i) : attr.s);
    };
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        const int r = compare(key(x), key(y), cs);
        return rev ? r > 0 : r < 0;
    });
    return Value::array(std::move(out));
}

Value selectattr_or_rejectattr(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    const std::string& name = c.name;
    const Args& args = c.args;
    const bool select = name == "selectattr";
    for (const auto& e : *v.arr)
        if (!e.is_attr_container()) throw Error(name + " works on a list of objects only");
    if (args.empty() || args[0].kind != K::STRING) throw Error(name + " needs an attribute name");
    TestFn test = nullptr;
    Value operand = args.size() > 2 ? args[2] : Value();
    std::string tname = args.size() > 1 && args[1].kind == K::STRING ? args[1].s : "";
    if (!tname.empty() && tname != "equalto" && tname != "eq") {
        test = find_test(tname);
        if (!test) throw Error("unknown test '" + tname + "'");
    }
    std::vector<Value> out;
    for (const auto& e : *v.arr) {
        const Value* f = e.obj->find(args[0].s);  // a missing attribute never passes
        bool r = false;
        if (f) {
            if (tname.empty()) r = f->truthy();
            else if (test) r = test(*f);
            else r = strict_equal(*f, operand);  // equalto / eq
        }
        if (r == select) out.push_back(e);
    }
    return Value::array(std::move(out));
}

Value map(const Value& v, FilterCall& c) {
    if (v.kind != K::ARRAY) return unsupported(v, c);
    const Value* attr = c.kw->find("attribute");
    if (!attr) throw Error("map without attribute= is not supported");
    if (attr->kind != K::STRING) throw Error("map: attribute must be a string");
    const Value* dflt = c.kw->find("default");
    std::vector<Value> out;
    for (const auto& e : *v.arr) {
        if (!e.is_attr_container()) throw Error("map: the items must be objects");
        Value x = attribute(e, attr->s);
        out.push_back(x.undefined() && dflt ? *dflt : x);
    }
    return Value::array(std::move(out));
}

// --- filters of strings

Value upper(const Value& v, FilterCall& c) {
    return v.kind == K::STRING ? Value::string(ascii_case(v.s, true)) : unsupported(v, c);
}

Value lower(const Value& v, FilterCall& c) {
    return v.kind == K::STRING ? Value::string(ascii_case(v.s, false)) : unsupported(v, c);
}

Value title(const Value& v, FilterCall& c) {
    return v.kind == K::STRING ? Value::string(title_case(v.s)) : unsupported(v, c);
}

Value capitalize(const Value& v, FilterCall& c) {
    if (v.kind != K::STRING) return unsupported(v, c);
    return Value::string(v.s.empty() ? v.s : ascii_case(v.s.substr(0, 1), true) + v.s.substr(1));
}

Value trim(const Value& v, FilterCall& c) {
    return v.kind == K::STRING ? Value::string(js_trim(v.s, true, true)) : unsupported(v, c);
}

Value indent(const Value& v, FilterCall& c) {
    if (v.kind != K::STRING) return unsupported(v, c);
    Value width = arg(c.args, 0, *c.kw, "width", Value::integer(4));
    if (width.kind != K::INT) throw Error("indent: width must be an integer");
    const bool first = arg(c.args, 1, *c.kw, "first", Value::boolean(false)).truthy();
    const bool blank = arg(c.args, 2, *c.kw, "blank", Value::boolean(false)).truthy();
    const int64_t lines = int64_t(std::count(v.s.begin(), v.s.end(), '\n')) + 1;
    const int64_t w = std::max<int64_t>(0, width.i);
    check_text(w > int64_t(Limits::kTextBytes) ? SIZE_MAX : v.s.size() + size_t(w) * size_t(lines), "indent");
    const std::string pad(size_t(w), ' ');
    std::string out;
    size_t at = 0, line = 0;
    for (;;) {
        size_t k = v.s.find('\n', at);
        const std::string l = v.s.substr(at, k == std::string::npos ? std::string::npos : k - at);
        out += ((!first && line == 0) || (!blank && l.empty()) ? l : pad + l);
        if (k == std::string::npos) break;
        out += '\n';
        at = k + 1;
        line++;
    }
    return Value::string(out);
}

Value replace(const Value& v, FilterCall& c) {  // str.replace
    if (v.kind != K::STRING) return unsupported(v, c);
    Value fn = method(v, "replace");
    put_kwargs(c.args, c.kw);
    return (*fn.fn)(c.args, c.env);
}

// --- filters of numbers, booleans and objects

Value abs(const Value& v, FilterCall& c) {
    if (!v.is_number()) return unsupported(v, c);
    if (v.kind == K::INT && v.i == INT64_MIN) return Value::number(-double(v.i));  // past int64: a float, as JS
    return v.kind == K::INT ? Value::integer(std::llabs(v.i)) : Value::number(std::fabs(v.f));
}

Value boolean(const Value& v, FilterCall& c) { return v.kind == K::BOOL ? v : unsupported(v, c); }

Value items(const Value& v, FilterCall& c) {  // dict.items(), keyword arguments dropped
    if (v.kind != K::OBJECT && v.kind != K::KWARGS) return unsupported(v, c);
    return (*method(v, "items").fn)(c.args, c.env);
}

Value object_method(const Value& v, FilterCall& c) {  // `d | dictsort(...)` is d.dictsort(...)
    if (v.kind != K::OBJECT && v.kind != K::KWARGS) return unsupported(v, c);
    Value fn = method(v, c.name);
    put_kwargs(c.args, c.kw);
    return (*fn.fn)(c.args, c.env);
}

}  // namespace filter

using FilterFn = Value (*)(const Value& v, FilterCall& c);

const std::unordered_map<std::string_view, FilterFn>& filters() {
    static const std::unordered_map<std::string_view, FilterFn> t = {
        {"safe", filter::safe},
        {"tojson", filter::tojson},
        {"default", filter::default_},
        {"d", filter::default_},
        {"join", filter::join},
        {"int", filter::int_or_float},
        {"float", filter::int_or_float},
        {"round", filter::round},
        {"length", filter::length},
        {"count", filter::length},
        {"string", filter::string},
        {"list", filter::list},
        {"first", filter::first},
        {"last", filter::last},
        {"reverse", filter::reverse},
        {"unique", filter::unique},
        {"sort", filter::sort},
        {"selectattr", filter::selectattr_or_rejectattr},
        {"rejectattr", filter::selectattr_or_rejectattr},
        {"map", filter::map},
        {"upper", filter::upper},
        {"lower", filter::lower},
        {"title", filter::title},
        {"capitalize", filter::capitalize},
        {"trim", filter::trim},
        {"indent", filter::indent},
        {"replace", filter::replace},
        {"abs", filter::abs},
        {"bool", filter::boolean},
        {"items", filter::items},
        {"dictsort", filter::object_method},
        {"get", filter::object_method},
        {"keys", filter::object_method},
        {"values", filter::object_method},
    };
    return t;
}

}  // namespace

Value call_filter(const Value& v, FilterCall& c) {
    const auto& table = filters();
    const auto it = table.find(c.name);
    return it == table.end() ? unsupported(v, c) : it->second(v, c);
}

TestFn find_test(const std::string& name) {
    const auto it = tests().find(name);
    return it == tests().end() ? nullptr : it->second;
}

Value method(const Value& obj, const std::string& name) {
    if (obj.kind == K::ARRAY) return name == "length" ? Value::integer(int64_t(obj.arr->size())) : Value();
    if (obj.kind == K::STRING) {
        const std::string s = obj.s;
        auto fn = [](auto f) { return Value::function(f); };
        if (name == "length") return Value::integer(int64_t(code_points(s).size()));
        if (name == "upper") return fn([s](Args&, Env&) { return Value::string(ascii_case(s, true)); });
        if (name == "lower") return fn([s](Args&, Env&) { return Value::string(ascii_case(s, false)); });
        if (name == "strip") return fn([s](Args&, Env&) { return Value::string(js_trim(s, true, true)); });
        if (name == "lstrip") return fn([s](Args&, Env&) { return Value::string(js_trim(s, true, false)); });
        if (name == "rstrip") return fn([s](Args&, Env&) { return Value::string(js_trim(s, false, true)); });
        if (name == "title") return fn([s](Args&, Env&) { return Value::string(title_case(s)); });
        if (name == "capitalize")
            return fn([s](Args&, Env&) {
                return Value::string(s.empty() ? s : ascii_case(s.substr(0, 1), true) + s.substr(1));
            });
        if (name == "startswith" || name == "endswith") {
            const bool starts = name == "startswith";
            return fn([s, starts](Args& a, Env&) {
                if (a.empty()) throw Error(std::string(starts ? "startswith" : "endswith") + "() needs an argument");
                auto test = [&](const std::string& p) {
                    return p.size() <= s.size() &&
                           (starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
                };
                if (a[0].kind == K::STRING) return Value::boolean(test(a[0].s));
                if (a[0].kind == K::ARRAY) {
                    for (const auto& p : *a[0].arr) {
                        if (p.kind != K::STRING) throw Error("startswith/endswith: tuple items must be strings");
                        if (test(p.s)) return Value::boolean(true);
                    }
                    return Value::boolean(false);
                }
                throw Error("startswith/endswith: the argument must be a string or a tuple of strings");
            });
        }
        if (name == "split")
            return fn([s](Args& a, Env&) {
                auto kw = take_kwargs(a);
                Value sep = arg(a, 0, *kw, "sep", Value::none());
                Value max = arg(a, 1, *kw, "maxsplit", Value::integer(-1));
                if (max.kind != K::INT) throw Error("split: maxsplit must be an integer");
                return split(s, sep, max.i);
            });
        if (name == "replace")
            return fn([s](Args& a, Env&) {
                auto kw = take_kwargs(a);
                if (a.size() < 2 || a[0].kind != K::STRING || a[1].kind != K::STRING)
                    throw Error("replace() needs two strings");
                Value count = arg(a, 2, *kw, "count", Value::none());
                if (count.kind != K::INT && count.kind != K::NONE) throw Error("replace: count must be an integer");
                return Value::string(replace_all(s, a[0].s, a[1].s, count.kind == K::INT ? count.i : -1));
            });
        return Value();
    }
    if (obj.kind == K::OBJECT || obj.kind == K::KWARGS) {
        auto data = obj.obj;
        if (name == "get")
            return Value::function([data](Args& a, Env&) {
                if (a.empty() || a[0].kind != K::STRING) throw Error("get() needs a string key");
                if (const Value* v = data->find(a[0].s)) return *v;
                return a.size() > 1 ? a[1] : Value::none();
            });
        if (name == "items")
            return Value::function([data](Args&, Env&) {
                std::vector<Value> out;
                for (const auto& [k, v] : data->items) out.push_back(Value::array({Value::string(k), v}));
                return Value::array(std::move(out));
            });
        if (name == "keys")
            return Value::function([data](Args&, Env&) {
                std::vector<Value> out;
                for (const auto& [k, v] : data->items) out.push_back(Value::string(k));
                return Value::array(std::move(out));
            });
        if (name == "values")
            return Value::function([data](Args&, Env&) {
                std::vector<Value> out;
                for (const auto& [k, v] : data->items) out.push_back(v);
                return Value::array(std::move(out));
            });
        if (name == "dictsort")
            return Value::function([data](Args& a, Env&) {
                auto kw = take_kwargs(a);
                const bool cs = arg(a, 0, *kw, "case_sensitive", Value::boolean(false)).truthy();
                const Value by = arg(a, 1, *kw, "by", Value::string("key"));
                const bool rev = arg(a, 2, *kw, "reverse", Value::boolean(false)).truthy();
                if (by.kind != K::STRING || (by.s != "key" && by.s != "value"))
                    throw Error("dictsort: by must be 'key' or 'value'");
                std::vector<Value> out;
                for (const auto& [k, v] : data->items) out.push_back(Value::array({Value::string(k), v}));
                const size_t idx = by.s == "key" ? 0 : 1;
                std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
                    const int c = compare((*x.arr)[idx], (*y.arr)[idx], cs);
                    return rev ? c > 0 : c < 0;
                });
                return Value::array(std::move(out));
            });
    }
    return Value();
}

}  // namespace tandem::jinja
