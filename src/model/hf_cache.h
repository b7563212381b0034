// Finding a model in the Hugging Face cache that llama.cpp's -hf downloads into, so that `-hf REPO[:QUANT]`
// and `--hf-file FILE` work offline for models a llama.cpp user already has. tandem never downloads.
//
// Cache directory, as llama.cpp (common/hf-cache.cpp): $LLAMA_CACHE, $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE,
// $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, $HOME/.cache/huggingface/hub (the first that is set). A repo
// "org/name" lives in models--org--name/snapshots/<revision>/.
#pragma once
#include <string>

namespace tandem {

std::string hf_cache_dir();

// The cached GGUF for `repo` ("org/name" or "org/name:QUANT") and `file` (a path inside the repo; empty: the
// first .gguf whose name contains QUANT, default Q4_K_M, else the first .gguf). Throws tandem::Error saying where
// it looked and what to do when there is none.
std::string hf_cached_model(const std::string& repo, const std::string& file,
                            const std::string& cache_dir = hf_cache_dir());

}  // namespace tandem
