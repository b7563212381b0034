// Corrupted GGUF files: every case must be refused with a tandem::Error (one line naming the file), never a
// crash, hang or huge allocation. Run under ASan/UBSan in CI.
#include <gtest/gtest.h>

#include <random>

#include "gguf_walk.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "test_util.h"

using namespace tandem;

namespace {

// Parse + load as a model. Returns the error message, or "" if the file was accepted.
std::string try_load(const std::string& bytes) {
    try {
        auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "corrupt.gguf");
        Model::from_gguf(f);
        return "";
    } catch (const Error& e) {
        return e.what();
    }
}

void expect_corrupt_refused(const std::string& bytes, const std::string& what) {
    std::string msg = try_load(bytes);
    EXPECT_FALSE(msg.empty()) << "accepted a corrupted file: " << what;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error message is not one line: " << msg;
    EXPECT_EQ(msg.rfind("corrupt.gguf", 0), 0u) << "error does not name the file: " << msg;
}

template <typename T>
std::string patched(std::string b, size_t off, T v) {
    std::memcpy(b.data() + off, &v, sizeof(T));
    return b;
}

class Corrupt : public ::testing::Test {
protected:
    void SetUp() override {
        good = test::read_file(test::shared_file("models/stories260K.gguf"));
        fields = test::walk_gguf(good, &header_end);
    }
    std::string good;
    std::vector<test::GgufField> fields;
    size_t header_end = 0;
};

}  // namespace

TEST_F(Corrupt, IntactFileLoads) { EXPECT_EQ(try_load(good), ""); }

TEST_F(Corrupt, TruncatedAtEveryHeaderFieldBoundary) {
    int n = 0;
    for (const auto& f : fields) {
        expect_corrupt_refused(good.substr(0, f.offset), "cut at field start " + std::to_string(f.offset));
        if (f.size > 1) expect_corrupt_refused(good.substr(0, f.offset + f.size / 2), "cut inside field");
        n++;
    }
    EXPECT_GT(n, 100);
}

TEST_F(Corrupt, TruncatedAtRandomOffsets) {
    std::mt19937 rng(1234);
    for (int i = 0; i < 300; i++) {
        size_t cut = std::uniform_int_distribution<size_t>(0, good.size() - 1)(rng);
        expect_corrupt_refused(good.substr(0, cut), "cut at " + std::to_string(cut));
    }
}

TEST_F(Corrupt, FlippedCountsTypesAndLengths) {
    int n = 0;
    for (const auto& f : fields) {
        using K = test::GgufField;
        switch (f.kind) {
            case K::MAGIC: expect_corrupt_refused(patched<uint32_t>(good, f.offset, 0x46554746), "bad magic"); break;
            case K::VERSION:
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 1), "version 1");
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 4), "version 4");
                break;
            case K::N_TENSORS:
            case K::N_KV:
            case K::STR_LEN:
            case K::ARRAY_LEN:
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, ~0ull), "count ~0");
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, 1ull << 40), "count 2^40");
                break;
            case K::VALUE_TYPE:
            case K::ARRAY_TYPE:
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 13), "value type 13");
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 0xFFFFFFFF), "value type ~0");
                break;
            case K::N_DIMS:
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 0), "0 dims");
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 5), "5 dims");
                break;
            case K::DIM:
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, 0), "dim 0");
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, ~0ull), "dim ~0");
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, 1ull << 33), "dim 2^33");
                break;
            case K::TENSOR_TYPE:
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 4), "removed type Q4_2");
                expect_corrupt_refused(patched<uint32_t>(good, f.offset, 99), "type 99");
                break;
            case K::TENSOR_OFFSET:
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, uint64_t(good.size())), "offset at end");
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, ~0ull & ~31ull), "offset huge");
                expect_corrupt_refused(patched<uint64_t>(good, f.offset, 3), "misaligned offset");
                break;
            default: continue;
        }
        n++;
    }
    EXPECT_GT(n, 100);
}

TEST_F(Corrupt, OverlappingTensors) {
    std::vector<size_t> offs;
    for (const auto& f : fields)
        if (f.kind == test::GgufField::TENSOR_OFFSET) offs.push_back(f.offset);
    ASSERT_GE(offs.size(), 2u);
    uint64_t first;
    std::memcpy(&first, good.data() + offs[0], 8);
    expect_corrupt_refused(patched<uint64_t>(good, offs[1], first), "tensor 1 overlaps tensor 0");
}

TEST_F(Corrupt, RandomByteFlipsNeverCrash) {
    // Flips inside the header may or may not make the file invalid; the point is no crash, no sanitizer report.
    std::mt19937 rng(99);
    for (int i = 0; i < 500; i++) {
        std::string b = good;
        for (int k = 0; k < 4; k++) {
            size_t at = std::uniform_int_distribution<size_t>(0, header_end - 1)(rng);
            b[at] = char(rng());
        }
        (void)try_load(b);
    }
}

TEST_F(Corrupt, CommandLineExitsNonZeroWithMessage) {
    const std::string dir = test::temp_dir();
    struct Case {
        std::string name;
        std::string bytes;
    };
    std::vector<Case> cases = {
        {"empty", ""},
        {"magic", patched<uint32_t>(good, 0, 0x12345678)},
        {"truncated-header", good.substr(0, header_end / 2)},
        {"truncated-data", good.substr(0, good.size() - 1000)},
        {"huge-kv-count", patched<uint64_t>(good, 16, ~0ull)},
    };
    for (const auto& f : fields)
        if (f.kind == test::GgufField::TENSOR_TYPE) {
            cases.push_back({"bad-type", patched<uint32_t>(good, f.offset, 77)});
            break;
        }
    for (const auto& c : cases) {
        std::string path = dir + "/" + c.name + ".gguf";
        test::write_file(path, c.bytes);
        std::string out;
        int rc = test::run_command(test::tandem_bin() + " info " + path, &out);
        EXPECT_EQ(rc, 1) << c.name << ": " << out;
        EXPECT_NE(out.find("error: " + path), std::string::npos) << c.name << ": " << out;
        rc = test::run_command(test::tandem_bin() + " generate -m " + path + " -p hi -n 4", &out);
        EXPECT_EQ(rc, 1) << c.name << ": " << out;
    }
}

// Regression (issue 12, defect 18): with general.alignment = 1 an F32 tensor can start at an odd offset; the
// reader must refuse it (weights are read in place) instead of handing out a misaligned float pointer.
TEST(GgufAlignment, TensorsTheLoaderCannotReadAlignedAreRefused) {
    int refused = 0, accepted = 0;
    for (int pad = 0; pad < 4; pad++) {  // metadata of 4 lengths: the data section starts at 4 different residues
        const std::string path = test::temp_dir() + "/align1-" + std::to_string(pad) + ".gguf";
        GgufWriter w;
        w.set("general.architecture", GgufValue::of_str("llama"));
        w.set("general.alignment", GgufValue::of_u32(1));
        w.set("general.name", GgufValue::of_str(std::string(size_t(pad), 'x')));
        w.add_tensor("b", TensorType::F32, {4});  // at the start of the data section
        w.add_tensor("a", TensorType::Q8_0, {32});  // 16 bytes later
        w.begin(path);
        std::vector<uint8_t> q(34, 0), f(16, 0);
        w.write_tensor_data(f.data(), f.size());
        w.write_tensor_data(q.data(), q.size());
        w.finish();
        try {
            auto g = GgufFile::open(path);
            const GgufTensor* b = g->tensor("b");
            ASSERT_NE(b, nullptr);
            EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 4, 0u) << "accepted a misaligned F32 tensor";
            accepted++;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("not aligned to 4 bytes"), std::string::npos) << e.what();
            refused++;
        }
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(accepted, 0);
}
