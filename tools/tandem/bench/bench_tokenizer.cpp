// `tandem bench --tokenize FILE`: tokenizer throughput (bench/bench.h).
#include <algorithm>
#include <cstdio>

#include "bench/bench.h"
#include "io.h"
#include "tandem/gguf.h"
#include "tandem/tokenizer.h"

namespace tandem::cli::bench {

int bench_tokenizer(const std::string& vocab_path, const std::string& text_path, int reps, bool json_out) {
    auto f = GgufFile::open(vocab_path);
    auto tok = Tokenizer::from_gguf(*f);
    std::string text = read_file_bytes(text_path);
    double best = 1e30;
    size_t n_tokens = 0;
    for (int r = 0; r < std::max(1, reps); r++) {
        auto t0 = Clock::now();
        n_tokens = tok->encode(text, false, false).size();
        best = std::min(best, secs(t0, Clock::now()));
    }
    std::string name = vocab_path.substr(vocab_path.find_last_of('/') + 1);
    if (json_out) {
        nlohmann::ordered_json j = {{"vocab", name},
                                    {"tokenizer", tok->model_name()},
                                    {"pre", tok->pre_name()},
                                    {"bytes", text.size()},
                                    {"tokens", n_tokens},
                                    {"tokens_per_second", n_tokens / best},
                                    {"mb_per_second", text.size() / best / 1e6}};
        std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    } else {
        std::printf("| vocab | tokenizer | bytes | tokens | tokens/s | MB/s |\n|---|---|---|---|---|---|\n");
        std::printf("| %s | %s/%s | %zu | %zu | %.0f | %.2f |\n", name.c_str(), tok->model_name().c_str(),
                    tok->pre_name().c_str(), text.size(), n_tokens, n_tokens / best, text.size() / best / 1e6);
    }
    return 0;
}

}  // namespace tandem::cli::bench
