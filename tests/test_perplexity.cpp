// evaluate_perplexity (tandem perplexity): the figures llama-perplexity prints for the same model, text and cache
// type, and the divergence a quantized KV cache brings against f16.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <nlohmann/json.hpp>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/perplexity.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"
#include "test_util.h"

using namespace tandem;

namespace {

// tests/data/perplexity: text stories260K wrote, and llama.cpp's running perplexity of it in chunks of 256 with
// each cache type (scripts/llama-reference/perplexity.sh; printed to 4 decimals).
TEST(Perplexity, MatchesLlamaCpp) {
    const std::string dir = std::string(TANDEM_SOURCE_DIR) + "/tests/data/perplexity/";
    const auto ref = nlohmann::json::parse(test::read_file(dir + "stories260K-samples.llama.json"));
    auto model = Model::load(test::shared_file("models/stories260K.gguf"));
    auto tok = Tokenizer::from_gguf(model->gguf());
    const auto tokens = tok->encode(test::read_file(dir + "stories260K-samples.txt"), true, false);
    ThreadPool pool(1);
    for (const char* type : {"f16", "f32", "bf16"}) {
        PerplexityParams p;
        p.n_ctx = ref["n_ctx"].get<int>();
        p.bos = tok->add_bos() ? tok->bos() : -1;
        p.test.type_k = p.test.type_v = parse_kv_cache_type(type, "test");
        std::vector<double> running;
        const PerplexityResult r =
            evaluate_perplexity(model, pool, tokens, p, [&](const ChunkScore& c) { running.push_back(c.ppl_test); });
        const auto want = ref["running_ppl"][type].get<std::vector<double>>();
        ASSERT_EQ(running.size(), want.size()) << type;
        double worst = 0;
        for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::fabs(running[i] - want[i]));
        std::printf(
            "perplexity of the stories260K samples, %s cache: tandem %.5f, llama.cpp %.4f (largest running "
            "difference %.5f)\n",
            type, r.ppl_test(), want.back(), worst);
        // 0.00005 of rounding, the rest float sums in another order; llama.cpp rounds the query to the cache's type
        // for its dot products (bf16 keeps 8 bits of mantissa), tandem keeps it in f32
        EXPECT_LT(worst, std::string(type) == "bf16" ? 0.002 : 0.0006) << type;
        EXPECT_EQ(r.n_scored, int64_t(want.size()) * (p.n_ctx / 2 - 1));
    }
}

// A quantized cache moves the predictions of a model whose head size admits block types (tiny-ref-smollm3: 64),
// a coarser one further; f16 against itself not at all.
TEST(Perplexity, QuantizedCacheDivergesFromF16ByItsPrecision) {
    auto model = Model::load(test::synth_file("tiny-ref-smollm3", "Q8_0"));
    const int n_vocab = model->hparams().n_vocab;
    std::vector<int32_t> tokens;
    for (int i = 0; i < 2 * 128; i++) tokens.push_back(3 + int((int64_t(i) * 7919) % (n_vocab - 3)));
    ThreadPool pool(2);
    auto run = [&](const char* type) {
        PerplexityParams p;
        p.n_ctx = 128;
        p.test.type_k = p.test.type_v = parse_kv_cache_type(type, "test");
        p.compare = true;
        const PerplexityResult r = evaluate_perplexity(model, pool, tokens, p, {});
        std::printf(
            "tiny-ref-smollm3, %s cache against f16: KLD mean %.3g, largest %.3g, same argmax %.1f%%, "
            "largest logit difference %.3g\n",
            type, r.kld_mean, r.kld_max, 100 * r.same_top1, r.max_logit_diff);
        return r;
    };
    const PerplexityResult same = run("f16"), q8 = run("q8_0"), q4 = run("q4_0");
    EXPECT_EQ(same.kld_max, 0.0);
    EXPECT_EQ(same.same_top1, 1.0);
    EXPECT_EQ(same.nll_test, same.nll_base);
    EXPECT_GT(q8.kld_mean, 0.0);
    EXPECT_GT(q4.kld_mean, 4 * q8.kld_mean);
    EXPECT_LT(q8.kld_mean, 1e-3);
    EXPECT_GT(q8.same_top1, 0.9);  // random weights: flat distributions whose near-ties flip
    EXPECT_GT(q8.same_top1, q4.same_top1);
    EXPECT_EQ(q8.nll_base, same.nll_base);  // the base run is the same whatever is tested
}

TEST(Perplexity, TextShorterThanAChunkIsAnError) {
    auto model = Model::load(test::shared_file("models/stories260K.gguf"));
    ThreadPool pool(1);
    PerplexityParams p;
    p.n_ctx = 256;
    EXPECT_THROW(evaluate_perplexity(model, pool, std::vector<int32_t>(100, 5), p, {}), Error);
}

}  // namespace
