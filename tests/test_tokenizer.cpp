#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "tandem/gguf.h"
#include "tandem/tokenizer.h"
#include "test_util.h"

using namespace tandem;

namespace {

struct Vector { std::string text; std::vector<int32_t> ids; };

// Reads llama.cpp's tokenizer conformance vectors: strings separated by "\n__ggml_vocab_test__\n" and one line
// of expected ids per string.
std::vector<Vector> load_vectors(const std::string& vocab) {
    std::string inp = test::read_file(test::shared_file("tokenizer-tests/" + vocab + ".inp"));
    std::string out = test::read_file(test::shared_file("tokenizer-tests/" + vocab + ".out"));
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t start = 0;
    for (;;) {
        size_t p = inp.find(sep, start);
        if (p == std::string::npos) break;
        texts.push_back(inp.substr(start, p - start));
        start = p + sep.size();
    }
    std::vector<Vector> v;
    std::istringstream lines(out);
    std::string line;
    for (const auto& t : texts) {
        if (!std::getline(lines, line)) break;
        Vector x{t, {}};
        std::istringstream ls(line);
        int32_t id;
        while (ls >> id) x.ids.push_back(id);
        v.push_back(std::move(x));
    }
    EXPECT_EQ(v.size(), texts.size()) << vocab << ": .inp and .out disagree in length";
    return v;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t i : ids) s += std::to_string(i) + " ";
    return s;
}

}  // namespace

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, IdsAndRoundTripMatchReference) {
    const std::string vocab = GetParam();
    auto f = GgufFile::open(test::shared_file("tokenizer-tests/" + vocab));
    auto tok = Tokenizer::from_gguf(*f);
    auto vectors = load_vectors(vocab);
    ASSERT_GT(vectors.size(), 10u);
    int n_ok = 0;
    for (const auto& v : vectors) {
        auto ids = tok->encode(v.text, false, false);
        EXPECT_EQ(show(ids), show(v.ids)) << vocab << ": text '" << v.text << "'";
        EXPECT_EQ(tok->decode(ids), v.text) << vocab << ": round trip of '" << v.text << "'";
        // Streaming detokenization gives the same text in chunks that are each valid UTF-8.
        TextStreamer ts(*tok, true);
        std::string streamed;
        for (int32_t id : ids) {
            std::string chunk = ts.push(id);
            if (utf8_is_valid(v.text)) {
                EXPECT_TRUE(utf8_is_valid(chunk)) << "chunk splits a character";
            }
            streamed += chunk;
        }
        streamed += ts.flush();
        EXPECT_EQ(streamed, v.text);
        n_ok += ids == v.ids;
    }
    std::printf("[ %s ] %d/%zu vectors exact\n", vocab.c_str(), n_ok, vectors.size());
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, TokenizerVectors,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                                           "ggml-vocab-falcon.gguf", "ggml-vocab-gpt-neox.gguf", "ggml-vocab-mpt.gguf",
                                           "ggml-vocab-deepseek-llm.gguf"),
                         test::ParamName());

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
    auto f = GgufFile::open(test::shared_file("models/stories260K.gguf"));
    auto tok = Tokenizer::from_gguf(*f);
    auto plain = tok->encode("<s>hi", false, false);
    auto special = tok->encode("<s>hi", false, true);
    EXPECT_NE(plain[0], tok->bos());
    ASSERT_FALSE(special.empty());
    EXPECT_EQ(special[0], tok->bos());
    auto with_bos = tok->encode("hi", true, false);
    EXPECT_EQ(with_bos[0], tok->bos());
    EXPECT_TRUE(tok->add_bos());
    EXPECT_TRUE(tok->is_eog(tok->eos()));
    EXPECT_TRUE(tok->encode("", false, false).empty());
    EXPECT_EQ(tok->encode("", true, false), std::vector<int32_t>{tok->bos()});
}

TEST(Tokenizer, ByteFallbackAndStreamingOfMultiByteCharacters) {
    auto f = GgufFile::open(test::shared_file("models/stories260K.gguf"));
    auto tok = Tokenizer::from_gguf(*f);  // 512-token vocab: most non-ASCII falls back to bytes
    const std::string text = "héllo 世界 🙂";
    auto ids = tok->encode(text, false, false);
    EXPECT_EQ(tok->decode(ids), text);
    TextStreamer ts(*tok, true);
    std::string out;
    for (int32_t id : ids) {
        std::string c = ts.push(id);
        EXPECT_TRUE(utf8_is_valid(c));
        out += c;
    }
    EXPECT_EQ(out + ts.flush(), text);
}

TEST(Tokenizer, Utf8Helpers) {
    EXPECT_TRUE(utf8_is_valid("abc\xC3\xA9"));
    EXPECT_FALSE(utf8_is_valid("\xC3"));
    EXPECT_FALSE(utf8_is_valid("\xED\xA0\x80"));  // surrogate
    EXPECT_FALSE(utf8_is_valid("\xC0\xAF"));      // overlong
    EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8"), 2u);
    EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8\x96"), 5u);
}

TEST(Tokenizer, RandomBytesNeverCrashAndValidUtf8RoundTrips) {
    std::mt19937 rng(2024);
    for (const char* vocab : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
        auto f = GgufFile::open(test::shared_file(std::string("tokenizer-tests/") + vocab));
        auto tok = Tokenizer::from_gguf(*f);
        int n_valid = 0;
        for (int i = 0; i < 400; i++) {
            std::string s(std::uniform_int_distribution<size_t>(0, 40)(rng), '\0');
            // Mix of ASCII, arbitrary bytes and well-formed multi-byte characters.
            for (auto& c : s) c = char(rng() % 3 == 0 ? rng() : 32 + rng() % 95);
            if (i % 2) s += "\xE4\xB8\x96\xF0\x9F\x99\x82 <s> ";
            auto ids = tok->encode(s, true, i % 4 == 0);
            for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
            std::string back = tok->decode(tok->encode(s, false, false));
            if (utf8_is_valid(s)) {
                n_valid++;
                EXPECT_EQ(back, s) << vocab;
            }
        }
        EXPECT_GT(n_valid, 20);
    }
}

TEST(Tokenizer, BpeControlTokensOnlyWhenAsked) {
    auto f = GgufFile::open(test::shared_file("tokenizer-tests/ggml-vocab-gpt-2.gguf"));
    auto tok = Tokenizer::from_gguf(*f);
    const int32_t eot = tok->find_token("<|endoftext|>");
    ASSERT_GE(eot, 0);
    auto plain = tok->encode("a<|endoftext|>b", false, false);
    auto special = tok->encode("a<|endoftext|>b", false, true);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
    EXPECT_EQ(std::count(special.begin(), special.end(), eot), 1);
    EXPECT_EQ(tok->decode(plain), "a<|endoftext|>b");
    EXPECT_TRUE(tok->is_eog(eot));
    EXPECT_FALSE(tok->add_bos());
}
