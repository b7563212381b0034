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
        case SpecType::EAGLE3: return "eagle3";
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
    if (s == "eagle3" || s == "draft-eagle3") return SpecType::EAGLE3;
    if (s == "draft-dflash" || s == "draft-dspark")
        throw Error("speculative type '" + s +
                    "' needs model-specific draft heads, which tandem does not implement (use "
                    "draft-simple with -md, ngram, self, mtp, or eagle3 with an EAGLE-3 head as -md)");
    throw Error("unknown speculative type '" + s +
                "' (none, draft, ngram, self, suffix, mtp, eagle3; llama.cpp's draft-simple, draft-mtp, draft-eagle3 "
                "and ngram-* too)");
}

void set_spec_types(SpecParams& spec, const std::string& list) {
    // A list ("ngram-simple,draft-simple", "draft,ngram,suffix"): every named proposer, chosen per round.
    std::vector<SpecType> types;
    for (const std::string& name : split_list(list)) {
        const SpecType t = spec_type_from_name(name);
        if (t != SpecType::NONE && std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
    if (std::count_if(types.begin(), types.end(), uses_draft_session) > 1)
        throw Error("speculative types: at most one of draft, self, mtp and eagle3 (one draft session), got '" + list +
                    "'");
    std::stable_partition(types.begin(), types.end(), uses_draft_session);  // the model proposer first
    spec.type = types.empty() ? SpecType::NONE : types[0];
    spec.extra.assign(types.begin() + (types.empty() ? 0 : 1), types.end());
}

std::string spec_types_name(const SpecParams& spec) {
    std::string s = spec_type_name(spec.type);
    for (SpecType t : spec.extra) s += std::string(",") + spec_type_name(t);
    return s;
}

bool uses_draft_session(SpecType t) {
    return t == SpecType::DRAFT || t == SpecType::SELF || t == SpecType::MTP || t == SpecType::EAGLE3;
}
bool uses_draft_model(SpecType t) { return t == SpecType::DRAFT || t == SpecType::EAGLE3; }
bool reads_target_states(SpecType t) { return t == SpecType::MTP || t == SpecType::EAGLE3; }

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
    if (setup && uses_draft_model(spec.type) && !setup->has_draft_model)
        throw Error(std::string("speculative type '") + spec_type_name(spec.type) + "' needs -md " +
                    (spec.type == SpecType::EAGLE3 ? "HEAD.gguf (an EAGLE-3 head)" : "DRAFT.gguf (a draft model)"));
}

}  // namespace tandem
