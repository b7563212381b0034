// The output of `tandem bench` (bench/bench.h): the --json array (one object per row, then "spec", "memory" and
// "cpu") and the tables.
#include <cstdio>

#include "bench/bench.h"
#include "tandem/cpu.h"
#include "tandem/error.h"
#include "tandem/session.h"

namespace tandem::cli::bench {

namespace {

// The K of a "vbK" row; -1 for the other rows.
int vb_size(const Result& r) { return r.test.rfind("vb", 0) == 0 ? std::stoi(r.test.substr(2)) : -1; }

// The MoE columns of a row: experts per layer and bytes against vb1 (expected, under uniform routing).
std::string moe_columns(const Model& model, const Result& r) {
    const HParams& hp = model.hparams();
    std::string ex = " | |";
    if (const int k = vb_size(r); k >= 0) {
        ex = strprintf(" %.1f of %d | %.2f |", model.expected_experts(k), hp.n_expert,
                       model.bytes_per_pass(k) / model.bytes_per_pass(1));
    } else if (r.test.rfind("tg", 0) == 0) {
        ex = strprintf(" %d of %d | |", hp.n_expert_used, hp.n_expert);
    }
    return " |" + ex.substr(0, ex.size() - 1);
}

void print_spec(const nlohmann::ordered_json& spec_json) {
    std::printf(
        "\nspeculative (%s, greedy, %d tokens): plain %.2f t/s, speculative %.2f t/s (medians), speed-up %.2fx "
        "(median of pairs); "
        "acceptance %.1f%% (%d/%d), mean accepted length %.2f, %d of %d rounds drafted; draft/target step cost "
        "%.3f\n",
        spec_json["type"].get<std::string>().c_str(), spec_json["n_predict"].get<int>(),
        spec_json["plain_ts"].get<double>(), spec_json["spec_ts"].get<double>(), spec_json["speedup"].get<double>(),
        100 * spec_json["accept"].get<double>(), spec_json["n_accept"].get<int>(), spec_json["n_drafted"].get<int>(),
        spec_json["mean_accepted_length"].get<double>(), spec_json["n_rounds_drafted"].get<int>(),
        spec_json["n_rounds"].get<int>(), spec_json["draft_cost_ratio"].get<double>());
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

}  // namespace

nlohmann::ordered_json report_json(const Model& model, const BenchReport& rep) {
    const std::string type = model.describe_type();
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : rep.rows) {
        nlohmann::ordered_json row = {
            {"model", rep.name},  {"type", type},        {"test", r.test}, {"n_threads", rep.n_threads},
            {"avg_ts", r.mean()}, {"stddev_ts", r.sd()}, {"gbps", r.gbps}, {"bw_fraction", r.bw_fraction}};
        row["n_depth"] = r.depth;
        row["type_k"] = rep.type_k;
        row["type_v"] = rep.type_v;
        if (r.attn_share > 0) row["attn_share"] = r.attn_share;
        if (r.roof_fraction > 0) row["roof_fraction"] = r.roof_fraction;
        if (r.rel_vb1 > 0) row["x_vb1"] = r.rel_vb1;
        if (r.rel_vb1 > 0 && r.test.rfind("vb", 0) == 0) row["rollback_x_vb1"] = r.rollback_vb1;
        // MoE verification batches: the experts a batch of K tokens is expected to read, and its bytes against vb1's
        if (const int k = vb_size(r); model.hparams().n_expert > 0 && k >= 0) {
            row["expected_experts_per_layer"] = model.expected_experts(k);
            row["expected_bytes_x_vb1"] = model.bytes_per_pass(k) / model.bytes_per_pass(1);
        }
        out.push_back(row);
    }
    if (!rep.spec.is_null())
        out.push_back(
            {{"model", rep.name}, {"type", type}, {"test", "spec"}, {"n_threads", rep.n_threads}, {"spec", rep.spec}});
    const MemoryUse& m = rep.memory;
    out.push_back({{"model", rep.name},
                   {"type", type},
                   {"test", "memory"},
                   {"peak_rss_mib", m.peak_rss_mib},
                   {"generation_peak_rss_mib", m.generation_peak_rss_mib},
                   {"file_mib", m.file_mib},
                   {"kv_mib", m.kv_mib},
                   {"state_mib", m.state_mib},
                   {"bandwidth_gbps", m.bandwidth_gbps},
                   {"bandwidth_device", m.bw_device},
                   {"int8_gmacs", m.roof.int8_gmacs},
                   {"f32_gmacs", m.roof.f32_gmacs}});
    const CpuInfo cpu = cpu_info();
    out.push_back({{"model", rep.name},
                   {"type", type},
                   {"test", "cpu"},
                   {"level", cpu.level},
                   {"detected", cpu.detected},
                   {"forced", cpu.forced},
                   {"supported", cpu.supported},
                   {"packed_kernel", cpu.packed_kernel}});
    return out;
}

void print_report(const Model& model, const BenchReport& rep) {
    const MemoryUse& m = rep.memory;
    std::printf("%s\n", cpu_info_line().c_str());
    std::printf(
        "peak RSS %.1f MiB overall (load, prompt processing, batches), %s during generation; model file %.1f MiB + "
        "KV cache %.1f MiB = %.1f MiB\n",
        m.peak_rss_mib,
        m.generation_peak_rss_mib > 0 ? strprintf("%.1f MiB", m.generation_peak_rss_mib).c_str() : "not measured",
        m.file_mib, m.kv_mib, m.file_mib + m.kv_mib);
    if (m.state_mib > 0)
        std::printf(
            "recurrent state %.1f MiB per position (Gated DeltaNet layers); a serve or generate target holds it for "
            "the last %d positions, each row of a verification pass and up to %d prompt ends (--ctx-checkpoints), a "
            "draft for the last %d\n",
            m.state_mib, kRecurrentKeepTarget, kCtxCheckpoints, kRecurrentKeep);
    const std::string probe =
        m.bw_device.empty() ? strprintf("memory read bandwidth: %.1f GB/s (%d threads", m.bandwidth_gbps, rep.n_threads)
                            : strprintf("device memory bandwidth: %.1f GB/s (%s, a shader's copy, read + written",
                                        m.bandwidth_gbps, m.bw_device.c_str());
    std::printf(
        "%s, median of the probes; BW %% compares each repetition with the probe run just before it); model %s, %s, "
        "%.2f GB of weights, %.2f GB read per token; KV cache K %s, V %s\n\n",
        probe.c_str(), rep.name.c_str(), model.describe_type().c_str(), double(model.weights_bytes()) / 1e9,
        model.bytes_per_pass(1) / 1e9, rep.type_k.c_str(), rep.type_v.c_str());
    if (m.roof.int8_gmacs > 0)
        std::printf(
            "compute roof: int8 %.1f GMAC/s, f32 %.1f GMAC/s (%d threads, the level's widest multiply-accumulate); "
            "roof %% = the weights' MACs per second (%.2f G per token) against the %s roof\n\n",
            m.roof.int8_gmacs, m.roof.f32_gmacs, rep.n_threads, model.macs_per_token() / 1e9,
            m.roof.for_model(model) == m.roof.int8_gmacs ? "int8" : "f32");
    const bool moe = model.hparams().n_expert > 0;
    if (moe)
        std::printf(
            "| model | type | threads | test | t/s | GB/s | BW %% | roof %% | x vb1 | experts/layer (expected) | bytes "
            "x vb1 (expected) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n");
    else
        std::printf(
            "| model | type | threads | test | t/s | GB/s | BW %% | roof %% | x vb1 |\n"
            "|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : rep.rows) {
        std::string rel = "";
        if (r.rel_vb1 > 0) rel = strprintf("%.2f", r.rel_vb1);
        if (moe) rel += moe_columns(model, r);
        std::printf("| %s | %s | %d | %s | %.2f ± %.2f | %s | %s | %s | %s |\n", rep.name.c_str(),
                    model.describe_type().c_str(), rep.n_threads, r.test.c_str(), r.mean(), r.sd(),
                    r.gbps > 0 ? strprintf("%.1f", r.gbps).c_str() : "",
                    r.bw_fraction > 0 ? strprintf("%.0f%%", 100 * r.bw_fraction).c_str() : "",
                    r.roof_fraction > 0 ? strprintf("%.0f%%", 100 * r.roof_fraction).c_str() : "", rel.c_str());
    }
    std::string rb;
    for (const auto& r : rep.rows)
        if (r.rel_vb1 > 0 && r.test.rfind("vb", 0) == 0 && r.test != "vb1")
            rb += strprintf("%s%s %.3g%%", rb.empty() ? "" : ", ", r.test.c_str(), 100 * r.rollback_vb1);
    if (!rb.empty())
        std::printf(
            "rollback of a verification pass whose drafts were all rejected (Session::truncate), in %% of a "
            "one-token step: %s\n",
            rb.c_str());
    if (!rep.spec.is_null()) print_spec(rep.spec);
}

}  // namespace tandem::cli::bench
