// The tests of `tandem bench` (cmd_bench.cpp parses the flags and runs them in order), one file per kind:
// bench_tokenizer.cpp (tokenizer throughput), bench_decode.cpp (pp: prompt processing, tg: generation),
// bench_verify.cpp (vbK/vtK: the verification curve), bench_speculative.cpp (speculative against plain generation),
// bench_report.cpp (the JSON array and the tables), and the measuring tools here (bench_common.cpp).
#pragma once
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/speculative.h"
#include "tandem/thread_pool.h"

namespace tandem::cli::bench {

using Clock = std::chrono::steady_clock;
inline double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double median_of(std::vector<double> v);  // 0 when empty
std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed);  // the same tokens for the same seed

// Memory read bandwidth (GB/s): the pool's threads sum disjoint parts of a 512 MiB buffer (16x the L3 cache
// here); best of 3 passes. The machine's bandwidth moves with its neighbours' load (33-60 GB/s within minutes
// on the development machine), so a probe runs beside each generation repetition and each repetition is
// compared with its own probe.
// On a GPU (`device` given: the model's device, tandem::gpu_copy_probe_gbps) the probe is the device's instead, and
// no host buffer is held.
class BandwidthProbe {
public:
    explicit BandwidthProbe(ThreadPool& pool, std::function<double()> device = {});
    ~BandwidthProbe();
    BandwidthProbe(const BandwidthProbe&) = delete;
    BandwidthProbe& operator=(const BandwidthProbe&) = delete;
    static constexpr size_t kBytes = size_t(512) << 20;

    double measure();  // one probe (best of 3 passes), kept for median()
    double median() const { return median_of(all_); }

private:
    ThreadPool& pool_;
    std::function<double()> device_;
    uint64_t* buf_ = nullptr;
    std::vector<double> all_;
    volatile uint64_t sink_ = 0;
};

// Peak resident memory (VmHWM) can be reset on Linux by writing 5 to /proc/self/clear_refs, so the peak of one
// phase (generation) can be told from the load's and prompt processing's. Returns false where that is refused.
bool reset_peak_rss();
double peak_rss_mib_now();  // VmHWM, or the process's lifetime peak where /proc is not there

// One row of the table: a test (pp512, tg128, vb4, vt4) and its tokens/s over the repetitions.
struct Result {
    std::string test;
    std::vector<double> ts;  // tokens/s of each repetition
    double gbps = 0, bw_fraction = 0;
    double rel_vb1 = 0;  // vbK: median over repetitions of (time of this pass / time of the 1-token pass)
    double rollback_vb1 = 0;  // vbK: median of (time to truncate the K rows again / time of the 1-token pass)
    int depth = 0;  // positions already in the cache (-d)
    double attn_share = 0;  // fraction of the time spent in attention (mean over repetitions)
    double roof_fraction = 0;  // pp/vb rows: the weights' multiply-accumulates per second against the compute roof
    double mean() const;
    double sd() const;  // sample standard deviation; 0 for fewer than 2 repetitions
};

// The compute roof (GMAC/s): every pool thread runs the active level's widest int8 multiply-accumulate
// sequence (or float FMA) on registers only for ~50 ms; best of 3. Matmuls of quantized weights run on int8
// (activations quantized to 8 bits), F32/F16/BF16 weights on float FMA: roof_gmacs picks the one for the model.
struct ComputeRoof {
    double int8_gmacs = 0, f32_gmacs = 0;
    double for_model(const Model& m) const;
};
ComputeRoof measure_compute_roof(ThreadPool& pool);
// Sets r.roof_fraction of a pp/vb row: weight MACs per second (macs_per_token x tokens/s) against the roof.
void add_roof(const Model& model, const ComputeRoof& roof, Result& r);

// What the model tests share: the model, the pool, the bandwidth probe (null: --no-bandwidth), -r, and the
// session they run in: its cache holds `depth` positions of random tokens (llama-bench's -d), filled once; every
// test goes back to them before each repetition (back_to_depth). Its n_ctx has room for every test after the depth.
struct ModelBench {
    std::shared_ptr<const Model> model;
    ThreadPool& pool;
    BandwidthProbe* probe;
    int reps;
    Session* session;
    int depth;
};

// The session back at b.depth positions: truncated, or, where a window-only cache no longer holds them (a test
// longer than its slack), emptied and filled again, untimed. fill_depth: the depth's tokens.
void fill_depth(Session& s, int depth);
void back_to_depth(const ModelBench& b);
// " @ d4096" after a test's name at depth 4096 (llama-bench's spelling); empty at depth 0.
std::string depth_suffix(int depth);
// KV cache bytes a token at position `depth` reads (Session::kv_bytes_seen).
double kv_bytes_at(const Session& s, int depth);

// Weight bytes streamed per second, and its fraction of the bandwidth: the mean over repetitions of each
// repetition's rate against the probe run just before it. The bytes of a pass over n tokens are
// Model::bytes_per_pass(n): the matrices it reads (of an MoE, the experts its tokens select, expected under uniform
// routing). Sets r.gbps and, when there is one probe per repetition, r.bw_fraction.
// `other_bytes` is what the pass moves besides the weights: the KV cache it reads (kv_bytes_at) and a recurrent
// model's states (Session::state_bytes_per_pass).
void add_bandwidth(const Model& model, Result& r, const std::vector<double>& passes_per_s,
                   const std::vector<double>& probes, int n_tok, double other_bytes = 0);

// Tokenizer throughput: encode the whole file `reps` times; prints tokens/s and MB/s of the best run.
int bench_tokenizer(const std::string& vocab_path, const std::string& text_path, int reps, bool json_out);

// ppN: a prompt of N random tokens in one batch (a warm-up repetition first). One row per N > 0.
std::vector<Result> bench_prompt(const ModelBench& b, const std::vector<int>& pp);
// tgN: N single-token steps, each repetition after a bandwidth probe. One row per N > 0.
std::vector<Result> bench_generation(const ModelBench& b, const std::vector<int>& tg);

// The verification curve: the seconds of one pass over K tokens after the depth (at least 256 positions).
struct VerifyCurve {
    std::vector<std::pair<int, double>> time;  // (K, median seconds per pass), the --vb sizes in order
    double vb1 = 0;  // seconds of the 1-token pass
    // v(n): the cost of a pass over n tokens relative to one step, interpolated linearly (linearly extrapolated
    // past the largest K); 1 without a curve.
    double relative_cost(int n) const;
};
// vbK (and with `tree`, vtK: a tree of K nodes) rows appended to `rows`, for each K of `vb` (1..64).
VerifyCurve bench_verify(const ModelBench& b, const std::vector<int>& vb, bool tree, std::vector<Result>& rows);

// Speculative generation against plain generation, greedy: -r pairs in the order ABBA, medians, the draft's step
// cost, and the projected speed-up at a few acceptance rates (from `curve`). The "spec" object of the JSON.
struct SpecBench {
    SpecParams spec;  // type != NONE
    std::string draft_path;  // -md
    int draft_layers = 0;  // --draft-layers
    std::string prompt;
    int n_spec = 128;
};
nlohmann::ordered_json bench_spec(const ModelBench& b, const SpecBench& sb, const VerifyCurve& curve);

// Memory: peak RSS overall and during generation (less the probe's buffer), the model file and the largest KV
// cache the tests used, and the median of the bandwidth probes.
struct MemoryUse {
    double peak_rss_mib = 0, generation_peak_rss_mib = 0, file_mib = 0, kv_mib = 0, bandwidth_gbps = 0;
    double state_mib = 0;  // one recurrent state (Session::state_bytes), 0 without Gated DeltaNet layers
    std::string bw_device;  // the GPU whose copy probe bandwidth_gbps is ("": host memory's)
    ComputeRoof roof;
};

// Everything the report shows.
struct BenchReport {
    std::string name;  // the model's file name
    int n_threads = 0;
    std::vector<Result> rows;
    std::string type_k = "F16", type_v = "F16";  // the KV cache types of every test
    nlohmann::ordered_json spec;  // bench_spec's object; null without a speculative test
    MemoryUse memory;
};
nlohmann::ordered_json report_json(const Model& model, const BenchReport& rep);  // the --json array
void print_report(const Model& model, const BenchReport& rep);  // the tables

}  // namespace tandem::cli::bench
