// Test helper: walks a GGUF header and records where each field lives, so tests can corrupt them precisely.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tandem::test {

struct GgufField {
    enum Kind {
        MAGIC,
        VERSION,
        N_TENSORS,
        N_KV,
        STR_LEN,
        VALUE_TYPE,
        ARRAY_TYPE,
        ARRAY_LEN,
        SCALAR,
        N_DIMS,
        DIM,
        TENSOR_TYPE,
        TENSOR_OFFSET
    } kind;
    size_t offset;
    size_t size;
};

inline size_t scalar_size(uint32_t t) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return sizes[t];
}

// Walks a well-formed GGUF image; returns every field in file order and the end of the header.
inline std::vector<GgufField> walk_gguf(const std::string& b, size_t* header_end = nullptr) {
    std::vector<GgufField> out;
    size_t o = 0;
    auto u32 = [&](size_t at) {
        uint32_t v;
        std::memcpy(&v, b.data() + at, 4);
        return v;
    };
    auto u64 = [&](size_t at) {
        uint64_t v;
        std::memcpy(&v, b.data() + at, 8);
        return v;
    };
    auto field = [&](GgufField::Kind k, size_t sz) {
        out.push_back({k, o, sz});
        o += sz;
    };
    auto str = [&] {
        uint64_t n = u64(o);
        field(GgufField::STR_LEN, 8);
        o += n;
    };
    std::vector<uint32_t> stack;
    auto value = [&](auto& self, uint32_t t) -> void {
        if (t == 8) {
            str();
            return;
        }
        if (t == 9) {
            uint32_t et = u32(o);
            field(GgufField::ARRAY_TYPE, 4);
            uint64_t n = u64(o);
            field(GgufField::ARRAY_LEN, 8);
            for (uint64_t i = 0; i < n; i++) self(self, et);
            return;
        }
        field(GgufField::SCALAR, scalar_size(t));
    };
    field(GgufField::MAGIC, 4);
    field(GgufField::VERSION, 4);
    uint64_t nt = u64(o);
    field(GgufField::N_TENSORS, 8);
    uint64_t nkv = u64(o);
    field(GgufField::N_KV, 8);
    for (uint64_t i = 0; i < nkv; i++) {
        str();
        uint32_t t = u32(o);
        field(GgufField::VALUE_TYPE, 4);
        value(value, t);
    }
    for (uint64_t i = 0; i < nt; i++) {
        str();
        uint32_t nd = u32(o);
        field(GgufField::N_DIMS, 4);
        for (uint32_t d = 0; d < nd; d++) field(GgufField::DIM, 8);
        field(GgufField::TENSOR_TYPE, 4);
        field(GgufField::TENSOR_OFFSET, 8);
    }
    if (header_end) *header_end = o;
    return out;
}

}  // namespace tandem::test
