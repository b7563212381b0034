#include "args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "tandem/grammar.h"
#include "io.h"
#include "tandem/error.h"
#include "tandem/sampling.h"
#include "tandem/speculative.h"

namespace tandem::cli {

void ArgParser::add(std::vector<std::string> names, std::string value_name, std::string help,
                    std::function<void(const std::string&)> apply) {
    opts_.push_back({std::move(names), std::move(value_name), std::move(help), std::move(apply), {}});
}

void ArgParser::flag(std::vector<std::string> names, std::string help, std::function<void()> apply) {
    opts_.push_back({std::move(names), "", std::move(help), [apply](const std::string&) { apply(); }, {}});
}

void ArgParser::optional(std::vector<std::string> names, std::vector<std::string> values, std::string help,
                         std::function<void(const std::string&)> apply) {
    std::string value_name = "[";
    for (const auto& v : values) value_name += (value_name.size() > 1 ? "|" : "") + v;
    opts_.push_back({std::move(names), value_name + "]", std::move(help), std::move(apply), std::move(values)});
}

std::vector<std::string> ArgParser::parse(int argc, char** argv, int first) {
    std::vector<std::string> positional;
    for (int i = first; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(help().c_str(), stdout);
            std::exit(0);
        }
        if (a.size() < 2 || a[0] != '-' || a == "-") {
            positional.push_back(a);
            continue;
        }
        std::string value;
        bool has_inline = false;
        if (a.rfind("--", 0) == 0) {
            size_t eq = a.find('=');
            if (eq != std::string::npos) {
                value = a.substr(eq + 1);
                a = a.substr(0, eq);
                has_inline = true;
            }
        }
        const Option* opt = nullptr;  // the first option with this name (compatibility tables come last)
        for (const auto& o : opts_) {
            for (const auto& n : o.names)
                if (n == a) opt = &o;
            if (opt) break;
        }
        if (!opt) throw Error("unknown argument '" + a + "' (see --help)");
        if (opt->value_name.empty()) {
            if (has_inline) throw Error("flag '" + a + "' takes no value");
            opt->apply("");
            continue;
        }
        if (!has_inline && !opt->optional_values.empty()) {  // e.g. -fa, which older llama.cpp took without a value
            bool known = false;
            if (i + 1 < argc)
                for (const auto& v : opt->optional_values) known = known || v == argv[i + 1];
            if (known) value = argv[++i];
            opt->apply(value);
            continue;
        }
        if (!has_inline) {
            if (i + 1 >= argc) throw Error("flag '" + a + "' needs a value (" + opt->value_name + ")");
            value = argv[++i];
        }
        opt->apply(value);
    }
    return positional;
}

std::string ArgParser::help() const {
    std::string out = usage_ + "\n\noptions:\n";
    for (const auto& o : opts_) {
        std::string names;
        for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + n;
        if (!o.value_name.empty()) names += " " + o.value_name;
        out += "  " + names;
        out += names.size() < 34 ? std::string(34 - names.size(), ' ') : "\n" + std::string(36, ' ');
        out += o.help + "\n";
    }
    return out;
}

void add_split_flags(ArgParser& ap, SplitOptions* ranks, GpuFlags& gpu) {
    const std::string over = ranks ? "over MPI ranks (mpirun -np N tandem ...) or, in one process, " : "";
    ap.add({"-sm", "--split-mode"}, "MODE",
           "how the target is split " + over + "over its GPUs (-ngl): layer (default: contiguous layers per " +
               (ranks ? "rank or " : "") + "GPU), tensor or row (" +
               (ranks ? "ranks: every layer's heads and FFN units shared out, for fast "
                        "links; GPUs: "
                      : "") +
               "by layers) or none (" + (ranks ? "one rank; " : "") + "one GPU, -mg)",
           [ranks, &gpu](const std::string& v) {
               const SplitMode mode = parse_split_mode(v);
               if (ranks) ranks->mode = mode;
               gpu.split = mode != SplitMode::NONE;
               gpu.row_asked = mode == SplitMode::TENSOR;
           });
    ap.add({"-ts", "--tensor-split"}, "N,N,...",
           std::string("the share of each ") + (ranks ? "rank or " : "") + "GPU (of the layers" +
               (ranks ? ", or of the heads and FFN units" : "") +
               "), e.g. 3,1 (default: " + (ranks ? "equal for ranks, " : "") + "by memory for GPUs)",
           [ranks, &gpu](const std::string& v) {
               gpu.shares = parse_split_weights(v);
               if (ranks) ranks->weights = gpu.shares;
           });
    if (!ranks) return;
    ap.add({"--rank-timeout"}, "S", "seconds rank 0 waits for the other ranks' part of a pass (300)",
           [ranks](const std::string& v) { ranks->timeout_s = to_float_in("--rank-timeout", v, 0.1f, 1e6f); });
}

bool run_as_rank(const SplitOptions& f, const std::string& model, int n_threads, std::shared_ptr<Cluster>& cluster,
                 int* code) {
    cluster = join_cluster(f);
    if (!cluster || cluster->leader()) return false;
    *code = run_rank(cluster, model, n_threads);
    return true;
}

void add_gpu_flags(ArgParser& ap, GpuFlags& f, bool with_draft) {
    ap.add({"-ngl", "--gpu-layers", "--n-gpu-layers"}, "N",
           "layers on the GPU: N (the last N layers and the output; the ones before run on the CPU), auto (as many as "
           "fit) or all; default: the CPU",
           [&f](const std::string& v) { f.ngl = parse_gpu_layers(v, "-ngl"); });
    ap.add({"-dev", "--device"}, "DEV[,DEV...]",
           "the GPUs: VulkanN or N, comma-separated (the layers split over them in that order: -sm; tandem "
           "--list-devices), none for the CPU (default: every GPU of the best kind)",
           [&f](const std::string& v) { f.devices = parse_gpu_devices(v); });
    ap.add({"-mg", "--main-gpu"}, "N", "the GPU with -sm none when --device is not given (0)",
           [&f](const std::string& v) { f.main_gpu = to_int_in("-mg", v, 0, 64); });
    // llama.cpp's flash-attention switch: tandem's attention is always the fused one (an online softmax over the
    // cache in tiles, on the CPU and on a GPU), so every value runs the same
    const char* fa = "flash attention: tandem's attention is always fused (online softmax over cache tiles); accepted";
    if (with_draft) {  // llama-speculative's and llama-server's: a value or none
        ap.optional({"-fa", "--flash-attn"}, {"on", "off", "auto", "1", "0", "true", "false"}, fa,
                    [](const std::string&) {});
    } else {  // llama-bench's and llama-perplexity's: a value, or llama-bench's list of them (-fa 0,1)
        ap.add({"-fa", "--flash-attn"}, "on|off|auto[,...]", fa, [](const std::string& v) {
            std::string rest = v;
            for (size_t at; !rest.empty(); rest = at == std::string::npos ? "" : rest.substr(at + 1)) {
                at = rest.find(',');
                const std::string one = rest.substr(0, at);
                if (one != "on" && one != "off" && one != "auto" && one != "1" && one != "0" && one != "true" &&
                    one != "false")
                    throw Error("-fa: '" + v + "' is not on, off, auto, 1, 0 (or a list of them)");
            }
        });
    }
    if (!with_draft) return;
    ap.add({"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"}, "N",
           "the draft model's layers on the GPU, as -ngl (default: as -ngl)",
           [&f](const std::string& v) { f.ngld = parse_gpu_layers(v, "-ngld"); });
    ap.add({"-devd", "--device-draft", "--spec-draft-device"}, "DEV", "the draft's GPU, as --device",
           [&f](const std::string& v) { f.device_draft = parse_gpu_device(v); });
}

std::shared_ptr<const GpuModel> place_by_flags(const GpuFlags& f, bool draft, const std::shared_ptr<const Model>& m,
                                               size_t cache_bytes, const std::shared_ptr<const GpuModel>& beside,
                                               size_t cache_beside) {
    if (!f.layers(draft).given && f.device_for(draft) >= 0 && !draft)
        std::fprintf(stderr, "note: a device without -ngl: every layer runs on the CPU (-ngl 99 puts them on it)\n");
    const GpuChoice c = choose_gpu(m, f, draft, cache_bytes, beside, cache_beside);
    if (!c.log.empty()) std::fprintf(stderr, "%s\n", c.log.c_str());
    return c.gpu;
}

void add_cache_flags(ArgParser& ap, CacheFlags& f, bool with_draft) {
    const std::string names = std::string("KV cache type: ") + kv_cache_type_names() + " (f16)";
    ap.add({"-ctk", "--cache-type-k"}, "TYPE", names + " for keys",
           [&f](const std::string& v) { f.type_k = parse_kv_cache_type(v, "-ctk"); });
    ap.add({"-ctv", "--cache-type-v"}, "TYPE", names + " for values",
           [&f](const std::string& v) { f.type_v = parse_kv_cache_type(v, "-ctv"); });
    ap.flag({"--swa-full"}, "sliding-window layers keep every position (default: the window and one batch)",
            [&f] { f.swa_full = true; });
    if (!with_draft) return;
    ap.add({"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, "N",
           strprintf("recurrent models (Qwen3.5, Qwen3-Next): prompt ends whose state is held for prefix reuse, "
                     "one state each (%d; 0: none)",
                     kCtxCheckpoints),
           [&f](const std::string& v) { f.ctx_checkpoints = to_int_in("--ctx-checkpoints", v, 0, 1024); });
    ap.add({"-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"}, "TYPE", "the draft's key cache type (f16)",
           [&f](const std::string& v) { f.type_k_draft = parse_kv_cache_type(v, "-ctkd"); });
    ap.add({"-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"}, "TYPE", "the draft's value cache type (f16)",
           [&f](const std::string& v) { f.type_v_draft = parse_kv_cache_type(v, "-ctvd"); });
}

std::string kv_cache_line(const char* what, const Session& s) {
    std::string swa;
    if (s.swa_positions() > 0 && s.swa_positions() < s.n_ctx())
        swa = strprintf(" (sliding-window layers: %d positions)", s.swa_positions());
    int held = 0;  // a split model's rank keeps the cache of its own layers only
    for (int l = 0; l < s.n_layers(); l++) held += s.model().holds_layer(l) ? 1 : 0;
    const std::string layers = held == s.n_layers() ? strprintf("%d layers", held)
                                                    : strprintf("%d of %d layers (this rank's)", held, s.n_layers());
    std::string where;
    if (s.gpu()) {
        const GpuPlacementInfo g = gpu_placement_info(*s.gpu());
        const std::string gpus = g.parts.size() > 1 ? strprintf("%zu GPUs", g.parts.size()) : "the GPU";
        where = g.layers < g.n_layer
                    ? strprintf(" (the last %d layers' on %s, the others' on the CPU)", g.layers, gpus.c_str())
                    : " on " + gpus + (g.parts.size() > 1 ? " (each layer's on its GPU)" : "");
    }
    return strprintf("%s KV cache: %d positions x %s%s, K %s + V %s = %.1f MiB%s", what, s.n_ctx(), layers.c_str(),
                     swa.c_str(), type_name(s.kv_type_k()), type_name(s.kv_type_v()),
                     double(s.kv_bytes()) / (1024.0 * 1024.0), where.c_str());
}

void add_spec_flags(ArgParser& ap, SpecFlags& f) {
    SpecParams& spec = f.spec;
    ap.add({"-md", "--model-draft", "--spec-draft-model"}, "FNAME", "draft model GGUF",
           [&f](const std::string& v) { f.draft_model = v; });
    ap.add({"--draft-max", "--draft", "--draft-n", "--spec-draft-n-max"}, "N", "most tokens drafted per round (16)",
           [&spec](const std::string& v) { spec.n_max = to_int_in("--draft-max", v, 0, 256); });
    ap.add({"--draft-min", "--draft-n-min", "--spec-draft-n-min"}, "N", "skip verification of shorter drafts (0)",
           [&spec](const std::string& v) { spec.n_min = to_int_in("--draft-min", v, 0, 256); });
    ap.add({"--draft-p-min", "--spec-draft-p-min"}, "P", "stop drafting below this draft probability (0.75)",
           [&spec](const std::string& v) { spec.p_min = to_float_in("--draft-p-min", v, 0.0f, 1.0f); });
    ap.add({"--draft-adaptive"}, "on|off", "adapt the draft length to acceptance and cost (on)",
           [&spec](const std::string& v) { spec.adaptive = to_bool("--draft-adaptive", v); });
    ap.add({"--spec-type"}, "TYPE",
           "none | draft | ngram | self | suffix | mtp | eagle3 (-md HEAD.gguf), or a list (draft,ngram,suffix: the "
           "best one each round)",
           [&f](const std::string& v) {
               set_spec_types(f.spec, v);
               f.type_given = true;
           });
    ap.add({"--draft-layers"}, "K", "self-speculation: layers of the target used as draft (default: half)",
           [&f](const std::string& v) { f.draft_layers = to_int_in("--draft-layers", v, 0, 65536); });
    ap.add({"--spec-ngram-n", "--spec-ngram-size-n", "--spec-ngram-simple-size-n"}, "N",
           "n-gram length matched for ngram drafting (3)",
           [&spec](const std::string& v) { spec.ngram_n = to_int_in("--spec-ngram-n", v, 1, 64); });
    ap.add({"--spec-ngram-m", "--spec-ngram-size-m", "--spec-ngram-simple-size-m"}, "M",
           "tokens proposed per n-gram match (16)",
           [&spec](const std::string& v) { spec.ngram_m = to_int_in("--spec-ngram-m", v, 1, 256); });
    ap.add({"--spec-tree"}, "auto|on|off",
           "token trees: verify the draft's alternatives where it is unsure, when they pay (auto; on: the same)",
           [&](const std::string& v) { spec.tree = v == "auto" || to_bool("--spec-tree", v); });
    ap.add({"--spec-tree-width"}, "N", "most candidates per tree position, the chain's own included (3)",
           [&](const std::string& v) { spec.tree_width = to_int_in("--spec-tree-width", v, 1, 64); });
    ap.add({"--spec-tree-nodes"}, "N", "most tokens a tree verification pass holds (32)",
           [&](const std::string& v) { spec.tree_nodes = to_int_in("--spec-tree-nodes", v, 1, 1024); });
    ap.add({"--spec-tree-min-gain"}, "G",
           "verify an alternative when its expected gain in tokens is at least G (default: measured)",
           [&](const std::string& v) { spec.tree_min_gain = to_float_in("--spec-tree-min-gain", v, 0.0f, 1.0f); });
    ap.add({"--spec-latency"}, "throughput|steady",
           "steady: no speculative round longer than about 2 plain steps (bounds the p99 of inter-token latency)",
           [&](const std::string& v) {
               if (v != "throughput" && v != "steady")
                   throw Error("--spec-latency: expected throughput or steady, not '" + v + "'");
               spec.max_round_cost = v == "steady" ? SpecParams::kSteadyRoundCost : 0.0;
           });
}

void resolve_spec_flags(SpecFlags& f) {
    if (!f.type_given) f.spec.type = f.draft_model.empty() ? SpecType::NONE : SpecType::DRAFT;
    const SpecSetup setup{!f.draft_model.empty()};
    validate_spec_params(f.spec, &setup);
}

void add_sampling_flags(ArgParser& ap, SamplerParams& sp, std::vector<std::string>& notes) {
    ap.add({"-s", "--seed"}, "N", "sampling seed (-1 = random)",
           [&sp](const std::string& v) { sp.seed = to_u64("-s", v); });
    ap.add({"--temp", "--temperature"}, "T", "temperature (<= 0: greedy)",
           [&sp](const std::string& v) { sp.temp = to_float_in("--temp", v, -100.0f, 100.0f); });
    ap.add({"--top-k"}, "N", "top-k (0 = off)",
           [&sp](const std::string& v) { sp.top_k = std::max(0, to_int_in("--top-k", v, -1, 1 << 24)); });
    ap.add({"--top-p"}, "P", "top-p (1 = off)",
           [&sp](const std::string& v) { sp.top_p = to_float_in("--top-p", v, 0.0f, 1.0f); });
    ap.add({"--min-p"}, "P", "min-p (0 = off)",
           [&sp](const std::string& v) { sp.min_p = to_float_in("--min-p", v, 0.0f, 1.0f); });
    ap.add({"--typical", "--typical-p"}, "P", "locally typical sampling (1 = off)",
           [&sp](const std::string& v) { sp.typical_p = to_float_in("--typical", v, 0.0f, 1.0f); });
    ap.add({"--repeat-penalty"}, "F", "repetition penalty (1 = off)",
           [&sp](const std::string& v) { sp.repeat_penalty = to_float_in("--repeat-penalty", v, 0.0f, 10.0f); });
    ap.add({"--repeat-last-n"}, "N", "tokens the penalties look back (-1 = all)",
           [&sp](const std::string& v) { sp.penalty_last_n = to_int_in("--repeat-last-n", v, -1, 1 << 24); });
    ap.add({"--presence-penalty"}, "F", "presence penalty",
           [&sp](const std::string& v) { sp.presence_penalty = to_float_in("--presence-penalty", v, -2.0f, 2.0f); });
    ap.add({"--frequency-penalty"}, "F", "frequency penalty",
           [&sp](const std::string& v) { sp.frequency_penalty = to_float_in("--frequency-penalty", v, -2.0f, 2.0f); });
    ap.add({"--samplers"}, "LIST", "sampler order, e.g. top_k;top_p;min_p;temperature",
           [&sp, &notes](const std::string& v) { sp.order = parse_sampler_names(v, &notes); });
    ap.add({"--sampling-seq", "--sampler-seq"}, "SEQ", "sampler order as letters, e.g. kypmt",
           [&sp, &notes](const std::string& v) { sp.order = parse_sampler_seq(v, &notes); });
    ap.add({"-l", "--logit-bias"}, "ID(+/-)BIAS", "e.g. 15043+1 or 2-inf", [&sp](const std::string& v) {
        size_t p = v.find_first_of("+-", 1);
        if (p == std::string::npos) throw Error("--logit-bias: expected TOKEN_ID(+/-)BIAS, got '" + v + "'");
        int id = to_int_in("--logit-bias", v.substr(0, p), 0, INT32_MAX);
        std::string b = v.substr(p);
        float bias = (b == "-inf")   ? -INFINITY
                     : (b == "+inf") ? INFINITY
                                     : to_float_in("--logit-bias", b, -1000.0f, 1000.0f);
        sp.logit_bias.emplace_back(id, bias);
    });
}

int to_int(const std::string& flag, const std::string& v) {
    errno = 0;
    char* end = nullptr;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || x < -2147483647LL || x > 2147483647LL)
        throw Error("flag '" + flag + "': '" + v + "' is not an integer");
    return int(x);
}

int to_int_in(const std::string& flag, const std::string& v, int lo, int hi) {
    const int x = to_int(flag, v);
    if (x < lo || x > hi) throw Error(strprintf("flag '%s': %d is out of range (%d to %d)", flag.c_str(), x, lo, hi));
    return x;
}

float to_float(const std::string& flag, const std::string& v) {
    errno = 0;
    char* end = nullptr;
    float x = std::strtof(v.c_str(), &end);
    if (v.empty() || *end || errno || !std::isfinite(x))
        throw Error("flag '" + flag + "': '" + v + "' is not a number");
    return x;
}

float to_float_in(const std::string& flag, const std::string& v, float lo, float hi) {
    const float x = to_float(flag, v);
    if (x < lo || x > hi) throw Error(strprintf("flag '%s': %g is out of range (%g to %g)", flag.c_str(), x, lo, hi));
    return x;
}

uint64_t to_u64(const std::string& flag, const std::string& v) {
    errno = 0;
    char* end = nullptr;
    if (!v.empty() && v[0] == '-') {
        if (v == "-1") return UINT64_MAX;
        throw Error("flag '" + flag + "': '" + v + "' is not a non-negative integer");
    }
    unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || errno) throw Error("flag '" + flag + "': '" + v + "' is not a non-negative integer");
    return x;
}

bool to_bool(const std::string& flag, const std::string& v) {
    if (v == "on" || v == "true" || v == "1" || v == "yes") return true;
    if (v == "off" || v == "false" || v == "0" || v == "no") return false;
    throw Error("flag '" + flag + "': '" + v + "' is not on/off");
}

void add_grammar_flags(ArgParser& ap, std::string& gbnf, const std::string& what) {
    auto schema = [&gbnf](const std::string& flag, const std::string& text) {
        auto j = nlohmann::ordered_json::parse(text, nullptr, false);
        if (j.is_discarded()) throw Error(flag + ": not JSON");
        gbnf = grammar::json_schema_to_gbnf(j);
    };
    ap.add({"--grammar"}, "GBNF", "constrain " + what + " to this grammar",
           [&gbnf](const std::string& v) { gbnf = v; });
    ap.add({"--grammar-file"}, "FNAME", "the same, from a file",
           [&gbnf](const std::string& v) { gbnf = read_file_bytes(v); });
    ap.add({"-j", "--json-schema"}, "SCHEMA", "constrain " + what + " to this JSON schema",
           [schema](const std::string& v) { schema("--json-schema", v); });
    ap.add({"-jf", "--json-schema-file"}, "FNAME", "the same, from a file",
           [schema](const std::string& v) { schema("--json-schema-file", read_file_bytes(v)); });
}

}  // namespace tandem::cli
