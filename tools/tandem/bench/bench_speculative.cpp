// `tandem bench` with -md or --spec-type: speculative generation against plain generation, greedy, and the
// speed-up projected from the draft's cost and the verification curve (bench/bench.h).
#include <algorithm>
#include <cmath>

#include "bench/bench.h"
#include "tandem/error.h"
#include "tandem/latency.h"
#include "tandem/session.h"
#include "tandem/tokenizer.h"

namespace tandem::cli::bench {

namespace {

// The runs of one speculative test: tokens/s of each plain and speculative run, the last speculative run's
// statistics, and the inter-token gaps of the last plain [0] and speculative [1] run.
struct PairedRuns {
    std::vector<double> plain_ts, spec_ts;
    SpecStats st;
    std::vector<double> gaps_of[2];
};

// Plain and speculative runs alternate in the order ABBA ABBA ... (the machine's speed drifts with its
// neighbours' load; this cancels a steady drift), -r pairs. Each speculative output must equal the plain one.
PairedRuns run_pairs(const ModelBench& b, const SpecBench& sb, const SpecParams& spec,
                     const std::shared_ptr<const Model>& dmodel, const std::vector<int32_t>& ids) {
    const int ctx = int(ids.size()) + sb.n_spec + 64;
    SamplerParams sp;
    sp.temp = 0;
    PairedRuns out;
    auto run_gen = [&](SpecParams sparams, SpecStats* st) {
        SessionParams tp{ctx, 0, 512};
        tp.recurrent_keep = kRecurrentKeepTarget;  // as generate and serve make a target
        Session target(b.model, tp, b.pool);
        std::unique_ptr<Session> draft =
            make_draft(sparams.type, b.model, dmodel, SessionParams{ctx, 0, 512}, sb.draft_layers, b.pool, &target)
                .session;
        Generator g(target, draft.get(), sp, sparams);
        g.start(ids);
        std::vector<int32_t> outt;
        DeliveryClock clock;  // inter-token latency: one delivery per round
        auto t0 = Clock::now();
        while (int(outt.size()) < sb.n_spec && g.step(outt, sb.n_spec - int(outt.size())))
            clock.deliver(secs(t0, Clock::now()) * 1e3);
        double dt = secs(t0, Clock::now());
        if (st) *st = g.stats();
        out.gaps_of[sparams.type == SpecType::NONE ? 0 : 1] = clock.gaps();
        return std::make_pair(outt, double(outt.size()) / dt);
    };
    for (int rep = 0; rep < b.reps; rep++) {
        std::pair<std::vector<int32_t>, double> p, q;
        if (rep % 2 == 0) {
            p = run_gen(SpecParams{}, nullptr);
            q = run_gen(spec, &out.st);
        } else {
            q = run_gen(spec, &out.st);
            p = run_gen(SpecParams{}, nullptr);
        }
        if (q.first != p.first) throw Error("internal: speculative output differs from plain greedy output");
        out.plain_ts.push_back(p.second);
        out.spec_ts.push_back(q.second);
    }
    return out;
}

// Draft step cost relative to a target step, measured on this machine now (draft and self-speculation; 0 for
// the proposers without a model).
double draft_cost_ratio(const ModelBench& b, const SpecBench& sb, const std::shared_ptr<const Model>& dmodel) {
    if (sb.spec.type == SpecType::MTP || (dmodel && dmodel->assistant()))  // estimated
        return draft_cost_prior(SpecType::MTP, *b.model, dmodel.get(), 0);
    if (dmodel && dmodel->eagle3()) return draft_cost_prior(SpecType::EAGLE3, *b.model, dmodel.get(), 0);
    if (sb.spec.type != SpecType::DRAFT && sb.spec.type != SpecType::SELF) return 0;
    auto step_time = [&](std::shared_ptr<const Model> m, int layers) {
        Session s(m, SessionParams{64, layers, 512}, b.pool);
        auto toks = random_tokens(33, m->hparams().n_vocab, 9);
        s.decode(&toks[0], 1, false);
        auto t0 = Clock::now();
        for (int i = 1; i < 33; i++) s.decode(&toks[size_t(i)], 1, false);
        return secs(t0, Clock::now()) / 32;
    };
    double tt = step_time(b.model, 0);
    double td = sb.spec.type == SpecType::DRAFT ? step_time(dmodel, 0)
                                                : step_time(b.model, self_draft_layers(*b.model, sb.draft_layers));
    return td / tt;
}

// Leviathan et al.: speed-up(k) = (1 - a^(k+1)) / ((1 - a) (k c + v(k))), v(k) = verification cost of k+1 tokens
// relative to one step, from the vb curve. The best draft length k <= n_max and its speed-up at a few acceptances.
nlohmann::ordered_json projections(const VerifyCurve& curve, double c, int n_max) {
    nlohmann::ordered_json proj = nlohmann::ordered_json::array();
    for (double a : {0.5, 0.7, 0.9}) {
        double best = 1.0;
        int best_k = 0;
        for (int k = 1; k <= std::max(1, n_max); k++) {
            double s = (1 - std::pow(a, k + 1)) / ((1 - a) * (k * c + curve.relative_cost(k + 1)));
            if (s > best) {
                best = s;
                best_k = k;
            }
        }
        proj.push_back({{"acceptance", a}, {"best_draft_len", best_k}, {"speedup", best}});
    }
    return proj;
}

}  // namespace

nlohmann::ordered_json bench_spec(const ModelBench& b, const SpecBench& sb, const VerifyCurve& curve) {
    auto tok = Tokenizer::from_gguf(b.model->gguf());
    auto ids = tok->encode(sb.prompt, true, false);
    SpecParams spec = sb.spec;
    const std::shared_ptr<const Model> dmodel =
        build_speculation(b.model, spec, sb.draft_path, true, spec.type == SpecType::SELF ? sb.draft_layers : 0)
            .draft_model;
    // the draft's cost prior as generate and serve set it (SELF: also checks K < L)
    spec.draft_cost_prior = draft_cost_prior(spec.type, *b.model, dmodel.get(), sb.draft_layers);
    const PairedRuns runs = run_pairs(b, sb, spec, dmodel, ids);
    const SpecStats& st = runs.st;
    // The speed-up is the median of the per-pair ratios: the two runs of a pair are seconds apart, so a change
    // in the machine's speed between pairs cancels (a ratio of medians would keep it).
    std::vector<double> ratios;
    for (size_t i = 0; i < runs.plain_ts.size(); i++) ratios.push_back(runs.spec_ts[i] / runs.plain_ts[i]);
    const double c = draft_cost_ratio(b, sb, dmodel);
    nlohmann::ordered_json spec_json = {{"type", spec_types_name(spec)},
                                        {"n_predict", sb.n_spec},
                                        {"plain_ts", median_of(runs.plain_ts)},
                                        {"spec_ts", median_of(runs.spec_ts)},
                                        {"speedup", median_of(ratios)},
                                        {"accept", st.accept_rate()},
                                        {"n_drafted", st.n_drafted},
                                        {"n_accept", st.n_accept},
                                        {"mean_accepted_length", st.mean_accepted_length()},
                                        {"n_rounds_drafted", st.n_rounds_drafted},
                                        {"n_rounds", st.n_rounds},
                                        {"draft_cost_ratio", c},
                                        {"tree",
                                         {{"enabled", spec.tree},
                                          {"rounds", st.n_tree_rounds},
                                          {"alternatives", st.n_tree_nodes},
                                          {"alternatives_accepted", st.n_tree_accept}}},
                                        {"projected", projections(curve, c, spec.n_max)}};
    // Inter-token latency (gaps between deliveries; tandem/latency.h) of the last plain and speculative runs.
    for (int i = 0; i < 2; i++) {
        const LatencySummary l = summarize_latency(runs.gaps_of[i]);
        spec_json[i == 0 ? "plain_itl_ms" : "spec_itl_ms"] = {
            {"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}, {"max", l.max}};
    }
    return spec_json;
}

}  // namespace tandem::cli::bench
