#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "tandem/gguf.h"
#include "tandem/tokenizer.h"
#include "test_util.h"

using namespace tandem;

namespace {

struct Vector {
    std::string text;
    std::vector<int32_t> ids;
};

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
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                           "ggml-vocab-starcoder.gguf", "ggml-vocab-falcon.gguf",
                                           "ggml-vocab-gpt-neox.gguf", "ggml-vocab-mpt.gguf",
                                           "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-llama-bpe.gguf",
                                           "ggml-vocab-qwen2.gguf", "ggml-vocab-qwen35.gguf",
                                           "ggml-vocab-command-r.gguf", "ggml-vocab-phi-3.gguf",
                                           "ggml-vocab-gemma-4.gguf"),
                         test::ParamName());

// Special tokens that swallow whitespace (llama.cpp's RSTRIP, set by model name for phi-3): with special-token
// parsing, "</s> hello" is </s> then "hello" with the space prefix. Expected ids from llama.cpp 2026-09:
//   llama-tokenize -m ggml-vocab-phi-3.gguf -f TEXT --ids --no-bos --no-escape
TEST(Tokenizer, Phi3SpecialTokensStripTheSpaceAfterThem) {
    auto tok = Tokenizer::from_gguf(*GgufFile::open(test::shared_file("tokenizer-tests/ggml-vocab-phi-3.gguf")));
    const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
        {"Hi</s> hello <|end|> there", {6324, 2, 22172, 29871, 32007, 727}},
        {"<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>",
         {32010, 1724, 338, 29871, 29906, 29974, 29906, 29973, 32007, 32001}},
        {"a <s> b <unk> c <|endoftext|> d",
         {263, 29871, 1, 29871, 289, 29871, 0, 29871, 274, 29871, 32000, 29871, 270}},
        {"x<|end|>   \n  y", {921, 32007, 343}},
    };
    for (const auto& [text, ids] : cases) EXPECT_EQ(show(tok->encode(text, false, true)), show(ids)) << text;
}

// GLM-4 / GLM-4.5 ("glm4", "chatglm-bpe"): llama.cpp drops <bos> whatever the file declares, and splits as
// llama3 does but merges every piece (no llama3-style whole-token shortcut). The llama-bpe vocabulary renamed.
TEST(Tokenizer, Glm4HasNoBos) {
    auto f = GgufFile::open(test::shared_file("tokenizer-tests/ggml-vocab-llama-bpe.gguf"));
    auto with_pre = [&](const char* pre) {  // the vocabulary with this pre-tokenizer, declaring add_bos_token
        const std::string path = test::temp_dir() + "/ggml-vocab-bos-" + pre + ".gguf";
        GgufWriter w;
        for (const auto& [k, v] : f->metadata()) w.set(k, v);
        w.set("tokenizer.ggml.pre", GgufValue::of_str(pre));
        w.set("tokenizer.ggml.add_bos_token", GgufValue::of_bool(true));
        w.begin(path);
        w.finish();
        return Tokenizer::from_gguf(*GgufFile::open(path));
    };
    auto llama = with_pre("llama-bpe"), glm = with_pre("glm4");
    const std::string text = "Hello world, it's 2026!";
    auto with_bos = llama->encode(text, true, false);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], llama->bos());
    EXPECT_EQ(glm->bos(), -1);
    EXPECT_EQ(show(glm->encode(text, true, false)), show(llama->encode(text, false, false)));
}

// Pre-tokenizers without a vocab file of their own, on a shared vocabulary with only tokenizer.ggml.pre renamed:
// DeepSeek V3/R1's ("deepseek-v3") on deepseek-llm's, Llama 4's ("llama4", llama.cpp's GPT-4o split) on
// llama-bpe's. The expected ids come from llama.cpp's llama-tokenize on the same renamed file
// (scripts/make-pretokenizer-vectors.py); the default split gets many of them wrong.
struct PreCase {
    const char* pre;
    const char* vocab;
};
void PrintTo(const PreCase& c, std::ostream* os) { *os << c.pre; }
class PreTokenizerVectors : public ::testing::TestWithParam<PreCase> {};

TEST_P(PreTokenizerVectors, MatchLlamaCpp) {
    const PreCase c = GetParam();
    const std::string src = test::shared_file(std::string("tokenizer-tests/") + c.vocab);
    auto f = GgufFile::open(src);
    const std::string path = test::temp_dir() + "/ggml-vocab-" + c.pre + ".gguf";
    {
        GgufWriter w;
        for (const auto& [k, v] : f->metadata()) w.set(k, v);
        w.set("tokenizer.ggml.pre", GgufValue::of_str(c.pre));
        w.begin(path);
        w.finish();
    }
    auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
    EXPECT_EQ(tok->pre_name(), c.pre);
    auto vectors = load_vectors(c.vocab);
    std::istringstream want(
        test::read_file(std::string(TANDEM_SOURCE_DIR) + "/tests/data/tokenizer/" + c.pre + ".out"));
    std::string line;
    int n_ok = 0, n = 0;
    for (const auto& v : vectors) {
        ASSERT_TRUE(std::getline(want, line)) << c.pre << ".out has fewer lines than the test strings";
        std::vector<int32_t> ids;
        std::istringstream ls(line);
        for (int32_t id; ls >> id;) ids.push_back(id);
        auto got = tok->encode(v.text, false, false);
        EXPECT_EQ(show(got), show(ids)) << "text '" << v.text << "'";
        EXPECT_EQ(tok->decode(got), v.text);
        n_ok += got == ids;
        n++;
    }
    std::printf("[ %s ] %d/%d vectors exact\n", c.pre, n_ok, n);
}

INSTANTIATE_TEST_SUITE_P(Renamed, PreTokenizerVectors,
                         ::testing::Values(PreCase{"deepseek-v3", "ggml-vocab-deepseek-llm.gguf"},
                                           PreCase{"llama4", "ggml-vocab-llama-bpe.gguf"}),
                         [](const auto& info) {
                             std::string n = info.param.pre;
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });