// `tandem bench` -p and -n: prompt processing (ppN) and generation (tgN) speed (bench/bench.h).
#include <algorithm>
#include <string>

#include "bench/bench.h"
#include "tandem/session.h"

namespace tandem::cli::bench {

std::vector<Result> bench_prompt(const ModelBench& b, const std::vector<int>& pp) {
    std::vector<Result> rows;
    for (int n : pp) {
        if (n <= 0) continue;
        Result r{"pp" + std::to_string(n), {}};
        auto toks = random_tokens(n, b.model->hparams().n_vocab, 1);
        for (int rep = 0; rep <= b.reps; rep++) {
            Session s(b.model, SessionParams{std::max(n + 1, 256), 0, 512}, b.pool);
            auto t0 = Clock::now();
            s.decode(toks, false);
            if (rep > 0) r.ts.push_back(n / secs(t0, Clock::now()));  // rep 0 warms up
        }
        rows.push_back(r);
    }
    return rows;
}

std::vector<Result> bench_generation(const ModelBench& b, const std::vector<int>& tg) {
    std::vector<Result> rows;
    for (int n : tg) {
        if (n <= 0) continue;
        Result r{"tg" + std::to_string(n), {}};
        auto toks = random_tokens(n, b.model->hparams().n_vocab, 2);
        std::vector<double> probes;
        for (int rep = 0; rep <= b.reps; rep++) {
            Session s(b.model, SessionParams{n + 16, 0, 512}, b.pool);
            const double bw_now = rep > 0 && b.probe ? b.probe->measure() : 0;
            auto t0 = Clock::now();
            for (int i = 0; i < n; i++) s.decode(&toks[size_t(i)], 1, false);
            if (rep > 0) {
                r.ts.push_back(n / secs(t0, Clock::now()));
                if (b.probe) probes.push_back(bw_now);
            }
        }
        add_bandwidth(*b.model, r, r.ts, probes, 1);
        rows.push_back(r);
    }
    return rows;
}

}  // namespace tandem::cli::bench
