// Sampling: a chain of samplers applied to a candidate copy of the logits (the model's logits are never
// modified), ending in the final normalized distribution that a token is drawn from. Speculative sampling
// needs that distribution, so it is a first-class result (Distribution), not an internal detail.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tandem {

enum class SamplerKind { TOP_K, TYPICAL_P, TOP_P, MIN_P, TEMPERATURE };

struct SamplerParams {
    float temp = 0.8f;  // <= 0: greedy (the distribution is one-hot at the argmax)
    int top_k = 40;  // <= 0: off
    float top_p = 0.95f;  // >= 1: off
    float min_p = 0.05f;  // <= 0: off
    float typical_p = 1.0f;  // >= 1: off
    float repeat_penalty = 1.0f;  // 1: off
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int penalty_last_n = 64;  // tokens of history the penalties look at; -1 = all
    std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit; -inf bans a token
    // ignore_eos (llama.cpp: "implies --logit-bias EOS-inf"): these end-of-generation tokens are banned, except where
    // the allowed set (a grammar's mask) holds nothing else: a finished grammar ends the text even so.
    std::vector<int32_t> banned_ends;
    // llama.cpp's default order (its "dry" and "xtc" are not implemented here).
    std::vector<SamplerKind> order = {SamplerKind::TOP_K, SamplerKind::TYPICAL_P, SamplerKind::TOP_P,
                                      SamplerKind::MIN_P, SamplerKind::TEMPERATURE};
    uint64_t seed = 0;
};

// Parses llama.cpp's --samplers ("top_k;top_p;min_p;temperature", also ',' separated, aliases accepted) and
// --sampling-seq ("kypmt") spellings. Unknown names throw tandem::Error; names llama.cpp knows that tandem does
// not implement ("dry", "xtc", "infill", "penalties") are dropped and listed in `ignored`.
std::vector<SamplerKind> parse_sampler_names(const std::string& s, std::vector<std::string>* ignored = nullptr);
std::vector<SamplerKind> parse_sampler_seq(const std::string& s, std::vector<std::string>* ignored = nullptr);
const char* sampler_kind_name(SamplerKind k);

// A probability distribution over the vocabulary, dense, with the list of tokens that have p > 0.
struct Distribution {
    std::vector<float> p;  // (n_vocab) probabilities, sum 1
    std::vector<int32_t> support;  // ids with p > 0, most probable first
    float prob(int32_t id) const { return p[size_t(id)]; }
};

class Sampler {
public:
    Sampler(const SamplerParams& params, int n_vocab);

    const SamplerParams& params() const { return params_; }
    bool greedy() const { return params_.temp <= 0; }

    // The final distribution for `logits` (n_vocab values, not modified) after penalties over `history`
    // (the tokens so far, oldest first), logit bias and the sampler chain. Throws tandem::Error when no token
    // is left (every one banned by the logit bias, or NaN logits).
    // allowed (optional, n_vocab entries): tokens with 0 are removed first (a grammar's mask), so the result is
    // the distribution conditioned on the allowed set.
    void distribution(const float* logits, const std::vector<int32_t>& history, Distribution& out,
                      const uint8_t* allowed = nullptr) const;
    // The same; returns false instead of throwing when no token is left.
    bool try_distribution(const float* logits, const std::vector<int32_t>& history, Distribution& out,
                          const uint8_t* allowed = nullptr) const;

    // Draw from a distribution (one uniform draw from this sampler's generator).
    int32_t draw(const Distribution& d);
    // distribution() + draw().
    int32_t sample(const float* logits, const std::vector<int32_t>& history);

    // Uniform in [0, 1) from this sampler's generator (speculative acceptance tests use it).
    double uniform();
    void reseed(uint64_t seed) { rng_.seed(seed); }

private:
    SamplerParams params_;
    int n_vocab_;
    std::mt19937_64 rng_;
    mutable Distribution scratch_;
};

// Seed of an independent random stream `stream` derived from `seed` (SplitMix64 of both): stream 0 is `seed`
// itself; seeds S and S+1 give unrelated streams (unlike seed + stream, where stream 1 of S is stream 0 of S+1).
uint64_t derive_seed(uint64_t seed, uint64_t stream);

// Ids of tokens that `bias` bans (-inf), without repeats.
size_t count_banned(const std::vector<std::pair<int32_t, float>>& bias);

// The argmax of n logits (ties: lowest id).
int32_t argmax(const float* logits, int n);

}  // namespace tandem
