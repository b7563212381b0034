// A small table-driven parser for llama.cpp-style flags. (CLI11 cannot express llama.cpp's multi-letter
// single-dash flags such as -md, -cd, -ngl, -np, which users type today, so the tool keeps its own table.)
#pragma once
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/session.h"
#include "tandem/split.h"
#include "tandem/strings.h"
#include "tandem/tensor_type.h"

namespace tandem {
struct SamplerParams;
struct SpecParams;
}  // namespace tandem

namespace tandem::cli {

struct Option {
    std::vector<std::string> names;  // e.g. {"-md", "--model-draft"}
    std::string value_name;  // empty: a flag without value
    std::string help;
    std::function<void(const std::string&)> apply;
    std::vector<std::string> optional_values;  // non-empty: the value is taken only if it is one of these
};

class ArgParser {
public:
    explicit ArgParser(std::string usage) : usage_(std::move(usage)) {}
    void add(std::vector<std::string> names, std::string value_name, std::string help,
             std::function<void(const std::string&)> apply);
    void flag(std::vector<std::string> names, std::string help, std::function<void()> apply);
    // A flag whose value may be left out: the next argument is taken only when it is one of `values`.
    void optional(std::vector<std::string> names, std::vector<std::string> values, std::string help,
                  std::function<void(const std::string&)> apply);
    // Parses argv; positional arguments are returned. Throws tandem::Error on unknown flags, missing or
    // malformed values. "-h/--help" prints help and exits 0.
    std::vector<std::string> parse(int argc, char** argv, int first);
    std::string help() const;

private:
    std::string usage_;
    std::vector<Option> opts_;
};

// llama.cpp's sampling flags (--temp, --top-k, --top-p, --min-p, --typical, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, -s, --samplers, --sampling-seq, -l), for generate (the run's
// sampling) and serve (the requests' defaults). Sampler names llama.cpp has and tandem lacks go to `notes`.
void add_sampling_flags(ArgParser& ap, SamplerParams& sp, std::vector<std::string>& notes);

// The speculative flags of generate, bench and serve, one table with llama.cpp's spellings: -md (the draft model),
// --draft-max, --draft-min, --draft-p-min, --draft-adaptive, --spec-type (a name or a list), --draft-layers,
// --spec-ngram-n/-m (and llama-server's --spec-ngram-size-n/-m), the token-tree flags (--spec-tree auto|on|off,
// --spec-tree-width, --spec-tree-nodes, --spec-tree-min-gain: a fixed threshold instead of the measured one; 0:
// every alternative the caps allow) and --spec-latency throughput|steady (SpecParams::max_round_cost).
struct SpecFlags {
    explicit SpecFlags(SpecParams& s) : spec(s) {}
    SpecParams& spec;
    std::string draft_model;  // -md
    int draft_layers = 0;  // --draft-layers (0: half the target's)
    bool type_given = false;  // --spec-type was given
};
void add_spec_flags(ArgParser& ap, SpecFlags& f);

// KV cache types (generate, serve, bench): -ctk/--cache-type-k, -ctv/--cache-type-v for the target and
// -ctkd/-ctvd (llama.cpp's spellings) for the draft; f16 each unless given (as llama.cpp). An unknown or
// unsupported name is an Error naming the supported ones.
struct CacheFlags {
    TensorType type_k = TensorType::F16, type_v = TensorType::F16;
    TensorType type_k_draft = TensorType::F16, type_v_draft = TensorType::F16;
    bool swa_full = false;  // --swa-full: sliding-window layers keep every position (SessionParams::swa_full)
    int ctx_checkpoints = kCtxCheckpoints;  // -ctxcp (SessionParams::ctx_checkpoints)
};
// GPU placement, llama.cpp's flags (tandem/gpu.h choose_gpu): -ngl N|auto|all, -ngld (default: as -ngl), -dev
// none|VulkanN|N[,...], -devd, -mg N (and add_split_flags' -sm, -ts). Without -ngl every layer runs on the CPU.
void add_gpu_flags(ArgParser& ap, GpuFlags& f, bool with_draft = true);
// The placement of the target (draft false) or the draft model per the flags, its start-up line printed to stderr;
// null: the CPU. cache_bytes: what its caches will take on the device.
std::shared_ptr<const GpuModel> place_by_flags(const GpuFlags& f, bool draft, const std::shared_ptr<const Model>& m,
                                               size_t cache_bytes,
                                               const std::shared_ptr<const GpuModel>& beside = nullptr,
                                               size_t cache_beside = 0);

// with_draft false: only the target's (a command without a draft).
void add_cache_flags(ArgParser& ap, CacheFlags& f, bool with_draft = true);
// One line for stderr: the cache's types and size ("KV cache: 4096 positions x 22 layers, K q8_0 + V q8_0 =
// 24.8 MiB"), printed at start by every command.
std::string kv_cache_line(const char* what, const Session& s);
// After parsing: without --spec-type, -md means "draft" (else none); then validate_spec_params.
void resolve_spec_flags(SpecFlags& f);

// Structured output flags (generate, serve): --grammar GBNF, --grammar-file FNAME, -j/--json-schema SCHEMA,
// -jf/--json-schema-file FNAME; each sets `gbnf` (a JSON schema converted to GBNF; a bad schema is an Error).
void add_grammar_flags(ArgParser& ap, std::string& gbnf, const std::string& what);

// Splitting the target across MPI ranks (generate, serve, bench; tandem/split.h): -sm/--split-mode none|layer|tensor,
// -ts/--tensor-split 3,1 (a share of the layers per rank), --rank-timeout S. In a process started alone, -sm and -ts
// split the target's GPU layers over the GPUs instead (`gpu`: GpuFlags::split, shares; tandem/gpu.h choose_gpu).
// ranks null: a command that runs in one process only (perplexity): -sm and -ts for the GPUs alone.
void add_split_flags(ArgParser& ap, SplitOptions* ranks, GpuFlags& gpu);
// Every command that loads a target calls this first: when started by mpirun as one of several ranks it joins them
// (`cluster`, for LoadOptions::cluster); a rank other than 0 then runs its share of `model` until rank 0 ends, and
// the call returns true with the command's exit code in *code.
bool run_as_rank(const SplitOptions& f, const std::string& model, int n_threads, std::shared_ptr<Cluster>& cluster,
                 int* code);

// Value conversions that throw tandem::Error("<flag>: ...") on malformed input.
int to_int(const std::string& flag, const std::string& v);
// An integer in [lo, hi]; outside it a tandem::Error naming the flag and the range.
int to_int_in(const std::string& flag, const std::string& v, int lo, int hi);
float to_float(const std::string& flag, const std::string& v);
float to_float_in(const std::string& flag, const std::string& v, float lo, float hi);
// Every numeric flag goes through a *_in conversion: a value outside what the program can honour is refused
// with its range, never wrapped or clamped silently.
uint64_t to_u64(const std::string& flag, const std::string& v);
bool to_bool(const std::string& flag, const std::string& v);  // on/off, true/false, 1/0, yes/no

}  // namespace tandem::cli
