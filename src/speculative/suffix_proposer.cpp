// Suffix-cache proposals (SpecType::SUFFIX): continuations of the context's suffix in everything the cache has
// seen (speculative/suffix_cache.h). Deterministic, draft-free.
#include "speculative/proposer.h"
#include "tandem/suffix_cache.h"
#include "tandem/error.h"

namespace tandem::speculative {

namespace {

class SuffixProposer final : public Proposer {
public:
    explicit SuffixProposer(std::shared_ptr<SuffixCache> cache) : cache_(std::move(cache)) { TD_ASSERT(cache_); }
    SpecType type() const override { return SpecType::SUFFIX; }
    bool one_hot() const override { return true; }
    void propose(ProposeRound& r) override { cache_->propose(r.history, r.k, r.plan.chain); }

private:
    std::shared_ptr<SuffixCache> cache_;
};

}  // namespace

std::unique_ptr<Proposer> make_suffix_proposer(std::shared_ptr<SuffixCache> cache) {
    return std::make_unique<SuffixProposer>(std::move(cache));
}

}  // namespace tandem::speculative
