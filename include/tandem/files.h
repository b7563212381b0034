// Finding and reading the files a command names: regular files only (a directory, FIFO or device is refused
// without blocking), and models in the Hugging Face cache that llama.cpp's -hf downloads into (tandem never
// downloads). Every failure is a tandem::Error naming the path.
#pragma once
#include <string>

namespace tandem {

// Opens `path` for reading if it is a regular file (without blocking on a FIFO); a directory, FIFO, device or
// socket is a tandem::Error saying which. Returns the descriptor (the caller closes it).
int open_regular_file(const std::string& path);
// The whole content of a regular file (open_regular_file's checks). Throws tandem::Error naming the path.
std::string read_regular_file(const std::string& path);

// The Hugging Face cache directory, as llama.cpp (common/hf-cache.cpp): $LLAMA_CACHE, $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, $HOME/.cache/huggingface/hub (the
// first that is set). A repo "org/name" lives in models--org--name/snapshots/<revision>/.
std::string hf_cache_dir();
// The cached GGUF for `repo` ("org/name" or "org/name:QUANT") and `file` (a path inside the repo; empty: the
// first .gguf whose name contains QUANT, default Q4_K_M, else the first .gguf). Throws tandem::Error saying where
// it looked and what to do when there is none.
std::string hf_cached_model(const std::string& repo, const std::string& file,
                            const std::string& cache_dir = hf_cache_dir());

}  // namespace tandem
