// Chat-template lexer (internal to src/chat/jinja_*.cpp). It applies @huggingface/jinja's preprocessing first
// (one trailing newline of the template dropped; lstrip_blocks and trim_blocks; {% generation %} tags removed),
// then splits the text into tokens as the reference does, whitespace control ({%- -%}, {{- -}}, {#- -#})
// included: the text between tags is one TEXT token.
#pragma once
#include <string>
#include <vector>

namespace tandem::jinja {

enum class Tok {
    TEXT,
    NUMBER,
    STRING,
    IDENT,
    EQUALS,
    LPAREN,
    RPAREN,
    OPEN_STMT,
    CLOSE_STMT,
    OPEN_EXPR,
    CLOSE_EXPR,
    LBRACKET,
    RBRACKET,
    LBRACE,
    RBRACE,
    COMMA,
    DOT,
    COLON,
    PIPE,
    ADD,
    MUL,
    POW,
    CMP,
    UNARY,
    COMMENT
};

struct Token {
    Tok t;
    std::string v;  // its text (a string's value, escapes resolved)
    int line;  // in the preprocessed source, from 1
};

// Tokens of a template source. Throws tandem::Error "line N: ..." for text it cannot split (an unclosed string or
// comment, an unknown escape or character).
std::vector<Token> lex(const std::string& source);

// A template error at a line (tandem::Error "line N: what"); the lexer's and the parser's.
[[noreturn]] void fail(int line, const std::string& what);

}  // namespace tandem::jinja
