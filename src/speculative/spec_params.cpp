// Speculative types, their names and lists, and the one validation of SpecParams that command-line flags and
// per-request overrides both end in (include/tandem/speculative.h).
#include <algorithm>
#include <string>

#include "tandem/error.h"
#include "tandem/speculative.h"
#include "tandem/strings.h"

namespace tandem {

const char* spec_type_name(SpecType t) {
    switch (t) {
        case SpecType::NONE: return "none";
        case SpecType::DRAFT: return "draft";
        case SpecType::NGRAM: return "ngram";
        case SpecType::SELF: return "self";
        case SpecType::SUFFIX: return "suffix";
        case SpecType::MTP: return "mtp";
    }
    return "?";
}

SpecType spec_type_from_name(const std::string& s) {
    // llama.cpp's names too: draft-simple is a draft model; its n-gram variants (ngram-simple, ngram-map-k,
    // ngram-map-k4v, ngram-mod, ngram-cache) are all served by tandem's prompt-lookup n-gram drafting.
    if (s == "none") return SpecType::NONE;
    if (s == "draft" || s == "draft-simple") return SpecType::DRAFT;
    if (s == "ngram" || s == "ngram-simple" || s == "lookup" || s == "ngram-map-k" || s == "ngram-map-k4v" ||
        s == "ngram-mod" || s == "ngram-cache")
        return SpecType::NGRAM;
    if (s == "self") return SpecType::SELF;
    if (s == "suffix") return SpecType::SUFFIX;
    if (s == "mtp" || s == "draft-mtp") return SpecType::MTP;
    if (s == "draft-eagle3" || s == "draft-dflash" || s == "draft-dspark")
        throw Error("speculative type '" + s +
                    "' needs model-specific draft heads, which tandem does not implement (use "
                    "draft-simple with -md, ngram, self, or mtp)");
    throw Error("unknown speculative type '" + s +
                "' (none, draft, ngram, self, suffix, mtp; llama.cpp's draft-simple, draft-mtp and ngram-* too)");
}

void set_spec_types(SpecParams& spec, const std::string& list) {
    // A list ("ngram-simple,draft-simple", "draft,ngram,suffix"): every named proposer, chosen per round.
    std::vector<SpecType> types;
    for (const std::string& name : split_list(list)) {
        const SpecType t = spec_type_from_name(name);
        if (t != SpecType::NONE && std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
    if (std::count_if(types.begin(), types.end(), uses_draft_session) > 1)
        throw Error("speculative types: at most one of draft, self and mtp (one draft session), got '" + list + "'");
    std::stable_partition(types.begin(), types.end(), uses_draft_session);  // the model proposer first
    spec.type = types.empty() ? SpecType::NONE : types[0];
    spec.extra.assign(types.begin() + (types.empty() ? 0 : 1), types.end());
}

std::string spec_types_name(const SpecParams& spec) {
    std::string s = spec_type_name(spec.type);
    for (SpecType t : spec.extra) s += std::string(",") + spec_type_name(t);
    return s;
}

bool uses_draft_session(SpecType t) { return t == SpecType::DRAFT || t == SpecType::SELF || t == SpecType::MTP; }

bool spec_uses(const SpecParams& spec, SpecType t) {
    return spec.type == t || std::find(spec.extra.begin(), spec.extra.end(), t) != spec.extra.end();
}

void validate_spec_params(SpecParams& spec, const SpecSetup* setup) {
    if (spec.n_max < 0) throw Error("--draft-max must be >= 0");
    if (spec.n_min < 0) throw Error("--draft-min must be >= 0");
    if (!(spec.p_min >= 0.0f && spec.p_min <= 1.0f)) throw Error("--draft-p-min must be between 0 and 1");
    if (spec.tree_width < 1) throw Error("--spec-tree-width must be >= 1");
    if (spec.tree_nodes < 1) throw Error("--spec-tree-nodes must be >= 1");
    for (SpecType t : spec.extra)
        if (t != SpecType::NGRAM && t != SpecType::SUFFIX)
            throw Error(std::string("speculative type '") + spec_type_name(t) +
                        "' cannot be an extra proposer (n-gram and suffix only)");
    if (spec.type == SpecType::NONE) spec.extra.clear();
    if (spec_uses(spec, SpecType::NGRAM) && spec.ngram_n < 1) throw Error("--spec-ngram-n must be >= 1");
    if (spec_uses(spec, SpecType::NGRAM) && spec.ngram_m < 1) throw Error("--spec-ngram-m must be >= 1");
    if (setup && spec.type == SpecType::DRAFT && !setup->has_draft_model)
        throw Error("speculative type 'draft' needs -md DRAFT.gguf (a draft model)");
}

}  // namespace tandem
