// `tandem bench --vb`: the verification curve (vbK: one pass over K tokens after a 256-token context, the cost
// speculative decoding pays to check K drafted tokens) and with --vb-tree the same for token trees (vtK)
// (bench/bench.h).
#include <algorithm>
#include <string>

#include "bench/bench.h"
#include "tandem/error.h"
#include "tandem/session.h"

namespace tandem::cli::bench {

namespace {

// A tree of k nodes as the generator builds them at width 3: a chain, and at each depth two alternatives hanging
// from the chain node before; verified by Session::decode_tree.
std::vector<int32_t> tree_parents(int k) {
    std::vector<int32_t> p = {-1};
    int32_t chain = 0;
    while (int(p.size()) < k) {
        const int32_t parent = chain;
        chain = int32_t(p.size());
        p.push_back(parent);
        for (int w = 0; w < 2 && int(p.size()) < k; w++) p.push_back(parent);
    }
    return p;
}

// The pass times of each size of `ks` (chains, and trees when `tree`) per repetition, and the probes run before
// each repetition.
struct PassTimes {
    std::vector<std::vector<double>> chain, tree;  // [size index][repetition]: seconds
    std::vector<std::vector<double>> rollback;  // [size index][repetition]: seconds to truncate a chain's rows
    std::vector<double> probes;
};

// Repetitions outer, sizes inner: every size of one repetition runs within the same second or so, and "x vb1" is
// the median of the per-repetition ratios.
PassTimes time_passes(const ModelBench& b, const std::vector<int>& ks, bool tree) {
    const int n_vocab = b.model->hparams().n_vocab;
    Session& s = *b.session;
    back_to_depth(b);
    if (b.depth < 256) s.decode(random_tokens(256 - b.depth, n_vocab, 3), false);
    const int base = s.n_past();
    PassTimes t{std::vector<std::vector<double>>(ks.size()),
                std::vector<std::vector<double>>(ks.size()),
                std::vector<std::vector<double>>(ks.size()),
                {}};
    for (int rep = 0; rep <= b.reps; rep++) {
        const double bw_now = rep > 0 && b.probe ? b.probe->measure() : 0;
        if (rep > 0 && b.probe) {
            t.probes.push_back(bw_now);
            s.decode(random_tokens(1, n_vocab, 4), true);  // untimed: the probe has evicted the caches
            s.truncate(base);
        }
        for (size_t j = 0; j < ks.size(); j++) {
            auto toks = random_tokens(ks[j], n_vocab, uint32_t(4 + ks[j]));
            auto t0 = Clock::now();
            s.decode(toks, true);
            double dt = secs(t0, Clock::now());
            t0 = Clock::now();
            s.truncate(base);  // the rollback of a round whose drafts were all rejected
            const double dr = secs(t0, Clock::now());
            if (rep > 0) t.chain[j].push_back(dt), t.rollback[j].push_back(dr);
            if (!tree || ks[j] < 2) continue;
            const auto parents = tree_parents(ks[j]);
            t0 = Clock::now();
            s.decode_tree(toks.data(), parents.data(), ks[j]);
            dt = secs(t0, Clock::now());
            s.truncate(base);
            if (rep > 0) t.tree[j].push_back(dt);
        }
    }
    return t;
}

}  // namespace

VerifyCurve bench_verify(const ModelBench& b, const std::vector<int>& vb, bool tree, std::vector<Result>& rows) {
    VerifyCurve curve;
    if (vb.empty()) return curve;
    for (int k : vb)
        if (k <= 0 || k > 64) throw Error("--vb sizes must be 1..64");
    std::vector<int> ks = vb;
    if (std::find(ks.begin(), ks.end(), 1) == ks.end()) ks.insert(ks.begin(), 1);  // the reference pass
    const PassTimes times = time_passes(b, ks, tree);
    const size_t j1 = size_t(std::find(ks.begin(), ks.end(), 1) - ks.begin());
    // One row (vbK or vtK) from the per-repetition pass times of size index j.
    auto add_row = [&](const std::string& name, size_t j, const std::vector<double>& t, bool chain) {
        Result r{name + depth_suffix(b.depth), {}};
        r.depth = b.depth;
        std::vector<double> passes, ratios;
        for (size_t i = 0; i < t.size(); i++) {
            r.ts.push_back(ks[j] / t[i]);
            passes.push_back(1.0 / t[i]);
            ratios.push_back(t[i] / times.chain[j1][i]);
        }
        r.rel_vb1 = median_of(ratios);
        if (chain) {
            std::vector<double> rb;
            for (size_t i = 0; i < times.rollback[j].size(); i++)
                rb.push_back(times.rollback[j][i] / times.chain[j1][i]);
            r.rollback_vb1 = median_of(rb);
        }
        add_bandwidth(*b.model, r, passes, times.probes, ks[j],
                      kv_bytes_at(*b.session, std::max(b.depth, 256)) + b.session->state_bytes_per_pass(ks[j]));
        rows.push_back(r);
    };
    for (size_t j = 0; j < ks.size(); j++) {
        if (std::find(vb.begin(), vb.end(), ks[j]) == vb.end()) continue;
        add_row("vb" + std::to_string(ks[j]), j, times.chain[j], true);
        const double pass_s = median_of(times.chain[j]);
        curve.time.emplace_back(ks[j], pass_s);
        if (ks[j] == 1) curve.vb1 = pass_s;
        if (!times.tree[j].empty()) add_row("vt" + std::to_string(ks[j]), j, times.tree[j], false);
    }
    if (curve.vb1 == 0) curve.vb1 = median_of(times.chain[j1]);
    return curve;
}

double VerifyCurve::relative_cost(int n) const {
    if (time.empty() || vb1 <= 0) return 1.0;
    std::pair<int, double> lo = time.front(), hi = time.back();
    for (auto& p : time) {
        if (p.first <= n) lo = p;
        if (p.first >= n) {
            hi = p;
            break;
        }
    }
    double t = hi.first == lo.first
                   ? lo.second
                   : lo.second + (hi.second - lo.second) * (n - lo.first) / double(hi.first - lo.first);
    if (n > time.back().first) t = time.back().second * n / time.back().first;
    return t / vb1;
}

}  // namespace tandem::cli::bench
