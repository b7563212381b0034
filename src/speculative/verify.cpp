// The verification walk of one round (verify.h) and the rule's pure functions (include/tandem/speculative.h).
#include "speculative/verify.h"

#include <algorithm>

#include "tandem/error.h"
#include "tandem/speculative.h"

namespace tandem {

double accept_probability(float px, float qx) {
    if (px >= qx) return 1.0;  // also q(x) = 0 < p(x): nothing to correct
    if (px <= 0) return 0.0;
    return double(px) / double(qx);
}

Distribution residual_distribution(const Distribution& p, const Distribution& q) {
    Distribution r;
    r.p.assign(p.p.size(), 0.0f);
    double total = 0;
    for (int32_t id : p.support) {
        float qv = size_t(id) < q.p.size() ? q.p[size_t(id)] : 0.0f;  // draft vocab may be shorter
        float v = p.p[size_t(id)] - qv;
        if (v > 0) {
            r.p[size_t(id)] = v;
            r.support.push_back(id);
            total += v;
        }
    }
    if (total <= 0) {
        r.support.clear();
        return r;
    }
    for (int32_t id : r.support) r.p[size_t(id)] = float(r.p[size_t(id)] / total);
    return r;
}

namespace speculative {

int32_t RoundPlan::token(int node) const {
    TD_ASSERT(node >= 1 && node < n_nodes());
    return node <= n_chain() ? chain[size_t(node - 1)] : alts[size_t(node - n_chain() - 1)].token;
}

void RoundPlan::drop_orphans() {
    std::erase_if(alts, [&](const Alternative& e) { return e.depth > n_chain() + 1; });
}

void RoundPlan::batch(int32_t root, std::vector<int32_t>& tokens, std::vector<int32_t>& parents) const {
    tokens.clear();
    parents.clear();
    tokens.push_back(root);
    tokens.insert(tokens.end(), chain.begin(), chain.end());
    if (alts.empty()) return;
    parents.push_back(-1);  // the tree: root, chain d1..dk (each the child of the one before), alternatives
    for (int i = 0; i < n_chain(); i++) parents.push_back(int32_t(i));
    for (const Alternative& e : alts) {
        tokens.push_back(e.token);
        parents.push_back(e.depth - 1);
    }
}

bool exact_accept(double a, WalkTarget& t) { return a >= 1.0 || (a > 0.0 && t.uniform() < a); }

Distribution without(const Distribution& q, const std::vector<int32_t>& drawn) {
    Distribution r;
    r.p = q.p;
    for (int32_t x : drawn) r.p[size_t(x)] = 0.0f;
    double total = 0;
    for (int32_t id : q.support)
        if (r.p[size_t(id)] > 0) {
            r.support.push_back(id);
            total += r.p[size_t(id)];
        }
    if (total <= 0) r.support.clear();
    for (int32_t id : r.support) r.p[size_t(id)] = float(r.p[size_t(id)] / total);
    return r;
}

namespace {

// p becomes the residual normalize(max(0, p - q)); with no mass left (only through rounding) p stays.
void reject(Distribution& p, const Distribution& q) {
    Distribution r = residual_distribution(p, q);
    if (!r.support.empty()) p = std::move(r);
}

// The same for q = e_c, in place: p without c, renormalized.
void reject_token(Distribution& p, int32_t c) {
    if (size_t(c) >= p.p.size() || p.p[size_t(c)] <= 0) return;
    double rest = 0;
    for (int32_t id : p.support) rest += id == c ? 0.0 : double(p.p[size_t(id)]);
    if (rest <= 0) return;  // no mass left: keep p
    p.p[size_t(c)] = 0.0f;
    std::erase(p.support, c);
    for (int32_t id : p.support) p.p[size_t(id)] = float(p.p[size_t(id)] / rest);
}

// The candidates at one node, in order (its chain child, then its alternatives), each by the rule against its own
// proposal; p is updated by every rejection. Returns the accepted child's node, or -1 when all were rejected.
int choose_child(const RoundPlan& plan, int node, int depth, const std::vector<Distribution>& q, bool one_hot,
                 Distribution& p, WalkTarget& target, const AcceptRule& accept) {
    if (node != depth) return -1;  // an alternative: a leaf (chain nodes are numbered by their depth)
    std::vector<int32_t> drawn;  // tokens drawn from q[depth] so far (sampled alternatives come without them)
    if (depth < plan.n_chain()) {
        const int32_t x = plan.chain[size_t(depth)];
        const float qx = one_hot ? 1.0f : q[size_t(depth)].prob(x);
        if (accept(accept_probability(p.prob(x), qx), target)) return depth + 1;
        if (one_hot) reject_token(p, x);
        else reject(p, q[size_t(depth)]);
        drawn.push_back(x);
    }
    for (int j = 0; j < int(plan.alts.size()); j++) {
        const RoundPlan::Alternative& e = plan.alts[size_t(j)];
        if (e.depth != depth + 1) continue;
        if (!e.sampled) {  // deterministic: q_j = e_c
            if (accept(accept_probability(p.prob(e.token), 1.0f), target)) return plan.alt_node(j);
            reject_token(p, e.token);
        } else {
            const Distribution qj = without(q[size_t(depth)], drawn);
            if (accept(accept_probability(p.prob(e.token), qj.prob(e.token)), target)) return plan.alt_node(j);
            reject(p, qj);
        }
        drawn.push_back(e.token);
    }
    return -1;
}

}  // namespace

WalkResult verify_walk(const RoundPlan& plan, const std::vector<Distribution>& q, bool one_hot, WalkTarget& target,
                       const AcceptRule& accept) {
    TD_ASSERT(one_hot || q.size() >= size_t(plan.n_chain()));
    WalkResult r;
    r.path.push_back(0);
    thread_local Distribution p;  // the node's distribution (a vocabulary's worth: kept between rounds)
    for (int node = 0;;) {
        const int depth = int(r.path.size()) - 1;
        target.distribution(node, p);
        const int next = choose_child(plan, node, depth, q, one_hot, p, target, accept);
        if (next < 0) {  // every candidate rejected (or none): the token is drawn from what p has become
            r.final_token = target.draw(p);
            return r;
        }
        target.accepted(next, plan.token(next));
        r.path.push_back(next);
        node = next;
        if (next <= plan.n_chain()) r.accepted_chain++;
        else r.accepted_alt++;
    }
}

}  // namespace speculative
}  // namespace tandem
