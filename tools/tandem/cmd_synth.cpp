#include <cstdio>

#include "args.h"
#include "commands.h"
#include "tandem/error.h"
#include "tandem/synth.h"

namespace tandem::cli {

int cmd_synth(int argc, char** argv) {
    SynthParams p;
    p.shape = "";
    std::string shapes;
    for (const auto& s : synth_shapes()) shapes += " " + s.name;
    ArgParser ap("usage: tandem synth OUT.gguf --shape NAME [--type TYPE] [--seed S] [--vocab VOCAB.gguf]\nshapes:" +
                 shapes + "\nRandom weights of a real model's shape, streamed to disk (for speed measurements).");
    ap.add({"--shape"}, "NAME", "model shape", [&](const std::string& v) { p.shape = v; });
    ap.add({"--type"}, "TYPE", "tensor type for every matrix, or a llama.cpp mix such as Q4_K_M (Q8_0)",
           [&](const std::string& v) { p.type = v; });
    ap.add({"--seed"}, "S", "random seed (1)", [&](const std::string& v) { p.seed = to_u64("--seed", v); });
    ap.add({"--vocab"}, "FNAME", "copy the vocabulary of this GGUF", [&](const std::string& v) { p.vocab_path = v; });
    auto pos = ap.parse(argc, argv, 2);
    if (pos.size() != 1) throw Error("expected one output file (see --help)");
    if (p.shape.empty()) throw Error("--shape is required");
    synth_model(pos[0], p);
    std::fprintf(stderr, "wrote %s (%s, %s)\n", pos[0].c_str(), p.shape.c_str(), p.type.c_str());
    return 0;
}

}  // namespace tandem::cli
