// The one map from a speculative type to its proposer (proposer.h).
#include "speculative/proposer.h"

namespace tandem::speculative {

std::unique_ptr<Proposer> make_proposer(SpecType type, const ModelProposerSetup& setup) {
    switch (type) {
        case SpecType::DRAFT:
            if (setup.spec.vocab_bridge) return make_text_draft_proposer(setup);
            return make_model_proposer(type, setup);
        case SpecType::SELF:
        case SpecType::MTP:
        case SpecType::EAGLE3: return make_model_proposer(type, setup);
        case SpecType::NGRAM: return make_ngram_proposer(setup.spec.ngram_n, setup.spec.ngram_m);
        case SpecType::SUFFIX: return make_suffix_proposer(setup.spec.suffix);
        case SpecType::NONE: break;
    }
    return nullptr;
}

}  // namespace tandem::speculative
