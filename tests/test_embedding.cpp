// Embeddings: Session::embed returns the vectors the logits are computed from, causally; pooling and
// normalization follow llama.cpp's definitions.
#include <gtest/gtest.h>

#include <cmath>

#include "quant/quant.h"
#include "tandem/embedding.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

std::shared_ptr<const Model> embed_stories() {
    static auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    return m;
}

const std::vector<int32_t> kEmbedSeq = {1, 403, 407, 261, 378, 432, 269, 300, 262, 301, 350, 280};

}  // namespace

// The last position's embedding, multiplied by the output matrix, gives the logits decode() computes.
TEST(Embedding, HiddenStatesAreWhatTheLogitsAreComputedFrom) {
    ThreadPool pool(2);
    Session a(embed_stories(), {}, pool), b(embed_stories(), {}, pool);
    const int E = embed_stories()->hparams().n_embd, V = embed_stories()->hparams().n_vocab;
    std::vector<float> h = a.embed(kEmbedSeq.data(), int(kEmbedSeq.size()));
    ASSERT_EQ(h.size(), kEmbedSeq.size() * size_t(E));
    EXPECT_EQ(a.n_past(), int(kEmbedSeq.size()));
    b.decode(kEmbedSeq, false);
    const Weight& out = embed_stories()->output();
    std::vector<float> row(size_t(E) + 0);
    double max_logit = 0, max_err = 0;
    for (int v = 0; v < V; v++) {
        dequantize_row_ref(out.type, out.data + size_t(v) * out.row_stride, row.data(), E);
        double dot = 0;
        for (int i = 0; i < E; i++) dot += double(row[size_t(i)]) * h[(kEmbedSeq.size() - 1) * size_t(E) + size_t(i)];
        max_logit = std::max(max_logit, std::fabs(double(b.last_logits()[v])));
        max_err = std::max(max_err, std::fabs(dot - b.last_logits()[v]));
    }
    EXPECT_LT(max_err, 0.02 * max_logit) << "largest logit " << max_logit;
}

// Row i of a sequence's embeddings sees tokens 0..i only: it equals the last row of the prefix's embeddings.
TEST(Embedding, RowsAreCausal) {
    ThreadPool pool(1);
    Session a(embed_stories(), {}, pool);
    const size_t E = size_t(embed_stories()->hparams().n_embd);
    std::vector<float> all = a.embed(kEmbedSeq.data(), int(kEmbedSeq.size()));
    for (int n : {1, 5, 9}) {
        Session b(embed_stories(), {}, pool);
        std::vector<float> pre = b.embed(kEmbedSeq.data(), n);
        for (size_t i = 0; i < E; i++) ASSERT_NEAR(pre[size_t(n - 1) * E + i], all[size_t(n - 1) * E + i], 1e-4) << n;
    }
}

TEST(Embedding, PoolingAndNormalization) {
    const float h[6] = {1, 2, 3, 5, 6, 7};  // 2 tokens x 3
    EXPECT_EQ(pool_embeddings(h, 2, 3, Pooling::MEAN), (std::vector<float>{3, 4, 5}));
    EXPECT_EQ(pool_embeddings(h, 2, 3, Pooling::CLS), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(pool_embeddings(h, 2, 3, Pooling::LAST), (std::vector<float>{5, 6, 7}));
    EXPECT_EQ(pool_embeddings(h, 2, 3, Pooling::NONE).size(), 6u);
    std::vector<float> v = {3, -4};
    normalize_embedding(v.data(), 2, 2);
    EXPECT_FLOAT_EQ(v[0], 0.6f);
    EXPECT_FLOAT_EQ(v[1], -0.8f);
    v = {3, -4};
    normalize_embedding(v.data(), 2, 1);
    EXPECT_FLOAT_EQ(v[0], 3.f / 7);
    v = {3, -4};
    normalize_embedding(v.data(), 2, 0);
    EXPECT_FLOAT_EQ(v[1], -32760.f);
    v = {3, -4};
    normalize_embedding(v.data(), 2, -1);
    EXPECT_EQ(v, (std::vector<float>{3, -4}));
    v = {0, 0};
    normalize_embedding(v.data(), 2, 2);
    EXPECT_EQ(v, (std::vector<float>{0, 0}));
    EXPECT_EQ(pooling_from_name("mean"), Pooling::MEAN);
    EXPECT_THROW(pooling_from_name("rank"), Error);
    EXPECT_THROW(pooling_from_name("avg"), Error);
}
