// Whether a draft model's vocabulary is the target's, and the bridge when it is not (tandem/spec_params.h).
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/speculative.h"
#include "tandem/tokenizer.h"

namespace tandem {

std::string draft_vocab_difference(const Tokenizer& t, const Tokenizer& d) {
    if (t.model_name() != d.model_name())
        return "tokenizer model '" + d.model_name() + "' differs from the target's '" + t.model_name() + "'";
    if (t.pre_name() != d.pre_name())
        return "pre-tokenizer '" + d.pre_name() + "' differs from the target's '" + t.pre_name() + "'";
    if (t.bos() != d.bos() || t.eos() != d.eos())
        return strprintf("special tokens differ (target BOS %d EOS %d, draft BOS %d EOS %d)", t.bos(), t.eos(), d.bos(),
                         d.eos());
    if (t.add_bos() != d.add_bos()) return "add-BOS behaviour differs";
    const int diff = t.n_vocab() - d.n_vocab();
    if (diff > 128 || diff < -128)
        return strprintf("vocab sizes differ by %d (target %d, draft %d; at most 128 allowed)", diff < 0 ? -diff : diff,
                         t.n_vocab(), d.n_vocab());
    const int shared = std::min(t.n_vocab(), d.n_vocab());
    for (int i = 5; i < shared; i++)
        if (t.token_text(i) != d.token_text(i))
            return strprintf("token %d is '%s' in the target but '%s' in the draft", i, t.token_text(i).c_str(),
                             d.token_text(i).c_str());
    return "";
}

std::shared_ptr<const VocabBridge> draft_vocab_bridge(const Model& target, const Model& draft) {
    auto bridge = std::make_shared<VocabBridge>();
    bridge->target = Tokenizer::from_gguf(target.gguf());
    bridge->draft = Tokenizer::from_gguf(draft.gguf());
    bridge->difference = draft_vocab_difference(*bridge->target, *bridge->draft);
    if (bridge->difference.empty()) return nullptr;
    return bridge;
}

}  // namespace tandem
