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
    std::vector<int> pp = {512}, tg = {128}, vb = {1, 2, 4, 8, 16};
    int reps = 5, n_threads = 2, n_spec = 128;
    bool json_out = false, skip_bw = false, vb_tree = false;
    SpecParams spec;
    SpecFlags sf{spec};  // -md, --draft-layers and whether --spec-type was given
};

// Parses argv into f (throws Error); the speculative flags are resolved by the caller (after --tokenize).
void parse_bench_flags(int argc, char** argv, BenchFlags& f) {
    ArgParser ap(
        "usage: tandem bench -m MODEL [-p 512] [-n 128] [--vb 1,2,4,8,16] [-r 5] [-t 2] [--json]\n"
        "       [-md DRAFT | --spec-type ngram|self] [--spec-n 128] [--prompt TEXT]");
    ap.add({"-m", "--model"}, "FNAME", "model", [&](const std::string& v) { f.model_path = v; });
    ap.add({"-p", "--n-prompt"}, "N[,N]", "prompt-processing tests (0 = none)",
           [&](const std::string& v) { f.pp = parse_list("-p", v); });
    ap.add({"-n", "--n-gen"}, "N[,N]", "generation tests (0 = none)",
           [&](const std::string& v) { f.tg = parse_list("-n", v); });
    ap.add({"--vb"}, "K[,K]", "verification batch sizes after a 256-token context (empty: none)",
           [&](const std::string& v) { f.vb = v.empty() ? std::vector<int>{} : parse_list("--vb", v); });
    ap.flag({"--vb-tree"}, "also time token trees of each --vb size (vtK: a chain with 2 alternatives at each depth)",
            [&] { f.vb_tree = true; });
    ap.add({"-r", "--repetitions"}, "N", "repetitions (5)",
           [&](const std::string& v) { f.reps = std::max(1, to_int_in("-r", v, 1, 100000)); });
    ap.add({"-t", "--threads"}, "N", "threads (2)",
           [&](const std::string& v) { f.n_threads = to_int_in("-t", v, 1, 1024); });
    ap.flag({"--json"}, "print a JSON array instead of a table", [&] { f.json_out = true; });
    ap.flag({"--no-bandwidth"}, "skip the memory bandwidth measurement", [&] { f.skip_bw = true; });
    add_spec_flags(ap, f.sf);
    ap.add({"--spec-n"}, "N", "tokens generated in the speculative test (128)",
           [&](const std::string& v) { f.n_spec = to_int_in("--spec-n", v, 1, 1 << 24); });
    ap.add({"--prompt"}, "TEXT", "prompt of the speculative test", [&](const std::string& v) { f.prompt = v; });
    ap.add({"--tokenize"}, "FNAME", "only measure tokenizer throughput on this text file (-m may be vocab-only)",
           [&](const std::string& v) { f.tokenize_file = v; });
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (f.model_path.empty()) throw Error("-m MODEL is required");
}

// The KV cache of the largest context the model tests used (f16 K and V), in MiB.
double largest_kv_mib(const HParams& hp, const BenchFlags& f) {
    int max_ctx = 256 + 64;
    for (int n : f.pp) max_ctx = std::max(max_ctx, std::max(n + 1, 256));
    for (int n : f.tg) max_ctx = std::max(max_ctx, n + 16);
    return double(size_t(hp.n_layer) * size_t(max_ctx) * size_t(hp.n_head_kv) * size_t(hp.head_dim) * 2 * 2) /
           1048576.0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    using namespace bench;
    BenchFlags f;
    parse_bench_flags(argc, argv, f);
    if (!f.tokenize_file.empty()) return bench_tokenizer(f.model_path, f.tokenize_file, f.reps, f.json_out);
    resolve_spec_flags(f.sf);

    if (auto w = ThreadPool::oversubscription_warning(f.n_threads); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    ThreadPool pool(f.n_threads);
    auto model = Model::load(f.model_path);
    std::unique_ptr<BandwidthProbe> probe;
    if (!f.skip_bw) probe = std::make_unique<BandwidthProbe>(pool);
    const ModelBench b{model, pool, probe.get(), f.reps};
    BenchReport rep{
        f.model_path.substr(f.model_path.find_last_of('/') + 1), f.n_threads, bench_prompt(b, f.pp), {}, {}};
    // Peak RSS of the generation tests alone (the target's "during generation"); the overall peak comes below.
    const double overall_before_tg = peak_rss_mib_now();
    const bool tg_peak_ok = reset_peak_rss();
    for (Result& r : bench_generation(b, f.tg)) rep.rows.push_back(r);
    const double probe_mib = probe ? double(BandwidthProbe::kBytes) / 1048576.0 : 0.0;
    rep.memory.generation_peak_rss_mib = tg_peak_ok ? peak_rss_mib_now() - probe_mib : 0.0;
    const VerifyCurve curve = bench_verify(b, f.vb, f.vb_tree, rep.rows);

    // Peak RSS so far (model tests only, less the probe's buffer) against the file size and the largest KV cache.
    rep.memory.peak_rss_mib = std::max(overall_before_tg, peak_rss_mib_now()) - probe_mib;
    rep.memory.file_mib = double(model->gguf().file_size()) / 1048576.0;
    rep.memory.kv_mib = largest_kv_mib(model->hparams(), f);
    if (probe && probe->median() == 0) probe->measure();
    rep.memory.bandwidth_gbps = probe ? probe->median() : 0;

    if (f.spec.type != SpecType::NONE)
        rep.spec = bench_spec(b, SpecBench{f.spec, f.sf.draft_model, f.sf.draft_layers, f.prompt, f.n_spec}, curve);
    if (f.json_out) {
        const auto out = report_json(*model, rep);
        std::printf("%s\n", out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
        return 0;
    }
    print_report(*model, rep);
    return 0;
}

}  // namespace tandem::cli
