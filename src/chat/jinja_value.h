// Values of the chat-template interpreter (src/chat/jinja.h). They follow @huggingface/jinja, the interpreter
// transformers.js uses and the reference our conformance outputs come from: arrays and objects are shared by
// reference, objects keep insertion order, an integer-valued number from JSON is an integer, output text of a
// value is JavaScript's (true, 1.5, [1, 2]), and == is JavaScript's loose equality.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tandem::jinja {

struct Value;
class Env;
using Args = std::vector<Value>;  // positional arguments; keyword arguments travel as a trailing KWARGS value
using NativeFn = std::function<Value(Args&, Env&)>;

struct ObjectData {
    std::vector<std::pair<std::string, Value>> items;  // insertion order
    const Value* find(const std::string& k) const;
    void set(const std::string& k, Value v);
};

struct Value {
    enum class Kind { UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, ARRAY, OBJECT, NAMESPACE, KWARGS, FUNCTION };
    Kind kind = Kind::UNDEFINED;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;
    std::shared_ptr<std::vector<Value>> arr;
    std::shared_ptr<ObjectData> obj;  // OBJECT, NAMESPACE, KWARGS
    std::shared_ptr<NativeFn> fn;

    static Value none() { return with(Kind::NONE); }
    static Value boolean(bool v) {
        Value x = with(Kind::BOOL);
        x.b = v;
        return x;
    }
    static Value integer(int64_t v) {
        Value x = with(Kind::INT);
        x.i = v;
        return x;
    }
    static Value number(double v) {
        Value x = with(Kind::FLOAT);
        x.f = v;
        return x;
    }
    static Value string(std::string v) {
        Value x = with(Kind::STRING);
        x.s = std::move(v);
        return x;
    }
    static Value array(std::vector<Value> v = {});
    static Value object(Kind k = Kind::OBJECT);
    static Value function(NativeFn f);
    static Value from_json(const nlohmann::ordered_json& j);

    bool is(Kind k) const { return kind == k; }
    bool undefined() const { return kind == Kind::UNDEFINED; }
    bool is_number() const { return kind == Kind::INT || kind == Kind::FLOAT; }
    bool is_attr_container() const { return kind == Kind::OBJECT || kind == Kind::NAMESPACE || kind == Kind::KWARGS; }
    double num() const { return kind == Kind::INT ? double(i) : kind == Kind::BOOL ? double(b) : f; }
    bool truthy() const;
    // What {{ value }} prints (none and undefined print nothing: the caller skips them).
    std::string str() const;
    // JavaScript's String(value.value), used by ~ and + on strings (a float 1.0 is "1" there).
    std::string raw_str() const;
    const char* type_name() const;

private:
    static Value with(Kind k) {
        Value v;
        v.kind = k;
        return v;
    }
};

// A call's keyword arguments travel as its trailing KWARGS value (see Args).
std::shared_ptr<ObjectData> take_kwargs(Args& args);  // removes and returns them (no items when there are none)
void put_kwargs(Args& args, const std::shared_ptr<ObjectData>& kw);  // the inverse (nothing when kw has no items)
// Positional argument i, else keyword argument `name`, else def.
Value arg(const Args& args, size_t i, const ObjectData& kw, const char* name, Value def);

struct JsonOptions {
    int indent = -1;  // < 0: none
    bool ensure_ascii = false, sort_keys = false;
    std::string item_sep, key_sep;  // empty: the defaults for the indent
    bool undefined_as_null = true;
};
// @huggingface/jinja's toJSON (the tojson filter and the printing of arrays and objects).
std::string to_json(const Value& v, const JsonOptions& o, int depth = 0);
// JavaScript's Number.prototype.toString for a double.
std::string js_number(double d);

bool loose_equal(const Value& a, const Value& b);  // ==
bool strict_equal(const Value& a, const Value& b);  // `in` on arrays
// Ordering for sort/dictsort: numbers (and booleans) by value, strings (case-insensitive unless asked); throws
// for other or mixed types, as the reference does.
int compare(const Value& a, const Value& b, bool case_sensitive);

// UTF-8 helpers: strings are indexed, sliced and measured in code points.
std::vector<std::string> code_points(const std::string& s);
std::string js_trim(const std::string& s, bool left, bool right);  // JavaScript's whitespace (\s)

}  // namespace tandem::jinja
