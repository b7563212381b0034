// Tensor element types as numbered in GGUF (ggml_type), with their block geometry.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ4_NL = 20,  // 4-bit indices into a fixed non-linear table (a KV cache type here)
    I32 = 26,  // integer tensors: tables of ids, never weights (an EAGLE-3 head's d2t is I64)
    I64 = 27,
    BF16 = 30,
    MXFP4 = 39,  // OCP microscaling FP4 (gpt-oss experts): 32 E2M1 values with one E8M0 scale
};

struct TypeTraits {
    const char* name;
    int block_elems;  // elements per block
    int block_bytes;  // bytes per block
};

// nullopt for a type number tandem does not support.
std::optional<TensorType> tensor_type_from_u32(uint32_t v);
const TypeTraits& type_traits(TensorType t);
inline const char* type_name(TensorType t) { return type_traits(t).name; }
std::optional<TensorType> tensor_type_from_name(const std::string& name);  // "q8_0", "Q4_K", "f16", ...
// I32, I64: integer tables (ids), which no kernel reads as numbers of a weight.
inline bool is_integer_type(TensorType t) { return t == TensorType::I32 || t == TensorType::I64; }

// Bytes of a row of n elements; requires n % block_elems == 0.
size_t row_bytes(TensorType t, int64_t n);

}  // namespace tandem
