// The normalizer of a softmax over raw logits (temperature 1), one way for every place that needs one (a draft's
// top probability for --draft-p-min and its candidates, log-probabilities of the API, a distillation's targets):
// the largest logit mx and sum_i exp(double(x[i] - mx)), the float difference, summed in index order. Then
//   p_i = exp(double(x[i] - mx)) / sum          log p_i = x[i] - (mx + log(sum))
// Two other softmaxes are their own on purpose: the sampler's over its candidates (sampling/sampler.cpp, the
// candidates' order and float terms, as llama.cpp's) and perplexity's log-likelihood in double throughout
// (model/perplexity.cpp); a mixture's router is a backend op's rule (backend/backend.h topk_route).
#pragma once
#include <cmath>

namespace tandem {

struct SoftmaxNorm {
    float max = 0;
    double sum = 0;
    float prob(float x) const { return float(std::exp(double(x - max)) / sum); }
    float log_sum_exp() const { return max + float(std::log(sum)); }
};

inline SoftmaxNorm softmax_norm(const float* x, int n) {
    SoftmaxNorm s;
    s.max = x[0];
    for (int i = 1; i < n; i++) s.max = x[i] > s.max ? x[i] : s.max;
    for (int i = 0; i < n; i++) s.sum += std::exp(double(x[i] - s.max));
    return s;
}

}  // namespace tandem
