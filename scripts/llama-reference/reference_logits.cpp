// Records llama.cpp's teacher-forcing references for tandem's tests (tests/data/reference-arch/): for each prompt,
// a fresh context, the prompt in one llama_decode, then greedy decoding one token per call; at every step the
// five largest raw logits (ties by the lower id) and the argmax. The settings of ../shared/reference-modern:
// 1 thread, n_ctx 2048, n_batch 2048, n_ubatch 512, flash attention off, F16 KV cache.
// Built against llama.cpp's library by make.sh (outside the repository's build); not part of tandem.
//
//   reference_logits MODEL.gguf STEPS "prompt" ["prompt" ...] > OUT.json
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') o += '\\', o += char(c);
        else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else o += char(c);
    }
    return o + "\"";
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL.gguf STEPS PROMPT...\n", argv[0]);
        return 2;
    }
    const int steps = std::atoi(argv[2]);
    llama_backend_init();
    if (!std::getenv("REFERENCE_LOG")) llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::printf("[");
    for (int a = 3; a < argc; a++) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 2048;
        cp.n_batch = 2048;
        cp.n_ubatch = 512;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        llama_context* ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            std::fprintf(stderr, "cannot make a context\n");
            return 1;
        }
        const std::string prompt = argv[a];
        std::vector<llama_token> ids(prompt.size() + 8);
        int n = llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), ids.data(), int(ids.size()), true, false);
        if (n < 0) {  // byte-fallback pieces: more tokens than characters
            ids.resize(size_t(-n));
            n = llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), ids.data(), int(ids.size()), true, false);
        }
        if (n < 0) {
            std::fprintf(stderr, "cannot tokenize '%s'\n", prompt.c_str());
            return 1;
        }
        ids.resize(size_t(n));
        std::printf("%s{\"prompt\": %s, \"prompt_ids\": [", a > 3 ? ", " : "", json_string(prompt).c_str());
        for (int i = 0; i < n; i++) std::printf("%s%d", i ? ", " : "", ids[size_t(i)]);
        std::printf("], \"steps\": [");
        std::vector<llama_token> feed = ids;
        for (int s = 0; s < steps; s++) {
            if (const int rc = llama_decode(ctx, llama_batch_get_one(feed.data(), int(feed.size()))); rc != 0) {
                std::fprintf(stderr, "llama_decode failed (%d) at step %d\n", rc, s);
                return 1;
            }
            const float* lg = llama_get_logits_ith(ctx, -1);
            std::vector<int> order(static_cast<size_t>(n_vocab));
            for (int i = 0; i < n_vocab; i++) order[size_t(i)] = i;
            std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                              [&](int x, int y) { return lg[x] > lg[y] || (lg[x] == lg[y] && x < y); });
            std::printf("%s{\"id\": %d, \"top5\": [", s ? ", " : "", order[0]);
            for (int k = 0; k < 5; k++) std::printf("%s[%d, %.6f]", k ? ", " : "", order[size_t(k)], lg[order[size_t(k)]]);
            std::printf("]}");
            feed.assign(1, order[0]);
        }
        std::printf("]}");
        llama_free(ctx);
    }
    std::printf("]\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
