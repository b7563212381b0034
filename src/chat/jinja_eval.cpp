// Chat-template evaluation: scopes, statements, operators, member access and calls, with @huggingface/jinja's
// semantics (see jinja.h and jinja_value.h); the filters, tests and methods it calls by name are in
// jinja_filters.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_filters.h"
#include "tandem/error.h"

namespace tandem::jinja {

// A scope: its own variables and the enclosing scope. `for` bodies and macro calls get a new one; `if` does not
// (a `set` inside an `if` is visible after it, one inside a loop is not).
class Env {
public:
    explicit Env(Env* parent = nullptr) : parent_(parent) {}
    Value lookup(const std::string& name) const {
        for (const Env* e = this; e; e = e->parent_)
            if (auto it = e->vars_.find(name); it != e->vars_.end()) return it->second;
        return Value();
    }
    void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

private:
    Env* parent_;
    std::map<std::string, Value> vars_;
};

namespace {

using K = Value::Kind;

struct BreakSignal {};
struct ContinueSignal {};

[[noreturn]] void fail(const Node& n, const std::string& what) {
    throw Error(strprintf("line %d: %s", n.line, what.c_str()));
}

Value slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
    std::vector<Value> items;
    std::vector<std::string> cps;
    if (obj.kind == K::ARRAY) items = *obj.arr;
    else if (obj.kind == K::STRING) cps = code_points(obj.s);
    else throw Error("only arrays and strings can be sliced");
    for (const Value* v : {&a, &b, &c})
        if (!v->undefined() && v->kind != K::INT && v->kind != K::NONE) throw Error("slice indices must be integers");
    const int64_t n = obj.kind == K::ARRAY ? int64_t(items.size()) : int64_t(cps.size());
    const int64_t step = c.kind == K::INT ? c.i : 1;
    if (step == 0) throw Error("slice step cannot be zero");
    int64_t start, stop;
    const bool has_a = a.kind == K::INT, has_b = b.kind == K::INT;
    if (step > 0) {
        start = !has_a ? 0 : a.i < 0 ? std::max<int64_t>(n + a.i, 0) : std::min(a.i, n);
        stop = !has_b ? n : b.i < 0 ? std::max<int64_t>(n + b.i, 0) : std::min(b.i, n);
    } else {
        start = !has_a ? n - 1 : a.i < 0 ? std::max<int64_t>(n + a.i, -1) : std::min(a.i, n - 1);
        stop = !has_b ? -1 : b.i < -1 ? std::max<int64_t>(n + b.i, -1) : std::min(b.i, n - 1);
    }
    std::vector<Value> out;
    std::string str;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (obj.kind == K::ARRAY) out.push_back(items[size_t(i)]);
        else str += cps[size_t(i)];
    }
    return obj.kind == K::ARRAY ? Value::array(std::move(out)) : Value::string(str);
}

std::string strftime_like(const std::tm& t, const std::string& fmt) {
    static const char* kLong[] = {"January", "February", "March",     "April",   "May",      "June",
                                  "July",    "August",   "September", "October", "November", "December"};
    static const char* kShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    std::string out;
    for (size_t i = 0; i < fmt.size(); i++) {
        if (fmt[i] != '%' || i + 1 >= fmt.size()) {
            out += fmt[i];
            continue;
        }
        const char c = fmt[i + 1];
        char buf[16];
        switch (c) {
            case 'Y': out += std::to_string(t.tm_year + 1900); break;
            case 'm': std::snprintf(buf, sizeof buf, "%02d", t.tm_mon + 1), out += buf; break;
            case 'd': std::snprintf(buf, sizeof buf, "%02d", t.tm_mday), out += buf; break;
            case 'b': out += kShort[t.tm_mon]; break;
            case 'B': out += kLong[t.tm_mon]; break;
            case 'H': std::snprintf(buf, sizeof buf, "%02d", t.tm_hour), out += buf; break;
            case 'M': std::snprintf(buf, sizeof buf, "%02d", t.tm_min), out += buf; break;
            case '%': out += '%'; break;
            default: out += fmt.substr(i, 2); break;  // left as written, as the reference does
        }
        i++;
    }
    return out;
}

class Interpreter {
public:
    explicit Interpreter(const RenderOptions& o) : opt_(o) {}

    // The render's step budget (jinja_value.h, Limits): one per evaluation and loop iteration, and what a
    // function or filter made (a list's items, a string's bytes / 64), so native work is paid for too.
    void step(const Node& n, uint64_t cost = 1) {
        steps_ += cost;
        if (steps_ > opt_.max_steps)
            fail(n, strprintf("the template ran more than %llu steps (a render is bounded)",
                              (unsigned long long)opt_.max_steps));
    }
    Value charge(Value v, const Node& at) {
        if (v.kind == K::ARRAY) step(at, v.arr->size());
        else if (v.kind == K::STRING) step(at, v.s.size() / 64);
        else if (v.is_attr_container() && v.obj) step(at, v.obj->items.size());
        return v;
    }

    // Every evaluation passes here: the step budget and the nesting bound.
    Value exec(const Node& n, Env& env) {
        step(n);
        if (depth_ >= Limits::kEvalDepth)
            fail(n, strprintf("evaluation nested more than %d levels deep", Limits::kEvalDepth));
        struct Nest {
            int& d;
            ~Nest() { --d; }
        } nest{++depth_};
        return eval(n, env);
    }

    Value block(const Nodes& body, Env& env) {
        std::string out;
        for (const auto& st : body) {
            Value v = exec(*st, env);
            if (v.kind != K::NONE && !v.undefined()) {
                std::string s = v.str();
                check_text(out.size() + s.size(), "the output");
                out += s;
            }
        }
        return Value::string(std::move(out));
    }

private:
    Value eval(const Node& n, Env& env) {
        switch (n.t) {
            case Node::T::PROGRAM: return block(n.body, env);
            case Node::T::COMMENT: return Value::none();
            case Node::T::STR: return Value::string(n.s);
            case Node::T::INT: return Value::integer(n.i);
            case Node::T::FLOAT: return Value::number(n.f);
            case Node::T::IDENT: return env.lookup(n.s);
            case Node::T::ARRAY:
            case Node::T::TUPLE: {
                std::vector<Value> a;
                for (const auto& e : n.args) a.push_back(exec(*e, env));
                return Value::array(std::move(a));
            }
            case Node::T::DICT: {
                Value o = Value::object();
                for (size_t i = 0; i < n.args.size(); i++) {
                    Value k = exec(*n.args[i], env);
                    if (k.kind != K::STRING) fail(n, std::string("dict keys must be strings, not ") + k.type_name());
                    o.obj->set(k.s, exec(*n.body[i], env));
                }
                return o;
            }
            case Node::T::IF: return block(exec(*n.x, env).truthy() ? n.body : n.alt, env);
            case Node::T::FOR: return for_loop(n, env);
            case Node::T::SET: return set(n, env);
            case Node::T::MACRO: {
                const Node* def = &n;
                env.set(n.s, Value::function([this, def](Args& args, Env& caller_env) {
                            Env scope(&caller_env);
                            bind(*def, def->args, args, scope);
                            return block(def->body, scope);
                        }));
                return Value::none();
            }
            case Node::T::CALL_BLOCK: return call_block(n, env);
            case Node::T::FILTER_BLOCK: return apply_filter(block(n.body, env), *n.x, env);
            case Node::T::BREAK: throw BreakSignal{};
            case Node::T::CONTINUE: throw ContinueSignal{};
            case Node::T::MEMBER: return member(n, env);
            case Node::T::SLICE: fail(n, "a slice outside []");
            case Node::T::CALL: {
                Args args = arguments(n.args, env);
                Value f = exec(*n.x, env);
                if (f.kind != K::FUNCTION) fail(n, std::string("cannot call a ") + f.type_name() + callee_name(*n.x));
                return call(f, args, env, n);
            }
            case Node::T::BINARY: return binary(n, env);
            case Node::T::UNARY: {
                Value a = exec(*n.x, env);
                if (n.s == "not") return Value::boolean(!a.truthy());
                if (a.is_number() || a.kind == K::BOOL) {
                    const double sign = n.s == "-" ? -1 : 1;
                    if (a.kind == K::FLOAT) return Value::number(sign * a.f);
                    const int64_t v = a.kind == K::BOOL ? int64_t(a.b) : a.i;
                    if (sign < 0 && v == INT64_MIN) return Value::number(-double(v));  // past int64: a float, as JS
                    return Value::integer(sign < 0 ? -v : v);
                }
                fail(n, "unary " + n.s + " on a " + a.type_name());
            }
            case Node::T::FILTER: return apply_filter(exec(*n.x, env), *n.y, env);
            case Node::T::TEST: {
                Value a = exec(*n.x, env);
                const TestFn test = find_test(n.s);
                if (!test) fail(n, "unknown test '" + n.s + "'");
                bool r;
                try {
                    r = test(a);
                } catch (const Error& e) {
                    fail(n, e.what());
                }
                return Value::boolean(n.flag ? !r : r);
            }
            case Node::T::SELECT: return exec(*n.y, env).truthy() ? exec(*n.x, env) : Value();
            case Node::T::TERNARY: return exec(*n.x, env).truthy() ? exec(*n.y, env) : exec(*n.z, env);
            case Node::T::KWARG:
            case Node::T::SPREAD:
            case Node::T::KWSPREAD: fail(n, "an argument outside a call");
        }
        fail(n, "unknown construct");
    }

    static std::string callee_name(const Node& c) {
        if (c.t == Node::T::IDENT) return " ('" + c.s + "' is not defined or not a function)";
        if (c.t == Node::T::MEMBER && !c.flag && c.y->t == Node::T::IDENT) return " (no method '" + c.y->s + "')";
        return "";
    }

    Value call(const Value& f, Args& args, Env& env, const Node& at) {
        // macros may recurse; a template that recurses without end gets an error, not a stack overflow
        if (calls_ >= kMaxCalls) fail(at, "calls nested too deeply (more than 50 levels): endless recursion?");
        struct Count {
            int& n;
            ~Count() { --n; }
        } count{++calls_};
        try {
            return charge((*f.fn)(args, env), at);
        } catch (const BreakSignal&) {
            throw;
        } catch (const ContinueSignal&) {
            throw;
        } catch (const Error& e) {
            const std::string m = e.what();
            if (m.rfind("line ", 0) == 0) throw;
            fail(at, m);
        }
    }

    Args arguments(const Nodes& nodes, Env& env) {
        Args pos;
        auto kw = std::make_shared<ObjectData>();
        for (const auto& a : nodes) {
            if (a->t == Node::T::SPREAD) {
                Value v = exec(*a->x, env);
                if (v.kind != K::ARRAY) fail(*a, std::string("cannot unpack a ") + v.type_name());
                for (const auto& e : *v.arr) pos.push_back(e);
            } else if (a->t != Node::T::KWARG && a->t != Node::T::KWSPREAD) {
                pos.push_back(exec(*a, env));
            }
        }
        for (const auto& a : nodes) {
            if (a->t == Node::T::KWARG) {
                if (kw->find(a->s)) fail(*a, "keyword argument '" + a->s + "' given twice");
                kw->set(a->s, exec(*a->x, env));
            } else if (a->t == Node::T::KWSPREAD) {
                Value v = exec(*a->x, env);
                if (v.kind != K::OBJECT && v.kind != K::KWARGS) fail(*a, "** needs a mapping");
                for (const auto& [k, e] : v.obj->items) kw->set(k, e);
            }
        }
        put_kwargs(pos, kw);
        return pos;
    }

    // Which of `kwargs` / `varargs` a macro body reads (then extra arguments are collected there).
    static void special_uses(const Node& n, std::set<std::string>& used) {
        if (n.t == Node::T::IDENT && (n.s == "kwargs" || n.s == "varargs")) used.insert(n.s);
        for (const NodeP* c : {&n.x, &n.y, &n.z})
            if (*c) special_uses(**c, used);
        for (const Nodes* list : {&n.args, &n.body, &n.alt})
            for (const auto& c : *list)
                if (c) special_uses(*c, used);
    }

    void bind(const Node& def, const Nodes& params, Args args, Env& scope) {
        auto kw = take_kwargs(args);
        std::set<std::string> special;
        for (const auto& b : def.body) special_uses(*b, special);
        std::vector<std::pair<std::string, const Node*>> pending;
        for (size_t i = 0; i < params.size(); i++) {
            const Node& p = *params[i];
            const std::string& name = p.s;  // IDENT or KWARG (a parameter with a default)
            Value v;
            bool given = i < args.size();
            if (given) v = args[i];
            else if (const Value* k = kw->find(name)) {
                v = *k;
                given = true;
                auto& items = kw->items;
                items.erase(std::remove_if(items.begin(), items.end(), [&](const auto& e) { return e.first == name; }),
                            items.end());
            }
            if (!given && p.t == Node::T::KWARG) pending.emplace_back(name, p.x.get());
            scope.set(name, v);
        }
        if (special.count("kwargs")) {
            Value k = Value::object();
            k.obj = kw;
            scope.set("kwargs", k);
        } else if (!kw->items.empty()) {
            throw Error("macro '" + def.s + "' takes no keyword argument '" + kw->items[0].first + "'");
        }
        if (special.count("varargs")) {
            std::vector<Value> rest;
            for (size_t i = params.size(); i < args.size(); i++) rest.push_back(args[i]);
            scope.set("varargs", Value::array(std::move(rest)));
        } else if (args.size() > params.size()) {
            throw Error(strprintf("macro '%s' takes at most %zu arguments", def.s.c_str(), params.size()));
        }
        for (const auto& [name, dflt] : pending) scope.set(name, exec(*dflt, scope));
    }

    Value call_block(const Node& n, Env& env) {
        const Node* blk = &n;
        Env* defining = &env;
        Value caller = Value::function([this, blk, defining](Args& args, Env&) {
            Env scope(defining);
            bind(*blk, blk->args, args, scope);
            return block(blk->body, scope);
        });
        Args args = arguments(n.x->args, env);
        Value f = exec(*n.x->x, env);
        if (f.kind != K::FUNCTION) fail(n, "'call' needs a macro" + callee_name(*n.x->x));
        Env with_caller(&env);
        with_caller.set("caller", caller);
        return call(f, args, with_caller, n);
    }

    Value for_loop(const Node& n, Env& env) {
        Env scope(&env);
        Value it = exec(*n.y, scope);
        if (it.kind == K::OBJECT || it.kind == K::KWARGS) {
            std::vector<Value> keys;
            for (const auto& [k, v] : it.obj->items) keys.push_back(Value::string(k));
            it = Value::array(std::move(keys));
        }
        if (it.undefined())
            it = Value::array();  // Python's Jinja: an undefined value loops zero times (templates
                // written for transformers iterate `tools` unguarded)
        if (it.kind != K::ARRAY) fail(n, std::string("cannot loop over a ") + it.type_name());
        auto assign = [&](Env& e, const Value& cur) {
            if (n.x->t == Node::T::IDENT) return e.set(n.x->s, cur);
            if (cur.kind != K::ARRAY) fail(n, std::string("cannot unpack a ") + cur.type_name());
            if (cur.arr->size() != n.x->args.size()) fail(n, "wrong number of items to unpack");
            for (size_t j = 0; j < n.x->args.size(); j++) {
                if (n.x->args[j]->t != Node::T::IDENT) fail(n, "loop variables must be names");
                e.set(n.x->args[j]->s, (*cur.arr)[j]);
            }
        };
        std::vector<Value> items;
        for (const Value& cur : *it.arr) {
            if (n.z) {
                Env test_scope(&scope);
                assign(test_scope, cur);
                if (!exec(*n.z, test_scope).truthy()) continue;
            }
            items.push_back(cur);
        }
        std::string out;
        bool ran = false;
        const int64_t len = int64_t(items.size());
        for (int64_t i = 0; i < len; i++) {
            step(n);  // an empty body still costs its iterations
            Value loop = Value::object();
            loop.obj->set("index", Value::integer(i + 1));
            loop.obj->set("index0", Value::integer(i));
            loop.obj->set("revindex", Value::integer(len - i));
            loop.obj->set("revindex0", Value::integer(len - i - 1));
            loop.obj->set("first", Value::boolean(i == 0));
            loop.obj->set("last", Value::boolean(i == len - 1));
            loop.obj->set("length", Value::integer(len));
            loop.obj->set("previtem", i > 0 ? items[size_t(i - 1)] : Value());
            loop.obj->set("nextitem", i < len - 1 ? items[size_t(i + 1)] : Value());
            scope.set("loop", loop);
            assign(scope, items[size_t(i)]);
            try {
                const std::string piece = block(n.body, scope).s;
                check_text(out.size() + piece.size(), "the loop's output");
                out += piece;
            } catch (const ContinueSignal&) {
                continue;
            } catch (const BreakSignal&) {
                break;
            }
            ran = true;
        }
        if (!ran) out += block(n.alt, scope).s;
        return Value::string(out);
    }

    Value set(const Node& n, Env& env) {
        Value rhs = n.y ? exec(*n.y, env) : block(n.body, env);
        const Node& target = *n.x;
        if (target.t == Node::T::IDENT) {
            env.set(target.s, rhs);
        } else if (target.t == Node::T::TUPLE) {
            if (rhs.kind != K::ARRAY) fail(n, std::string("cannot unpack a ") + rhs.type_name());
            if (rhs.arr->size() != target.args.size()) fail(n, "wrong number of items to unpack");
            for (size_t i = 0; i < target.args.size(); i++) {
                if (target.args[i]->t != Node::T::IDENT) fail(n, "can only unpack into names");
                env.set(target.args[i]->s, (*rhs.arr)[i]);
            }
        } else if (target.t == Node::T::MEMBER) {
            Value obj = exec(*target.x, env);
            if (obj.kind != K::NAMESPACE) fail(n, "attributes can only be set on a namespace()");
            if (target.flag || target.y->t != Node::T::IDENT) fail(n, "a namespace attribute must be a name");
            obj.obj->set(target.y->s, rhs);
        } else {
            fail(n, "cannot assign to this expression");
        }
        return Value::none();
    }

    Value member(const Node& n, Env& env) {
        Value obj = exec(*n.x, env);
        Value prop;
        if (n.flag) {
            if (n.y->t == Node::T::SLICE) {
                try {
                    return slice(obj, n.y->x ? exec(*n.y->x, env) : Value(), n.y->y ? exec(*n.y->y, env) : Value(),
                                 n.y->z ? exec(*n.y->z, env) : Value());
                } catch (const Error& e) {
                    fail(n, e.what());
                }
            }
            prop = exec(*n.y, env);
        } else if (n.y->t == Node::T::INT) {
            prop = Value::integer(n.y->i);
        } else {
            prop = Value::string(n.y->s);
        }
        if (obj.is_attr_container()) {
            if (prop.kind != K::STRING) fail(n, std::string("an object key must be a string, not ") + prop.type_name());
            if (const Value* v = obj.obj->find(prop.s)) return *v;
            if (obj.kind != K::NAMESPACE) return method(obj, prop.s);
            return Value();
        }
        if (obj.kind == K::ARRAY || obj.kind == K::STRING) {
            if (prop.kind == K::INT) {
                if (obj.kind == K::ARRAY) {
                    const int64_t sz = int64_t(obj.arr->size()), i = prop.i < 0 ? sz + prop.i : prop.i;
                    return i >= 0 && i < sz ? (*obj.arr)[size_t(i)] : Value();
                }
                auto cps = code_points(obj.s);
                const int64_t sz = int64_t(cps.size()), i = prop.i < 0 ? sz + prop.i : prop.i;
                return i >= 0 && i < sz ? Value::string(cps[size_t(i)]) : Value();
            }
            if (prop.kind == K::STRING) return method(obj, prop.s);
            fail(n, std::string("an index must be an integer, not ") + prop.type_name());
        }
        if (prop.kind != K::STRING) fail(n, std::string("cannot index a ") + obj.type_name());
        return Value();  // members of undefined, none, numbers: undefined
    }

    Value binary(const Node& n, Env& env) {
        const std::string& op = n.s;
        Value l = exec(*n.x, env);
        if (op == "and") return l.truthy() ? exec(*n.y, env) : l;
        if (op == "or") return l.truthy() ? l : exec(*n.y, env);
        Value r = exec(*n.y, env);
        if (op == "==") return Value::boolean(loose_equal(l, r));
        if (op == "!=") return Value::boolean(!loose_equal(l, r));
        // llama.cpp's leniency, which its templates rely on (firefunction's `suffix + "\n" + functions` without
        // tools): a string joined with none or undefined is the string
        const bool l_null = l.undefined() || l.kind == K::NONE, r_null = r.undefined() || r.kind == K::NONE;
        if ((op == "+" || op == "~") && ((l_null && r.kind == K::STRING) || (r_null && l.kind == K::STRING)))
            return Value::string(l_null ? r.s : l.s);
        if (l.undefined() || r.undefined()) {
            if (r.undefined() && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
            fail(n, "'" + op + "' on an undefined value" + undefined_hint(*n.x, *n.y, l));
        }
        if (l.kind == K::NONE || r.kind == K::NONE) fail(n, "'" + op + "' on a none value");
        if (op == "~") return joined(concat(l.raw_str(), r.raw_str()), n);
        auto numeric = [](const Value& v) { return v.is_number() || v.kind == K::BOOL; };
        if (op == "**" && numeric(l) && numeric(r)) {
            const double a = l.num(), b = r.num();
            if (a == 0 && b < 0) fail(n, "0 cannot be raised to a negative power");
            const double res = std::pow(a, b);
            if (l.kind == K::FLOAT || r.kind == K::FLOAT || b < 0 || !(std::fabs(res) < 9.2e18))
                return Value::number(res);  // past int64: a float (JavaScript has no other number)
            return Value::integer(int64_t(res));
        }
        if (l.is_number() && r.is_number()) {
            const bool fl = l.kind == K::FLOAT || r.kind == K::FLOAT;
            const double a = l.num(), b = r.num();
            // integers past int64 become floats (JavaScript's numbers), never a wrapped or undefined result
            int64_t res = 0;
            if (op == "+")
                return fl || __builtin_add_overflow(l.i, r.i, &res) ? Value::number(a + b) : Value::integer(res);
            if (op == "-")
                return fl || __builtin_sub_overflow(l.i, r.i, &res) ? Value::number(a - b) : Value::integer(res);
            if (op == "*")
                return fl || __builtin_mul_overflow(l.i, r.i, &res) ? Value::number(a * b) : Value::integer(res);
            if (op == "/") return Value::number(a / b);
            if (op == "//") {
                const double q = std::floor(a / b);
                return fl || !(std::fabs(q) < 9.2e18) ? Value::number(q) : Value::integer(int64_t(q));
            }
            if (op == "%") {
                if (fl) return Value::number(std::fmod(a, b));
                if (r.i == 0) return Value::number(std::nan(""));
                return Value::integer(r.i == -1 ? 0 : l.i % r.i);  // INT64_MIN % -1 would trap
            }
            if (op == "<") return Value::boolean(a < b);
            if (op == ">") return Value::boolean(a > b);
            if (op == "<=") return Value::boolean(a <= b);
            if (op == ">=") return Value::boolean(a >= b);
        } else if (l.kind == K::ARRAY && r.kind == K::ARRAY) {
            if (op == "+") {
                if (l.arr->size() + r.arr->size() > Limits::kItems)
                    fail(n, strprintf("'+' would make a list of more than %zu items", Limits::kItems));
                std::vector<Value> a = *l.arr;
                a.insert(a.end(), r.arr->begin(), r.arr->end());
                step(n, a.size() / 64);  // copying is work: a list grown by '+' in a loop is quadratic
                return Value::array(std::move(a));
            }
        } else if (r.kind == K::ARRAY) {
            if (op == "in" || op == "not in") {
                bool found = false;
                for (const auto& e : *r.arr) found = found || strict_equal(e, l);
                return Value::boolean(op == "in" ? found : !found);
            }
        }
        if ((l.kind == K::STRING || r.kind == K::STRING) && op == "+")
            return joined(concat(l.raw_str(), r.raw_str()), n);
        if (l.kind == K::STRING && r.kind == K::STRING && (op == "in" || op == "not in")) {
            const bool found = r.s.find(l.s) != std::string::npos;
            return Value::boolean(op == "in" ? found : !found);
        }
        if (l.kind == K::STRING && (r.kind == K::OBJECT || r.kind == K::KWARGS) && (op == "in" || op == "not in")) {
            const bool found = r.obj->find(l.s) != nullptr;
            return Value::boolean(op == "in" ? found : !found);
        }
        fail(n, "unknown operator '" + op + "' between " + l.type_name() + " and " + r.type_name());
    }

    // A string made by '~' or '+': its bytes / 256 are charged, so a string grown in a loop (quadratic copying)
    // meets the step budget (issue 26's fuzz run: 4 nested loops of `ns.s ~ "ab"` ran for minutes), while a
    // template that joins a long conversation's messages once each stays far below it.
    Value joined(std::string s, const Node& n) {
        step(n, s.size() / 256);
        return Value::string(std::move(s));
    }

    static std::string concat(const std::string& a, const std::string& b) {
        check_text(a.size() + b.size(), "joining two strings");
        return a + b;
    }

    static std::string undefined_hint(const Node& a, const Node& b, const Value& l) {
        const Node& u = l.undefined() ? a : b;
        if (u.t == Node::T::IDENT) return " ('" + u.s + "' is not defined)";
        return "";
    }

    Value apply_filter(const Value& v, const Node& f, Env& env) {
        try {
            const bool called = f.t == Node::T::CALL;
            const std::string name = called ? (f.x->t == Node::T::IDENT ? f.x->s : "") : f.s;
            if (called && f.x->t != Node::T::IDENT) fail(f, "a filter must be a name");
            Args args = called ? arguments(f.args, env) : Args{};
            const auto kw = take_kwargs(args);
            FilterCall c{name, called, args, kw, env};
            return charge(call_filter(v, c), f);
        } catch (const Error& e) {
            const std::string m = e.what();
            if (m.rfind("line ", 0) == 0) throw;
            fail(f, m);
        }
    }

    const RenderOptions& opt_;
    static constexpr int kMaxCalls = 50;
    int calls_ = 0;
    uint64_t steps_ = 0;  // evaluations so far in this render (Limits::kSteps)
    int depth_ = 0;  // evaluations in progress (Limits::kEvalDepth)

public:
    void globals(Env& env) {
        env.set("true", Value::boolean(true));
        env.set("false", Value::boolean(false));
        env.set("none", Value::none());
        env.set("True", Value::boolean(true));
        env.set("False", Value::boolean(false));
        env.set("None", Value::none());
        env.set("raise_exception", Value::function([](Args& a, Env&) -> Value {
                    throw Error("raise_exception: " + (a.empty() ? std::string() : a[0].raw_str()));
                }));
        env.set("range", Value::function([](Args& a, Env&) {
                    if (a.empty() || a.size() > 3) throw Error("range() takes 1 to 3 integers");
                    for (const auto& x : a)
                        if (x.kind != K::INT) throw Error("range() takes integers");
                    int64_t start = 0, stop, step = 1;
                    if (a.size() == 1) stop = a[0].i;
                    else start = a[0].i, stop = a[1].i;
                    if (a.size() == 3) step = a[2].i;
                    if (step == 0) throw Error("range() step must not be zero");
                    std::vector<Value> out;
                    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                        out.push_back(Value::integer(i));
                        if (out.size() > 1000000) throw Error("range() is too long");
                    }
                    return Value::array(std::move(out));
                }));
        env.set("strftime_now", Value::function([this](Args& a, Env&) {
                    if (a.empty() || a[0].kind != K::STRING) throw Error("strftime_now() needs a format string");
                    return Value::string(strftime_like(opt_.time(), a[0].s));
                }));
        env.set("namespace", Value::function([](Args& a, Env&) {
                    auto kw = take_kwargs(a);
                    Value ns = Value::object(K::NAMESPACE);
                    if (a.size() > 1) throw Error("namespace() takes at most one positional argument");
                    if (a.size() == 1) {
                        if (a[0].kind == K::OBJECT) {
                            for (const auto& [k, v] : a[0].obj->items) ns.obj->set(k, v);
                        } else if (a[0].kind == K::ARRAY) {
                            for (const auto& p : *a[0].arr) {
                                if (p.kind != K::ARRAY || p.arr->size() != 2 || (*p.arr)[0].kind != K::STRING)
                                    throw Error("namespace() takes an object or [key, value] pairs");
                                ns.obj->set((*p.arr)[0].s, (*p.arr)[1]);
                            }
                        } else {
                            throw Error("namespace() takes an object or [key, value] pairs");
                        }
                    }
                    for (const auto& [k, v] : kw->items) ns.obj->set(k, v);
                    return ns;
                }));
    }
};

}  // namespace

Template::Template(const std::string& source) : program_(parse_template(source)) {}

std::tm RenderOptions::time() const {
    if (now) return now();
    std::tm t{};
    const std::time_t clock = std::time(nullptr);
    localtime_r(&clock, &t);
    return t;
}

std::string Template::render(const Value& context, const RenderOptions& opt) const {
    Interpreter in(opt);
    Env root;
    in.globals(root);
    if (context.is_attr_container())
        for (const auto& [k, v] : context.obj->items) root.set(k, v);
    try {
        return in.exec(*program_, root).s;
    } catch (const BreakSignal&) {
        throw Error("'break' outside a loop");
    } catch (const ContinueSignal&) {
        throw Error("'continue' outside a loop");
    }
}

}  // namespace tandem::jinja
