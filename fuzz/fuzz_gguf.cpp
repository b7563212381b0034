// libFuzzer target for the GGUF parser and model loader: any input must either load or throw tandem::Error.
// Build: cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DTANDEM_FUZZ=ON -DTANDEM_TESTS=OFF
// Run:   ./build-fuzz/bin/fuzz_gguf -max_total_time=60 fuzz/corpus
#include <cstddef>
#include <cstdint>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto f = tandem::GgufFile::parse(data, size, "fuzz.gguf");
        if (f->find("general.architecture")) tandem::Model::from_gguf(f);
        if (f->find("tokenizer.ggml.model")) {
            auto tok = tandem::Tokenizer::from_gguf(*f);
            auto ids = tok->encode("Hello world <s> \xE4\xB8\x96", true, true);
            (void)tok->decode(ids);
        }
    } catch (const tandem::Error&) {}
    return 0;
}
