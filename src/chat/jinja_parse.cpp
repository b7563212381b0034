// Chat-template parser: the tokens of jinja_lex.h into the syntax tree of jinja_ast.h. Statements and operator
// precedence follow @huggingface/jinja (see jinja.h); precedence from loosest to tightest:
//   a if b else c  <  or  <  and  <  not  <  comparisons, in, not in  <  + - ~  <  * / // %  <  **  <  is
//   <  |filter  <  unary - +  <  calls, members, literals
#include <cerrno>
#include <cstdlib>

#include "chat/jinja_ast.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_value.h"
#include "tandem/error.h"

namespace tandem::jinja {

namespace {

class Parser {
public:
    explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

    NodeP program() {
        auto p = node(Node::T::PROGRAM);
        while (i_ < t_.size()) p->body.push_back(any());
        return p;
    }

private:
    NodeP node(Node::T t) {
        return std::make_shared<Node>(t, i_ < t_.size() ? t_[i_].line : (t_.empty() ? 1 : t_.back().line));
    }
    bool is(Tok t, size_t k = 0) const { return i_ + k < t_.size() && t_[i_ + k].t == t; }
    bool ident(const char* name, size_t k = 0) const { return is(Tok::IDENT, k) && t_[i_ + k].v == name; }
    int line() const { return i_ < t_.size() ? t_[i_].line : (t_.empty() ? 1 : t_.back().line); }
    const Token& expect(Tok t, const char* what) {
        if (!is(t))
            fail(line(),
                 std::string("expected ") + what + (i_ < t_.size() ? ", found '" + t_[i_].v + "'" : ", found the end"));
        return t_[i_++];
    }
    void expect_ident(const char* name) {
        if (!ident(name)) fail(line(), std::string("expected '") + name + "'");
        i_++;
    }
    bool at_statement(std::initializer_list<const char*> names) const {
        if (!is(Tok::OPEN_STMT) || !is(Tok::IDENT, 1)) return false;
        for (const char* n : names)
            if (t_[i_ + 1].v == n) return true;
        return false;
    }
    Nodes block_until(std::initializer_list<const char*> names, const char* opened) {
        Nodes out;
        const int start = line();
        while (!at_statement(names)) {
            if (i_ >= t_.size()) fail(start, std::string("'") + opened + "' is not closed");
            out.push_back(any());
        }
        return out;
    }

    NodeP any() {
        switch (t_[i_].t) {
            case Tok::COMMENT: {
                auto n = node(Node::T::COMMENT);
                i_++;
                return n;
            }
            case Tok::TEXT: {
                auto n = node(Node::T::STR);
                n->s = t_[i_++].v;
                return n;
            }
            case Tok::OPEN_STMT: return statement();
            case Tok::OPEN_EXPR: {
                i_++;
                auto e = expression();
                expect(Tok::CLOSE_EXPR, "'}}'");
                return e;
            }
            default: fail(line(), "unexpected '" + t_[i_].v + "'");
        }
    }

    // Nesting is bounded, so a hostile template cannot exhaust the stack (parsing or evaluating it).
    struct Depth {
        Parser& p;
        explicit Depth(Parser& p_) : p(p_) {
            if (++p.depth_ > kMaxDepth) fail(p.line(), "nested too deeply (more than 100 levels)");
        }
        ~Depth() { --p.depth_; }
    };
    static constexpr int kMaxDepth = 100;
    int depth_ = 0;
    // Chains (a + b + ..., a.b.c..., x | f | g ...) are parsed in loops, not by recursion; each is bounded so the
    // tree stays shallow enough to evaluate and free recursively (jinja_value.h, Limits::kEvalDepth).
    void chain_step(int& n) const {
        if (++n > Limits::kEvalDepth)
            fail(line(), strprintf("an expression chains more than %d operations", Limits::kEvalDepth));
    }

    NodeP statement() {
        Depth guard(*this);
        expect(Tok::OPEN_STMT, "'{%'");
        if (!is(Tok::IDENT)) fail(line(), "expected a statement name after '{%'");
        const std::string name = t_[i_].v;
        const int ln = line();
        i_++;
        NodeP r;
        if (name == "set") {
            r = node(Node::T::SET);
            r->x = sequence(false);
            if (is(Tok::EQUALS)) {
                i_++;
                r->y = sequence(false);
            } else {
                expect(Tok::CLOSE_STMT, "'%}'");
                r->body = block_until({"endset"}, "set");
                i_++;
                expect_ident("endset");
            }
            expect(Tok::CLOSE_STMT, "'%}'");
        } else if (name == "if") {
            r = if_rest();
            expect(Tok::OPEN_STMT, "'{%'");
            expect_ident("endif");
            expect(Tok::CLOSE_STMT, "'%}'");
        } else if (name == "macro") {
            r = node(Node::T::MACRO);
            auto id = primary();
            if (id->t != Node::T::IDENT) fail(ln, "expected a macro name");
            r->s = id->s;
            r->args = arguments(true);
            expect(Tok::CLOSE_STMT, "'%}'");
            r->body = block_until({"endmacro"}, "macro");
            i_++;
            expect_ident("endmacro");
            expect(Tok::CLOSE_STMT, "'%}'");
        } else if (name == "for") {
            r = node(Node::T::FOR);
            r->x = sequence(true);
            if (r->x->t != Node::T::IDENT && r->x->t != Node::T::TUPLE) fail(ln, "expected a loop variable");
            expect_ident("in");
            auto it = expression();
            if (it->t == Node::T::SELECT) {  // for x in xs if cond
                r->y = it->x;
                r->z = it->y;
            } else {
                r->y = it;
            }
            expect(Tok::CLOSE_STMT, "'%}'");
            r->body = block_until({"endfor", "else"}, "for");
            if (at_statement({"else"})) {
                i_ += 2;
                expect(Tok::CLOSE_STMT, "'%}'");
                r->alt = block_until({"endfor"}, "for");
            }
            i_++;
            expect_ident("endfor");
            expect(Tok::CLOSE_STMT, "'%}'");
        } else if (name == "call") {
            r = node(Node::T::CALL_BLOCK);
            if (is(Tok::LPAREN)) r->args = arguments(true);
            auto callee = primary();
            if (callee->t != Node::T::IDENT) fail(ln, "expected a macro name after 'call'");
            auto call = node(Node::T::CALL);
            call->x = callee;
            call->args = arguments(false);
            r->x = call;
            expect(Tok::CLOSE_STMT, "'%}'");
            r->body = block_until({"endcall"}, "call");
            i_++;
            expect_ident("endcall");
            expect(Tok::CLOSE_STMT, "'%}'");
        } else if (name == "break" || name == "continue") {
            r = node(name == "break" ? Node::T::BREAK : Node::T::CONTINUE);
            expect(Tok::CLOSE_STMT, "'%}'");
        } else if (name == "filter") {
            r = node(Node::T::FILTER_BLOCK);
            auto f = primary();
            if (f->t == Node::T::IDENT && is(Tok::LPAREN)) f = call_rest(f);
            r->x = f;
            expect(Tok::CLOSE_STMT, "'%}'");
            r->body = block_until({"endfilter"}, "filter");
            i_++;
            expect_ident("endfilter");
            expect(Tok::CLOSE_STMT, "'%}'");
        } else {
            fail(ln, "unknown statement '{% " + name + " %}'");
        }
        return r;
    }

    NodeP if_rest() {
        auto r = node(Node::T::IF);
        r->x = expression();
        expect(Tok::CLOSE_STMT, "'%}'");
        r->body = block_until({"elif", "else", "endif"}, "if");
        if (at_statement({"elif"})) {
            i_ += 2;
            r->alt.push_back(if_rest());
        } else if (at_statement({"else"})) {
            i_ += 2;
            expect(Tok::CLOSE_STMT, "'%}'");
            r->alt = block_until({"endif"}, "if");
        }
        return r;
    }

    NodeP sequence(bool primary_only) {
        auto first = primary_only ? primary() : expression();
        if (!is(Tok::COMMA)) return first;
        auto tup = node(Node::T::TUPLE);
        tup->args.push_back(first);
        while (is(Tok::COMMA)) {
            i_++;
            tup->args.push_back(primary_only ? primary() : expression());
        }
        return tup;
    }

    NodeP expression() {
        Depth guard(*this);
        auto a = logical_or();
        if (!ident("if")) return a;
        i_++;
        auto test = logical_or();
        if (ident("else")) {
            i_++;
            auto n = node(Node::T::TERNARY);
            n->x = test;
            n->y = a;
            n->z = expression();
            return n;
        }
        auto n = node(Node::T::SELECT);
        n->x = a;
        n->y = test;
        return n;
    }
    NodeP binary(const std::string& op, NodeP l, NodeP r) {
        auto n = node(Node::T::BINARY);
        n->s = op;
        n->x = std::move(l);
        n->y = std::move(r);
        return n;
    }
    NodeP logical_or() {
        auto l = logical_and();
        int n = 0;
        while (ident("or")) {
            chain_step(n);
            i_++;
            l = binary("or", l, logical_and());
        }
        return l;
    }
    NodeP logical_and() {
        auto l = logical_not();
        int n = 0;
        while (ident("and")) {
            chain_step(n);
            i_++;
            l = binary("and", l, logical_not());
        }
        return l;
    }
    NodeP logical_not() {
        Depth guard(*this);
        if (ident("not")) {
            auto n = node(Node::T::UNARY);
            n->s = "not";
            i_++;
            n->x = logical_not();
            return n;
        }
        return comparison();
    }
    NodeP comparison() {
        auto l = additive();
        for (int n = 0;; chain_step(n)) {
            std::string op;
            if (ident("not") && ident("in", 1)) {
                op = "not in";
                i_ += 2;
            } else if (ident("in")) {
                op = "in";
                i_++;
            } else if (is(Tok::CMP)) {
                op = t_[i_++].v;
            } else {
                break;
            }
            l = binary(op, l, additive());
        }
        return l;
    }
    NodeP additive() {
        auto l = multiplicative();
        for (int n = 0; is(Tok::ADD); chain_step(n)) {
            const std::string op = t_[i_++].v;
            l = binary(op, l, multiplicative());
        }
        return l;
    }
    NodeP multiplicative() {
        auto l = power();
        for (int n = 0; is(Tok::MUL); chain_step(n)) {
            const std::string op = t_[i_++].v;
            l = binary(op, l, power());
        }
        return l;
    }
    NodeP power() {
        auto l = test();
        for (int n = 0; is(Tok::POW); chain_step(n)) {
            i_++;
            l = binary("**", l, test());
        }
        return l;
    }
    NodeP test() {
        auto operand = filter();
        for (int chain = 0; ident("is"); chain_step(chain)) {
            i_++;
            auto n = node(Node::T::TEST);
            if (ident("not")) {
                n->flag = true;
                i_++;
            }
            auto name = primary();
            if (name->t != Node::T::IDENT) fail(n->line, "expected a test name after 'is'");
            n->s = name->s;
            n->x = operand;
            operand = n;
        }
        return operand;
    }
    NodeP filter() {
        auto operand = unary();
        for (int chain = 0; is(Tok::PIPE); chain_step(chain)) {
            i_++;
            auto f = primary();
            if (f->t != Node::T::IDENT) fail(f->line, "expected a filter name after '|'");
            if (is(Tok::LPAREN)) f = call_rest(f);
            auto n = node(Node::T::FILTER);
            n->x = operand;
            n->y = f;
            operand = n;
        }
        return operand;
    }
    NodeP unary() {
        Depth guard(*this);
        if ((is(Tok::UNARY) || is(Tok::ADD)) && (t_[i_].v == "-" || t_[i_].v == "+")) {
            auto n = node(Node::T::UNARY);
            n->s = t_[i_++].v;
            n->x = unary();
            return n;
        }
        auto m = members(primary());
        if (is(Tok::LPAREN)) return call_rest(m);
        return m;
    }
    NodeP call_rest(NodeP callee) {
        Depth guard(*this);  // f()()(): one level each
        auto n = node(Node::T::CALL);
        n->x = std::move(callee);
        n->args = arguments(false);
        NodeP e = members(n);
        if (is(Tok::LPAREN)) e = call_rest(e);
        return e;
    }
    Nodes arguments(bool parameters) {
        expect(Tok::LPAREN, "'('");
        Nodes args;
        bool keyword_seen = false;
        while (!is(Tok::RPAREN)) {
            if (i_ >= t_.size()) fail(line(), "an argument list is not closed");
            const bool kwspread = is(Tok::POW), spread = is(Tok::MUL) && t_[i_].v == "*";
            if (parameters && (kwspread || spread)) fail(line(), "argument unpacking is not allowed in parameters");
            if (kwspread || spread) {
                auto n = node(kwspread ? Node::T::KWSPREAD : Node::T::SPREAD);
                i_++;
                n->x = expression();
                args.push_back(n);
            } else {
                auto a = expression();
                if (is(Tok::EQUALS)) {
                    i_++;
                    if (a->t != Node::T::IDENT) fail(a->line, "expected a name before '='");
                    auto kw = node(Node::T::KWARG);
                    kw->s = a->s;
                    kw->x = expression();
                    a = kw;
                    keyword_seen = true;
                } else if (keyword_seen) {
                    fail(a->line, parameters ? "a parameter without default follows one with a default"
                                             : "a positional argument follows a keyword argument");
                }
                if (parameters && a->t != Node::T::IDENT && a->t != Node::T::KWARG)
                    fail(a->line, "expected a parameter name");
                args.push_back(a);
            }
            if (is(Tok::COMMA)) i_++;
        }
        i_++;
        return args;
    }
    NodeP members(NodeP object) {
        for (int chain = 0; is(Tok::DOT) || is(Tok::LBRACKET); chain_step(chain)) {
            const bool computed = is(Tok::LBRACKET);
            i_++;
            auto n = node(Node::T::MEMBER);
            n->x = object;
            n->flag = computed;
            if (computed) {
                n->y = subscript();
                expect(Tok::RBRACKET, "']'");
            } else {
                n->y = primary();
                if (n->y->t != Node::T::IDENT && n->y->t != Node::T::INT) fail(n->line, "expected a name after '.'");
            }
            object = n;
        }
        return object;
    }
    NodeP subscript() {
        Nodes parts;
        bool slice = false;
        while (!is(Tok::RBRACKET)) {
            if (i_ >= t_.size()) fail(line(), "'[' is not closed");
            if (is(Tok::COLON)) {
                parts.push_back(nullptr);
                i_++;
                slice = true;
            } else {
                parts.push_back(expression());
                if (is(Tok::COLON)) {
                    i_++;
                    slice = true;
                }
            }
        }
        if (parts.empty()) fail(line(), "empty subscript []");
        if (!slice) return parts[0];
        if (parts.size() > 3) fail(line(), "a slice takes at most 3 parts");
        auto n = node(Node::T::SLICE);
        n->x = parts[0];
        n->y = parts.size() > 1 ? parts[1] : nullptr;
        n->z = parts.size() > 2 ? parts[2] : nullptr;
        return n;
    }
    NodeP primary() {
        if (i_ >= t_.size()) fail(line(), "unexpected end of the template");
        const Token& k = t_[i_++];
        switch (k.t) {
            case Tok::NUMBER: {
                errno = 0;
                if (k.v.find('.') != std::string::npos) {
                    auto n = node(Node::T::FLOAT);
                    n->f = std::strtod(k.v.c_str(), nullptr);
                    return n;
                }
                auto n = node(Node::T::INT);
                n->i = std::strtoll(k.v.c_str(), nullptr, 10);
                if (errno == ERANGE) fail(k.line, "the number " + k.v + " is too large");
                return n;
            }
            case Tok::STRING: {
                auto n = node(Node::T::STR);
                n->s = k.v;
                while (is(Tok::STRING)) n->s += t_[i_++].v;  // adjacent literals concatenate
                return n;
            }
            case Tok::IDENT: {
                auto n = node(Node::T::IDENT);
                n->s = k.v;
                return n;
            }
            case Tok::LPAREN: {
                auto e = sequence(false);
                expect(Tok::RPAREN, "')'");
                return e;
            }
            case Tok::LBRACKET: {
                auto n = node(Node::T::ARRAY);
                while (!is(Tok::RBRACKET)) {
                    if (i_ >= t_.size()) fail(k.line, "'[' is not closed");
                    n->args.push_back(expression());
                    if (is(Tok::COMMA)) i_++;
                }
                i_++;
                return n;
            }
            case Tok::LBRACE: {
                auto n = node(Node::T::DICT);
                while (!is(Tok::RBRACE)) {
                    if (i_ >= t_.size()) fail(k.line, "'{' is not closed");
                    n->args.push_back(expression());
                    expect(Tok::COLON, "':' in a dict literal");
                    n->body.push_back(expression());
                    if (is(Tok::COMMA)) i_++;
                }
                i_++;
                return n;
            }
            default: fail(k.line, "unexpected '" + k.v + "'");
        }
    }

    std::vector<Token> t_;
    size_t i_ = 0;
};

}  // namespace

NodeP parse_template(const std::string& source) {
    Parser p(lex(source));
    return p.program();
}

}  // namespace tandem::jinja
