// EAGLE-3 heads (model/eagle3.h): what the loader refuses, which target states a head reads, and the training data
// `tandem distill` writes (tandem/distill.h). Drafting with a head: test_speculative.cpp (Eagle3HeadDraftsAreExact);
// agreement with llama.cpp: test_reference.cpp (Eagle3Reference).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "model/weight_view.h"
#include "tandem/distill.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

// A copy of the synth head tiny-ref-eagle3 (F16) with its metadata and tensors passed through `edit_kv` and
// `edit_tensor` (which may rename a tensor, change its type or rewrite its bytes).
struct TensorEdit {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
};
std::string edited_head(const std::string& tag, const std::function<void(std::string&, GgufValue&)>& edit_kv,
                        const std::function<void(TensorEdit&)>& edit_tensor) {
    const std::string out = test::temp_dir() + "/eagle3-" + tag + ".gguf";
    auto src = GgufFile::open(test::synth_file("tiny-ref-eagle3", "F16"));
    GgufWriter w;
    for (const auto& [k, v] : src->metadata()) {
        std::string key = k;
        GgufValue c = v;
        edit_kv(key, c);
        if (!key.empty()) w.set(key, c);
    }
    std::vector<TensorEdit> ts;
    for (const auto& t : src->tensors()) {
        TensorEdit e{t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                     std::vector<uint8_t>(t.data, t.data + t.nbytes)};
        edit_tensor(e);
        if (!e.name.empty()) ts.push_back(std::move(e));
    }
    for (const auto& e : ts) w.add_tensor(e.name, e.type, e.ne);
    w.begin(out);
    for (const auto& e : ts) w.write_tensor_data(e.data.data(), e.data.size());
    w.finish();
    return out;
}

void expect_refused(const std::string& path, const char* says) {
    try {
        Model::load(path);
        ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
}

}  // namespace

// A head's d2t must map into the vocabulary without repeats and be integers; it needs its three target layers
// and one layer of its own; an integer table is no weight. Each is refused with a message naming it.
TEST(Eagle3, LoaderRefusesBrokenHeads) {
    auto keep_kv = [](std::string&, GgufValue&) {};
    auto keep_t = [](TensorEdit&) {};
    auto d2t_set = [](int64_t at, int64_t id) {
        return [=](TensorEdit& e) {
            if (e.name == "d2t") std::memcpy(e.data.data() + 8 * at, &id, 8);
        };
    };
    EXPECT_NO_THROW(Model::load(edited_head("same", keep_kv, keep_t)));
    int64_t first;
    {
        auto src = GgufFile::open(test::synth_file("tiny-ref-eagle3", "F16"));
        std::memcpy(&first, src->tensor("d2t")->data, 8);
    }
    expect_refused(edited_head("repeat", keep_kv, d2t_set(1, first)), "repeated target id");
    expect_refused(edited_head("range", keep_kv, d2t_set(3, 1000)), "invalid target id 1000");
    expect_refused(edited_head(
                       "layers",
                       [](std::string& k, GgufValue&) {
                           if (k == "eagle3.target_layers") k.clear();
                       },
                       keep_t),
                   "target_layers");
    expect_refused(edited_head(
                       "blocks",
                       [](std::string& k, GgufValue& v) {
                           if (k == "eagle3.block_count") v = GgufValue::of_u32(2);
                       },
                       keep_t),
                   "one decoder layer");
    expect_refused(edited_head("f32d2t", keep_kv,
                               [](TensorEdit& e) {
                                   if (e.name != "d2t") return;
                                   e.type = TensorType::F32;
                                   e.data.resize(e.data.size() / 2);
                               }),
                   "integers");
    expect_refused(edited_head("nooutput", keep_kv,
                               [](TensorEdit& e) {
                                   if (e.name == "output.weight") e.name.clear();
                               }),
                   "own output.weight");
    expect_refused(edited_head("intnorm", keep_kv,
                               [](TensorEdit& e) {
                                   if (e.name != "output_norm.weight") return;
                                   e.type = TensorType::I32;
                               }),
                   "holds integers");
}

// The target keeps, per row, the inputs of the head's layers in their order: the input of layer 0 is the token's
// embedding (a capture after the layer instead of before it fails here), and a pass over several rows keeps what
// one row at a time keeps, bit for bit.
TEST(Eagle3, TargetKeepsTheInputsOfTheHeadsLayers) {
    ThreadPool pool(1);
    auto target = Model::load(test::synth_file("tiny-ref-llama", "F16"));
    const int E = target->hparams().n_embd;
    const std::vector<int32_t> toks = {1, 300, 301, 302, 517, 640};
    Session a(target, SessionParams{64, 0, 256}, pool), b(target, SessionParams{64, 0, 256}, pool);
    a.keep_hidden(true, {2, 0, 3});
    b.keep_hidden(true, {2, 0, 3});
    a.decode(toks, false);
    for (int32_t t : toks) b.decode(&t, 1, false);
    ASSERT_EQ(a.hidden_width(), 3 * E);
    std::vector<float> emb(static_cast<size_t>(E));
    for (size_t p = 0; p < toks.size(); p++) {
        ASSERT_NE(a.hidden_row(int(p)), nullptr);
        EXPECT_EQ(std::memcmp(a.hidden_row(int(p)), b.hidden_row(int(p)), size_t(3 * E) * sizeof(float)), 0) << p;
        embedding_row(target->tok_embd(), toks[p], emb.data());
        EXPECT_EQ(std::memcmp(a.hidden_row(int(p)) + E, emb.data(), size_t(E) * sizeof(float)), 0) << p;
        EXPECT_NE(std::memcmp(a.hidden_row(int(p)), a.hidden_row(int(p)) + 2 * E, size_t(E) * sizeof(float)), 0);
    }
    a.truncate(3);  // a rollback takes the rows after it
    EXPECT_EQ(a.hidden_row(3), nullptr);
    EXPECT_NE(a.hidden_row(2), nullptr);
}

// `tandem distill`'s file: the header, each sequence's tokens (the prompt, then the target's own continuation), the
// layer inputs (layer 0's: the embedding), and the target's top log-probabilities, most probable first, whose first
// is the argmax of the target's logits at that position.
TEST(Eagle3, DistillDataHoldsTheTargetsStatesAndDistribution) {
    ThreadPool pool(1);
    auto target = Model::load(test::shared_file("models/stories260K.gguf"));
    const int E = target->hparams().n_embd, V = target->hparams().n_vocab;
    DistillParams p;
    p.layers = {0, 2, 4};
    p.n_predict = 6;
    p.top_k = 4;
    p.sampling.temp = 1.0f;
    const std::vector<std::vector<int32_t>> prompts = {{1, 400, 300}, {1, 290}};
    const std::string path = test::temp_dir() + "/distill.bin";
    EXPECT_EQ(write_distill_data(target, prompts, p, pool, path), size_t(3 + 6 + 2 + 6));
    const std::string raw = test::read_file(path);
    size_t off = 0;
    auto i32 = [&] {
        int32_t v;
        std::memcpy(&v, raw.data() + off, 4);
        off += 4;
        return v;
    };
    auto f32 = [&] {
        float v;
        std::memcpy(&v, raw.data() + off, 4);
        off += 4;
        return v;
    };
    ASSERT_EQ(raw.substr(0, 4), "TDE3");
    off = 4;
    for (int want : {1, E, V, 5, 0, 2, 4, 4, 2}) EXPECT_EQ(i32(), want);
    off += size_t(V) * size_t(E) * 4;
    std::vector<float> emb(static_cast<size_t>(E));
    for (const auto& prompt : prompts) {
        const int T = i32();
        ASSERT_EQ(T, int(prompt.size()) + 6);
        std::vector<int32_t> toks;
        for (int t = 0; t < T; t++) toks.push_back(i32());
        EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), toks.begin()));
        for (int t = 0; t < T; t++) {
            embedding_row(target->tok_embd(), toks[size_t(t)], emb.data());
            EXPECT_EQ(std::memcmp(raw.data() + off, emb.data(), size_t(E) * 4), 0) << t;
            off += size_t(3 * E) * 4;
        }
        Session s(target, SessionParams{64, 0, 256}, pool);
        s.decode(toks, true);
        for (int t = 0; t < T; t++) {
            const float* lg = s.logits(t);
            const int best = int(std::max_element(lg, lg + V) - lg);
            float prev = 0;
            for (int k = 0; k < 4; k++) {
                const int id = i32();
                const float lp = f32();
                if (k == 0) EXPECT_EQ(id, best) << t;
                EXPECT_LE(lp, k ? prev : 0.0f);
                prev = lp;
            }
        }
    }
    EXPECT_EQ(off, raw.size());
    DistillParams bad = p;
    bad.layers = {0, 2, 5};
    EXPECT_THROW(write_distill_data(target, prompts, bad, pool, path), Error);
}

// A drafter whose construction fails (here an MTP session of an MLA model with K and V cache types that differ)
// leaves its target free: the target keeps nothing for it, so the next drafter is not refused as a second one.
TEST(Eagle3, AFailedDrafterLeavesItsTargetFree) {
    ThreadPool pool(1);
    auto model = Model::load(test::synth_file("tiny-ref-deepseek2", "Q8_0"));
    Session target(model, SessionParams{64, 0, 256}, pool);
    SessionParams bad{64, 0, 256};
    bad.drafter_of = &target;
    bad.type_v = TensorType::Q8_0;
    EXPECT_THROW(Session(model, bad, pool), Error);
    SessionParams good{64, 0, 256};
    good.drafter_of = &target;
    EXPECT_NO_THROW(Session(model, good, pool));
}
