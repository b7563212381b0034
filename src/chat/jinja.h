// A Jinja interpreter for chat templates (tokenizer.chat_template), written for this project. It implements
// the subset Hugging Face chat templates use, with the semantics of @huggingface/jinja (what transformers.js
// runs), so that a template renders byte for byte as there: trim_blocks and lstrip_blocks on, one trailing
// newline of the template dropped, {% generation %} tags ignored.
//
//   statements   if/elif/else, for (loop.*, `if` filter, else), set (also block set, tuple unpacking, namespace
//                attributes), macro (defaults, varargs, kwargs), call (caller), filter blocks, break, continue
//   expressions  literals (strings with escapes, numbers, lists, tuples, dicts), member and index access,
//                slices, calls with keyword and * / ** arguments, + - * / // % ** ~, comparisons, in / not in,
//                and / or / not, `a if b else c`, filters, tests (is / is not)
//   filters      tojson (indent, separators, sort_keys, ensure_ascii), trim, length, join, default, map(attribute),
//                selectattr, rejectattr, first, last, list, string, int, float, abs, upper, lower, title,
//                capitalize, indent, replace, reverse, sort, unique, items, dictsort, round, safe
//   methods      str: strip lstrip rstrip split startswith endswith replace upper lower title capitalize;
//                dict: get items keys values
//   globals      raise_exception, range, namespace, strftime_now, true/false/none (and True/False/None)
// A construct outside this set is a parse error naming the line, so a template we cannot run fails at load.
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "chat/jinja_value.h"

namespace tandem::jinja {

struct Node;

struct RenderOptions {
    std::function<std::tm()> now;  // strftime_now's clock; empty: the local time
    uint64_t max_steps = Limits::kSteps;  // the render's step budget (jinja_value.h); tests lower it
    std::tm time() const;  // the clock's time now
};

class Template {
public:
    // Parses; throws tandem::Error "line N: what" for syntax it does not know.
    explicit Template(const std::string& source);
    // context: an object whose entries become variables (messages, tools, bos_token, add_generation_prompt, ...).
    // Throws tandem::Error for a runtime failure, raise_exception included (its message is the template's).
    std::string render(const Value& context, const RenderOptions& opt = {}) const;

private:
    std::shared_ptr<const Node> program_;
};

}  // namespace tandem::jinja
