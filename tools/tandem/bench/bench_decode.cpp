// `tandem bench` -p and -n: prompt processing (ppN) and generation (tgN) speed (bench/bench.h).
#include <algorithm>
#include <string>

#include "bench/bench.h"
#include "tandem/session.h"

namespace tandem::cli::bench {

std::vector<Result> bench_prompt(const ModelBench& b, const std::vector<int>& pp) {
    std::vector<Result> rows;
    Session& s = *b.session;
    for (int n : pp) {
        if (n <= 0) continue;
        Result r{"pp" + std::to_string(n) + depth_suffix(b.depth), {}};
        r.depth = b.depth;
        auto toks = random_tokens(n, b.model->hparams().n_vocab, 1);
        double share = 0;
        for (int rep = 0; rep <= b.reps; rep++) {
            back_to_depth(b);
            const double a0 = s.attention_seconds();
            auto t0 = Clock::now();
            s.decode(toks, false);
            const double dt = secs(t0, Clock::now());
            if (rep == 0) continue;  // rep 0 warms up
            r.ts.push_back(n / dt);
            share += (s.attention_seconds() - a0) / dt;
        }
        r.attn_share = share / b.reps;
        rows.push_back(r);
    }
    return rows;
}

std::vector<Result> bench_generation(const ModelBench& b, const std::vector<int>& tg) {
    std::vector<Result> rows;
    Session& s = *b.session;
    for (int n : tg) {
        if (n <= 0) continue;
        Result r{"tg" + std::to_string(n) + depth_suffix(b.depth), {}};
        r.depth = b.depth;
        auto toks = random_tokens(n, b.model->hparams().n_vocab, 2);
        std::vector<double> probes;
        double share = 0;
        for (int rep = 0; rep <= b.reps; rep++) {
            back_to_depth(b);
            const double bw_now = rep > 0 && b.probe ? b.probe->measure() : 0;
            const double a0 = s.attention_seconds();
            auto t0 = Clock::now();
            for (int i = 0; i < n; i++) s.decode(&toks[size_t(i)], 1, false);
            const double dt = secs(t0, Clock::now());
            if (rep > 0) {
                r.ts.push_back(n / dt);
                share += (s.attention_seconds() - a0) / dt;
                if (b.probe) probes.push_back(bw_now);
            }
        }
        r.attn_share = share / b.reps;
        // the cache read per step: the depth plus half the generated tokens on average
        add_bandwidth(*b.model, r, r.ts, probes, 1, kv_bytes_at(s, b.depth + n / 2) + s.state_bytes_per_pass(1));
        rows.push_back(r);
    }
    return rows;
}

}  // namespace tandem::cli::bench
