// `tandem bench`: llama-bench style measurements (pp, tg, verification curve vbK), the machine's memory read
// bandwidth measured in the same run, and speculative generation with and without a draft. This file parses the
// flags and runs the tests in order; each kind of test is in bench/ (bench/bench.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "bench/bench.h"
#include "commands.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/speculative.h"
#include "tandem/thread_pool.h"

namespace tandem::cli {

namespace {

std::vector<int> parse_list(const std::string& flag, const std::string& v) {
    std::vector<int> out;
    for (const std::string& item : split_list(v))
        out.push_back(to_int_in(flag, item, 0, 1 << 20));  // token counts and batch sizes
    return out;
}

struct BenchFlags {
    std::string model_path, prompt = "Once upon a time", tokenize_file;
    std::vector<int> pp = {512}, tg = {128}, vb = {1, 2, 4, 8, 16}, depths = {0};
    int reps = 5, n_threads = 2, n_spec = 128;
    bool json_out = false, skip_bw = false, vb_tree = false;
    SpecParams spec;
    SpecFlags sf{spec};  // -md, --draft-layers and whether --spec-type was given
    CacheFlags cache;  // -ctk, -ctv (the draft's: -ctkd, -ctvd)
    SplitOptions split;  // -sm, -ts, --rank-timeout: the model across MPI ranks
    GpuFlags gpu;  // -ngl, -dev, -mg: the model on a GPU
};

// Parses argv into f (throws Error); the speculative flags are resolved by the caller (after --tokenize).
void parse_bench_flags(int argc, char** argv, BenchFlags& f) {
    ArgParser ap(
        "usage: tandem bench -m MODEL [-p 512] [-n 128] [--vb 1,2,4,8,16] [-d 0,4096] [-ctk T -ctv T] [-r 5] [-t 2]\n"
        "       [--json]\n"
        "       [-md DRAFT | --spec-type ngram|self] [--spec-n 128] [--prompt TEXT]");
    ap.add({"-m", "--model"}, "FNAME", "model", [&](const std::string& v) { f.model_path = v; });
    ap.add({"-p", "--n-prompt"}, "N[,N]", "prompt-processing tests (0 = none)",
           [&](const std::string& v) { f.pp = parse_list("-p", v); });
    ap.add({"-n", "--n-gen"}, "N[,N]", "generation tests (0 = none)",
           [&](const std::string& v) { f.tg = parse_list("-n", v); });
    ap.add({"--vb"}, "K[,K]", "verification batch sizes after a 256-token context (empty: none)",
           [&](const std::string& v) { f.vb = v.empty() ? std::vector<int>{} : parse_list("--vb", v); });
    ap.add({"-d", "--n-depth"}, "D[,D]", "run every test after D positions already in the cache (0)",
           [&](const std::string& v) { f.depths = parse_list("-d", v); });
    add_cache_flags(ap, f.cache);
    add_gpu_flags(ap, f.gpu, false);
    ap.flag({"--vb-tree"}, "also time token trees of each --vb size (vtK: a chain with 2 alternatives at each depth)",
            [&] { f.vb_tree = true; });
    ap.add({"-r", "--repetitions"}, "N", "repetitions (5)",
           [&](const std::string& v) { f.reps = std::max(1, to_int_in("-r", v, 1, 100000)); });
    ap.add({"-t", "--threads"}, "N", "threads (2)",
           [&](const std::string& v) { f.n_threads = to_int_in("-t", v, 1, 1024); });
    ap.flag({"--json"}, "print a JSON array instead of a table", [&] { f.json_out = true; });
    ap.flag({"--no-bandwidth"}, "skip the memory bandwidth measurement", [&] { f.skip_bw = true; });
    add_spec_flags(ap, f.sf);
    add_split_flags(ap, &f.split, f.gpu);
    ap.add({"--spec-n"}, "N", "tokens generated in the speculative test (128)",
           [&](const std::string& v) { f.n_spec = to_int_in("--spec-n", v, 1, 1 << 24); });
    ap.add({"--prompt"}, "TEXT", "prompt of the speculative test", [&](const std::string& v) { f.prompt = v; });
    ap.add({"--tokenize"}, "FNAME", "only measure tokenizer throughput on this text file (-m may be vocab-only)",
           [&](const std::string& v) { f.tokenize_file = v; });
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (f.model_path.empty()) throw Error("-m MODEL is required");
}

// Positions the tests need after the depth: the largest prompt, generation or verification context.
int room_after_depth(const BenchFlags& f, int depth) {
    int room = 64;
    for (int n : f.pp) room = std::max(room, n + 1);
    for (int n : f.tg) room = std::max(room, n + 16);
    for (int n : f.vb) room = std::max(room, std::max(0, 256 - depth) + n + 1);
    return room;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    using namespace bench;
    BenchFlags f;
    parse_bench_flags(argc, argv, f);
    if (!f.tokenize_file.empty()) return bench_tokenizer(f.model_path, f.tokenize_file, f.reps, f.json_out);
    resolve_spec_flags(f.sf);

    if (auto w = ThreadPool::oversubscription_warning(f.n_threads); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    std::shared_ptr<Cluster> cluster;  // one of several MPI ranks: rank 0 measures, the others run their layers
    if (int rc = 0; run_as_rank(f.split, f.model_path, f.n_threads, cluster, &rc)) return rc;
    ThreadPool pool(f.n_threads);
    LoadOptions load;
    load.cluster = cluster;
    auto model = Model::load(f.model_path, load);
    int max_ctx = 0;
    for (int d : f.depths) max_ctx = std::max(max_ctx, d + room_after_depth(f, d));
    const std::shared_ptr<const GpuModel> gpu = place_by_flags(
        f.gpu, false, model,
        kv_cache_bytes(*model, SessionParams{max_ctx, 0, 512, f.cache.type_k, f.cache.type_v, f.cache.swa_full},
                       max_ctx));
    std::unique_ptr<BandwidthProbe> probe;  // on a GPU, the device's copy probe
    if (!f.skip_bw && gpu) probe = std::make_unique<BandwidthProbe>(pool, [gpu] { return gpu_copy_probe_gbps(*gpu); });
    else if (!f.skip_bw) probe = std::make_unique<BandwidthProbe>(pool);
    BenchReport rep{f.model_path.substr(f.model_path.find_last_of('/') + 1), f.n_threads, {}, {}, {}};
    rep.type_k = type_name(f.cache.type_k);
    rep.type_v = type_name(f.cache.type_v);
    double overall_peak = 0, tg_peak = 0;
    bool tg_peak_ok = true;
    VerifyCurve curve;  // the first depth's (the speculative test's projection)
    for (size_t di = 0; di < f.depths.size(); di++) {
        const int depth = f.depths[di];
        SessionParams sp{depth + room_after_depth(f, depth), 0, 512, f.cache.type_k, f.cache.type_v, f.cache.swa_full};
        sp.gpu = gpu;
        Session s(model, sp, pool);
        if (depth > 0) {
            const auto t0 = Clock::now();
            fill_depth(s, depth);
            std::fprintf(stderr, "depth %d: cache filled in %.1f s (%s)\n", depth, secs(t0, Clock::now()),
                         kv_cache_line("bench", s).c_str());
        }
        rep.memory.kv_mib = std::max(rep.memory.kv_mib, double(s.kv_bytes()) / 1048576.0);
        rep.memory.state_mib = double(s.state_bytes()) / 1048576.0;
        const ModelBench b{model, pool, probe.get(), f.reps, &s, depth};
        for (Result& r : bench_prompt(b, f.pp)) rep.rows.push_back(r);
        // Peak RSS of the generation tests alone (the target's "during generation"); the overall peak comes below.
        overall_peak = std::max(overall_peak, peak_rss_mib_now());
        tg_peak_ok = tg_peak_ok && reset_peak_rss();
        for (Result& r : bench_generation(b, f.tg)) rep.rows.push_back(r);
        tg_peak = std::max(tg_peak, peak_rss_mib_now());
        const VerifyCurve c = bench_verify(b, f.vb, f.vb_tree, rep.rows);
        if (di == 0) curve = c;
        overall_peak = std::max(overall_peak, peak_rss_mib_now());
    }
    const double probe_mib = probe && !gpu ? double(BandwidthProbe::kBytes) / 1048576.0 : 0.0;
    rep.memory.generation_peak_rss_mib = tg_peak_ok ? tg_peak - probe_mib : 0.0;
    // Peak RSS (model tests only, less the probe's buffer) against the file size and the largest KV cache.
    rep.memory.peak_rss_mib = overall_peak - probe_mib;
    rep.memory.file_mib = double(model->gguf().file_size()) / 1048576.0;
    if (probe && probe->median() == 0) probe->measure();
    rep.memory.bandwidth_gbps = probe ? probe->median() : 0;
    if (gpu && probe) rep.memory.bw_device = gpu_placement_info(*gpu).device;
    if (!gpu) rep.memory.roof = measure_compute_roof(pool);  // the CPU's (no GPU compute roof yet)
    for (Result& r : rep.rows)
        if (r.test.rfind("pp", 0) == 0 || r.test.rfind("vb", 0) == 0 || r.test.rfind("vt", 0) == 0)
            add_roof(*model, rep.memory.roof, r);

    if (f.spec.type != SpecType::NONE)
        rep.spec = bench_spec(ModelBench{model, pool, probe.get(), f.reps, nullptr, 0},
                              SpecBench{f.spec, f.sf.draft_model, f.sf.draft_layers, f.prompt, f.n_spec}, curve);
    if (f.json_out) {
        const auto out = report_json(*model, rep);
        std::printf("%s\n", out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
        return 0;
    }
    print_report(*model, rep);
    return 0;
}

}  // namespace tandem::cli
