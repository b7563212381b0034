// Negative controls for the statistical tests: a Generator that verifies with a wrong rule, so a test can show
// that it tells a broken rule apart from the exact one. Tests only; nothing in the library or tools sets these.
#pragma once
#include "speculative/generator_impl.h"
#include "speculative/verify.h"
#include "tandem/speculative.h"

namespace tandem::speculative {

// Every drafted candidate accepted (the output then follows the draft's distribution, not the target's).
inline bool accept_all(double, WalkTarget&) { return true; }

struct GeneratorTesting {
    // The rule g verifies with from now on (exact_accept unless set).
    static void set_accept_rule(Generator& g, AcceptRule rule) { g.im_->accept_ = rule; }
};

}  // namespace tandem::speculative
