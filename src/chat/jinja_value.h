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

// The bounds of one render. A template comes from a model file, so it is untrusted input: whatever it does, a
// render ends within these (a tandem::Error names the bound), never with a crash, an endless loop or unbounded
// memory. Real chat templates stay far below each (a 2,000-message conversation takes ~10^5 steps).
struct Limits {
    static constexpr size_t kTextBytes = size_t(32) << 20;  // any string a template builds, its output included
    static constexpr size_t kItems = size_t(1) << 21;  // items of any list or object
    static constexpr int kNesting = 200;  // lists and objects inside each other
    // evaluations, loop iterations and items made in one render (about a second of CPU for the costliest steps)
    static constexpr uint64_t kSteps = 5'000'000;
    static constexpr int kEvalDepth = 600;  // evaluation nested this deep (long operator chains, recursion)
};
// Throws tandem::Error when a string of `bytes` would pass Limits::kTextBytes; `what` names the operation.
void check_text(size_t bytes, const char* what);

struct ObjectData {
    std::vector<std::pair<std::string, Value>> items;  // insertion order
    int depth = 1;  // 1 + the deepest value's nesting (bounded by Limits::kNesting)
    const Value* find(const std::string& k) const;
    // Replaces or appends. Throws tandem::Error beyond Limits::kItems or Limits::kNesting.
    void set(const std::string& k, Value v);
    void append_unique(const std::string& k, Value v);  // a key known to be new (JSON objects): no search
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
    int depth = 0;  // ARRAY: 1 + the deepest item's nesting (objects keep theirs in ObjectData::depth)

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
    // Throws tandem::Error beyond Limits::kItems or Limits::kNesting.
    static Value array(std::vector<Value> v = {});
    static Value object(Kind k = Kind::OBJECT);
    static Value function(NativeFn f);
    static Value from_json(const nlohmann::ordered_json& j);

    // How deep lists and objects nest in it: 0 for a scalar, 1 for a list of scalars, ...
    int nesting() const {
        if (kind == Kind::ARRAY) return depth;
        return is_attr_container() && obj ? obj->depth : 0;
    }
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
