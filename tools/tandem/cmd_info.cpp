#include <cstdio>

#include "args.h"
#include "commands.h"
#include "tandem/cpu.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

namespace {

std::string value_str(const GgufValue& v) {
    switch (v.type) {
        case GgufType::STRING: return v.s.size() > 120 ? "\"" + v.s.substr(0, 117) + "...\"" : "\"" + v.s + "\"";
        case GgufType::BOOL: return v.u ? "true" : "false";
        case GgufType::FLOAT32:
        case GgufType::FLOAT64: return strprintf("%g", v.f);
        case GgufType::ARRAY: {
            std::string s = strprintf("[%s x %zu]", gguf_type_name(v.elem_type), v.arr.size());
            if (!v.arr.empty() && v.elem_type != GgufType::ARRAY) {
                s += " ";
                for (size_t i = 0; i < v.arr.size() && i < 5; i++) s += (i ? ", " : "") + value_str(v.arr[i]);
                if (v.arr.size() > 5) s += ", ...";
            }
            return s;
        }
        default: return std::to_string(v.as_int());
    }
}

}  // namespace

int cmd_info(int argc, char** argv) {
    ArgParser ap("usage: tandem info MODEL.gguf [--no-tensors]");
    bool tensors = true;
    ap.flag({"--no-tensors"}, "do not list tensors", [&] { tensors = false; });
    auto pos = ap.parse(argc, argv, 2);
    if (pos.size() != 1) throw Error("expected one model file (see --help)");
    auto f = GgufFile::open(pos[0]);
    std::printf("%s\n", cpu_info_line().c_str());
    std::printf("file:      %s\n", f->path().c_str());
    std::printf("gguf:      v%u, %zu metadata keys, %zu tensors, alignment %u, %zu bytes\n", f->version(),
                f->metadata().size(), f->tensors().size(), f->alignment(), f->file_size());
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : f->metadata()) std::printf("  %-44s %s\n", k.c_str(), value_str(v).c_str());
    if (tensors) {
        std::printf("\ntensors:\n");
        for (const auto& t : f->tensors()) {
            std::string shape;
            for (int d = 0; d < t.n_dims; d++) shape += (d ? " x " : "") + std::to_string(t.ne[d]);
            std::printf("  %-36s %-6s %-22s %12zu bytes\n", t.name.c_str(), type_name(t.type), shape.c_str(), t.nbytes);
        }
    }
    if (f->find("general.architecture")) {
        auto m = Model::from_gguf(f);
        const HParams& hp = m->hparams();
        std::printf("\nmodel:     %s, %d layers, n_embd %d, %d heads (%d KV), head dim %d, n_ff %d, vocab %d, ctx %d\n",
                    arch_name(hp.arch), hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff,
                    hp.n_vocab, hp.n_ctx_train);
        std::printf("           %s\n", describe_features(hp).c_str());
        std::printf("params:    %lld (%.2f M), weights %.2f MiB, mostly %s\n", (long long)m->n_params(),
                    double(m->n_params()) / 1e6, double(m->weights_bytes()) / 1048576.0, m->describe_type().c_str());
    }
    if (f->find("tokenizer.ggml.model")) {
        auto tok = Tokenizer::from_gguf(*f);
        std::printf("tokenizer: %s (pre '%s'), %d tokens, bos %d, eos %d, add_bos %s\n", tok->model_name().c_str(),
                    tok->pre_name().c_str(), tok->n_vocab(), tok->bos(), tok->eos(), tok->add_bos() ? "yes" : "no");
    }
    return 0;
}

}  // namespace tandem::cli
