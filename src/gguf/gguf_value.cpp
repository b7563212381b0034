#include "tandem/error.h"
#include "tandem/gguf.h"

namespace tandem {

const char* gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::UINT8: return "uint8";
        case GgufType::INT8: return "int8";
        case GgufType::UINT16: return "uint16";
        case GgufType::INT16: return "int16";
        case GgufType::UINT32: return "uint32";
        case GgufType::INT32: return "int32";
        case GgufType::FLOAT32: return "float32";
        case GgufType::BOOL: return "bool";
        case GgufType::STRING: return "string";
        case GgufType::ARRAY: return "array";
        case GgufType::UINT64: return "uint64";
        case GgufType::INT64: return "int64";
        case GgufType::FLOAT64: return "float64";
    }
    return "?";
}

bool GgufValue::is_integer() const {
    switch (type) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::UINT16:
        case GgufType::INT16:
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::UINT64:
        case GgufType::INT64: return true;
        default: return false;
    }
}

static bool is_signed(GgufType t) {
    return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}

int64_t GgufValue::as_int() const {
    TD_ASSERT(is_number());
    if (type == GgufType::FLOAT32 || type == GgufType::FLOAT64) return int64_t(f);
    return is_signed(type) ? i : int64_t(u);
}

double GgufValue::as_double() const {
    TD_ASSERT(is_number());
    if (type == GgufType::FLOAT32 || type == GgufType::FLOAT64) return f;
    return is_signed(type) ? double(i) : double(u);
}

GgufValue GgufValue::of_u32(uint32_t v) {
    GgufValue x;
    x.type = GgufType::UINT32;
    x.u = v;
    return x;
}
GgufValue GgufValue::of_i32(int32_t v) {
    GgufValue x;
    x.type = GgufType::INT32;
    x.i = v;
    return x;
}
GgufValue GgufValue::of_f32(float v) {
    GgufValue x;
    x.type = GgufType::FLOAT32;
    x.f = v;
    return x;
}
GgufValue GgufValue::of_bool(bool v) {
    GgufValue x;
    x.type = GgufType::BOOL;
    x.u = v ? 1 : 0;
    return x;
}
GgufValue GgufValue::of_str(std::string v) {
    GgufValue x;
    x.type = GgufType::STRING;
    x.s = std::move(v);
    return x;
}
GgufValue GgufValue::of_array(GgufType elem, std::vector<GgufValue> v) {
    GgufValue x;
    x.type = GgufType::ARRAY;
    x.elem_type = elem;
    x.arr = std::move(v);
    return x;
}

}  // namespace tandem
