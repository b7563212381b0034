#include <cstdio>
#include <memory>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "io.h"
#include "tandem/distill.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/strings.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

int cmd_distill(int argc, char** argv) {
    std::string model_path, head_path, file, out, layers;
    int n_threads = 2;
    DistillParams p;
    p.sampling.temp = 1.0f;
    p.sampling.seed = 1;
    std::vector<std::string> notes;
    ArgParser ap(
        "usage: tandem distill -m TARGET.gguf (--layers A,B,C | --head HEAD.gguf) -f PROMPTS.txt -o OUT.bin\n"
        "       [-n 128] [--logprobs 32] [--temp 1] [--seed 1] [sampling flags]\n"
        "Training data for an EAGLE-3 head (scripts/eagle3/train_eagle3.py): the target continues each prompt (one\n"
        "per line) on its own; every position's token, the inputs of the three target layers and the target's\n"
        "top-k next-token log-probabilities are written (tandem/distill.h).");
    ap.add({"-m", "--model"}, "FNAME", "target GGUF file", [&](const std::string& v) { model_path = v; });
    ap.add({"--head"}, "FNAME", "take the target layers of this EAGLE-3 head",
           [&](const std::string& v) { head_path = v; });
    ap.add({"--layers"}, "A,B,C", "the three target layers whose inputs the head reads",
           [&](const std::string& v) { layers = v; });
    ap.add({"-f", "--file"}, "FNAME", "prompts, one per line", [&](const std::string& v) { file = v; });
    ap.add({"-o", "--output"}, "FNAME", "output file", [&](const std::string& v) { out = v; });
    ap.add({"-n", "--n-predict"}, "N", "tokens the target adds to each prompt (128)",
           [&](const std::string& v) { p.n_predict = to_int_in("-n", v, 1, 1 << 20); });
    ap.add({"--logprobs"}, "K", "log-probabilities kept per position (32)",
           [&](const std::string& v) { p.top_k = to_int_in("--logprobs", v, 1, 1 << 20); });
    ap.add({"-t", "--threads"}, "N", "threads (2)",
           [&](const std::string& v) { n_threads = to_int_in("-t", v, 1, 1024); });
    add_sampling_flags(ap, p.sampling, notes);
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (model_path.empty() || file.empty() || out.empty()) throw Error("-m, -f and -o are required");
    if (layers.empty() == head_path.empty()) throw Error("give --layers A,B,C or --head HEAD.gguf");
    for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    if (!head_path.empty()) {
        auto head = Model::load(head_path);
        if (!head->eagle3()) throw Error(head_path + ": not an EAGLE-3 head (general.architecture eagle3)");
        for (int l : head->eagle3()->target_layers) p.layers.push_back(l);
    } else {
        for (const std::string& s : split_list(layers)) p.layers.push_back(to_int_in("--layers", s, 0, 1 << 16));
    }
    auto model = Model::load(model_path);
    auto tok = Tokenizer::from_gguf(model->gguf());
    std::vector<std::vector<int32_t>> prompts;
    std::istringstream lines(read_file_bytes(file));
    for (std::string line; std::getline(lines, line);)
        if (!line.empty()) prompts.push_back(tok->encode(line, true, false));
    if (prompts.empty()) throw Error(file + ": no prompts");
    ThreadPool pool(n_threads);
    const size_t n = write_distill_data(model, prompts, p, pool, out);
    std::fprintf(stderr, "wrote %s: %zu sequences, %zu positions (layers %d, %d, %d; top %d)\n", out.c_str(),
                 prompts.size(), n, p.layers[0], p.layers[1], p.layers[2], p.top_k);
    return 0;
}

}  // namespace tandem::cli
