#include "llama_flags.h"

#include <cstdio>
#include <memory>
#include <set>
#include <sstream>

#include "tandem/error.h"

namespace tandem::cli {

namespace {

enum class Kind {
    Notice,  // accepted; a one-line note says it has no effect here and why
    Quiet,  // accepted without a note: tandem always behaves this way (e.g. continuous batching)
    Refuse,  // refused: honouring it silently would mislead (a download, an adapter)
};

struct CompatFlag {
    const char* names;  // space-separated aliases
    bool value;  // a value follows
    Kind kind;
    const char* why;
};

// llama-server's flags (llama.cpp 2026-09, common/arg.cpp; scripts/llama_server_flags.py lists them) that
// `tandem serve` does not implement itself. The implemented ones are registered by cmd_serve.cpp first and win.
constexpr CompatFlag kFlags[] = {
    // hardware placement, memory mapping, threads: no meaning on this CPU engine
    {"--list-devices", false, Kind::Notice, "tandem --list-devices lists them"},
    {"-fit --fit", true, Kind::Notice, "-ngl auto fits the device's memory"},
    {"-fitt --fit-target", true, Kind::Notice, "no GPU memory to fit"},
    {"-fitc --fit-ctx", true, Kind::Notice, "no GPU memory to fit"},
    {"-ot --override-tensor", true, Kind::Notice, "no buffer types: all tensors are in CPU memory"},
    {"-otd --override-tensor-draft --spec-draft-override-tensor", true, Kind::Notice,
     "no buffer types: all tensors are in CPU memory"},
    {"-cmoe --cpu-moe", false, Kind::Quiet, ""},
    {"-ncmoe --n-cpu-moe", true, Kind::Quiet, ""},
    {"-cmoed --cpu-moe-draft --spec-draft-cpu-moe", false, Kind::Quiet, ""},
    {"-ncmoed --n-cpu-moe-draft --spec-draft-n-cpu-moe --spec-draft-ncmoe", true, Kind::Quiet, ""},
    {"-ncffn --n-cpu-ffn", true, Kind::Quiet, ""},
    {"-kvo --kv-offload -nkvo --no-kv-offload", false, Kind::Quiet, ""},
    {"--op-offload --no-op-offload", false, Kind::Quiet, ""},
    {"--no-host", false, Kind::Quiet, ""},
    {"--repack -nr --no-repack", false, Kind::Notice, "tandem always repacks quantized weights for its kernels"},
    {"--rpc -mmdev", true, Kind::Notice, "no RPC backend: the model runs in this process"},
    {"-lm --load-mode", true, Kind::Notice, "the model is always memory-mapped"},
    {"-lzm --lazy-mode", true, Kind::Notice, "the model is always memory-mapped"},
    {"--mmap --no-mmap", false, Kind::Notice, "the model is always memory-mapped"},
    {"--mlock", false, Kind::Notice, "pages are not locked"},
    {"--numa", true, Kind::Notice, "no NUMA placement"},
    {"--direct-io -dio --no-direct-io -ndio", false, Kind::Notice, "the model is always memory-mapped"},
    {"-tb --threads-batch", true, Kind::Notice, "prompt processing uses the -t threads"},
    {"-tbd --threads-batch-draft --spec-draft-threads-batch", true, Kind::Notice, "the draft uses the -t threads"},
    {"-td --threads-draft --spec-draft-threads", true, Kind::Notice, "the draft uses the -t threads"},
    {"-C --cpu-mask -Cr --cpu-range -Cb --cpu-mask-batch -Crb --cpu-range-batch", true, Kind::Notice,
     "no CPU affinity control (use taskset)"},
    {"-Cd --cpu-mask-draft --spec-draft-cpu-mask -Crd --cpu-range-draft --spec-draft-cpu-range -Cbd "
     "--cpu-mask-batch-draft --spec-draft-cpu-mask-batch",
     true, Kind::Notice, "no CPU affinity control (use taskset)"},
    {"--cpu-strict --cpu-strict-batch --cpu-strict-draft --spec-draft-cpu-strict --cpu-strict-batch-draft "
     "--spec-draft-cpu-strict-batch",
     true, Kind::Notice, "no CPU affinity control (use taskset)"},
    {"--prio --prio-batch --prio-draft --spec-draft-prio --prio-batch-draft --spec-draft-prio-batch", true,
     Kind::Notice, "no thread priority control (use nice)"},
    {"--poll --poll-batch --poll-draft --spec-draft-poll --poll-batch-draft --spec-draft-poll-batch", true,
     Kind::Notice, "threads spin briefly, then sleep"},
    // (-fa / --flash-attn: args.h add_gpu_flags)
    {"-dt --defrag-thold", true, Kind::Quiet, ""},
    {"--kv-unified-per-slot", true, Kind::Notice, "each slot has its own KV cache of -c tokens"},
    {"-ctxcp --ctx-checkpoints --swa-checkpoints", true, Kind::Quiet, ""},
    {"-cms --checkpoint-min-step", true, Kind::Quiet, ""},
    {"-cram --cache-ram", true, Kind::Notice, "no host-memory prompt cache beyond each slot's own prefix cache"},
    {"--cache-idle-slots --no-cache-idle-slots", false, Kind::Quiet, ""},
    {"--check-tensors", false, Kind::Notice, "tensor data is not scanned for NaN/Inf at load"},
    {"--warmup --no-warmup", false, Kind::Quiet, ""},
    {"-cb --cont-batching -nocb --no-cont-batching", false, Kind::Quiet, ""},
    {"--cache-prompt --no-cache-prompt", false, Kind::Quiet, ""},
    {"--cache-reuse", true, Kind::Quiet, ""},
    {"-sps --slot-prompt-similarity", true, Kind::Notice,
     "a request goes to a free slot; each slot reuses its own cached prefix"},
    {"--perf --no-perf", false, Kind::Quiet, ""},
    {"-bs --backend-sampling --spec-draft-backend-sampling --no-spec-draft-backend-sampling", false, Kind::Quiet, ""},
    {"--sleep-idle-seconds", true, Kind::Notice, "an idle server uses no CPU; the model stays loaded"},
    {"--threads-http", true, Kind::Notice, "HTTP reading is asynchronous; workers are sized from -np and --queue-max"},
    {"--sse-ping-interval", true, Kind::Notice, "no SSE pings are sent"},
    // sampling that tandem does not implement: accepted as defaults that have no effect, said once
    {"--dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n --dry-sequence-breaker", true, Kind::Notice,
     "the DRY sampler is not implemented"},
    {"--xtc-probability --xtc-threshold", true, Kind::Notice, "the XTC sampler is not implemented"},
    {"--mirostat --mirostat-lr --mirostat-ent", true, Kind::Notice, "mirostat is not implemented"},
    {"--dynatemp-range --dynatemp-exp", true, Kind::Notice, "dynamic temperature is not implemented"},
    {"--top-nsigma --top-n-sigma", true, Kind::Notice, "top-n-sigma is not implemented"},
    {"--adaptive-target --adaptive-decay", true, Kind::Notice, "adaptive-p sampling is not implemented"},
    // logging and verbosity
    {"-lv --verbosity --log-verbosity", true, Kind::Quiet, ""},
    {"--log-disable", false, Kind::Quiet, ""},
    {"--log-file", true, Kind::Notice, "logs go to stderr (redirect it)"},
    {"--log-colors", true, Kind::Quiet, ""},
    {"--log-prefix --no-log-prefix --log-timestamps --no-log-timestamps --log-jsonl --no-log-jsonl", false, Kind::Quiet,
     ""},
    {"--log-prompts-dir", true, Kind::Notice, "prompts are not logged"},
    // CLI-only flags that llama-server also parses
    {"-p --prompt -f --file -bf --binary-file -r --reverse-prompt", true, Kind::Notice, "has no meaning for a server"},
    {"-e --escape --no-escape -sp --special --spm-infill", false, Kind::Quiet, ""},
    {"-lcs --lookup-cache-static -lcd --lookup-cache-dynamic", true, Kind::Notice,
     "n-gram lookup caches from files are not used"},
    {"--embd-normalize", true, Kind::Notice, "the server takes embd_normalize per request (default 2, Euclidean)"},
    {"--reasoning-effort --reasoning-budget --reasoning-budget-message", true, Kind::Notice,
     "no reasoning budget: a model thinks as long as it does"},
    {"--reasoning-preserve --no-reasoning-preserve --skip-chat-parsing --no-skip-chat-parsing --prefill-assistant "
     "--no-prefill-assistant",
     false, Kind::Notice, "chat output is not parsed yet"},
    {"--media-path", true, Kind::Notice, "no multimodal input"},
    {"--image-min-tokens --image-max-tokens --mtmd-batch-max-tokens --video-fps --video-timestamp-interval "
     "--video-ffmpeg-dir",
     true, Kind::Notice, "no multimodal input"},
    {"--mmproj-auto --no-mmproj --no-mmproj-auto --mmproj-offload --no-mmproj-offload", false, Kind::Quiet, ""},
    {"--ui-config --webui-config --ui-config-file --webui-config-file", true, Kind::Notice,
     "the built-in page has no configuration"},
    {"--ui-mcp-proxy --webui-mcp-proxy --no-ui-mcp-proxy --no-webui-mcp-proxy -ag --agent -no-ag --no-agent", false,
     Kind::Notice, "no MCP proxy"},
    {"--spec-ngram-mod-n-min --spec-ngram-mod-n-max --spec-ngram-mod-n-match --spec-ngram-simple-min-hits "
     "--spec-ngram-map-k-size-n --spec-ngram-map-k-size-m --spec-ngram-map-k-min-hits --spec-ngram-map-k4v-size-n "
     "--spec-ngram-map-k4v-size-m --spec-ngram-map-k4v-min-hits --spec-ngram-min-hits",
     true, Kind::Notice, "tandem's n-gram drafting takes --spec-ngram-size-n/-m"},
    {"--spec-draft-p-split --draft-p-split", true, Kind::Notice, "drafts are chains, not trees"},
    {"--spec-synth-len --spec-synth-rates", true, Kind::Notice, "synthetic drafts are not implemented"},
    // refused: ignoring them would give a different model, output or security than asked for
    {"-hf -hfr --hf-repo -hff --hf-file -hfd -hfrd --hf-repo-draft --spec-draft-hf -hfv -hfrv --hf-repo-v -hffv "
     "--hf-file-v -hft --hf-token -mu --model-url -dr --docker-repo -mmu --mmproj-url",
     true, Kind::Refuse, ""},  // resolved by hf_cache
    {"--offline", false, Kind::Quiet, ""},
    {"-cl --cache-list", false, Kind::Refuse,
     "tandem keeps no model cache of its own; llama.cpp's Hugging Face cache is read by -hf"},
    {"--lora --lora-scaled --control-vector --control-vector-scaled --control-vector-layer-range", true, Kind::Refuse,
     "LoRA adapters and control vectors are not supported: merge the adapter into the GGUF (llama.cpp's "
     "llama-export-lora) and pass that file with -m"},
    {"--lora-init-without-apply", false, Kind::Refuse, "LoRA adapters are not supported"},
    {"--rope-scaling --rope-scale --rope-freq-base --rope-freq-scale --yarn-orig-ctx --yarn-ext-factor "
     "--yarn-attn-factor --yarn-beta-slow --yarn-beta-fast",
     true, Kind::Refuse, "RoPE overrides are not supported: the GGUF's values are used"},
    {"--override-kv", true, Kind::Refuse,
     "metadata overrides are not supported: edit the GGUF (gguf-py's gguf_set_metadata)"},
    {"-mm --mmproj", true, Kind::Refuse, "multimodal projectors are not supported"},
    {"--ssl-key-file --ssl-cert-file", true, Kind::Refuse, "no TLS: put a TLS-terminating reverse proxy in front"},
    {"--rerank --reranking", false, Kind::Refuse, "reranking is not implemented"},
    {"--models-dir --models-preset --models-max", true, Kind::Refuse,
     "router mode (several models in one server) is not supported: run one tandem serve per model"},
    {"--models-autoload --no-models-autoload", false, Kind::Refuse, "router mode is not supported"},
    {"--tools --tools-runtime --mcp-servers-config --mcp-servers-json", true, Kind::Refuse,
     "built-in tools and MCP servers are not supported"},
    {"--spec-default --fim-qwen-1.5b-default --fim-qwen-3b-default --fim-qwen-7b-default --fim-qwen-7b-spec "
     "--fim-qwen-14b-spec --fim-qwen-30b-default --gpt-oss-20b-default --gpt-oss-120b-default "
     "--vision-gemma-4b-default --vision-gemma-12b-default --embd-gemma-default",
     false, Kind::Refuse,
     "these presets download models, and tandem does not download: pass -m (and -md) with local GGUF files"},
    {"--completion-bash", false, Kind::Refuse, "no completion script"},
};

std::vector<std::string> split_names(const char* s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

}  // namespace

void register_llama_server_flags(ArgParser& ap, const std::function<void(const std::string&, const std::string&)>& hf) {
    auto noted = std::make_shared<std::set<std::string>>();
    for (const CompatFlag& f : kFlags) {
        const std::vector<std::string> names = split_names(f.names);
        const std::string why = f.why;
        std::function<void(const std::string&, const std::string&)> act;
        switch (f.kind) {
            case Kind::Quiet: act = [](const std::string&, const std::string&) {}; break;
            case Kind::Notice:
                act = [noted, why](const std::string& flag, const std::string&) {
                    if (noted->insert(why).second)
                        std::fprintf(stderr, "note: %s: ignored, %s\n", flag.c_str(), why.c_str());
                };
                break;
            case Kind::Refuse:
                if (why.empty()) act = hf;  // model downloads: resolved from llama.cpp's cache, or refused there
                else act = [why](const std::string& flag, const std::string&) { throw Error(flag + ": " + why); };
                break;
        }
        const std::string help =
            f.kind == Kind::Refuse ? "(llama-server) refused" : "(llama-server) accepted, no effect here";
        for (const std::string& n : names) {  // one option per alias, so the note names the flag as typed
            if (f.value) ap.add({n}, "V", help, [act, n](const std::string& v) { act(n, v); });
            else ap.flag({n}, help, [act, n] { act(n, ""); });
        }
    }
}

}  // namespace tandem::cli
