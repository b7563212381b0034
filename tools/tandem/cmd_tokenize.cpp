#include <cstdio>
#include <fstream>
#include <iterator>

#include "args.h"
#include "commands.h"
#include "io.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

int cmd_tokenize(int argc, char** argv) {
    std::string model, prompt, file;
    bool have_prompt = false, no_special = false, parse_special = false, ids_only = false;
    ArgParser ap("usage: tandem tokenize -m MODEL (-p TEXT | -f FILE) [--no-special] [--parse-special] [--ids]");
    ap.add({"-m", "--model"}, "FNAME", "model (or vocab-only) GGUF file", [&](const std::string& v) { model = v; });
    ap.add({"-p", "--prompt"}, "TEXT", "text to tokenize", [&](const std::string& v) {
        prompt = v;
        have_prompt = true;
    });
    ap.add({"-f", "--file"}, "FNAME", "tokenize this file's bytes exactly", [&](const std::string& v) { file = v; });
    ap.flag({"--no-special"}, "add no BOS/EOS", [&] { no_special = true; });
    ap.flag({"--parse-special"}, "turn text like <s> into control tokens", [&] { parse_special = true; });
    ap.flag({"--ids"}, "print only a JSON array of ids", [&] { ids_only = true; });
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (model.empty()) throw Error("-m MODEL is required");
    if (have_prompt == !file.empty()) throw Error("give exactly one of -p TEXT or -f FILE");
    if (!file.empty()) prompt = read_file_bytes(file);

    auto f = GgufFile::open(model);
    auto tok = Tokenizer::from_gguf(*f);
    auto ids = tok->encode(prompt, !no_special, parse_special);
    if (ids_only) {
        std::string s = "[";
        for (size_t i = 0; i < ids.size(); i++) s += (i ? ", " : "") + std::to_string(ids[i]);
        std::printf("%s]\n", s.c_str());
        return 0;
    }
    for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, tok->token_to_piece(id, true).c_str());
    std::printf("%zu tokens\n", ids.size());
    return 0;
}

}  // namespace tandem::cli
