// tandem: command-line entry point. Dispatches to sub-commands; turns tandem::Error into a one-line message
// and exit code 1.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "tandem/cpu.h"
#include "tandem/error.h"
#include "tandem/gpu.h"
#include "tandem/split.h"

namespace {

const char* kUsage =
    "usage: tandem COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  generate   generate text (llama.cpp-style flags: -m, -p, -n, -md, --draft-max, ...)\n"
    "  info       print a GGUF model's metadata, tensors, parameter count and size\n"
    "  tokenize   print the token ids of a text\n"
    "  serve      OpenAI-compatible HTTP server with speculative decoding and a web chat page\n"
    "  bench      measure prompt, generation, verification-batch and speculative speed (llama-bench style)\n"
    "  perplexity perplexity of a text, and a KV cache type's divergence from another (llama-perplexity style)\n"
    "  synth      write a random-weight model of a real shape (tinyllama-1.1b, llama-2-7b, ...)\n"
    "  quantize   convert a model to another tensor type (or keep only its first layers)\n"
    "  distill    training data for an EAGLE-3 head: the target's own text and hidden states\n"
    "\n"
    "\n"
    "  --list-devices  the GPUs this build can use (Vulkan), as llama.cpp's flag\n"
    "`tandem COMMAND --help` lists a command's options.\n";

// llama.cpp's --list-devices: the devices, best first, with the index --device names
int list_devices() {
    std::printf("Available devices:\n");
    const auto devs = tandem::gpu_devices();
    for (const auto& d : devs)
        std::printf("  %d: %s (%s; %s; %llu MiB)\n", d.index, d.name.c_str(), d.type.c_str(), d.driver.c_str(),
                    (unsigned long long)(d.memory_bytes >> 20));
    if (devs.empty())
        std::printf("  none (%s)\n", tandem::built_with_vulkan()
                                         ? "no Vulkan device found: is a Vulkan driver installed?"
                                         : "this build has no Vulkan backend: -DTANDEM_VULKAN=ON");
    return 0;
}

int run(const std::string& cmd, int argc, char** argv) {
    try {
        tandem::cpu_info();  // a bad TANDEM_CPU is reported here, before any work
        if (cmd == "generate") return tandem::cli::cmd_generate(argc, argv);
        if (cmd == "info") return tandem::cli::cmd_info(argc, argv);
        if (cmd == "tokenize") return tandem::cli::cmd_tokenize(argc, argv);
        if (cmd == "quantize") return tandem::cli::cmd_quantize(argc, argv);
        if (cmd == "synth") return tandem::cli::cmd_synth(argc, argv);
        if (cmd == "bench") return tandem::cli::cmd_bench(argc, argv);
        if (cmd == "perplexity") return tandem::cli::cmd_perplexity(argc, argv);
        if (cmd == "distill") return tandem::cli::cmd_distill(argc, argv);
#ifndef TANDEM_NO_SERVER
        if (cmd == "serve") return tandem::cli::cmd_serve(argc, argv);
#else
        if (cmd == "serve") {
            std::fputs("tandem serve: this build has no server (configured with -DTANDEM_SERVER=OFF)\n", stderr);
            return 2;
        }
#endif
        std::fprintf(stderr, "tandem: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
        return 2;
    } catch (const tandem::Error& e) {
        std::fprintf(stderr, "tandem %s: error: %s\n", cmd.c_str(), e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "tandem %s: error: out of memory\n", cmd.c_str());
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        std::fputs(kUsage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!std::strcmp(argv[1], "--list-devices")) return list_devices();
    int rc = run(argv[1], argc, argv);
    if (rc == 0 && tandem::ranks_failed()) rc = 1;  // e.g. a rank that did not acknowledge the stop (named above)
    tandem::end_ranks(rc == 0);  // one of several MPI ranks: finalize, or end every rank after a failure
    return rc;
}
