// The llama-server flags that `tandem serve` does not implement itself, so that a llama-server command line
// works unchanged: each is accepted with a one-line note when it has no meaning here (GPU placement, memory
// mapping, thread affinity, samplers tandem lacks), accepted quietly when tandem always behaves that way
// (continuous batching, prompt caching), or refused with the reason when honouring it silently would mislead
// (LoRA adapters, grammars, RoPE overrides, TLS, downloads).
#pragma once
#include <functional>
#include <string>

#include "args.h"

namespace tandem::cli {

// Registers the table on `ap` (after the flags the command implements: the first registration of a name
// wins). `hf(flag, value)` receives the model-download flags (-hf, --hf-file, -hfd, -mu, -dr, ...).
void register_llama_server_flags(ArgParser& ap, const std::function<void(const std::string&, const std::string&)>& hf);

}  // namespace tandem::cli
