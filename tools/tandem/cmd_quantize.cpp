#include <cstdio>

#include "args.h"
#include "commands.h"
#include "tandem/error.h"
#include "tandem/quantize.h"

namespace tandem::cli {

int cmd_quantize(int argc, char** argv) {
    QuantizeParams p;
    ArgParser ap(
        "usage: tandem quantize IN.gguf OUT.gguf TYPE [--keep-layers K]\n"
        "TYPE: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q4_K_M Q5_K_M Q4_K_S Q5_K_S F16 BF16 F32\n"
        "A tensor whose rows do not fit the type's blocks falls back to the nearest type that fits.");
    ap.add({"--keep-layers"}, "K", "keep only the first K layers (layer-truncated draft)",
           [&](const std::string& v) { p.keep_layers = to_int_in("--keep-layers", v, 1, 65536); });
    auto pos = ap.parse(argc, argv, 2);
    if (pos.size() != 3) throw Error("expected IN.gguf OUT.gguf TYPE (see --help)");
    p.type = pos[2];
    p.on_note = [](const std::string& m) { std::fprintf(stderr, "note: %s\n", m.c_str()); };
    quantize_model(pos[0], pos[1], p);
    std::fprintf(stderr, "wrote %s (%s%s)\n", pos[1].c_str(), p.type.c_str(),
                 p.keep_layers ? (", first " + std::to_string(p.keep_layers) + " layers").c_str() : "");
    return 0;
}

}  // namespace tandem::cli
