// The measuring tools of `tandem bench` (bench/bench.h): medians, random prompts, the bandwidth probe, peak RSS,
// a row's statistics and its bandwidth columns.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sys/mman.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "tandem/cpu.h"
#include "tandem/error.h"

namespace tandem::cli::bench {

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(n_vocab));
    return t;
}

BandwidthProbe::BandwidthProbe(ThreadPool& pool, std::function<double()> device)
    : pool_(pool), device_(std::move(device)) {
    if (device_) return;
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

BandwidthProbe::~BandwidthProbe() { std::free(buf_); }

double BandwidthProbe::measure() {
    if (device_) {
        all_.push_back(device_());
        return all_.back();
    }
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

ComputeRoof measure_compute_roof(ThreadPool& pool) {
    ComputeRoof roof;
    for (bool int8 : {true, false}) {
        int64_t iters = 1 << 14;
        uint64_t sink = 0;
        for (;;) {  // calibrate on one thread: ~50 ms per run
            auto t0 = Clock::now();
            compute_probe(int8, iters, &sink);
            if (secs(t0, Clock::now()) > 0.05 || iters > (int64_t(1) << 40)) break;
            iters *= 2;
        }
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            std::vector<uint64_t> macs(size_t(pool.size()), 0), sinks(size_t(pool.size()), 0);
            auto t0 = Clock::now();
            pool.parallel_for(size_t(pool.size()), [&](size_t b, size_t e, int ti) {
                for (size_t i = b; i < e; i++) macs[size_t(ti)] += compute_probe(int8, iters, &sinks[size_t(ti)]);
            });
            const double s = secs(t0, Clock::now());
            double total = 0;
            for (uint64_t m : macs) total += double(m);
            best = std::max(best, total / s / 1e9);
        }
        (int8 ? roof.int8_gmacs : roof.f32_gmacs) = best;
    }
    return roof;
}

double ComputeRoof::for_model(const Model& m) const {
    const std::string t = m.describe_type();
    return t == "F32" || t == "F16" || t == "BF16" ? f32_gmacs : int8_gmacs;
}

void add_roof(const Model& model, const ComputeRoof& roof, Result& r) {
    const double g = roof.for_model(model);
    if (g <= 0 || r.ts.empty()) return;
    const bool prompt = r.test.rfind("pp", 0) == 0;  // logits of the last token only
    r.roof_fraction = model.macs_per_token(!prompt) * r.mean() / 1e9 / g;
}

bool reset_peak_rss() {
    FILE* f = std::fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = std::fputs("5", f) >= 0;
    return std::fclose(f) == 0 && ok;
}

double peak_rss_mib_now() {
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

double Result::mean() const {
    double s = 0;
    for (double v : ts) s += v;
    return ts.empty() ? 0 : s / double(ts.size());
}

double Result::sd() const {
    if (ts.size() < 2) return 0;
    double m = mean(), s = 0;
    for (double v : ts) s += (v - m) * (v - m);
    return std::sqrt(s / double(ts.size() - 1));
}

std::string depth_suffix(int depth) { return depth > 0 ? " @ d" + std::to_string(depth) : ""; }

double kv_bytes_at(const Session& s, int depth) { return double(s.kv_bytes_seen(depth)); }

void fill_depth(Session& s, int depth) {
    s.truncate(0);
    if (depth > 0) s.decode(random_tokens(depth, s.n_vocab(), 7), false);
}

void back_to_depth(const ModelBench& b) {
    if (b.session->can_truncate(b.depth)) b.session->truncate(b.depth);
    else fill_depth(*b.session, b.depth);
}

void add_bandwidth(const Model& model, Result& r, const std::vector<double>& passes_per_s,
                   const std::vector<double>& probes, int n_tok, double other_bytes) {
    const double pbytes = model.bytes_per_pass(n_tok) + other_bytes;
    r.gbps =
        pbytes *
        (r.ts.empty() ? 0
                      : std::accumulate(passes_per_s.begin(), passes_per_s.end(), 0.0) / double(passes_per_s.size())) /
        1e9;
    if (probes.size() != passes_per_s.size() || probes.empty()) return;
    for (double p : probes)
        if (p <= 0) return;  // a probe that could not run (a GPU without room for its buffers)
    double f = 0;
    for (size_t i = 0; i < probes.size(); i++) f += pbytes * passes_per_s[i] / 1e9 / probes[i];
    r.bw_fraction = f / double(probes.size());
}

}  // namespace tandem::cli::bench
