#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tandem/error.h"

namespace tandem::jinja {

const Value* ObjectData::find(const std::string& k) const {
    for (const auto& [key, v] : items)
        if (key == k) return &v;
    return nullptr;
}

void check_text(size_t bytes, const char* what) {
    if (bytes > Limits::kTextBytes)
        throw Error(strprintf("%s would make a string of %zu bytes (a template's strings are limited to %zu)", what,
                              bytes, Limits::kTextBytes));
}

static int nested_depth(int inner) {
    if (inner + 1 > Limits::kNesting)
        throw Error(strprintf("lists and objects nested more than %d levels deep", Limits::kNesting));
    return inner + 1;
}

void ObjectData::set(const std::string& k, Value v) {
    depth = std::max(depth, nested_depth(v.nesting()));
    for (auto& [key, old] : items)
        if (key == k) {
            old = std::move(v);
            return;
        }
    append_unique(k, std::move(v));
}

void ObjectData::append_unique(const std::string& k, Value v) {
    depth = std::max(depth, nested_depth(v.nesting()));
    if (items.size() >= Limits::kItems) throw Error(strprintf("an object of more than %zu items", Limits::kItems));
    items.emplace_back(k, std::move(v));
}

Value Value::array(std::vector<Value> v) {
    if (v.size() > Limits::kItems) throw Error(strprintf("a list of more than %zu items", Limits::kItems));
    Value x = with(Kind::ARRAY);
    int inner = 0;
    for (const Value& e : v) inner = std::max(inner, e.nesting());
    x.depth = nested_depth(inner);
    x.arr = std::make_shared<std::vector<Value>>(std::move(v));
    return x;
}

Value Value::object(Kind k) {
    Value x = with(k);
    x.obj = std::make_shared<ObjectData>();
    return x;
}

Value Value::function(NativeFn f) {
    Value x = with(Kind::FUNCTION);
    x.fn = std::make_shared<NativeFn>(std::move(f));
    return x;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return none();
        case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: return integer(int64_t(j.get<uint64_t>()));
        case nlohmann::ordered_json::value_t::number_float: {
            const double d = j.get<double>();
            // JavaScript has one number type: an integral value is an integer there
            if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.007199254740992e15)
                return integer(int64_t(d));
            return number(d);
        }
        case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            std::vector<Value> a;
            for (const auto& e : j) a.push_back(from_json(e));
            return array(std::move(a));
        }
        case nlohmann::ordered_json::value_t::object: {
            Value o = object();
            for (auto it = j.begin(); it != j.end(); ++it) o.obj->append_unique(it.key(), from_json(it.value()));
            return o;
        }
        default: return Value();
    }
}

bool Value::truthy() const {
    switch (kind) {
        case Kind::UNDEFINED:
        case Kind::NONE: return false;
        case Kind::BOOL: return b;
        case Kind::INT: return i != 0;
        case Kind::FLOAT: return f != 0 && !std::isnan(f);
        case Kind::STRING: return !s.empty();
        case Kind::ARRAY: return !arr->empty();
        case Kind::OBJECT:
        case Kind::KWARGS: return !obj->items.empty();
        case Kind::NAMESPACE:
        case Kind::FUNCTION: return true;
    }
    return false;
}

const char* Value::type_name() const {
    switch (kind) {
        case Kind::UNDEFINED: return "undefined";
        case Kind::NONE: return "none";
        case Kind::BOOL: return "boolean";
        case Kind::INT: return "integer";
        case Kind::FLOAT: return "float";
        case Kind::STRING: return "string";
        case Kind::ARRAY: return "array";
        case Kind::OBJECT: return "object";
        case Kind::NAMESPACE: return "namespace";
        case Kind::KWARGS: return "keyword arguments";
        case Kind::FUNCTION: return "function";
    }
    return "?";
}

std::string js_number(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    if (d == 0) return "0";
    char buf[64];
    // shortest round-trip digits, then JavaScript's layout of them
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    (void)ec;
    std::string sci(buf, p);  // d.ddde±XX
    const bool neg = sci[0] == '-';
    if (neg) sci.erase(0, 1);
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int exp = std::stoi(sci.substr(e + 1));
    const int k = int(digits.size()), n = exp + 1;  // value = 0.digits x 10^n
    std::string out;
    if (k <= n && n <= 21) out = digits + std::string(size_t(n - k), '0');
    else if (0 < n && n <= 21) out = digits.substr(0, size_t(n)) + "." + digits.substr(size_t(n));
    else if (-6 < n && n <= 0) out = "0." + std::string(size_t(-n), '0') + digits;
    else {
        out = digits.substr(0, 1);
        if (k > 1) out.append(".").append(digits, 1, std::string::npos);
        out.append(n - 1 >= 0 ? "e+" : "e-").append(std::to_string(std::abs(n - 1)));
    }
    return neg ? "-" + out : out;
}

std::string Value::raw_str() const {
    switch (kind) {
        case Kind::UNDEFINED: return "undefined";
        case Kind::NONE: return "null";
        case Kind::BOOL: return b ? "true" : "false";
        case Kind::INT: return std::to_string(i);
        case Kind::FLOAT: return js_number(f);
        case Kind::STRING: return s;
        default: return str();
    }
}

std::string Value::str() const {
    switch (kind) {
        case Kind::FLOAT:
            if (f == 0 && std::signbit(f)) return "-0.0";
            if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 1e21) return js_number(f) + ".0";
            return js_number(f);
        case Kind::ARRAY:
        case Kind::OBJECT:
        case Kind::NAMESPACE:
        case Kind::KWARGS: {
            JsonOptions o;
            o.undefined_as_null = false;
            return to_json(*this, o);
        }
        case Kind::FUNCTION: return "[function]";
        default: return raw_str();
    }
}

std::shared_ptr<ObjectData> take_kwargs(Args& args) {
    if (!args.empty() && args.back().kind == Value::Kind::KWARGS) {
        auto kw = args.back().obj;
        args.pop_back();
        return kw;
    }
    return std::make_shared<ObjectData>();
}

void put_kwargs(Args& args, const std::shared_ptr<ObjectData>& kw) {
    if (kw->items.empty()) return;
    Value k = Value::object(Value::Kind::KWARGS);
    k.obj = kw;
    args.push_back(k);
}

Value arg(const Args& args, size_t i, const ObjectData& kw, const char* name, Value def) {
    if (i < args.size()) return args[i];
    if (const Value* v = kw.find(name)) return *v;
    return def;
}

namespace {

void json_string(const std::string& s, bool ascii, std::string& out) {
    out += '"';
    for (size_t i = 0; i < s.size(); i++) {
        const unsigned char c = uint8_t(s[i]);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else if (c >= 0x7f && ascii) {  // \uXXXX per UTF-16 unit, as makeAsciiSafe
                    uint32_t cp = c;
                    int len = 1;
                    if (c >= 0xf0) cp = c & 0x07, len = 4;
                    else if (c >= 0xe0) cp = c & 0x0f, len = 3;
                    else if (c >= 0xc0) cp = c & 0x1f, len = 2;
                    for (int k = 1; k < len && i + 1 < s.size(); k++) cp = (cp << 6) | (uint8_t(s[++i]) & 0x3f);
                    auto unit = [&](uint32_t u) {
                        char buf[8];
                        std::snprintf(buf, sizeof buf, "\\u%04x", u);
                        out += buf;
                    };
                    if (cp >= 0x10000) {
                        cp -= 0x10000;
                        unit(0xd800 + (cp >> 10));
                        unit(0xdc00 + (cp & 0x3ff));
                    } else {
                        unit(cp);
                    }
                } else {
                    out += char(c);
                }
        }
    }
    out += '"';
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& o, int depth) {
    if (depth > Limits::kNesting)  // a namespace that holds itself
        throw Error(strprintf("tojson: nested more than %d levels deep", Limits::kNesting));
    const std::string item_sep = !o.item_sep.empty() || !o.key_sep.empty() ? o.item_sep : (o.indent > 0 ? "," : ", ");
    const std::string key_sep = !o.item_sep.empty() || !o.key_sep.empty() ? o.key_sep : ": ";
    switch (v.kind) {
        case Value::Kind::UNDEFINED: return o.undefined_as_null ? "null" : "undefined";
        case Value::Kind::NONE: return "null";
        case Value::Kind::BOOL: return v.b ? "true" : "false";
        case Value::Kind::INT: return std::to_string(v.i);
        case Value::Kind::FLOAT: return std::isfinite(v.f) ? js_number(v.f) : "null";
        case Value::Kind::STRING: {
            std::string out;
            json_string(v.s, o.ensure_ascii, out);
            return out;
        }
        case Value::Kind::ARRAY:
        case Value::Kind::OBJECT:
        case Value::Kind::NAMESPACE:
        case Value::Kind::KWARGS: {
            const std::string ind = o.indent > 0 ? std::string(size_t(o.indent), ' ') : "";
            std::string base = "\n", child;
            for (int d = 0; d < depth; d++) base += ind;
            child = base + ind;
            std::vector<std::string> core;
            // the text's size before it is built (a large indent over many items would pass any bound)
            auto check = [&] {
                size_t total = base.size() + 2;
                for (const auto& c : core) total += c.size() + child.size() + item_sep.size();
                check_text(total, "tojson");
            };
            if (v.kind == Value::Kind::ARRAY) {
                for (const auto& e : *v.arr) core.push_back(to_json(e, o, depth + 1));
                check();
                std::string out = "[";
                if (o.indent > 0 && !core.empty()) {
                    out += child;
                    for (size_t i = 0; i < core.size(); i++) out += (i ? item_sep + child : "") + core[i];
                    out += base;
                } else {
                    for (size_t i = 0; i < core.size(); i++) out += (i ? item_sep : "") + core[i];
                }
                return out + "]";
            }
            auto items = v.obj->items;
            if (o.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            for (const auto& [k, e] : items) {
                std::string key;
                json_string(k, o.ensure_ascii, key);
                std::string one = key + key_sep + to_json(e, o, depth + 1);
                core.push_back(o.indent > 0 ? child + one : one);
            }
            check();
            std::string out = "{";
            for (size_t i = 0; i < core.size(); i++) out += (i ? item_sep : "") + core[i];
            if (o.indent > 0 && !core.empty()) out += base;
            return out + "}";
        }
        case Value::Kind::FUNCTION: throw Error("cannot convert a function to JSON");
    }
    return "null";
}

namespace {

// JavaScript's ToNumber for a string (loose equality): trimmed decimal, or NaN.
double js_to_number(const std::string& s) {
    const std::string t = js_trim(s, true, true);
    if (t.empty()) return 0;
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    return end == t.c_str() + t.size() ? d : std::nan("");
}

}  // namespace

bool strict_equal(const Value& a, const Value& b) {
    using K = Value::Kind;
    if (a.is_number() && b.is_number()) return a.num() == b.num();
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case K::UNDEFINED:
        case K::NONE: return true;
        case K::BOOL: return a.b == b.b;
        case K::STRING: return a.s == b.s;
        case K::ARRAY: return a.arr == b.arr;
        case K::FUNCTION: return a.fn == b.fn;
        default: return a.obj == b.obj;
    }
}

bool loose_equal(const Value& a, const Value& b) {
    using K = Value::Kind;
    const bool an = a.kind == K::NONE || a.kind == K::UNDEFINED, bn = b.kind == K::NONE || b.kind == K::UNDEFINED;
    if (an || bn) return an && bn;
    const bool a_prim = a.is_number() || a.kind == K::BOOL || a.kind == K::STRING;
    const bool b_prim = b.is_number() || b.kind == K::BOOL || b.kind == K::STRING;
    if (a.kind == K::STRING && b.kind == K::STRING) return a.s == b.s;
    if (a_prim && b_prim) {
        auto n = [](const Value& v) { return v.kind == K::STRING ? js_to_number(v.s) : v.num(); };
        return n(a) == n(b);
    }
    return strict_equal(a, b);
}

int compare(const Value& a, const Value& b, bool case_sensitive) {
    using K = Value::Kind;
    if ((a.kind == K::NONE && b.kind == K::NONE) || (a.undefined() && b.undefined())) return 0;
    auto numeric = [](const Value& v) { return v.is_number() || v.kind == K::BOOL; };
    if (numeric(a) && numeric(b)) return a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
    if (a.kind == K::STRING && b.kind == K::STRING) {
        std::string x = a.s, y = b.s;
        if (!case_sensitive) {
            for (auto& c : x) c = char(std::tolower(uint8_t(c)));
            for (auto& c : y) c = char(std::tolower(uint8_t(c)));
        }
        return x < y ? -1 : x > y ? 1 : 0;
    }
    throw Error(std::string("cannot compare ") + a.type_name() + " with " + b.type_name());
}

std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = uint8_t(s[i]);
        size_t len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        len = std::min(len, s.size() - i);
        out.push_back(s.substr(i, len));
        i += len;
    }
    return out;
}

namespace {

bool js_space(const std::string& cp) {
    static const char* kSpaces[] = {" ",
                                    "\t",
                                    "\n",
                                    "\v",
                                    "\f",
                                    "\r",
                                    "\xc2\xa0",
                                    "\xe1\x9a\x80",
                                    "\xe2\x80\xa8",
                                    "\xe2\x80\xa9",
                                    "\xe2\x80\xaf",
                                    "\xe2\x81\x9f",
                                    "\xe3\x80\x80",
                                    "\xef\xbb\xbf"};
    for (const char* sp : kSpaces)
        if (cp == sp) return true;
    // U+2000..U+200A
    return cp.size() == 3 && uint8_t(cp[0]) == 0xe2 && uint8_t(cp[1]) == 0x80 && uint8_t(cp[2]) >= 0x80 &&
           uint8_t(cp[2]) <= 0x8a;
}

}  // namespace

std::string js_trim(const std::string& s, bool left, bool right) {
    auto cps = code_points(s);
    size_t a = 0, b = cps.size();
    if (left)
        while (a < b && js_space(cps[a])) a++;
    if (right)
        while (b > a && js_space(cps[b - 1])) b--;
    std::string out;
    for (size_t i = a; i < b; i++) out += cps[i];
    return out;
}

}  // namespace tandem::jinja
