#include "tandem/error.h"
#include "tandem/speculative.h"
#include "tandem/tokenizer.h"

namespace tandem {

void check_draft_compatible(const Tokenizer& t, const Tokenizer& d) {
    auto fail = [](const std::string& what) { throw Error("draft model is incompatible with the target: " + what); };
    if (t.model_name() != d.model_name())
        fail("tokenizer model '" + d.model_name() + "' differs from the target's '" + t.model_name() + "'");
    if (t.pre_name() != d.pre_name())
        fail("pre-tokenizer '" + d.pre_name() + "' differs from the target's '" + t.pre_name() + "'");
    if (t.bos() != d.bos() || t.eos() != d.eos())
        fail(strprintf("special tokens differ (target BOS %d EOS %d, draft BOS %d EOS %d)", t.bos(), t.eos(), d.bos(),
                       d.eos()));
    if (t.add_bos() != d.add_bos()) fail("add-BOS behaviour differs");
    const int diff = t.n_vocab() - d.n_vocab();
    if (diff > 128 || diff < -128)
        fail(strprintf("vocab sizes differ by %d (target %d, draft %d; at most 128 allowed)", diff < 0 ? -diff : diff,
                       t.n_vocab(), d.n_vocab()));
    const int shared = std::min(t.n_vocab(), d.n_vocab());
    for (int i = 5; i < shared; i++)
        if (t.token_text(i) != d.token_text(i))
            fail(strprintf("token %d is '%s' in the target but '%s' in the draft", i, t.token_text(i).c_str(),
                           d.token_text(i).c_str()));
}

}  // namespace tandem
