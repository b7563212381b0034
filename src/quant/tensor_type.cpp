#include "tandem/tensor_type.h"

#include <algorithm>
#include <cctype>

#include "quant/blocks.h"
#include "tandem/error.h"

namespace tandem {

namespace {
struct Entry {
    TensorType type;
    TypeTraits traits;
};
const Entry kTypes[] = {
    {TensorType::F32, {"F32", 1, 4}},
    {TensorType::F16, {"F16", 1, 2}},
    {TensorType::BF16, {"BF16", 1, 2}},
    {TensorType::Q4_0, {"Q4_0", QK4_0, sizeof(block_q4_0)}},
    {TensorType::Q4_1, {"Q4_1", QK4_1, sizeof(block_q4_1)}},
    {TensorType::Q5_0, {"Q5_0", QK5_0, sizeof(block_q5_0)}},
    {TensorType::Q5_1, {"Q5_1", QK5_1, sizeof(block_q5_1)}},
    {TensorType::Q8_0, {"Q8_0", QK8_0, sizeof(block_q8_0)}},
    {TensorType::Q2_K, {"Q2_K", QK_K, sizeof(block_q2_K)}},
    {TensorType::Q3_K, {"Q3_K", QK_K, sizeof(block_q3_K)}},
    {TensorType::Q4_K, {"Q4_K", QK_K, sizeof(block_q4_K)}},
    {TensorType::Q5_K, {"Q5_K", QK_K, sizeof(block_q5_K)}},
    {TensorType::Q6_K, {"Q6_K", QK_K, sizeof(block_q6_K)}},
    {TensorType::IQ4_NL, {"IQ4_NL", QK4_NL, sizeof(block_iq4_nl)}},
    {TensorType::MXFP4, {"MXFP4", QK_MXFP4, sizeof(block_mxfp4)}},
    {TensorType::I32, {"I32", 1, 4}},
    {TensorType::I64, {"I64", 1, 8}},
};
}  // namespace

std::optional<TensorType> tensor_type_from_u32(uint32_t v) {
    for (const auto& e : kTypes)
        if (uint32_t(e.type) == v) return e.type;
    return std::nullopt;
}

const TypeTraits& type_traits(TensorType t) {
    for (const auto& e : kTypes)
        if (e.type == t) return e.traits;
    TD_ASSERT(false && "type_traits: unknown type");
}

std::optional<TensorType> tensor_type_from_name(const std::string& name) {
    std::string up = name;
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    for (const auto& e : kTypes)
        if (up == e.traits.name) return e.type;
    return std::nullopt;
}

size_t row_bytes(TensorType t, int64_t n) {
    const auto& tr = type_traits(t);
    TD_ASSERT(n % tr.block_elems == 0);
    return size_t(n / tr.block_elems) * size_t(tr.block_bytes);
}

}  // namespace tandem
