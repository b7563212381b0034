// The weight registry (tandem/model.h for_each_matrix / for_each_vector): every tensor of the file is reached by
// one visit, for every architecture, so that placement (the CPU's repacking today, a GPU's upload next) cannot
// forget a field the way a hand-written list can.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tandem/gguf.h"
#include "tandem/model.h"
#include "test_util.h"

using namespace tandem;

namespace {

// gemma4's per-layer output scale: one number (LayerWeights::out_scale), not a vector
bool single_number(const GgufTensor& t) { return t.n_elements() == 1; }

// Every 2-D (or 3-D) tensor of the file lies in the byte ranges of the visited matrices (fused q|k|v and gate|up
// tensors are covered by their views), and the 1-D F32 tensors are as many as the visited vectors.
void expect_every_tensor_visited(const std::string& path) {
    SCOPED_TRACE(path);
    LoadOptions lo;
    lo.place = false;
    auto m = Model::load(path, lo);
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    std::set<std::string> names;
    m->for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        EXPECT_GT(w.rows, 0) << v.name;
        ranges.push_back({uintptr_t(w.data), uintptr_t(w.data) + w.row_stride * size_t(w.rows)});
        names.insert(v.name);
    });
    std::sort(ranges.begin(), ranges.end());
    std::multiset<std::string> vectors;  // "layer name" of each visited vector
    m->for_each_vector([&](const Model::WeightVisit& v, const std::vector<float>& x) {
        EXPECT_FALSE(x.empty()) << v.name;
        vectors.insert(std::to_string(v.layer) + " " + v.name);
    });
    size_t n_vector_tensors = 0;  // F32 tensors the matrices do not reach: norms, biases, scales
    std::string unreached;
    for (const GgufTensor& t : m->gguf().tensors()) {
        uintptr_t at = uintptr_t(t.data);  // the union of the ranges must hold [data, data + nbytes)
        const uintptr_t hi = at + t.nbytes;
        for (const auto& [a, b] : ranges)
            if (a <= at && b > at) at = b;
        if (at >= hi) continue;
        if (t.type == TensorType::F32 || is_integer_type(t.type)) {
            if (t.type == TensorType::F32 && !single_number(t)) n_vector_tensors++, unreached += " " + t.name;
            continue;
        }
        ADD_FAILURE() << t.name << ": not reached by any visited matrix";
    }
    std::string visited;
    for (const auto& v : vectors) visited += " [" + v + "]";
    EXPECT_EQ(vectors.size(), n_vector_tensors) << "visited vectors:" << visited << "\nF32 tensors:" << unreached;
}

}  // namespace

TEST(Weights, EveryTensorOfEveryArchitectureIsVisited) {
    for (const char* shape :
         {"tiny-ref-llama",  "tiny-ref-qwen3",     "tiny-test-qwen3moe", "tiny-test-gemma3",
          "tiny-test-phi3",  "tiny-test-gptoss",   "tiny-ref-smollm3",   "tiny-ref-granite",
          "tiny-ref-olmo2",  "tiny-ref-mistral3",  "tiny-ref-glm4moe",   "tiny-ref-deepseek2",
          "tiny-ref-llama4", "tiny-ref-gemma4",    "tiny-ref-gemma4moe", "tiny-ref-gemma4-assistant",
          "tiny-ref-qwen35", "tiny-ref-qwen35moe", "tiny-ref-qwen3next", "tiny-ref-eagle3",
          "tiny-test-tied"})
        expect_every_tensor_visited(test::synth_file(shape, "Q8_0"));
    for (const char* f : {"models/stories260K.gguf", "models/synth-qwen2-gpt2bpe-bf16.gguf",
                          "models/synth-llama3ish-gpt2bpe-f16.gguf", "models-modern/synth-gptoss-spm-f16-mxfp4.gguf"})
        expect_every_tensor_visited(test::shared_file(f));
}
