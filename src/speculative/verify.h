// One round's verification as a pure function: the walk down a drafted chain and its token-tree alternatives
// (the rule is described in include/tandem/speculative.h), from the round's plan, the target's distribution at
// each node, the draft's distributions and the verifier's random draws. The Generator feeds it the target's
// sampler and cache; tests feed it hand-made distributions and draws.
#pragma once
#include <cstdint>
#include <vector>

#include "tandem/sampling.h"

namespace tandem::speculative {

// The tokens of one verification pass and their numbering, which this type alone knows: node 0 is the root (the
// last accepted token, whose logits give the first draft position), nodes 1..n_chain() are the chain's tokens
// (node i at depth i, the child of node i - 1), then the alternatives: node n_chain() + 1 + j is alternative j,
// a child of chain node depth - 1.
struct RoundPlan {
    // An alternative to the chain's token at `depth` (1-based). A sampled alternative was drawn from the draft's
    // q at depth - 1 without replacement (after the chain's token and the alternatives before it at that depth);
    // the others are deterministic (the draft's most probable tokens, greedy drafting). pred: the chance,
    // predicted when it was proposed, that the walk takes it once it reaches its parent (its calibration).
    struct Alternative {
        int32_t token;
        int depth;
        bool sampled;
        float pred;
    };

    std::vector<int32_t> chain;
    std::vector<Alternative> alts;

    void clear() {
        chain.clear();
        alts.clear();
    }
    int n_chain() const { return int(chain.size()); }
    int n_nodes() const { return 1 + int(chain.size()) + int(alts.size()); }
    bool is_tree() const { return !alts.empty(); }
    int alt_node(int j) const { return n_chain() + 1 + j; }
    // The token of node 1 .. n_nodes() - 1 (the root's is the caller's).
    int32_t token(int node) const;
    // Drops alternatives that hang from chain nodes the chain no longer has (after it was cut).
    void drop_orphans();
    // The pass's tokens in node order (root first) and, for a tree, each node's parent (-1 for the root; empty for
    // a chain): what Session::decode / decode_tree run.
    void batch(int32_t root, std::vector<int32_t>& tokens, std::vector<int32_t>& parents) const;
};

// What the walk reads of the target and the verifier: the target's distribution at a node given the tokens the
// walk accepted before it (penalties and a grammar depend on them), told of each accepted token in turn, and the
// verifier's random source.
class WalkTarget {
public:
    virtual ~WalkTarget() = default;
    // The target's final distribution at `node` (whose tokens on the path so far were reported by accepted()).
    virtual void distribution(int node, Distribution& p) = 0;
    // The walk moved to `node`, taking its token.
    virtual void accepted(int node, int32_t token) = 0;
    // One uniform draw in [0, 1) (used only for acceptance probabilities strictly between 0 and 1).
    virtual double uniform() = 0;
    // A token drawn from p (the replacement or bonus token).
    virtual int32_t draw(const Distribution& p) = 0;
};

// Accepts a candidate whose acceptance probability is `a` (min(1, p/q)), drawing from t.uniform() when it must.
// The rule is exact when it returns true with probability a. Tests inject wrong rules as negative controls
// (speculative/testing.h).
using AcceptRule = bool (*)(double a, WalkTarget& t);
// The rule itself: true when a >= 1, false when a <= 0, else one uniform draw below a (greedy stays exact: a is
// 0 or 1 there, so it draws nothing).
bool exact_accept(double a, WalkTarget& t);

struct WalkResult {
    std::vector<int32_t> path;  // accepted nodes, root first
    int32_t final_token = -1;  // the token drawn at path.back() (replacement, or bonus after the last node)
    int accepted_chain = 0;  // accepted nodes on the chain
    int accepted_alt = 0;  // accepted alternatives
};

// The walk (include/tandem/speculative.h): at each node of the path, its chain child against q[depth] (or, for
// one-hot proposals such as n-grams, q = e_x) and then its alternatives at depth + 1, by recursive rejection
// sampling; when every candidate is rejected the token is drawn from what p has become.
// Requires q.size() >= plan.n_chain() unless one_hot (q of the chain's depths; sampled alternatives at depth d use
// q[d - 1]), and every sampled alternative's depth within the chain + 1.
WalkResult verify_walk(const RoundPlan& plan, const std::vector<Distribution>& q, bool one_hot, WalkTarget& target,
                       const AcceptRule& accept = exact_accept);

// q without the tokens in `drawn`, renormalized: what a draw without replacement after them comes from (empty
// support when nothing is left).
Distribution without(const Distribution& q, const std::vector<int32_t>& drawn);

}  // namespace tandem::speculative
