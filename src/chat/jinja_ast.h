// Syntax tree of a chat template (internal to src/chat/jinja_*.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::jinja {

struct Node;
using NodeP = std::shared_ptr<Node>;
using Nodes = std::vector<NodeP>;

struct Node {
    enum class T {
        // statements (evaluate to text, or to none)
        PROGRAM,  // body
        IF,  // x: test, body, alt
        FOR,  // x: loop variable (IDENT or TUPLE), y: iterable, z: filter test or null, body, alt (else)
        SET,  // x: target, y: value or null (then body is the block)
        MACRO,  // s: name, args: parameters (IDENT or KWARG), body
        CALL_BLOCK,  // x: the CALL, args: caller parameters, body
        FILTER_BLOCK,  // x: filter (IDENT or CALL), body
        BREAK,
        CONTINUE,
        COMMENT,
        // expressions
        STR,  // s (text outside tags is a STR too)
        INT,  // i
        FLOAT,  // f
        IDENT,  // s
        ARRAY,  // args
        TUPLE,  // args
        DICT,  // args: keys, body: values
        MEMBER,  // x: object, y: property, flag: computed ([...]), else y is IDENT or INT
        SLICE,  // x, y, z: start, stop, step (each may be null)
        CALL,  // x: callee, args
        BINARY,  // s: operator, x, y
        UNARY,  // s: operator (not, -, +), x
        FILTER,  // x: operand, y: filter (IDENT or CALL)
        TEST,  // x: operand, s: test name, flag: negated
        SELECT,  // x: value, y: condition (`a if b` without else)
        TERNARY,  // x: condition, y: if true, z: if false
        KWARG,  // s: name, x: value
        SPREAD,  // x (*args)
        KWSPREAD  // x (**kwargs)
    };
    T t;
    int line = 0;
    std::string s;
    int64_t i = 0;
    double f = 0;
    bool flag = false;
    NodeP x, y, z;
    Nodes args, body, alt;
    Node(T t_, int line_) : t(t_), line(line_) {}
};

// Parses a template source (after @huggingface/jinja's preprocessing). Throws tandem::Error "line N: ...".
NodeP parse_template(const std::string& source);

}  // namespace tandem::jinja
