// `tandem quantize` / quantize_model: types, llama.cpp's _M mixes, per-tensor fallback, layer truncation, and
// that the written data is exactly the reference quantization of the source values.
#include <gtest/gtest.h>

#include <cstring>

#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/quantize.h"
#include "tandem/synth.h"
#include "test_util.h"

using namespace tandem;

namespace {

// Every tensor of `out` holds quantize_row_ref(type, dequantize(source row)).
void expect_reference_quantization(const GgufFile& src, const GgufFile& out) {
    for (const auto& t : out.tensors()) {
        const GgufTensor* s = src.tensor(t.name);
        ASSERT_NE(s, nullptr) << t.name;
        const int64_t n = t.ne[0];
        std::vector<float> row(static_cast<size_t>(n));
        std::vector<uint8_t> want(row_bytes(t.type, n));
        const size_t in_rb = row_bytes(s->type, n), out_rb = row_bytes(t.type, n);
        for (int64_t r = 0; r < t.n_rows(); r += std::max<int64_t>(1, t.n_rows() / 7)) {
            dequantize_row_ref(s->type, s->data + size_t(r) * in_rb, row.data(), n);
            quantize_row_ref(t.type, row.data(), want.data(), n);
            ASSERT_EQ(0, std::memcmp(want.data(), t.data + size_t(r) * out_rb, out_rb)) << t.name << " row " << r;
        }
    }
}

}  // namespace

TEST(QuantizeModel, StoriesFallsBackPerTensorWhereLlamaCppRefuses) {
    const std::string src = test::shared_file("models/stories260K.gguf");
    for (const char* type : {"Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "F16", "BF16"}) {
        const std::string out = test::temp_dir() + "/stories-" + type + ".gguf";
        std::vector<std::string> notes;
        quantize_model(src, out, QuantizeParams{type, 0, [&](const std::string& m) { notes.push_back(m); }});
        auto in = GgufFile::open(src);
        auto q = GgufFile::open(out);
        // n_ff = 172 fits no block size: ffn_down (rows of 172) falls back, and says so.
        const GgufTensor* down = q->tensor("blk.0.ffn_down.weight");
        ASSERT_NE(down, nullptr);
        if (std::string(type) != "F16" && std::string(type) != "BF16") {
            EXPECT_EQ(down->type, TensorType::F16) << type;
            EXPECT_FALSE(notes.empty()) << type;
        }
        EXPECT_EQ(q->tensor("blk.0.attn_norm.weight")->type, TensorType::F32);
        expect_reference_quantization(*in, *q);
        EXPECT_NO_THROW(Model::load(out)) << type;
    }
}

TEST(QuantizeModel, MixesFollowLlamaCpp) {
    // Q4_K_M: output Q6_K; attn_v / ffn_down Q6_K in the first and last eighth of the layers and every third
    // layer in between, Q4_K elsewhere.
    EXPECT_EQ(mix_type_for("Q4_K_M", "output.weight", 32), TensorType::Q6_K);
    EXPECT_EQ(mix_type_for("Q4_K_M", "blk.0.attn_v.weight", 32), TensorType::Q6_K);
    EXPECT_EQ(mix_type_for("Q4_K_M", "blk.6.ffn_down.weight", 32), TensorType::Q6_K);  // (6 - 4) % 3 == 2
    EXPECT_EQ(mix_type_for("Q4_K_M", "blk.5.ffn_down.weight", 32), TensorType::Q4_K);
    EXPECT_EQ(mix_type_for("Q4_K_M", "blk.31.attn_v.weight", 32), TensorType::Q6_K);
    EXPECT_EQ(mix_type_for("Q4_K_M", "blk.5.attn_q.weight", 32), TensorType::Q4_K);
    EXPECT_EQ(mix_type_for("Q5_K_M", "blk.5.attn_q.weight", 32), TensorType::Q5_K);
    EXPECT_EQ(mix_type_for("Q4_0", "output.weight", 32), TensorType::Q6_K);
    EXPECT_EQ(mix_type_for("Q8_0", "output.weight", 32), TensorType::Q8_0);
    EXPECT_EQ(fallback_type(TensorType::Q4_K, 64), TensorType::Q5_0);
    EXPECT_EQ(fallback_type(TensorType::Q6_K, 96), TensorType::Q8_0);
    EXPECT_EQ(fallback_type(TensorType::Q4_0, 172), TensorType::F16);
    EXPECT_THROW(mix_type_for("Q9_X", "a", 1), Error);
}

TEST(QuantizeModel, KeepLayersMakesATruncatedDraft) {
    const std::string src = test::shared_file("models/stories260K.gguf");
    const std::string out = test::temp_dir() + "/stories-3l.gguf";
    quantize_model(src, out, QuantizeParams{"F32", 3, nullptr});
    auto m = Model::load(out);
    EXPECT_EQ(m->hparams().n_layer, 3);
    EXPECT_EQ(m->gguf().tensor("blk.3.attn_q.weight"), nullptr);
    EXPECT_THROW(quantize_model(src, out, QuantizeParams{"F32", 9, nullptr}), Error);
}

TEST(QuantizeModel, SynthTinyShapeWithVocab) {
    const std::string out = test::temp_dir() + "/synth-tiny.gguf";
    SynthParams p;
    p.shape = "tiny-test";
    p.type = "Q4_K_M";
    synth_model(out, p);
    auto m = Model::load(out);
    EXPECT_EQ(m->hparams().n_embd, 256);
    EXPECT_EQ(m->gguf().tensor("output.weight")->type, TensorType::Q6_K);
    EXPECT_EQ(m->gguf().tensor("blk.0.ffn_down.weight")->type, TensorType::Q4_K);
    EXPECT_EQ(m->gguf().tensor("blk.1.ffn_down.weight")->type, TensorType::Q6_K);  // last eighth of the layers
    EXPECT_THROW(synth_model(out, SynthParams{"no-such-shape", "Q8_0", 1, "", nullptr}), Error);
}
