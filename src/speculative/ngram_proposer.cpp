// Prompt lookup (SpecType::NGRAM, llama.cpp's ngram-* types): the most recent earlier occurrence of the context's
// last n tokens (n = ngram_n .. 1) proposes the tokens that followed it. Deterministic, draft-free.
#include <algorithm>

#include "speculative/proposer.h"

namespace tandem::speculative {

namespace {

class NgramProposer final : public Proposer {
public:
    NgramProposer(int n, int m) : n_(n), m_(m) {}
    SpecType type() const override { return SpecType::NGRAM; }
    bool one_hot() const override { return true; }
    void propose(ProposeRound& r) override {
        const auto& h = r.history;
        const int len = int(h.size());
        for (int n = std::min(n_, len - 1); n >= 1; n--) {
            for (int start = len - n - 1; start >= 0; start--) {
                if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
                const int from = start + n;
                const int m = std::min({r.k, m_, len - from});
                for (int i = 0; i < m; i++) r.plan.chain.push_back(h[size_t(from + i)]);
                if (m > 0) return;
            }
        }
    }

private:
    int n_, m_;
};

}  // namespace

std::unique_ptr<Proposer> make_ngram_proposer(int ngram_n, int ngram_m) {
    return std::make_unique<NgramProposer>(ngram_n, ngram_m);
}

}  // namespace tandem::speculative
