// Whether a draft model's vocabulary is the target's, and the bridge when it is not (tandem/spec_params.h).
#include <algorithm>
#include <unordered_map>

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
    // the intersection: texts that occur once in each vocabulary, as ordinary tokens
    auto unique_texts = [](const Tokenizer& t) {
        std::unordered_map<std::string, int32_t> m;
        for (int32_t i = 0; i < t.n_vocab(); i++) {
            if (t.token_attr(i) == TokenAttr::CONTROL) continue;
            const std::string s = t.token_to_piece(i, false);
            if (s.empty()) continue;
            auto [it, added] = m.emplace(s, i);
            if (!added) it->second = -1;
        }
        return m;
    };
    const auto tm = unique_texts(*bridge->target), dm = unique_texts(*bridge->draft);
    // (ids of the models' rows only: a tokenizer may list more tokens than its model has rows)
    const int nd = draft.hparams().n_vocab, nt = target.hparams().n_vocab;
    bridge->shared.assign(size_t(std::max(nd, bridge->draft->n_vocab())), -1);
    for (const auto& [s, d] : dm)
        if (auto it = tm.find(s); d >= 0 && d < nd && it != tm.end() && it->second >= 0 && it->second < nt) {
            bridge->shared[size_t(d)] = it->second;
            bridge->n_shared++;
        }
    return bridge;
}

}  // namespace tandem
