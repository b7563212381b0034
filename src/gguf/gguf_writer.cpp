#include <cerrno>
#include <cstring>

#include "tandem/error.h"
#include "tandem/gguf.h"

namespace tandem {

namespace {

void put(FILE* f, const void* p, size_t n, const std::string& path) {
    if (n && std::fwrite(p, 1, n, f) != n) throw Error(path + ": write failed: " + std::strerror(errno));
}
template <typename T>
void put_pod(FILE* f, T v, const std::string& path) {
    put(f, &v, sizeof(T), path);
}
void put_str(FILE* f, const std::string& s, const std::string& path) {
    put_pod<uint64_t>(f, s.size(), path);
    put(f, s.data(), s.size(), path);
}

void put_value(FILE* f, const GgufValue& v, const std::string& path) {
    switch (v.type) {
        case GgufType::UINT8: put_pod<uint8_t>(f, uint8_t(v.u), path); break;
        case GgufType::INT8: put_pod<int8_t>(f, int8_t(v.i), path); break;
        case GgufType::UINT16: put_pod<uint16_t>(f, uint16_t(v.u), path); break;
        case GgufType::INT16: put_pod<int16_t>(f, int16_t(v.i), path); break;
        case GgufType::UINT32: put_pod<uint32_t>(f, uint32_t(v.u), path); break;
        case GgufType::INT32: put_pod<int32_t>(f, int32_t(v.i), path); break;
        case GgufType::UINT64: put_pod<uint64_t>(f, v.u, path); break;
        case GgufType::INT64: put_pod<int64_t>(f, v.i, path); break;
        case GgufType::FLOAT32: put_pod<float>(f, float(v.f), path); break;
        case GgufType::FLOAT64: put_pod<double>(f, v.f, path); break;
        case GgufType::BOOL: put_pod<uint8_t>(f, v.u ? 1 : 0, path); break;
        case GgufType::STRING: put_str(f, v.s, path); break;
        case GgufType::ARRAY:
            put_pod<uint32_t>(f, uint32_t(v.elem_type), path);
            put_pod<uint64_t>(f, v.arr.size(), path);
            for (const auto& e : v.arr) {
                TD_ASSERT(e.type == v.elem_type);
                put_value(f, e, path);
            }
            break;
    }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue v) {
    TD_ASSERT(f_ == nullptr);
    if (key == "general.alignment") alignment_ = uint32_t(v.as_int());
    for (auto& kv : kv_)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne) {
    TD_ASSERT(f_ == nullptr);
    TD_ASSERT(!ne.empty() && ne.size() <= 4);
    int64_t rows = 1;
    for (size_t d = 1; d < ne.size(); d++) rows *= ne[d];
    Decl d{name, type, std::move(ne), 0, 0};
    d.nbytes = row_bytes(type, d.ne[0]) * size_t(rows);
    tensors_.push_back(std::move(d));
}

void GgufWriter::begin(const std::string& path) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) throw Error(path + ": cannot create: " + std::strerror(errno));
    put_pod<uint32_t>(f_, 0x46554747, path_);
    put_pod<uint32_t>(f_, 3, path_);
    put_pod<uint64_t>(f_, tensors_.size(), path_);
    put_pod<uint64_t>(f_, kv_.size(), path_);
    for (const auto& kv : kv_) {
        put_str(f_, kv.first, path_);
        put_pod<uint32_t>(f_, uint32_t(kv.second.type), path_);
        put_value(f_, kv.second, path_);
    }
    uint64_t off = 0;
    for (auto& t : tensors_) {
        t.offset = off;
        off += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
        put_str(f_, t.name, path_);
        put_pod<uint32_t>(f_, uint32_t(t.ne.size()), path_);
        for (int64_t n : t.ne) put_pod<uint64_t>(f_, uint64_t(n), path_);
        put_pod<uint32_t>(f_, uint32_t(t.type), path_);
        put_pod<uint64_t>(f_, t.offset, path_);
    }
    long pos = std::ftell(f_);
    static const uint8_t zeros[64] = {};
    size_t pad = (alignment_ - size_t(pos) % alignment_) % alignment_;
    while (pad > 0) {
        size_t k = pad < sizeof(zeros) ? pad : sizeof(zeros);
        put(f_, zeros, k, path_);
        pad -= k;
    }
    next_ = 0;
    in_tensor_ = 0;
}

void GgufWriter::write_tensor_data(const void* data, size_t nbytes) {
    TD_ASSERT(f_ != nullptr && next_ < tensors_.size());
    const Decl& t = tensors_[next_];
    TD_ASSERT(in_tensor_ + nbytes <= t.nbytes);
    put(f_, data, nbytes, path_);
    in_tensor_ += nbytes;
    if (in_tensor_ < t.nbytes) return;
    static const uint8_t zeros[64] = {};
    size_t pad = (alignment_ - t.nbytes % alignment_) % alignment_;
    for (size_t k = 0; k < pad;) {
        size_t m = pad - k < sizeof(zeros) ? pad - k : sizeof(zeros);
        put(f_, zeros, m, path_);
        k += m;
    }
    in_tensor_ = 0;
    next_++;
}

void GgufWriter::finish() {
    TD_ASSERT(f_ != nullptr);
    TD_ASSERT(next_ == tensors_.size());
    int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) throw Error(path_ + ": close failed: " + std::strerror(errno));
}

GgufWriter::~GgufWriter() {
    if (f_) std::fclose(f_);
}

}  // namespace tandem
