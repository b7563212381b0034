#include "tandem/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tandem/error.h"

namespace tandem {

namespace {

// log softmax of logits (n) in double: out[i] = logits[i] - logsumexp(logits).
void log_softmax(const float* logits, int n, std::vector<double>& out) {
    out.resize(size_t(n));
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = std::max(mx, double(logits[i]));
    double sum = 0;
    for (int i = 0; i < n; i++) sum += std::exp(double(logits[i]) - mx);
    const double lse = mx + std::log(sum);
    for (int i = 0; i < n; i++) out[size_t(i)] = double(logits[i]) - lse;
}

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

// One chunk from an empty cache, all logits kept: a session of exactly the chunk's size.
std::unique_ptr<Session> run_chunk(const std::shared_ptr<const Model>& model, ThreadPool& pool, SessionParams sp,
                                   const std::vector<int32_t>& chunk) {
    sp.n_ctx = int(chunk.size());
    sp.n_batch = int(chunk.size());
    auto s = std::make_unique<Session>(model, sp, pool);
    s->decode(chunk, true);
    return s;
}

}  // namespace

double PerplexityResult::ppl_test() const { return std::exp(nll_test); }
double PerplexityResult::ppl_base() const { return std::exp(nll_base); }

PerplexityResult evaluate_perplexity(const std::shared_ptr<const Model>& model, ThreadPool& pool,
                                     const std::vector<int32_t>& tokens, const PerplexityParams& p,
                                     const std::function<void(const ChunkScore&)>& progress) {
    if (p.n_ctx < 4) throw Error("perplexity: the chunk size must be at least 4 tokens");
    const int available = int(tokens.size() / size_t(p.n_ctx));
    if (available == 0)
        throw Error("perplexity: the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                    std::to_string(p.n_ctx) + " (-c)");
    const int n_chunks = p.max_chunks > 0 ? std::min(p.max_chunks, available) : available;
    const int n_vocab = model->hparams().n_vocab;
    const int first = p.n_ctx / 2;  // rows first .. n_ctx-2 are scored

    PerplexityResult r;
    double nll_t = 0, nll_b = 0, kld_sum = 0;
    int64_t same = 0;
    std::vector<double> lt, lb;
    for (int c = 0; c < n_chunks; c++) {
        std::vector<int32_t> chunk(tokens.begin() + ptrdiff_t(c) * p.n_ctx,
                                   tokens.begin() + ptrdiff_t(c + 1) * p.n_ctx);
        if (p.bos >= 0) chunk[0] = p.bos;
        const auto st = run_chunk(model, pool, p.test, chunk);
        const auto sb = p.compare ? run_chunk(model, pool, p.base, chunk) : nullptr;
        for (int j = first; j < p.n_ctx - 1; j++) {
            const int32_t next = chunk[size_t(j + 1)];
            const float* zt = st->logits(j);
            log_softmax(zt, n_vocab, lt);
            nll_t -= lt[size_t(next)];
            r.n_scored++;
            if (!sb) continue;
            const float* zb = sb->logits(j);
            log_softmax(zb, n_vocab, lb);
            nll_b -= lb[size_t(next)];
            double kld = 0;
            for (int i = 0; i < n_vocab; i++) {
                kld += std::exp(lb[size_t(i)]) * (lb[size_t(i)] - lt[size_t(i)]);
                r.max_logit_diff = std::max(r.max_logit_diff, double(std::fabs(zt[i] - zb[i])));
            }
            kld = std::max(kld, 0.0);  // rounding can leave a tiny negative sum for identical rows
            kld_sum += kld;
            r.kld_max = std::max(r.kld_max, kld);
            same += argmax(zt, n_vocab) == argmax(zb, n_vocab);
        }
        r.n_chunks = c + 1;
        if (progress) {
            const double n = double(r.n_scored);
            progress({c, std::exp(nll_t / n), sb ? std::exp(nll_b / n) : 0.0});
        }
    }
    const double n = double(r.n_scored);
    r.nll_test = nll_t / n;
    if (p.compare) {
        r.nll_base = nll_b / n;
        r.kld_mean = kld_sum / n;
        r.same_top1 = double(same) / n;
    }
    return r;
}

}  // namespace tandem
