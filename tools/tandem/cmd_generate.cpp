#include <chrono>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "io.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/sampling.h"
#include "tandem/session.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

int cmd_generate(int argc, char** argv) {
    std::string model_path, prompt, file;
    int n_predict = 128, n_ctx = 0, n_threads = 2;
    SamplerParams sp;
    sp.seed = 0xFFFFFFFF;
    bool ignore_eos = false;
    ArgParser ap("usage: tandem generate -m MODEL -p PROMPT [options]");
    ap.add({"-m", "--model"}, "FNAME", "model GGUF file", [&](const std::string& v) { model_path = v; });
    ap.add({"-p", "--prompt"}, "TEXT", "prompt", [&](const std::string& v) { prompt = v; });
    ap.add({"-n", "--n-predict"}, "N", "tokens to generate", [&](const std::string& v) { n_predict = to_int("-n", v); });
    ap.add({"-c", "--ctx-size"}, "N", "context size", [&](const std::string& v) { n_ctx = to_int("-c", v); });
    ap.add({"-t", "--threads"}, "N", "threads", [&](const std::string& v) { n_threads = to_int("-t", v); });
    ap.add({"--temp"}, "T", "temperature", [&](const std::string& v) { sp.temp = to_float("--temp", v); });
    ap.flag({"--ignore-eos"}, "ignore end of generation", [&] { ignore_eos = true; });
    auto pos = ap.parse(argc, argv, 2);
    (void)file;
    ThreadPool pool(n_threads);
    auto model = Model::load(model_path);
    auto tok = Tokenizer::from_gguf(model->gguf());
    Session s(model, SessionParams{n_ctx, 0, 256}, pool);
    Sampler sampler(sp, s.n_vocab());
    auto ids = tok->encode(prompt, true, false);
    s.decode(ids, false);
    TextStreamer ts(*tok);
    std::vector<int32_t> hist = ids;
    auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    for (; n < n_predict; n++) {
        int32_t t = sampler.sample(s.last_logits(), hist);
        if (!ignore_eos && tok->is_eog(t)) break;
        hist.push_back(t);
        std::fputs(ts.push(t).c_str(), stdout);
        std::fflush(stdout);
        if (n + 1 < n_predict) s.decode(&t, 1, false);
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\ndecoded %d tokens in %.3f s, %.1f t/s\n", n, dt, n / dt);
    return 0;
}

}  // namespace tandem::cli
