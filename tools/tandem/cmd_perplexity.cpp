#include <cstdio>
#include <memory>

#include "args.h"
#include "commands.h"
#include "io.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/perplexity.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

int cmd_perplexity(int argc, char** argv) {
    std::string model_path, file;
    int n_threads = 2;
    CacheFlags cache;
    PerplexityParams p;
    std::string base_type;
    ArgParser ap(
        "usage: tandem perplexity -m MODEL -f TEXT [-c N] [--chunks N] [-ctk T -ctv T] [--kld-base-cache T]\n"
        "Perplexity of a text in chunks of N tokens, as llama-perplexity scores it; with --kld-base-cache, also the\n"
        "divergence of the predictions from those with that cache type (KL divergence, argmax agreement).");
    ap.add({"-m", "--model"}, "FNAME", "model GGUF file", [&](const std::string& v) { model_path = v; });
    ap.add({"-f", "--file"}, "FNAME", "the text", [&](const std::string& v) { file = v; });
    ap.add({"-c", "--ctx-size"}, "N", "tokens per chunk (512)",
           [&](const std::string& v) { p.n_ctx = to_int_in("-c", v, 4, 1 << 20); });
    ap.add({"--chunks"}, "N", "score at most N chunks (all)",
           [&](const std::string& v) { p.max_chunks = to_int_in("--chunks", v, 1, 1 << 30); });
    ap.add({"-t", "--threads"}, "N", "threads (2)",
           [&](const std::string& v) { n_threads = to_int_in("-t", v, 1, 1024); });
    add_cache_flags(ap, cache, false);
    GpuFlags gpu;
    add_gpu_flags(ap, gpu, false);
    add_split_flags(ap, nullptr, gpu);  // -sm, -ts over the GPUs
    ap.add({"--kld-base-cache"}, "TYPE", "compare with the predictions of a cache of this type for keys and values",
           [&](const std::string& v) { base_type = v; });
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (model_path.empty()) throw Error("-m MODEL is required");
    if (file.empty()) throw Error("-f TEXT is required");

    const std::string text = read_file_bytes(file);
    auto model = Model::load(model_path);
    auto tok = Tokenizer::from_gguf(model->gguf());
    const std::vector<int32_t> tokens = tok->encode(text, true, false);
    p.bos = tok->add_bos() ? tok->bos() : -1;
    p.test.type_k = cache.type_k;
    p.test.type_v = cache.type_v;
    p.test.swa_full = p.base.swa_full = cache.swa_full;
    if (!base_type.empty()) {
        p.compare = true;
        p.base.type_k = p.base.type_v = parse_kv_cache_type(base_type, "--kld-base-cache");
    }
    ThreadPool pool(n_threads);
    SessionParams probe = p.test;
    probe.n_ctx = p.n_ctx;
    p.test.gpu = p.base.gpu = place_by_flags(gpu, false, model, kv_cache_bytes(*model, probe, p.n_ctx) * 2);
    std::fprintf(stderr, "%zu tokens, chunks of %d, KV cache K %s + V %s%s%s\n", tokens.size(), p.n_ctx,
                 type_name(p.test.type_k), type_name(p.test.type_v), p.compare ? ", against " : "",
                 p.compare ? type_name(p.base.type_k) : "");
    const PerplexityResult r = evaluate_perplexity(model, pool, tokens, p, [](const ChunkScore& c) {
        std::fprintf(stderr, "[%d]%.4f ", c.chunk + 1, c.ppl_test);
        std::fflush(stderr);
    });
    std::fprintf(stderr, "\n");
    std::printf("chunks %d, scored %lld predictions\n", r.n_chunks, static_cast<long long>(r.n_scored));
    std::printf("PPL (%s/%s cache) = %.6f\n", type_name(p.test.type_k), type_name(p.test.type_v), r.ppl_test());
    if (p.compare) {
        std::printf("PPL (%s cache) = %.6f\n", type_name(p.base.type_k), r.ppl_base());
        std::printf("KL divergence from the %s cache: mean %.6g, largest %.6g\n", type_name(p.base.type_k), r.kld_mean,
                    r.kld_max);
        std::printf("same argmax: %.3f%%, largest logit difference %.4g\n", 100.0 * r.same_top1, r.max_logit_diff);
    }
    return 0;
}

}  // namespace tandem::cli
