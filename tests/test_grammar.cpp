// GBNF grammars: parsing, matching code point by code point (UTF-8 edge cases included), and the allowed-token
// masks the vocabulary trie computes, checked against matching every token's text one by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/numeric_range.h"
#include "grammar/trigger.h"
#include "speculative/constraint.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/tokenizer.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::grammar;

namespace {

bool matches(const std::string& gbnf, const std::string& text) {
    Matcher m(parse_gbnf(gbnf));
    return m.accept_bytes(text) && m.can_end();
}
bool prefix_ok(const std::string& gbnf, const std::string& text) {
    Matcher m(parse_gbnf(gbnf));
    return m.accept_bytes(text);
}

const std::string kJson = json_object_gbnf();  // the grammar of JSON mode

}  // namespace

TEST(Grammar, AcceptsExactlyTheLanguage) {
    EXPECT_TRUE(matches(R"(root ::= "a"{5,5})", "aaaaa"));
    EXPECT_FALSE(matches(R"(root ::= "a"{5,5})", "aaaa"));
    EXPECT_FALSE(prefix_ok(R"(root ::= "a"{5,5})", "aaaaaa"));
    EXPECT_TRUE(matches(R"(root ::= "x" [0-9]{1,3} "y")", "x12y"));
    EXPECT_FALSE(matches(R"(root ::= "x" [0-9]{1,3} "y")", "x1234y"));
    EXPECT_TRUE(matches("root ::= (\"ab\" | \"c\")* \"!\"", "abcab!"));
    EXPECT_TRUE(matches("root ::= [^a-c]+", "xyz"));
    EXPECT_FALSE(prefix_ok("root ::= [^a-c]+", "xb"));
    EXPECT_TRUE(matches("root ::= . . .", "a€😀"));  // any code point, 1 to 4 bytes
    EXPECT_TRUE(matches("root ::= [é-ü]+", "éü"));
    EXPECT_TRUE(matches("root ::= \"\\u00e9\\x41\\n\"", "éA\n"));
    EXPECT_TRUE(matches("# comment\nroot ::= a b # after\na ::= \"A\"\nb ::= \"B\"?\n", "A"));
    EXPECT_TRUE(matches("root ::= \"a\"\n     | \"b\"\n", "b"));  // a continuation line starting with |
    EXPECT_TRUE(matches(kJson, R"({"a": [1, -2.5e3, "x\n\u00e9"], "b": {"c": null}} )"));
    EXPECT_FALSE(prefix_ok(kJson, R"({"a": 01)"));
    EXPECT_FALSE(prefix_ok(kJson, "{\"a\x01"));
    EXPECT_TRUE(prefix_ok(kJson, R"({"a": [tr)"));
    EXPECT_FALSE(matches(kJson, R"({"a": [tr)"));
    // invalid UTF-8 is never text
    EXPECT_FALSE(prefix_ok("root ::= .*", "\xff"));
    EXPECT_TRUE(prefix_ok("root ::= .*", "a\xe2\x82"));  // cut in the middle of a code point: may go on
    EXPECT_FALSE(matches("root ::= .*", "a\xe2\x82"));  // but is not a complete text
    EXPECT_FALSE(prefix_ok("root ::= .*", "a\x82"));  // a continuation byte without its lead
    EXPECT_FALSE(prefix_ok("root ::= [a-z]*", "\xc3"));  // no accepted code point starts with C3
    EXPECT_FALSE(prefix_ok("root ::= \"{\"", "\xf0"));  // F0 and E0 begin code points >= U+10000, >= U+0800
    EXPECT_FALSE(prefix_ok("root ::= \"{\"", "\xe0"));
    EXPECT_TRUE(prefix_ok("root ::= \"😀\"", "\xf0\x9f"));
    {  // a character arriving in two pieces (two byte tokens)
        Matcher m(parse_gbnf("root ::= \"é\""));
        EXPECT_TRUE(m.accept_bytes("\xc3"));
        EXPECT_FALSE(m.can_end());
        EXPECT_TRUE(m.accept_bytes("\xa9"));
        EXPECT_TRUE(m.can_end());
    }
}

TEST(Grammar, ErrorsNameTheProblem) {
    auto msg = [](const std::string& g) {
        try {
            parse_gbnf(g);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    EXPECT_NE(msg("root ::= foo").find("rule 'foo' is not defined"), std::string::npos);
    EXPECT_NE(msg("main ::= \"a\"").find("no 'root' rule"), std::string::npos);
    EXPECT_NE(msg("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
    EXPECT_NE(msg("root ::= a\na ::= \"\"* root").find("left-recursive"), std::string::npos);
    EXPECT_NE(msg("root ::= \"a").find("not closed"), std::string::npos);
    EXPECT_NE(msg("root ::= [a-").find("not closed"), std::string::npos);
    EXPECT_NE(msg("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
    EXPECT_NE(msg("root ::= (\"a\"").find("expected ')'"), std::string::npos);
    EXPECT_NE(msg("\n\nroot = \"a\"").find("line 3"), std::string::npos);
}

// The trie walk gives exactly the tokens whose text the matcher accepts (and end-of-generation only when the
// grammar can end), on a SentencePiece and a byte-level BPE vocabulary (multi-byte and partial-UTF-8 tokens).
TEST(Grammar, VocabularyMasksEqualTokenByTokenMatching) {
    for (const char* vocab : {"models/stories260K.gguf", "tokenizer-tests/ggml-vocab-qwen2.gguf"}) {
        auto f = GgufFile::open(test::shared_file(vocab));
        auto tok = Tokenizer::from_gguf(*f);
        std::vector<std::string> pieces(size_t(tok->n_vocab()));
        for (int32_t id = 0; id < tok->n_vocab(); id++)
            if (tok->token_attr(id) != TokenAttr::CONTROL) pieces[size_t(id)] = tok->token_to_piece(id, false);
        VocabTrie trie(pieces);
        auto g = parse_gbnf(kJson);
        MaskMemo memo;
        for (const std::string prefix :
             {"", "{", "{\"na", "{\"name\": [1", "{\"a\": \"é", "{\"a\": 1}", "{\"a\": \"\xc3"}) {
            Matcher m(g);
            ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
            std::vector<uint8_t> allowed, memoized;
            trie.allowed(m, tok->eog_ids(), allowed);
            trie.allowed(m, tok->eog_ids(), memoized, &memo);  // states met before (the memo is shared)
            trie.allowed(m, tok->eog_ids(), memoized, &memo);  // the same state again: the stored mask
            ASSERT_EQ(memoized, allowed) << vocab << " after '" << prefix << "'";
            int n_allowed = 0;
            for (int32_t id = 0; id < tok->n_vocab(); id++) {
                bool want;
                if (tok->is_eog(id)) want = m.can_end();
                else if (pieces[size_t(id)].empty()) want = false;
                else {
                    Matcher t = m;
                    want = t.accept_bytes(pieces[size_t(id)]);
                }
                n_allowed += allowed[size_t(id)];
                ASSERT_EQ(allowed[size_t(id)] != 0, want)
                    << vocab << " after '" << prefix << "': token " << id << " '" << pieces[size_t(id)] << "'";
            }
            EXPECT_GT(n_allowed, 0) << vocab << " after '" << prefix << "'";
        }
    }
}

namespace {

// The grammar text the scan reports after feeding `pieces` one by one ("-" while untriggered), and at which piece.
std::string scan(const TriggerSpec& spec, const std::vector<std::string>& pieces, int* at = nullptr) {
    TriggerScan t(spec);
    for (size_t i = 0; i < pieces.size(); i++)
        if (auto text = t.feed(spec, pieces[i])) {
            if (at) *at = int(i);
            return text->text;
        }
    return "-";
}

}  // namespace

// Lazy grammars: where the trigger scan starts the grammar (words anywhere outside a leading think block, at_start
// words as the answer's first non-blank bytes), with triggers split over pieces.
TEST(LazyGrammar, TriggersStartTheGrammarAtTheirFirstByte) {
    TriggerSpec hermes;
    hermes.words = {"<tool_call>"};
    hermes.think_open = "<think>";
    hermes.think_close = "</think>";
    int at = -1;
    EXPECT_EQ(scan(hermes, {"Let me look.", "<tool_call>", "\n{\"na"}, &at), "<tool_call>");
    EXPECT_EQ(at, 1);
    EXPECT_EQ(scan(hermes, {"ok <to", "ol_c", "all>\n{"}, &at), "<tool_call>\n{");  // split over three pieces
    EXPECT_EQ(at, 2);
    EXPECT_EQ(scan(hermes, {"<tool_", "xcall>", "<tool_call"}), "-");  // never complete
    EXPECT_EQ(scan(hermes, {"a<tool_call><tool_call>b"}), "<tool_call><tool_call>b");  // the first one
    // inside a leading think block a marker does not trigger; after it, it does
    EXPECT_EQ(scan(hermes, {"\n<think>", "maybe <tool_call>", " later</th", "ink>\n\n<tool_call>{"}), "<tool_call>{");
    EXPECT_EQ(scan(hermes, {"<think>x <tool_call> y"}), "-");
    TriggerSpec opened = hermes;  // the prompt opened the block
    opened.starts_thinking = true;
    EXPECT_EQ(scan(opened, {"<tool_call>", "</think>"}), "-");
    EXPECT_EQ(scan(opened, {"hm</think>", "<tool_call>"}), "<tool_call>");
    // a think block later in the answer is text: the marker in it triggers
    EXPECT_EQ(scan(hermes, {"so <think> <tool_call>"}), "<tool_call>");

    TriggerSpec llama;
    llama.words = {"<|python_tag|>"};
    llama.at_start = {"{\"name\""};
    EXPECT_EQ(scan(llama, {" \n ", "{\"", "name\": \"f\""}, &at), "{\"name\": \"f\"");  // leading blanks skipped
    EXPECT_EQ(at, 2);
    EXPECT_EQ(scan(llama, {"Here: {\"name\": 1}"}), "-");  // not at the start
    EXPECT_EQ(scan(llama, {"{\"nam", "e2\""}), "-");  // diverged: the answer is text from then on
    EXPECT_EQ(scan(llama, {"{", "\"x\"", "{\"name\""}), "-");
    EXPECT_EQ(scan(llama, {"call <|python", "_tag|>{}"}), "<|python_tag|>{}");
    TriggerSpec think_then_start = llama;
    think_then_start.think_open = "<think>";
    think_then_start.think_close = "</think>";
    EXPECT_EQ(scan(think_then_start, {"<think>{\"name\"</think>", "\n{\"name\": "}), "{\"name\": ");
}

// Pattern triggers (types 2 and 3): checked at each piece's end; the grammar's text starts at the first non-empty
// capture group (else the match); whole-answer patterns are anchored at both ends; a match the grammar refuses is
// no trigger, and later matches are looked for after it; bad and backtracking patterns are errors.
TEST(LazyGrammar, PatternTriggersFireAtTheEndOfAPiece) {
    auto spec_of = [](std::vector<std::string> anywhere, std::vector<std::string> whole) {
        TriggerSpec s;
        s.patterns = std::make_shared<TriggerPatterns>(anywhere, whole);
        return s;
    };
    int at = -1;
    const TriggerSpec call = spec_of({"call:\\s*(\\{)"}, {});
    EXPECT_EQ(scan(call, {"let me ", "call:", " ", "{\"a\"", ": 1}"}, &at), "{\"a\"");
    EXPECT_EQ(at, 3);
    const TriggerSpec digits = spec_of({"[0-9]+"}, {});
    EXPECT_EQ(scan(digits, {"ab1", "23"}, &at), "1");  // at the first piece's end, as llama.cpp
    EXPECT_EQ(at, 0);
    const TriggerSpec whole = spec_of({}, {"[^<]*(<tool_call>)[\\s\\S]*"});
    EXPECT_EQ(scan(whole, {"I will ", "<tool_", "call>", "\n{"}, &at), "<tool_call>");
    EXPECT_EQ(at, 2);
    EXPECT_EQ(scan(spec_of({}, {"<tool_call>"}), {"x", "<tool_call>"}), "-");  // whole: anchored at the start
    EXPECT_EQ(scan(spec_of({}, {"<a>"}), {"<a>", "b"}), "<a>");  // ... and at the end: fires before "b" comes
    // a refused match: the scan goes on after it and finds the next one
    TriggerScan t(call);
    ASSERT_TRUE(t.feed(call, "call: {x"));
    t.refused();
    EXPECT_FALSE(t.feed(call, " and"));
    auto next = t.feed(call, " call:{\"k\"");
    ASSERT_TRUE(next);
    EXPECT_EQ(next->text, "{\"k\"");
    EXPECT_TRUE(next->pattern);
    // words still fire inside a piece, before the patterns are looked at
    TriggerSpec both = call;
    both.words = {"<w>"};
    auto w = TriggerScan(both).feed(both, "call:{ <w>x");
    ASSERT_TRUE(w);
    EXPECT_FALSE(w->pattern);
    EXPECT_EQ(w->text, "<w>x");
    EXPECT_THROW(TriggerPatterns({"(unclosed"}, {}), Error);
    const TriggerSpec slow = spec_of({"(a|aa)+$"}, {});
    EXPECT_THROW(TriggerScan(slow).feed(slow, std::string(60, 'a') + "b"), GrammarLimit);
}

// Before the trigger every token is allowed except those that would complete a trigger into text the grammar
// refuses; after it, the grammar's mask. Checked against advancing a copy of the state by every token, on a
// SentencePiece and a byte-level BPE vocabulary.
TEST(LazyGrammar, MasksEqualTokenByTokenAdvancing) {
    for (const char* vocab : {"models/stories260K.gguf", "tokenizer-tests/ggml-vocab-qwen2.gguf"}) {
        auto f = GgufFile::open(test::shared_file(vocab));
        auto tok = Tokenizer::from_gguf(*f);
        ConstraintVocab cv(*tok);
        auto spec = std::make_shared<TriggerSpec>();
        spec->words = {" the", "<tool_call>"};
        spec->at_start = {"{\"a\""};
        spec->think_open = "<think>";
        spec->think_close = "</think>";
        // after the trigger: no letter e, and a call must be closed
        auto c = cv.constrain(
            parse_gbnf(
                R"(root ::= (" the" [a-df-z ,.]{1,40}) | ("<tool_call>" [0-9]+ "</tool_call>") | ("{\"a\"" [0-9]*))"),
            spec);
        MaskMemo memo;
        int n_refused = 0, n_checked = 0, n_prefixes = 0;
        for (const std::string prefix :
             {"", "  ", "Once upon a time", "Once upon a time,", "x <tool", "{", "{\"", "Once upon a time the",
              "<tool_call>12", "<think>a the </thi", "<think>x</think>\n{"}) {
            ConstraintState st(*c);
            // feed the prefix a byte at a time through single-byte tokens, where the vocabulary has them
            bool fed = true;
            for (char ch : prefix) {
                const std::string b(1, ch);
                auto it = std::find(c->pieces->begin(), c->pieces->end(), b);
                if (it == c->pieces->end()) {
                    fed = false;
                    break;
                }
                ASSERT_TRUE(st.advance(*c, int32_t(it - c->pieces->begin()))) << prefix;
            }
            if (!fed) continue;
            n_prefixes++;
            std::vector<uint8_t> mask;
            const uint8_t* allowed = st.allowed(*c, memo, mask, tok->n_vocab());
            for (int32_t id = 0; id < tok->n_vocab(); id++) {
                ConstraintState t = st;
                const bool want = t.advance(*c, id);
                const bool got = allowed ? allowed[id] != 0 : true;
                ASSERT_EQ(got, want) << vocab << " after '" << prefix << "': token " << id << " '"
                                     << (*c->pieces)[size_t(id)] << "'";
                n_refused += !want;
                n_checked++;
            }
        }
        EXPECT_GE(n_prefixes, 9) << vocab << ": prefixes the vocabulary cannot spell byte by byte";
        EXPECT_GT(n_refused, 0) << vocab << ": no token was ever refused";
        // from the start, a token holding " the" completes the trigger: allowed exactly when the grammar takes its
        // text from the trigger on (" then" yes, " there" no: an e after it)
        int n_completing = 0, n_completing_refused = 0;
        for (int32_t id = 0; id < tok->n_vocab(); id++) {
            const std::string& piece = (*c->pieces)[size_t(id)];
            const size_t at = piece.find(" the");
            if (at == std::string::npos || piece.find("<tool_call>") != std::string::npos) continue;
            ConstraintState t(*c);
            Matcher m(c->grammar);
            const bool grammatical = m.accept_bytes(piece.substr(at));
            EXPECT_EQ(t.advance(*c, id), grammatical) << vocab << " '" << piece << "'";
            n_completing++;
            n_completing_refused += grammatical ? 0 : 1;
        }
        EXPECT_GT(n_completing, 1) << vocab;
        EXPECT_GT(n_completing_refused, 0) << vocab;
    }
}

// JSON Schema -> grammar: the documents the schema accepts are sentences of the grammar; the others are not.
TEST(JsonSchema, GrammarAcceptsValidDocumentsAndRefusesOthers) {
    struct Case {
        const char* schema;
        std::vector<const char*> valid, invalid;
    };
    const Case cases[] = {
        {R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1}, "age": {"type": "integer"},
             "email": {"type": "string"}}, "required": ["name", "age"], "additionalProperties": false})",
         {R"({"name": "Ann", "age": 31})", R"({"name":"Ann","age":-2,"email":"a@b"})",
          "{\n  \"name\": \"é\",\n  \"age\": 0\n}"},
         {R"({"name": "Ann"})", R"({"age": 3, "name": "Ann"})", R"({"name": "", "age": 3})",
          R"({"name": "A", "age": "3"})", R"({"name": "A", "age": 3, "x": 1})", R"({"name": "A", "age": 3.5})"}},
        {R"({"enum": ["red", "green", 3, null]})", {R"("red")", "3", "null"}, {R"("blue")", "4"}},
        {R"({"const": {"a": [1, true]}})", {R"({"a":[1,true]})"}, {R"({"a": [1, true]})"}},
        {R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
         {"[1]", "[1, 2, 3]"},
         {"[]", "[1,2,3,4]", "[1.5]"}},
        {R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": false})",
         {"[]", R"(["a"])", R"(["a", true])"},
         {R"([true])", R"(["a", true, 1])"}},
        {R"({"items": [{"type": "integer"}]})", {"[]", "[ -3000 ]"}, {"[1, 2]", R"(["a"])"}},  // draft 4's tuple form
        {R"({"type": ["string", "null"]})", {R"("x")", "null"}, {"1"}},
        {R"({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"k": {"type": "boolean"}}}]})",
         {"12", "{}", R"({"k": false})"},
         {R"({"k": 1})", R"("s")"}},
        {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
             "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v", "children"]}}, "$ref": "#/$defs/node"})",
         {R"({"v": 1, "children": [{"v": 2, "children": []}]})"},
         {R"({"v": 1, "children": [{"v": 2}]})"}},
        {R"({"type": "object", "properties": {"a": {}, "b": {"type": "number"}}})",
         {"{}", R"({"a": [1, {}]})", R"({"b": 2})", R"({"a": 1, "b": 2})"},
         {R"({"b": "x"})", R"({"c": 1})"}},
        {R"({"type": "object", "properties": {"a": {}, "b": {}, "c": {}, "d": {}}})",  // any subset, in order
         {"{}", R"({"a": 1, "c": 3})", R"({"b": 2, "d": 4})", R"({"d": 4})", R"({"a": 1, "b": 2, "c": 3, "d": 4})"},
         {R"({"c": 3, "a": 1})", R"({"a": 1, "a": 1})", R"({"a": 1,})", R"({, "a": 1})"}},
        {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
         {"{}", R"({"x": 1, "y": 2})"},
         {R"({"x": "1"})"}},
        {R"({"type": "string", "format": "date-time"})",
         {R"("2026-11-30T15:04:05Z")", R"("2026-01-02T03:04:05.123+01:00")"},
         {R"("2026-13-01T00:00:00Z")", R"("yesterday")"}},
        {R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"}},
        // allOf: objects merge (a zod .and() / a Pydantic subclass shape); one constraining part is that part
        // a closed part allows only its own properties (JSON Schema: additionalProperties false looks at the
        // properties of its own schema)
        {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"type": "object", "properties": {"a": {}, "b": {"type": "string"}}, "required": ["b"],
                       "additionalProperties": false}]})",
         {R"({"a": 1, "b": "x"})"},
         {R"({"a": 1})", R"({"b": "x"})", R"({"a": 1, "b": "x", "c": 2})", R"({"a": "1", "b": "x"})"}},
        {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "z": {}}},
                      {"type": "object", "properties": {"a": {}}, "additionalProperties": false}]})",
         {"{}", R"({"a": 2})"},
         {R"({"z": 1})", R"({"a": "x"})"}},
        // keywords beside anyOf, $ref and enum hold too; a type list's kind keywords bind their type only
        {R"({"anyOf": [{"type": "string", "minLength": 4}, {"type": "integer"}], "maxLength": 5})",
         {R"("abcd")", "12"},
         {R"("abcdef")", R"("ab")"}},
        {R"({"$defs": {"S": {"type": "string"}}, "$ref": "#/$defs/S", "maxLength": 2, "description": "d"})",
         {R"("ab")"},
         {R"("abc")", "1"}},
        {R"({"type": "string", "enum": ["a", 3, "b"]})", {R"("a")", R"("b")"}, {"3"}},
        {R"({"type": ["integer", "null"], "minimum": 5})", {"5", "null"}, {"4"}},
        // oneOf with a tag property, Pydantic's discriminator (an annotation)
        {R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                        "required": ["kind"]},
                       {"type": "object", "properties": {"kind": {"enum": ["dog"]}, "bark": {"type": "boolean"}},
                        "required": ["kind"]}], "discriminator": {"propertyName": "kind"}})",
         {R"({"kind": "cat", "lives": 9})", R"({"kind": "dog"})"},
         {R"({"kind": "cow"})", R"({"lives": 9})"}},
        {R"({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})",
         {R"("a")", R"(["a"])"},
         {"1"}},
        // integer formats are ranges; a recursive reference to the whole schema; a record of listed keys
        {R"({"type": "integer", "format": "int32"})", {"2147483647", "-2147483648"}, {"2147483648", "-2147483649"}},
        {R"({"type": "integer", "format": "uint32"})", {"4294967295", "0"}, {"4294967296", "-1"}},
        {R"({"type": "integer", "format": "int64"})", {"9223372036854775807"}, {"9223372036854775808"}},
        {R"({"type": "number", "format": "double"})", {"1.5e3"}, {R"("x")"}},
        {R"({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}, "maxItems": 2})",
         {"[1, [2, []]]"},
         {R"([1, ["a"]])"}},
        {R"({"type": "object", "propertyNames": {"enum": ["en", "fr"]}, "required": ["en", "fr"],
             "additionalProperties": {"type": "string"}})",
         {R"({"en": "a", "fr": "b"})"},
         {R"({"en": "a"})", R"({"en": 1, "fr": "b"})"}},
        // RFC 3339 dates: the day exists in its month
        {R"({"type": "string", "format": "date"})",
         {R"("2024-02-29")", R"("2000-02-29")", R"("2023-01-31")", R"("2023-04-30")", R"("0000-02-29")"},
         {R"("2023-02-29")", R"("1900-02-29")", R"("2023-02-30")", R"("2023-04-31")", R"("2023-13-01")"}},
        {R"({"$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"]}},
             "allOf": [{"$ref": "#/$defs/Base"}], "properties": {"name": {"type": "string"}}, "required": ["name"]})",
         {R"({"id": 3, "name": "n"})"},
         {R"({"id": 0, "name": "n"})", R"({"name": "n"})"}},
        {R"({"allOf": [{"description": "just a note"}, {"type": "integer", "maximum": 3}]})", {"3", "-7"}, {"4"}},
        {R"({"type": "string", "format": "email"})",
         {R"("ann.lee+x@mail.example.com")", R"("a@b.co")"},
         {R"("ann@")", R"("@x.com")", R"("a b@x.com")", R"("a@x")", R"("a..b@x.com")"}},
        {R"({"type": "string", "format": "hostname"})",
         {R"("localhost")", R"("a-b.example.org")"},
         {R"("-a.com")", R"("a-.com")", R"("a..b")", R"("a_b.com")"}},
        {R"({"type": "string", "format": "ipv4"})",
         {R"("0.0.0.0")", R"("192.168.1.255")", R"("255.255.255.255")"},
         {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")", R"("1.2.3.4.5")"}},
        {R"({"type": "string", "format": "ipv6"})",
         {R"("2001:db8:0:0:0:0:2:1")", R"("2001:db8::2:1")", R"("::")", R"("::1")", R"("fe80::")",
          R"("1:2:3:4:5:6:7::")"},
         {R"("2001:db8::2::1")", R"("1:2:3:4:5:6:7:8:9")", R"("12345::")", R"(":1")", R"("1:2:3:4:5:6:7:8::")"}},
        {R"({"type": "string", "format": "duration"})",
         {R"("P3Y6M4DT12H30M5S")", R"("PT0.5S")", R"("P1W")", R"("PT2H")"},
         {R"("P")", R"("PT")", R"("P1H")", R"("3Y")", R"("P1DT")"}},
    };
    for (const auto& c : cases) {
        std::string gbnf;
        ASSERT_NO_THROW(gbnf = json_schema_to_gbnf(nlohmann::ordered_json::parse(c.schema))) << c.schema;
        std::shared_ptr<const Grammar> g;
        ASSERT_NO_THROW(g = parse_gbnf(gbnf)) << c.schema << "\n" << gbnf;
        for (const char* doc : c.valid) {
            Matcher m(g);
            EXPECT_TRUE(m.accept_bytes(doc) && m.can_end()) << c.schema << "\n  refused: " << doc << "\n" << gbnf;
        }
        for (const char* doc : c.invalid) {
            Matcher m(g);
            EXPECT_FALSE(m.accept_bytes(doc) && m.can_end()) << c.schema << "\n  accepted: " << doc;
        }
    }
}

TEST(JsonSchema, KeywordsThatWouldBeIgnoredAreRefused) {
    for (const char* s :
         {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": false}]})",
          R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})",
          R"({"type": "string", "enum": ["a"], "maxLength": 3})",
          R"({"$defs": {"S": {"type": "string", "pattern": "a"}}, "$ref": "#/$defs/S", "pattern": "b"})",
          R"({"type": "integer", "format": "int128"})",
          R"({"type": "string", "pattern": "^(a)\\1$"})",
          R"({"type": "string", "pattern": "^a+$", "maxLength": 3})",
          R"({"type": "integer", "multipleOf": 1001})",
          R"({"type": "number", "multipleOf": 0.25})",
          R"({"type": "integer", "multipleOf": 7, "minimum": 3, "maximum": 100000})",
          R"({"type": "integer", "multipleOf": 0})",
          R"({"type": "object", "properties": {"a": {}}, "propertyNames": {"maxLength": 3}})",
          R"({"type": "object", "propertyNames": {"type": "integer"}})",
          R"({"not": {"type": "string"}})",
          R"({"type": "array", "uniqueItems": true})",
          R"({"type": "string", "format": "idn-email"})",
          R"({"allOf": [{"type": "string"}, {"type": "integer"}]})",
          R"({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                                        {"type": "object", "properties": {"a": {"type": "integer"}}}]})",
          R"({"$ref": "https://example.com/s.json"})",
          R"({"$ref": "#/$defs/missing"})",
          R"({"type": "object", "required": ["a"]})",
          R"({"type": "integer", "items": {}})"}) {
        EXPECT_THROW(json_schema_to_gbnf(nlohmann::ordered_json::parse(s)), Error) << s;
    }
    EXPECT_NO_THROW(
        json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"title": "T", "description": "d", "type": "string"})")));
}

// multipleOf against arithmetic: every integer text in a window is accepted exactly when its value is a multiple
// (alone, with bounds that fix the sign, with bounds listing few, and powers of ten with any bounds); numbers with
// multipleOf 10^-k have at most k fraction digits. propertyNames constrains a map's keys.
TEST(JsonSchema, MultipleOfAndPropertyNamesAcceptExactlyWhatTheyShould) {
    auto accepts = [](const std::string& schema, const std::string& text) {
        Matcher m(parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema))));
        return m.accept_bytes(text) && m.can_end();
    };
    struct Case {
        std::string schema;
        int64_t m, lo, hi;
    };
    const Case cases[] = {
        {R"({"type": "integer", "multipleOf": 7})", 7, INT64_MIN, INT64_MAX},
        {R"({"type": "integer", "multipleOf": 12, "minimum": 0})", 12, 0, INT64_MAX},
        {R"({"type": "integer", "multipleOf": 3, "exclusiveMinimum": 0})", 3, 1, INT64_MAX},
        {R"({"type": "integer", "multipleOf": 6, "maximum": -1})", 6, INT64_MIN, -1},
        {R"({"type": "integer", "multipleOf": 5, "minimum": -42, "maximum": 77})", 5, -42, 77},
        {R"({"type": "number", "multipleOf": 4, "minimum": 0.5})", 4, 1, INT64_MAX},
        {R"({"type": "integer", "multipleOf": 100})", 100, INT64_MIN, INT64_MAX},
        {R"({"type": "integer", "multipleOf": 10, "minimum": -15, "maximum": 1234})", 10, -15, 1234},
        {R"({"type": "integer", "multipleOf": 1000, "minimum": 1})", 1000, 1, INT64_MAX},
    };
    for (const auto& c : cases) {
        const auto g = parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(c.schema)));
        for (int64_t v = -2100; v <= 2100; v++) {
            Matcher m(g);
            const bool want = v % c.m == 0 && v >= c.lo && v <= c.hi;
            ASSERT_EQ(m.accept_bytes(std::to_string(v)) && m.can_end(), want) << c.schema << " " << v;
        }
        Matcher lead(g);
        EXPECT_FALSE(lead.accept_bytes("07") && lead.can_end()) << c.schema;
    }
    EXPECT_TRUE(accepts(R"({"type": "integer", "multipleOf": 7})", "700000000000007"));
    EXPECT_FALSE(accepts(R"({"type": "integer", "multipleOf": 7})", "700000000000008"));
    EXPECT_TRUE(accepts(R"({"type": "integer", "multipleOf": 0.5})", "3"));  // every integer is a multiple of 1/2
    const std::string cents = R"({"type": "number", "multipleOf": 0.01})";
    for (const char* ok : {"1", "-3.5", "0.25", "1200.07"}) EXPECT_TRUE(accepts(cents, ok)) << ok;
    for (const char* bad : {"0.125", "1e2", "1.001"}) EXPECT_FALSE(accepts(cents, bad)) << bad;
    const std::string price = R"({"type": "number", "multipleOf": 0.01, "exclusiveMinimum": 0, "maximum": 10})";
    for (const char* ok : {"0.01", "9.99", "10", "10.00", "3"}) EXPECT_TRUE(accepts(price, ok)) << ok;
    for (const char* bad : {"0", "0.00", "10.01", "0.001", "-1"}) EXPECT_FALSE(accepts(price, bad)) << bad;
    const std::string map =
        R"({"type": "object", "propertyNames": {"maxLength": 3}, "additionalProperties": {"type": "integer"}})";
    for (const char* ok : {"{}", R"({"ab": 1})", R"({"ab": 1, "xyz": 2})"}) EXPECT_TRUE(accepts(map, ok)) << ok;
    for (const char* bad : {R"({"abcd": 1})", R"({"ab": "1"})"}) EXPECT_FALSE(accepts(map, bad)) << bad;
    const std::string names = R"({"type": "object", "propertyNames": {"enum": ["x", "y"]}})";
    EXPECT_TRUE(accepts(names, R"({"x": [1], "y": null})"));
    EXPECT_FALSE(accepts(names, R"({"z": 1})"));
    EXPECT_TRUE(accepts(R"({"type": "object", "propertyNames": false})", "{}"));
    EXPECT_FALSE(accepts(R"({"type": "object", "propertyNames": false})", R"({"a": 1})"));
    EXPECT_TRUE(accepts(R"({"type": "array", "uniqueItems": false})", "[1, 1]"));
    // pattern (grammar/regex_gbnf.h has its own tests): in a schema, for values and for a map's keys
    const std::string zip =
        R"({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}},
                                "required": ["zip"]})";
    for (const char* ok : {R"({"zip": "12345"})", R"({"zip": "12345-6789"})"}) EXPECT_TRUE(accepts(zip, ok)) << ok;
    for (const char* bad : {R"({"zip": "1234"})", R"({"zip": "12345-"})", R"({"zip": 12345})"})
        EXPECT_FALSE(accepts(zip, bad)) << bad;
    EXPECT_TRUE(accepts(R"({"pattern": "b"})", R"("abc")"));  // search semantics; the keyword implies a string
    EXPECT_FALSE(accepts(R"({"pattern": "b"})", R"("ac")"));
    const std::string keys = R"({"type": "object", "propertyNames": {"pattern": "^x-"}, "additionalProperties": true})";
    EXPECT_TRUE(accepts(keys, R"({"x-a": 1, "x-": {}})"));
    EXPECT_FALSE(accepts(keys, R"({"y": 1})"));
}

// Numeric bounds (grammar/numeric_range.h) against arithmetic: every integer text in a window, and decimal texts
// around each bound, are accepted exactly when their value lies within the bounds, for inclusive and exclusive
// ends, negative, zero-crossing and int64-edge ranges.
TEST(JsonSchema, NumericBoundsAcceptExactlyTheValuesWithin) {
    auto accepts_g = [](const std::shared_ptr<const Grammar>& g, const std::string& text) {
        Matcher m(g);
        return m.accept_bytes(text) && m.can_end();
    };
    auto accepts = [&](const std::string& gbnf, const std::string& text) { return accepts_g(parse_gbnf(gbnf), text); };
    const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 9}, {1, 100},   {-50, 50}, {-250, -13},  {7, 7},
                                                             {0, 0}, {95, 1234}, {-1, 0},   {-1000, 999}, {10, 19}};
    for (auto [lo, hi] : ranges) {
        const std::string text = "root ::= " + integer_range_gbnf(lo, hi) + "\n";
        const auto g = parse_gbnf(text);
        for (int64_t v = -1300; v <= 1300; v++)
            ASSERT_EQ(accepts_g(g, std::to_string(v)), v >= lo && v <= hi) << lo << ".." << hi << " " << v << "\n"
                                                                           << text;
        EXPECT_FALSE(accepts_g(g, "01")) << "no leading zeros";
        EXPECT_FALSE(accepts_g(g, "-0")) << "no negative zero";
    }
    const std::string edge = "root ::= " + integer_range_gbnf(INT64_MIN, INT64_MAX) + "\n";
    for (const char* t : {"9223372036854775807", "-9223372036854775808", "0", "-1"}) EXPECT_TRUE(accepts(edge, t)) << t;
    for (const char* t : {"9223372036854775808", "-9223372036854775809"}) EXPECT_FALSE(accepts(edge, t)) << t;
    // decimals: value within (lo, hi) with each end inclusive or exclusive, or open
    const std::vector<std::string> texts = {"-3.5",  "-3",   "-3.0", "-2.99", "-2",   "-1.5", "-1",
                                            "-0.5",  "-0.0", "0",    "0.0",   "0.25", "1",    "1.0",
                                            "1.001", "2",    "2.5",  "3",     "3.00", "3.5",  "10"};
    for (int64_t a : {-3, -1, 0, 1}) {
        for (int64_t b : {-1, 0, 1, 3}) {
            for (int ends = 0; ends < 16; ends++) {
                std::optional<Bound> lo, hi;
                if (ends & 1) lo = Bound{a, bool(ends & 2)};
                if (ends & 4) hi = Bound{b, bool(ends & 8)};
                const std::string body = number_range_gbnf(lo, hi);
                const auto g = body.empty() ? nullptr : parse_gbnf("root ::= " + body + "\n");
                for (const std::string& t : texts) {
                    const double v = std::stod(t);
                    const bool in = (!lo || (lo->exclusive ? v > double(a) : v >= double(a))) &&
                                    (!hi || (hi->exclusive ? v < double(b) : v <= double(b)));
                    const bool got = g && accepts_g(g, t);
                    // "-0.0" is zero: within the bounds exactly when 0 is; tandem never writes it for a negative
                    if (t == "-0.0") continue;
                    ASSERT_EQ(got, in) << (lo ? (lo->exclusive ? "(" : "[") + std::to_string(a) : "(-inf") << ", "
                                       << (hi ? std::to_string(b) + (hi->exclusive ? ")" : "]") : "inf)") << " " << t
                                       << "\n"
                                       << body;
                }
            }
        }
    }
    // through the schema converter: OpenAI's and zod's shapes, draft 4's boolean exclusives, untyped bounds
    struct Case {
        const char* schema;
        std::vector<const char*> valid, invalid;
    };
    const Case cases[] = {
        {R"({"type": "integer", "minimum": 0, "maximum": 9})", {"0", "5", "9"}, {"-1", "10", "5.5", "05"}},
        {R"({"type": "integer", "exclusiveMinimum": 0})", {"1", "123456"}, {"0", "-3"}},
        {R"({"type": "integer", "minimum": 1.5, "maximum": 4.5})", {"2", "4"}, {"1", "5"}},
        {R"({"type": "integer", "minimum": 3, "exclusiveMinimum": true})", {"4"}, {"3"}},
        {R"({"type": "number", "exclusiveMinimum": 0})", {"0.001", "3", "12.5"}, {"0", "-0.5", "0.0"}},
        {R"({"type": "number", "minimum": -1, "maximum": 1})", {"-1", "-0.5", "0", "1", "1.0"}, {"1.5", "-1.01", "2"}},
        {R"({"minimum": 10})", {"10", "11.5"}, {"9.99", "\"x\""}},
        {R"({"maxLength": 2})", {R"("ab")"}, {R"("abc")", "1"}},
    };
    for (const auto& c : cases) {
        std::string gbnf;
        ASSERT_NO_THROW(gbnf = json_schema_to_gbnf(nlohmann::ordered_json::parse(c.schema))) << c.schema;
        for (const char* doc : c.valid) EXPECT_TRUE(accepts(gbnf, doc)) << c.schema << " refused " << doc;
        for (const char* doc : c.invalid) EXPECT_FALSE(accepts(gbnf, doc)) << c.schema << " accepted " << doc;
    }
    for (const char* s : {R"({"type": "integer", "minimum": 5, "maximum": 4})", R"({"type": "number", "maximum": 2.5})",
                          R"({"type": "integer", "minimum": "3"})", R"({"type": "integer", "maximum": 1e30})"})
        EXPECT_THROW(json_schema_to_gbnf(nlohmann::ordered_json::parse(s)), Error) << s;
}

// Schema numbers are counts, checked as such (issue 26, defect 8: 2^32 became 0, 1e18 unbounded, 1.5 was 1), and
// the grammar of many optional properties grows linearly (defect 3: 3,000 of them took 647 MB, 6,000 a bad_alloc).
TEST(JsonSchema, CountsAreCheckedAndManyPropertiesStayLinear) {
    for (const char* s : {R"({"type": "string", "minLength": 4294967296})", R"({"type": "string", "maxLength": 1e18})",
                          R"({"type": "string", "minLength": 1.5})", R"({"type": "string", "minLength": -1})",
                          R"({"type": "string", "minLength": "2"})", R"({"type": "array", "maxItems": 4294967297})",
                          R"({"type": "string", "minLength": 3, "maxLength": 2})",
                          R"({"type": "object", "properties": {"a": {}}, "required": "a"})",
                          R"({"type": "object", "properties": [], "required": []})",
                          R"({"type": "object", "properties": {"a": {}}, "required": [1]})"})
        EXPECT_THROW(json_schema_to_gbnf(nlohmann::ordered_json::parse(s)), Error) << s;
    EXPECT_NO_THROW(json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "string", "minLength": 2.0})")));
    for (int n : {3000, 6000}) {
        nlohmann::ordered_json props = nlohmann::ordered_json::object();
        for (int i = 0; i < n; i++) props["p" + std::to_string(i)] = {{"type", "integer"}};
        const std::string gbnf = json_schema_to_gbnf({{"type", "object"}, {"properties", props}});
        EXPECT_LT(gbnf.size(), size_t(n) * 200)
            << n << " optional properties: a grammar of " << gbnf.size() << " bytes";
        if (n == 3000) {
            Matcher m(parse_gbnf(gbnf));
            EXPECT_TRUE(m.accept_bytes(R"({"p1": 1, "p7": 2, "p2999": 3})") && m.can_end());
            Matcher wrong(parse_gbnf(gbnf));
            EXPECT_FALSE(wrong.accept_bytes(R"({"p7": 1, "p1": 2})") && wrong.can_end());
        } else {  // past the grammar's rule bound: a clear error (a 400), not gigabytes and a bad_alloc
            try {
                parse_gbnf(gbnf);
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
            }
        }
    }
}

// A request's grammar cannot exhaust the stack or memory: deep nesting, huge repetitions and explosive
// ambiguity are errors (the server answers 400).
TEST(Grammar, HostileGrammarsAreErrors) {
    EXPECT_THROW(parse_gbnf("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')), Error);
    EXPECT_THROW(parse_gbnf("root ::= \"a\"{0,100000}"), Error);
    {  // nested recursion grows the parse stack by one rule per character: bounded
        Matcher m(parse_gbnf("root ::= \"x\" root \"y\" | \"\""));
        EXPECT_THROW(m.accept_bytes(std::string(3000, 'x')), Error);
    }
    {  // tail recursion (x*, long strings) does not grow it
        Matcher m(parse_gbnf("root ::= \"x\" root | \"\""));
        EXPECT_TRUE(m.accept_bytes(std::string(20000, 'x')));
        Matcher j(parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "string"})"))));
        EXPECT_TRUE(j.accept_bytes("\"" + std::string(10000, 'a') + "\""));
        EXPECT_TRUE(j.can_end());
    }
    // a long but plain grammar is fine
    Matcher ok(parse_gbnf("root ::= [a-z]{0,1000}"));
    EXPECT_TRUE(ok.accept_bytes(std::string(900, 'q')));
    nlohmann::ordered_json deep = {{"type", "string"}};
    for (int i = 0; i < 100; i++) deep = {{"type", "array"}, {"items", deep}};
    EXPECT_THROW(json_schema_to_gbnf(deep), Error);
}

namespace {
// The vocabulary of stories260K as the constraint sees it, for the grammar-bound tests.
struct SmallVocab {
    std::unique_ptr<Tokenizer> tok;
    std::vector<std::string> pieces;
    SmallVocab() {
        auto f = GgufFile::open(test::shared_file("models/stories260K.gguf"));
        tok = Tokenizer::from_gguf(*f);
        pieces.resize(size_t(tok->n_vocab()));
        for (int32_t id = 0; id < tok->n_vocab(); id++)
            if (tok->token_attr(id) != TokenAttr::CONTROL) pieces[size_t(id)] = tok->token_to_piece(id, false);
    }
};
std::string what_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const GrammarLimit& e) {
        return e.what();
    }
    return "(no GrammarLimit)";
}
}  // namespace

// Issue 26, defects 1 and 4: small grammars that made the matcher take the engine's time and memory end at a
// named bound instead (the server answers 400 before the engine sees them: FrontEnd::constrain checks the first
// mask). Before the bounds: the first took 11 s and 625 MB for 4 tokens, the chain overflowed the stack.
TEST(Grammar, GrammarsPastTheMatchersBoundsEndAtANamedBound) {
    SmallVocab v;
    VocabTrie trie(v.pieces);
    auto chain = [](int depth, int alternatives) {  // c0 ::= c1 "q" ... : deep stacks, many of them
        std::string g = "root ::= c0\n";
        for (int i = 0; i < depth; i++) g += strprintf("c%d ::= c%d \"q\"\n", i, i + 1);
        g += strprintf("c%d ::= [a-z ]{30} \"N\"", depth);
        for (int a = 1; a < alternatives; a++) g += " | [a-z ]{30} \"N\"";
        return g + "\n";
    };
    const auto big = parse_gbnf(chain(500, 4000));
    EXPECT_NE(what_of([&] { Matcher m(big); }).find("the bound is 262144"), std::string::npos);
    const auto under = parse_gbnf(chain(500, 500));  // 250,000 positions: a state within the bound, masks past it
    EXPECT_NE(what_of([&] {
                  Matcher m(under);
                  MaskMemo memo;
                  std::vector<uint8_t> mask;
                  trie.allowed(m, v.tok->eog_ids(), mask, &memo);
              }).find("16777216 rule-position steps"),
              std::string::npos);
    // 19,000 rules that each match empty, referred to 2,500 times per alternative: linear to parse, and a bound
    // on the positions visited for one character
    std::string g = "root ::= big\nbig ::= ";
    for (int a = 0; a < 40; a++) {
        if (a) g += " | ";
        for (int k = 0; k < 2500; k++) g += "n0 ";
        g += "\"x\"";
    }
    g += "\n";
    for (int i = 0; i < 19000; i++) g += strprintf("n%d ::= n%d\n", i, i + 1);
    g += "n19000 ::= \"\"\n";
    const auto nullable = parse_gbnf(g);
    EXPECT_NE(what_of([&] { Matcher m(nullable); }).find("rule positions visited for one character"),
              std::string::npos);
    // a JSON schema's masks stay far below the bound
    const auto js = parse_gbnf(json_object_gbnf());
    Matcher m(js);
    MaskMemo memo;
    std::vector<uint8_t> mask;
    for (const char* text : {"{", "\"ab", "\": [1, ", "{\"x\": \"y\"}"}) {
        ASSERT_TRUE(m.accept_bytes(text)) << text;
        EXPECT_NO_THROW(trie.allowed(m, v.tok->eog_ids(), mask, &memo));
    }
}

// Issue 26, defect 7: what a grammar lets through is text (Unicode scalar values in UTF-8), and a grammar that
// allows no token is an error, never an output outside its rules.
TEST(Grammar, OutputIsAlwaysValidUtf8AndAGrammarThatAllowsNothingIsAnError) {
    const auto none = parse_gbnf("root ::= [^\\x00-\\U0010FFFF]");
    Matcher m(none);
    EXPECT_FALSE(m.accept_bytes("\xF4\xB4\x80\x80"));  // would decode past U+10FFFF
    EXPECT_FALSE(m.accept_bytes("\xF4\xB4"));  // cannot become a scalar value
    const auto any = parse_gbnf("root ::= .");
    Matcher a(any);
    EXPECT_FALSE(a.accept_bytes("\xED\xA0\x80"));  // a surrogate half
    EXPECT_FALSE(a.accept_bytes("\xED\xA0"));
    EXPECT_TRUE(a.accept_bytes("\xED\x9F"));  // U+D7C0..U+D7FF are fine
    EXPECT_TRUE(a.accept_bytes("\xBF") && a.can_end());
    EXPECT_FALSE(a.accept(0xD800));
    EXPECT_FALSE(Matcher(any).accept(0x110000));
    // the vocabulary walk: a byte token of F4 B4 80 80 is never allowed
    VocabTrie trie({"\xF4\xB4\x80\x80", "\xF4", "\x8F\xBF\xBF", "a"});
    std::vector<uint8_t> mask;
    trie.allowed(m, {}, mask);
    EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 0, 0}));
    Matcher ok(any);
    trie.allowed(ok, {}, mask);
    EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 0, 1}));  // F4 may begin U+10xxxx; a lone continuation never
    // the constraint: no token allowed is a GrammarLimit (a 400), for the first token and later ones
    SmallVocab v;
    ConstraintVocab cv(*v.tok);
    auto c = cv.constrain(none);
    ConstraintState s(*c);
    MaskMemo memo;
    EXPECT_NE(what_of([&] { s.allowed(*c, memo, mask, v.tok->n_vocab()); }).find("no token can continue"),
              std::string::npos);
    auto later = cv.constrain(parse_gbnf("root ::= \"a\" [^\\x00-\\U0010FFFF]"));
    ConstraintState t(*later);
    const auto a_id = std::find(v.pieces.begin(), v.pieces.end(), "a") - v.pieces.begin();
    ASSERT_LT(size_t(a_id), v.pieces.size());
    ASSERT_TRUE(t.advance(*later, int32_t(a_id)));
    EXPECT_NE(what_of([&] { t.allowed(*later, memo, mask, v.tok->n_vocab()); }).find("no token can continue"),
              std::string::npos);
}
