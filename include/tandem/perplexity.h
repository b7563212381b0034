// Perplexity over a text, and how far a KV cache type moves the model's predictions from a base type (issue 31:
// what a q8_0 or q4_0 cache costs in quality), as llama.cpp's llama-perplexity measures them.
//
// The text's tokens are cut into chunks of n_ctx; each chunk runs from an empty cache as one pass (every row's
// K and V go through the cache, so its type shapes every attention read), its first token replaced by BOS when
// the model adds one, and the predictions of its second half are scored (rows n_ctx/2 .. n_ctx-2 predicting the
// next token), as llama-perplexity does: the figures compare with its output on the same file and text.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/session.h"

namespace tandem {

struct PerplexityParams {
    int n_ctx = 512;  // tokens per chunk (>= 4)
    int max_chunks = 0;  // 0: every whole chunk of the text
    int32_t bos = -1;  // the token that replaces each chunk's first one; -1: keep it
    SessionParams test;  // the cache under test (type_k / type_v); n_ctx and n_batch are set per chunk
    bool compare = false;  // also run `base` on the same chunks and report the divergence from it
    SessionParams base;  // the reference cache (f16 as llama.cpp's default)
};

struct ChunkScore {
    int chunk = 0;
    double ppl_test = 0, ppl_base = 0;  // running perplexity over the chunks so far
};

struct PerplexityResult {
    int n_chunks = 0;
    int64_t n_scored = 0;  // predictions scored
    double nll_test = 0;  // mean negative log-likelihood of the next token (natural log)
    double nll_base = 0;  // the same under `base` (when compare)
    double ppl_test() const;
    double ppl_base() const;
    // Divergence of the test cache's next-token distribution from the base cache's, over the scored rows
    // (when compare): KL(base || test) mean and largest, the share of rows whose argmax agrees, and the largest
    // absolute difference of a logit.
    double kld_mean = 0, kld_max = 0, same_top1 = 0, max_logit_diff = 0;
};

// Throws tandem::Error when the text holds fewer than n_ctx tokens or a cache type does not suit the model.
// `progress` (may be empty) is called after each chunk.
PerplexityResult evaluate_perplexity(const std::shared_ptr<const Model>& model, ThreadPool& pool,
                                     const std::vector<int32_t>& tokens, const PerplexityParams& p,
                                     const std::function<void(const ChunkScore&)>& progress);

}  // namespace tandem
