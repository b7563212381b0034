// `tandem bench`: llama-bench style measurements (pp, tg, verification curve vbK), the machine's memory read
// bandwidth measured in the same run, and speculative generation with and without a draft.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <sys/mman.h>
#include <sys/resource.h>

#include "args.h"
#include "commands.h"
#include "io.h"
#include "tandem/latency.h"
#include "tandem/cpu.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/speculative.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Memory read bandwidth (GB/s): the pool's threads sum disjoint parts of a 512 MiB buffer (16x the L3 cache
// here); best of 3 passes. The machine's bandwidth moves with its neighbours' load (33-60 GB/s within minutes
// on the development machine), so a probe runs beside each generation repetition and each repetition is
// compared with its own probe.
class BandwidthProbe {
public:
    explicit BandwidthProbe(ThreadPool& pool) : pool_(pool) {
        buf_ = static_cast<uint64_t*>(std::aligned_alloc(2 << 20, kBytes));
        if (!buf_) throw Error("bandwidth test: cannot allocate 512 MiB");
#ifdef MADV_HUGEPAGE
        ::madvise(buf_, kBytes, MADV_HUGEPAGE);  // fewer TLB misses, as the kernels' repacked weights
#endif
        const size_t n = kBytes / 8;
        uint64_t* buf = buf_;
        pool_.parallel_for(n / 4096, [&](size_t b, size_t e, int) {
            for (size_t i = b * 4096; i < e * 4096; i++) buf[i] = i;
        });
    }
    ~BandwidthProbe() { std::free(buf_); }
    BandwidthProbe(const BandwidthProbe&) = delete;
    BandwidthProbe& operator=(const BandwidthProbe&) = delete;
    static constexpr size_t kBytes = size_t(512) << 20;

    double measure() {
        const size_t n = kBytes / 8;
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            std::vector<uint64_t> part(size_t(pool_.size()), 0);
            auto t0 = Clock::now();
            pool_.parallel_for(n / 4096, [&](size_t b, size_t e, int ti) {
                part[size_t(ti)] += memory_stream_sum(buf_ + b * 4096, (e - b) * 4096);
            });
            double s = secs(t0, Clock::now());
            for (auto v : part) sink_ = sink_ + v;
            best = std::max(best, double(kBytes) / s / 1e9);
        }
        all_.push_back(best);
        return best;
    }
    double median() const { return median_of(all_); }

private:
    ThreadPool& pool_;
    uint64_t* buf_ = nullptr;
    std::vector<double> all_;
    volatile uint64_t sink_ = 0;
};

// Peak resident memory (VmHWM) can be reset on Linux by writing 5 to /proc/self/clear_refs, so the peak of one
// phase (generation) can be told from the load's and prompt processing's. Returns false where that is refused.
bool reset_peak_rss() {
    FILE* f = std::fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = std::fputs("5", f) >= 0;
    return std::fclose(f) == 0 && ok;
}
double peak_rss_mib_now() {  // VmHWM, or the process's lifetime peak where /proc is not there
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        long kb = -1;
        while (std::fgets(line, sizeof line, f))
            if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
        std::fclose(f);
        if (kb >= 0) return double(kb) / 1024.0;
    }
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_maxrss) / 1024.0;
}

struct Result {
    std::string test;
    std::vector<double> ts;  // tokens/s of each repetition
    double gbps = 0, bw_fraction = 0;
    double rel_vb1 = 0;  // vbK: median over repetitions of (time of this pass / time of the 1-token pass)
    double mean() const {
        double s = 0;
        for (double v : ts) s += v;
        return ts.empty() ? 0 : s / double(ts.size());
    }
    double sd() const {
        if (ts.size() < 2) return 0;
        double m = mean(), s = 0;
        for (double v : ts) s += (v - m) * (v - m);
        return std::sqrt(s / double(ts.size() - 1));
    }
};

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(n_vocab));
    return t;
}

std::vector<int> parse_list(const std::string& flag, const std::string& v) {
    std::vector<int> out;
    for (const std::string& item : split_list(v))
        out.push_back(to_int_in(flag, item, 0, 1 << 20));  // token counts and batch sizes
    return out;
}

// Tokenizer throughput: encode the whole file `reps` times; tokens/s and MB/s of the best run.
int bench_tokenizer(const std::string& vocab_path, const std::string& text_path, int reps, bool json_out) {
    auto f = GgufFile::open(vocab_path);
    auto tok = Tokenizer::from_gguf(*f);
    std::string text = read_file_bytes(text_path);
    double best = 1e30;
    size_t n_tokens = 0;
    for (int r = 0; r < std::max(1, reps); r++) {
        auto t0 = Clock::now();
        n_tokens = tok->encode(text, false, false).size();
        best = std::min(best, secs(t0, Clock::now()));
    }
    std::string name = vocab_path.substr(vocab_path.find_last_of('/') + 1);
    if (json_out) {
        nlohmann::ordered_json j = {{"vocab", name},
                                    {"tokenizer", tok->model_name()},
                                    {"pre", tok->pre_name()},
                                    {"bytes", text.size()},
                                    {"tokens", n_tokens},
                                    {"tokens_per_second", n_tokens / best},
                                    {"mb_per_second", text.size() / best / 1e6}};
        std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    } else {
        std::printf("| vocab | tokenizer | bytes | tokens | tokens/s | MB/s |\n|---|---|---|---|---|---|\n");
        std::printf("| %s | %s/%s | %zu | %zu | %.0f | %.2f |\n", name.c_str(), tok->model_name().c_str(),
                    tok->pre_name().c_str(), text.size(), n_tokens, n_tokens / best, text.size() / best / 1e6);
    }
    return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    std::string model_path, prompt = "Once upon a time";
    std::vector<int> pp = {512}, tg = {128}, vb = {1, 2, 4, 8, 16};
    int reps = 5, n_threads = 2, n_spec = 128;
    bool json_out = false, skip_bw = false;
    SpecParams spec;
    SpecFlags sf{spec};  // -md, --draft-layers and whether --spec-type was given
    const std::string& draft_path = sf.draft_model;
    const int& draft_layers = sf.draft_layers;
    ArgParser ap(
        "usage: tandem bench -m MODEL [-p 512] [-n 128] [--vb 1,2,4,8,16] [-r 5] [-t 2] [--json]\n"
        "       [-md DRAFT | --spec-type ngram|self] [--spec-n 128] [--prompt TEXT]");
    ap.add({"-m", "--model"}, "FNAME", "model", [&](const std::string& v) { model_path = v; });
    ap.add({"-p", "--n-prompt"}, "N[,N]", "prompt-processing tests (0 = none)",
           [&](const std::string& v) { pp = parse_list("-p", v); });
    ap.add({"-n", "--n-gen"}, "N[,N]", "generation tests (0 = none)",
           [&](const std::string& v) { tg = parse_list("-n", v); });
    ap.add({"--vb"}, "K[,K]", "verification batch sizes after a 256-token context (empty: none)",
           [&](const std::string& v) { vb = v.empty() ? std::vector<int>{} : parse_list("--vb", v); });
    bool vb_tree = false;
    ap.flag({"--vb-tree"}, "also time token trees of each --vb size (vtK: a chain with 2 alternatives at each depth)",
            [&] { vb_tree = true; });
    ap.add({"-r", "--repetitions"}, "N", "repetitions (5)",
           [&](const std::string& v) { reps = std::max(1, to_int_in("-r", v, 1, 100000)); });
    ap.add({"-t", "--threads"}, "N", "threads (2)",
           [&](const std::string& v) { n_threads = to_int_in("-t", v, 1, 1024); });
    ap.flag({"--json"}, "print a JSON array instead of a table", [&] { json_out = true; });
    ap.flag({"--no-bandwidth"}, "skip the memory bandwidth measurement", [&] { skip_bw = true; });
    add_spec_flags(ap, sf);
    ap.add({"--spec-n"}, "N", "tokens generated in the speculative test (128)",
           [&](const std::string& v) { n_spec = to_int_in("--spec-n", v, 1, 1 << 24); });
    ap.add({"--prompt"}, "TEXT", "prompt of the speculative test", [&](const std::string& v) { prompt = v; });
    std::string tokenize_file;
    ap.add({"--tokenize"}, "FNAME", "only measure tokenizer throughput on this text file (-m may be vocab-only)",
           [&](const std::string& v) { tokenize_file = v; });
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (model_path.empty()) throw Error("-m MODEL is required");
    if (!tokenize_file.empty()) return bench_tokenizer(model_path, tokenize_file, reps, json_out);
    resolve_spec_flags(sf);

    if (auto w = ThreadPool::oversubscription_warning(n_threads); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    ThreadPool pool(n_threads);
    auto model = Model::load(model_path);
    const HParams& hp = model->hparams();
    const double wbytes = double(model->weights_bytes());
    std::unique_ptr<BandwidthProbe> probe;
    if (!skip_bw) probe = std::make_unique<BandwidthProbe>(pool);
    std::string name = model_path.substr(model_path.find_last_of('/') + 1);
    std::vector<Result> results;
    // Weight bytes streamed per second, and its fraction of the bandwidth: the mean over repetitions of each
    // repetition's rate against the probe run just before it.
    // The bytes of a pass over n tokens are Model::bytes_per_pass(n): the matrices it reads (of an MoE, the
    // experts its tokens select, expected under uniform routing).
    auto add_bw = [&](Result& r, const std::vector<double>& passes_per_s, const std::vector<double>& probes,
                      int n_tok) {
        const double pbytes = model->bytes_per_pass(n_tok);
        r.gbps = pbytes *
                 (r.ts.empty()
                      ? 0
                      : std::accumulate(passes_per_s.begin(), passes_per_s.end(), 0.0) / double(passes_per_s.size())) /
                 1e9;
        if (probes.size() != passes_per_s.size() || probes.empty()) return;
        double f = 0;
        for (size_t i = 0; i < probes.size(); i++) f += pbytes * passes_per_s[i] / 1e9 / probes[i];
        r.bw_fraction = f / double(probes.size());
    };

    for (int n : pp) {
        if (n <= 0) continue;
        Result r{"pp" + std::to_string(n), {}};
        auto toks = random_tokens(n, hp.n_vocab, 1);
        for (int rep = 0; rep <= reps; rep++) {
            Session s(model, SessionParams{std::max(n + 1, 256), 0, 512}, pool);
            auto t0 = Clock::now();
            s.decode(toks, false);
            if (rep > 0) r.ts.push_back(n / secs(t0, Clock::now()));  // rep 0 warms up
        }
        results.push_back(r);
    }
    // Peak RSS of the generation tests alone (the target's "during generation"); the overall peak comes below.
    const double overall_before_tg = peak_rss_mib_now();
    const bool tg_peak_ok = reset_peak_rss();
    for (int n : tg) {
        if (n <= 0) continue;
        Result r{"tg" + std::to_string(n), {}};
        auto toks = random_tokens(n, hp.n_vocab, 2);
        std::vector<double> probes;
        for (int rep = 0; rep <= reps; rep++) {
            Session s(model, SessionParams{n + 16, 0, 512}, pool);
            const double bw_now = rep > 0 && probe ? probe->measure() : 0;
            auto t0 = Clock::now();
            for (int i = 0; i < n; i++) s.decode(&toks[size_t(i)], 1, false);
            if (rep > 0) {
                r.ts.push_back(n / secs(t0, Clock::now()));
                if (probe) probes.push_back(bw_now);
            }
        }
        add_bw(r, r.ts, probes, 1);
        results.push_back(r);
    }
    const double probe_mib = probe ? double(BandwidthProbe::kBytes) / 1048576.0 : 0.0;
    const double gen_peak_mib = tg_peak_ok ? peak_rss_mib_now() - probe_mib : 0.0;
    double vb1 = 0;
    std::vector<std::pair<int, double>> vb_time;  // (K, seconds per pass)
    if (!vb.empty()) {
        for (int k : vb)
            if (k <= 0 || k > 64) throw Error("--vb sizes must be 1..64");
        std::vector<int> ks = vb;
        if (std::find(ks.begin(), ks.end(), 1) == ks.end()) ks.insert(ks.begin(), 1);  // the reference pass
        Session s(model, SessionParams{256 + 64, 0, 512}, pool);
        s.decode(random_tokens(256, hp.n_vocab, 3), false);
        // Repetitions outer, sizes inner: every size of one repetition runs within the same second or so, and
        // "x vb1" is the median of the per-repetition ratios.
        std::vector<std::vector<double>> times(ks.size()), tree_times(ks.size());
        std::vector<double> probes;
        // --vb-tree: a tree of K nodes as the generator builds them at width 3 (a chain, and at each depth two
        // alternatives hanging from the chain node before), verified by Session::decode_tree.
        auto tree_parents = [](int k) {
            std::vector<int32_t> p = {-1};
            int32_t chain = 0;
            while (int(p.size()) < k) {
                const int32_t parent = chain;
                chain = int32_t(p.size());
                p.push_back(parent);
                for (int w = 0; w < 2 && int(p.size()) < k; w++) p.push_back(parent);
            }
            return p;
        };
        for (int rep = 0; rep <= reps; rep++) {
            const double bw_now = rep > 0 && probe ? probe->measure() : 0;
            if (rep > 0 && probe) {
                probes.push_back(bw_now);
                s.decode(random_tokens(1, hp.n_vocab, 4), true);  // untimed: the probe has evicted the caches
                s.truncate(256);
            }
            for (size_t j = 0; j < ks.size(); j++) {
                auto toks = random_tokens(ks[j], hp.n_vocab, uint32_t(4 + ks[j]));
                auto t0 = Clock::now();
                s.decode(toks, true);
                double dt = secs(t0, Clock::now());
                s.truncate(256);
                if (rep > 0) times[j].push_back(dt);
                if (!vb_tree || ks[j] < 2) continue;
                const auto parents = tree_parents(ks[j]);
                t0 = Clock::now();
                s.decode_tree(toks.data(), parents.data(), ks[j]);
                dt = secs(t0, Clock::now());
                s.truncate(256);
                if (rep > 0) tree_times[j].push_back(dt);
            }
        }
        const size_t j1 = size_t(std::find(ks.begin(), ks.end(), 1) - ks.begin());
        // One row (vbK or vtK) from the per-repetition pass times of size index j.
        auto add_row = [&](const std::string& name, size_t j, const std::vector<double>& t) {
            Result r{name, {}};
            std::vector<double> passes, ratios;
            for (size_t i = 0; i < t.size(); i++) {
                r.ts.push_back(ks[j] / t[i]);
                passes.push_back(1.0 / t[i]);
                ratios.push_back(t[i] / times[j1][i]);
            }
            r.rel_vb1 = median_of(ratios);
            add_bw(r, passes, probes, ks[j]);
            results.push_back(r);
        };
        for (size_t j = 0; j < ks.size(); j++) {
            if (std::find(vb.begin(), vb.end(), ks[j]) == vb.end()) continue;
            add_row("vb" + std::to_string(ks[j]), j, times[j]);
            const double pass_s = median_of(times[j]);
            vb_time.emplace_back(ks[j], pass_s);
            if (ks[j] == 1) vb1 = pass_s;
            if (!tree_times[j].empty()) add_row("vt" + std::to_string(ks[j]), j, tree_times[j]);
        }
        if (vb1 == 0) vb1 = median_of(times[j1]);
    }

    // Peak RSS so far (model tests only, less the probe's buffer) against the file size and the largest KV cache.
    const double peak_rss_mib = std::max(overall_before_tg, peak_rss_mib_now()) - probe_mib;
    const double file_mib = double(model->gguf().file_size()) / 1048576.0;
    int max_ctx = 256 + 64;
    for (int n : pp) max_ctx = std::max(max_ctx, std::max(n + 1, 256));
    for (int n : tg) max_ctx = std::max(max_ctx, n + 16);
    const double kv_mib =
        double(size_t(hp.n_layer) * size_t(max_ctx) * size_t(hp.n_head_kv) * size_t(hp.head_dim) * 2 * 2) / 1048576.0;
    if (probe && probe->median() == 0) probe->measure();
    const double bw = probe ? probe->median() : 0;

    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : results)
        out.push_back({{"model", name},
                       {"type", model->describe_type()},
                       {"test", r.test},
                       {"n_threads", n_threads},
                       {"avg_ts", r.mean()},
                       {"stddev_ts", r.sd()},
                       {"gbps", r.gbps},
                       {"bw_fraction", r.bw_fraction}});
    for (size_t i = 0; i < results.size(); i++) {
        if (results[i].rel_vb1 > 0) out[i]["x_vb1"] = results[i].rel_vb1;
        // MoE verification batches: the experts a batch of K tokens is expected to read, and its bytes against vb1's
        const Result& r = results[i];
        if (hp.n_expert > 0 && r.test.rfind("vb", 0) == 0) {
            const int k = std::stoi(r.test.substr(2));
            out[i]["expected_experts_per_layer"] = model->expected_experts(k);
            out[i]["expected_bytes_x_vb1"] = model->bytes_per_pass(k) / model->bytes_per_pass(1);
        }
    }

    // Speculative generation, with and without speculation, greedy.
    nlohmann::ordered_json spec_json;
    if (spec.type != SpecType::NONE) {
        auto tok = Tokenizer::from_gguf(model->gguf());
        auto ids = tok->encode(prompt, true, false);
        std::shared_ptr<const Model> dmodel;
        if (spec.type == SpecType::DRAFT) {
            dmodel = Model::load(draft_path);
            check_draft_compatible(*tok, *Tokenizer::from_gguf(dmodel->gguf()));
        }
        const int ctx = int(ids.size()) + n_spec + 64;
        // the draft's cost prior as generate and serve set it (SELF: also checks K < L)
        spec.draft_cost_prior = draft_cost_prior(spec.type, *model, dmodel.get(), draft_layers);
        SamplerParams sp;
        sp.temp = 0;
        std::vector<double> gaps_of[2];  // inter-token gaps of the last plain [0] and speculative [1] run
        auto run_gen = [&](SpecParams sparams, SpecStats* st) {
            Session target(model, SessionParams{ctx, 0, 512}, pool);
            std::unique_ptr<Session> draft =
                make_draft(sparams.type, model, dmodel, ctx, 512, draft_layers, pool).session;
            Generator g(target, draft.get(), sp, sparams);
            g.start(ids);
            std::vector<int32_t> outt;
            DeliveryClock clock;  // inter-token latency: one delivery per round
            auto t0 = Clock::now();
            while (int(outt.size()) < n_spec && g.step(outt, n_spec - int(outt.size())))
                clock.deliver(secs(t0, Clock::now()) * 1e3);
            double dt = secs(t0, Clock::now());
            if (st) *st = g.stats();
            gaps_of[sparams.type == SpecType::NONE ? 0 : 1] = clock.gaps();
            return std::make_pair(outt, double(outt.size()) / dt);
        };
        // Plain and speculative runs alternate in the order ABBA ABBA ... (the machine's speed drifts with its
        // neighbours' load; this cancels a steady drift), -r pairs; medians are reported.
        std::vector<double> plain_v, spec_v;
        SpecStats st;
        for (int rep = 0; rep < reps; rep++) {
            std::pair<std::vector<int32_t>, double> p, q;
            if (rep % 2 == 0) {
                p = run_gen(SpecParams{}, nullptr);
                q = run_gen(spec, &st);
            } else {
                q = run_gen(spec, &st);
                p = run_gen(SpecParams{}, nullptr);
            }
            if (q.first != p.first) throw Error("internal: speculative output differs from plain greedy output");
            plain_v.push_back(p.second);
            spec_v.push_back(q.second);
        }
        const double plain_ts = median_of(plain_v), spec_ts = median_of(spec_v);
        // The speed-up is the median of the per-pair ratios: the two runs of a pair are seconds apart, so a change
        // in the machine's speed between pairs cancels (a ratio of medians would keep it).
        std::vector<double> ratios;
        for (size_t i = 0; i < plain_v.size(); i++) ratios.push_back(spec_v[i] / plain_v[i]);
        const double speedup = median_of(ratios);
        // Draft step cost relative to a target step, measured on this machine now.
        double c = 0;
        if (spec.type == SpecType::DRAFT || spec.type == SpecType::SELF) {
            auto step_time = [&](std::shared_ptr<const Model> m, int layers) {
                Session s(m, SessionParams{64, layers, 512}, pool);
                auto toks = random_tokens(33, m->hparams().n_vocab, 9);
                s.decode(&toks[0], 1, false);
                auto t0 = Clock::now();
                for (int i = 1; i < 33; i++) s.decode(&toks[size_t(i)], 1, false);
                return secs(t0, Clock::now()) / 32;
            };
            double tt = step_time(model, 0);
            double td = spec.type == SpecType::DRAFT ? step_time(dmodel, 0)
                                                     : step_time(model, self_draft_layers(*model, draft_layers));
            c = td / tt;
        }
        // Leviathan et al.: speed-up(k) = (1 - a^(k+1)) / ((1 - a) (k c + v(k))), v(k) = verification cost of
        // k+1 tokens relative to one step, from the vb curve (linear interpolation).
        auto v_of = [&](int n) {
            if (vb_time.empty() || vb1 <= 0) return 1.0;
            std::pair<int, double> lo = vb_time.front(), hi = vb_time.back();
            for (auto& p : vb_time) {
                if (p.first <= n) lo = p;
                if (p.first >= n) {
                    hi = p;
                    break;
                }
            }
            double t = hi.first == lo.first
                           ? lo.second
                           : lo.second + (hi.second - lo.second) * (n - lo.first) / double(hi.first - lo.first);
            if (n > vb_time.back().first) t = vb_time.back().second * n / vb_time.back().first;
            return t / vb1;
        };
        nlohmann::ordered_json proj = nlohmann::ordered_json::array();
        for (double a : {0.5, 0.7, 0.9}) {
            double best = 1.0;
            int best_k = 0;
            for (int k = 1; k <= std::max(1, spec.n_max); k++) {
                double s = (1 - std::pow(a, k + 1)) / ((1 - a) * (k * c + v_of(k + 1)));
                if (s > best) {
                    best = s;
                    best_k = k;
                }
            }
            proj.push_back({{"acceptance", a}, {"best_draft_len", best_k}, {"speedup", best}});
        }
        spec_json = {{"type", spec_types_name(spec)},
                     {"n_predict", n_spec},
                     {"plain_ts", plain_ts},
                     {"spec_ts", spec_ts},
                     {"speedup", speedup},
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
                     {"projected", proj}};
        // Inter-token latency (gaps between deliveries; spec/latency.h) of the last plain and speculative runs.
        for (int i = 0; i < 2; i++) {
            const LatencySummary l = summarize_latency(gaps_of[i]);
            spec_json[i == 0 ? "plain_itl_ms" : "spec_itl_ms"] = {
                {"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}, {"max", l.max}};
        }
        out.push_back({{"model", name},
                       {"type", model->describe_type()},
                       {"test", "spec"},
                       {"n_threads", n_threads},
                       {"spec", spec_json}});
    }

    out.push_back({{"model", name},
                   {"type", model->describe_type()},
                   {"test", "memory"},
                   {"peak_rss_mib", peak_rss_mib},
                   {"generation_peak_rss_mib", gen_peak_mib},
                   {"file_mib", file_mib},
                   {"kv_mib", kv_mib},
                   {"bandwidth_gbps", bw}});
    const CpuInfo cpu = cpu_info();
    out.push_back({{"model", name},
                   {"type", model->describe_type()},
                   {"test", "cpu"},
                   {"level", cpu.level},
                   {"detected", cpu.detected},
                   {"forced", cpu.forced},
                   {"supported", cpu.supported},
                   {"packed_kernel", cpu.packed_kernel}});
    if (json_out) {
        std::printf("%s\n", out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
        return 0;
    }
    std::printf("%s\n", cpu_info_line().c_str());
    std::printf(
        "peak RSS %.1f MiB overall (load, prompt processing, batches), %s during generation; model file %.1f MiB + "
        "KV cache %.1f MiB = %.1f MiB\n",
        peak_rss_mib, gen_peak_mib > 0 ? strprintf("%.1f MiB", gen_peak_mib).c_str() : "not measured", file_mib, kv_mib,
        file_mib + kv_mib);
    std::printf(
        "memory read bandwidth: %.1f GB/s (%d threads, median of the probes; BW %% compares each repetition with "
        "the probe run just before it); model %s, %s, %.2f GB of weights, %.2f GB read per token\n\n",
        bw, n_threads, name.c_str(), model->describe_type().c_str(), wbytes / 1e9, model->bytes_per_pass(1) / 1e9);
    const bool moe = hp.n_expert > 0;
    if (moe)
        std::printf(
            "| model | type | threads | test | t/s | GB/s | BW %% | x vb1 | experts/layer (expected) | bytes x vb1 "
            "(expected) |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n");
    else
        std::printf(
            "| model | type | threads | test | t/s | GB/s | BW %% | x vb1 |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        std::string rel = "";
        if (r.rel_vb1 > 0) rel = strprintf("%.2f", r.rel_vb1);
        if (moe) {
            std::string ex = " | |";
            if (r.test.rfind("vb", 0) == 0) {
                const int k = std::stoi(r.test.substr(2));
                ex = strprintf(" %.1f of %d | %.2f |", model->expected_experts(k), hp.n_expert,
                               model->bytes_per_pass(k) / model->bytes_per_pass(1));
            } else if (r.test.rfind("tg", 0) == 0) {
                ex = strprintf(" %d of %d | |", hp.n_expert_used, hp.n_expert);
            }
            rel += " |" + ex.substr(0, ex.size() - 1);
        }
        std::printf("| %s | %s | %d | %s | %.2f ± %.2f | %s | %s | %s |\n", name.c_str(),
                    model->describe_type().c_str(), n_threads, r.test.c_str(), r.mean(), r.sd(),
                    r.gbps > 0 ? strprintf("%.1f", r.gbps).c_str() : "",
                    r.bw_fraction > 0 ? strprintf("%.0f%%", 100 * r.bw_fraction).c_str() : "", rel.c_str());
    }
    if (!spec_json.is_null()) {
        std::printf(
            "\nspeculative (%s, greedy, %d tokens): plain %.2f t/s, speculative %.2f t/s (medians), speed-up %.2fx "
            "(median of pairs); "
            "acceptance %.1f%% (%d/%d), mean accepted length %.2f, %d of %d rounds drafted; draft/target step cost "
            "%.3f\n",
            spec_types_name(spec).c_str(), n_spec, spec_json["plain_ts"].get<double>(),
            spec_json["spec_ts"].get<double>(), spec_json["speedup"].get<double>(),
            100 * spec_json["accept"].get<double>(), spec_json["n_accept"].get<int>(),
            spec_json["n_drafted"].get<int>(), spec_json["mean_accepted_length"].get<double>(),
            spec_json["n_rounds_drafted"].get<int>(), spec_json["n_rounds"].get<int>(),
            spec_json["draft_cost_ratio"].get<double>());
        for (const char* k : {"plain_itl_ms", "spec_itl_ms"}) {
            const auto& l = spec_json[k];
            std::printf("  inter-token latency, %s: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                        k[0] == 'p' ? "plain" : "speculative", l["p50"].get<double>(), l["p90"].get<double>(),
                        l["p99"].get<double>(), l["max"].get<double>());
        }
        for (const auto& p : spec_json["projected"])
            std::printf("  projected at acceptance %.1f: best draft length %d, speed-up %.2fx\n",
                        p["acceptance"].get<double>(), p["best_draft_len"].get<int>(), p["speedup"].get<double>());
    }
    return 0;
}

}  // namespace tandem::cli
