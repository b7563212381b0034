#include "serve/infill.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem::server {

std::vector<int32_t> format_infill(const Tokenizer& tok, const InfillInput& in, int n_batch, int n_ctx, int n_predict) {
    const Tokenizer::Fim& f = tok.fim();
    if (f.pre < 0 || f.suf < 0 || f.mid < 0)
        throw Error(std::string("this model cannot fill in the middle: its vocabulary has no ") +
                    (f.pre < 0   ? "FIM prefix"
                     : f.suf < 0 ? "FIM suffix"
                                 : "FIM middle") +
                    " token");
    auto text = [&](const std::string& s) { return tok.encode(s, false, false); };
    auto append = [](std::vector<int32_t>& a, const std::vector<int32_t>& b) { a.insert(a.end(), b.begin(), b.end()); };

    std::vector<int32_t> extra;
    if (f.rep >= 0) {
        extra.push_back(f.rep);
        append(extra, text("myproject\n"));
    }
    for (const auto& c : in.extra) {
        if (f.sep >= 0) {
            extra.push_back(f.sep);
            append(extra, text(c.filename + "\n"));
        } else {
            append(extra, text("\n\n--- snippet ---\n\n"));
        }
        append(extra, text(c.text));
    }
    if (f.sep >= 0) {
        extra.push_back(f.sep);
        append(extra, text("filename\n"));
    }

    std::vector<int32_t> prefix = text(in.prefix), suffix = text(in.suffix);
    const int n_prefix = std::min<int>(int(prefix.size()), 3 * (n_batch / 4));
    const int n_suffix = std::min<int>(int(suffix.size()), std::max<int>(0, n_batch / 4 - (2 + int(in.prompt.size()))));
    const int n_extra = std::min<int>(std::max<int>(0, n_ctx - n_batch - 2 * n_predict), int(extra.size()));
    prefix.erase(prefix.begin(), prefix.end() - n_prefix);
    suffix.resize(size_t(n_suffix));

    std::vector<int32_t> out(extra.end() - n_extra, extra.end());
    if (tok.add_bos() && tok.bos() >= 0) out.push_back(tok.bos());
    out.push_back(f.pre);
    append(out, prefix);
    append(out, in.prompt);
    out.push_back(f.suf);
    append(out, suffix);
    out.push_back(f.mid);
    return out;
}

}  // namespace tandem::server
