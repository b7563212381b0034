// The built-ins of the chat-template interpreter that a template reaches by name (internal to src/chat/jinja_*.cpp;
// jinja.h lists them): filters (`x | name`, `x | name(...)`), tests (`x is name`) and the members of values
// (`s.strip()`, `d.items()`, `a.length`), with @huggingface/jinja's semantics. The evaluator (jinja_eval.cpp) finds
// the name and evaluates the arguments. All of them throw tandem::Error without a line number: the evaluator
// prefixes the line of the node.
#pragma once
#include <memory>
#include <string>

#include "chat/jinja_value.h"

namespace tandem::jinja {

// One application of a filter to a value.
struct FilterCall {
    const std::string& name;  // as written: aliases (default/d, length/count) share one function
    bool called;  // written with parentheses: `x | join(", ")` rather than `x | join`
    Args& args;  // positional arguments, evaluated
    const std::shared_ptr<ObjectData>& kw;  // keyword arguments, evaluated (no items when there are none)
    Env& env;  // the template's scope, handed on to the methods a filter calls
};

// Applies filter c.name to v. Each filter is one entry of a name -> function table. A name the table lacks, and a
// filter given a kind of value it does not take, get one answer: none and undefined give [] to selectattr,
// rejectattr, select, reject, map, unique and items (llama.cpp's leniency); otherwise the error is
// "unknown filter 'name' on a list" (a string, a number, an object, a boolean) or, for the other kinds,
// "cannot apply filter 'name' to a <type>".
Value call_filter(const Value& v, FilterCall& c);

// The test `name` (`x is name`), or nullptr when there is none. A test may throw (odd and even on a non-integer).
using TestFn = bool (*)(const Value&);
TestFn find_test(const std::string& name);

// Member `name` of a string, an array or an object (a namespace's attributes are the evaluator's): a method as a
// FUNCTION bound to obj, a property's value (length), or undefined when obj has no such member.
Value method(const Value& obj, const std::string& name);

}  // namespace tandem::jinja
