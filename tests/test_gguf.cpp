#include <gtest/gtest.h>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "test_util.h"

using namespace tandem;

namespace {

// Copies a GGUF file through the writer, letting the caller drop tensors or edit metadata.
void copy_gguf(const GgufFile& src, const std::string& dst, const std::string& drop_tensor = "",
               const std::string& drop_key = "", const std::string& reshape = "") {
    GgufWriter w;
    for (const auto& [k, v] : src.metadata())
        if (k != drop_key) w.set(k, v);
    std::vector<const GgufTensor*> kept;
    for (const auto& t : src.tensors()) {
        if (t.name == drop_tensor) continue;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        if (t.name == reshape) std::swap(ne[0], ne[1]);
        w.add_tensor(t.name, t.type, ne);
        kept.push_back(&t);
    }
    w.begin(dst);
    for (const auto* t : kept) w.write_tensor_data(t->data, t->nbytes);
    w.finish();
}

}  // namespace

TEST(Gguf, WriterReaderRoundTripEveryValueType) {
    const std::string path = test::temp_dir() + "/roundtrip.gguf";
    GgufWriter w;
    GgufValue u8;
    u8.type = GgufType::UINT8;
    u8.u = 200;
    GgufValue i8;
    i8.type = GgufType::INT8;
    i8.i = -100;
    GgufValue u16;
    u16.type = GgufType::UINT16;
    u16.u = 60000;
    GgufValue i16;
    i16.type = GgufType::INT16;
    i16.i = -30000;
    GgufValue u64;
    u64.type = GgufType::UINT64;
    u64.u = 1ull << 40;
    GgufValue i64;
    i64.type = GgufType::INT64;
    i64.i = -(1ll << 40);
    GgufValue f64;
    f64.type = GgufType::FLOAT64;
    f64.f = 3.25;
    w.set("a.u8", u8);
    w.set("a.i8", i8);
    w.set("a.u16", u16);
    w.set("a.i16", i16);
    w.set("a.u32", GgufValue::of_u32(4000000000u));
    w.set("a.i32", GgufValue::of_i32(-2000000000));
    w.set("a.u64", u64);
    w.set("a.i64", i64);
    w.set("a.f32", GgufValue::of_f32(1.5f));
    w.set("a.f64", f64);
    w.set("a.bool", GgufValue::of_bool(true));
    w.set("a.str", GgufValue::of_str("héllo"));
    std::vector<GgufValue> inner = {GgufValue::of_i32(1), GgufValue::of_i32(2)};
    std::vector<GgufValue> outer = {GgufValue::of_array(GgufType::INT32, inner),
                                    GgufValue::of_array(GgufType::INT32, {})};
    w.set("a.nested", GgufValue::of_array(GgufType::ARRAY, outer));
    w.set("general.alignment", GgufValue::of_u32(64));
    std::vector<float> data(64 * 3);
    for (size_t i = 0; i < data.size(); i++) data[i] = float(i);
    w.add_tensor("t0", TensorType::F32, {64, 3});
    w.add_tensor("t1", TensorType::F32, {5});
    w.begin(path);
    w.write_tensor_data(data.data(), 64 * 3 * 4);
    w.write_tensor_data(data.data(), 5 * 4);
    w.finish();

    auto f = GgufFile::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->find("a.u8")->as_int(), 200);
    EXPECT_EQ(f->find("a.i8")->as_int(), -100);
    EXPECT_EQ(f->find("a.u16")->as_int(), 60000);
    EXPECT_EQ(f->find("a.i16")->as_int(), -30000);
    EXPECT_EQ(*f->get_int("a.u32"), 4000000000ll);
    EXPECT_EQ(*f->get_int("a.i32"), -2000000000ll);
    EXPECT_EQ(*f->get_int("a.u64"), 1ll << 40);
    EXPECT_EQ(*f->get_int("a.i64"), -(1ll << 40));
    EXPECT_EQ(*f->get_float("a.f32"), 1.5);
    EXPECT_EQ(*f->get_float("a.f64"), 3.25);
    EXPECT_EQ(*f->get_bool("a.bool"), true);
    EXPECT_EQ(*f->get_str("a.str"), "héllo");
    const GgufValue* n = f->get_array("a.nested", GgufType::ARRAY);
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->arr.size(), 2u);
    EXPECT_EQ(n->arr[0].arr[1].as_int(), 2);
    EXPECT_TRUE(n->arr[1].arr.empty());
    EXPECT_THROW(f->get_str("a.u32"), Error);  // wrong type is an error, not a silent default
    EXPECT_FALSE(f->get_int("absent").has_value());
    const GgufTensor* t0 = f->tensor("t0");
    ASSERT_NE(t0, nullptr);
    EXPECT_EQ(t0->ne[0], 64);
    EXPECT_EQ(t0->ne[1], 3);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t0->data) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<const float*>(t0->data)[100], 100.0f);
    EXPECT_EQ(reinterpret_cast<const float*>(f->tensor("t1")->data)[4], 4.0f);
}

TEST(Gguf, WeightsAreUsedInPlaceFromTheMapping) {
    auto f = GgufFile::open(test::shared_file("models/stories260K.gguf"));
    auto m = Model::from_gguf(f);
    const GgufTensor* t = f->tensor("token_embd.weight");
    EXPECT_EQ(m->tok_embd().data, t->data);  // no copy
}

TEST(Gguf, MissingTensorMetadataAndShapeMismatchAreNamed) {
    auto src = GgufFile::open(test::shared_file("models/stories260K.gguf"));
    const std::string dir = test::temp_dir();
    auto expect_error = [](const std::string& path, const std::string& needle) {
        try {
            Model::load(path);
            ADD_FAILURE() << "loaded " << path;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    copy_gguf(*src, dir + "/no-ffn.gguf", "blk.2.ffn_up.weight");
    expect_error(dir + "/no-ffn.gguf", "missing tensor 'blk.2.ffn_up.weight'");
    copy_gguf(*src, dir + "/no-heads.gguf", "", "llama.attention.head_count");
    expect_error(dir + "/no-heads.gguf", "llama.attention.head_count");
    copy_gguf(*src, dir + "/no-arch.gguf", "", "general.architecture");
    expect_error(dir + "/no-arch.gguf", "general.architecture");
    copy_gguf(*src, dir + "/bad-shape.gguf", "", "", "blk.1.ffn_up.weight");
    expect_error(dir + "/bad-shape.gguf", "blk.1.ffn_up.weight");
    copy_gguf(*src, dir + "/copy.gguf");
    EXPECT_NO_THROW(Model::load(dir + "/copy.gguf"));
}

TEST(Gguf, MissingFileIsAnError) { EXPECT_THROW(GgufFile::open("/nonexistent/model.gguf"), Error); }
