// GGUF reader and writer.
//
// File layout (all little-endian; GGUF v2 and v3 share it, v1 used 32-bit counts and is refused):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to here, each aligned)
// string = u64 length + bytes (no terminator). value_type 9 (array) = u32 element type + u64 count + elements;
// arrays may nest.
//
// The reader maps the file read-only; tensor data pointers point into the mapping (no copy). Every read is
// bounds-checked and every count is checked against the bytes that remain, so a hostile file can neither read
// outside the mapping nor make the reader allocate more than the file could describe. Any problem throws
// tandem::Error("<path>: <what> (at offset N)").
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/tensor_type.h"

namespace tandem {

class MappedFile;

enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars keep their declared type; numeric accessors convert.
struct GgufValue {
    GgufType type = GgufType::UINT32;
    uint64_t u = 0;  // unsigned integers and bool
    int64_t i = 0;  // signed integers
    double f = 0;  // floats
    std::string s;  // STRING
    GgufType elem_type = GgufType::UINT8;  // ARRAY
    std::vector<GgufValue> arr;  // ARRAY

    bool is_integer() const;
    bool is_number() const { return is_integer() || type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }
    int64_t as_int() const;  // requires is_number()
    double as_double() const;  // requires is_number()

    static GgufValue of_u32(uint32_t v);
    static GgufValue of_i32(int32_t v);
    static GgufValue of_f32(float v);
    static GgufValue of_bool(bool v);
    static GgufValue of_str(std::string v);
    static GgufValue of_array(GgufType elem, std::vector<GgufValue> v);
};

struct GgufTensor {
    std::string name;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the row length (contiguous dimension)
    TensorType type = TensorType::F32;
    uint64_t offset = 0;  // relative to the data section
    const uint8_t* data = nullptr;  // into the mapping (reader only)
    size_t nbytes = 0;

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
public:
    // Maps and parses the file. Throws tandem::Error on any problem.
    static std::shared_ptr<GgufFile> open(const std::string& path);
    // Parses an in-memory image (used by the fuzz target; `name` appears in error messages).
    static std::shared_ptr<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name);
    ~GgufFile();

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    size_t file_size() const { return size_; }
    // True when the data is this object's own read-only file mapping (open()), false for parse() over caller
    // memory. Only a mapping's pages may be released (MADV_DONTNEED) by users of the tensor data.
    bool owns_mapping() const { return map_ != nullptr; }

    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(const std::string& key) const;
    // Typed getters: throw Error naming the key if present with the wrong type; `def` when absent.
    std::optional<int64_t> get_int(const std::string& key) const;
    std::optional<double> get_float(const std::string& key) const;
    std::optional<bool> get_bool(const std::string& key) const;
    std::optional<std::string> get_str(const std::string& key) const;
    const GgufValue* get_array(const std::string& key, GgufType elem) const;  // null when absent

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* tensor(const std::string& name) const;  // null when absent

private:
    GgufFile() = default;
    void parse_all(const uint8_t* data, size_t size);

    std::string path_;
    std::unique_ptr<MappedFile> map_;
    size_t size_ = 0;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::map<std::string, size_t> kv_index_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

// Streaming writer: declare metadata and tensors, then write each tensor's bytes in declaration order.
// Memory use is independent of model size.
class GgufWriter {
public:
    void set(const std::string& key, GgufValue v);  // replaces an existing key, keeps order
    void add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne);
    // Opens the file and writes the header. Throws tandem::Error on I/O failure.
    void begin(const std::string& path);
    // Writes bytes of the current tensor (declaration order); a tensor may be written in several pieces.
    void write_tensor_data(const void* data, size_t nbytes);
    void finish();  // checks all tensors were written, closes the file
    ~GgufWriter();

    size_t n_tensors() const { return tensors_.size(); }

private:
    struct Decl {
        std::string name;
        TensorType type;
        std::vector<int64_t> ne;
        size_t nbytes;
        uint64_t offset;
    };
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Decl> tensors_;
    std::string path_;
    FILE* f_ = nullptr;
    size_t next_ = 0;
    uint32_t alignment_ = 32;
    size_t in_tensor_ = 0;  // bytes of the current tensor written so far
};

}  // namespace tandem
