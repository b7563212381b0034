// GGUF parsing; the format is described in include/tandem/gguf.h.
#include <algorithm>
#include <cstring>

#include "core/mmap.h"
#include "tandem/error.h"
#include "tandem/gguf.h"

namespace tandem {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxStringLen = 1ull << 30;

// Bounds-checked little-endian cursor over the mapped bytes.
class Cursor {
public:
    Cursor(const uint8_t* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(strprintf("%s: %s (at offset %zu)", path_.c_str(), what.c_str(), off_));
    }
    size_t offset() const { return off_; }
    size_t remaining() const { return n_ - off_; }

    void need(size_t k, const char* what) const {
        if (k > remaining()) fail(strprintf("file truncated: %s needs %zu bytes, %zu remain", what, k, remaining()));
    }
    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + off_, sizeof(T));
        off_ += sizeof(T);
        return v;
    }
    std::string read_string(const char* what) {
        uint64_t len = read<uint64_t>(what);
        if (len > kMaxStringLen) fail(strprintf("%s: absurd string length %llu", what, (unsigned long long)len));
        need(size_t(len), what);
        std::string s(reinterpret_cast<const char*>(p_ + off_), size_t(len));
        off_ += size_t(len);
        return s;
    }

private:
    const uint8_t* p_;
    size_t n_;
    size_t off_ = 0;
    const std::string& path_;
};

size_t min_encoded_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::BOOL: return 1;
        case GgufType::UINT16:
        case GgufType::INT16: return 2;
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::FLOAT32: return 4;
        case GgufType::UINT64:
        case GgufType::INT64:
        case GgufType::FLOAT64:
        case GgufType::STRING: return 8;
        case GgufType::ARRAY: return 12;
    }
    return 1;
}

GgufType read_type(Cursor& c, const std::string& key) {
    uint32_t t = c.read<uint32_t>("value type");
    if (t > uint32_t(GgufType::FLOAT64)) c.fail(strprintf("key '%s': unknown value type %u", key.c_str(), t));
    return GgufType(t);
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& key, int depth) {
    GgufValue v;
    v.type = t;
    switch (t) {
        case GgufType::UINT8: v.u = c.read<uint8_t>("uint8 value"); break;
        case GgufType::INT8: v.i = c.read<int8_t>("int8 value"); break;
        case GgufType::UINT16: v.u = c.read<uint16_t>("uint16 value"); break;
        case GgufType::INT16: v.i = c.read<int16_t>("int16 value"); break;
        case GgufType::UINT32: v.u = c.read<uint32_t>("uint32 value"); break;
        case GgufType::INT32: v.i = c.read<int32_t>("int32 value"); break;
        case GgufType::UINT64: v.u = c.read<uint64_t>("uint64 value"); break;
        case GgufType::INT64: v.i = c.read<int64_t>("int64 value"); break;
        case GgufType::FLOAT32: v.f = c.read<float>("float32 value"); break;
        case GgufType::FLOAT64: v.f = c.read<double>("float64 value"); break;
        case GgufType::BOOL: {
            uint8_t b = c.read<uint8_t>("bool value");
            if (b > 1) c.fail(strprintf("key '%s': bool value %u is neither 0 nor 1", key.c_str(), b));
            v.u = b;
            break;
        }
        case GgufType::STRING: v.s = c.read_string("string value"); break;
        case GgufType::ARRAY: {
            if (depth >= kMaxArrayDepth) c.fail(strprintf("key '%s': arrays nested too deeply", key.c_str()));
            v.elem_type = read_type(c, key);
            uint64_t n = c.read<uint64_t>("array length");
            if (n > c.remaining() / min_encoded_size(v.elem_type))
                c.fail(strprintf("key '%s': array length %llu exceeds what the file can hold", key.c_str(),
                                 (unsigned long long)n));
            v.arr.reserve(size_t(n));
            for (uint64_t k = 0; k < n; k++) v.arr.push_back(read_value(c, v.elem_type, key, depth + 1));
            break;
        }
    }
    return v;
}

}  // namespace

GgufFile::~GgufFile() = default;

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
    std::shared_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    f->map_ = std::make_unique<MappedFile>(path);
    f->parse_all(f->map_->data(), f->map_->size());
    return f;
}

std::shared_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
    std::shared_ptr<GgufFile> f(new GgufFile());
    f->path_ = name;
    f->parse_all(data, size);
    return f;
}

void GgufFile::parse_all(const uint8_t* data, size_t size) {
    size_ = size;
    Cursor c(data, size, path_);
    uint32_t magic = c.read<uint32_t>("magic");
    if (magic != kMagic) c.fail("not a GGUF file (bad magic)");
    version_ = c.read<uint32_t>("version");
    if (version_ == 1) c.fail("GGUF version 1 is not supported (convert the file to v3)");
    if (version_ != 2 && version_ != 3) c.fail(strprintf("unknown GGUF version %u", version_));
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    uint64_t n_kv = c.read<uint64_t>("metadata count");
    if (n_kv > c.remaining() / 13) c.fail(strprintf("absurd metadata count %llu", (unsigned long long)n_kv));
    if (n_tensors > c.remaining() / 24) c.fail(strprintf("absurd tensor count %llu", (unsigned long long)n_tensors));

    kv_.reserve(size_t(n_kv));
    for (uint64_t k = 0; k < n_kv; k++) {
        std::string key = c.read_string("metadata key");
        if (kv_index_.count(key)) c.fail("duplicate metadata key '" + key + "'");
        GgufType t = read_type(c, key);
        GgufValue v = read_value(c, t, key, 0);
        kv_index_[key] = kv_.size();
        kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const GgufValue* a = find("general.alignment")) {
        if (!a->is_integer()) c.fail("general.alignment is not an integer");
        int64_t al = a->as_int();
        if (al <= 0 || al > (1 << 20) || (al & (al - 1)) != 0)
            c.fail(strprintf("general.alignment %lld is not a power of two", (long long)al));
        alignment_ = uint32_t(al);
    }

    tensors_.reserve(size_t(n_tensors));
    for (uint64_t k = 0; k < n_tensors; k++) {
        GgufTensor t;
        t.name = c.read_string("tensor name");
        if (tensor_index_.count(t.name)) c.fail("duplicate tensor '" + t.name + "'");
        uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
        if (n_dims < 1 || n_dims > 4)
            c.fail(strprintf("tensor '%s': %u dimensions (1..4 allowed)", t.name.c_str(), n_dims));
        t.n_dims = int(n_dims);
        int64_t total = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne = c.read<uint64_t>("tensor dimension");
            if (ne == 0 || ne > (1ull << 40))
                c.fail(strprintf("tensor '%s': dimension %u is %llu", t.name.c_str(), d, (unsigned long long)ne));
            t.ne[d] = int64_t(ne);
            if (total > (int64_t(1) << 50) / t.ne[d])
                c.fail(strprintf("tensor '%s': too many elements", t.name.c_str()));
            total *= t.ne[d];
        }
        uint32_t ty = c.read<uint32_t>("tensor type");
        auto tt = tensor_type_from_u32(ty);
        if (!tt) c.fail(strprintf("tensor '%s': unsupported tensor type %u", t.name.c_str(), ty));
        t.type = *tt;
        const auto& tr = type_traits(t.type);
        if (t.ne[0] % tr.block_elems != 0)
            c.fail(strprintf("tensor '%s': row length %lld is not a multiple of the %s block size %d", t.name.c_str(),
                             (long long)t.ne[0], tr.name, tr.block_elems));
        t.nbytes = row_bytes(t.type, t.ne[0]) * size_t(t.n_rows());
        t.offset = c.read<uint64_t>("tensor data offset");
        if (t.offset % alignment_ != 0)
            c.fail(strprintf("tensor '%s': data offset %llu is not aligned to %u", t.name.c_str(),
                             (unsigned long long)t.offset, alignment_));
        tensor_index_[t.name] = tensors_.size();
        tensors_.push_back(std::move(t));
    }

    size_t data_start = (c.offset() + alignment_ - 1) / alignment_ * alignment_;
    if (!tensors_.empty() && data_start > size) c.fail("file truncated before the tensor data section");
    // Weights are read in place (the mapping is page aligned): each tensor must start where its elements can be
    // loaded, e.g. 4 bytes for F32, 2 for F16 and the quantized blocks (their fp16 scales). A small
    // general.alignment can break this; such a file is refused rather than read misaligned.
    for (const auto& t : tensors_) {
        const auto& tr = type_traits(t.type);
        const size_t need = tr.block_elems == 1 ? size_t(tr.block_bytes) : 2;
        if ((data_start + t.offset) % need != 0)
            c.fail(
                strprintf("tensor '%s': its data (file offset %llu) is not aligned to %zu bytes for %s "
                          "(general.alignment = %u); re-save the file with the default alignment of 32",
                          t.name.c_str(), (unsigned long long)(data_start + t.offset), need, tr.name, alignment_));
    }
    // Bounds and overlap checks, in offset order.
    std::vector<const GgufTensor*> order;
    for (auto& t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    uint64_t prev_end = 0;
    const GgufTensor* prev = nullptr;
    for (const GgufTensor* t : order) {
        uint64_t avail = size - data_start;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            throw Error(strprintf("%s: tensor '%s': data range [%llu, %llu) is past the end of the file (size %zu)",
                                  path_.c_str(), t->name.c_str(), (unsigned long long)(data_start + t->offset),
                                  (unsigned long long)(data_start + t->offset + t->nbytes), size));
        if (prev && t->offset < prev_end)
            throw Error(
                strprintf("%s: tensors '%s' and '%s' overlap", path_.c_str(), prev->name.c_str(), t->name.c_str()));
        prev_end = t->offset + t->nbytes;
        prev = t;
    }
    for (auto& t : tensors_) t.data = data + data_start + t.offset;
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_integer())
        throw Error(strprintf("%s: metadata '%s' should be an integer, is %s", path_.c_str(), key.c_str(),
                              gguf_type_name(v->type)));
    return v->as_int();
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number())
        throw Error(strprintf("%s: metadata '%s' should be a number, is %s", path_.c_str(), key.c_str(),
                              gguf_type_name(v->type)));
    return v->as_double();
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::BOOL)
        throw Error(strprintf("%s: metadata '%s' should be a bool, is %s", path_.c_str(), key.c_str(),
                              gguf_type_name(v->type)));
    return v->u != 0;
}

std::optional<std::string> GgufFile::get_str(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::STRING)
        throw Error(strprintf("%s: metadata '%s' should be a string, is %s", path_.c_str(), key.c_str(),
                              gguf_type_name(v->type)));
    return v->s;
}

const GgufValue* GgufFile::get_array(const std::string& key, GgufType elem) const {
    const GgufValue* v = find(key);
    if (!v) return nullptr;
    if (v->type != GgufType::ARRAY || v->elem_type != elem)
        throw Error(
            strprintf("%s: metadata '%s' should be an array of %s", path_.c_str(), key.c_str(), gguf_type_name(elem)));
    return v;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tandem
