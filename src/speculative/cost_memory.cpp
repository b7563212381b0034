// What draft-length controllers measured about costs, kept across generations (include/tandem/speculative.h).
#include "tandem/speculative.h"

namespace tandem {

bool SpecCostMemory::get(SpecType t, SpecCosts* out) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = costs_.find(t);
    if (it == costs_.end()) return false;
    *out = it->second;
    return true;
}

void SpecCostMemory::put(SpecType t, const SpecCosts& c) {
    std::lock_guard<std::mutex> lk(mu_);
    costs_[t] = c;
}

}  // namespace tandem
